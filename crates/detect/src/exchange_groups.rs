//! Every exchange of a capture counted into its group — an inbound request
//! kind, or the calls to one backing service with one normalized request
//! made for a kind — with an HDR histogram of durations per group, so that
//! counts and percentiles cover the whole capture at fixed memory.

use foldhash::HashMapExt;
use hdrhistogram::Histogram;
use std::collections::{HashMap, HashSet};
use std::hash::Hash;
use whyslow_model::{
    Attribution, AttributionCounts, CaptureSummary, Exchange, ExchangeGroup, ExchangeRole,
    Protocol, ServerCount, Timeline,
};

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

/// Groups by key, each at a fixed slot; past MAX_GROUPS, new keys share
/// the "other" group.
struct Slots<K> {
    index: foldhash::HashMap<K, usize>,
    list: Vec<(K, Group)>,
}

impl<K> Default for Slots<K> {
    fn default() -> Self {
        Slots {
            index: foldhash::HashMap::new(),
            list: Vec::new(),
        }
    }
}

impl<K: Eq + Hash + Clone> Slots<K> {
    fn slot(&mut self, key: K, other: impl FnOnce() -> K) -> usize {
        if let Some(&i) = self.index.get(&key) {
            return i;
        }
        let key = if self.list.len() >= MAX_GROUPS {
            other()
        } else {
            key
        };
        let list = &mut self.list;
        *self.index.entry(key.clone()).or_insert_with(|| {
            list.push((key, Group::new()));
            list.len() - 1
        })
    }
}

/// No inbound request: the calls made for it are made for none.
const NO_KIND: usize = usize::MAX;
/// Calls made while requests of several kinds waited, none told apart.
const SEVERAL_KINDS: usize = usize::MAX - 1;

/// Counts over a capture, fed window by window (after attribution).
#[derive(Default)]
pub struct ExchangeGroups {
    kinds: Slots<String>,
    /// Per kind slot: how its calls were attributed.
    levels: Vec<AttributionCounts>,
    /// (slot of the kind made for, or NO_KIND; call label).
    calls: Slots<(usize, String)>,
    /// (server, protocol) → (connections, exchanges).
    servers: HashMap<(String, Protocol), usize>,
    server_counts: Vec<(u64, u64)>,
    connections: u64,
    tls_connections: u64,
    udp_flows: u64,
    retransmissions: u64,
    zero_windows: u64,
    gaps: whyslow_model::CaptureGaps,
}

/// Request kinds looked up last, compared before the label map is hashed:
/// a window interleaves a few kinds (GET and SET, a statement or two).
/// On a Redis+PostgreSQL capture the analyzing thread executes 5% fewer
/// instructions with them.
const RECENT_KINDS: usize = 4;

/// A request kind: normalized label, server port, protocol.
type KindKey<'a> = (&'a str, u16, Protocol);

