//! How many requests it takes to rule out a rare stall (`periodic_stall`)
//! when none was seen: the warning a short run gets, and the size of an
//! analysis window that can show a stall's period.

use crate::periodic_stall::{MIN_CALLS, MIN_STALLS_FOR_PERIOD};
use whyslow_model::Facts;

/// The rarest stall a diagnosis should be able to rule out: 1 call in 20
/// (the example; case 003's tax service stalled less often still).
pub const RULE_OUT_ONE_IN: f64 = 20.0;
/// Chance of seeing at least one such stall that counts as ruling it out.
pub const RULE_OUT_CONFIDENCE: f64 = 0.95;
/// The load phase suggested to see enough requests: 10/s for 10 s = 100,
/// above the 59 that 95 % needs and the MIN_CALLS a tail needs.
pub const SUGGESTED_RATE: u32 = 10;
pub const SUGGESTED_DURATION_S: u32 = 10;

/// Requests needed to see a 1-in-N stall at least once with the confidence:
/// 1 − (1 − 1/N)^n ≥ c.
pub fn requests_to_rule_out() -> usize {
    let n = (1.0 - RULE_OUT_CONFIDENCE).ln() / (1.0 - 1.0 / RULE_OUT_ONE_IN).ln();
    (n.ceil() as usize).max(MIN_CALLS)
}

/// Requests an analysis window should hold (`analyze --window`): enough
/// that a server stalling 1 call in RULE_OUT_ONE_IN, called once per
/// request, stalls MIN_STALLS_FOR_PERIOD times in it — the fewest that show
/// a period — with RULE_OUT_CONFIDENCE: the smallest n with
/// P(Binomial(n, 1/N) ≥ k) ≥ c.
pub fn requests_per_window() -> usize {
    let p = 1.0 / RULE_OUT_ONE_IN;
    let at_least_k = |n: usize| {
        // 1 − P(X < k), the terms of P(X = i) built one from the last.
        let mut term = (1.0 - p).powi(n as i32);
        let mut below = 0.0;
        for i in 0..MIN_STALLS_FOR_PERIOD {
            below += term;
            term *= (n - i) as f64 / (i + 1) as f64 * p / (1.0 - p);
        }
        1.0 - below
    };
    (MIN_STALLS_FOR_PERIOD..)
        .find(|&n| at_least_k(n) >= RULE_OUT_CONFIDENCE)
        .expect("the chance grows to 1 with n")
        .max(MIN_CALLS)
}

/// Why `requests` inbound requests with no stall seen do not rule one out,
/// and the load flags that would, with the numbers it quotes; None when
/// they do.
pub fn unseen(requests: usize) -> Option<(String, Facts)> {
    let needed = requests_to_rule_out();
    if requests >= needed {
        return None;
    }
    let missed = (1.0 - 1.0 / RULE_OUT_ONE_IN).powi(requests as i32);
    let facts = Facts::default()
        .with("requests", requests as f64)
        .with("one_call_in", RULE_OUT_ONE_IN)
        .with("missed_share", missed)
        .with("requests_needed", needed as f64)
        .with("confidence", RULE_OUT_CONFIDENCE)
        .with("suggested_rate", SUGGESTED_RATE as f64)
        .with("suggested_duration_s", SUGGESTED_DURATION_S as f64);
    let why = format!(
        "{requests} requests cannot rule out a dependency that stalls 1 call in {RULE_OUT_ONE_IN}: \
         {:.0} % of such runs would miss it ({needed} requests see it {:.0} % of the time); \
         add a load phase: diagnose --rate {SUGGESTED_RATE} --duration {SUGGESTED_DURATION_S}s",
        100.0 * missed,
        100.0 * RULE_OUT_CONFIDENCE
    );
    Some((why, facts))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_short_run_says_what_it_cannot_rule_out() {
        assert_eq!(
            requests_to_rule_out(),
            59,
            "1 − 0.95^59 ≥ 0.95 > 1 − 0.95^58"
        );
        let (note, facts) = unseen(6).unwrap();
        assert!(note.contains("74 % of such runs would miss it"), "{note}");
        assert!((facts.0["missed_share"] - 0.735).abs() < 0.001, "{facts:?}");
        assert!(note.contains("--rate 10 --duration 10s"), "{note}");
        assert!(unseen(59).is_none());
    }

    #[test]
    fn a_window_holds_enough_requests_to_see_a_period() {
        // 1 − Σ_{i<3} C(n,i)·0.05^i·0.95^(n−i): 0.9502 at 124, 0.9489 at 123.
        assert_eq!(requests_per_window(), 124);
    }
}
