//! `--find-max --slo …`: the highest constant rate that still meets the SLO
//! ("can we do 500 TPS?"). Doubles the rate from a starting guess until a step
//! breaks the SLO (or halves it until one passes), then bisects between the
//! best passing and the first failing rate. The knee lies between them.

use crate::{LoadResult, Metric};
use whyslow_model::FindingKind;
pub use whyslow_model::{Knee, Step};

/// The search starts here unless the caller gives a first guess.
pub const START: f64 = 100.0;

/// Each growth step doubles the rate: a binary search over an unknown bound.
const GROWTH: f64 = 2.0;
/// Bisection stops when passing and failing rates are within 5 % of each
/// other: closer than that, a few-second step on a shared machine cannot
/// tell them apart reliably.
pub const PRECISION: f64 = 0.05;
/// A safety bound on the number of steps: doubling from 1/s to 10⁶/s takes 20,
/// bisecting to PRECISION a further 4.
const MAX_STEPS: usize = 24;
/// No step below one request per second.
const MIN_RATE: f64 = 1.0;
/// A step whose responses fall short of this share of the target rate did
/// not sustain the rate, whatever its latencies.
pub const RATE_KEPT: f64 = 0.9;

#[derive(Debug, Clone)]
pub struct Search {
    next: Option<f64>,
    max_rate: f64,
    best: Option<f64>,
    worst: Option<(f64, Vec<String>)>,
    generator_limited: bool,
    reached_limit: bool,
    steps: Vec<Step>,
}

fn tidy(rate: f64) -> f64 {
    if rate >= 20.0 {
        rate.round()
    } else {
        (rate * 10.0).round() / 10.0
    }
}

impl Search {
    pub fn new(start: f64, max_rate: f64) -> Search {
        Search {
            next: Some(tidy(start.clamp(MIN_RATE, max_rate))),
            max_rate,
            best: None,
            worst: None,
            generator_limited: false,
            reached_limit: false,
            steps: Vec::new(),
        }
    }

    /// The rate to try next; None when the search is over.
    pub fn next_rate(&self) -> Option<f64> {
        self.next
    }

    pub fn record(&mut self, step: Step) {
        let rate = step.rate;
        if step.generator_saturated {
            self.generator_limited = true;
        } else if step.passed() {
            self.best = Some(self.best.map_or(rate, |b: f64| b.max(rate)));
        } else if self.worst.as_ref().is_none_or(|w| rate < w.0) {
            self.worst = Some((rate, step.broken.clone()));
        }
        self.steps.push(step);
        self.next = self.choose(rate);
    }

    fn choose(&mut self, last: f64) -> Option<f64> {
        if self.generator_limited || self.steps.len() >= MAX_STEPS {
            return None;
        }
        let next = match (self.best, self.worst.as_ref().map(|w| w.0)) {
            (Some(lo), Some(hi)) if (hi - lo) / hi <= PRECISION => return None,
            (Some(lo), Some(hi)) => (lo + hi) / 2.0,
            (Some(lo), None) if lo >= self.max_rate => {
                self.reached_limit = true;
                return None;
            }
            (Some(lo), None) => (lo * GROWTH).min(self.max_rate),
            (None, Some(hi)) if hi <= MIN_RATE => return None,
            (None, Some(hi)) => (hi / GROWTH).max(MIN_RATE),
            (None, None) => last,
        };
        let next = tidy(next);
        (!self.steps.iter().any(|s| s.rate == next)).then_some(next)
    }

    pub fn knee(&self) -> Knee {
        Knee {
            max_rate: self.best,
            first_broken: self.worst.as_ref().map(|w| w.0),
            broken: self.worst.as_ref().map(|w| w.1.clone()).unwrap_or_default(),
            generator_limited: self.generator_limited,
            reached_limit: self.reached_limit,
            steps: self.steps.clone(),
        }
    }
}

