//! Self-contained HTML reports: inline CSS and SVG, no script, and a
//! Content-Security-Policy that forbids fetching anything, so a report opens
//! from disk or mail without a server and never calls out. The same input
//! gives the same bytes.

mod charts;
mod ladder;
mod svg;
mod tables;
mod waterfall;

use crate::findings::evidence_line;
use crate::fmt_ms;
use std::fmt::Write;
use whyslow_model::{Comparison, DemoDocument, Finding, LoadResult, Report};

/// Forbids every fetch: no script, no images or fonts from anywhere; inline
/// styles only.
pub const CSP: &str = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'";

const STYLE: &str = r#"
body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#222;max-width:1100px}
h1{font-size:20px}h2{font-size:17px;margin-top:28px;border-bottom:1px solid #ddd}
h3{font-size:15px}
table{border-collapse:collapse;margin:8px 0}td,th{padding:3px 8px;text-align:left;border-bottom:1px solid #eee;vertical-align:top}
.num{text-align:right;font-variant-numeric:tabular-nums}
.bar{background:#d9534f;height:10px;display:inline-block}
.note{color:#666}.bad{color:#b52b27;font-weight:600}.good{color:#2d7d2d;font-weight:600}
svg text{font:11px system-ui,sans-serif;fill:#333}
svg .axis{stroke:#999;stroke-width:1}svg .grid{stroke:#eee;stroke-width:1}
svg .send{fill:#5b8fd6}svg .wait{fill:#f0a030}svg .receive{fill:#5cb85c}svg .queued{fill:#8e44ad}
svg .inbound{fill:#888}svg .hist{fill:#5b8fd6}svg .lookup{fill:#17a2b8}svg .lost{fill:#b52b27}
svg .seg{stroke:#1f5fa8;stroke-width:1.5}svg .ack{stroke:#666;stroke-width:1;stroke-dasharray:4 3}
svg .stall{fill:#b52b27;font-weight:600}svg .life{stroke:#444;stroke-width:2}
svg .l1{stroke:#1f5fa8;stroke-width:2}svg .l2{stroke:#d9534f;stroke-width:2}svg .l3{stroke:#5cb85c;stroke-width:2}
.legend span{display:inline-block;width:12px;height:10px;margin:0 4px 0 12px}
"#;

/// Escapes text for HTML and SVG content and attributes.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

fn page(title: &str, body: &str) -> String {
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta http-equiv=\"Content-Security-Policy\" content=\"{CSP}\">\
         <title>{}</title><style>{STYLE}</style></head><body>\n<h1>{}</h1>\n{body}</body></html>\n",
        escape(title),
        escape(title)
    )
}

fn legend() -> &'static str {
    r##"<p class="legend">phases:<span style="background:#8e44ad"></span>waiting for a connection<span style="background:#5b8fd6"></span>request sent<span style="background:#f0a030"></span>waiting for the answer<span style="background:#5cb85c"></span>answer received<span style="background:#888"></span>inbound request<span style="background:#17a2b8"></span>DNS lookup<span style="background:#b52b27"></span>DNS query never answered</p>"##
}

/// Findings with their time lost as bars, evidence and fix.
fn findings(out: &mut String, findings: &[Finding]) {
    let _ = writeln!(out, "<h2>Findings, most time lost first</h2>");
    if findings.is_empty() {
        out.push_str("<p>No findings.</p>\n");
        return;
    }
    let max = findings
        .iter()
        .map(|f| f.time_lost_us)
        .max()
        .unwrap_or(1)
        .max(1);
    out.push_str(
        "<table><tr><th>finding</th><th>time lost</th><th></th><th>what, evidence, fix</th></tr>\n",
    );
    for f in findings {
        let width = (f.time_lost_us as f64 / max as f64 * 200.0).max(1.0);
        let _ = write!(
            out,
            "<tr><td><b>{}</b>{}</td><td class=\"num\">{} ({}×)</td><td><span class=\"bar\" style=\"width:{width:.0}px\"></span></td><td>{}<ul>",
            f.kind,
            if f.background { "<br><span class=\"note\">background</span>" } else { "" },
            fmt_ms(f.time_lost_us),
            f.occurrences,
            escape(&f.summary)
        );
        for e in f.evidence.iter().take(5) {
            let _ = write!(out, "<li>{}</li>", escape(&evidence_line(e)));
        }
        let _ = writeln!(out, "</ul><i>fix:</i> {}</td></tr>", escape(&f.fix));
    }
    out.push_str("</table>\n");
}

fn problems(out: &mut String, r: &Report) {
    for s in &r.skipped {
        let _ = writeln!(
            out,
            "<p class=\"note\">not examined: {}: {}</p>",
            escape(&s.what),
            escape(&s.why)
        );
    }
    for e in &r.errors {
        let _ = writeln!(out, "<p class=\"bad\">error: {}</p>", escape(e));
    }
}

/// `diagnose` and `analyze`: findings, the waterfall of a typical and of the
/// slowest inbound request, the packet ladder behind each TCP finding, the
/// calls per request kind, and the load phase when there was one.
pub fn report(r: &Report, load: Option<&LoadResult>) -> String {
    let mut out = report_body(r);
    tables::breakdown(&mut out, &r.time_breakdown);
    tables::sql(&mut out, &r.sql_summary);
    if let Some(first) = r.sections.first() {
        tables::probes(&mut out, &first.label, &first.requests);
    }
    if let Some(l) = load {
        out.push_str("<h2>Load phase</h2>\n");
        charts::load_charts(&mut out, l);
    }
    problems(&mut out, r);
    let title = format!(
        "whyslow {} {}",
        r.command,
        r.target.as_deref().unwrap_or_default()
    );
    page(&title, &out)
}

/// `load`: latency histogram, percentile spectrum, latency, throughput and
/// lag over time, findings.
pub fn load(l: &LoadResult) -> String {
    let mut out = String::new();
    tables::load_summary(&mut out, l);
    charts::load_charts(&mut out, l);
    findings(&mut out, &l.findings);
    page(&format!("whyslow load {}", l.setup.target), &out)
}

/// `compare`: each percentile of A and B side by side, the verdict and gates.
pub fn compare(c: &Comparison) -> String {
    let mut out = String::new();
    tables::comparison(&mut out, c);
    page(
        &format!("whyslow compare {} → {}", c.a.file, c.b.file),
        &out,
    )
}

/// `demo`: every scenario's reports one after another.
/// Every run of `demo` that kept its report: findings, waterfall, ladders.
pub fn demo(doc: &DemoDocument) -> String {
    // The tables of the text output first: one at a time, then under load.
    let mut out = format!("<pre>{}</pre>\n", escape(&crate::demo::text(doc)));
    for row in &doc.rows {
        let Some(r) = &row.report else { continue };
        let title = format!("{} ({}): {}", row.scenario, row.variant, row.request);
        let _ = writeln!(out, "<h2>{}</h2>\n{}", escape(&title), report_body(r));
    }
    page("whyslow demo", &out)
}

/// The body of `report` without the page around it, for `demo`.
pub fn report_body(r: &Report) -> String {
    let mut out = String::new();
    findings(&mut out, &r.findings);
    if let Some(t) = &r.timeline {
        waterfall::section(&mut out, t);
        ladder::section(&mut out, t, &r.findings);
    }
    out
}

#[cfg(test)]
mod tests;
