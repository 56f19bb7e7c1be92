//! TCP flow reconstruction: packets → `Connection`s with Wireshark-style
//! analysis, reassembled streams → protocol `Exchange`s.

mod analysis;
mod conn;
mod proto;

use crate::decode::{decode_tcp, Skip, TcpPacket};
use crate::packet::Packet;
use crate::reassembly::Budget;
use conn::Flow;
use std::collections::HashMap;
use std::net::SocketAddr;
use whyslow_model::{Connection, Exchange, Timeline};

pub use analysis::{seq_gt, seq_lt};

/// Per-segment events kept per connection. At ~40 bytes an event, 100 000
/// events is ~4 MB: enough for minutes of a busy keep-alive connection.
pub const DEFAULT_MAX_EVENTS_PER_CONNECTION: usize = 100_000;
/// Connections tracked at once. Each costs a few hundred bytes plus at most
/// two HTTP head buffers; past the bound the idlest flow is closed early.
pub const DEFAULT_MAX_FLOWS: usize = 10_000;
/// Out-of-order bytes held per direction while waiting for a hole to fill.
/// 1 MiB covers several round trips of a fast link's window.
pub const DEFAULT_MAX_HELD_PER_FLOW: usize = 1 << 20;
/// Out-of-order bytes held over all flows.
pub const DEFAULT_MAX_HELD_TOTAL: usize = 64 << 20;
/// Protocol errors kept for the report; the rest are only counted.
pub const MAX_ERRORS: usize = 100;

/// Bounds on memory, all adjustable.
#[derive(Debug, Clone)]
pub struct Limits {
    pub max_events_per_connection: usize,
    pub max_flows: usize,
    pub max_held_bytes_per_flow: usize,
    pub max_held_bytes_total: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_events_per_connection: DEFAULT_MAX_EVENTS_PER_CONNECTION,
            max_flows: DEFAULT_MAX_FLOWS,
            max_held_bytes_per_flow: DEFAULT_MAX_HELD_PER_FLOW,
            max_held_bytes_total: DEFAULT_MAX_HELD_TOTAL,
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
}

type Key = (SocketAddr, SocketAddr);

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
    flows: HashMap<Key, Flow>,
    budget: Budget,
    next_connection: u32,
    next_exchange: u32,
    connections: Vec<Connection>,
    exchanges: Vec<Exchange>,
    counters: Counters,
    errors: Vec<String>,
    errors_dropped: u64,
}

impl FlowTable {
    pub fn new(limits: Limits) -> Self {
        let budget = Budget {
            held: 0,
            max_total: limits.max_held_bytes_total,
        };
        FlowTable {
            limits,
            flows: HashMap::new(),
            budget,
            next_connection: 0,
            next_exchange: 0,
            connections: Vec::new(),
            exchanges: Vec::new(),
            counters: Counters::default(),
            errors: Vec::new(),
            errors_dropped: 0,
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
        self.counters.packets += 1;
        if p.is_cut() {
            self.counters.truncated_packets += 1;
        }
        match decode_tcp(p.link, &p.data) {
            Ok(tcp) => self.push_tcp(&tcp, p.at_us, p.number),
            Err(Skip::NotTcp) | Err(Skip::Cut) => self.counters.non_tcp += 1,
        }
    }

    /// Accounts one decoded TCP segment (`number`: 1-based packet number).
    pub fn push_tcp(&mut self, tcp: &TcpPacket, at_us: u64, number: u64) {
        self.counters.tcp_packets += 1;
        let k = key(tcp.src, tcp.dst);
        if self.flows.get(&k).is_some_and(|f| f.is_new_syn(tcp)) {
            if let Some(old) = self.flows.remove(&k) {
                self.retire(old);
            }
        }
        if !self.flows.contains_key(&k) {
            if self.flows.len() >= self.limits.max_flows {
                self.evict();
            }
            let id = self.next_connection;
            self.next_connection = self.next_connection.saturating_add(1);
            self.flows.insert(k, Flow::new(id, tcp, at_us));
        }
        let mut out = Vec::new();
        if let Some(f) = self.flows.get_mut(&k) {
            f.push(tcp, at_us, number, &self.limits, &mut self.budget, &mut out);
        }
        self.add_exchanges(out);
    }

    /// Closes a closed flow if there is one, else the one idle longest.
    fn evict(&mut self) {
        let victim = self
            .flows
            .iter()
            .min_by_key(|(_, f)| (!f.is_closed(), f.last_seen_us))
            .map(|(k, _)| *k);
        if let Some(f) = victim.and_then(|k| self.flows.remove(&k)) {
            self.counters.evicted_flows += 1;
            self.retire(f);
        }
    }

    fn retire(&mut self, f: Flow) {
        let (conn, ex, err) = f.finish(&mut self.budget);
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
        self.connections.push(conn);
        self.add_exchanges(ex);
    }

    fn add_exchanges(&mut self, ex: Vec<Exchange>) {
        for mut e in ex {
            e.id = self.next_exchange;
            self.next_exchange = self.next_exchange.saturating_add(1);
            self.exchanges.push(e);
        }
    }

    /// Ends every open flow (end of capture). Errors then include theirs.
    pub fn close_all(&mut self) {
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
        self.close_all();
        let mut t = Timeline {
            connections: self.connections,
            exchanges: self.exchanges,
        };
        t.connections.sort_by_key(|c| c.id);
        t.exchanges.sort_by_key(|e| (e.request_first_at_us, e.id));
        t
    }
}
