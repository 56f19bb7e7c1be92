//! Spans into the timeline the detectors read. The service under
//! investigation is the one whose server spans made the most calls; each
//! of its SERVER spans is an inbound request, and each CLIENT span of it a
//! call given to its nearest SERVER ancestor of the same service (parents
//! are often INTERNAL spans): attribution level `Span`, exact.
//!
//! Spans carry no connections. A call's connection is a lane per peer:
//! calls to a peer are laid on as few lanes as hold them, each taking the
//! lane freed last before it started — so the lanes are the most calls in
//! flight at once, and a call that started as another ended follows it on
//! its lane, which is what pool queueing is judged from on the wire.
//! Where the peer is traced too, its SERVER span (the client span's child)
//! says when the call really reached it: a client span that includes the
//! wait for a pooled connection starts when the call was due, not sent.

use super::record::{default_port, kind, SpanRecord};
use super::SpanSet;
use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use whyslow_model::{
    Connection, Exchange, ExchangeRole, Protocol, Timeline, TraceId, WAITED_MIN_US,
};

/// A client span may end this long after its connection was handed to the
/// next call (the response read, then the span closed): 1 ms.
const HANDOFF_SLACK_US: u64 = 1_000;

/// A call waited for a connection only if its peer's calls filled every
/// lane for half its wait or more; else the wait was elsewhere — a callee
/// slow to accept, its lanes mostly free. A pool hands a connection over
/// as one comes back, but a starved client is slow at it: a threaded
/// Python client on a CPU-saturated host (streamed bodies read after the
/// span ends, the waiter woken, the callee's span begun) filled its 5
/// lanes for 68–78 % of waits of 200–400 ms.
const POOL_FULL_SHARE: f64 = 0.5;

/// Lanes in flight counted as the pool only when held this long: 1 ms.
const HELD_MIN_US: u64 = 1_000;

/// Parent links followed from a span before giving up: deeper traces are
/// rare (an ORM's INTERNAL spans add a few), and a cycle stops here.
pub const MAX_ANCESTORS: usize = 256;

/// The timeline, and what reading spans into it found.
#[derive(Debug, Default)]
pub struct SpanTimeline {
    pub timeline: Timeline,
    /// The stand-in server of the service's requests.
    pub service_ports: Vec<u16>,
    /// The service's name, and the other services' spans left out.
    pub service: Option<String>,
    pub other_services: Vec<String>,
    /// Calls whose span had no SERVER ancestor of the service in the file.
    pub calls_without_request: u64,
    /// Client spans inside another client span (one call instrumented at
    /// two layers): counted once, as the outer one.
    pub nested_calls: u64,
    /// Spans outside their parent's time (clock skew between hosts), moved
    /// inside it.
    pub skewed: u64,
    /// Parent chains that looped or ran past `MAX_ANCESTORS`.
    pub broken_chains: u64,
    /// Calls that reached their traced callee late while lanes to it were
    /// free: not a wait for a connection.
    pub waits_not_for_a_connection: u64,
    /// Peers named by a host name, with the stand-in address shown for each.
    pub named_peers: Vec<(String, SocketAddr)>,
}

/// Stand-ins in 240.0.0.0/4 (reserved, never a real peer): the service's
/// requests' server and clients, and a peer the span did not name.
const STAND_IN_SERVICE: Ipv4Addr = Ipv4Addr::new(240, 0, 0, 1);
const STAND_IN_CLIENT: Ipv4Addr = Ipv4Addr::new(240, 0, 0, 2);
const STAND_IN_PEER: Ipv4Addr = Ipv4Addr::new(240, 0, 0, 3);

/// What following a span's parents found.
enum Ancestor {
    /// The nearest SERVER span (index), with whether a CLIENT span came first.
    Server(usize, bool),
    None,
    Broken,
}

struct Index<'s> {
    spans: &'s [SpanRecord],
    by_id: HashMap<(u128, u64), usize>,
}

