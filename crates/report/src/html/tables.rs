//! The tables of a report: time per request kind, SQL per request kind, the
//! probes, a load run's numbers and a comparison.

use super::escape;
use crate::fmt_ms;
use std::fmt::Write;
use whyslow_model::{Change, Comparison, LoadResult, RequestPhases, SqlSummary, TimeBreakdown};

/// Times as right-aligned cells, in order.
fn time_cells(us: &[u64]) -> String {
    us.iter()
        .map(|t| format!("<td class=\"num\">{}</td>", fmt_ms(*t)))
        .collect()
}

pub fn breakdown(out: &mut String, kinds: &[TimeBreakdown]) {
    if kinds.is_empty() {
        return;
    }
    out.push_str("<h2>Where each kind of request spent its time (mean)</h2>\n<table><tr><th>request</th><th>n</th><th class=\"num\">total</th><th class=\"num\">in the service</th><th class=\"num\">pool queue</th><th class=\"num\">calls not told apart</th><th>backing services (calls per request, time waited)</th><th class=\"num\">network</th></tr>\n");
    for k in kinds {
        let backing: Vec<String> = k
            .backing
            .iter()
            .map(|b| {
                format!(
                    "{} {} ({:.1} calls, {})",
                    b.protocol.name(),
                    b.server,
                    b.calls_per_request,
                    fmt_ms(b.critical_us)
                )
            })
            .collect();
        let _ = writeln!(
            out,
            "<tr><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td>{}</td><td class=\"num\">{}</td></tr>",
            escape(&k.request),
            k.requests,
            fmt_ms(k.total_us),
            fmt_ms(k.server_us),
            fmt_ms(k.queued_us),
            fmt_ms(k.ambiguous_us),
            escape(&backing.join("; ")),
            fmt_ms(k.network_us)
        );
    }
    out.push_str("</table>\n");
}

pub fn sql(out: &mut String, kinds: &[SqlSummary]) {
    if kinds.is_empty() {
        return;
    }
    out.push_str("<h2>SQL and DNS per request kind</h2>\n");
    for k in kinds {
        let m = &k.median;
        let _ = writeln!(
            out,
            "<h3>{} → {} ({} requests)</h3>",
            escape(&k.request),
            escape(&k.server),
            k.requests,
        );
        if m.statements.total > 0 || !k.top_by_count.is_empty() {
            let _ = writeln!(
                out,
                "<p>median request: {} statements ({} select, {} insert, {} update, {} delete), {} shapes, {} duplicates, {} in the database</p>",
                m.statements.total,
                m.statements.select,
                m.statements.insert,
                m.statements.update,
                m.statements.delete,
                m.shapes,
                m.duplicates,
                fmt_ms(m.db_us)
            );
        }
        if !m.dns.is_empty() {
            let _ = writeln!(
                out,
                "<p>median request: {} DNS queries ({} NXDOMAIN, {} never answered), {} on its critical path</p>",
                m.dns.queries,
                m.dns.nxdomain,
                m.dns.unanswered,
                fmt_ms(m.dns.dns_critical_us)
            );
        }
        if k.top_by_count.is_empty() {
            continue;
        }
        out.push_str("<table><tr><th>statement (literals removed)</th><th class=\"num\">per request</th><th class=\"num\">time per request</th></tr>\n");
        for s in &k.top_by_count {
            let _ = writeln!(
                out,
                "<tr><td><code>{}</code></td><td class=\"num\">{:.1}</td><td class=\"num\">{}</td></tr>",
                escape(&s.statement),
                s.per_request,
                fmt_ms(s.time_us_per_request)
            );
        }
        out.push_str("</table>\n");
    }
}

