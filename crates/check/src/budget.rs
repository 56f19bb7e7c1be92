//! `probe --budget`: each rule against the worst request of the run.

use crate::Rule;
use whyslow_model::{CheckResult, PhaseName, RequestPhases};

/// Metrics a --budget rule may name: the phases, and time to first byte.
pub const BUDGET_METRICS: &[&str] = &[
    "dns", "connect", "tls", "send", "wait", "receive", "total", "ttfb",
];

fn metric_us(r: &RequestPhases, metric: &str) -> u64 {
    match metric {
        "ttfb" => r.ttfb_us(),
        m => PhaseName::parse(m).map(|p| r.phase_us(p)).unwrap_or(0),
    }
}

/// Checks each rule against the worst request.
pub fn check_budget(rules: &[Rule], requests: &[RequestPhases]) -> Vec<CheckResult> {
    rules
        .iter()
        .map(|rule| {
            let worst = requests.iter().max_by_key(|r| metric_us(r, &rule.metric));
            let observed = worst.map(|r| metric_us(r, &rule.metric)).unwrap_or(0) as f64;
            CheckResult {
                rule: rule.text.clone(),
                observed,
                limit: rule.limit(),
                unit: "us".into(),
                passed: rule.holds(observed),
                worst: worst.map(|r| format!("request {}", r.index + 1)),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse_rules;

    fn request(index: u32, wait_us: u64) -> RequestPhases {
        RequestPhases {
            index,
            wait_us,
            total_us: wait_us + 100,
            ..RequestPhases::default()
        }
    }

    #[test]
    fn the_worst_request_is_held_to_each_rule() {
        let rules = parse_rules("ttfb<50ms,total<=1s", BUDGET_METRICS).unwrap();
        let reqs = [request(0, 1_000), request(1, 60_000), request(2, 2_000)];
        let c = check_budget(&rules, &reqs);
        assert!(!c[0].passed, "{c:?}");
        assert_eq!(c[0].worst.as_deref(), Some("request 2"));
        assert!(c[0].observed >= 60_000.0);
        assert!(c[1].passed);
        assert!(check_budget(&rules, &reqs[..1]).iter().all(|c| c.passed));
    }

    #[test]
    fn no_requests_pass_with_nothing_observed() {
        let rules = parse_rules("total<1ms", BUDGET_METRICS).unwrap();
        let c = check_budget(&rules, &[]);
        assert!(c[0].passed && c[0].worst.is_none());
    }
}
