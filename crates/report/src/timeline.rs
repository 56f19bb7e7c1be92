//! A timeline in a few lines: connections, exchanges grouped by request.

use crate::{fmt_ms, Summary};
use std::collections::BTreeMap;
use std::fmt::Write;
use whyslow_model::{ExchangeRole, Timeline};

/// Request groups shown in text; JSON has every exchange.
const GROUPS_SHOWN: usize = 15;

pub fn summary(t: &Timeline) -> String {
    let mut out = String::new();
    let retrans: u64 = t
        .connections
        .iter()
        .map(|c| c.to_server.retransmissions + c.to_client.retransmissions)
        .sum();
    let zero: u64 = t
        .connections
        .iter()
        .map(|c| c.to_server.zero_windows + c.to_client.zero_windows)
        .sum();
    let tls = t.connections.iter().filter(|c| c.tls).count();
    let _ = writeln!(
        out,
        "  {} TCP connections ({} TLS), {} exchanges; {} retransmissions, {} zero windows",
        t.connections.len(),
        tls,
        t.exchanges.len(),
        retrans,
        zero
    );
    let mut servers: BTreeMap<String, usize> = BTreeMap::new();
    for c in &t.connections {
        *servers.entry(c.server.to_string()).or_default() += 1;
    }
    for (server, n) in servers.iter().take(GROUPS_SHOWN) {
        let _ = writeln!(out, "    server {server}: {n} connection(s)");
    }
    let mut groups: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for e in &t.exchanges {
        let server = t
            .connection(e.connection)
            .map(|c| c.server.port())
            .unwrap_or(0);
        let label = match e.role {
            ExchangeRole::Inbound => e.request.clone(),
            ExchangeRole::Outbound => format!("  → :{server} {}", e.request),
        };
        groups.entry(label).or_default().push(e.duration_us());
    }
    if groups.is_empty() {
        return out;
    }
    let _ = writeln!(
        out,
        "  {:<40} {:>6} {:>9} {:>9} {:>9}",
        "request", "count", "min", "median", "max"
    );
    let mut rows: Vec<_> = groups.into_iter().collect();
    // Inbound requests first, each followed by the calls made to serve it.
    rows.sort_by_key(|(label, v)| (label.starts_with("  →"), std::cmp::Reverse(v.len())));
    for (request, durations) in rows.iter().take(GROUPS_SHOWN) {
        let Some(s) = Summary::of(durations.iter().copied()) else {
            continue;
        };
        let _ = writeln!(
            out,
            "  {:<40} {:>6} {:>9} {:>9} {:>9}",
            truncate(request, 40),
            s.count,
            fmt_ms(s.min),
            fmt_ms(s.median),
            fmt_ms(s.max)
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
