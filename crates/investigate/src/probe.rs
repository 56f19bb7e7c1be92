//! `probe`: N requests from the client's side, judged by the budget rules
//! and the probe-pattern detectors.

use whyslow_check::{check_budget, Rule};
use whyslow_client::{probe_until, redact_url, ProbeOptions, ProbeRun};
use whyslow_model::{Report, ReportSection};

/// Runs the probes until done or `stop` completes (Ctrl-C).
pub fn run(opts: &ProbeOptions, stop: impl std::future::Future<Output = ()>) -> ProbeRun {
    crate::runtime(1).block_on(probe_until(opts, stop))
}

/// The document: the requests as one section, the budget checks, findings.
pub fn report(opts: &ProbeOptions, run: &ProbeRun, rules: &[Rule]) -> Report {
    let url = redact_url(&opts.url);
    let mut r = Report::new("probe", Some(url.clone()));
    let label = if opts.fresh { "fresh" } else { "reused" };
    r.sections.push(ReportSection {
        label: label.into(),
        requests: run.requests.clone(),
        dns: run.dns.clone(),
    });
    r.checks = check_budget(rules, &run.requests);
    r.findings
        .extend(whyslow_detect::probe_findings(&run.requests, &url));
    if let Some(e) = &run.error {
        r.errors
            .push(format!("request {}: {e}", run.requests.len() + 1));
    }
    r
}
