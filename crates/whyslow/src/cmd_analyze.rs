//! `whyslow analyze FILE`: a pcap/pcapng capture → timeline → findings.

use clap::Args;
use std::path::PathBuf;
use whyslow_detect::pipeline::{Analysis, Service};
use whyslow_detect::whole::{Keep, Whole, WholeAnalysis};
use whyslow_model::{CaptureSummary, Report, Timeline};
use whyslow_proto::tls::KeyLog;
use whyslow_report::{breakdown, findings, sql_summary, timeline, to_json};
use whyslow_wire::{windows_from_file, Limits, Window, WindowSink};

/// Exit code when the capture was cut or corrupt: the partial result is printed.
pub const EXIT_PARTIAL: u8 = 3;
/// Exit code when the file cannot be read as a capture at all.
pub const EXIT_UNREADABLE: u8 = 4;

#[derive(Args, Clone)]
pub struct LimitArgs {
    /// Per-connection segment/ACK events kept (memory bound)
    #[arg(long, default_value_t = Limits::default().max_events_per_connection)]
    pub max_events: usize,
    /// Segment/ACK events kept over all connections (memory bound)
    #[arg(long, default_value_t = Limits::default().max_events_total)]
    pub max_events_total: usize,
    /// Connections tracked at once (memory bound)
    #[arg(long, default_value_t = Limits::default().max_flows)]
    pub max_flows: usize,
    /// Exchanges kept as evidence (--timeline, --html); analyze counts and
    /// analyzes them all (memory bound)
    #[arg(long, default_value_t = Limits::default().max_exchanges)]
    pub max_exchanges: usize,
    /// Connections kept as evidence, first opened first; analyze counts and
    /// analyzes them all (memory bound)
    #[arg(long, default_value_t = Limits::default().max_connections)]
    pub max_connections: usize,
    /// analyze: finished exchanges per analysis window, at most (memory
    /// bound; a request and the calls made for it always share a window).
    /// Windows are cut at 5 000 already without a service, or once they
    /// hold the service's requests a stall period needs
    #[arg(long, default_value_t = Limits::default().window_exchanges)]
    pub window: usize,
    /// TLS key log (SSLKEYLOGFILE, NSS format) to see inside TLS connections
    /// with: TLS 1.2 and 1.3, AES-GCM and ChaCha20-Poly1305
    #[arg(long, value_name = "FILE")]
    pub keylog: Option<PathBuf>,
}

impl LimitArgs {
    /// The bounds, with the key log read now (a capture file's keys exist already).
    pub fn limits(&self) -> Result<Limits, String> {
        let keylog = match &self.keylog {
            Some(path) => Some(std::sync::Arc::new(read_keylog(path)?)),
            None => None,
        };
        Ok(Limits {
            keylog,
            ..self.bounds()
        })
    }

    /// The bounds alone: `diagnose` reads the service's key log after the
    /// run, once the service has written the keys of the connections it made.
    pub fn bounds(&self) -> Limits {
        Limits {
            max_events_per_connection: self.max_events,
            max_events_total: self.max_events_total,
            max_flows: self.max_flows,
            max_exchanges: self.max_exchanges,
            max_connections: self.max_connections,
            window_exchanges: self.window.max(1),
            window_requests: whyslow_detect::periodic_stall::requests_per_window(),
            ..Limits::default()
        }
    }
}

/// Reads a key log; lines it cannot use are said once, not fatal.
pub fn read_keylog(path: &std::path::Path) -> Result<KeyLog, String> {
    let text =
        std::fs::read_to_string(path).map_err(|e| format!("--keylog {}: {e}", path.display()))?;
    let (log, bad) = KeyLog::parse(&text);
    if bad > 0 {
        eprintln!(
            "whyslow: --keylog {}: {bad} line(s) are not key log lines",
            path.display()
        );
    }
    if log.is_empty() {
        return Err(format!("--keylog {}: no TLS secrets in it", path.display()));
    }
    Ok(log)
}

#[derive(Args)]
pub struct AnalyzeArgs {
    /// pcap or pcapng file (tcpdump -w, Wireshark, whyslow capture)
    pub file: PathBuf,
    /// Port(s) of the service under investigation: its exchanges are the
    /// inbound requests, the others its backing calls (default: found from
    /// the wire, as the server whose requests enclose other servers' exchanges)
    #[arg(long, value_name = "PORT", value_delimiter = ',')]
    pub service: Vec<u16>,
    #[command(flatten)]
    pub limits: LimitArgs,
    #[command(flatten)]
    pub output: OutputArgs,
}

/// `--json`, `--timeline` and `--html`, for commands that build a timeline.
#[derive(Args, Clone)]
pub struct OutputArgs {
    /// Print the JSON report instead of text
    #[arg(long)]
    pub json: bool,
    /// Include the whole timeline (every connection, segment and exchange) in --json
    #[arg(long)]
    pub timeline: bool,
    /// Also write a self-contained HTML report here (waterfall, packet ladders, findings)
    #[arg(long, value_name = "FILE")]
    pub html: Option<std::path::PathBuf>,
}

/// Writes `--html`; a failure to write is said, and the run's result stands.
pub fn write_html(path: Option<&std::path::Path>, render: impl FnOnce() -> String) {
    if let Some(path) = path {
        if let Err(e) = std::fs::write(path, render()) {
            eprintln!("whyslow: {}: {e}", path.display());
        }
    }
}

