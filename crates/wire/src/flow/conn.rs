//! One TCP connection being rebuilt from its packets: its TCP side (events,
//! counters, reassembly). What its bytes say is the protocol half's
//! (`streams`), which its in-order bytes go to as `Events`.

use super::analysis::{analyze, Seg, SeqState, Verdict};
use super::events::{Events, StreamEvent};
use super::Bounds;
use crate::decode::TcpPacket;
use crate::merged::SharedCopy;
use crate::reassembly::{Budget, Reassembler};
use std::collections::HashSet;
use whyslow_model::{AckEvent, CloseKind, Connection, Direction, Segment, SegmentFlags};
use whyslow_proto::sniff::sender_is_client;

/// Largest window shift allowed (RFC 7323 §2.3).
const MAX_WINDOW_SCALE: u8 = 14;

fn idx(d: Direction) -> usize {
    match d {
        Direction::ToServer => 0,
        Direction::ToClient => 1,
    }
}

/// 64-bit stream offset of a 32-bit relative sequence number: the value
/// nearest `reference` (the highest offset seen), so wrap-around is handled.
fn unwrap(rel: u32, reference: u64) -> u64 {
    let delta = i64::from(rel.wrapping_sub(reference as u32) as i32);
    (reference as i64).saturating_add(delta).max(0) as u64
}

pub struct Flow {
    pub conn: Connection,
    /// Where the protocol half keeps this connection (`StreamEvent`).
    pub slot: u32,
    pub last_seen_us: u64,
    client_isn: Option<u32>,
    server_isn: Option<u32>,
    /// Sequence number of stream offset 0, per direction.
    base: [Option<u32>; 2],
    /// Highest stream offset seen per direction (reference for unwrapping).
    high: [u64; 2],
    seq: [SeqState; 2],
    wscale: [Option<u8>; 2],
    reasm: [Reassembler; 2],
    fin: [bool; 2],
    /// Stream offset of each direction's FIN, once seen.
    fin_offset: [Option<u64>; 2],
    rst: bool,
    /// Oriented by port order alone on a packet with no payload (a pooled
    /// connection's trailing ACK, the capture's first packet of it): its
    /// first bytes may still say otherwise (`contradicted_by`).
    guessed: bool,
}

/// Which capture a flow is in, and which copy of a shared connection it
/// is, if several hosts captured it.
#[derive(Debug, Clone, Copy, Default)]
pub struct Origin {
    pub host: u16,
    pub copy: Option<SharedCopy>,
}

impl Origin {
    pub fn of(c: &Connection) -> Origin {
        Origin {
            host: c.host,
            copy: c.shared.map(|shared| SharedCopy {
                shared,
                mirror: c.mirror,
            }),
        }
    }

    /// Stamps `c` with where it was captured.
    pub fn stamp(&self, c: &mut Connection) {
        c.host = self.host;
        c.shared = self.copy.map(|s| s.shared);
        c.mirror = self.copy.is_some_and(|s| s.mirror);
    }
}

/// What the flow table knows of ports when a connection first shows.
pub struct PortsKnown<'a> {
    /// Server ports seen on connections whose SYN was captured.
    pub listening: &'a HashSet<u16>,
    /// Per port, connections seen with it at either end so far.
    pub flows: &'a [u8],
}

impl PortsKnown<'_> {
    /// Which of (src, dst) the table knows as a server's port: one known
    /// to listen, else one that recurs on other connections while the
    /// other end's never did.
    fn server_side(&self, src: u16, dst: u16) -> Option<bool> {
        let listens = |p: u16| self.listening.contains(&p);
        let recurs = |p: u16| self.flows.get(usize::from(p)).is_some_and(|&n| n > 0);
        for known in [&listens as &dyn Fn(u16) -> bool, &recurs] {
            match (known(src), known(dst)) {
                (true, false) => return Some(true),
                (false, true) => return Some(false),
                _ => {}
            }
        }
        None
    }
}

