//! `whyslow compare A B`: is B really faster than A? Percentile by
//! percentile with distribution-free 95 % intervals, a Mann–Whitney test per
//! distribution, findings that came or went, and `--fail-if` gates.
//! Computes a `Comparison`; the report crate renders it.

pub mod gate;
pub mod run;
pub mod stats;

use gate::Gate;
use run::{common, Distribution, Run};
use stats::{mann_whitney, Runs};
use std::collections::BTreeMap;
use whyslow_model::{
    Change, ComparedRun, ComparedStat, Comparison, FindingChange, FindingKind, ShiftTest,
    SCHEMA_VERSION,
};

/// Significance level of the shift test and of the intervals (95 %).
const ALPHA: f64 = 0.05;
/// Smallest change called significant, relative: 5 %, the least a person
/// acts on; with thousands of samples smaller shifts test "significant".
const MIN_SHIFT_PCT: f64 = 5.0;
/// Smallest change called significant, absolute: one scheduler slice
/// (EEVDF's base slice, 0.75 ms, kernel/sched/fair.c). Two load runs of one
/// loopback target differ by up to a few hundred µs at p50 on a busy host
/// (tests/reports.rs shows it); that is the machine, not the target, and
/// within-run intervals cannot see it.
const MIN_SHIFT_US: u64 = 750;
/// Percentiles compared; max has no interval and is one sample.
const QUANTILES: [(&str, f64); 3] = [("p50", 0.5), ("p90", 0.9), ("p99", 0.99)];

pub fn compare(a: &Run, b: &Run, gates: &[Gate]) -> Result<Comparison, String> {
    if a.command != b.command {
        return Err(format!(
            "{} is a {} result and {} a {} result: compare two results of the same command",
            a.file, a.command, b.file, b.command
        ));
    }
    let pairs = common(a, b);
    let mains = main_metrics(&pairs);
    if mains.is_empty() {
        return Err("the two files share no distribution to compare".into());
    }
    let mut stats = Vec::new();
    let mut shifts = Vec::new();
    for (metric, da, db) in &pairs {
        stats.extend(compare_quantiles(metric, da, db));
        if let (Distribution::Values(ra), Distribution::Values(rb)) = (da, db) {
            shifts.extend(shift(metric, ra, rb));
        }
    }
    let mut notes = Vec::new();
    if a.target != b.target {
        notes.push(format!(
            "different targets: {} and {}",
            a.target.as_deref().unwrap_or("?"),
            b.target.as_deref().unwrap_or("?")
        ));
    }
    if stats.iter().any(|s| s.change == Change::NotTested) {
        notes.push(
            "a file holds percentiles only (a --json summary): compared, not tested; \
             `load -o FILE` keeps the histograms"
                .into(),
        );
    }
    let checks = gates
        .iter()
        .map(|g| g.check(&stats, &shifts, &mains))
        .collect();
    Ok(Comparison {
        schema_version: SCHEMA_VERSION,
        command: a.command.clone(),
        a: compared_run(a),
        b: compared_run(b),
        stats,
        shifts,
        findings: finding_changes(a, b),
        checks,
        notes,
    })
}

/// The metrics a gate that names none holds: the first one; for a
/// diagnosis, each client pattern's total and the load phase, since a fix
/// (or a regression) may move one pattern alone and a gate must not miss it.
fn main_metrics(pairs: &[(&str, &Distribution, &Distribution)]) -> Vec<String> {
    let sectioned: Vec<String> = pairs
        .iter()
        .map(|p| p.0)
        .filter(|m| m.ends_with(".total") || *m == "load.corrected")
        .map(String::from)
        .collect();
    match sectioned.is_empty() {
        true => pairs.first().map(|p| p.0.to_string()).into_iter().collect(),
        false => sectioned,
    }
}

fn compared_run(r: &Run) -> ComparedRun {
    ComparedRun {
        file: r.file.clone(),
        command: r.command.clone(),
        target: r.target.clone(),
        count: r.metrics.first().map_or(0, |m| m.1.count()),
    }
}