/// Share of `--max-events-total` kept as evidence on finished connections:
/// a quarter, so the evidence stops growing early in a large capture and
/// the rest stays for the flows still open.
const EVIDENCE_EVENTS_SHARE: usize = 4;

/// Hands the capture's windows to the whole-capture analysis.
struct Sink<'a>(&'a mut WholeAnalysis);

impl WindowSink for Sink<'_> {
    fn front(&mut self, first: &Timeline, last_chance: bool) -> Option<Vec<u16>> {
        self.0.front(first, last_chance)
    }
    fn window(&mut self, w: &mut Window) {
        self.0.window(&mut w.timeline, &w.headers);
    }
}

pub fn run(args: AnalyzeArgs) -> u8 {
    let limits = match args.limits.limits() {
        Ok(l) => l,
        Err(e) => return crate::cmd_probe::usage(&e),
    };
    let given = (!args.service.is_empty()).then_some(args.service.as_slice());
    let keep = Keep {
        exchanges: limits.max_exchanges,
        connections: limits.max_connections,
        events: limits.max_events_total / EVIDENCE_EVENTS_SHARE,
    };
    let mut whole = WholeAnalysis::new(given, keep);
    let outcome = match windows_from_file(&args.file, &limits, &mut Sink(&mut whole)) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("whyslow: {}: {e}", args.file.display());
            return EXIT_UNREADABLE;
        }
    };
    let Whole {
        analysis,
        mut summary,
        evidence,
    } = whole.finish();
    summary.packets = outcome.packets;
    summary.exchanges = outcome.exchanges_seen;
    summary.windows = outcome.windows;
    summary.windows_forced = outcome.windows_forced;
    let mut report = Report::new("analyze", Some(args.file.display().to_string()));
    report.findings = analysis.findings.clone();
    report.time_breakdown = analysis.time_breakdown.clone();
    report.sql_summary = analysis.sql_summary.clone();
    let kept = kept_notes(&summary, &evidence);
    if args.output.timeline && summary.kept_exchanges < summary.exchanges {
        report.errors.push(format!(
            "--timeline holds the first {} of {} exchanges (--max-exchanges); \
             counts, percentiles and findings cover them all",
            summary.kept_exchanges, summary.exchanges
        ));
    }
    report.errors.extend(outcome.error.iter().cloned());
    report
        .errors
        .extend(outcome.protocol_errors.iter().cloned());
    report.capture = Some(summary);
    report.timeline = Some(evidence);
    write_html(args.output.html.as_deref(), || {
        whyslow_report::html::report(&report, None)
    });
    let evidence = report.timeline.take().unwrap_or_default();
    if args.output.json {
        if args.output.timeline {
            report.timeline = Some(evidence);
        }
        println!("{}", to_json(&report));
    } else {
        println!(
            "{}: {} packets ({} not TCP, {} cut short by the snapshot length)",
            args.file.display(),
            outcome.packets,
            outcome.non_tcp,
            outcome.truncated_packets
        );
        for note in &kept {
            println!("{note}");
        }
        println!("{}", service_line(&analysis));
        if let Some(s) = &report.capture {
            print!("{}", timeline::capture_summary(s, &evidence));
        }
        print!("{}", breakdown::text(&report.time_breakdown));
        print!("{}", sql_summary::text(&report.sql_summary));
        println!("\nfindings, most time lost first:");
        print!("{}", findings::text(&report.findings));
        for e in &outcome.protocol_errors {
            println!("note: {e}");
        }
    }
    if let Some(e) = &outcome.error {
        eprintln!("whyslow: {e}; the result above covers what was read");
        return EXIT_PARTIAL;
    }
    0
}

/// Which service the inbound requests are, and how that was decided.
fn service_line(a: &Analysis) -> String {
    let ports = |p: &[u16]| {
        p.iter()
            .map(|p| format!(":{p}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let backing = match a.backing.as_slice() {
        [] => "no backing calls seen".to_string(),
        b => format!("backing services {}", ports(b)),
    };
    match &a.service {
        Service::Given(p) => format!("service {} (--service); {backing}", ports(p)),
        Service::Found(p) => format!(
            "service :{p} (found: its requests enclose the calls to its backing services); {backing}"
        ),
        Service::None => "no service found (no server's requests enclose another's); \
                          every exchange is listed as a request (--service PORT to say which)"
            .to_string(),
    }
}

/// What was analyzed, and what was kept as evidence when not everything was.
fn kept_notes(s: &CaptureSummary, evidence: &Timeline) -> Vec<String> {
    let mut notes = vec![format!(
        "analyzed every exchange ({}) and connection ({}), in {} window(s)",
        s.exchanges, s.connections, s.windows
    )];
    if s.windows_forced > 0 {
        notes.push(format!(
            "{} window(s) were cut while a request of the service stayed open for long: \
             calls near those cuts may be counted as made for no request",
            s.windows_forced
        ));
    }
    if s.kept_exchanges < s.exchanges || s.kept_connections < s.connections {
        notes.push(format!(
            "kept the first {} exchanges and {} connections as evidence for --timeline/--html \
             (--max-exchanges, --max-connections)",
            s.kept_exchanges, s.kept_connections
        ));
    }
    let cut = evidence
        .connections
        .iter()
        .filter(|c| c.events_truncated)
        .count();
    if cut > 0 {
        notes.push(format!(
            "per-segment events of {cut} connection(s) were cut at --max-events/--max-events-total; \
             TCP findings on them cover the events kept"
        ));
    }
    notes
}
