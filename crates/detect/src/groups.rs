//! Every exchange of a capture counted into its group — an inbound request
//! kind, or the calls to one backing service with one normalized request
//! made for a kind — with an HDR histogram of durations per group, so that
//! counts and percentiles cover the whole capture at fixed memory.

use hdrhistogram::Histogram;
use std::collections::{HashMap, HashSet};
use whyslow_model::{CaptureSummary, ExchangeGroup, ExchangeRole, Protocol, ServerCount, Timeline};

/// Groups kept apart per list (kinds, call groups); the rest share one
/// "(other …)" group. An HDR histogram of durations up to seconds at 3
/// significant digits is ~60 KiB, so 1 000 groups stay within ~60 MB even
/// when requests are not normalized well.
pub const MAX_GROUPS: usize = 1_000;
const OTHER_KINDS: &str = "(other request kinds)";
const OTHER_CALLS: &str = "→ (other calls)";

struct Group {
    durations: Histogram<u64>,
    sum_us: u128,
}

impl Group {
    fn new() -> Self {
        Group {
            durations: Histogram::new(3).expect("3 significant digits is a valid precision"),
            sum_us: 0,
        }
    }

    fn record(&mut self, us: u64) {
        // Auto-resizing: a value past the range grows it, never fails.
        let _ = self.durations.record(us);
        self.sum_us += u128::from(us);
    }
}

/// Counts over a capture, fed window by window (after attribution).
#[derive(Default)]
pub struct ExchangeGroups {
    kinds: HashMap<String, Group>,
    /// (kind made for, or "" for none; call label).
    calls: HashMap<(String, String), Group>,
    /// (connections, exchanges) per (server, protocol).
    servers: HashMap<(String, Protocol), (u64, u64)>,
    connections: u64,
    tls_connections: u64,
    retransmissions: u64,
    zero_windows: u64,
}

fn group<K: Eq + std::hash::Hash>(
    map: &mut HashMap<K, Group>,
    key: K,
    other: impl FnOnce() -> K,
) -> &mut Group {
    if map.len() >= MAX_GROUPS && !map.contains_key(&key) {
        return map.entry(other()).or_insert_with(Group::new);
    }
    map.entry(key).or_insert_with(Group::new)
}

impl ExchangeGroups {
    /// Counts one window. `headers`: connections the window carries only as
    /// headers (counted in the window where they end).
    pub fn add(&mut self, t: &Timeline, headers: &HashSet<u32>) {
        for c in t.connections.iter().filter(|c| !headers.contains(&c.id)) {
            self.connections += 1;
            self.tls_connections += u64::from(c.tls);
            self.retransmissions += c.to_server.retransmissions + c.to_client.retransmissions;
            self.zero_windows += c.to_server.zero_windows + c.to_client.zero_windows;
            self.servers
                .entry((c.server.to_string(), c.protocol))
                .or_default()
                .0 += 1;
        }
        let mut per_connection: HashMap<u32, u64> = HashMap::new();
        for e in &t.exchanges {
            *per_connection.entry(e.connection).or_default() += 1;
        }
        for c in &t.connections {
            if let Some(&n) = per_connection.get(&c.id) {
                let key = (c.server.to_string(), c.protocol);
                self.servers.entry(key).or_default().1 += n;
            }
        }
        let on: HashMap<u32, (u16, Protocol)> = t
            .connections
            .iter()
            .map(|c| (c.id, (c.server.port(), c.protocol)))
            .collect();
        let on = |id: u32| on.get(&id).copied().unwrap_or((0, Protocol::Unknown));
        let kind_of: HashMap<u32, String> = t
            .exchanges
            .iter()
            .filter(|e| e.role == ExchangeRole::Inbound)
            .map(|e| {
                let (port, proto) = on(e.connection);
                (e.id, proto.request_kind(&e.request, port))
            })
            .collect();
        for e in &t.exchanges {
            let us = e.duration_us();
            if e.role == ExchangeRole::Inbound {
                let kind = kind_of[&e.id].clone();
                group(&mut self.kinds, kind, || OTHER_KINDS.to_string()).record(us);
            } else {
                let made_for = e
                    .parent
                    .and_then(|p| kind_of.get(&p))
                    .cloned()
                    .unwrap_or_default();
                let (port, proto) = on(e.connection);
                let label = format!("→ {} :{port} {}", proto.name(), e.request);
                let other = made_for.clone();
                group(&mut self.calls, (made_for, label), || {
                    (other, OTHER_CALLS.to_string())
                })
                .record(us);
            }
        }
    }

