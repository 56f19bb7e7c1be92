//! The result file (`-o result.json`) and the `--json` summary: what a run
//! measured, with its histograms encoded so that results from several
//! machines merge exactly. The schema is documented in docs/load-result.md.

use crate::engine::Outcome;
use crate::histograms::{encode, Metric, Recorded};
use crate::{omission, saturation};
use std::collections::BTreeMap;
use std::time::{Duration, UNIX_EPOCH};

pub use whyslow_model::{
    IntervalPoint, LoadResult, Percentiles, RunSetup, LOAD_FORMAT as FORMAT,
    LOAD_VERSION as VERSION,
};

/// One interval's point, from what it recorded.
pub fn interval_point(offset: Duration, length: Duration, rec: &Recorded) -> IntervalPoint {
    let latency = match rec.hist(Metric::Corrected).is_empty() {
        true => rec.hist(Metric::Uncorrected),
        false => rec.hist(Metric::Corrected),
    };
    let secs = length.as_secs_f64().max(1e-6);
    IntervalPoint {
        at_ms: (offset + length).as_millis() as u64,
        responses: rec.responses(),
        errors: rec.failed() + rec.bad_statuses(),
        rate: (rec.responses() as f64 / secs * 10.0).round() / 10.0,
        p50_us: latency.value_at_quantile(0.5),
        p99_us: latency.value_at_quantile(0.99),
        max_us: latency.max(),
        lag_p99_us: rec.hist(Metric::Lag).value_at_quantile(0.99),
    }
}

fn epoch_us(t: std::time::SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
}

/// What the load engine adds to a result: building it from a run. Reading
/// one back (`parse`, `recorded`, `percentiles`) is `LoadResult`'s own.
pub trait LoadResultExt: Sized {
    fn from_outcome(setup: RunSetup, outcome: Outcome) -> Self;
}

impl LoadResultExt for LoadResult {
    /// The result of one run. In the closed model the corrected histogram is
    /// wrk's estimate: the service times back-filled at the mean per-lane interval.
    fn from_outcome(setup: RunSetup, outcome: Outcome) -> LoadResult {
        let mut totals = outcome.totals;
        if setup.model == "closed" {
            let responses = totals.responses().max(1);
            let per_lane_us = outcome.elapsed.as_micros() as u64 * outcome.lanes as u64 / responses;
            let unc = totals.hist(Metric::Uncorrected);
            *totals.hist_mut(Metric::Corrected) = unc.clone_correct(per_lane_us.max(1));
        }
        let start = epoch_us(outcome.started_at);
        let elapsed = outcome.elapsed.as_micros() as u64;
        let mut r = LoadResult {
            format: FORMAT.into(),
            version: VERSION,
            setup,
            runs: 1,
            started_at_us: start,
            ended_at_us: start + elapsed,
            elapsed_us: elapsed,
            interrupted: outcome.interrupted,
            responses: 0,
            failures: BTreeMap::new(),
            unfinished: outcome.unfinished,
            statuses: BTreeMap::new(),
            errors: 0,
            error_rate_pct: 0.0,
            achieved_rate: 0.0,
            latency: BTreeMap::new(),
            histograms: None,
            findings: Vec::new(),
            intervals: outcome.intervals,
        };
        fill(&mut r, &totals);
        let open = r.setup.model == "open";
        r.findings = saturation::check(&totals, open);
        r.findings.extend(omission::check(&totals, open));
        r
    }
}

/// Sets every derived field from the recorded histograms and counters.
fn fill(r: &mut LoadResult, rec: &Recorded) {
    r.responses = rec.responses();
    r.failures = rec.failure_counts().collect();
    r.statuses = rec
        .status_counts()
        .map(|(s, n)| (s.to_string(), n))
        .collect();
    r.errors = rec.failed() + r.unfinished + rec.bad_statuses();
    let attempts = rec.responses() + rec.failed() + r.unfinished;
    r.error_rate_pct = match attempts {
        0 => 0.0,
        n => r.errors as f64 * 100.0 / n as f64,
    };
    r.achieved_rate = match r.elapsed_us {
        0 => 0.0,
        us => r.responses as f64 * 1e6 / us as f64,
    };
    r.latency = Metric::ALL
        .iter()
        .filter(|m| !rec.hist(**m).is_empty())
        .map(|m| (m.name().to_string(), Percentiles::of(rec.hist(*m))))
        .collect();
    r.histograms = Some(
        Metric::ALL
            .iter()
            .map(|m| (m.name().to_string(), encode(rec.hist(*m))))
            .collect(),
    );
}

/// Combines results of runs made at the same time from several machines (or
/// one after another): histograms and counters add exactly; the time span
/// covers them all; rates add.
pub fn merge(results: &[LoadResult]) -> Result<LoadResult, String> {
    let first = results.first().ok_or("nothing to merge")?;
    let mut rec = Recorded::default();
    for r in results {
        rec.add(&r.recorded()?);
    }
    let mut setup = first.setup.clone();
    let same = |f: fn(&RunSetup) -> &str| results.iter().all(|r| f(&r.setup) == f(&first.setup));
    if !same(|s| &s.target) {
        setup.target = "several targets".into();
    }
    if !same(|s| &s.model) {
        setup.model = "mixed".into();
    }
    if !same(|s| &s.schedule) {
        setup.schedule = "several schedules".into();
    } else if results.len() > 1 {
        setup.schedule = format!("{} × {}", results.len(), first.setup.schedule);
    }
    setup.connections = results.iter().map(|r| r.setup.connections).sum();
    setup.target_rate = results.iter().map(|r| r.setup.target_rate).sum();
    let started = results.iter().map(|r| r.started_at_us).min().unwrap_or(0);
    let ended = results.iter().map(|r| r.ended_at_us).max().unwrap_or(0);
    let mut merged = LoadResult {
        setup,
        runs: results.iter().map(|r| r.runs).sum(),
        started_at_us: started,
        ended_at_us: ended,
        elapsed_us: ended.saturating_sub(started),
        interrupted: results.iter().any(|r| r.interrupted),
        unfinished: results.iter().map(|r| r.unfinished).sum(),
        findings: results.iter().flat_map(|r| r.findings.clone()).collect(),
        intervals: match results.len() {
            1 => first.intervals.clone(),
            _ => Vec::new(),
        },
        ..first.clone()
    };
    fill(&mut merged, &rec);
    Ok(merged)
}
