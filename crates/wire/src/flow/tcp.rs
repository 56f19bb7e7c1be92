//! The TCP half of the flow table: packets → connections (ids in the order
//! they were first seen, Wireshark-style analysis, reassembly), with the
//! bounds on open flows. What it rebuilds in order goes to the protocol
//! half as `Events`.

use super::conn::{Flow, Origin, PortsKnown};
use super::events::Events;
use super::udp::UdpFlows;
use super::{key, FlowCounts, FlowHashState, FlowOptions, Key, MAX_CLOSED_FLOWS, RECENTLY_RETIRED};
use crate::decode::{Decoded, Skip, TcpPacket};
use crate::reassembly::Budget;
use std::collections::{HashMap, HashSet, VecDeque};

pub(crate) struct TcpFlows {
    pub(super) options: FlowOptions,
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
    pub(super) next_connection: u32,
    /// Slots of the protocol half free for the next connection, and the
    /// next never used.
    free_slots: Vec<u32>,
    next_slot: u32,
    /// Packet and connection counters (the exchange ones are the other half's).
    pub(super) counters: FlowCounts,
    /// DNS flows and other UDP (`udp`).
    pub(super) udp: UdpFlows,
    /// Server ports of connections whose SYN was seen: which side of a
    /// connection first seen mid-stream is the server.
    listeners: HashSet<u16>,
    /// The capture the packets being pushed come from (`Packet::host`).
    pub(crate) host: u16,
    /// Connections several hosts captured (`FlowTable::set_copies`).
    pub(super) copies: super::Copies,
    /// Per port, connections seen with it at either end (saturating): a
    /// server's port recurs on every connection to it, a client's
    /// ephemeral port on one.
    port_flows: Vec<u8>,
}

impl TcpFlows {
    pub(super) fn new(options: FlowOptions, budget: Budget) -> Self {
        TcpFlows {
            listeners: options.listening.iter().copied().collect(),
            host: 0,
            copies: Default::default(),
            port_flows: vec![0; 1 << 16],
            options,
            flows: HashMap::with_hasher(FlowHashState::new()),
            closed: VecDeque::new(),
            retired: HashMap::with_hasher(FlowHashState::new()),
            retired_order: VecDeque::new(),
            ages: VecDeque::new(),
            budget,
            next_connection: 0,
            free_slots: Vec::new(),
            next_slot: 0,
            counters: FlowCounts::default(),
            udp: UdpFlows::default(),
        }
    }

    /// As `FlowTable::push_decoded`, telling `ev` what the packet did.
    pub(crate) fn push_decoded(
        &mut self,
        decoded: Result<Decoded, Skip>,
        cut: bool,
        at_us: u64,
        number: u64,
        ev: &mut Events,
    ) {
        self.counters.packets += 1;
        if cut {
            self.counters.truncated_packets += 1;
        }
        if let Some(t) = decoded.as_ref().ok().and_then(Decoded::tunnel) {
            self.counters.tunneled[t.index()] += 1;
        }
        match decoded {
            Ok(Decoded::Tcp(tcp)) => self.push_tcp(&tcp, at_us, number, ev),
            Ok(Decoded::Udp(udp)) => self.push_udp(&udp, at_us, number, ev),
            Err(Skip::NotTcp) | Err(Skip::Cut) => self.counters.non_tcp += 1,
            Err(Skip::Tunnel(t)) => {
                self.counters.non_tcp += 1;
                self.counters.tunnels_unopened[t.index()] += 1;
            }
            Err(Skip::NotTcpIn(t)) => {
                self.counters.non_tcp += 1;
                self.counters.tunneled[t.index()] += 1;
            }
        }
    }

