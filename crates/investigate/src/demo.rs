//! The demo: every lab scenario, broken and fixed, diagnosed, with the
//! before/after table the case studies would have wanted.

use crate::diagnose::{diagnose, DiagnoseOptions, LoadPhase};
use bytes::Bytes;
use std::time::Duration;
use tokio::sync::watch;
use whyslow_client::{RequestSpec, TlsOptions};
use whyslow_compare::run::Run;
use whyslow_lab::{Scenario, SCENARIOS};
use whyslow_model::{DemoDocument, DemoRow, Metric, AS_GIVEN, SCHEMA_VERSION, SPLIT_NO_NODELAY};

/// Requests per client pattern in each diagnosis: enough for a median, quick enough for a demo.
const DEMO_REQUESTS: u32 = 6;
/// Connections of a scenario's load phase: enough to keep a 20/s open-model
/// schedule through a 300 ms stall (6 requests in flight) with room to spare.
const DEMO_LOAD_CONNECTIONS: usize = 16;

/// Mean total of every request of a section (what the case studies quote).
fn mean_total(report: &whyslow_model::Report, label: &str) -> Option<u64> {
    let rs = report.section(label)?;
    let n = rs.len() as u64;
    (n > 0).then(|| rs.iter().map(|r| r.total_us).sum::<u64>() / n)
}

async fn run_one(
    s: &Scenario,
    fixed: bool,
    stop: &watch::Receiver<bool>,
    html: bool,
) -> Result<(DemoRow, Run), String> {
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
        flow: crate::AnalysisOptions::default_flow(),
        evidence: html,
        service_keylog: running.keylog.clone(),
        load: s.load.map(|l| LoadPhase {
            rate: l.rate as f64,
            duration: Duration::from_millis(l.duration_ms),
            connections: DEMO_LOAD_CONNECTIONS,
        }),
    };
    let d = diagnose(&opts, stop).await;
    let report = d.report;
    let client = match mean_total(&report, SPLIT_NO_NODELAY) {
        Some(_) => SPLIT_NO_NODELAY,
        None => AS_GIVEN,
    };
    let name = format!("{} ({})", s.name, variant(s, fixed));
    let run = Run::from_report(&name, report.clone(), Some(client), d.load.clone());
    let row = DemoRow {
        scenario: s.name.into(),
        fixed,
        variant: variant(s, fixed).into(),
        request: format!("{} {}", s.method, s.path),
        client: client.into(),
        mean_total_us: mean_total(&report, client).unwrap_or(0),
        load_latency: d
            .load
            .as_ref()
            .and_then(|l| l.percentiles(Metric::Corrected))
            .copied(),
        findings: report.findings.clone(),
        skipped: report
            .skipped
            .iter()
            .map(|k| format!("{}: {}", k.what, k.why))
            .collect(),
        injected: if fixed {
            None
        } else {
            s.truth.kind.map(|k| k.to_string())
        },
        report: html.then_some(report),
    };
    Ok((row, run))
}

/// Diagnoses each scenario broken and then fixed (healthy ones as they
/// are, twice), saying each step to `progress`; stops between runs when
/// `stop` turns true. `reports`: keep each run's whole report (`--html`).
pub async fn run(
    scenarios: &[&Scenario],
    reports: bool,
    stop: &watch::Receiver<bool>,
    mut progress: impl FnMut(String),
) -> DemoDocument {
    let total = scenarios.len() * 2;
    let mut runs = Vec::new();
    for (i, (s, fixed)) in scenarios
        .iter()
        .flat_map(|s| [(s, false), (s, true)])
        .enumerate()
    {
        progress(format!(
            "[{}/{total}] {} ({}) …",
            i + 1,
            s.name,
            variant(s, fixed)
        ));
        if *stop.borrow() {
            progress("interrupted; the table covers what ran".into());
            break;
        }
        match run_one(s, fixed, stop, reports).await {
            Ok(r) => runs.push(r),
            Err(e) => progress(e),
        }
    }
    document(runs)
}

/// The scenarios `only` names, or all of them.
pub fn scenarios(only: &[String]) -> Vec<&'static Scenario> {
    SCENARIOS
        .iter()
        .filter(|s| only.is_empty() || only.iter().any(|o| o == s.name))
        .collect()
}

/// The rows, and broken against fixed (by `compare`) for each scenario run both ways.
fn document(runs: Vec<(DemoRow, Run)>) -> DemoDocument {
    let comparisons = runs
        .chunks(2)
        .filter_map(|pair| match pair {
            [(a, ra), (b, rb)] if a.scenario == b.scenario => {
                whyslow_compare::compare(ra, rb, &[]).ok()
            }
            _ => None,
        })
        .collect();
    DemoDocument {
        schema_version: SCHEMA_VERSION,
        command: "demo".into(),
        rows: runs.into_iter().map(|(row, _)| row).collect(),
        comparisons,
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
