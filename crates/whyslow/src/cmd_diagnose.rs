//! `whyslow diagnose URL`: one report of where the time went and why.

use crate::capture_session::CaptureSummary;
use crate::cmd_analyze::{LimitArgs, OutputArgs};
use crate::cmd_probe::{usage, RequestArgs};
use crate::diagnose::{
    diagnose, typical, DiagnoseOptions, Diagnosis, LoadPhase, AS_GIVEN, SPLIT_NO_NODELAY,
};
use crate::limits::parse_duration;
use crate::{interrupt_flag, runtime};
use clap::Args;
use serde::Serialize;
use std::path::PathBuf;
use whyslow_client::{redact_url, ErrorKind, RequestSpec, WritePattern};
use whyslow_load::LoadResult;
use whyslow_model::Report;
use whyslow_report::{breakdown, findings, fmt_ms, sql_summary, timeline, to_json};

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

/// `--json`: the report, with the load phase's result when there was one.
#[derive(Serialize)]
struct DiagnoseJson<'a> {
    #[serde(flatten)]
    report: &'a Report,
    #[serde(skip_serializing_if = "Option::is_none")]
    load: Option<&'a LoadResult>,
    host: &'a whyslow_model::HostReport,
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
        limits: args.limits.limits(),
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
    let mut d = runtime(1).block_on(async { diagnose(&opts, &interrupt_flag()).await });
    let failed = d
        .patterns
        .iter()
        .find_map(|p| p.run.error.clone())
        .filter(|e| e.kind == ErrorKind::Interrupted || d.patterns[0].run.requests.is_empty());
    crate::cmd_analyze::write_html(args.output.html.as_deref(), || {
        whyslow_report::html::report(&d.report, d.load.as_ref())
    });
    if args.output.json {
        if !args.output.timeline {
            d.report.timeline = None;
        }
        println!(
            "{}",
            to_json(&DiagnoseJson {
                report: &d.report,
                load: d.load.as_ref(),
                host: &d.host,
            })
        );
    } else {
        print_text(&d, &opts);
    }
    match failed {
        Some(e) => {
            eprintln!("whyslow: {e}");
            e.kind.exit_code() as u8
        }
        None => 0,
    }
}

fn print_text(d: &Diagnosis, opts: &DiagnoseOptions) {
    println!("diagnose {} {}", opts.spec.method, redact_url(&opts.url));
    print_typical(d, opts);
    print_patterns(d, &opts.spec);
    if let Some(l) = &d.load {
        println!("\nload phase:");
        print!("{}", whyslow_load::text::summary(l));
    }
    if let Some(c) = &d.capture {
        print_capture(c);
        if let Some(t) = &d.report.timeline {
            print!("{}", timeline::summary(t));
        }
        print!("{}", breakdown::text(&d.report.time_breakdown));
        print!("{}", sql_summary::text(&d.report.sql_summary));
        println!("\nfindings, most time lost first:");
        print!("{}", findings::text(&d.report.findings));
    }
    for s in &d.report.skipped {
        println!("not examined: {}: {}", s.what, s.why);
    }
    for e in &d.report.errors {
        println!("error: {e}");
    }
}

/// The phases of the median reused request, and what a new connection adds.
fn print_typical(d: &Diagnosis, opts: &DiagnoseOptions) {
    let Some(first_pattern) = d.patterns.first() else {
        return;
    };
    let Some(r) = typical(&first_pattern.run) else {
        return;
    };
    println!(
        "\nwhere the time of a typical request went (median of {} on a reused connection):",
        opts.requests
    );
    println!(
        "  send {} | wait (server) {} | receive {} | total {}",
        fmt_ms(r.send_us),
        fmt_ms(r.wait_us),
        fmt_ms(r.receive_us),
        fmt_ms(r.total_us)
    );
    if let Some(first) = first_pattern.run.requests.iter().find(|r| !r.reused) {
        let tls = first
            .tls
            .as_ref()
            .map(|_| format!(" + tls {}", fmt_ms(first.tls_us)))
            .unwrap_or_default();
        println!(
            "  a new connection adds dns {} + connect {}{tls} (first request: {})",
            fmt_ms(first.dns_us),
            fmt_ms(first.connect_us),
            fmt_ms(first.total_us)
        );
    }
}

fn print_capture(c: &CaptureSummary) {
    let list = |ports: &[u16]| {
        ports
            .iter()
            .map(|p| p.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let filter = if c.ports.is_empty() {
        "all TCP".to_string()
    } else {
        format!("ports {}", list(&c.ports))
    };
    let saved = c
        .file
        .as_ref()
        .map(|f| format!(", saved to {}", f.display()))
        .unwrap_or_default();
    println!(
        "\ncapture: {} packets on {} ({filter}), {} dropped by the kernel{saved}",
        c.packets, c.iface, c.kernel_drops
    );
    if !c.backing_ports.is_empty() {
        println!(
            "  backing services of the target on this host: ports {}",
            list(&c.backing_ports)
        );
    }
}

fn print_patterns(d: &Diagnosis, spec: &RequestSpec) {
    let (Some(base), Some(split)) = (
        d.median_reused_total(AS_GIVEN),
        d.median_reused_total(SPLIT_NO_NODELAY),
    ) else {
        return;
    };
    println!("\nclient write patterns (median total on a reused connection):");
    let given = format!(
        "as given ({}, TCP_NODELAY {})",
        if spec.write == WritePattern::Split {
            "headers then body"
        } else {
            "one write"
        },
        if spec.nodelay { "on" } else { "off" }
    );
    println!("  {given:<42} {}", fmt_ms(base));
    println!(
        "  {:<42} {}",
        "headers then body, TCP_NODELAY off (Ruby)",
        fmt_ms(split)
    );
    if split > base {
        println!(
            "  → clients that split headers and body lose {} per request here",
            fmt_ms(split - base)
        );
    }
}
