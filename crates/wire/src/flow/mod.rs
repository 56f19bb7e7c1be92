//! TCP flow reconstruction: packets → `Connection`s with Wireshark-style
//! analysis, reassembled streams → protocol `Exchange`s.

mod analysis;
mod conn;
mod window;

use crate::decode::{decode_tcp, Skip, TcpPacket};
use crate::packet::{LinkType, Packet};
use crate::reassembly::Budget;
use conn::Flow;
use std::collections::{HashMap, HashSet, VecDeque};
use std::hash::{BuildHasher, Hasher, RandomState};
use std::net::SocketAddr;
use whyslow_model::{Connection, Exchange, Timeline};

pub use analysis::{seq_gt, seq_lt};
pub(crate) use window::SERVICE_SAMPLE;
pub use window::{Window, DEFAULT_WINDOW_EXCHANGES, MIN_WINDOW_EXCHANGES};

/// Per-segment events kept per connection. At ~40 bytes an event, 100 000
/// events is ~4 MB: enough for minutes of a busy keep-alive connection.
pub const DEFAULT_MAX_EVENTS_PER_CONNECTION: usize = 100_000;
/// Per-segment events held over all connections at once (a segment event
/// is 40 bytes, an ACK event 32): ~10 MB. A connection's events leave with
/// it when analyze takes its window; without the bound they would grow with
/// the open connections up to connections × the per-connection bound.
/// Connections past it keep their counters, not events. Measured on a 1.3 GB
/// capture of 32 busy keep-alive connections: at 1 000 000, RSS on the whole
/// file was 1.13× RSS on a quarter; at 250 000, 1.00×.
pub const DEFAULT_MAX_EVENTS_TOTAL: usize = 250_000;
/// Connections tracked at once. Each costs a few hundred bytes, its HTTP
/// head buffers (4 KiB kept between messages, up to 64 KiB while a head is
/// incomplete) and at most 64 pending request labels of up to 200 bytes;
/// past the bound the idlest flow is closed early.
pub const DEFAULT_MAX_FLOWS: usize = 10_000;
/// Closed flows kept for their last packets (the final ACK, a retransmitted
/// FIN) before they are handed on; loopback and LAN captures carry those
/// within microseconds, so a few hundred connection closes later is long
/// after. Without this bound a closed flow stayed until `max_flows` forced
/// it out, and memory grew with every connection up to that bound.
const MAX_CLOSED_FLOWS: usize = 256;
/// Keys of handed-on connections remembered, so a packet of theirs even
/// later is ignored rather than taken for a connection seen mid-stream.
const RECENTLY_RETIRED: usize = 4096;
/// Out-of-order bytes held per direction while waiting for a hole to fill.
/// 1 MiB covers several round trips of a fast link's window.
pub const DEFAULT_MAX_HELD_PER_FLOW: usize = 1 << 20;
/// Out-of-order bytes held over all flows.
pub const DEFAULT_MAX_HELD_TOTAL: usize = 64 << 20;
/// Exchanges kept in the timeline; later ones are only counted. An exchange
/// is ~200 bytes (struct + normalized request), so 200 000 bound them to
/// ~40 MB: ~1 M small keep-alive requests (a 200 MB capture) would otherwise
/// take ~200 MB.
pub const DEFAULT_MAX_EXCHANGES: usize = 200_000;
/// Finished connections kept in the timeline (the first ones opened); later
/// ones, and their exchanges, are only counted. A short connection with its
/// ~10 segment/ACK events is ~1 KB, so 100 000 bound them to ~100 MB.
pub const DEFAULT_MAX_CONNECTIONS: usize = 100_000;
/// Protocol errors kept for the report; the rest are only counted.
pub const MAX_ERRORS: usize = 100;

