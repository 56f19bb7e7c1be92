//! `--budget 'total<2s,ttfb<500ms'` and `--slo 'p99<200ms,errors<0.1%'`:
//! lists of `metric<value` rules.

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

/// Durations are read as load plans read them (`whyslow_load::plan`).
pub use whyslow_model::parse_duration;

/// The rules of an optional flag (`--slo`, `--budget`): none when not
/// given; an error names the flag.
pub fn flag_rules(flag: &str, spec: Option<&str>, metrics: &[&str]) -> Result<Vec<Rule>, String> {
    spec.map_or(Ok(Vec::new()), |s| {
        parse_rules(s, metrics).map_err(|e| format!("{flag}: {e}"))
    })
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
