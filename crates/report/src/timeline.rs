//! A timeline in a few lines: connections, exchanges grouped by request.

use crate::{fmt_ms, Summary};
use std::collections::{BTreeMap, HashMap};
use std::fmt::Write;
use whyslow_model::{
    CaptureSummary, Connection, ExchangeGroup, ExchangeRole, Protocol, Timeline, TlsFacts,
};

/// Request groups shown in text; JSON has every exchange.
const GROUPS_SHOWN: usize = 15;

pub fn summary(t: &Timeline) -> String {
    let mut out = counts(t);
    let mut servers: BTreeMap<(String, &str), Vec<&Connection>> = BTreeMap::new();
    for c in &t.connections {
        let key = (c.server.to_string(), c.protocol.name());
        servers.entry(key).or_default().push(c);
    }
    for ((server, proto), conns) in servers.iter().take(GROUPS_SHOWN) {
        let n = conns.len();
        let _ = writeln!(
            out,
            "    server {server} ({proto}): {n} connection(s){}",
            tls_note(conns)
        );
    }
    out.push_str(&request_groups(t));
    out
}

/// A whole capture's counts and request groups (`analyze`): every exchange
/// counted, percentiles from each group's histogram. `evidence`: the
/// connections kept, for each server's TLS note.
pub fn capture_summary(s: &CaptureSummary, evidence: &Timeline) -> String {
    let mut out = format!(
        "  {} TCP connections ({} TLS), {} exchanges; {} retransmissions, {} zero windows\n",
        s.connections, s.tls_connections, s.exchanges, s.retransmissions, s.zero_windows
    );
    for server in s.servers.iter().take(GROUPS_SHOWN) {
        let conns: Vec<&Connection> = evidence
            .connections
            .iter()
            .filter(|c| c.server.to_string() == server.server && c.protocol == server.protocol)
            .collect();
        let _ = writeln!(
            out,
            "    server {} ({}): {} connection(s), {} exchange(s){}",
            server.server,
            server.protocol.name(),
            server.connections,
            server.exchanges,
            tls_note(&conns)
        );
    }
    if s.groups.is_empty() {
        return out;
    }
    let _ = writeln!(
        out,
        "  {:<44} {:>8} {:>7} {:>9} {:>9} {:>9} {:>9}",
        "request", "count", "per req", "median", "p90", "p99", "max"
    );
    let inbound = s.groups.iter().filter(|g| g.made_for.is_none());
    for kind in inbound.take(GROUPS_SHOWN) {
        group_line(&mut out, kind, "");
        let calls = s
            .groups
            .iter()
            .filter(|g| g.made_for.as_deref() == Some(kind.label.as_str()));
        for call in calls.take(GROUPS_SHOWN) {
            group_line(&mut out, call, "  ");
        }
    }
    let orphans = s
        .groups
        .iter()
        .filter(|g| g.made_for.as_deref() == Some(""));
    for call in orphans.take(GROUPS_SHOWN) {
        group_line(&mut out, call, "  ");
    }
    out
}

fn group_line(out: &mut String, g: &ExchangeGroup, indent: &str) {
    let per = g
        .requests_of_kind
        .filter(|&n| n > 0)
        .map_or(String::new(), |n| {
            format!("{:.1}", g.count as f64 / n as f64)
        });
    let label = match g.made_for.as_deref() {
        Some("") => format!("{indent}{} (no request)", g.label),
        _ => format!("{indent}{}", g.label),
    };
    let _ = writeln!(
        out,
        "  {:<44} {:>8} {per:>7} {:>9} {:>9} {:>9} {:>9}",
        truncate(&label, 44),
        g.count,
        fmt_ms(g.p50_us),
        fmt_ms(g.p90_us),
        fmt_ms(g.p99_us),
        fmt_ms(g.max_us)
    );
}

/// "; TLS 1.3 TLS_AES_128_GCM_SHA256 ALPN h2, handshakes 1 full + 3 resumed,
/// median 2.31 ms" for one server's TLS connections (the first one's version,
/// suite and ALPN); empty without TLS.
fn tls_note(conns: &[&Connection]) -> String {
    let facts: Vec<&TlsFacts> = conns.iter().filter_map(|c| c.tls_facts.as_ref()).collect();
    let Some(first) = facts.first() else {
        return String::new();
    };
    let mut out = String::from("; TLS");
    for p in [&first.version, &first.cipher].into_iter().flatten() {
        let _ = write!(out, " {p}");
    }
    if let Some(alpn) = &first.alpn {
        let _ = write!(out, " ALPN {alpn}");
    }
    let mut suites: Vec<(&Option<String>, &Option<String>)> =
        facts.iter().map(|f| (&f.version, &f.cipher)).collect();
    suites.sort_unstable();
    suites.dedup();
    if suites.len() > 1 {
        let _ = write!(out, " (and {} other suite(s))", suites.len() - 1);
    }
    let resumed = facts.iter().filter(|f| f.resumed).count();
    let _ = write!(
        out,
        ", handshakes {} full + {resumed} resumed",
        facts.len() - resumed
    );
    let mut times: Vec<u64> = facts.iter().filter_map(|f| f.handshake_us).collect();
    times.sort_unstable();
    if !times.is_empty() {
        let median = whyslow_model::stats::percentile(&times, 0.5);
        let _ = write!(out, ", median {}", fmt_ms(median));
    }
    out
}

