//! The SQL summary per inbound request kind (case 003's dbitrace, from the
//! wire and for any client): statements by kind, distinct shapes, repeats,
//! database time summed and on the critical path, for the median and the
//! slowest request; and the shapes that cost the most across the kind. The
//! DNS queries of the same requests beside them: queries, NXDOMAIN, never
//! answered, and their time.

use crate::intervals::covered_us;
use crate::request_calls::{by_shape, Call, RequestCalls};
use std::collections::{BTreeMap, HashSet};
use std::net::SocketAddr;
use whyslow_model::prepared::prepared_verb;
use whyslow_model::{
    DnsCounts, Protocol, SqlRequest, SqlShape, SqlSummary, StatementCounts, Status,
};

/// Shapes listed per ranking: enough to hold the few that matter
/// (case 003 fixed three shapes), short enough to read.
pub const TOP_SHAPES: usize = 5;

/// The statement kind from its first keyword, or for one prepared before
/// the capture, from its command tag's.
fn count(counts: &mut StatementCounts, statement: &str) {
    let first = prepared_verb(statement).unwrap_or_else(|| {
        statement
            .trim_start_matches(|c: char| c == '(' || c.is_whitespace())
            .split(|c: char| !c.is_ascii_alphabetic())
            .next()
            .unwrap_or("")
    });
    let slot = match first.to_ascii_uppercase().as_str() {
        "SELECT" => &mut counts.select,
        "INSERT" => &mut counts.insert,
        "UPDATE" => &mut counts.update,
        "DELETE" => &mut counts.delete,
        _ => &mut counts.other,
    };
    *slot += 1;
    counts.total += 1;
}

/// One request's DNS queries summed up. A query never answered cost the
/// client its wait until it asked again (the next query of the same
/// question), else until its next query of any name (it gave up and went
/// on), else nothing measurable.
fn dns(r: &RequestCalls, queries: &[Call]) -> DnsCounts {
    let rcode = |c: &&Call, code: &str| matches!(&c.exchange.status, Some(Status::Dns(s)) if s.split(' ').next() == Some(code));
    let next = |c: &Call, same: bool| {
        queries
            .iter()
            .filter(|n| n.start > c.start && (!same || n.exchange.request == c.exchange.request))
            .map(|n| n.start)
            .min()
    };
    let spans: Vec<(u64, u64)> = queries
        .iter()
        .map(|c| match c.exchange.response_last_at_us {
            Some(_) => (c.start, c.end.max(c.start)),
            None => (c.start, next(c, true).or(next(c, false)).unwrap_or(c.start)),
        })
        .collect();
    DnsCounts {
        queries: queries.len() as u32,
        nxdomain: queries.iter().filter(|c| rcode(c, "NXDOMAIN")).count() as u32,
        unanswered: queries
            .iter()
            .filter(|c| c.exchange.response_last_at_us.is_none())
            .count() as u32,
        dns_us: spans.iter().map(|(a, b)| b.saturating_sub(*a)).sum(),
        dns_critical_us: covered_us(spans.iter().copied(), r.waiting()),
    }
}

/// One request's SQL statements summed up.
fn request(r: &RequestCalls, sql: &[Call], queries: &[Call]) -> SqlRequest {
    let mut statements = StatementCounts::default();
    let mut seen = HashSet::new();
    let mut duplicates = 0;
    for c in sql {
        count(&mut statements, &c.exchange.request);
        let key = (
            c.server,
            c.exchange.request.as_str(),
            c.exchange.params_digest,
        );
        if c.exchange.params_digest.is_some() && !seen.insert(key) {
            duplicates += 1;
        }
    }
    SqlRequest {
        exchange: r.inbound.id,
        total_us: r.total_us(),
        statements,
        shapes: by_shape(sql).len() as u32,
        duplicates,
        db_us: sql.iter().map(Call::duration_us).sum(),
        db_critical_us: covered_us(sql.iter().map(|c| (c.start, c.end)), r.waiting()),
        dns: dns(r, queries),
    }
}

/// A request's summary and its SQL calls.
type WithCalls<'a> = (SqlRequest, Vec<Call<'a>>);

