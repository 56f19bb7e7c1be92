//! `generator_saturated`: whyslow itself could not keep the schedule.
//!
//! Scheduler lag (how late a request started after its connection was free)
//! adds one for one to every corrected latency. Lag within one tick of the
//! millisecond timers wrk2 and tokio schedule with is what peers accept as
//! punctual; beyond that, lag that is a noticeable share of the tail being
//! measured means the numbers partly describe the generator, not the target.

use crate::histograms::{Metric, Recorded};
use whyslow_model::{Evidence, Finding, FindingKind, Severity};

/// Lag below one millisecond is never flagged: one tick of wrk2's and
/// tokio's timers, the punctuality load generators commonly achieve.
pub const LAG_FLOOR_US: u64 = 1_000;
/// Flag when the p99 lag exceeds this share of the corrected p99: beyond
/// it, the reported tail is off by more than 10 % because of the generator.
pub const LAG_SHARE_OF_P99: f64 = 0.10;

/// Fewer late starts than this are the machine's noise (a page fault, a
/// preempted thread), not a generator that cannot keep up: with a short run's
/// few hundred requests, the p99 is a single sample.
pub const MIN_LATE: u64 = 10;

/// The p99 lag above which a run is flagged, for a run whose corrected p99 is `p99_us`.
pub fn lag_limit_us(p99_us: u64) -> u64 {
    LAG_FLOOR_US.max((p99_us as f64 * LAG_SHARE_OF_P99) as u64)
}

/// A `generator_saturated` finding when the open-model run's lag is too large.
pub fn check(rec: &Recorded, open_model: bool) -> Vec<Finding> {
    let lag = rec.hist(Metric::Lag);
    if !open_model || lag.is_empty() {
        return Vec::new();
    }
    let p99_lag = lag.value_at_quantile(0.99);
    let p99 = rec.hist(Metric::Corrected).value_at_quantile(0.99);
    let limit = lag_limit_us(p99);
    let late = lag.count_between(limit + 1, lag.max().max(limit + 1));
    if p99_lag <= limit || late < MIN_LATE {
        return Vec::new();
    }
    let total_lag = (lag.mean() * lag.len() as f64) as u64;
    vec![Finding {
        time_lost_us: total_lag,
        time_lost_per_occurrence_us: lag.value_at_quantile(0.5),
        occurrences: late.min(u64::from(u32::MAX)) as u32,
        evidence: vec![Evidence::Measurement {
            facts: Default::default(),
            note: format!(
                "{late} of {} requests started more than {:.2} ms after their connection was \
                 free; max lag {:.2} ms",
                lag.len(),
                limit as f64 / 1000.0,
                lag.max() as f64 / 1000.0
            ),
        }],
        ..Finding::new(
            FindingKind::GeneratorSaturated,
            Severity::Warning,
            format!(
                "whyslow started requests late: p99 scheduler lag {:.2} ms (limit {:.2} ms); \
             every corrected latency includes that lag",
                p99_lag as f64 / 1000.0,
                limit as f64 / 1000.0
            ),
            "Lower --rate or --connections, give whyslow more CPU (--threads, a quieter \
              machine), or run from several machines and combine with `whyslow merge`.",
        )
    }]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::histograms::Sample;

    fn run(lag_us: u64, latency_us: u64) -> Recorded {
        let mut r = Recorded::default();
        for _ in 0..1000 {
            r.record(&Sample {
                corrected_us: latency_us,
                lag_us: Some(lag_us),
                status: 200,
                ..Sample::default()
            });
        }
        r
    }

    #[test]
    fn flags_lag_that_matters() {
        assert!(check(&run(200, 1_000), true).is_empty(), "under the floor");
        assert!(
            check(&run(5_000, 500_000), true).is_empty(),
            "1 % of the tail"
        );
        let f = check(&run(5_000, 6_000), true);
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].kind, FindingKind::GeneratorSaturated);
        assert_eq!(f[0].occurrences, 1000);
        assert!(
            check(&run(5_000, 6_000), false).is_empty(),
            "closed model has no schedule"
        );
    }
}
