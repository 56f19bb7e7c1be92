//! `--fail-if 'p99>+10%,wait.p50>+5ms'`: regressions that fail a CI job.
//! A gate fails only on a change compare calls significant, so noise between
//! two runs of the same build never fails it.

use whyslow_model::{Change, CheckResult, ComparedStat, ShiftTest};

#[derive(Debug, Clone, PartialEq)]
pub struct Gate {
    pub rule: String,
    /// None: the run's main metric.
    pub metric: Option<String>,
    pub stat: String,
    pub limit: Limit,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Limit {
    Percent(f64),
    Micros(u64),
}

const STATS: [&str; 3] = ["p50", "p90", "p99"];

/// Parses a comma-separated list of rules.
pub fn parse(text: &str) -> Result<Vec<Gate>, String> {
    text.split(',')
        .map(str::trim)
        .filter(|r| !r.is_empty())
        .map(parse_one)
        .collect()
}

fn parse_one(rule: &str) -> Result<Gate, String> {
    let bad = || format!("{rule:?}: want [metric.]STAT>+N% or >+Nms, STAT one of {STATS:?}");
    let (left, right) = rule.split_once('>').ok_or_else(bad)?;
    let (metric, stat) = match left.trim().rsplit_once('.') {
        Some((m, s)) => (Some(m.to_string()), s.to_string()),
        None => (None, left.trim().to_string()),
    };
    if !STATS.contains(&stat.as_str()) {
        return Err(bad());
    }
    let amount = right.trim().strip_prefix('+').unwrap_or(right.trim());
    let limit = if let Some(p) = amount.strip_suffix('%') {
        Limit::Percent(p.parse().map_err(|_| bad())?)
    } else if let Some(ms) = amount.strip_suffix("ms") {
        Limit::Micros((ms.parse::<f64>().map_err(|_| bad())? * 1000.0) as u64)
    } else if let Some(us) = amount.strip_suffix("us") {
        Limit::Micros(us.parse().map_err(|_| bad())?)
    } else {
        return Err(bad());
    };
    Ok(Gate {
        rule: rule.to_string(),
        metric,
        stat,
        limit,
    })
}

impl Gate {
    /// Checks the gate against the compared statistics and the shift tests
    /// of whole distributions. `mains`: the metrics a rule without one
    /// means; it holds in each of them, and the result is the first that
    /// fails, else the first.
    pub fn check(
        &self,
        stats: &[ComparedStat],
        shifts: &[ShiftTest],
        mains: &[String],
    ) -> CheckResult {
        let metrics: Vec<&str> = match &self.metric {
            Some(m) => vec![m.as_str()],
            None => mains.iter().map(String::as_str).collect(),
        };
        let results: Vec<CheckResult> = metrics
            .iter()
            .map(|m| self.check_one(stats, shifts, m))
            .collect();
        let first_failed = results.iter().position(|r| !r.passed).unwrap_or(0);
        results
            .into_iter()
            .nth(first_failed)
            .unwrap_or_else(|| self.check_one(stats, shifts, "total"))
    }

    /// A percentile's own interval needs many samples to exclude the other
    /// run's (of five requests, the median's 95 % interval spans them all);
    /// a diagnosis probes a handful. So a move past the limit also fails the
    /// gate when the whole distribution shifted the same way (Mann–Whitney).
    fn check_one(&self, stats: &[ComparedStat], shifts: &[ShiftTest], metric: &str) -> CheckResult {
        let shifted = shifts
            .iter()
            .find(|t| t.metric == metric)
            .is_some_and(|t| t.change == Change::Slower);
        let found = stats
            .iter()
            .find(|s| s.metric == metric && s.stat == self.stat);
        let (observed, limit, unit) = match (found, self.limit) {
            (Some(s), Limit::Percent(p)) => (s.change_pct, p, "percent"),
            (Some(s), Limit::Micros(us)) => (s.b_us as f64 - s.a_us as f64, us as f64, "us"),
            (None, Limit::Percent(p)) => (0.0, p, "percent"),
            (None, Limit::Micros(us)) => (0.0, us as f64, "us"),
        };
        // Without samples there is no test: the point estimates decide.
        let regressed = found.is_some_and(|s| {
            (matches!(s.change, Change::Slower | Change::NotTested) || shifted) && observed > limit
        });
        CheckResult {
            rule: self.rule.clone(),
            observed,
            limit,
            unit: unit.into(),
            passed: found.is_some() && !regressed,
            worst: match found {
                None => Some(format!("no {metric} {} in both files", self.stat)),
                Some(s) if shifted && s.change != Change::Slower => Some(format!(
                    "{metric} {}: slower (the whole distribution, Mann–Whitney)",
                    self.stat
                )),
                Some(s) => Some(format!("{metric} {}: {}", self.stat, s.change.as_str())),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stat(change: Change, a: u64, b: u64) -> ComparedStat {
        ComparedStat {
            metric: "total".into(),
            stat: "p99".into(),
            a_us: a,
            b_us: b,
            change_pct: (b as f64 - a as f64) * 100.0 / a as f64,
            a_interval_us: None,
            b_interval_us: None,
            change,
        }
    }

    #[test]
    fn parses_rules() {
        let g = parse("p99>+10%, wait.p50>+5ms,p90>200us").unwrap();
        assert_eq!(g[0].limit, Limit::Percent(10.0));
        assert_eq!(g[0].metric, None);
        assert_eq!(g[1].metric.as_deref(), Some("wait"));
        assert_eq!(g[1].limit, Limit::Micros(5000));
        assert_eq!(g[2].limit, Limit::Micros(200));
        assert!(parse("p42>+1%").is_err());
        assert!(parse("p99<10%").is_err());
        assert!(parse("p99>+x%").is_err());
    }

    #[test]
    fn fails_only_on_significant_regressions_past_the_limit() {
        let g = &parse("p99>+10%").unwrap()[0];
        assert!(
            !g.check(&[stat(Change::Slower, 1000, 2000)], &[], &["total".into()])
                .passed
        );
        assert!(
            g.check(&[stat(Change::Slower, 1000, 1050)], &[], &["total".into()])
                .passed
        );
        let unmoved = [stat(Change::NoSignificantChange, 1000, 2000)];
        assert!(g.check(&unmoved, &[], &["total".into()]).passed);
        // The percentile's interval could not tell, the whole distribution
        // did: the move past the limit fails the gate.
        let shift = |change| ShiftTest {
            metric: "total".into(),
            a_count: 5,
            b_count: 5,
            b_slower_probability: 1.0,
            p_value: 0.008,
            change,
        };
        let failed = g.check(&unmoved, &[shift(Change::Slower)], &["total".into()]);
        assert!(!failed.passed);
        assert!(failed
            .worst
            .unwrap()
            .contains("slower (the whole distribution"));
        let unshifted = [shift(Change::NoSignificantChange)];
        assert!(g.check(&unmoved, &unshifted, &["total".into()]).passed);
        assert!(
            g.check(&[stat(Change::Faster, 2000, 1000)], &[], &["total".into()])
                .passed
        );
        assert!(
            !g.check(
                &[stat(Change::NotTested, 1000, 2000)],
                &[],
                &["total".into()]
            )
            .passed
        );
        // A rule naming nothing that was compared cannot pass.
        assert!(!g.check(&[], &[], &["total".into()]).passed);
    }
}