/// Bounds on memory, all adjustable.
#[derive(Debug, Clone)]
pub struct Limits {
    pub max_events_per_connection: usize,
    pub max_events_total: usize,
    pub max_flows: usize,
    pub max_held_bytes_per_flow: usize,
    pub max_held_bytes_total: usize,
    pub max_exchanges: usize,
    pub max_connections: usize,
    /// Windowed analysis: finished exchanges (or connections) per window, at
    /// most. A window is cut at `MIN_WINDOW_EXCHANGES` already when no
    /// service is under investigation, or when it holds `window_requests`
    /// of the service's requests.
    pub window_exchanges: usize,
    /// Windowed analysis: the service's requests a window must hold before
    /// it is cut short of `window_exchanges` (what the detectors that judge
    /// a population need; the default never cuts short).
    pub window_requests: usize,
    /// Not a bound: TLS session secrets (`analyze --keylog`) to see inside
    /// TLS streams with. Held per session, a few hundred bytes each.
    pub keylog: Option<std::sync::Arc<whyslow_proto::tls::KeyLog>>,
    /// Not a bound: ports known to listen (diagnose finds the target's and
    /// its backing services' on this host), so that a connection first seen
    /// mid-stream between two ephemeral ports is given the right server.
    pub listening: Vec<u16>,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_events_per_connection: DEFAULT_MAX_EVENTS_PER_CONNECTION,
            max_events_total: DEFAULT_MAX_EVENTS_TOTAL,
            max_flows: DEFAULT_MAX_FLOWS,
            max_held_bytes_per_flow: DEFAULT_MAX_HELD_PER_FLOW,
            max_held_bytes_total: DEFAULT_MAX_HELD_TOTAL,
            max_exchanges: DEFAULT_MAX_EXCHANGES,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            window_exchanges: DEFAULT_WINDOW_EXCHANGES,
            window_requests: usize::MAX,
            keylog: None,
            listening: Vec::new(),
        }
    }
}

/// Packet counters of a `FlowTable`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    pub packets: u64,
    pub tcp_packets: u64,
    /// Not IPv4/IPv6 TCP (ARP, UDP, fragments, unknown link types).
    pub non_tcp: u64,
    /// Packets the capture cut short (snapshot length), TCP or not.
    pub truncated_packets: u64,
    /// Flows closed early because `max_flows` was reached.
    pub evicted_flows: u64,
    /// Connections seen, and those left out of the timeline (`max_connections`).
    pub connections_seen: u64,
    pub connections_dropped: u64,
    /// Exchanges seen, and those left out of the timeline (`max_exchanges`,
    /// or on a connection left out).
    pub exchanges_seen: u64,
    pub exchanges_dropped: u64,
    /// Packets of a connection already closed and handed on (a last ACK or
    /// retransmitted FIN long after the close): ignored, not a new connection.
    pub late_packets: u64,
}

type Key = (SocketAddr, SocketAddr);

/// Hasher of flow keys: FxHash's rotate-xor-multiply (as in rustc-hash), a
/// few times faster than SipHash on these small keys, which are looked up
/// once per packet. Seeded per table; the table's size bound (`max_flows`)
/// caps what crafted collisions could cost.
#[derive(Clone, Copy)]
struct FlowHasher(u64);

/// FxHash's multiplier (rustc-hash).
const FX_K: u64 = 0x51_7c_c1_b7_27_22_0a_95;

impl FlowHasher {
    fn add(&mut self, w: u64) {
        self.0 = (self.0.rotate_left(5) ^ w).wrapping_mul(FX_K);
    }
}

impl Hasher for FlowHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let mut w = [0u8; 8];
            w.copy_from_slice(c);
            self.add(u64::from_le_bytes(w));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut w = [0u8; 8];
            w[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(w));
        }
    }
    fn write_u8(&mut self, i: u8) {
        self.add(u64::from(i));
    }
    fn write_u16(&mut self, i: u16) {
        self.add(u64::from(i));
    }
    fn write_u32(&mut self, i: u32) {
        self.add(u64::from(i));
    }
    fn write_u64(&mut self, i: u64) {
        self.add(i);
    }
    fn write_usize(&mut self, i: usize) {
        self.add(i as u64);
    }
    fn finish(&self) -> u64 {
        // hashbrown takes the bucket from the low bits: fold the high ones in.
        self.0.rotate_left(26)
    }
}

#[derive(Clone, Copy)]
struct FlowHashState(u64);

impl FlowHashState {
    fn new() -> Self {
        FlowHashState(RandomState::new().hash_one(0u8))
    }
}

impl BuildHasher for FlowHashState {
    type Hasher = FlowHasher;
    fn build_hasher(&self) -> FlowHasher {
        FlowHasher(self.0)
    }
}

fn key(a: SocketAddr, b: SocketAddr) -> Key {
    if a <= b {
        (a, b)
    } else {
        (b, a)
    }
}

