//! The result file (`-o result.json`) and the `--json` summary: what a run
//! measured, with its histograms encoded so that results from several
//! machines merge exactly. The schema is documented in docs/load-result.md.

use crate::engine::Outcome;
use crate::histograms::{decode, encode, Metric, Recorded};
use crate::saturation;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::{Duration, UNIX_EPOCH};
use whyslow_model::Finding;

/// The value of `format`: tells a result file from other JSON.
pub const FORMAT: &str = "whyslow-load-result";
/// Bumped on any incompatible change to the result file.
pub const VERSION: u32 = 1;

/// Percentiles of one distribution, in microseconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Percentiles {
    pub count: u64,
    pub min: u64,
    pub mean: f64,
    pub p50: u64,
    pub p90: u64,
    pub p99: u64,
    pub p999: u64,
    pub max: u64,
}

impl Percentiles {
    pub fn of(h: &hdrhistogram::Histogram<u64>) -> Percentiles {
        let q = |x| h.value_at_quantile(x);
        Percentiles {
            count: h.len(),
            min: h.min(),
            mean: (h.mean() * 10.0).round() / 10.0,
            p50: q(0.5),
            p90: q(0.9),
            p99: q(0.99),
            p999: q(0.999),
            max: h.max(),
        }
    }
}

/// One interval of the run (`--interval`): throughput and latency over time.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct IntervalPoint {
    /// From the start of the run to the end of this interval.
    pub at_ms: u64,
    pub responses: u64,
    pub errors: u64,
    /// Responses per second in this interval.
    pub rate: f64,
    /// Percentiles of the corrected latency (the uncorrected one in the
    /// closed model, which has no schedule to correct against).
    pub p50_us: u64,
    pub p99_us: u64,
    pub max_us: u64,
    /// How late the generator sent, p99 (open model).
    pub lag_p99_us: u64,
}

impl IntervalPoint {
    pub fn of(offset: Duration, length: Duration, rec: &Recorded) -> IntervalPoint {
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
}

/// How the run was set up: enough to read its numbers, and to merge like with like.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunSetup {
    pub target: String,
    pub method: String,
    /// "open" or "closed".
    pub model: String,
    /// "500 req/s", "ramp 100 → 1000 req/s over 30 s", "as fast as possible".
    pub schedule: String,
    /// Requests per second the schedule asked for, on average; None for the closed model.
    pub target_rate: Option<f64>,
    pub connections: u64,
    pub streams: u64,
}

/// One run, or several merged.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LoadResult {
    pub format: String,
    pub version: u32,
    pub setup: RunSetup,
    /// Runs combined into this result (1 for a single run).
    pub runs: u32,
    pub started_at_us: u64,
    pub ended_at_us: u64,
    pub elapsed_us: u64,
    /// Stopped by Ctrl-C before the schedule ended.
    pub interrupted: bool,
    /// Complete responses, whatever their status.
    pub responses: u64,
    /// Requests that got no complete response, by class ("connect_refused").
    pub failures: BTreeMap<String, u64>,
    /// Requests still in flight when the run was cut.
    pub unfinished: u64,
    /// Responses by status code.
    pub statuses: BTreeMap<String, u64>,
    /// Failed + unfinished + responses with a status outside 200–399.
    pub errors: u64,
    pub error_rate_pct: f64,
    /// Responses per second over the run.
    pub achieved_rate: f64,
    /// Summary of every recorded distribution (`corrected`, `uncorrected`, `lag`, ...).
    pub latency: BTreeMap<String, Percentiles>,
    /// Each distribution as HdrHistogram's base64 V2-compressed encoding;
    /// left out of the `--json` summary.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub histograms: Option<BTreeMap<String, String>>,
    pub findings: Vec<Finding>,
    /// One point per interval of a single run; merged results have none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub intervals: Vec<IntervalPoint>,
}

fn epoch_us(t: std::time::SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
}

impl LoadResult {
    /// The result of one run. In the closed model the corrected histogram is
    /// wrk's estimate: the service times back-filled at the mean per-lane interval.
    pub fn from_outcome(setup: RunSetup, outcome: Outcome) -> LoadResult {
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
        r.fill(&totals);
        r.findings = saturation::check(&totals, r.setup.model == "open");
        r
    }

    /// Sets every derived field from the recorded histograms and counters.
    fn fill(&mut self, rec: &Recorded) {
        self.responses = rec.responses();
        self.failures = rec.failure_counts().collect();
        self.statuses = rec
            .status_counts()
            .map(|(s, n)| (s.to_string(), n))
            .collect();
        self.errors = rec.failed() + self.unfinished + rec.bad_statuses();
        let attempts = rec.responses() + rec.failed() + self.unfinished;
        self.error_rate_pct = match attempts {
            0 => 0.0,
            n => self.errors as f64 * 100.0 / n as f64,
        };
        self.achieved_rate = match self.elapsed_us {
            0 => 0.0,
            us => self.responses as f64 * 1e6 / us as f64,
        };
        self.latency = Metric::ALL
            .iter()
            .filter(|m| !rec.hist(**m).is_empty())
            .map(|m| (m.name().to_string(), Percentiles::of(rec.hist(*m))))
            .collect();
        self.histograms = Some(
            Metric::ALL
                .iter()
                .map(|m| (m.name().to_string(), encode(rec.hist(*m))))
                .collect(),
        );
    }

    /// The recorded histograms and counters back, from the encoded form.
    pub fn recorded(&self) -> Result<Recorded, String> {
        let hists = self
            .histograms
            .as_ref()
            .ok_or("result has no histograms (a --json summary, not an -o result file)")?;
        let mut rec = Recorded::default();
        for (name, text) in hists {
            let m = Metric::parse(name).ok_or_else(|| format!("unknown histogram {name:?}"))?;
            *rec.hist_mut(m) = decode(text).map_err(|e| format!("{name}: {e}"))?;
        }
        for (code, n) in &self.statuses {
            let code: usize = code.parse().map_err(|_| format!("bad status {code:?}"))?;
            if let Some(slot) = rec.statuses.get_mut(code) {
                *slot += n;
            }
        }
        for (class, n) in &self.failures {
            let i = (0..rec.failures.len())
                .find(|i| crate::histograms::error_class_name(*i) == *class)
                .ok_or_else(|| format!("unknown failure class {class:?}"))?;
            rec.failures[i] += n;
        }
        Ok(rec)
    }

    /// Parses and checks a result file's text.
    pub fn parse(text: &str) -> Result<LoadResult, String> {
        let r: LoadResult = serde_json::from_str(text).map_err(|e| format!("not a result: {e}"))?;
        if r.format != FORMAT {
            return Err(format!("format {:?}, expected {FORMAT:?}", r.format));
        }
        if r.version != VERSION {
            return Err(format!(
                "version {}, this whyslow reads {VERSION}",
                r.version
            ));
        }
        r.recorded()?;
        Ok(r)
    }

    /// The same result without histograms (for `--json`).
    pub fn summary(&self) -> LoadResult {
        LoadResult {
            histograms: None,
            ..self.clone()
        }
    }

    pub fn percentiles(&self, m: Metric) -> Option<&Percentiles> {
        self.latency.get(m.name())
    }
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
    merged.fill(&rec);
    Ok(merged)
}
