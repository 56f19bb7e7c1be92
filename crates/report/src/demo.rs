//! The text of `demo`: one row per scenario run, then broken against fixed
//! for each scenario, as `compare` judged it.

use crate::fmt_ms;
use std::fmt::Write;
use whyslow_model::{Change, Comparison, ConcurrentRow, DemoDocument, DemoRow};

fn cause(row: &DemoRow) -> String {
    match row.top() {
        Some(f) => format!(
            "{} ({} per occurrence)",
            f.kind,
            fmt_ms(f.time_lost_per_occurrence_us)
        ),
        None => "no findings".into(),
    }
}

/// "p50 44.1 ms → 0.42 ms (faster, p = 0.004)": one statistic of a
/// comparison, judged by the shift of the whole distribution (Mann–Whitney),
/// which a handful of probes can show where a percentile's interval cannot.
fn verdict(c: &Comparison, metric: &str, stat: &str) -> Option<String> {
    let s = c
        .stats
        .iter()
        .find(|s| s.metric == metric && s.stat == stat)?;
    let p = |p: f64| match p < 0.001 {
        true => "p < 0.001".to_string(),
        false => format!("p = {p:.3}"),
    };
    let word = match c.shifts.iter().find(|t| t.metric == metric) {
        Some(t) if t.change == Change::NoSignificantChange => {
            format!("no significant change, {}", p(t.p_value))
        }
        Some(t) => format!("{}, {}", t.change.as_str(), p(t.p_value)),
        None => s.change.as_str().to_string(),
    };
    Some(format!(
        "{stat} {} → {} ({word})",
        fmt_ms(s.a_us),
        fmt_ms(s.b_us)
    ))
}

/// Width of the scenario column: its longest name, or its heading.
fn scenario_width<'a>(names: impl Iterator<Item = &'a str>) -> usize {
    names
        .map(str::len)
        .chain(["scenario".len()])
        .max()
        .unwrap_or(0)
}

pub fn text(doc: &DemoDocument) -> String {
    let mut out = String::new();
    if doc.rows.is_empty() {
        on_hosts(&mut out, doc);
        return out;
    }
    let w = scenario_width(doc.rows.iter().map(|r| r.scenario.as_str()));
    let _ = writeln!(
        out,
        "{:<w$} {:<7} {:<15} {:<30} {:>10}  finding",
        "scenario", "variant", "request", "client", "avg total"
    );
    for r in &doc.rows {
        let _ = writeln!(
            out,
            "{:<w$} {:<7} {:<15} {:<30} {:>10}  {}",
            r.scenario,
            r.variant,
            r.request,
            r.client,
            fmt_ms(r.mean_total_us),
            cause(r)
        );
    }
    out.push('\n');
    for pair in doc.rows.chunks(2) {
        let [broken, fixed] = pair else { continue };
        let why = broken
            .top()
            .map(|f| f.kind.to_string())
            .unwrap_or_else(|| "nothing to fix".into());
        let c = doc
            .comparisons
            .iter()
            .find(|c| c.a.file.starts_with(&format!("{} (", broken.scenario)));
        let total = c.and_then(|c| verdict(c, "total", "p50"));
        let load = c.and_then(|c| verdict(c, "load corrected", "p99"));
        let mut line = format!(
            "{}: {} avg {} → {}",
            broken.scenario,
            broken.request,
            fmt_ms(broken.mean_total_us),
            fmt_ms(fixed.mean_total_us)
        );
        if let Some(t) = total {
            let _ = write!(line, "; {t}");
        }
        if let Some(l) = load {
            let _ = write!(line, "; under load {l}");
        }
        let _ = writeln!(out, "{line}; cause: {why}");
    }
    if let Some(s) = doc.rows.iter().flat_map(|r| &r.skipped).next() {
        let _ = writeln!(out, "not examined: {s}");
    }
    if !doc.under_load.is_empty() {
        out.push('\n');
        under_load(&mut out, &doc.under_load);
        measurement_notes(&mut out, &doc.under_load);
    }
    on_hosts(&mut out, doc);
    out
}