impl Index<'_> {
    fn parent(&self, i: usize) -> Option<usize> {
        let s = &self.spans[i];
        (s.parent_span_id != 0)
            .then(|| self.by_id.get(&(s.trace_id, s.parent_span_id)).copied())
            .flatten()
    }

    fn server_ancestor(&self, i: usize) -> Ancestor {
        let mut at = i;
        let mut client_first = false;
        for _ in 0..MAX_ANCESTORS {
            let Some(p) = self.parent(at) else {
                return Ancestor::None;
            };
            if p == i {
                return Ancestor::Broken;
            }
            match self.spans[p].kind {
                kind::SERVER => return Ancestor::Server(p, client_first),
                kind::CLIENT | kind::PRODUCER => client_first = true,
                _ => {}
            }
            at = p;
        }
        Ancestor::Broken
    }
}

fn is_call(s: &SpanRecord) -> bool {
    s.kind == kind::CLIENT || s.kind == kind::PRODUCER
}

/// The spans of `set` as a timeline of the service that made the most calls.
pub fn to_timeline(set: &SpanSet) -> SpanTimeline {
    to_timeline_of(set, None)
}

/// The spans of `set` as a timeline of the service `name` (None: the one
/// that made the most calls). A name with no server spans gives no service.
pub fn to_timeline_of(set: &SpanSet, name: Option<&str>) -> SpanTimeline {
    let spans = &set.spans;
    let index = Index {
        spans,
        by_id: spans
            .iter()
            .enumerate()
            .map(|(i, s)| ((s.trace_id, s.span_id), i))
            .collect(),
    };
    let mut out = SpanTimeline::default();
    let mut ancestors = Vec::new();
    let mut calls_per_service = vec![0u64; set.services.len()];
    let mut servers_per_service = vec![0u64; set.services.len()];
    for (i, s) in spans.iter().enumerate() {
        if s.kind == kind::SERVER {
            servers_per_service[s.service as usize] += 1;
        }
        if !is_call(s) {
            continue;
        }
        let a = index.server_ancestor(i);
        if let Ancestor::Server(p, false) = a {
            if spans[p].service == s.service {
                calls_per_service[s.service as usize] += 1;
            }
        }
        ancestors.push((i, a));
    }
    let serving = (0..set.services.len()).filter(|&k| servers_per_service[k] > 0);
    let chosen = match name {
        Some(n) => serving.clone().find(|&k| set.services[k] == n),
        None => serving.max_by_key(|&k| (calls_per_service[k], servers_per_service[k])),
    };
    let Some(service) = chosen else {
        return out;
    };
    out.service = Some(set.services[service].clone());
    out.other_services = (0..set.services.len())
        .filter(|&k| k != service)
        .map(|k| set.services[k].clone())
        .collect();
    let service = service as u32;
    // Requests: the service's SERVER spans.
    let requests: Vec<usize> = (0..spans.len())
        .filter(|&i| spans[i].kind == kind::SERVER && spans[i].service == service)
        .collect();
    // Where the callee is traced: its SERVER span under each client span.
    let mut callee: HashMap<usize, usize> = HashMap::new();
    for (i, s) in spans.iter().enumerate() {
        if s.kind == kind::SERVER && s.service != service {
            if let Some(p) = index.parent(i).filter(|&p| is_call(&spans[p])) {
                callee.entry(p).or_insert(i);
            }
        }
    }
    let mut calls = Vec::new();
    for (i, a) in ancestors {
        if spans[i].service != service {
            continue;
        }
        match a {
            // A parent whyslow guessed from the wire is guessed again from
            // the same times, not taken as the source's word.
            Ancestor::Server(_, false) if spans[i].wire && spans[i].parent_guessed => {
                calls.push((i, None))
            }
            Ancestor::Server(p, false) if spans[p].service == service => calls.push((i, Some(p))),
            Ancestor::Server(_, true) => out.nested_calls += 1,
            Ancestor::Broken => {
                out.broken_chains += 1;
                calls.push((i, None));
            }
            _ => {
                out.calls_without_request += 1;
                calls.push((i, None));
            }
        }
    }
    build(&mut out, spans, &requests, &calls, &callee);
    out
}