impl Flow {
    /// `known`: what the table knows of listening ports. The protocol half
    /// hears of it (`Open`) through `ev`.
    pub fn new(
        id: u32,
        slot: u32,
        p: &TcpPacket,
        at_us: u64,
        known: PortsKnown,
        origin: Origin,
        ev: &mut Events,
    ) -> Flow {
        // The SYN sender is the client; a SYN/ACK's sender is the server.
        // Mid-stream: a port known to listen on one side only (a handshake
        // to it was seen), or one that recurs on other connections while
        // the other never did (a pool's connections to one server, all
        // open before the capture); then what the bytes say (a request
        // line); then the higher port as the ephemeral one. Loopback
        // servers on ephemeral ports make the last guess wrong often.
        let mut guessed = false;
        let src_is_client = if p.syn {
            !p.ack_flag
        } else if let Some(src_serves) = known.server_side(p.src.port(), p.dst.port()) {
            !src_serves
        } else if let Some(client) = sender_is_client(p.payload) {
            client
        } else {
            guessed = p.payload.is_empty();
            p.src.port() >= p.dst.port()
        };
        let (client, server) = if src_is_client {
            (p.src, p.dst)
        } else {
            (p.dst, p.src)
        };
        ev.list.push(StreamEvent::Open {
            slot,
            id,
            client,
            server,
            at_us,
            // A flow first seen without its SYN began before the capture did.
            mid_stream: !p.syn,
            udp: false,
            origin,
        });
        let mut conn = Connection::new(id, client, server, at_us);
        origin.stamp(&mut conn);
        Flow {
            conn,
            slot,
            last_seen_us: at_us,
            client_isn: None,
            server_isn: None,
            base: [None; 2],
            high: [0; 2],
            seq: Default::default(),
            wscale: [None; 2],
            reasm: Default::default(),
            fin: [false; 2],
            fin_offset: [None; 2],
            rst: false,
            guessed,
        }
    }

    /// Whether `p`, this flow's first packet with bytes, shows the port
    /// guess wrong: its bytes say who sent them, and it is not who the flow
    /// took them for. The guess is settled by the first bytes either way.
    pub fn contradicted_by(&mut self, p: &TcpPacket) -> bool {
        if !self.guessed || p.payload.is_empty() {
            return false;
        }
        self.guessed = false;
        sender_is_client(p.payload).is_some_and(|client| client != (p.src == self.conn.client))
    }

    pub fn is_closed(&self) -> bool {
        self.rst || (self.fin[0] && self.fin[1])
    }

    /// True when `p` opens a new connection on this flow's 4-tuple (port reuse).
    pub fn is_new_syn(&self, p: &TcpPacket) -> bool {
        p.syn && !p.ack_flag && self.client_isn != Some(p.seq)
    }

    fn direction(&self, p: &TcpPacket) -> Direction {
        if p.src == self.conn.client {
            Direction::ToServer
        } else {
            Direction::ToClient
        }
    }

    /// Accounts one packet; the bytes it completes in order go to `ev`.
    pub fn push(
        &mut self,
        p: &TcpPacket,
        at: u64,
        pkt: u64,
        lim: &Bounds,
        budget: &mut Budget,
        ev: &mut Events,
    ) {
        let d = self.direction(p);
        let i = idx(d);
        self.last_seen_us = at;
        self.conn.last_at_us = self.conn.last_at_us.max(at);
        self.handshake(p, d, at);
        let window = self.scaled_window(p, i);
        let seg = Seg {
            at_us: at,
            seq: p.seq,
            ack: p.ack_flag.then_some(p.ack),
            len: p.seg_len,
            syn: p.syn,
            fin: p.fin,
            rst: p.rst,
            window,
        };
        let prev_ack = self.seq[i].lastack;
        let prev_win = self.seq[i].window;
        let ooo = self.ooo_threshold();
        let v = {
            let [a, b] = &mut self.seq;
            if i == 0 {
                analyze(a, b, &seg, ooo)
            } else {
                analyze(b, a, &seg, ooo)
            }
        };
        self.count(d, p, &v);
        let data_seq = p.seq.wrapping_add(u32::from(p.syn));
        let offset = self.offset(i, data_seq, p.seg_len);
        if p.fin {
            self.fin_offset[i] = Some(offset.saturating_add(u64::from(p.seg_len)));
        }
        // A mirror's exchanges are read for the callee's times alone: its
        // events would hold the connection's a second time.
        if !self.conn.mirror {
            self.record_segment(d, p, &v, offset, at, pkt, lim, budget);
            self.record_ack(d, p, prev_ack, prev_win, window, at, pkt, lim, budget);
        }
        self.skip_unseen(d.reverse(), p, budget, ev);
        self.close(d, p);
        if !p.payload.is_empty() && !p.rst {
            self.reassemble(d, offset, p, at, pkt, lim, budget, ev);
        }
    }

