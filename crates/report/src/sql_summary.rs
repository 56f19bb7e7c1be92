//! The SQL summary per inbound request kind as text: one row for the
//! median request and one for the slowest, then the costliest shapes; and
//! where the requests looked names up, their DNS queries the same way.

use crate::{fmt_ms, kinds_left, KINDS_SHOWN};
use std::fmt::Write;
use whyslow_model::{SqlRequest, SqlShape, SqlSummary};

/// Statement text shown per shape; JSON has it whole.
const STATEMENT_CHARS: usize = 90;

fn row(out: &mut String, label: &str, r: &SqlRequest) {
    let c = &r.statements;
    let _ = writeln!(
        out,
        "    {label:<7} {:>6} {:>6} {:>6} {:>6} {:>6} {:>6} {:>6} {:>7} {:>10} {:>10} {:>10}",
        c.select,
        c.insert,
        c.update,
        c.delete,
        c.other,
        c.total,
        r.shapes,
        r.duplicates,
        fmt_ms(r.db_us),
        fmt_ms(r.db_critical_us),
        fmt_ms(r.total_us),
    );
}

fn shapes(out: &mut String, title: &str, list: &[SqlShape], value: impl Fn(&SqlShape) -> String) {
    let _ = writeln!(out, "    {title}:");
    for s in list {
        let text: String = s.statement.chars().take(STATEMENT_CHARS).collect();
        let more = if text.len() < s.statement.len() {
            "…"
        } else {
            ""
        };
        let _ = writeln!(out, "      {:>10}  {text}{more}", value(s));
    }
}

fn dns_row(out: &mut String, label: &str, r: &SqlRequest) {
    let d = &r.dns;
    let _ = writeln!(
        out,
        "    {label:<7} {:>7} {:>8} {:>10} {:>10} {:>10} {:>10}",
        d.queries,
        d.nxdomain,
        d.unanswered,
        fmt_ms(d.dns_us),
        fmt_ms(d.dns_critical_us),
        fmt_ms(r.total_us),
    );
}

fn dns(out: &mut String, k: &SqlSummary) {
    let _ = writeln!(
        out,
        "    {:<7} {:>7} {:>8} {:>10} {:>10} {:>10} {:>10}",
        "dns", "queries", "nxdomain", "unanswered", "in dns", "dns path", "request"
    );
    dns_row(out, "median", &k.median);
    if k.requests > 1 {
        dns_row(out, "worst", &k.worst);
    }
}

fn has_sql(k: &SqlSummary) -> bool {
    k.median.statements.total > 0 || k.worst.statements.total > 0 || !k.top_by_count.is_empty()
}

fn has_dns(k: &SqlSummary) -> bool {
    !k.median.dns.is_empty() || !k.worst.dns.is_empty()
}

pub fn text(kinds: &[SqlSummary]) -> String {
    let mut out = String::new();
    if kinds.is_empty() {
        return out;
    }
    let title = match (kinds.iter().any(has_sql), kinds.iter().any(has_dns)) {
        (true, true) => "SQL and DNS",
        (false, true) => "DNS",
        _ => "SQL",
    };
    let _ = writeln!(out, "\n{title} per request:");
    for k in kinds.iter().take(KINDS_SHOWN) {
        let with = match (has_sql(k), has_dns(k)) {
            (true, true) => "SQL and DNS",
            (false, true) => "DNS",
            _ => "SQL",
        };
        let _ = writeln!(
            out,
            "  {} to {} ({} requests with {with})",
            k.request, k.server, k.requests
        );
        if has_dns(k) {
            dns(&mut out, k);
        }
        if !has_sql(k) {
            continue;
        }
        let _ = writeln!(
            out,
            "    {:<7} {:>6} {:>6} {:>6} {:>6} {:>6} {:>6} {:>6} {:>7} {:>10} {:>10} {:>10}",
            "",
            "select",
            "insert",
            "update",
            "delete",
            "other",
            "total",
            "shapes",
            "repeats",
            "in db",
            "db path",
            "request"
        );
        row(&mut out, "median", &k.median);
        if k.requests > 1 {
            row(&mut out, "worst", &k.worst);
        }
        shapes(
            &mut out,
            "most statements per request",
            &k.top_by_count,
            |s| format!("{:.1} ×", s.per_request),
        );
        shapes(&mut out, "most time per request", &k.top_by_time, |s| {
            fmt_ms(s.time_us_per_request)
        });
    }
    kinds_left(&mut out, kinds.len());
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use whyslow_model::StatementCounts;

    #[test]
    fn shows_the_counts_and_cuts_long_statements() {
        let r = SqlRequest {
            exchange: 3,
            total_us: 110_000,
            statements: StatementCounts {
                select: 137,
                insert: 7,
                update: 32,
                delete: 1,
                other: 0,
                total: 177,
            },
            shapes: 12,
            duplicates: 40,
            db_us: 3_700_000,
            db_critical_us: 3_600_000,
            dns: Default::default(),
        };
        let long = format!("SELECT {} FROM t", "a, ".repeat(60));
        let k = SqlSummary {
            server: "127.0.0.1:8080".into(),
            request: "POST /pay".into(),
            requests: 1,
            median: r.clone(),
            worst: r,
            top_by_count: vec![SqlShape {
                statement: long.clone(),
                per_request: 137.0,
                time_us_per_request: 2_000_000,
            }],
            top_by_time: Vec::new(),
        };
        let t = text(&[k]);
        assert!(
            t.contains("POST /pay to 127.0.0.1:8080 (1 requests with SQL)"),
            "{t}"
        );
        let median = t
            .lines()
            .find(|l| l.trim_start().starts_with("median"))
            .unwrap();
        let cols: Vec<&str> = median.split_whitespace().collect();
        assert_eq!(
            &cols[1..9],
            ["137", "7", "32", "1", "0", "177", "12", "40"],
            "{t}"
        );
        assert!(!t.contains("worst"), "one request: no separate worst row");
        assert!(
            t.contains("137.0 ×") && t.contains('…') && !t.contains(&long),
            "{t}"
        );
        assert!(!t.contains("dns"), "no lookups: no DNS rows");
    }

    #[test]
    fn a_kind_that_looked_names_up_shows_its_queries() {
        let r = SqlRequest {
            exchange: 1,
            total_us: 48_000,
            dns: whyslow_model::DnsCounts {
                queries: 9,
                nxdomain: 6,
                unanswered: 1,
                dns_us: 45_000,
                dns_critical_us: 45_000,
            },
            ..Default::default()
        };
        let k = SqlSummary {
            server: "127.0.0.1:8080".into(),
            request: "GET /quote".into(),
            requests: 2,
            median: r.clone(),
            worst: r,
            top_by_count: Vec::new(),
            top_by_time: Vec::new(),
        };
        let t = text(&[k]);
        assert!(t.starts_with("\nDNS per request:"), "{t}");
        assert!(t.contains("(2 requests with DNS)"), "{t}");
        assert!(!t.contains("select"), "no SQL: no SQL table: {t}");
        let median = t
            .lines()
            .find(|l| l.trim_start().starts_with("median"))
            .unwrap();
        let cols: Vec<&str> = median.split_whitespace().collect();
        assert_eq!(&cols[1..4], ["9", "6", "1"], "{t}");
    }
}