/// Streaming flow table: push packets in capture order, then `finish`.
pub struct FlowTable {
    limits: Limits,
    flows: HashMap<Key, Flow, FlowHashState>,
    /// Flows that were closed when last seen: eviction candidates, oldest first.
    closed: VecDeque<Key>,
    /// Keys of connections closed and handed on, newest last (at most
    /// `RECENTLY_RETIRED`), with the id they had: their late packets are not
    /// taken for new connections.
    retired: HashMap<Key, u32, FlowHashState>,
    retired_order: VecDeque<(Key, u32)>,
    /// Every flow (key, connection id, last seen when queued), oldest first:
    /// the idle ones to evict when none is closed, found without a walk
    /// over every flow (see `evict`).
    ages: VecDeque<(Key, u32, u64)>,
    budget: Budget,
    next_connection: u32,
    next_exchange: u32,
    connections: Vec<Connection>,
    exchanges: Vec<Exchange>,
    /// Windowed: the connections of `exchanges`, kept as they are added, so
    /// that a cut need not walk every exchange to find them.
    waiting: foldhash::HashSet<u32>,
    /// Ports of the service under investigation, once decided (windowed).
    front: Option<Vec<u16>>,
    /// Exchanges waiting that are requests of the service.
    front_waiting: usize,
    /// Capacity of the last window's vector (see `make_room`).
    room: usize,
    /// Exchanges completed by the packet being pushed (reused buffer).
    scratch: Vec<Exchange>,
    counters: Counters,
    errors: Vec<String>,
    errors_dropped: u64,
    /// Server ports of connections whose SYN was seen: which side of a
    /// connection first seen mid-stream is the server.
    listeners: HashSet<u16>,
    /// Windows are taken as it goes (`take_window`): nothing is left out,
    /// and `max_exchanges`/`max_connections` do not apply.
    windowed: bool,
}

impl FlowTable {
    pub fn new(limits: Limits) -> Self {
        let budget = Budget {
            held: 0,
            max_total: limits.max_held_bytes_total,
            events: 0,
            max_events: limits.max_events_total,
        };
        FlowTable {
            listeners: limits.listening.iter().copied().collect(),
            limits,
            flows: HashMap::with_hasher(FlowHashState::new()),
            closed: VecDeque::new(),
            retired: HashMap::with_hasher(FlowHashState::new()),
            retired_order: VecDeque::new(),
            ages: VecDeque::new(),
            budget,
            next_connection: 0,
            next_exchange: 0,
            connections: Vec::new(),
            exchanges: Vec::new(),
            waiting: Default::default(),
            front: None,
            front_waiting: 0,
            room: 0,
            scratch: Vec::new(),
            counters: Counters::default(),
            errors: Vec::new(),
            errors_dropped: 0,
            windowed: false,
        }
    }

    /// A table whose exchanges and connections are taken in windows.
    pub fn windowed(limits: Limits) -> Self {
        FlowTable {
            windowed: true,
            ..FlowTable::new(limits)
        }
    }

    pub fn counters(&self) -> Counters {
        self.counters
    }

    /// Protocol parse errors met so far ("connection 3 (a → b): ...").
    pub fn errors(&self) -> &[String] {
        &self.errors
    }

    /// Decodes and accounts one captured packet.
    pub fn push(&mut self, p: &Packet) {
        self.push_frame(p.link, &p.data, p.orig_len, p.at_us, p.number);
    }

    /// As `push`, from the parts of a packet: `frame` as captured, `orig_len`
    /// its length on the wire.
    pub fn push_frame(
        &mut self,
        link: LinkType,
        frame: &[u8],
        orig_len: u32,
        at_us: u64,
        number: u64,
    ) {
        let cut = (frame.len() as u64) < u64::from(orig_len);
        self.push_decoded(decode_tcp(link, frame), cut, at_us, number);
    }

    /// As `push`, for a packet already decoded (`cut`: shorter than on the wire).
    pub fn push_decoded(
        &mut self,
        tcp: Result<TcpPacket, Skip>,
        cut: bool,
        at_us: u64,
        number: u64,
    ) {
        self.counters.packets += 1;
        if cut {
            self.counters.truncated_packets += 1;
        }
        match tcp {
            Ok(tcp) => self.push_tcp(&tcp, at_us, number),
            Err(Skip::NotTcp) | Err(Skip::Cut) => self.counters.non_tcp += 1,
        }
    }