pub fn probes(out: &mut String, label: &str, requests: &[RequestPhases]) {
    if requests.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "<h2>Requests ({})</h2>\n<table><tr><th>#</th><th>conn</th><th class=\"num\">dns</th><th class=\"num\">connect</th><th class=\"num\">tls</th><th class=\"num\">send</th><th class=\"num\">wait</th><th class=\"num\">receive</th><th class=\"num\">total</th><th>status</th></tr>",
        escape(label)
    );
    for r in requests {
        let _ = writeln!(
            out,
            "<tr><td>{}</td><td>{}{}</td>{}<td>{}</td></tr>",
            r.index,
            r.connection,
            if r.reused { " (reused)" } else { "" },
            time_cells(&[
                r.dns_us,
                r.connect_us,
                r.tls_us,
                r.send_us,
                r.wait_us,
                r.receive_us,
                r.total_us
            ]),
            r.status
        );
    }
    out.push_str("</table>\n");
}

pub fn load_summary(out: &mut String, l: &LoadResult) {
    let _ = writeln!(
        out,
        "<p>{} {}, {} model, {}, {} connections: {} responses in {:.1} s ({:.1}/s), {} errors ({:.2} %)</p>",
        escape(&l.setup.method),
        escape(&l.setup.target),
        escape(&l.setup.model),
        escape(&l.setup.schedule),
        l.setup.connections,
        l.responses,
        l.elapsed_us as f64 / 1e6,
        l.achieved_rate,
        l.errors,
        l.error_rate_pct
    );
    out.push_str("<table><tr><th>latency</th><th class=\"num\">p50</th><th class=\"num\">p90</th><th class=\"num\">p99</th><th class=\"num\">p99.9</th><th class=\"num\">max</th></tr>\n");
    for (name, p) in &l.latency {
        let _ = writeln!(
            out,
            "<tr><td>{}</td>{}</tr>",
            escape(name),
            time_cells(&[p.p50, p.p90, p.p99, p.p999, p.max])
        );
    }
    out.push_str("</table>\n");
}

pub fn comparison(out: &mut String, c: &Comparison) {
    let _ = writeln!(
        out,
        "<p>A: {} ({} requests) — B: {} ({} requests)</p><p class=\"{}\">verdict: {}</p>",
        escape(&c.a.file),
        c.a.count,
        escape(&c.b.file),
        c.b.count,
        if c.unchanged() { "good" } else { "bad" },
        escape(&crate::compare::verdict(c))
    );
    out.push_str("<table><tr><th>metric</th><th>stat</th><th class=\"num\">A</th><th></th><th class=\"num\">B</th><th></th><th class=\"num\">change</th><th></th></tr>\n");
    let max = c
        .stats
        .iter()
        .map(|s| s.a_us.max(s.b_us))
        .max()
        .unwrap_or(1)
        .max(1) as f64;
    for s in &c.stats {
        let w = |v: u64| (v as f64 / max * 160.0).max(1.0);
        let _ = writeln!(
            out,
            "<tr><td>{}</td><td>{}</td><td class=\"num\">{}</td><td><span class=\"bar\" style=\"width:{:.0}px;background:#5b8fd6\"></span></td><td class=\"num\">{}</td><td><span class=\"bar\" style=\"width:{:.0}px\"></span></td><td class=\"num\">{:+.1}%</td><td>{}</td></tr>",
            escape(&s.metric),
            s.stat,
            fmt_ms(s.a_us),
            w(s.a_us),
            fmt_ms(s.b_us),
            w(s.b_us),
            s.change_pct,
            match s.change {
                Change::NoSignificantChange => "~".to_string(),
                ch => ch.as_str().to_string(),
            }
        );
    }
    out.push_str("</table>\n");
    for k in &c.checks {
        let _ = writeln!(
            out,
            "<p class=\"{}\">gate {}: {}</p>",
            if k.passed { "good" } else { "bad" },
            escape(&k.rule),
            if k.passed { "passed" } else { "FAILED" }
        );
    }
    for n in &c.notes {
        let _ = writeln!(out, "<p class=\"note\">{}</p>", escape(n));
    }
}
