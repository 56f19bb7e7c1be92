//! The demo: every lab scenario, broken and fixed, diagnosed, with the
//! before/after table the case studies would have wanted.

use crate::diagnose::{diagnose, DiagnoseOptions, LoadPhase};
use bytes::Bytes;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::sync::watch;
use whyslow_client::{RequestSpec, TlsOptions};
use whyslow_compare::run::Run;
use whyslow_lab::hosts::{HostsScenario, HOSTS_SCENARIOS};
use whyslow_lab::{Scenario, SCENARIOS};
use whyslow_model::{
    AttributionCounts, ConcurrentRow, DemoDocument, DemoRow, HostsRow, Metric, Report, AS_GIVEN,
    SCHEMA_VERSION, SPLIT_NO_NODELAY,
};

/// Requests per client pattern in each diagnosis: enough for a median, quick enough for a demo.
const DEMO_REQUESTS: u32 = 6;
/// Connections of a scenario's load phase: enough to keep a 20/s open-model
/// schedule through a 300 ms stall (6 requests in flight) with room to spare.
const DEMO_LOAD_CONNECTIONS: usize = 16;

/// Clients at once in each scenario's concurrent run: the lab's, for
/// which each scenario declares what concurrency itself causes.
pub const DEMO_CONCURRENT_CLIENTS: usize = whyslow_lab::scenario::CONCURRENT_CLIENTS as usize;
/// How long the concurrent run's clients send, and at most how many
/// requests: a few hundred per scenario, a capture of a few MB.
const DEMO_CONCURRENT_DURATION: Duration = Duration::from_secs(1);
const DEMO_CONCURRENT_REQUESTS: u64 = 200;
/// A scenario whose cause needs many requests (a stall once a second) is
/// run over its own load phase's length at this many times its rate: its
/// clients back up behind each stall, as many at once as there are.
const DEMO_CONCURRENT_RATE_FACTOR: f64 = 10.0;

/// Mean total of every request of a section (what the case studies quote).
fn mean_total(report: &whyslow_model::Report, label: &str) -> Option<u64> {
    let rs = report.section(label)?;
    let n = rs.len() as u64;
    (n > 0).then(|| rs.iter().map(|r| r.total_us).sum::<u64>() / n)
}

/// The diagnosis of scenario `s`'s running variant at `running`: its
/// probes, and `load` (the scenario's own, or a concurrent run).
fn options(
    s: &Scenario,
    running: &whyslow_lab::Running,
    html: bool,
    load: Option<LoadPhase>,
    keep_capture: Option<PathBuf>,
) -> DiagnoseOptions {
    let spec = RequestSpec {
        method: s.method.into(),
        body: Bytes::from_static(s.body.as_bytes()),
        ..RequestSpec::default()
    };
    DiagnoseOptions {
        url: running.url.clone(),
        spec,
        tls: TlsOptions::default(),
        requests: DEMO_REQUESTS,
        extra_ports: running.ports.clone(),
        iface: None,
        capture: true,
        ebpf: false,
        target: None,
        keep_capture,
        flow: crate::AnalysisOptions::default_flow(),
        evidence: html,
        service_keylog: running.keylog.clone(),
        load,
    }
}

async fn run_one(
    s: &Scenario,
    fixed: bool,
    stop: &watch::Receiver<bool>,
    html: bool,
    save: Option<PathBuf>,
) -> Result<(DemoRow, Run), String> {
    let running = s
        .start(fixed)
        .await
        .map_err(|e| format!("{}: cannot start: {e}", s.name))?;
    let load = s.load.map(|l| LoadPhase {
        rate: Some(l.rate as f64),
        duration: Duration::from_millis(l.duration_ms),
        connections: DEMO_LOAD_CONNECTIONS,
        max_requests: None,
    });
    let opts = options(s, &running, html, load, save.clone());
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
        capture_file: kept(save),
    };
    Ok((row, run))
}