/// One step of the search: a constant-rate run at `rate`, judged. `broken`
/// names the SLO rules the run broke; a run that fell short of RATE_KEPT of
/// its rate broke the schedule too, and one whose generator could not keep
/// up says so (the search stops there, as the service was not what failed).
pub fn judge(result: &LoadResult, rate: f64, mut broken: Vec<String>) -> Step {
    if result.achieved_rate < rate * RATE_KEPT {
        broken.push(format!("rate {rate:.0}/s not sustained"));
    }
    let p = result.percentiles(Metric::Corrected).copied();
    Step {
        rate,
        achieved_rate: result.achieved_rate,
        p50_us: p.map_or(0, |p| p.p50),
        p99_us: p.map_or(0, |p| p.p99),
        error_rate_pct: result.error_rate_pct,
        broken,
        generator_saturated: result
            .findings
            .iter()
            .any(|f| f.kind == FindingKind::GeneratorSaturated),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::LoadResultExt;

    /// A service whose p99 stays at 5 ms up to `capacity` and explodes past it.
    fn step(rate: f64, capacity: f64) -> Step {
        let over = rate > capacity;
        Step {
            rate,
            achieved_rate: rate.min(capacity),
            p50_us: 1_000,
            p99_us: if over { 2_000_000 } else { 5_000 },
            error_rate_pct: 0.0,
            broken: if over {
                vec!["p99<100ms".into()]
            } else {
                vec![]
            },
            generator_saturated: false,
        }
    }

    fn search(start: f64, capacity: f64, max: f64) -> Knee {
        let mut s = Search::new(start, max);
        while let Some(rate) = s.next_rate() {
            s.record(step(rate, capacity));
        }
        s.knee()
    }

    #[test]
    fn brackets_the_capacity_within_precision() {
        for (start, capacity) in [(100.0, 537.0), (5000.0, 537.0), (10.0, 12_345.0)] {
            let k = search(start, capacity, 1e6);
            let (lo, hi) = (k.max_rate.unwrap(), k.first_broken.unwrap());
            assert!(lo <= capacity && hi > capacity, "{start}: {lo}..{hi}");
            assert!((hi - lo) / hi <= PRECISION, "{lo}..{hi}");
            assert!(k.steps.len() < MAX_STEPS, "{}", k.steps.len());
            assert_eq!(k.broken, vec!["p99<100ms".to_string()]);
        }
    }

    #[test]
    fn stops_at_the_limits() {
        let k = search(100.0, 1e9, 1000.0);
        assert_eq!((k.max_rate, k.reached_limit), (Some(1000.0), true));
        let k = search(100.0, 0.5, 1e6);
        assert_eq!(k.max_rate, None);
        assert_eq!(k.first_broken, Some(1.0));
        let mut s = Search::new(100.0, 1e6);
        let mut st = step(100.0, 1e9);
        st.generator_saturated = true;
        s.record(st);
        assert_eq!(s.next_rate(), None);
        assert!(s.knee().generator_limited);
    }

    /// A one-second open-model run at `rate` of which `served` requests
    /// got a response, each in 2 ms.
    fn run(rate: f64, served: u64) -> LoadResult {
        let mut totals = crate::histograms::Recorded::default();
        for _ in 0..served {
            totals.record(&crate::histograms::Sample {
                corrected_us: 2_000,
                uncorrected_us: 2_000,
                lag_us: Some(10),
                status: 200,
                ..Default::default()
            });
        }
        let setup = whyslow_model::RunSetup {
            target: "http://127.0.0.1:1/".into(),
            method: "GET".into(),
            model: "open".into(),
            schedule: format!("{rate} req/s"),
            target_rate: Some(rate),
            connections: 1,
            streams: 1,
        };
        let outcome = crate::Outcome {
            totals,
            started_at: std::time::SystemTime::now(),
            elapsed: std::time::Duration::from_secs(1),
            interrupted: false,
            unfinished: 0,
            lanes: 1,
            intervals: Vec::new(),
        };
        LoadResult::from_outcome(setup, outcome)
    }

    #[test]
    fn a_step_is_judged_by_its_rules_and_its_rate() {
        let kept = judge(&run(100.0, 100), 100.0, Vec::new());
        assert!(kept.passed(), "{kept:?}");
        assert_eq!(kept.p99_us / 100, 20, "{kept:?}");
        let slow = judge(&run(100.0, 100), 100.0, vec!["p99<1ms".into()]);
        assert_eq!(slow.broken, vec!["p99<1ms".to_string()]);
        let short = judge(&run(100.0, 50), 100.0, Vec::new());
        assert!(!short.passed());
        assert_eq!(short.broken, vec!["rate 100/s not sustained".to_string()]);
    }
}