    /// Accounts one decoded TCP segment (`number`: 1-based packet number).
    pub fn push_tcp(&mut self, tcp: &TcpPacket, at_us: u64, number: u64) {
        self.counters.tcp_packets += 1;
        let k = key(tcp.src, tcp.dst);
        // Common case, one lookup: a packet of a flow already tracked.
        if let Some(f) = self.flows.get_mut(&k) {
            if !f.is_new_syn(tcp) {
                let (mut out, from) = sink(self.windowed, &mut self.exchanges, &mut self.scratch);
                let was_closed = f.is_closed();
                f.push(tcp, at_us, number, &self.limits, &mut self.budget, &mut out);
                let port = f.conn.server.port();
                if !was_closed && f.is_closed() {
                    self.note_closed(k);
                }
                self.add_exchanges(out, from, port);
                return;
            }
        }
        if !tcp.syn && self.retired.contains_key(&k) {
            self.counters.late_packets += 1;
            return;
        }
        // A new flow, or a new SYN on a tracked 4-tuple (port reuse).
        if let Some(old) = self.flows.remove(&k) {
            self.retire(old);
        }
        if self.flows.len() >= self.limits.max_flows {
            self.evict();
        }
        let id = self.next_connection;
        self.next_connection = self.next_connection.saturating_add(1);
        self.counters.connections_seen += 1;
        if tcp.syn {
            let server = if tcp.ack_flag { tcp.src } else { tcp.dst };
            self.listeners.insert(server.port());
        }
        let mut f = Flow::new(id, tcp, at_us, &self.listeners, &self.limits);
        let (mut out, from) = sink(self.windowed, &mut self.exchanges, &mut self.scratch);
        f.push(tcp, at_us, number, &self.limits, &mut self.budget, &mut out);
        if f.is_closed() {
            self.note_closed(k);
        }
        self.note_age(k, id, at_us);
        let port = f.conn.server.port();
        self.flows.insert(k, f);
        self.add_exchanges(out, from, port);
    }

    fn note_closed(&mut self, k: Key) {
        self.closed.push_back(k);
        while self.closed.len() > MAX_CLOSED_FLOWS {
            let Some(old) = self.closed.pop_front() else {
                break;
            };
            // Stale entries (reopened, evicted) are skipped.
            if !self.flows.get(&old).is_some_and(Flow::is_closed) {
                continue;
            }
            if let Some(f) = self.flows.remove(&old) {
                self.remember_retired(old, f.conn.id);
                self.retire(f);
            }
        }
    }

    fn remember_retired(&mut self, k: Key, id: u32) {
        if self.retired_order.len() >= RECENTLY_RETIRED {
            if let Some((gone, gone_id)) = self.retired_order.pop_front() {
                if self.retired.get(&gone) == Some(&gone_id) {
                    self.retired.remove(&gone);
                }
            }
        }
        self.retired.insert(k, id);
        self.retired_order.push_back((k, id));
    }

    /// Closes a closed flow if there is one (oldest closed first), else the
    /// one idle longest. The queue keeps this O(1) when most flows end
    /// normally, as in captures of many short connections.
    fn evict(&mut self) {
        let mut victim = None;
        while let Some(k) = self.closed.pop_front() {
            if self.flows.get(&k).is_some_and(Flow::is_closed) {
                victim = Some(k);
                break;
            }
        }
        let victim = victim.or_else(|| self.idlest());
        if let Some(f) = victim.and_then(|k| self.flows.remove(&k)) {
            self.counters.evicted_flows += 1;
            self.retire(f);
        }
    }

    fn note_age(&mut self, k: Key, id: u32, at_us: u64) {
        if self.ages.len() >= 2 * self.limits.max_flows.max(1) {
            // Entries of flows gone (port reuse) pile up: drop them.
            let flows = &self.flows;
            self.ages
                .retain(|(k, id, _)| flows.get(k).is_some_and(|f| f.conn.id == *id));
        }
        self.ages.push_back((k, id, at_us));
    }

