//! `load --slo` and `merge --slo`: each rule against the corrected latency
//! (what users saw) and the error rate of a run or a merge of runs.

use crate::{LimitValue, Rule};
use whyslow_model::{CheckResult, LoadResult, Metric, Recorded};

/// Metrics an --slo rule may name: corrected latency percentiles and the error rate.
pub const SLO_METRICS: &[&str] = &[
    "p50", "p75", "p90", "p95", "p99", "p99.9", "p999", "max", "mean", "errors",
];

/// The observed value of one SLO metric: µs for latencies, percent for errors.
fn observed(metric: &str, rec: &Recorded, result: &LoadResult) -> f64 {
    let h = rec.hist(Metric::Corrected);
    let q = |x: f64| h.value_at_quantile(x) as f64;
    match metric {
        "errors" => result.error_rate_pct,
        "max" => h.max() as f64,
        "mean" => h.mean(),
        "p99.9" | "p999" => q(0.999),
        m => q(m.trim_start_matches('p').parse::<f64>().unwrap_or(100.0) / 100.0),
    }
}

/// Checks every rule against a run (or a merge of runs).
pub fn slo_checks(rules: &[Rule], rec: &Recorded, result: &LoadResult) -> Vec<CheckResult> {
    let span = format!(
        "{} responses over {:.1} s",
        result.responses,
        result.elapsed_us as f64 / 1e6
    );
    rules
        .iter()
        .map(|rule| {
            let observed = observed(&rule.metric, rec, result);
            CheckResult {
                rule: rule.text.clone(),
                observed,
                limit: rule.limit(),
                unit: match rule.value {
                    LimitValue::Percent(_) => "percent".into(),
                    LimitValue::Micros(_) => "us".into(),
                },
                passed: rule.holds(observed),
                worst: Some(span.clone()),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse_rules;

    fn run(latencies_us: &[u64], error_rate_pct: f64) -> (Recorded, LoadResult) {
        let mut rec = Recorded::default();
        for v in latencies_us {
            rec.hist_mut(Metric::Corrected).record(*v).unwrap();
        }
        let result: LoadResult = serde_json::from_value(serde_json::json!({
            "format": "whyslow-load-result", "version": 1,
            "setup": {"target": "t", "method": "GET", "model": "open", "schedule": "s",
                      "target_rate": 10.0, "connections": 1, "streams": 1},
            "runs": 1, "started_at_us": 0, "ended_at_us": 1_000_000, "elapsed_us": 1_000_000,
            "interrupted": false, "responses": latencies_us.len(), "failures": {},
            "unfinished": 0, "statuses": {}, "errors": 0, "error_rate_pct": error_rate_pct,
            "achieved_rate": 10.0, "latency": {}, "findings": []
        }))
        .unwrap();
        (rec, result)
    }

    #[test]
    fn percentiles_and_error_rate_are_held_to_their_limits() {
        // 99 fast requests and one of 300 ms: p99 is fast (nearest rank), max is not.
        let mut v = vec![2_000; 99];
        v.push(300_000);
        let (rec, result) = run(&v, 0.5);
        let rules = parse_rules("p99<10ms,max<200ms,errors<0.1%,p50<=2ms", SLO_METRICS).unwrap();
        let c = slo_checks(&rules, &rec, &result);
        let passed: Vec<bool> = c.iter().map(|c| c.passed).collect();
        assert_eq!(passed, [true, false, false, true], "{c:?}");
        assert_eq!(c[2].unit, "percent");
        assert!(c[1].observed >= 300_000.0);
    }

    #[test]
    fn unknown_metrics_are_refused() {
        assert!(parse_rules("p99.99<1s", SLO_METRICS).is_err());
        assert!(parse_rules("ttfb<1s", SLO_METRICS).is_err());
    }
}
