//! The probe's text: one row per request, min/median/max, findings and
//! budget checks.

use crate::{fmt_ms, Summary};
use std::fmt::Write;
use whyslow_model::{DnsWalk, PhaseName, Report, RequestPhases};

/// The first line of the text: what was asked, as a person would say it.
pub fn header(
    method: &str,
    url: &str,
    requests: usize,
    connections: u32,
    nodelay: bool,
    split: bool,
) -> String {
    format!(
        "{method} {url}  {requests} request(s), {connections} connection(s) opened, TCP_NODELAY {}, {} writes",
        if nodelay { "on" } else { "off" },
        if split { "split" } else { "coalesced" },
    )
}

/// What the dns phase was spent on: each name the resolver was asked.
pub fn dns_walk(w: &DnsWalk) -> String {
    let mut out = format!(
        "\ndns: {} asked again as the system resolver asks it ({}, ndots:{}): {}\n",
        w.name,
        w.resolver,
        w.ndots,
        fmt_ms(w.total_us)
    );
    let width = w.steps.iter().map(|s| s.name.len()).max().unwrap_or(0);
    for s in &w.steps {
        let retried = match s.tries {
            0 | 1 => String::new(),
            n => format!(
                "  {n} tries, {} waiting for lost answers",
                fmt_ms(s.retry_us)
            ),
        };
        let _ = writeln!(
            out,
            "  {:<width$}  {:<9} {:>10}{retried}",
            s.name,
            s.answer,
            fmt_ms(s.us)
        );
    }
    if w.search_names > 0 {
        let _ = writeln!(
            out,
            "  search list: {} name(s) tried first, {} (a fully qualified name, \"{}.\", skips them)",
            w.search_names,
            fmt_ms(w.search_us),
            w.name.trim_end_matches('.')
        );
    }
    if w.retry_us > 0 {
        let _ = writeln!(
            out,
            "  retries: {} waiting for answers that never came",
            fmt_ms(w.retry_us)
        );
    }
    out
}

/// The whole text of `probe` for its report, under `header`.
pub fn text(header: &str, report: &Report) -> String {
    let mut out = format!("{header}\n");
    let requests = report
        .sections
        .first()
        .map(|s| s.requests.as_slice())
        .unwrap_or(&[]);
    if requests.is_empty() {
        return out;
    }
    out.push('\n');
    out.push_str(&table(requests));
    out.push('\n');
    out.push_str(&summary(requests));
    for line in [first_vs_reused(requests), tls_line(requests)]
        .into_iter()
        .flatten()
    {
        let _ = writeln!(out, "{line}");
    }
    if let Some(w) = report.sections.first().and_then(|s| s.dns.as_ref()) {
        out.push_str(&dns_walk(w));
    }
    if !report.findings.is_empty() {
        out.push_str("\nfindings\n");
        out.push_str(&crate::findings::text(&report.findings));
    }
    for c in &report.checks {
        let verdict = if c.passed { "ok" } else { "BROKEN" };
        let _ = writeln!(
            out,
            "budget {}: {verdict} (worst {} at {})",
            c.rule,
            fmt_ms(c.observed as u64),
            c.worst.as_deref().unwrap_or("-")
        );
    }
    out
}

fn cell(us: u64, applies: bool) -> String {
    if applies {
        fmt_ms(us)
    } else {
        "-".to_string()
    }
}

/// One row per request: conn, dns, connect, tls, send, wait, receive, total, status.
pub fn table(requests: &[RequestPhases]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "  {:>3}  {:<7} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}  status",
        "#", "conn", "dns", "connect", "tls", "send", "wait", "receive", "total"
    );
    for r in requests {
        let new = !r.reused;
        let conn = if new {
            format!("new#{}", r.connection)
        } else {
            "reused".into()
        };
        let _ = writeln!(
            out,
            "  {:>3}  {:<7} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}  {}",
            r.index + 1,
            conn,
            cell(r.dns_us, new),
            cell(r.connect_us, new),
            cell(r.tls_us, new && r.tls.is_some()),
            fmt_ms(r.send_us),
            fmt_ms(r.wait_us),
            fmt_ms(r.receive_us),
            fmt_ms(r.total_us),
            r.status
        );
    }
    out
}

/// min / median / max per phase; phases that never happened are left out.
pub fn summary(requests: &[RequestPhases]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "  {:<8} {:>9} {:>9} {:>9}",
        "phase", "min", "median", "max"
    );
    for phase in PhaseName::ALL {
        let Some(s) = Summary::of(requests.iter().map(|r| r.phase_us(phase))) else {
            continue;
        };
        if s.max == 0 && phase != PhaseName::Total {
            continue;
        }
        let _ = writeln!(
            out,
            "  {:<8} {:>9} {:>9} {:>9}",
            phase.as_str(),
            fmt_ms(s.min),
            fmt_ms(s.median),
            fmt_ms(s.max)
        );
    }
    out
}

/// "first request (new connection) 0.61 ms; reused connection: median 44.2 ms".
pub fn first_vs_reused(requests: &[RequestPhases]) -> Option<String> {
    let first = requests.iter().find(|r| !r.reused)?;
    let reused = Summary::of(requests.iter().filter(|r| r.reused).map(|r| r.total_us))?;
    Some(format!(
        "first request (new connection): total {}; reused connection: median total {} over {} requests",
        fmt_ms(first.total_us),
        fmt_ms(reused.median),
        reused.count
    ))
}

/// The TLS facts of the first TLS connection, one line.
pub fn tls_line(requests: &[RequestPhases]) -> Option<String> {
    let resumed = requests
        .iter()
        .filter_map(|r| r.tls.as_ref().filter(|_| !r.reused))
        .filter(|t| t.resumed)
        .count();
    let opened = requests
        .iter()
        .filter(|r| !r.reused && r.tls.is_some())
        .count();
    let t = requests.iter().find_map(|r| r.tls.as_ref())?;
    Some(format!(
        "TLS: {} {} ALPN {}; {} of {} handshakes resumed",
        t.version,
        t.cipher,
        t.alpn.as_deref().unwrap_or("none"),
        resumed,
        opened
    ))
}
