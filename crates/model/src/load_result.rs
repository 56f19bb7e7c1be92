//! A load run's result (`load -o result.json`, and the `load` object of
//! `--json`): what a run measured, with its histograms encoded so that
//! results from several machines merge exactly. The load engine fills it;
//! reports and `compare` read it. Schema: docs/load-result.md.

use crate::load_record::{decode, error_class_name, Metric, Recorded, ERROR_CLASSES};
use crate::Finding;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The value of `format`: tells a result file from other JSON.
pub const LOAD_FORMAT: &str = "whyslow-load-result";
/// Bumped on any incompatible change to the result file.
pub const LOAD_VERSION: u32 = 1;

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

impl Percentiles {
    /// Percentiles of one recorded histogram.
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

impl LoadResult {
    /// The same result without histograms (for `--json`).
    pub fn summary(&self) -> LoadResult {
        LoadResult {
            histograms: None,
            ..self.clone()
        }
    }

    /// Writes the result file (`load -o`, `merge -o`), errors naming it.
    pub fn write(&self, path: &std::path::Path) -> Result<(), String> {
        let text = serde_json::to_string_pretty(self).map_err(|e| e.to_string())?;
        std::fs::write(path, text + "\n").map_err(|e| format!("-o {}: {e}", path.display()))
    }

    /// A result file (`load -o`), errors naming the file.
    pub fn read(path: &std::path::Path) -> Result<LoadResult, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        LoadResult::parse(&text).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// Parses and checks a result file's text.
    pub fn parse(text: &str) -> Result<LoadResult, String> {
        let r: LoadResult = serde_json::from_str(text).map_err(|e| format!("not a result: {e}"))?;
        if r.format != LOAD_FORMAT {
            return Err(format!("format {:?}, expected {LOAD_FORMAT:?}", r.format));
        }
        if r.version != LOAD_VERSION {
            return Err(format!(
                "version {}, this whyslow reads {LOAD_VERSION}",
                r.version
            ));
        }
        r.recorded()?;
        Ok(r)
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
            let i = (0..ERROR_CLASSES)
                .find(|i| error_class_name(*i) == *class)
                .ok_or_else(|| format!("unknown failure class {class:?}"))?;
            rec.failures[i] += n;
        }
        Ok(rec)
    }

    /// The summary of one distribution, when the run recorded it.
    pub fn percentiles(&self, m: Metric) -> Option<&Percentiles> {
        self.latency.get(m.name())
    }
}

/// One tried rate and what came of it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Step {
    pub rate: f64,
    pub achieved_rate: f64,
    pub p50_us: u64,
    pub p99_us: u64,
    pub error_rate_pct: f64,
    /// Rules broken (SLO rules, "rate not sustained"); empty when the step passed.
    pub broken: Vec<String>,
    /// whyslow could not keep this step's schedule: no higher rate is measurable here.
    pub generator_saturated: bool,
}

impl Step {
    pub fn passed(&self) -> bool {
        self.broken.is_empty() && !self.generator_saturated
    }
}

/// What the search concluded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Knee {
    /// Highest rate that met the SLO.
    pub max_rate: Option<f64>,
    /// Lowest rate that broke it, and the rules it broke.
    pub first_broken: Option<f64>,
    pub broken: Vec<String>,
    /// The search stopped because whyslow itself was the limit.
    pub generator_limited: bool,
    /// The search stopped at --max-rate with the SLO still met.
    pub reached_limit: bool,
    pub steps: Vec<Step>,
}