    /// The flow idle longest, nearly: the oldest in the queue that was not
    /// seen since it was queued; one seen since goes to the back (a second
    /// chance). Each requeue follows a packet of that flow, so the cost per
    /// packet stays constant, where a walk over every flow would make a
    /// flood of new connections quadratic.
    fn idlest(&mut self) -> Option<Key> {
        while let Some((k, id, queued)) = self.ages.pop_front() {
            let Some(f) = self.flows.get(&k).filter(|f| f.conn.id == id) else {
                continue; // gone
            };
            if f.last_seen_us > queued {
                let seen = f.last_seen_us;
                self.ages.push_back((k, id, seen));
                continue;
            }
            return Some(k);
        }
        None
    }

    fn retire(&mut self, f: Flow) {
        let (conn, mut ex, err) = f.finish(&mut self.budget);
        if let Some(e) = err {
            let msg = format!(
                "connection {} ({} → {}): {e}",
                conn.id, conn.client, conn.server
            );
            if self.errors.len() < MAX_ERRORS {
                self.errors.push(msg);
            } else {
                self.errors_dropped += 1;
            }
        }
        let port = conn.server.port();
        if self.keeps_connection(conn.id) {
            self.connections.push(conn);
        } else {
            self.counters.connections_dropped += 1;
            let events = conn.segments.len() + conn.acks.len();
            self.budget.events = self.budget.events.saturating_sub(events);
        }
        let (mut out, from) = sink(self.windowed, &mut self.exchanges, &mut self.scratch);
        out.append(&mut ex);
        self.add_exchanges(out, from, port);
    }

    /// Connections are kept in the order they were opened (ids are given
    /// then), so the timeline holds the first `max_connections` of them.
    fn keeps_connection(&self, id: u32) -> bool {
        self.windowed || (id as usize) < self.limits.max_connections
    }

    /// Numbers and keeps (within the limits) the exchanges of `out` from
    /// `from` on, which `sink` handed out; `port`: their server's.
    fn add_exchanges(&mut self, mut out: Vec<Exchange>, from: usize, port: u16) {
        if self.windowed {
            if self.front.as_ref().is_some_and(|f| f.contains(&port)) {
                self.front_waiting += out.len() - from;
            }
            for e in &mut out[from..] {
                e.id = self.next_exchange;
                self.next_exchange = self.next_exchange.saturating_add(1);
            }
            window::add_connections(&mut self.waiting, &out[from..]);
            self.counters.exchanges_seen += (out.len() - from) as u64;
            self.exchanges = out;
            return;
        }
        for mut e in out.drain(..) {
            e.id = self.next_exchange;
            self.next_exchange = self.next_exchange.saturating_add(1);
            self.counters.exchanges_seen += 1;
            if self.exchanges.len() < self.limits.max_exchanges
                && self.keeps_connection(e.connection)
            {
                self.exchanges.push(e);
            } else {
                self.counters.exchanges_dropped += 1;
            }
        }
        self.scratch = out;
    }

    /// Ends every open flow (end of capture). Errors then include theirs.
    pub fn close_all(&mut self) {
        self.closed.clear();
        let mut open: Vec<Flow> = self.flows.drain().map(|(_, f)| f).collect();
        open.sort_by_key(|f| f.conn.id);
        for f in open {
            self.retire(f);
        }
        if self.errors_dropped > 0 {
            self.errors.push(format!(
                "… and {} more protocol errors",
                self.errors_dropped
            ));
            self.errors_dropped = 0;
        }
    }

    /// The timeline: connections by id (tshark's tcp.stream order), exchanges
    /// by request start.
    pub fn finish(mut self) -> Timeline {
        self.take_timeline()
    }

    /// As `finish`, leaving the table's counters and errors to read.
    pub fn take_timeline(&mut self) -> Timeline {
        self.close_all();
        let mut t = Timeline {
            connections: std::mem::take(&mut self.connections),
            exchanges: std::mem::take(&mut self.exchanges),
        };
        t.sort();
        t
    }
}

/// Where a flow's new exchanges go, and how many the vector holds before
/// them. A windowed table keeps every exchange, so the analyzers append to
/// the window itself: each exchange is moved once fewer.
fn sink(
    windowed: bool,
    exchanges: &mut Vec<Exchange>,
    scratch: &mut Vec<Exchange>,
) -> (Vec<Exchange>, usize) {
    if windowed {
        let out = std::mem::take(exchanges);
        let from = out.len();
        (out, from)
    } else {
        (std::mem::take(scratch), 0)
    }
}
