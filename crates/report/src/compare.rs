//! A comparison as text, benchstat-like: each percentile of A and B with its
//! 95 % interval, the change, and "~" where nothing moved beyond the noise.

use crate::fmt_ms;
use std::fmt::Write;
use whyslow_model::{Change, ComparedStat, Comparison};

fn interval(iv: Option<(u64, u64)>) -> String {
    iv.map(|(lo, hi)| format!("[{}–{}]", fmt_ms(lo), fmt_ms(hi)))
        .unwrap_or_default()
}

fn change(s: &ComparedStat) -> String {
    match s.change {
        Change::NoSignificantChange => "~".into(),
        Change::NotTested => format!("{:+.1}% (not tested)", s.change_pct),
        c => format!("{:+.1}% {}", s.change_pct, c.as_str()),
    }
}

pub fn text(c: &Comparison) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "compare {}: A {} ({} requests) → B {} ({} requests)",
        c.command, c.a.file, c.a.count, c.b.file, c.b.count
    );
    let mut metric = "";
    for s in &c.stats {
        if s.metric != metric {
            metric = &s.metric;
            let _ = writeln!(out, "\n{:<10} {:<28} {:<28} change", metric, "A", "B");
        }
        let a = format!("{} {}", fmt_ms(s.a_us), interval(s.a_interval_us));
        let b = format!("{} {}", fmt_ms(s.b_us), interval(s.b_interval_us));
        let _ = writeln!(out, "  {:<8} {a:<28} {b:<28} {}", s.stat, change(s));
        if let Some(t) = c
            .shifts
            .iter()
            .find(|t| t.metric == s.metric && s.stat == "p99")
        {
            let _ = writeln!(
                out,
                "  whole distribution: P(B slower than A) {:.2}, p={:.3} (Mann–Whitney): {}",
                t.b_slower_probability,
                t.p_value,
                t.change.as_str()
            );
        }
    }
    if !c.findings.is_empty() {
        let _ = writeln!(out, "\nfindings (time lost, what requests waited for):");
        for f in &c.findings {
            let t = |v: Option<u64>| v.map(fmt_ms).unwrap_or_else(|| "—".into());
            let state = match (f.a_time_lost_us, f.b_time_lost_us) {
                (Some(_), None) => "gone in B",
                (None, Some(_)) => "new in B",
                _ => "in both",
            };
            let _ = writeln!(
                out,
                "  {:<20} A {:<10} B {:<10} {state}",
                f.kind.as_str(),
                t(f.a_time_lost_us),
                t(f.b_time_lost_us)
            );
        }
    }
    let _ = writeln!(out, "\nverdict: {}", verdict(c));
    for n in &c.notes {
        let _ = writeln!(out, "note: {n}");
    }
    for k in &c.checks {
        let _ = writeln!(
            out,
            "gate {}: {} ({})",
            k.rule,
            if k.passed { "passed" } else { "FAILED" },
            k.worst.as_deref().unwrap_or("")
        );
    }
    out
}

/// One line: no significant change, or what moved most.
pub fn verdict(c: &Comparison) -> String {
    if c.unchanged() {
        return "no significant change".into();
    }
    let moved: Vec<String> = c
        .stats
        .iter()
        .filter(|s| matches!(s.change, Change::Slower | Change::Faster))
        .take(3)
        .map(|s| {
            format!(
                "{} {} {:+.1}% ({})",
                s.metric,
                s.stat,
                s.change_pct,
                s.change.as_str()
            )
        })
        .collect();
    match moved.is_empty() {
        true => "the distribution shifted (see the Mann–Whitney lines)".into(),
        false => format!("B differs: {}", moved.join(", ")),
    }
}
