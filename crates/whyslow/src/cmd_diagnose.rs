//! `whyslow diagnose URL`: one report of where the time went and why.

use crate::cmd_analyze::{LimitArgs, OutputArgs};
use crate::cmd_probe::{usage, RequestArgs};
use crate::{interrupt_flag, runtime};
use clap::Args;
use std::path::PathBuf;
use whyslow_check::parse_duration;
use whyslow_client::ErrorKind;
use whyslow_investigate::diagnose::{diagnose, DiagnoseOptions, LoadPhase};
use whyslow_report::to_json;

#[derive(Args)]
pub struct DiagnoseArgs {
    /// http:// or https:// URL
    pub url: String,
    /// Requests per client pattern
    #[arg(short = 'n', long = "requests", default_value_t = 5)]
    pub requests: u32,
    #[command(flatten)]
    pub request: RequestArgs,
    /// Also capture this port: a backing service the target calls (repeatable)
    #[arg(short = 'p', long = "port")]
    pub ports: Vec<u16>,
    /// Capture interface (default: lo for loopback targets, any otherwise)
    #[arg(short = 'i', long)]
    pub iface: Option<String>,
    /// Keep the capture in this pcapng file
    #[arg(short = 'w', long = "save")]
    pub save: Option<PathBuf>,
    /// Client-side timing only
    #[arg(long)]
    pub no_capture: bool,
    /// Add a load phase under capture: constant rate, requests/s (open model)
    #[arg(long)]
    pub rate: Option<f64>,
    /// Length of the load phase
    #[arg(long, default_value = "10s", requires = "rate")]
    pub duration: String,
    /// Connections of the load phase
    #[arg(short = 'c', long, default_value_t = 8, requires = "rate")]
    pub connections: usize,
    #[command(flatten)]
    pub limits: LimitArgs,
    #[command(flatten)]
    pub output: OutputArgs,
}

pub fn run(args: DiagnoseArgs) -> u8 {
    let spec = match args.request.spec() {
        Ok(s) => s,
        Err(e) => return usage(&e),
    };
    let opts = DiagnoseOptions {
        url: args.url.clone(),
        spec,
        tls: args.request.tls(),
        requests: args.requests.max(2),
        extra_ports: args.ports.clone(),
        iface: args.iface.clone(),
        capture: !args.no_capture,
        keep_capture: args.save.clone(),
        flow: args.limits.bounds(),
        service_keylog: args.limits.keylog.clone(),
        load: match args.rate {
            Some(rate) if !(rate.is_finite() && rate > 0.0) => {
                return usage("--rate must be above 0")
            }
            Some(rate) => match parse_duration(&args.duration) {
                Ok(duration) => Some(LoadPhase {
                    rate,
                    duration,
                    connections: args.connections,
                }),
                Err(e) => return usage(&format!("--duration: {e}")),
            },
            None => None,
        },
    };
    let d = runtime(1).block_on(async { diagnose(&opts, &interrupt_flag()).await });
    let failed = d
        .patterns
        .iter()
        .find_map(|p| p.error.clone())
        .filter(|e| e.kind == ErrorKind::Interrupted || d.patterns[0].requests.is_empty());
    let mut doc = d.document(&opts.spec);
    crate::cmd_analyze::write_html(args.output.html.as_deref(), || {
        whyslow_report::html::report(&doc.report, doc.load.as_ref())
    });
    if args.output.json {
        if !args.output.timeline {
            doc.report.timeline = None;
        }
        println!("{}", to_json(&doc));
    } else {
        print!("{}", whyslow_report::diagnose::text(&doc));
    }
    match failed {
        Some(e) => {
            eprintln!("whyslow: {e}");
            e.kind.exit_code() as u8
        }
        None => 0,
    }
}
