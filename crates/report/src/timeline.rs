//! A timeline in a few lines: connections, exchanges grouped by request.

use crate::{fmt_ms, Summary};
use std::collections::{BTreeMap, HashMap};
use std::fmt::Write;
use whyslow_model::{ExchangeRole, Timeline};

/// Request groups shown in text; JSON has every exchange.
const GROUPS_SHOWN: usize = 15;

pub fn summary(t: &Timeline) -> String {
    let mut out = counts(t);
    let mut servers: BTreeMap<String, usize> = BTreeMap::new();
    for c in &t.connections {
        *servers.entry(c.server.to_string()).or_default() += 1;
    }
    for (server, n) in servers.iter().take(GROUPS_SHOWN) {
        let _ = writeln!(out, "    server {server}: {n} connection(s)");
    }
    out.push_str(&request_groups(t));
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

/// Exchanges grouped by request, inbound first, each with min/median/max.
fn request_groups(t: &Timeline) -> String {
    let port: HashMap<u32, u16> = t
        .connections
        .iter()
        .map(|c| (c.id, c.server.port()))
        .collect();
    let mut groups: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for e in &t.exchanges {
        let label = match e.role {
            ExchangeRole::Inbound => e.request.clone(),
            ExchangeRole::Outbound => format!(
                "  → :{} {}",
                port.get(&e.connection).unwrap_or(&0),
                e.request
            ),
        };
        groups.entry(label).or_default().push(e.duration_us());
    }
    let mut out = String::new();
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
        let (min, median, max) = (fmt_ms(s.min), fmt_ms(s.median), fmt_ms(s.max));
        let _ = writeln!(
            out,
            "  {:<40} {:>6} {min:>9} {median:>9} {max:>9}",
            truncate(request, 40),
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