    fn handshake(&mut self, p: &TcpPacket, d: Direction, at: u64) {
        let i = idx(d);
        if p.syn {
            self.base[i] = Some(p.seq.wrapping_add(1));
            self.wscale[i] = p.wscale.map(|s| s.min(MAX_WINDOW_SCALE));
            self.reasm[i].start_at(0);
            if p.ack_flag {
                self.server_isn.get_or_insert(p.seq);
                self.conn.syn_ack_at_us.get_or_insert(at);
            } else {
                self.client_isn.get_or_insert(p.seq);
                self.conn.syn_at_us.get_or_insert(at);
            }
        } else if self.base[i].is_none() {
            // Handshake not captured: offsets count from the first byte seen.
            self.base[i] = Some(p.seq);
        }
        let completes = d == Direction::ToServer
            && !p.syn
            && p.ack_flag
            && self.conn.established_at_us.is_none()
            && self.conn.syn_ack_at_us.is_some()
            && self.server_isn.map(|s| s.wrapping_add(1)) == Some(p.ack);
        if completes {
            self.conn.established_at_us = Some(at);
        }
    }

    /// Window in bytes: shifted only when both SYNs carried the option
    /// (RFC 7323 §2.2); SYN segments themselves are never scaled.
    fn scaled_window(&self, p: &TcpPacket, i: usize) -> u32 {
        match (self.wscale, p.syn) {
            ([Some(_), Some(_)], false) => u32::from(p.window) << self.wscale[i].unwrap_or(0),
            _ => u32::from(p.window),
        }
    }

    /// Wireshark uses the handshake RTT (SYN → ACK) as out-of-order threshold.
    fn ooo_threshold(&self) -> Option<u64> {
        Some(
            self.conn
                .established_at_us?
                .saturating_sub(self.conn.syn_at_us?),
        )
    }

    fn count(&mut self, d: Direction, p: &TcpPacket, v: &Verdict) {
        let s = self.conn.stats_mut(d);
        s.packets += 1;
        s.payload_bytes += u64::from(p.seg_len);
        s.retransmissions += u64::from(v.resent());
        s.out_of_order += u64::from(v.out_of_order);
        s.zero_windows += u64::from(v.zero_window);
        s.dup_acks += u64::from(v.dup_ack);
    }

    fn offset(&mut self, i: usize, seq: u32, len: u32) -> u64 {
        let base = self.base[i].unwrap_or(seq);
        let off = unwrap(seq.wrapping_sub(base), self.high[i]);
        self.high[i] = self.high[i].max(off.saturating_add(u64::from(len)));
        off
    }

    /// Whether one more event may be kept; takes it from the budget if so.
    fn room(&mut self, lim: &Bounds, budget: &mut Budget) -> bool {
        if self.conn.id as usize >= lim.max_connections {
            return false; // left out of the timeline: events would be dropped
        }
        let used = self.conn.segments.len() + self.conn.acks.len();
        if used >= lim.max_events_per_connection || budget.events_full() {
            self.conn.events_truncated = true;
            return false;
        }
        budget.events += 1;
        true
    }

