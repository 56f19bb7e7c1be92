//! What a person reads: the summary table of a run, the live progress line,
//! and the find-max table.

use std::fmt::Write;
use whyslow_model::{CheckResult, Interval, Knee, LoadDocument, LoadResult, Metric, Percentiles};

use whyslow_model::fmt_ms as ms;

/// Rows of the summary table: distribution, label, what it means.
const ROWS: [(Metric, &str, &str); 9] = [
    (
        Metric::Corrected,
        "latency",
        "from the intended start (corrected)",
    ),
    (
        Metric::Uncorrected,
        "service",
        "from the actual start (uncorrected)",
    ),
    (Metric::Queue, "queued", "waited for a busy connection"),
    (Metric::Lag, "lag", "how late whyslow started requests"),
    (Metric::Connect, "connect", "per new connection"),
    (Metric::Tls, "tls", "per new connection"),
    (Metric::Send, "send", ""),
    (Metric::Wait, "wait", "server time to first byte"),
    (Metric::Receive, "receive", ""),
];

fn row(out: &mut String, label: &str, p: &Percentiles, note: &str) {
    let _ = writeln!(
        out,
        "  {label:<10}{:>10}{:>10}{:>10}{:>10}{:>10}   {note}",
        ms(p.p50),
        ms(p.p90),
        ms(p.p99),
        ms(p.p999),
        ms(p.max)
    );
}

/// The human summary of a run (or a merge).
pub fn summary(r: &LoadResult) -> String {
    let mut out = String::new();
    let s = &r.setup;
    let _ = writeln!(
        out,
        "{} {}  {} model, {}, {} connection(s){}, {:.1} s{}{}",
        s.method,
        s.target,
        s.model,
        s.schedule,
        s.connections,
        if s.streams > 1 {
            format!(" × {} streams", s.streams)
        } else {
            String::new()
        },
        r.elapsed_us as f64 / 1e6,
        if r.runs > 1 {
            format!(", {} runs merged", r.runs)
        } else {
            String::new()
        },
        if r.interrupted { ", interrupted" } else { "" },
    );
    let statuses: Vec<String> = r.statuses.iter().map(|(c, n)| format!("{c}×{n}")).collect();
    let _ = writeln!(
        out,
        "  {} responses ({:.1}/s{}), {} errors ({:.2} %){}{}",
        r.responses,
        r.achieved_rate,
        s.target_rate
            .map(|t| format!(" of {t:.1}/s scheduled"))
            .unwrap_or_default(),
        r.errors,
        r.error_rate_pct,
        if statuses.is_empty() {
            String::new()
        } else {
            format!("; status {}", statuses.join(" "))
        },
        if r.unfinished > 0 {
            format!("; {} unfinished", r.unfinished)
        } else {
            String::new()
        },
    );
    for (class, n) in &r.failures {
        let _ = writeln!(out, "  failed: {class} ×{n}");
    }
    let _ = writeln!(
        out,
        "\n  {:<10}{:>10}{:>10}{:>10}{:>10}{:>10}",
        "", "p50", "p90", "p99", "p99.9", "max"
    );
    for (m, label, note) in ROWS {
        let Some(p) = r.percentiles(m).filter(|p| p.max > 0) else {
            continue;
        };
        let note = match (m, s.model.as_str()) {
            (Metric::Corrected, "closed") => "estimated: back-filled at the mean interval (wrk)",
            (Metric::Uncorrected, "closed") => "as measured (closed loop)",
            _ => note,
        };
        row(&mut out, label, p, note);
    }
    out
}

/// The live progress line (no newline): time, rate, percentiles so far, errors.
pub fn progress(iv: &Interval, total: Option<f64>, scheduled: Option<f64>) -> String {
    let t = &iv.totals;
    let done = (iv.offset + iv.length).as_secs_f64();
    let rate = iv.recorded.responses() as f64 / iv.length.as_secs_f64().max(1e-3);
    let h = t.hist(Metric::Corrected);
    let errors = t.failed() + t.bad_statuses();
    let attempts = (t.responses() + t.failed()).max(1);
    format!(
        "{:>6.1} s{}  {:>8.0} req/s{}  p50 {}  p99 {}  errors {} ({:.2} %)  in flight {}",
        done,
        total.map(|d| format!("/{d:.0} s")).unwrap_or_default(),
        rate,
        scheduled
            .map(|r| format!(" (of {r:.0})"))
            .unwrap_or_default(),
        ms(h.value_at_quantile(0.5)),
        ms(h.value_at_quantile(0.99)),
        errors,
        errors as f64 * 100.0 / attempts as f64,
        iv.in_flight
    )
}

/// The find-max table and its conclusion.
pub fn knee(k: &Knee) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "  {:>10} {:>10} {:>10} {:>10} {:>8}  verdict",
        "rate/s", "achieved", "p50", "p99", "errors"
    );
    for s in &k.steps {
        let verdict = if s.generator_saturated {
            "whyslow could not keep the schedule".to_string()
        } else if s.broken.is_empty() {
            "ok".to_string()
        } else {
            format!("broke {}", s.broken.join(", "))
        };
        let _ = writeln!(
            out,
            "  {:>10.1} {:>10.1} {:>10} {:>10} {:>7.2}%  {verdict}",
            s.rate,
            s.achieved_rate,
            ms(s.p50_us),
            ms(s.p99_us),
            s.error_rate_pct
        );
    }
    let _ = match (k.max_rate, k.first_broken) {
        (Some(ok), Some(bad)) => writeln!(
            out,
            "\nknee: {ok:.1} req/s meets the SLO; {bad:.1} req/s broke {}",
            k.broken.join(", ")
        ),
        (Some(ok), None) if k.reached_limit => {
            writeln!(
                out,
                "\nknee not reached: {ok:.1} req/s (--max-rate) still meets the SLO"
            )
        }
        (Some(ok), None) => writeln!(out, "\nhighest rate meeting the SLO: {ok:.1} req/s"),
        (None, Some(bad)) => writeln!(
            out,
            "\nno rate meets the SLO: even {bad:.1} req/s broke {}",
            k.broken.join(", ")
        ),
        (None, None) => writeln!(out, "\nno step completed"),
    };
    if k.generator_limited {
        let _ = writeln!(
            out,
            "whyslow itself could not go faster here (generator_saturated): the real limit may be higher; \
             run from several machines and `whyslow merge` the results"
        );
    }
    out
}

/// One `--slo` check's line.
pub fn check_line(c: &CheckResult) -> String {
    let value = match c.unit.as_str() {
        "percent" => format!("{:.3} %", c.observed),
        _ => ms(c.observed as u64),
    };
    let verdict = if c.passed { "ok" } else { "BROKEN" };
    format!("slo {}: {verdict} (observed {value})", c.rule)
}

/// The whole text of `load` and `merge`: the find-max table, the run's
/// summary, its findings and its SLO checks.
pub fn text(doc: &LoadDocument) -> String {
    let mut out = String::new();
    if let Some(k) = &doc.find_max {
        out.push_str(&knee(k));
        out.push('\n');
    }
    if let Some(r) = &doc.load {
        out.push_str(&summary(r));
    }
    if !doc.report.findings.is_empty() {
        out.push_str("\nfindings\n");
        out.push_str(&crate::findings::text(&doc.report.findings));
    }
    if !doc.report.checks.is_empty() {
        out.push('\n');
    }
    for c in &doc.report.checks {
        let _ = writeln!(out, "{}", check_line(c));
    }
    out
}
