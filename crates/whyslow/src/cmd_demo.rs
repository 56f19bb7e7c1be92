//! `whyslow demo`: every lab scenario, broken and fixed, diagnosed, with the
//! before/after table the case studies would have wanted.

use crate::diagnose::{
    diagnose, DiagnoseOptions, Diagnosis, LoadPhase, AS_GIVEN, SPLIT_NO_NODELAY,
};
use crate::{interrupt_flag, runtime};
use bytes::Bytes;
use clap::Args;
use serde::Serialize;
use std::time::Duration;
use tokio::sync::watch;
use whyslow_client::{RequestSpec, TlsOptions};
use whyslow_lab::{Scenario, SCENARIOS};
use whyslow_load::{Metric, Percentiles};
use whyslow_model::{Finding, SCHEMA_VERSION};
use whyslow_report::{fmt_ms, to_json};

/// Requests per client pattern in each diagnosis: enough for a median, quick enough for a demo.
const DEMO_REQUESTS: u32 = 6;
/// Connections of a scenario's load phase: enough to keep a 20/s open-model
/// schedule through a 300 ms stall (6 requests in flight) with room to spare.
const DEMO_LOAD_CONNECTIONS: usize = 16;

#[derive(Args)]
pub struct DemoArgs {
    /// Print the results as JSON
    #[arg(long)]
    pub json: bool,
    /// Only these scenarios (repeatable)
    #[arg(long = "only")]
    pub only: Vec<String>,
    /// Also write every diagnosis (findings, waterfalls, ladders) to one HTML file
    #[arg(long, value_name = "FILE")]
    pub html: Option<std::path::PathBuf>,
}

/// `demo --json`: the rows, under the report schema's version.
#[derive(Serialize)]
pub struct DemoReport<'a> {
    pub schema_version: u32,
    pub command: &'static str,
    pub rows: &'a [DemoRow],
}

#[derive(Serialize)]
pub struct DemoRow {
    pub scenario: &'static str,
    pub fixed: bool,
    pub request: String,
    /// The client pattern the scenario hurts, and its mean total per request.
    pub client: &'static str,
    pub mean_total_us: u64,
    /// The load phase's latency (as users saw it, coordinated omission
    /// corrected), when the scenario has one: the tail the mean hides.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub load_latency: Option<Percentiles>,
    pub findings: Vec<Finding>,
    pub skipped: Vec<String>,
    pub injected: Option<String>,
    /// The diagnosis as an HTML section, for `--html`.
    #[serde(skip)]
    pub html: Option<String>,
}

async fn run_one(
    s: &Scenario,
    fixed: bool,
    stop: &watch::Receiver<bool>,
    html: bool,
) -> Result<DemoRow, String> {
    let running = s
        .start(fixed)
        .await
        .map_err(|e| format!("{}: cannot start: {e}", s.name))?;
    let spec = RequestSpec {
        method: s.method.into(),
        body: Bytes::from_static(s.body.as_bytes()),
        ..RequestSpec::default()
    };
    let opts = DiagnoseOptions {
        url: running.url.clone(),
        spec,
        tls: TlsOptions::default(),
        requests: DEMO_REQUESTS,
        extra_ports: running.ports.clone(),
        iface: None,
        capture: true,
        keep_capture: None,
        limits: Default::default(),
        load: s.load.map(|l| LoadPhase {
            rate: l.rate as f64,
            duration: Duration::from_millis(l.duration_ms),
            connections: DEMO_LOAD_CONNECTIONS,
        }),
    };
    let d: Diagnosis = diagnose(&opts, stop).await;
    let html = html.then(|| whyslow_report::html::report_body(&d.report));
    let client = if d.mean_total(SPLIT_NO_NODELAY).is_some() {
        SPLIT_NO_NODELAY
    } else {
        AS_GIVEN
    };
    Ok(DemoRow {
        scenario: s.name,
        fixed,
        request: format!("{} {}", s.method, s.path),
        client,
        mean_total_us: d.mean_total(client).unwrap_or(0),
        load_latency: d
            .load
            .as_ref()
            .and_then(|l| l.percentiles(Metric::Corrected))
            .copied(),
        findings: d.report.findings,
        skipped: d
            .report
            .skipped
            .iter()
            .map(|k| format!("{}: {}", k.what, k.why))
            .collect(),
        injected: if fixed {
            None
        } else {
            s.truth.kind.map(|k| k.to_string())
        },
        html,
    })
}

