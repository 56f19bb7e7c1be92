//! `--budget 'total<2s,ttfb<500ms'` and `--slo 'p99<200ms,errors<0.1%'`:
//! lists of `metric<value` rules.

use std::time::Duration;

/// A limit's value: a time or a percentage.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum LimitValue {
    Micros(u64),
    Percent(f64),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Rule {
    pub text: String,
    pub metric: String,
    /// `<=` instead of `<`.
    pub inclusive: bool,
    pub value: LimitValue,
}

impl Rule {
    /// True when `observed` keeps within the rule.
    pub fn holds(&self, observed: f64) -> bool {
        let limit = self.limit();
        if self.inclusive {
            observed <= limit
        } else {
            observed < limit
        }
    }

    pub fn limit(&self) -> f64 {
        match self.value {
            LimitValue::Micros(us) => us as f64,
            LimitValue::Percent(p) => p,
        }
    }
}

/// "2s", "500ms", "250us", "1.5s", "2m"; a bare number is seconds (as curl's -m).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: f64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not a duration (try 500ms, 2s)"))?;
    let scale = match unit.trim() {
        "" | "s" => 1.0,
        "ms" => 1e-3,
        "us" | "µs" => 1e-6,
        "m" | "min" => 60.0,
        other => return Err(format!("unknown unit {other:?} in {s:?} (us, ms, s, m)")),
    };
    if !n.is_finite() || n < 0.0 || n * scale > 1e9 {
        return Err(format!("{s:?} is out of range"));
    }
    Ok(Duration::from_secs_f64(n * scale))
}

/// Parses a comma-separated rule list; `metrics` lists the allowed names.
pub fn parse_rules(spec: &str, metrics: &[&str]) -> Result<Vec<Rule>, String> {
    let mut rules = Vec::new();
    for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (metric, rest, inclusive) = if let Some((m, r)) = part.split_once("<=") {
            (m, r, true)
        } else if let Some((m, r)) = part.split_once('<') {
            (m, r, false)
        } else {
            return Err(format!("{part:?}: expected METRIC<VALUE, e.g. total<2s"));
        };
        let metric = metric.trim().to_ascii_lowercase();
        if !metrics.contains(&metric.as_str()) {
            return Err(format!(
                "{part:?}: unknown metric {metric:?} (one of: {})",
                metrics.join(", ")
            ));
        }
        let value = match rest.trim().strip_suffix('%') {
            Some(p) => LimitValue::Percent(
                p.trim()
                    .parse()
                    .map_err(|_| format!("{part:?}: bad percentage"))?,
            ),
            None => LimitValue::Micros(parse_duration(rest)?.as_micros() as u64),
        };
        rules.push(Rule {
            text: part.to_string(),
            metric,
            inclusive,
            value,
        });
    }
    if rules.is_empty() {
        return Err("empty rule list".into());
    }
    Ok(rules)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("2s").unwrap(), Duration::from_secs(2));
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("1.5").unwrap(), Duration::from_millis(1500));
        assert_eq!(parse_duration("250us").unwrap(), Duration::from_micros(250));
        for bad in ["", "x", "2h", "-1s", "1e999"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn rule_lists() {
        let r = parse_rules(
            "total<2s, ttfb<=500ms,errors<0.1%",
            &["total", "ttfb", "errors"],
        )
        .unwrap();
        assert_eq!(r.len(), 3);
        assert_eq!(r[0].value, LimitValue::Micros(2_000_000));
        assert!(r[1].inclusive && r[1].holds(500_000.0));
        assert!(!r[0].holds(2_000_000.0));
        assert_eq!(r[2].value, LimitValue::Percent(0.1));
        assert!(parse_rules("latency<1s", &["total"]).is_err());
        assert!(parse_rules("total>1s", &["total"]).is_err());
        assert!(parse_rules("", &["total"]).is_err());
    }
}