    /// Accounts one decoded TCP segment (`number`: 1-based packet number).
    pub(crate) fn push_tcp(&mut self, tcp: &TcpPacket, at_us: u64, number: u64, ev: &mut Events) {
        self.counters.tcp_packets += 1;
        let k = key(tcp.src, tcp.dst, self.host);
        // Common case, one lookup: a packet of a flow already tracked.
        if let Some(f) = self.flows.get_mut(&k) {
            if f.contradicted_by(tcp) {
                // Only pure ACKs came before: the flow starts again, the
                // other way round, in the same slot (the protocol half
                // replaces its stream on `Open`).
                let (id, slot, first) = (f.conn.id, f.slot, f.conn.first_at_us);
                let known = PortsKnown {
                    listening: &self.listeners,
                    flows: &self.port_flows,
                };
                let origin = Origin::of(&f.conn);
                *f = Flow::new(id, slot, tcp, first, known, origin, ev);
            }
            if !f.is_new_syn(tcp) {
                let was_closed = f.is_closed();
                f.push(
                    tcp,
                    at_us,
                    number,
                    &self.options.bounds,
                    &mut self.budget,
                    ev,
                );
                if !was_closed && f.is_closed() {
                    self.note_closed(k, ev);
                }
                return;
            }
        }
        if !tcp.syn && self.retired.contains_key(&k) {
            self.counters.late_packets += 1;
            return;
        }
        // A new flow, or a new SYN on a tracked 4-tuple (port reuse).
        if let Some(old) = self.flows.remove(&k) {
            self.retire(old, ev);
        }
        if self.flows.len() >= self.options.bounds.max_flows {
            self.evict(ev);
        }
        let id = self.next_connection;
        self.next_connection = self.next_connection.saturating_add(1);
        let origin = Origin {
            host: self.host,
            copy: self.copies.get(&k).copied(),
        };
        // A mirror is a second look at a connection counted on its read copy.
        let mirror = origin.copy.is_some_and(|c| c.mirror);
        self.counters.connections_seen += u64::from(!mirror);
        if tcp.syn && !mirror {
            let server = if tcp.ack_flag { tcp.src } else { tcp.dst };
            self.listeners.insert(server.port());
        }
        let slot = self.take_slot();
        let known = PortsKnown {
            listening: &self.listeners,
            flows: &self.port_flows,
        };
        let mut f = Flow::new(id, slot, tcp, at_us, known, origin, ev);
        for port in [tcp.src.port(), tcp.dst.port()] {
            let n = &mut self.port_flows[usize::from(port)];
            *n = n.saturating_add(1);
        }
        f.push(
            tcp,
            at_us,
            number,
            &self.options.bounds,
            &mut self.budget,
            ev,
        );
        let closed = f.is_closed();
        self.flows.insert(k, f);
        if closed {
            self.note_closed(k, ev);
        }
        self.note_age(k, id, at_us);
    }

    fn note_closed(&mut self, k: Key, ev: &mut Events) {
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
                self.retire(f, ev);
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
    fn evict(&mut self, ev: &mut Events) {
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
            self.retire(f, ev);
        }
    }

    fn note_age(&mut self, k: Key, id: u32, at_us: u64) {
        if self.ages.len() >= 2 * self.options.bounds.max_flows.max(1) {
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

    /// A slot of the protocol half for a new flow.
    pub(super) fn take_slot(&mut self) -> u32 {
        self.free_slots.pop().unwrap_or_else(|| {
            self.next_slot += 1;
            self.next_slot - 1
        })
    }

    /// `slot` is free again once the flow's `End` went out.
    pub(super) fn free_slot(&mut self, slot: u32) {
        self.free_slots.push(slot);
    }

    fn retire(&mut self, f: Flow, ev: &mut Events) {
        self.free_slot(f.slot);
        f.finish(&mut self.budget, ev);
    }

    /// Ends every open flow (end of capture), in the order they opened.
    pub(crate) fn close_all(&mut self, ev: &mut Events) {
        self.closed.clear();
        let mut open: Vec<Flow> = self.flows.drain().map(|(_, f)| f).collect();
        open.sort_by_key(|f| f.conn.id);
        for f in open {
            self.retire(f, ev);
        }
        self.close_all_udp(ev);
    }
}
