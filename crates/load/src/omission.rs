//! `coordinated_omission`: the uncorrected tail hides waiting.
//!
//! In the open model a request is due at its scheduled time; when the server
//! stalls, the requests due meanwhile start late and their service time alone
//! (what wrk without -R reports) leaves that wait out. Naming it tells the
//! reader which of the two tails users saw.

use crate::histograms::{Metric, Recorded};
use whyslow_model::{fmt_ms, Evidence, Finding, FindingKind, Severity};

/// The corrected p99 must be at least this many times the uncorrected one:
/// Gil Tene's examples ("How NOT to measure latency") show the hidden tail
/// as a multiple; below 2× the gap is within what a busy host adds.
const HIDDEN_RATIO: u64 = 2;
/// ...and at least 10 ms above it: a gap a person would act on (a quarter of
/// the 40 ms delayed-ACK stall, the smallest stall the case studies chase).
const HIDDEN_MIN_US: u64 = 10_000;

/// A `coordinated_omission` finding when the open-model run's uncorrected
/// p99 hides waiting that the corrected one shows.
pub fn check(rec: &Recorded, open_model: bool) -> Option<Finding> {
    let (c, u) = (rec.hist(Metric::Corrected), rec.hist(Metric::Uncorrected));
    if !open_model || c.is_empty() || u.is_empty() {
        return None;
    }
    let (c99, u99) = (c.value_at_quantile(0.99), u.value_at_quantile(0.99));
    if c99 < u99.saturating_mul(HIDDEN_RATIO) || c99 - u99 < HIDDEN_MIN_US {
        return None;
    }
    let hidden = c99 - u99;
    Some(Finding {
        time_lost_us: 0,
        time_lost_per_occurrence_us: hidden,
        occurrences: 1,
        evidence: vec![Evidence::Measurement {
            facts: Default::default(),
            note: format!(
                "corrected p99 {} (from the intended start), uncorrected p99 {} (from the \
                 actual start)",
                fmt_ms(c99),
                fmt_ms(u99)
            ),
        }],
        ..Finding::new(
            FindingKind::CoordinatedOmission,
            Severity::Info,
            format!(
                "the uncorrected p99 ({}) hides {} of waiting: requests that were due while the \
             server stalled started late",
                fmt_ms(u99),
                fmt_ms(hidden)
            ),
            // Not a cause of its own: the stall that made requests wait is.,
            "read the corrected latency: it is what users saw. Find the stall with \
              `whyslow diagnose URL --rate R`",
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(corrected: &[u64], uncorrected: &[u64]) -> Recorded {
        let mut r = Recorded::default();
        for v in corrected {
            r.hist_mut(Metric::Corrected).record(*v).unwrap();
        }
        for v in uncorrected {
            r.hist_mut(Metric::Uncorrected).record(*v).unwrap();
        }
        r
    }

    #[test]
    fn a_stall_hidden_from_the_uncorrected_tail_is_named() {
        // 100 requests of 1 ms; a 200 ms stall delayed 5 of them by up to 200 ms.
        let mut c = vec![1_000; 95];
        c.extend([200_000, 160_000, 120_000, 80_000, 40_000]);
        let u = vec![1_000; 100];
        let f = check(&rec(&c, &u), true).unwrap();
        assert_eq!(f.kind, FindingKind::CoordinatedOmission);
        assert!(f.time_lost_per_occurrence_us >= 150_000, "{f:?}");
        assert_eq!(f.time_lost_us, 0);
    }

    #[test]
    fn alike_tails_and_the_closed_model_are_not() {
        let same = vec![1_000, 2_000, 30_000];
        assert!(check(&rec(&same, &same), true).is_none());
        let mut c = vec![1_000; 95];
        c.extend([200_000; 5]);
        assert!(check(&rec(&c, &[1_000; 100]), false).is_none());
        // Twice as large but only 5 ms more: noise, not a stall.
        assert!(check(&rec(&[10_000; 10], &[5_000; 10]), true).is_none());
    }
}