/// Per request kind of the service, busiest first, over the requests told
/// apart (the per-kind rates of the others are in the capture's groups):
/// those that sent SQL, with their DNS queries beside; for a kind that sent
/// none, those that looked a name up. Kinds that did neither are left out.
pub fn summarize(requests: &[RequestCalls]) -> Vec<SqlSummary> {
    let mut kinds: BTreeMap<(SocketAddr, &str), Vec<WithCalls>> = BTreeMap::new();
    for r in requests.iter().filter(|r| r.told_apart()) {
        let of = |p: fn(Protocol) -> bool| -> Vec<Call> {
            r.calls
                .iter()
                .filter(|c| p(c.protocol()))
                .copied()
                .collect()
        };
        let sql = of(Protocol::is_sql);
        let queries = of(|p| p == Protocol::Dns);
        if !sql.is_empty() || !queries.is_empty() {
            let kind = kinds
                .entry((r.server, r.inbound.request.as_str()))
                .or_default();
            kind.push((request(r, &sql, &queries), sql));
        }
    }
    for reqs in kinds.values_mut() {
        if reqs.iter().any(|(s, _)| s.statements.total > 0) {
            reqs.retain(|(s, _)| s.statements.total > 0);
        }
    }
    let mut out: Vec<SqlSummary> = kinds
        .into_iter()
        .map(|((server, request), mut reqs)| {
            reqs.sort_by_key(|(s, _)| (s.total_us, s.exchange));
            let (top_by_count, top_by_time) = top_shapes(&reqs);
            SqlSummary {
                server: server.to_string(),
                request: request.to_string(),
                requests: reqs.len() as u32,
                median: reqs[whyslow_model::stats::nearest_rank(reqs.len(), 0.5)]
                    .0
                    .clone(),
                worst: reqs[reqs.len() - 1].0.clone(),
                top_by_count,
                top_by_time,
            }
        })
        .collect();
    out.sort_by_key(|s| std::cmp::Reverse(s.requests));
    out
}