    /// Fills the counts and groups of `summary`: inbound kinds by count,
    /// each followed by its call groups by count; calls made for no request last.
    pub fn finish(self, summary: &mut CaptureSummary) {
        summary.connections = self.connections;
        summary.tls_connections = self.tls_connections;
        summary.retransmissions = self.retransmissions;
        summary.zero_windows = self.zero_windows;
        let mut servers: Vec<ServerCount> = self
            .servers
            .into_iter()
            .map(
                |((server, protocol), (connections, exchanges))| ServerCount {
                    server,
                    protocol,
                    connections,
                    exchanges,
                },
            )
            .collect();
        servers.sort_by(|a, b| {
            a.server
                .cmp(&b.server)
                .then(a.protocol.name().cmp(b.protocol.name()))
        });
        summary.servers = servers;
        let mut kinds: Vec<(String, Group)> = self.kinds.into_iter().collect();
        kinds.sort_by(|a, b| by_count(&a.1, &b.1).then(a.0.cmp(&b.0)));
        let mut calls: Vec<((String, String), Group)> = self.calls.into_iter().collect();
        calls.sort_by(|a, b| by_count(&a.1, &b.1).then(a.0.cmp(&b.0)));
        let mut groups = Vec::new();
        for (kind, g) in &kinds {
            let n = g.durations.len();
            groups.push(row(kind.clone(), None, None, g));
            for ((made_for, label), c) in calls.iter().filter(|((k, _), _)| k == kind) {
                groups.push(row(label.clone(), Some(made_for.clone()), Some(n), c));
            }
        }
        let known: HashSet<&String> = kinds.iter().map(|(k, _)| k).collect();
        for ((made_for, label), c) in calls.iter().filter(|((k, _), _)| !known.contains(k)) {
            groups.push(row(label.clone(), Some(made_for.clone()), None, c));
        }
        summary.groups = groups;
    }
}

fn by_count(a: &Group, b: &Group) -> std::cmp::Ordering {
    b.durations.len().cmp(&a.durations.len())
}

fn row(
    label: String,
    made_for: Option<String>,
    requests_of_kind: Option<u64>,
    g: &Group,
) -> ExchangeGroup {
    let h = &g.durations;
    let count = h.len();
    ExchangeGroup {
        label,
        made_for,
        requests_of_kind,
        count,
        min_us: h.min(),
        p50_us: h.value_at_quantile(0.5),
        p90_us: h.value_at_quantile(0.9),
        p99_us: h.value_at_quantile(0.99),
        max_us: h.max(),
        mean_us: u64::try_from(g.sum_us / u128::from(count.max(1))).unwrap_or(u64::MAX),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::exchange;
    use whyslow_model::Connection;

    #[test]
    fn every_exchange_is_counted_with_its_percentiles_and_calls_follow_their_kind() {
        let conn = |id, port: u16| {
            let mut c = Connection::new(
                id,
                format!("127.0.0.1:{}", 40000 + id).parse().unwrap(),
                format!("127.0.0.1:{port}").parse().unwrap(),
                0,
            );
            c.protocol = Protocol::Http1;
            c
        };
        let mut t = Timeline {
            connections: vec![conn(0, 80), conn(1, 9000)],
            exchanges: Vec::new(),
        };
        for i in 0..100u32 {
            let start = u64::from(i) * 1_000;
            let mut e = exchange(
                i,
                0,
                (start, start),
                (start + 100 + u64::from(i), start + 100 + u64::from(i)),
            );
            e.role = ExchangeRole::Inbound;
            t.exchanges.push(e);
        }
        let mut call = exchange(500, 1, (10, 10), (20, 20));
        call.role = ExchangeRole::Outbound;
        call.parent = Some(0);
        t.exchanges.push(call);
        let mut g = ExchangeGroups::default();
        g.add(&t, &HashSet::new());
        // A second window: the header of connection 0 is not counted again.
        let mut t2 = t.clone();
        t2.exchanges.truncate(10);
        g.add(&t2, &[0].into_iter().collect());
        let mut s = CaptureSummary::default();
        g.finish(&mut s);
        assert_eq!(s.connections, 3);
        let exchanges: Vec<u64> = s.servers.iter().map(|s| s.exchanges).collect();
        assert_eq!(exchanges, [110, 1]);
        let kind = &s.groups[0];
        assert_eq!(kind.count, 110);
        assert_eq!((kind.min_us, kind.max_us), (100, 199));
        // 100..199 and again 100..109: the 55th of 110 is 144.
        assert_eq!(kind.p50_us, 144, "{kind:?}");
        assert_eq!(s.groups[1].made_for.as_deref(), Some(kind.label.as_str()));
        assert_eq!(
            (s.groups[1].count, s.groups[1].requests_of_kind),
            (1, Some(110))
        );
    }
}