pub fn run(args: DemoArgs) -> u8 {
    let scenarios: Vec<&Scenario> = SCENARIOS
        .iter()
        .filter(|s| args.only.is_empty() || args.only.iter().any(|o| o == s.name))
        .collect();
    let total = scenarios.len() * 2;
    let rows: Vec<DemoRow> = runtime(2).block_on(async {
        let stop = interrupt_flag();
        let mut rows = Vec::new();
        for (i, (s, fixed)) in scenarios
            .iter()
            .flat_map(|s| [(s, false), (s, true)])
            .enumerate()
        {
            eprintln!("[{}/{total}] {} ({}) …", i + 1, s.name, variant(s, fixed));
            if *stop.borrow() {
                eprintln!("whyslow: interrupted; the table covers what ran");
                break;
            }
            match run_one(s, fixed, &stop, args.html.is_some()).await {
                Ok(row) => rows.push(row),
                Err(e) => eprintln!("whyslow: {e}"),
            }
        }
        rows
    });
    crate::cmd_analyze::write_html(args.html.as_deref(), || {
        let sections: Vec<(String, String)> = rows
            .iter()
            .map(|r| {
                let title = format!(
                    "{} ({}): {}",
                    r.scenario,
                    if r.fixed { "fixed" } else { "broken" },
                    r.request
                );
                (title, r.html.clone().unwrap_or_default())
            })
            .collect();
        whyslow_report::html::demo(&sections)
    });
    if args.json {
        let report = DemoReport {
            schema_version: SCHEMA_VERSION,
            command: "demo",
            rows: &rows,
        };
        println!("{}", to_json(&report));
    } else {
        print_table(&rows);
    }
    u8::from(rows.len() != total)
}

/// The finding ranked first, background ones aside: what the row names as the cause.
fn top(row: &DemoRow) -> Option<&Finding> {
    row.findings.iter().find(|f| !f.background)
}

fn cause(row: &DemoRow) -> String {
    match top(row) {
        Some(f) => format!(
            "{} ({} per occurrence)",
            f.kind,
            fmt_ms(f.time_lost_per_occurrence_us)
        ),
        None => "no findings".into(),
    }
}

/// Scenarios with nothing injected run "as is" twice, not broken and fixed.
fn variant(s: &Scenario, fixed: bool) -> &'static str {
    match (s.truth.kind, fixed) {
        (None, _) => "as is",
        (Some(_), true) => "fixed",
        (Some(_), false) => "broken",
    }
}

fn print_table(rows: &[DemoRow]) {
    println!(
        "{:<11} {:<7} {:<15} {:<30} {:>10}  finding",
        "scenario", "variant", "request", "client", "avg total"
    );
    for r in rows {
        println!(
            "{:<11} {:<7} {:<15} {:<30} {:>10}  {}",
            r.scenario,
            whyslow_lab::find(r.scenario).map_or("", |s| variant(s, r.fixed)),
            r.request,
            r.client,
            fmt_ms(r.mean_total_us),
            cause(r)
        );
    }
    println!();
    for pair in rows.chunks(2) {
        let [broken, fixed] = pair else { continue };
        let why = top(broken)
            .map(|f| f.kind.to_string())
            .unwrap_or_else(|| "nothing to fix".into());
        let tail = match (&broken.load_latency, &fixed.load_latency) {
            (Some(b), Some(f)) => format!(
                "; under load p50 {} → {}, p99 {} → {}",
                fmt_ms(b.p50),
                fmt_ms(f.p50),
                fmt_ms(b.p99),
                fmt_ms(f.p99)
            ),
            _ => String::new(),
        };
        println!(
            "{}: {} avg {} → {}{tail}; cause: {}",
            broken.scenario,
            broken.request,
            fmt_ms(broken.mean_total_us),
            fmt_ms(fixed.mean_total_us),
            why
        );
    }
    if let Some(s) = rows.iter().flat_map(|r| &r.skipped).next() {
        println!("not examined: {s}");
    }
}
