//! `whyslow analyze FILE`: a pcap/pcapng capture → timeline → findings.

use clap::Args;
use std::path::PathBuf;
use whyslow_detect::windowed::Scope;
use whyslow_investigate::{analyze_capture, AnalysisOptions, CaptureSource};
use whyslow_model::Report;
use whyslow_proto::tls::KeyLog;
use whyslow_report::to_json;
use whyslow_wire::{Bounds, FlowOptions, WindowPolicy};

/// Exit code when the capture was cut or corrupt: the partial result is printed.
pub const EXIT_PARTIAL: u8 = 3;
/// Exit code when the file cannot be read as a capture at all.
pub const EXIT_UNREADABLE: u8 = 4;

#[derive(Args, Clone)]
pub struct LimitArgs {
    /// Per-connection segment/ACK events kept (memory bound)
    #[arg(long, default_value_t = Bounds::default().max_events_per_connection)]
    pub max_events: usize,
    /// Segment/ACK events kept over all connections (memory bound)
    #[arg(long, default_value_t = Bounds::default().max_events_total)]
    pub max_events_total: usize,
    /// Connections tracked at once (memory bound)
    #[arg(long, default_value_t = Bounds::default().max_flows)]
    pub max_flows: usize,
    /// Exchanges kept as evidence (--timeline, --html); analyze counts and
    /// analyzes them all (memory bound)
    #[arg(long, default_value_t = Bounds::default().max_exchanges)]
    pub max_exchanges: usize,
    /// Connections kept as evidence, first opened first; analyze counts and
    /// analyzes them all (memory bound)
    #[arg(long, default_value_t = Bounds::default().max_connections)]
    pub max_connections: usize,
    /// analyze: finished exchanges per analysis window, at most (memory
    /// bound; a request and the calls made for it always share a window).
    /// Windows are cut at 5 000 already without a service, or once they
    /// hold the service's requests a stall period needs
    #[arg(long, default_value_t = WindowPolicy::default().exchanges)]
    pub window: usize,
    /// TLS key log (SSLKEYLOGFILE, NSS format) to see inside TLS connections
    /// with: TLS 1.2 and 1.3, AES-GCM and ChaCha20-Poly1305
    #[arg(long, value_name = "FILE")]
    pub keylog: Option<PathBuf>,
}

impl LimitArgs {
    /// The flow table's options, with the key log read now (a capture
    /// file's keys exist already).
    pub fn limits(&self) -> Result<FlowOptions, String> {
        let keylog = match &self.keylog {
            Some(path) => Some(std::sync::Arc::new(read_keylog(path)?)),
            None => None,
        };
        Ok(FlowOptions {
            keylog,
            ..self.bounds()
        })
    }

    /// The bounds and window policy alone: `diagnose` reads the service's
    /// key log after the run, once the service has written the keys of the
    /// connections it made.
    pub fn bounds(&self) -> FlowOptions {
        let defaults = AnalysisOptions::default_flow();
        FlowOptions {
            bounds: Bounds {
                max_events_per_connection: self.max_events,
                max_events_total: self.max_events_total,
                max_flows: self.max_flows,
                max_exchanges: self.max_exchanges,
                max_connections: self.max_connections,
                ..Bounds::default()
            },
            window: WindowPolicy {
                exchanges: self.window.max(1),
                ..defaults.window
            },
            ..defaults
        }
    }
}

/// Reads a key log; lines it cannot use are said once, not fatal.
pub fn read_keylog(path: &std::path::Path) -> Result<KeyLog, String> {
    let (log, bad) = whyslow_investigate::keylog::read_keylog(path)?;
    if bad > 0 {
        eprintln!(
            "whyslow: --keylog {}: {bad} line(s) are not key log lines",
            path.display()
        );
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
    let opts = AnalysisOptions {
        service: (!args.service.is_empty()).then(|| args.service.clone()),
        scope: Scope::Everything,
        flow: limits,
    };
    let analysis = match analyze_capture(CaptureSource::File(&args.file), &opts) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("whyslow: {e}");
            return EXIT_UNREADABLE;
        }
    };
    let partial = analysis.partial.clone();
    let mut report = Report::new("analyze", Some(args.file.display().to_string()));
    analysis.fill(&mut report, args.output.timeline);
    write_html(args.output.html.as_deref(), || {
        whyslow_report::html::report(&report, None)
    });
    if args.output.json {
        if !args.output.timeline {
            report.timeline = None;
        }
        println!("{}", to_json(&report));
    } else {
        print!("{}", whyslow_report::analyze::text(&report));
    }
    if let Some(e) = &partial {
        eprintln!("whyslow: {e}; the result above covers what was read");
        return EXIT_PARTIAL;
    }
    0
}