/// The last `RECENT_KINDS` kind → slot lookups.
#[derive(Default)]
struct RecentKinds<'a> {
    kinds: [Option<(KindKey<'a>, usize)>; RECENT_KINDS],
    next: usize,
}

impl<'a> RecentKinds<'a> {
    fn get(&self, (label, port, proto): KindKey) -> Option<usize> {
        self.kinds.iter().flatten().find_map(|&((l, p, pr), slot)| {
            (p == port && pr == proto && l == label).then_some(slot)
        })
    }

    fn put(&mut self, key: KindKey<'a>, slot: usize) {
        self.kinds[self.next] = Some((key, slot));
        self.next = (self.next + 1) % RECENT_KINDS;
    }
}

impl ExchangeGroups {
    /// Counts one window. `headers`: connections the window carries only as
    /// headers (counted in the window where they end). `ambiguous_kind`:
    /// ambiguous calls whose candidates were all of one kind, with one of them.
    pub fn add(
        &mut self,
        t: &Timeline,
        headers: &HashSet<u32>,
        ambiguous_kind: &foldhash::HashMap<u32, u32>,
    ) {
        // Per connection: server port, protocol and the server's slot.
        let mut on: foldhash::HashMap<u32, (u16, Protocol, usize)> = foldhash::HashMap::new();
        for c in &t.connections {
            let slot = self.server_slot(c.server_name(), c.protocol);
            on.insert(c.id, (c.server.port(), c.protocol, slot));
            if headers.contains(&c.id) {
                continue;
            }
            self.connections += 1;
            self.tls_connections += u64::from(c.tls);
            self.udp_flows += u64::from(c.udp);
            self.retransmissions += c.to_server.retransmissions + c.to_client.retransmissions;
            self.zero_windows += c.to_server.zero_windows + c.to_client.zero_windows;
            if c.to_server.gaps + c.to_client.gaps > 0 {
                self.gaps.add_seconds(&c.gaps);
                self.gaps.add(whyslow_model::ConnectionGaps {
                    client: c.client.to_string(),
                    server: c.server_name(),
                    gaps: c.to_server.gaps + c.to_client.gaps,
                    to_server_bytes: c.to_server.gap_bytes,
                    to_client_bytes: c.to_client.gap_bytes,
                    seen_bytes: c.to_server.payload_bytes + c.to_client.payload_bytes,
                });
            }
            self.server_counts[slot].0 += 1;
        }
        // A window repeats a few requests many times: each distinct one is
        // labelled and looked up once.
        let mut kind_slots: foldhash::HashMap<(&str, u16, Protocol), usize> =
            foldhash::HashMap::new();
        let mut call_slots: foldhash::HashMap<(usize, &str, u16, Protocol), usize> =
            foldhash::HashMap::new();
        let any_calls = t.exchanges.iter().any(|e| e.role == ExchangeRole::Outbound);
        let mut kind_of: foldhash::HashMap<u32, usize> = foldhash::HashMap::new();
        let mut recent = RecentKinds::default();
        for e in t
            .exchanges
            .iter()
            .filter(|e| e.role == ExchangeRole::Inbound)
        {
            let (port, proto) = self.count_on(&on, e.connection);
            let kinds = &mut self.kinds;
            let key = (e.request.as_str(), port, proto);
            let slot = recent.get(key).unwrap_or_else(|| {
                let slot = *kind_slots.entry(key).or_insert_with(|| {
                    kinds.slot(proto.request_kind(&e.request, port), || {
                        OTHER_KINDS.to_string()
                    })
                });
                recent.put(key, slot);
                slot
            });
            self.kinds.list[slot].1.record(e.duration_us());
            if self.levels.len() <= slot {
                self.levels.resize(slot + 1, AttributionCounts::default());
            }
            if any_calls {
                kind_of.insert(e.id, slot);
            }
        }
        for e in t
            .exchanges
            .iter()
            .filter(|e| e.role == ExchangeRole::Outbound)
        {
            let (port, proto) = self.count_on(&on, e.connection);
            let made_for = made_for(e, &kind_of, ambiguous_kind);
            if let (Some(level), Some(counts)) = (e.attribution, self.levels.get_mut(made_for)) {
                counts.add(level);
            }
            let calls = &mut self.calls;
            let slot = *call_slots
                .entry((made_for, e.request.as_str(), port, proto))
                .or_insert_with(|| {
                    let label = format!("→ {} :{port} {}", proto.name(), e.request);
                    calls.slot((made_for, label), || (made_for, OTHER_CALLS.to_string()))
                });
            self.calls.list[slot].1.record(e.duration_us());
        }
    }

    /// Calls ambiguous between kinds, made for no request, in this order.
    fn unplaced() -> [(usize, &'static str); 2] {
        [
            (SEVERAL_KINDS, ExchangeGroup::AMBIGUOUS_KINDS),
            (NO_KIND, ""),
        ]
    }

    fn server_slot(&mut self, server: String, protocol: Protocol) -> usize {
        let counts = &mut self.server_counts;
        *self.servers.entry((server, protocol)).or_insert_with(|| {
            counts.push((0, 0));
            counts.len() - 1
        })
    }

    /// Counts an exchange on its server; its connection's port and protocol.
    fn count_on(
        &mut self,
        on: &foldhash::HashMap<u32, (u16, Protocol, usize)>,
        id: u32,
    ) -> (u16, Protocol) {
        match on.get(&id) {
            Some(&(port, proto, slot)) => {
                self.server_counts[slot].1 += 1;
                (port, proto)
            }
            None => (0, Protocol::Unknown),
        }
    }

    /// Fills the counts and groups of `summary`: inbound kinds by count,
    /// each followed by its call groups by count; calls made for no request last.
    pub fn finish(self, summary: &mut CaptureSummary) {
        summary.connections = self.connections;
        summary.tls_connections = self.tls_connections;
        summary.udp_flows = self.udp_flows;
        summary.retransmissions = self.retransmissions;
        summary.zero_windows = self.zero_windows;
        summary.gaps = self.gaps;
        let counts = self.server_counts;
        let mut servers: Vec<ServerCount> = self
            .servers
            .into_iter()
            .map(|((server, protocol), slot)| ServerCount {
                server,
                protocol,
                connections: counts[slot].0,
                exchanges: counts[slot].1,
            })
            .filter(|s| s.connections + s.exchanges > 0)
            .collect();
        servers.sort_by(|a, b| {
            a.server
                .cmp(&b.server)
                .then(a.protocol.name().cmp(b.protocol.name()))
        });
        summary.servers = servers;
        let kinds = self.kinds.list;
        let mut order: Vec<usize> = (0..kinds.len()).collect();
        order
            .sort_by(|&a, &b| by_count(&kinds[a].1, &kinds[b].1).then(kinds[a].0.cmp(&kinds[b].0)));
        let mut calls = self.calls.list;
        calls.sort_by(|a, b| by_count(&a.1, &b.1).then(a.0 .1.cmp(&b.0 .1)));
        let mut groups = Vec::new();
        for &k in &order {
            let (kind, g) = &kinds[k];
            let n = g.durations.len();
            let mut kind_row = row(kind.clone(), None, None, g);
            kind_row.attribution = self.levels.get(k).filter(|c| c.total() > 0).copied();
            kind_row.calls_given_percent = kind_row.attribution.map(|a| 100.0 * a.coverage());
            groups.push(kind_row);
            for ((_, label), c) in calls.iter().filter(|((made_for, _), _)| *made_for == k) {
                groups.push(row(label.clone(), Some(kind.clone()), Some(n), c));
            }
        }
        for (slot, made_for) in Self::unplaced() {
            for ((_, label), c) in calls.iter().filter(|((m, _), _)| *m == slot) {
                groups.push(row(label.clone(), Some(made_for.to_string()), None, c));
            }
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
        per_request: requests_of_kind
            .filter(|&n| n > 0)
            .map(|n| count as f64 / n as f64),
        min_us: h.min(),
        p50_us: h.value_at_quantile(0.5),
        p90_us: h.value_at_quantile(0.9),
        p99_us: h.value_at_quantile(0.99),
        max_us: h.max(),
        mean_us: u64::try_from(g.sum_us / u128::from(count.max(1))).unwrap_or(u64::MAX),
        attribution: None,
        calls_given_percent: None,
    }
}

/// The kind slot a call counts under: its request's, the one kind every
/// candidate of an ambiguous call was of, SEVERAL_KINDS, or NO_KIND.
fn made_for(
    e: &Exchange,
    kind_of: &foldhash::HashMap<u32, usize>,
    ambiguous_kind: &foldhash::HashMap<u32, u32>,
) -> usize {
    let request = e.parent.or_else(|| ambiguous_kind.get(&e.id).copied());
    match request.and_then(|p| kind_of.get(&p)) {
        Some(&k) => k,
        None if e.attribution == Some(Attribution::Ambiguous) => SEVERAL_KINDS,
        None => NO_KIND,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::{exchange, servers};

    #[test]
    fn a_recent_kind_is_found_by_label_port_and_protocol_until_pushed_out() {
        let mut recent = RecentKinds::default();
        let get = ("GET key:?", 6379, Protocol::Redis);
        assert_eq!(recent.get(get), None);
        recent.put(get, 7);
        assert_eq!(recent.get(get), Some(7));
        assert_eq!(recent.get(("GET key:?", 6380, Protocol::Redis)), None);
        assert_eq!(recent.get(("GET key:?", 6379, Protocol::Memcached)), None);
        assert_eq!(recent.get(("SET key:?", 6379, Protocol::Redis)), None);
        for n in 0..RECENT_KINDS {
            recent.put(("SET key:?", 6379 + n as u16, Protocol::Redis), n);
        }
        assert_eq!(recent.get(get), None);
        assert_eq!(recent.get(("SET key:?", 6379, Protocol::Redis)), Some(0));
    }

    #[test]
    fn every_exchange_is_counted_with_its_percentiles_and_calls_follow_their_kind() {
        let mut t = servers(&[80, 9000]).with(Vec::new());
        for c in &mut t.connections {
            c.protocol = Protocol::Http1;
        }
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
        g.add(&t, &HashSet::new(), &Default::default());
        // A second window: the header of connection 0 is not counted again.
        let mut t2 = t.clone();
        t2.exchanges.truncate(10);
        g.add(&t2, &[0].into_iter().collect(), &Default::default());
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