/// A call's times: sent (when its traced callee began, if inside the
/// client span) and answered; it was due when its span began.
fn call_times(out: &mut SpanTimeline, c: &SpanRecord, callee: Option<&SpanRecord>) -> (u64, u64) {
    match callee {
        Some(s) if s.start_us >= c.start_us && s.start_us <= c.end_us => (s.start_us, c.end_us),
        Some(_) => {
            out.skewed += 1;
            (c.start_us, c.end_us)
        }
        None => (c.start_us, c.end_us),
    }
}

fn build(
    out: &mut SpanTimeline,
    spans: &[SpanRecord],
    requests: &[usize],
    calls: &[(usize, Option<usize>)],
    callee: &HashMap<usize, usize>,
) {
    // Call peers, and the stand-in for the service's own address.
    let mut peers: Vec<SocketAddr> = calls.iter().map(|&(i, _)| peer_of(&spans[i])).collect();
    for &(i, _) in calls {
        if let (Some(name), Some(addr)) = (&spans[i].peer_name, spans[i].peer) {
            if !out.named_peers.iter().any(|(n, _)| n == name.as_str()) {
                out.named_peers.push((name.to_string(), addr));
            }
        }
    }
    // The service's address as its server spans say, else a stand-in.
    let said = requests.first().and_then(|&r| spans[r].peer);
    let mut service_addr = said
        .filter(|a| !peers.contains(a))
        .unwrap_or_else(|| SocketAddr::new(STAND_IN_SERVICE.into(), 80));
    while peers.contains(&service_addr) {
        service_addr.set_port(service_addr.port().wrapping_add(1).max(1));
    }
    out.service_ports = vec![service_addr.port()];
    // (start, end, span index, parent, inbound, waited) by start.
    let mut rows: Vec<Row> = Vec::new();
    for &r in requests {
        let s = &spans[r];
        rows.push(Row {
            start: s.start_us,
            end: s.end_us.max(s.start_us),
            span: r,
            parent: None,
            inbound: true,
            waited: false,
        });
    }
    for &(i, parent) in calls {
        let (mut start, mut end) = call_times(out, &spans[i], callee.get(&i).map(|&k| &spans[k]));
        if let Some(p) = parent {
            let (ps, pe) = (spans[p].start_us, spans[p].end_us.max(spans[p].start_us));
            if start < ps || end > pe {
                out.skewed += 1;
                start = start.clamp(ps, pe);
                end = end.clamp(start, pe);
            }
        }
        // Wire times were sent to answered: a wait before them is not seen.
        let waited = !spans[i].wire && start >= spans[i].start_us + WAITED_MIN_US;
        rows.push(Row {
            start,
            end: end.max(start),
            span: i,
            parent,
            inbound: false,
            waited,
        });
    }
    rows.sort_by_key(|r| (r.start, !r.inbound, r.end));
    let occupancy = Occupancy::per_peer(spans, &rows);
    for row in rows.iter_mut().filter(|r| r.waited) {
        let s = &spans[row.span];
        let full = occupancy
            .get(&peer_of(s))
            .map_or(0, |o| o.full_us(s.start_us, row.start));
        // Waited, but not for a connection: the callee was slow to take it.
        if (full as f64) < POOL_FULL_SHARE * (row.start - s.start_us) as f64 {
            row.waited = false;
            out.waits_not_for_a_connection += 1;
        }
    }
    // Exchange ids follow start order; parents by span index.
    let id_of: HashMap<usize, u32> = rows
        .iter()
        .enumerate()
        .filter(|(_, r)| r.inbound)
        .map(|(n, r)| (r.span, n as u32 + 1))
        .collect();
    let mut lanes = Lanes::default();
    let t = &mut out.timeline;
    peers.clear();
    for (n, row) in rows.iter().enumerate() {
        let &Row {
            start,
            end,
            span: i,
            parent,
            inbound,
            waited,
        } = row;
        let s = &spans[i];
        let (connection, stream) = if inbound {
            let id = t.connections.len() as u32 + 1;
            let client = SocketAddr::new(IpAddr::V4(STAND_IN_CLIENT), 1024 + (id % 60_000) as u16);
            t.connections
                .push(connection(id, client, service_addr, start, s.protocol));
            (id, None)
        } else if let (true, Some(port)) = (s.wire, s.local_port) {
            lanes.own(t, peer_of(s), port, s.protocol, start)
        } else {
            lanes.place(t, peer_of(s), s.protocol, (start, end))
        };
        let mut e = Exchange::new(connection, s.protocol, s.request.clone());
        e.id = n as u32 + 1;
        e.stream = stream;
        e.status = s.status.clone();
        e.request_first_at_us = start;
        e.request_last_at_us = start;
        e.response_first_at_us = Some(end);
        e.response_last_at_us = Some(end);
        e.role = if inbound {
            ExchangeRole::Inbound
        } else {
            ExchangeRole::Outbound
        };
        // A guessed parent's trace id is its parent's: not the call's own.
        e.trace = (!(s.wire && s.parent_guessed)).then_some(TraceId(s.trace_id));
        e.params_digest = s.params_digest;
        e.params_unknown = s.params_unknown;
        // Wire times say when a call was sent, not when it was due: as on
        // packets, only timing can tell whether it waited.
        if !inbound && !s.wire {
            e.due_at_us = Some(if waited { s.start_us.min(start) } else { start });
        }
        e.span_parent = parent.and_then(|p| id_of.get(&p)).copied();
        let c = &mut t.connections[connection as usize - 1];
        c.last_at_us = c.last_at_us.max(end);
        c.exchanges += 1;
        t.exchanges.push(e);
    }
}

