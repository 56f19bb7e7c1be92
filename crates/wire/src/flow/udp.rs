//! UDP in the flow table: DNS datagrams become flows between two sockets,
//! each datagram handed to the protocol half as one message with DNS's TCP
//! length prefix (RFC 1035 §4.2.2), so one analyzer reads both transports.
//! Other UDP is counted per port, not dropped silently.
//!
//! A UDP flow has no close: it ends when every query it carried was
//! answered and `MAX_CLOSED_FLOWS` other flows settled since (as a closed
//! TCP connection waits for its last packets), or when idle for `IDLE_US`.
//! A stub resolver opens a socket per lookup, so a busy service's capture
//! holds a flow per lookup: both bounds keep the open ones few.

use super::events::{Events, StreamEvent};
use super::tcp::TcpFlows;
use super::{key, FlowHashState, Key, MAX_CLOSED_FLOWS};
use crate::decode::UdpPacket;
use std::collections::{HashMap, VecDeque};
use whyslow_model::{Connection, Direction};
use whyslow_proto::dns::message::{parse, plausible};

/// The DNS port (RFC 1035 §4.2.1).
pub const DNS_PORT: u16 = 53;
/// A UDP flow idle this long ends: a stub resolver waits at most 30 s for
/// one try (glibc's `RES_MAXRETRANS`) before it retries on the same socket.
pub const IDLE_US: u64 = 30_000_000;
/// Ports whose other UDP is counted by name; the rest as "other ports".
pub const OTHER_PORTS_KEPT: usize = 64;

#[derive(Default)]
pub(crate) struct UdpFlows {
    flows: HashMap<Key, UdpFlow, FlowHashState>,
    /// Flows whose queries were all answered when last seen, oldest first.
    settled: VecDeque<(Key, u32)>,
    /// Every flow (key, id, last seen when queued), oldest first.
    ages: VecDeque<(Key, u32, u64)>,
    /// Datagrams that were not DNS, by the lower of their two ports.
    pub other: HashMap<u16, u64>,
    /// Datagrams of ports past `OTHER_PORTS_KEPT`.
    pub other_ports_past: u64,
}

struct UdpFlow {
    slot: u32,
    conn: Connection,
    /// The last datagram went to the client.
    answered_last: bool,
}

impl UdpFlow {
    /// As many answers as queries, an answer last: nothing is waiting.
    fn settled(&self) -> bool {
        self.answered_last && self.conn.to_client.packets >= self.conn.to_server.packets
    }
}

/// Multicast DNS and LLMNR (RFC 6762, RFC 4795): DNS messages on links,
/// asked of everyone and answered by anyone, not a service's lookups.
const LINK_LOCAL_PORTS: [u16; 2] = [5353, 5355];

/// Whether a datagram is DNS a service asked: either port is 53, or it
/// opens as a DNS message with a question that reads, sent to one host
/// (not multicast or broadcast) and not on mDNS's or LLMNR's ports.
fn is_dns(u: &UdpPacket) -> bool {
    if u.src.port() == DNS_PORT || u.dst.port() == DNS_PORT {
        return true;
    }
    let link_local = LINK_LOCAL_PORTS.contains(&u.src.port())
        || LINK_LOCAL_PORTS.contains(&u.dst.port())
        || u.dst.ip().is_multicast()
        || u.dst.ip() == std::net::Ipv4Addr::BROADCAST;
    !link_local
        && plausible(u.payload).is_some()
        && parse(u.payload).is_ok_and(|m| m.question.is_some())
}

impl TcpFlows {
    /// Accounts one UDP datagram.
    pub(crate) fn push_udp(&mut self, u: &UdpPacket, at_us: u64, number: u64, ev: &mut Events) {
        self.counters.udp_packets += 1;
        self.expire_udp(at_us, ev);
        let k = key(u.src, u.dst, self.host);
        if !self.udp.flows.contains_key(&k) {
            if !is_dns(u) {
                return self.count_other(u);
            }
            self.open_udp(k, u, at_us, ev);
        }
        let f = self.udp.flows.get_mut(&k).expect("opened above");
        let direction = if u.src == f.conn.client {
            Direction::ToServer
        } else {
            Direction::ToClient
        };
        let was_settled = f.settled();
        let stats = f.conn.stats_mut(direction);
        stats.packets += 1;
        stats.payload_bytes += u64::from(u.len);
        f.conn.last_at_us = at_us;
        f.answered_last = direction == Direction::ToClient;
        let settled = f.settled();
        datagram(ev, f.slot, direction, u, at_us, number);
        if settled && !was_settled {
            let id = f.conn.id;
            self.udp.settled.push_back((k, id));
            self.retire_settled(ev);
        }
    }

    fn count_other(&mut self, u: &UdpPacket) {
        let port = u.src.port().min(u.dst.port());
        let other = &mut self.udp.other;
        if other.len() < OTHER_PORTS_KEPT || other.contains_key(&port) {
            *other.entry(port).or_default() += 1;
        } else {
            self.udp.other_ports_past += 1;
        }
    }

