//! The SQL summary per inbound request kind as text: one row for the
//! median request and one for the slowest, then the costliest shapes.

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

pub fn text(kinds: &[SqlSummary]) -> String {
    let mut out = String::new();
    if kinds.is_empty() {
        return out;
    }
    let _ = writeln!(out, "\nSQL per request:");
    for k in kinds.iter().take(KINDS_SHOWN) {
        let _ = writeln!(
            out,
            "  {} to {} ({} requests with SQL)",
            k.request, k.server, k.requests
        );
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
    }
}