    #[allow(clippy::too_many_arguments)]
    fn record_segment(
        &mut self,
        d: Direction,
        p: &TcpPacket,
        v: &Verdict,
        off: u64,
        at: u64,
        pkt: u64,
        lim: &Bounds,
        budget: &mut Budget,
    ) {
        if p.seg_len == 0 && !p.syn && !p.fin && !p.rst {
            return;
        }
        if !self.room(lim, budget) {
            return;
        }
        self.conn.segments.push(Segment {
            packet: pkt,
            at_us: at,
            direction: d,
            stream_offset: off,
            len: p.seg_len,
            flags: SegmentFlags {
                syn: p.syn,
                fin: p.fin,
                rst: p.rst,
                psh: p.psh,
                retransmission: v.resent(),
                out_of_order: v.out_of_order,
                zero_window: v.zero_window,
            },
        });
    }

    #[allow(clippy::too_many_arguments)]
    fn record_ack(
        &mut self,
        d: Direction,
        p: &TcpPacket,
        prev_ack: Option<u32>,
        prev_win: Option<u32>,
        window: u32,
        at: u64,
        pkt: u64,
        lim: &Bounds,
        budget: &mut Budget,
    ) {
        if !p.ack_flag || p.rst {
            return;
        }
        let advanced = prev_ack.is_none_or(|a| super::analysis::seq_gt(p.ack, a));
        let zero_advert = window == 0 || prev_win == Some(0);
        if !(advanced || zero_advert) || !self.room(lim, budget) {
            return;
        }
        let r = idx(d.reverse());
        let base = self.base[r].unwrap_or(p.ack);
        let acked = unwrap(p.ack.wrapping_sub(base), self.high[r]);
        self.conn.acks.push(AckEvent {
            packet: pkt,
            at_us: at,
            direction: d,
            acked_offset: acked,
            window,
            piggybacked: p.seg_len > 0,
        });
    }

    fn close(&mut self, d: Direction, p: &TcpPacket) {
        if p.rst {
            self.rst = true;
            if !matches!(self.conn.closed_by, Some((_, CloseKind::Rst))) {
                self.conn.closed_by = Some((d, CloseKind::Rst));
            }
        } else if p.fin {
            self.fin[idx(d)] = true;
            self.conn.closed_by.get_or_insert((d, CloseKind::Fin));
        }
    }

    /// Bytes of `r` that `p` acknowledges but the capture never showed are
    /// gaps: the analyzer skips them before it sees the answer to them.
    fn skip_unseen(&mut self, r: Direction, p: &TcpPacket, budget: &mut Budget, ev: &mut Events) {
        let i = idx(r);
        let Some(base) = self.base[i].filter(|_| p.ack_flag && !p.rst) else {
            return;
        };
        let mut acked = unwrap(p.ack.wrapping_sub(base), self.high[i]);
        if let Some(fin) = self.fin_offset[i] {
            acked = acked.min(fin); // the FIN takes a sequence number, not a byte
        }
        let slot = self.slot;
        self.reasm[i].acked(acked, budget, &mut |c| ev.chunk(slot, r, c));
    }

    #[allow(clippy::too_many_arguments)]
    fn reassemble(
        &mut self,
        d: Direction,
        off: u64,
        p: &TcpPacket,
        at: u64,
        pkt: u64,
        lim: &Bounds,
        budget: &mut Budget,
        ev: &mut Events,
    ) {
        let slot = self.slot;
        let wire = u64::from(p.seg_len);
        self.reasm[idx(d)].push(
            off,
            p.payload,
            wire,
            at,
            pkt,
            lim.max_held_bytes_per_flow,
            budget,
            &mut |c| ev.chunk(slot, d, c),
        );
    }

    /// Ends the connection: holes become gaps; then its TCP side goes to the
    /// protocol half whole (`End`).
    pub fn finish(mut self, budget: &mut Budget, ev: &mut Events) {
        let slot = self.slot;
        for d in [Direction::ToServer, Direction::ToClient] {
            self.reasm[idx(d)].flush(budget, &mut |c| ev.chunk(slot, d, c));
        }
        ev.list.push(StreamEvent::End {
            slot,
            conn: Box::new(self.conn),
        });
    }
}