    fn open_udp(&mut self, k: Key, u: &UdpPacket, at_us: u64, ev: &mut Events) {
        if self.udp.flows.len() >= self.options.bounds.max_flows {
            if let Some(k) = self.idlest_udp() {
                self.retire_udp(k, ev);
                self.counters.evicted_flows += 1;
            }
        }
        // The sender of a query is the client; else the side on port 53.
        let src_is_client = match plausible(u.payload) {
            Some(response) => !response,
            None => u.dst.port() == DNS_PORT,
        };
        let (client, server) = if src_is_client {
            (u.src, u.dst)
        } else {
            (u.dst, u.src)
        };
        let id = self.next_connection;
        self.next_connection = self.next_connection.saturating_add(1);
        self.counters.connections_seen += 1;
        let slot = self.take_slot();
        let mut conn = Connection::new(id, client, server, at_us);
        conn.udp = true;
        conn.host = self.host;
        ev.list.push(StreamEvent::Open {
            slot,
            id,
            client,
            server,
            at_us,
            mid_stream: false,
            udp: true,
            origin: super::conn::Origin {
                host: self.host,
                copy: None,
            },
        });
        let flow = UdpFlow {
            slot,
            conn,
            answered_last: false,
        };
        self.udp.flows.insert(k, flow);
        if self.udp.ages.len() >= 2 * self.options.bounds.max_flows.max(1) {
            // Entries of flows gone pile up: drop them.
            let flows = &self.udp.flows;
            self.udp
                .ages
                .retain(|(k, id, _)| flows.get(k).is_some_and(|f| f.conn.id == *id));
        }
        self.udp.ages.push_back((k, id, at_us));
    }

    /// The flow idle longest, nearly: the oldest queued that was not seen
    /// since it was queued (a second chance, as for TCP's `idlest`).
    fn idlest_udp(&mut self) -> Option<Key> {
        while let Some((k, id, queued)) = self.udp.ages.pop_front() {
            let Some(f) = self.udp.flows.get(&k).filter(|f| f.conn.id == id) else {
                continue; // gone
            };
            if f.conn.last_at_us > queued {
                let seen = f.conn.last_at_us;
                self.udp.ages.push_back((k, id, seen));
                continue;
            }
            return Some(k);
        }
        None
    }

    /// Ends settled flows past the `MAX_CLOSED_FLOWS` most recent.
    fn retire_settled(&mut self, ev: &mut Events) {
        while self.udp.settled.len() > MAX_CLOSED_FLOWS {
            let Some((k, id)) = self.udp.settled.pop_front() else {
                break;
            };
            let still = self.udp.flows.get(&k);
            if still.is_some_and(|f| f.conn.id == id && f.settled()) {
                self.retire_udp(k, ev);
            }
        }
    }

    /// Ends flows idle for `IDLE_US`: the oldest queued first, those seen
    /// since they were queued queued again (a second chance, as for TCP).
    fn expire_udp(&mut self, now: u64, ev: &mut Events) {
        while let Some(&(k, id, queued)) = self.udp.ages.front() {
            if now.saturating_sub(queued) < IDLE_US {
                return;
            }
            self.udp.ages.pop_front();
            let Some(f) = self.udp.flows.get(&k).filter(|f| f.conn.id == id) else {
                continue;
            };
            if now.saturating_sub(f.conn.last_at_us) < IDLE_US {
                let seen = f.conn.last_at_us;
                self.udp.ages.push_back((k, id, seen));
                continue;
            }
            self.retire_udp(k, ev);
        }
    }

    fn retire_udp(&mut self, k: Key, ev: &mut Events) {
        if let Some(f) = self.udp.flows.remove(&k) {
            self.free_slot(f.slot);
            ev.list.push(StreamEvent::End {
                slot: f.slot,
                conn: Box::new(f.conn),
            });
        }
    }

    /// See `FlowTable::other_udp`.
    pub(crate) fn other_udp(&self) -> Vec<(u16, u64)> {
        let mut v: Vec<(u16, u64)> = self.udp.other.iter().map(|(p, n)| (*p, *n)).collect();
        v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        if self.udp.other_ports_past > 0 {
            v.push((0, self.udp.other_ports_past));
        }
        v
    }

    /// Ends every UDP flow (end of capture), in the order they opened.
    pub(crate) fn close_all_udp(&mut self, ev: &mut Events) {
        let mut open: Vec<(Key, u32)> = self
            .udp
            .flows
            .iter()
            .map(|(k, f)| (*k, f.conn.id))
            .collect();
        open.sort_by_key(|(_, id)| *id);
        for (k, _) in open {
            self.retire_udp(k, ev);
        }
        self.udp.settled.clear();
        self.udp.ages.clear();
    }
}

/// One datagram as one length-prefixed message; bytes past the capture's
/// snapshot length as a gap after it.
fn datagram(
    ev: &mut Events,
    slot: u32,
    direction: Direction,
    u: &UdpPacket,
    at_us: u64,
    packet: u64,
) {
    let len = u16::try_from(u.len).unwrap_or(u16::MAX);
    let start = ev.bytes.len();
    ev.bytes.extend_from_slice(&len.to_be_bytes());
    let kept = u.payload.len().min(usize::from(len));
    ev.bytes.extend_from_slice(&u.payload[..kept]);
    ev.list.push(StreamEvent::Data {
        slot,
        direction,
        bytes: start..ev.bytes.len(),
        at_us,
        packet,
    });
    let missing = u64::from(len) - kept as u64;
    if missing > 0 {
        ev.list.push(StreamEvent::Gap {
            slot,
            direction,
            len: missing,
        });
    }
}
