//! One TCP connection being rebuilt from its packets.

use super::analysis::{analyze, Seg, SeqState, Verdict};
use super::Limits;
use crate::decode::TcpPacket;
use crate::reassembly::{Budget, Chunk, Reassembler};
use std::collections::HashSet;
use whyslow_model::{AckEvent, CloseKind, Connection, Direction, Exchange, Segment, SegmentFlags};
use whyslow_proto::sniff::sender_is_client;
use whyslow_proto::{Sniffer, Start, StreamAnalyzer};

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
    proto: Sniffer,
    fin: [bool; 2],
    /// Stream offset of each direction's FIN, once seen.
    fin_offset: [Option<u64>; 2],
    rst: bool,
}

impl Flow {
    /// `listeners`: server ports seen on connections whose SYN was captured.
    pub fn new(id: u32, p: &TcpPacket, at_us: u64, listeners: &HashSet<u16>, lim: &Limits) -> Flow {
        // The SYN sender is the client; a SYN/ACK's sender is the server.
        // Mid-stream: what the bytes say (a request line), then a port known
        // to listen, then the higher port as the ephemeral one. Loopback
        // servers on ephemeral ports make the last guess wrong often.
        let src_is_client = if p.syn {
            !p.ack_flag
        } else if let Some(client) = sender_is_client(p.payload) {
            client
        } else {
            match (
                listeners.contains(&p.src.port()),
                listeners.contains(&p.dst.port()),
            ) {
                (false, true) => true,
                (true, false) => false,
                _ => p.src.port() >= p.dst.port(),
            }
        };
        let (client, server) = if src_is_client {
            (p.src, p.dst)
        } else {
            (p.dst, p.src)
        };
        Flow {
            conn: Connection::new(id, client, server, at_us),
            last_seen_us: at_us,
            client_isn: None,
            server_isn: None,
            base: [None; 2],
            high: [0; 2],
            seq: Default::default(),
            wscale: [None; 2],
            reasm: Default::default(),
            // A flow first seen without its SYN began before the capture did.
            proto: Sniffer::with_keys(
                id,
                server.port(),
                if p.syn {
                    Start::Beginning
                } else {
                    Start::MidStream
                },
                lim.keylog.clone(),
            ),
            fin: [false; 2],
            fin_offset: [None; 2],
            rst: false,
        }
    }

    /// First-byte time of the oldest request on this connection not yet
    /// handed out as an exchange (see `StreamAnalyzer::open_since`).
    pub fn open_since(&self) -> Option<u64> {
        self.proto.open_since()
    }

    /// Who and what the connection is, for a window that carries some of its
    /// exchanges before it ends: no events, counters or handshake, which
    /// come once, with the whole connection, in the window where it ends.
    pub fn header(&self) -> Connection {
        let mut h = super::window::header(&self.conn);
        h.protocol = self.proto.protocol();
        h
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

    /// Accounts one packet; completed exchanges go to `out`.
    pub fn push(
        &mut self,
        p: &TcpPacket,
        at: u64,
        pkt: u64,
        lim: &Limits,
        budget: &mut Budget,
        out: &mut Vec<Exchange>,
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
        self.record_segment(d, p, &v, offset, at, pkt, lim, budget);
        self.record_ack(d, p, prev_ack, prev_win, window, at, pkt, lim, budget);
        self.skip_unseen(d.reverse(), p, budget, out);
        self.close(d, p);
        if !p.payload.is_empty() && !p.rst {
            self.reassemble(d, offset, p, at, pkt, lim, budget, out);
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
    fn room(&mut self, lim: &Limits, budget: &mut Budget) -> bool {
        if self.conn.id as usize >= lim.max_connections {
            return false; // left out of the timeline: events would be dropped
        }
        let used = self.conn.segments.len() + self.conn.acks.len();
        if used >= lim.max_events_per_connection || budget.events >= budget.max_events {
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
        lim: &Limits,
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
        lim: &Limits,
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
    fn skip_unseen(
        &mut self,
        r: Direction,
        p: &TcpPacket,
        budget: &mut Budget,
        out: &mut Vec<Exchange>,
    ) {
        let i = idx(r);
        let Some(base) = self.base[i].filter(|_| p.ack_flag && !p.rst) else {
            return;
        };
        let mut acked = unwrap(p.ack.wrapping_sub(base), self.high[i]);
        if let Some(fin) = self.fin_offset[i] {
            acked = acked.min(fin); // the FIN takes a sequence number, not a byte
        }
        let before = out.len();
        let Flow { reasm, proto, .. } = self;
        reasm[i].acked(acked, budget, &mut |c| feed(proto, r, c, out));
        self.hand_over(out, before);
    }

    #[allow(clippy::too_many_arguments)]
    fn reassemble(
        &mut self,
        d: Direction,
        off: u64,
        p: &TcpPacket,
        at: u64,
        pkt: u64,
        lim: &Limits,
        budget: &mut Budget,
        out: &mut Vec<Exchange>,
    ) {
        let before = out.len();
        let Flow { reasm, proto, .. } = self;
        let mut emit = |c: Chunk| feed(proto, d, c, out);
        let wire = u64::from(p.seg_len);
        reasm[idx(d)].push(
            off,
            p.payload,
            wire,
            at,
            pkt,
            lim.max_held_bytes_per_flow,
            budget,
            &mut emit,
        );
        self.note_protocol();
        self.hand_over(out, before);
    }

    /// Moves the completed exchanges to `out`, counting those added since
    /// it held `before`.
    fn hand_over(&mut self, out: &mut Vec<Exchange>, before: usize) {
        self.proto.drain_exchanges(out);
        self.conn.exchanges += (out.len() - before) as u64;
    }

    /// Ends the connection: holes become gaps, the analyzer flushes.
    pub fn finish(mut self, budget: &mut Budget) -> (Connection, Vec<Exchange>, Option<String>) {
        let mut ex = Vec::new();
        for d in [Direction::ToServer, Direction::ToClient] {
            let Flow { reasm, proto, .. } = &mut self;
            reasm[idx(d)].flush(budget, &mut |c| feed(proto, d, c, &mut ex));
        }
        self.proto.drain_exchanges(&mut ex);
        ex.extend(self.proto.finish());
        self.conn.exchanges += ex.len() as u64;
        self.note_protocol();
        let err = self.proto.error().map(str::to_string);
        (self.conn, ex, err)
    }

    fn note_protocol(&mut self) {
        self.conn.protocol = self.proto.protocol();
        if let Some(f) = self.proto.tls_facts() {
            self.conn.tls = true;
            self.conn.tls_facts = Some(f.clone());
        }
    }
}

/// Hands one reassembled chunk of direction `d` to the protocol layer.
fn feed(proto: &mut Sniffer, d: Direction, c: Chunk, out: &mut Vec<Exchange>) {
    match c {
        Chunk::Data {
            data,
            at_us,
            packet,
        } => proto.on_data_into(d, data, at_us, packet, out),
        Chunk::Gap(n) => proto.on_gap(d, n),
    }
}