/// The scenarios on several hosts: each host's clock as placed, what the
/// analysis of their captures named, what the scenario declares.
fn on_hosts(out: &mut String, doc: &DemoDocument) {
    if let Some(why) = &doc.hosts_not_run {
        let _ = writeln!(out, "\nscenarios on several hosts not run: {why}");
    }
    if doc.hosts.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "\non several hosts (network namespaces, each host captured apart, the captures analyzed \
         together):"
    );
    let w = scenario_width(doc.hosts.iter().map(|r| r.scenario.as_str()));
    let _ = writeln!(
        out,
        "{:<w$} {:<7} {:<50} {:<20} declared",
        "scenario", "variant", "clocks placed", "named"
    );
    for r in &doc.hosts {
        let clocks: Vec<String> = r
            .hosts
            .iter()
            .skip(1)
            .map(|h| match (h.clock_offset_us, h.clock_offset_bound_us) {
                (Some(o), Some(b)) => {
                    format!("{} {:+.2} ms ± {}", h.name, o as f64 / 1e3, fmt_ms(b))
                }
                _ => format!("{} not placed", h.name),
            })
            .collect();
        let named = kinds_of(r.named());
        let _ = writeln!(
            out,
            "{:<w$} {:<7} {:<50} {:<20} {}",
            r.scenario,
            r.variant,
            clocks.join(", "),
            list_or_nothing(&named),
            list_or_nothing(&r.declared)
        );
    }
}

/// The concurrent runs: what each named, what its scenario declares it
/// shows under load, and how its calls were told apart.
fn under_load(out: &mut String, rows: &[ConcurrentRow]) {
    let clients = rows.first().map_or(0, |r| r.clients);
    let w = scenario_width(rows.iter().map(|r| r.scenario.as_str()));
    let _ = writeln!(
        out,
        "under load: {clients} connections at once; each sends its next request when the last is \
         answered, or on a schedule where the cause needs many requests"
    );
    let _ = writeln!(
        out,
        "{:<w$} {:<7} {:>7} {:>9} {:>9}  {:<44} {:<20} calls: exact/grouped/inferred/ambiguous",
        "scenario", "variant", "pace", "p50", "p99", "named", "declared"
    );
    for r in rows {
        let named = kinds_of(r.named());
        let pace = match r.rate {
            Some(rate) => format!("{rate:.0}/s"),
            None => "closed".into(),
        };
        let (p50, p99) = match &r.latency {
            Some(l) => (fmt_ms(l.p50), fmt_ms(l.p99)),
            None => ("-".into(), "-".into()),
        };
        let a = &r.attribution;
        let calls = match a.trace_context + a.trace_group + a.inferred + a.ambiguous {
            0 => "no calls".to_string(),
            _ => format!(
                "{}/{}/{}/{}",
                a.trace_context, a.trace_group, a.inferred, a.ambiguous
            ),
        };
        let _ = writeln!(
            out,
            "{:<w$} {:<7} {:>7} {:>9} {:>9}  {:<44} {:<20} {calls}",
            r.scenario,
            r.variant,
            pace,
            p50,
            p99,
            list_or_nothing(&named),
            list_or_nothing(&r.declared)
        );
    }
}

/// What the concurrent runs said about their own measurement.
fn measurement_notes(out: &mut String, rows: &[ConcurrentRow]) {
    for r in rows {
        for f in r.about_measurement() {
            let _ = writeln!(
                out,
                "{} {}: {}: {}",
                r.scenario, r.variant, f.kind, f.summary
            );
        }
    }
}

/// The kinds of `findings`, each once, in their order.
fn kinds_of<'a>(findings: impl Iterator<Item = &'a whyslow_model::Finding>) -> Vec<String> {
    let mut kinds: Vec<String> = Vec::new();
    for f in findings {
        let kind = f.kind.to_string();
        if !kinds.contains(&kind) {
            kinds.push(kind);
        }
    }
    kinds
}

fn list_or_nothing(kinds: &[String]) -> String {
    match kinds.is_empty() {
        true => "nothing".into(),
        false => kinds.join(", "),
    }
}