/// Calls in flight to one peer over time: when every lane was busy.
struct Occupancy {
    /// Breakpoints, the calls in flight from each, and the time spent
    /// with every lane busy before each.
    times: Vec<u64>,
    level: Vec<usize>,
    full_before: Vec<u64>,
    max: usize,
}

/// (start, end, span index, parent, inbound, waited) of each exchange.
/// One exchange to be: its times, its span (index), the span of the
/// request it was made for, and whether it waited for a connection.
struct Row {
    start: u64,
    end: u64,
    span: usize,
    parent: Option<usize>,
    inbound: bool,
    waited: bool,
}

impl Occupancy {
    fn per_peer(spans: &[SpanRecord], rows: &[Row]) -> HashMap<SocketAddr, Occupancy> {
        let mut calls: HashMap<SocketAddr, Vec<(u64, u64)>> = HashMap::new();
        for r in rows
            .iter()
            .filter(|r| !r.inbound && spans[r.span].protocol != Protocol::Http2)
        {
            calls
                .entry(peer_of(&spans[r.span]))
                .or_default()
                .push((r.start, r.end));
        }
        calls
            .into_iter()
            .map(|(p, c)| (p, Occupancy::new(&c)))
            .collect()
    }

    fn new(calls: &[(u64, u64)]) -> Self {
        let mut events: Vec<(u64, i64)> =
            calls.iter().flat_map(|&(s, e)| [(s, 1), (e, -1)]).collect();
        // Ends before starts at one instant: a handoff is not two in flight.
        events.sort_unstable();
        let (mut times, mut level) = (
            Vec::with_capacity(events.len()),
            Vec::with_capacity(events.len()),
        );
        let mut now = 0i64;
        for (t, d) in events {
            now += d;
            times.push(t);
            level.push(now.max(0) as usize);
        }
        // The most in flight for a while: two calls overlapping for a few
        // µs at a handoff (one's span ends after the next one's callee
        // began) do not make the pool one larger.
        let held = (1..times.len()).filter(|&i| times[i] - times[i - 1] >= HELD_MIN_US);
        let max = held
            .map(|i| level[i - 1])
            .max()
            .unwrap_or_else(|| level.iter().copied().max().unwrap_or(0));
        let mut full_before = vec![0u64; times.len()];
        for i in 1..times.len() {
            let busy = if level[i - 1] >= max {
                times[i] - times[i - 1]
            } else {
                0
            };
            full_before[i] = full_before[i - 1] + busy;
        }
        Occupancy {
            times,
            level,
            full_before,
            max,
        }
    }