/// "N TCP connections (T TLS), E exchanges; R retransmissions, Z zero windows".
fn counts(t: &Timeline) -> String {
    let both = |f: fn(&whyslow_model::DirectionStats) -> u64| -> u64 {
        t.connections
            .iter()
            .map(|c| f(&c.to_server) + f(&c.to_client))
            .sum()
    };
    format!(
        "  {} TCP connections ({} TLS), {} exchanges; {} retransmissions, {} zero windows\n",
        t.connections.len(),
        t.connections.iter().filter(|c| c.tls).count(),
        t.exchanges.len(),
        both(|s| s.retransmissions),
        both(|s| s.zero_windows)
    )
}

/// One line of the request table: a request kind, or a call made for one.
struct Row {
    label: String,
    durations: Vec<u64>,
    /// Calls: how many inbound requests of the kind they were made for.
    per: Option<usize>,
}

/// Exchanges grouped by request kind. Inbound kinds come first, each followed
/// by the calls made for its requests, grouped by backing server and
/// normalized request; calls attributed to no request come last.
fn request_groups(t: &Timeline) -> String {
    let server: HashMap<u32, (u16, Protocol)> = t
        .connections
        .iter()
        .map(|c| (c.id, (c.server.port(), c.protocol)))
        .collect();
    let on = |conn: u32| server.get(&conn).copied().unwrap_or((0, Protocol::Unknown));
    let kind_of: HashMap<u32, String> = t
        .exchanges
        .iter()
        .filter(|e| e.role == ExchangeRole::Inbound)
        .map(|e| {
            let (port, proto) = on(e.connection);
            (e.id, proto.request_kind(&e.request, port))
        })
        .collect();
    let mut kinds: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
    let mut calls: BTreeMap<(&str, String), Vec<u64>> = BTreeMap::new();
    for e in &t.exchanges {
        let duration = e.duration_us();
        match e.role {
            ExchangeRole::Inbound => {
                let kind = kind_of.get(&e.id).map_or("", String::as_str);
                kinds.entry(kind).or_default().push(duration);
            }
            ExchangeRole::Outbound => {
                let parent = e
                    .parent
                    .and_then(|p| kind_of.get(&p))
                    .map_or("", String::as_str);
                let (port, proto) = on(e.connection);
                let label = format!("→ {} :{port} {}", proto.name(), e.request);
                calls.entry((parent, label)).or_default().push(duration);
            }
        }
    }
    let mut kind_list: Vec<_> = kinds.into_iter().collect();
    kind_list.sort_by_key(|(_, v)| std::cmp::Reverse(v.len()));
    let mut rows = Vec::new();
    for (kind, durations) in kind_list.into_iter().take(GROUPS_SHOWN) {
        let n = durations.len();
        rows.push(Row {
            label: kind.to_string(),
            durations,
            per: None,
        });
        rows.extend(call_rows(&calls, kind, Some(n)));
    }
    rows.extend(call_rows(&calls, "", None).map(|mut r| {
        r.label = format!("{} (no request)", r.label);
        r
    }));
    render_rows(&rows)
}

/// The call groups made for requests of `kind`, most frequent first.
fn call_rows<'a>(
    calls: &'a BTreeMap<(&str, String), Vec<u64>>,
    kind: &'a str,
    per: Option<usize>,
) -> impl Iterator<Item = Row> + 'a {
    let mut mine: Vec<_> = calls.iter().filter(|((k, _), _)| *k == kind).collect();
    mine.sort_by_key(|(_, v)| std::cmp::Reverse(v.len()));
    mine.into_iter()
        .take(GROUPS_SHOWN)
        .map(move |((_, label), v)| Row {
            label: format!("  {label}"),
            durations: v.clone(),
            per,
        })
}

fn render_rows(rows: &[Row]) -> String {
    let mut out = String::new();
    if rows.is_empty() {
        return out;
    }
    let _ = writeln!(
        out,
        "  {:<48} {:>6} {:>7} {:>9} {:>9} {:>9}",
        "request", "count", "per req", "min", "median", "max"
    );
    for row in rows {
        let Some(s) = Summary::of(row.durations.iter().copied()) else {
            continue;
        };
        let per = row.per.filter(|&n| n > 0).map_or(String::new(), |n| {
            format!("{:.1}", s.count as f64 / n as f64)
        });
        let (min, median, max) = (fmt_ms(s.min), fmt_ms(s.median), fmt_ms(s.max));
        let _ = writeln!(
            out,
            "  {:<48} {:>6} {per:>7} {min:>9} {median:>9} {max:>9}",
            truncate(&row.label, 48),
            s.count
        );
    }
    out
}

fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        s.chars().take(n - 1).chain(['…']).collect()
    }
}