/// Scenario `s` (fixed or not) diagnosed under DEMO_CONCURRENT_CLIENTS
/// clients at once.
async fn run_concurrent(
    s: &Scenario,
    fixed: bool,
    stop: &watch::Receiver<bool>,
    save: Option<PathBuf>,
) -> Result<ConcurrentRow, String> {
    let running = s
        .start(fixed)
        .await
        .map_err(|e| format!("{}: cannot start: {e}", s.name))?;
    let load = match s.load {
        Some(l) => LoadPhase {
            rate: Some(l.rate as f64 * DEMO_CONCURRENT_RATE_FACTOR),
            duration: Duration::from_millis(l.duration_ms),
            connections: DEMO_CONCURRENT_CLIENTS,
            max_requests: None,
        },
        None => LoadPhase {
            rate: None,
            duration: DEMO_CONCURRENT_DURATION,
            connections: DEMO_CONCURRENT_CLIENTS,
            max_requests: Some(DEMO_CONCURRENT_REQUESTS),
        },
    };
    let rate = load.rate;
    let opts = options(s, &running, false, Some(load), save.clone());
    let d = diagnose(&opts, stop).await;
    let declared = match (fixed, s.truth.kind) {
        (false, Some(k)) => vec![k.to_string()],
        _ => s.fixed_under_load.iter().map(|k| k.to_string()).collect(),
    };
    Ok(ConcurrentRow {
        scenario: s.name.into(),
        variant: variant(s, fixed).into(),
        clients: DEMO_CONCURRENT_CLIENTS as u32,
        rate,
        latency: d
            .load
            .as_ref()
            .and_then(|l| l.percentiles(Metric::Uncorrected))
            .copied(),
        findings: d.report.findings.clone(),
        declared,
        attribution: attribution(&d.report),
        capture_file: kept(save),
    })
}

/// Where `demo --save DIR` keeps one diagnosis's capture:
/// `SCENARIO-VARIANT[-N][-under-load].pcapng` (a scenario run "as is" twice
/// numbers its runs).
fn capture_path(dir: &Path, s: &Scenario, fixed: bool, under_load: bool) -> PathBuf {
    let mut name = format!("{}-{}", s.name, variant(s, fixed).replace(' ', "-"));
    if s.truth.kind.is_none() {
        name.push_str(if fixed { "-2" } else { "-1" });
    }
    if under_load {
        name.push_str("-under-load");
    }
    dir.join(format!("{name}.pcapng"))
}

/// The capture's path as the row reports it, when it was written.
fn kept(path: Option<PathBuf>) -> Option<String> {
    path.filter(|p| p.exists()).map(|p| p.display().to_string())
}

/// The calls of every request kind of `report`, by attribution level.
fn attribution(report: &Report) -> AttributionCounts {
    let mut all = AttributionCounts::default();
    let groups = report.capture.iter().flat_map(|c| &c.groups);
    for a in groups.filter_map(|g| g.attribution) {
        all.trace_context += a.trace_context;
        all.trace_group += a.trace_group;
        all.inferred += a.inferred;
        all.ambiguous += a.ambiguous;
    }
    all
}

/// Diagnoses each scenario broken and then fixed (healthy ones as they
/// are, twice), one request at a time and then under many clients at once,
/// then runs each of `hosts` on its hosts, saying each step to `progress`; stops between runs when `stop` turns
/// true. `reports`: keep each run's whole report (`--html`); `save`: keep
/// each run's capture in this directory.
pub async fn run(
    scenarios: &[&Scenario],
    hosts: &[&HostsScenario],
    reports: bool,
    save: Option<&Path>,
    stop: &watch::Receiver<bool>,
    mut progress: impl FnMut(String),
) -> DemoDocument {
    let each: Vec<(&Scenario, bool)> = scenarios
        .iter()
        .flat_map(|s| [(*s, false), (*s, true)])
        .collect();
    let total = each.len() * 2;
    let mut runs = Vec::new();
    let mut under_load = Vec::new();
    let steps = each.iter().map(|&(s, fixed)| (s, fixed, None));
    let concurrent = each
        .iter()
        .map(|&(s, fixed)| (s, fixed, Some(DEMO_CONCURRENT_CLIENTS)));
    for (i, (s, fixed, clients)) in steps.chain(concurrent).enumerate() {
        let at_once = clients
            .map(|c| format!(", {c} clients"))
            .unwrap_or_default();
        let name = format!("{} ({}{at_once})", s.name, variant(s, fixed));
        progress(format!("[{}/{total}] {name} …", i + 1));
        if *stop.borrow() {
            progress("interrupted; the tables cover what ran".into());
            break;
        }
        let keep = save.map(|dir| capture_path(dir, s, fixed, clients.is_some()));
        let done = match clients {
            None => run_one(s, fixed, stop, reports, keep)
                .await
                .map(|r| runs.push(r)),
            Some(_) => run_concurrent(s, fixed, stop, keep)
                .await
                .map(|r| under_load.push(r)),
        };
        if let Err(e) = done {
            progress(e);
        }
    }
    let mut doc = document(runs, under_load);
    if !hosts.is_empty() && !*stop.borrow() {
        match whyslow_lab::hosts::available() {
            Ok(()) => doc.hosts = run_hosts(hosts, save, stop, &mut progress),
            Err(why) => {
                progress(format!("scenarios on several hosts not run: {why}"));
                doc.hosts_not_run = Some(why);
            }
        }
    }
    doc
}