    /// Time every lane was busy up to `t`.
    fn full_until(&self, t: u64) -> u64 {
        let i = self.times.partition_point(|&x| x <= t);
        if i == 0 {
            return 0;
        }
        let j = i - 1;
        let open = if self.level[j] >= self.max {
            t - self.times[j]
        } else {
            0
        };
        self.full_before[j] + open
    }

    /// Time every lane was busy within `[from, to]`.
    fn full_us(&self, from: u64, to: u64) -> u64 {
        self.full_until(to).saturating_sub(self.full_until(from))
    }
}

fn peer_of(s: &SpanRecord) -> SocketAddr {
    s.peer
        .unwrap_or_else(|| SocketAddr::new(STAND_IN_PEER.into(), default_port(s.protocol)))
}

fn connection(id: u32, client: SocketAddr, server: SocketAddr, at: u64, p: Protocol) -> Connection {
    let mut c = Connection::new(id, client, server, at);
    c.protocol = p;
    c
}

/// Per peer, its lanes: (connection id, busy until). HTTP/2 peers get one
/// connection, a stream per call, as an HTTP/2 client multiplexes.
#[derive(Default)]
struct Lanes {
    /// Per peer: (connection, busy until, its last exchange's index).
    per_peer: HashMap<SocketAddr, Vec<(u32, u64, usize)>>,
    streams: HashMap<u32, u32>,
    /// Connections the spans named by their local port.
    named: HashMap<(SocketAddr, u16), u32>,
}

impl Lanes {
    /// The connection a span named (`network.local.port`), as it was.
    fn own(
        &mut self,
        t: &mut Timeline,
        peer: SocketAddr,
        port: u16,
        protocol: Protocol,
        start: u64,
    ) -> (u32, Option<u32>) {
        let id = *self.named.entry((peer, port)).or_insert_with(|| {
            let id = t.connections.len() as u32 + 1;
            let client = SocketAddr::new(IpAddr::V4(STAND_IN_CLIENT), port);
            t.connections
                .push(connection(id, client, peer, start, protocol));
            id
        });
        let stream = (protocol == Protocol::Http2).then(|| {
            let s = self.streams.entry(id).or_insert(0);
            *s += if *s == 0 { 1 } else { 2 };
            *s
        });
        (id, stream)
    }

    fn place(
        &mut self,
        t: &mut Timeline,
        peer: SocketAddr,
        protocol: Protocol,
        (start, end): (u64, u64),
    ) -> (u32, Option<u32>) {
        let lanes = self.per_peer.entry(peer).or_default();
        if protocol == Protocol::Http2 {
            if let Some(&(id, _, _)) = lanes.first() {
                let stream = self.streams.entry(id).or_insert(1);
                *stream += 2;
                return (id, Some(*stream));
            }
        }
        // The lane freed last before the call started: a call that waited
        // follows the call whose end let it go, as on a pooled connection
        // (one that did not wait is not read as handed over: `due_at_us`).
        // A span may end just after its connection went back to the pool.
        // The earlier call is cut to end there: a connection carries one
        // call at a time. The new exchange is the next one pushed.
        let next = t.exchanges.len();
        let free = lanes
            .iter_mut()
            .filter(|(_, until, _)| *until <= start + HANDOFF_SLACK_US)
            .max_by_key(|(_, until, _)| *until);
        if let Some(lane) = free {
            if lane.1 > start {
                let before = &mut t.exchanges[lane.2];
                let cut = start.max(before.request_first_at_us);
                before.response_first_at_us = before.response_first_at_us.map(|r| r.min(cut));
                before.response_last_at_us = before.response_last_at_us.map(|r| r.min(cut));
            }
            (lane.1, lane.2) = (end, next);
            return (lane.0, None);
        }
        let id = t.connections.len() as u32 + 1;
        let client = SocketAddr::new(IpAddr::V4(STAND_IN_CLIENT), 1024 + (id % 60_000) as u16);
        t.connections
            .push(connection(id, client, peer, start, protocol));
        lanes.push((id, end, next));
        let stream = (protocol == Protocol::Http2).then_some(1);
        if stream.is_some() {
            self.streams.insert(id, 1);
        }
        (id, stream)
    }
}
