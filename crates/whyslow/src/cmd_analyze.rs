//! `whyslow analyze FILE`: a pcap/pcapng capture → timeline → findings.

use clap::Args;
use std::path::PathBuf;
use whyslow_detect::pipeline::{self, Analysis, Service};
use whyslow_model::Report;
use whyslow_proto::tls::KeyLog;
use whyslow_report::{breakdown, findings, sql_summary, timeline, to_json};
use whyslow_wire::{timeline_from_file, AnalyzeOutcome, Limits};

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
    /// Exchanges kept in the timeline; later ones are only counted (memory bound)
    #[arg(long, default_value_t = Limits::default().max_exchanges)]
    pub max_exchanges: usize,
    /// Connections kept in the timeline, first opened first; later ones are only counted (memory bound)
    #[arg(long, default_value_t = Limits::default().max_connections)]
    pub max_connections: usize,
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

pub fn run(args: AnalyzeArgs) -> u8 {
    let limits = match args.limits.limits() {
        Ok(l) => l,
        Err(e) => return crate::cmd_probe::usage(&e),
    };
    let outcome = match timeline_from_file(&args.file, &limits) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("whyslow: {}: {e}", args.file.display());
            return EXIT_UNREADABLE;
        }
    };
    let mut outcome = outcome;
    let given = (!args.service.is_empty()).then_some(args.service.as_slice());
    let analysis = pipeline::analyze(&mut outcome.timeline, given);
    let mut report = Report::new("analyze", Some(args.file.display().to_string()));
    report.findings = analysis.findings.clone();
    report.time_breakdown = analysis.time_breakdown.clone();
    report.sql_summary = analysis.sql_summary.clone();
    let dropped = dropped_notes(&outcome);
    report.errors.extend(dropped.iter().cloned());
    report.errors.extend(outcome.error.iter().cloned());
    report
        .errors
        .extend(outcome.protocol_errors.iter().cloned());
    if args.output.html.is_some() {
        report.timeline = Some(std::mem::take(&mut outcome.timeline));
        write_html(args.output.html.as_deref(), || {
            whyslow_report::html::report(&report, None)
        });
        outcome.timeline = report.timeline.take().unwrap_or_default();
    }
    if args.output.json {
        if args.output.timeline {
            report.timeline = Some(outcome.timeline);
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
        for note in &dropped {
            println!("{note}");
        }
        println!("{}", service_line(&analysis));
        print!("{}", timeline::summary(&outcome.timeline));
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

/// One line per limit that left part of the capture out of the timeline.
fn dropped_notes(o: &AnalyzeOutcome) -> Vec<String> {
    let mut notes = Vec::new();
    if o.connections_dropped > 0 {
        notes.push(format!(
            "kept the first {} connections of {} (--max-connections); findings cover those",
            o.connections_seen - o.connections_dropped,
            o.connections_seen
        ));
    }
    if o.exchanges_dropped > 0 {
        notes.push(format!(
            "kept the first {} exchanges of {} (--max-exchanges); findings cover those",
            o.exchanges_seen - o.exchanges_dropped,
            o.exchanges_seen
        ));
    }
    let cut = o
        .timeline
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