/// The shapes with the most statements and with the most time, per request.
fn top_shapes(reqs: &[WithCalls]) -> (Vec<SqlShape>, Vec<SqlShape>) {
    let mut sums: BTreeMap<&str, (u64, u64)> = BTreeMap::new();
    for (_, sql) in reqs {
        for c in sql {
            let s = sums.entry(c.exchange.request.as_str()).or_default();
            s.0 += 1;
            s.1 += c.duration_us();
        }
    }
    let n = reqs.len().max(1) as u64;
    let shapes: Vec<SqlShape> = sums
        .into_iter()
        .map(|(statement, (count, us))| SqlShape {
            statement: statement.to_string(),
            per_request: count as f64 / n as f64,
            time_us_per_request: us / n,
        })
        .collect();
    let mut by_count = shapes.clone();
    by_count.sort_by(|a, b| b.per_request.total_cmp(&a.per_request));
    by_count.truncate(TOP_SHAPES);
    let mut by_time = shapes;
    by_time.sort_by_key(|s| std::cmp::Reverse(s.time_us_per_request));
    by_time.truncate(TOP_SHAPES);
    (by_count, by_time)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request_calls::by_request;
    use crate::request_calls::tests::call;
    use crate::testkit::{exchange, request_0, servers};
    use whyslow_model::{Exchange, Protocol};

    fn sql(id: u32, parent: u32, at: u64, text: &str, digest: u64) -> Exchange {
        let mut e = call(id, 1, parent, (at, at + 1000));
        e.protocol = Protocol::Postgres;
        e.request = text.into();
        e.params_digest = Some(digest);
        e
    }

    fn checkout(first_id: u32, parent: u32, at: u64, orders: u64) -> Vec<Exchange> {
        let mut v = vec![exchange(
            parent,
            0,
            (at, at + 10),
            (at + 50_000, at + 50_010),
        )];
        v[0].request = "GET /checkout".into();
        let mut id = first_id;
        let mut t = at + 100;
        let mut push = |text: &str, digest: u64| {
            v.push(sql(id, parent, t, text, digest));
            id += 1;
            t += 1000;
        };
        push("SELECT * FROM orders WHERE customer = $1", 7);
        for o in 0..orders {
            push("SELECT * FROM items WHERE order_id = $1", o);
            push("SELECT rate FROM tax WHERE region = $1", 1);
        }
        push("UPDATE carts SET seen = $1", 3);
        push("INSERT INTO audit VALUES ($1)", 4);
        v
    }

    #[test]
    fn counts_kinds_shapes_duplicates_and_time_of_the_median_and_worst_request() {
        let mut exchanges = checkout(100, 0, 0, 3);
        exchanges.extend(checkout(200, 1, 100_000, 10));
        exchanges.extend(checkout(300, 2, 200_000, 5));
        let t = servers(&[8080, 5432]).with(exchanges);
        let s = summarize(&by_request(&t));
        assert_eq!(s.len(), 1);
        let s = &s[0];
        assert_eq!((s.request.as_str(), s.requests), ("GET /checkout", 3));
        // Equal durations: the median and the worst go by exchange id.
        assert_eq!(s.median.exchange, 1);
        assert_eq!(s.worst.exchange, 2);
        let w = &s.worst;
        assert_eq!(
            w.statements,
            StatementCounts {
                select: 11,
                insert: 1,
                update: 1,
                delete: 0,
                other: 0,
                total: 13
            }
        );
        assert_eq!(
            (w.shapes, w.duplicates),
            (5, 4),
            "the tax rate read 5 times"
        );
        assert_eq!(w.db_us, 13 * 1000);
        assert_eq!(w.db_critical_us, 13 * 1000, "one after another");
        assert_eq!(
            s.top_by_count[0].statement,
            "SELECT * FROM items WHERE order_id = $1"
        );
        assert!((s.top_by_count[0].per_request - 6.0).abs() < 1e-9);
        assert_eq!(s.top_by_time[0].time_us_per_request, 6000);
    }

    #[test]
    fn requests_without_sql_have_no_summary() {
        let mut e = call(1, 1, 0, (100, 200));
        e.protocol = Protocol::Redis;
        let t = servers(&[8080, 6379]).with(vec![request_0(1000), e]);
        assert!(summarize(&by_request(&t)).is_empty());
    }

    #[test]
    fn a_request_that_looked_names_up_has_a_dns_line() {
        // Two search names that failed, then the answer, then one lost.
        let query = |id, at, rcode: Option<&str>| {
            let mut e = call(id, 1, 0, (at, at + 5_000));
            e.protocol = Protocol::Dns;
            e.request = "A api.internal".into();
            match rcode {
                Some(r) => e.status = Some(whyslow_model::Status::Dns(r.into())),
                None => (e.response_first_at_us, e.response_last_at_us) = (None, None),
            }
            e
        };
        let t = servers(&[8080, 53]).with(vec![
            request_0(30_000),
            query(1, 100, Some("NXDOMAIN")),
            query(2, 5_200, Some("NXDOMAIN")),
            query(3, 10_300, Some("NOERROR")),
            query(4, 15_400, None),
            query(5, 20_000, Some("NOERROR")),
        ]);
        let s = summarize(&by_request(&t));
        assert_eq!(s.len(), 1, "a kind with lookups and no SQL");
        let d = s[0].median.dns;
        assert_eq!((d.queries, d.nxdomain, d.unanswered), (5, 2, 1));
        assert_eq!(s[0].median.statements.total, 0);
        // Four answered in 5 ms each; the lost one waited until asked again.
        assert_eq!(d.dns_us, 4 * 5_000 + (20_000 - 15_400), "{d:?}");
    }

    #[test]
    fn kind_comes_from_the_first_keyword() {
        let mut c = StatementCounts::default();
        for s in [
            "select 1",
            "(SELECT 1) UNION (SELECT 2)",
            "delete from t",
            "WITH x AS (..) SELECT",
            "BEGIN",
        ] {
            count(&mut c, s);
        }
        assert_eq!((c.select, c.delete, c.other, c.total), (2, 1, 2, 5));
    }

    #[test]
    fn a_statement_prepared_before_the_capture_counts_by_its_tag() {
        use whyslow_model::prepared::{prepared_label, PreparedShape};
        let mut c = StatementCounts::default();
        for verb in [Some("UPDATE"), Some("SELECT"), None] {
            let shape = PreparedShape {
                params: Some(1),
                verb,
                ..Default::default()
            };
            count(&mut c, &prepared_label("S_1", shape));
        }
        assert_eq!((c.update, c.select, c.other, c.total), (1, 1, 1, 3));
    }
}