/// Requests of each run on several hosts: one client at a time, enough
/// for a median.
const HOSTS_REQUESTS: u64 = 20;

/// The scenarios on several hosts `only` names, or all of them.
pub fn hosts_scenarios(only: &[String]) -> Vec<&'static HostsScenario> {
    HOSTS_SCENARIOS
        .iter()
        .filter(|s| only.is_empty() || only.iter().any(|o| o == s.name))
        .collect()
}

/// Each scenario on several hosts, broken and fixed: its hosts captured
/// apart, analyzed together.
fn run_hosts(
    scenarios: &[&HostsScenario],
    save: Option<&Path>,
    stop: &watch::Receiver<bool>,
    progress: &mut impl FnMut(String),
) -> Vec<HostsRow> {
    let mut rows = Vec::new();
    let Ok(exe) = std::env::current_exe() else {
        progress("scenarios on several hosts not run: where is this program?".into());
        return rows;
    };
    for s in scenarios {
        for fixed in [false, true] {
            if *stop.borrow() {
                return rows;
            }
            let variant = if fixed { "fixed" } else { "broken" };
            progress(format!(
                "{} ({variant}, on {} hosts) …",
                s.name,
                s.hosts.len()
            ));
            match run_on_hosts(s, fixed, save, &exe) {
                Ok(row) => rows.push(row),
                Err(e) => progress(e),
            }
        }
    }
    rows
}

fn run_on_hosts(
    s: &HostsScenario,
    fixed: bool,
    save: Option<&Path>,
    exe: &Path,
) -> Result<HostsRow, String> {
    let variant = if fixed { "fixed" } else { "broken" };
    let scratch = std::env::temp_dir().join(format!("whyslow-demo-{}", std::process::id()));
    let dir = save.map_or(scratch.clone(), |d| d.join(format!("{}-{variant}", s.name)));
    let load = whyslow_lab::hosts::Load {
        clients: 1,
        requests: HOSTS_REQUESTS,
        duration: None,
    };
    let files = whyslow_lab::hosts::run(s, fixed, load, &dir, exe)?;
    let named: Vec<(String, PathBuf)> = s
        .hosts
        .iter()
        .zip(&files)
        .map(|(h, f)| (h.name.to_string(), f.clone()))
        .collect();
    let analysis = crate::joined::analyze_hosts(&named, &crate::AnalysisOptions::default());
    if save.is_none() {
        let _ = std::fs::remove_dir_all(&scratch);
    }
    let analysis = analysis?;
    let hosts = analysis.summary.hosts.clone();
    let mut report = Report::new("demo", None);
    analysis.fill(&mut report, false);
    Ok(HostsRow {
        scenario: s.name.into(),
        variant: variant.into(),
        clients: load.clients,
        hosts,
        findings: report.findings,
        declared: match fixed {
            true => Vec::new(),
            false => s.truth.kind.iter().map(|k| k.to_string()).collect(),
        },
        capture_files: match save {
            Some(_) => files.iter().map(|f| f.display().to_string()).collect(),
            None => Vec::new(),
        },
    })
}

/// The scenarios `only` names, or all of them.
pub fn scenarios(only: &[String]) -> Vec<&'static Scenario> {
    SCENARIOS
        .iter()
        .filter(|s| only.is_empty() || only.iter().any(|o| o == s.name))
        .collect()
}

/// The rows, and broken against fixed (by `compare`) for each scenario run both ways.
fn document(runs: Vec<(DemoRow, Run)>, under_load: Vec<ConcurrentRow>) -> DemoDocument {
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
        under_load,
        hosts: Vec::new(),
        hosts_not_run: None,
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