/// Whether a move from `a` to `b` is big enough to matter.
fn big_enough(a: u64, b: u64) -> bool {
    let delta = a.abs_diff(b);
    delta >= MIN_SHIFT_US && delta as f64 * 100.0 >= MIN_SHIFT_PCT * a as f64
}

fn direction(a: u64, b: u64) -> Change {
    if b > a {
        Change::Slower
    } else {
        Change::Faster
    }
}

fn compare_quantiles(metric: &str, a: &Distribution, b: &Distribution) -> Vec<ComparedStat> {
    QUANTILES
        .iter()
        .map(|&(name, q)| {
            let (a_us, a_iv, b_us, b_iv, tested) = match (a, b) {
                (Distribution::Values(ra), Distribution::Values(rb)) => (
                    ra.quantile(q),
                    Some(ra.quantile_interval(q)),
                    rb.quantile(q),
                    Some(rb.quantile_interval(q)),
                    true,
                ),
                _ => (a.quantile(q), None, b.quantile(q), None, false),
            };
            let disjoint = match (a_iv, b_iv) {
                (Some(x), Some(y)) => x.1 < y.0 || y.1 < x.0,
                _ => false,
            };
            let change = if !tested {
                Change::NotTested
            } else if disjoint && big_enough(a_us, b_us) {
                direction(a_us, b_us)
            } else {
                Change::NoSignificantChange
            };
            ComparedStat {
                metric: metric.into(),
                stat: name.into(),
                a_us,
                b_us,
                change_pct: pct(a_us, b_us),
                a_interval_us: a_iv,
                b_interval_us: b_iv,
                change,
            }
        })
        .collect()
}

fn pct(a: u64, b: u64) -> f64 {
    match a {
        0 => 0.0,
        a => ((b as f64 - a as f64) * 1000.0 / a as f64).round() / 10.0,
    }
}

fn shift(metric: &str, a: &Runs, b: &Runs) -> Option<ShiftTest> {
    let (prob, p) = mann_whitney(a, b)?;
    let (ma, mb) = (a.quantile(0.5), b.quantile(0.5));
    let change = if p < ALPHA && big_enough(ma, mb) {
        direction(ma, mb)
    } else {
        Change::NoSignificantChange
    };
    Some(ShiftTest {
        metric: metric.into(),
        a_count: a.count(),
        b_count: b.count(),
        b_slower_probability: (prob * 1000.0).round() / 1000.0,
        p_value: p,
        change,
    })
}

/// Time lost per finding kind (what inbound requests waited for), A and B.
fn finding_changes(a: &Run, b: &Run) -> Vec<FindingChange> {
    let sum = |r: &Run| {
        let mut m: BTreeMap<&str, (FindingKind, u64)> = BTreeMap::new();
        for f in r.findings.iter().filter(|f| !f.background) {
            m.entry(f.kind.as_str()).or_insert((f.kind, 0)).1 += f.time_lost_us;
        }
        m
    };
    let (sa, sb) = (sum(a), sum(b));
    let mut kinds: Vec<(&str, FindingKind)> =
        sa.iter().chain(sb.iter()).map(|(k, v)| (*k, v.0)).collect();
    kinds.sort_by_key(|k| k.0);
    kinds.dedup_by_key(|k| k.0);
    kinds
        .into_iter()
        .map(|(k, kind)| FindingChange {
            kind,
            a_time_lost_us: sa.get(k).map(|v| v.1),
            b_time_lost_us: sb.get(k).map(|v| v.1),
        })
        .collect()
}

/// Hostile result files: a clear error or a comparison, never a panic.
pub fn fuzz(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    if let Ok(r) = Run::parse("fuzz", &text) {
        let _ = compare(&r, &r, &gate::parse("p99>+10%").unwrap_or_default());
    }
}

#[cfg(test)]
mod tests;
