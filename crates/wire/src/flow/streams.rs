//! The protocol half of the flow table: each open connection's analyzer
//! (`Sniffer`), fed the in-order bytes the TCP half hands on; the exchanges
//! they complete, numbered; the connections that ended, with what their
//! bytes said. Windows are cut from what it holds (`window`).

use super::events::{Events, StreamEvent};
use super::plaintext::{self, PlaintextFeed};
use super::{window, FlowCounts, FlowOptions, MAX_ERRORS};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use whyslow_model::{Connection, Direction, Exchange, Gap, Timeline, GAPS_KEPT};
use whyslow_proto::{Sniffer, Start, StreamAnalyzer};

/// One open connection, as the protocol half knows it.
pub(super) struct Stream {
    /// Who it is (`window::header`): no events, counters or handshake.
    pub header: Connection,
    pub proto: Sniffer,
    /// Exchanges handed on so far.
    exchanges: u64,
    /// Its connection in the plaintext feed: its analyzer reads that, not
    /// the ciphertext of its packets.
    plain: Option<u32>,
}

impl Stream {
    /// Who and what the connection is, for a window that carries some of its
    /// exchanges before it ends: no events, counters or handshake, which
    /// come once, with the whole connection, in the window where it ends.
    pub fn header(&self) -> Connection {
        let mut h = self.header.clone();
        h.protocol = self.proto.protocol();
        h.tls = self.proto.tls_facts().is_some() || self.plain.is_some();
        h
    }

    /// First-byte time of the oldest request on this connection not yet
    /// handed out as an exchange (see `StreamAnalyzer::open_since`).
    pub fn open_since(&self) -> Option<u64> {
        self.proto.open_since()
    }
}

pub struct Streams {
    pub(super) options: FlowOptions,
    /// When the capture last carried bytes: a gap it reveals lies after.
    pub(super) last_data_us: u64,
    /// Open connections by the slot the TCP half gave them.
    pub(super) slots: Vec<Option<Stream>>,
    pub(super) next_exchange: u32,
    pub(super) connections: Vec<Connection>,
    pub(super) exchanges: Vec<Exchange>,
    /// Windowed: the connections of `exchanges`, kept as they are added, so
    /// that a cut need not walk every exchange to find them.
    pub(super) waiting: foldhash::HashSet<u32>,
    /// Ports of the service under investigation, once decided (windowed).
    pub(super) service: Option<Vec<u16>>,
    /// Exchanges waiting that are requests of the service.
    pub(super) service_waiting: usize,
    /// No window is ready before this many exchanges wait (`take_window`).
    pub(super) retry_at: usize,
    /// After a forced cut: the latest answer of the window it ended, for
    /// the next window's edges.
    pub(super) carried_until: Option<u64>,
    /// Capacity of the last window's vector (see `make_room`).
    pub(super) room: usize,
    /// Exchanges completed by the chunk being fed (reused buffer).
    scratch: Vec<Exchange>,
    /// Exchange and dropped-connection counters (the packet ones are the
    /// TCP half's).
    pub(super) counters: FlowCounts,
    pub(super) errors: Vec<String>,
    errors_dropped: u64,
    /// Events of connections taken in a window, given back to the TCP
    /// half's budget (`Budget::released`).
    pub(super) released: Arc<AtomicUsize>,
    /// Windows are taken as it goes (`take_window`): nothing is left out,
    /// and `max_exchanges`/`max_connections` do not apply.
    pub(super) windowed: bool,
    /// Where the plaintext feed is read to, if there is one.
    plain: Option<PlainCursor>,
    /// Connections no packet shows (Unix-domain sockets), opened from the
    /// feed, by feed connection; ended with the capture.
    alone: Vec<Option<Stream>>,
    /// Callee times read from mirrors of shared connections (`callee`).
    pub(super) callees: super::callee::Callees,
}

/// Where an open connection is kept.
#[derive(Clone, Copy)]
enum At {
    /// The slot the TCP half gave it.
    Slot(u32),
    /// Its feed connection: seen in the feed alone.
    Alone(u32),
}

/// Connections seen in the feed alone are numbered from here: the TCP half
/// numbers its own from 0, and never gets near.
const EVENTS_ONLY_FIRST_ID: u32 = 1 << 31;

/// Chunks of a connection that ended are fed up to this long after its
/// last packet: a read returns a little after the bytes it read arrived,
/// and the last response's may return after the closing FIN was captured.
const PLAIN_RETIRE_SLACK_US: u64 = 100_000;

/// A library call enters before its first packet is captured by the time
/// to encrypt and hand the record to the kernel: tens of µs on loopback
/// (Go's crypto/tls, 80 µs at 16 clients), milliseconds on a loaded host.
/// A connection first seen mid-stream gets its chunks this far before its
/// first packet; older ones were sent before the capture saw it.
const PLAIN_OPEN_SLACK_US: u64 = 50_000;

/// How far the plaintext feed has been read.
struct PlainCursor {
    feed: std::sync::Arc<PlaintextFeed>,
    /// Next chunk in time order.
    next: usize,
    /// The latest capture time seen.
    now: u64,
    /// Each feed connection's open slot.
    slot_of: Vec<Option<u32>>,
    /// Chunks fed ahead of the cursor, when their connection ended.
    early: foldhash::HashSet<usize>,
}

impl Streams {
    pub(super) fn new(options: FlowOptions, released: Arc<AtomicUsize>, windowed: bool) -> Self {
        let plain = options.plaintext.clone().map(|feed| PlainCursor {
            slot_of: vec![None; feed.keys()],
            feed,
            next: 0,
            now: 0,
            early: Default::default(),
        });
        Streams {
            last_data_us: 0,
            options,
            slots: Vec::new(),
            next_exchange: 0,
            connections: Vec::new(),
            exchanges: Vec::new(),
            waiting: Default::default(),
            service: None,
            service_waiting: 0,
            retry_at: 0,
            carried_until: None,
            room: 0,
            scratch: Vec::new(),
            counters: FlowCounts::default(),
            errors: Vec::new(),
            errors_dropped: 0,
            released,
            windowed,
            plain,
            alone: Vec::new(),
            callees: Default::default(),
        }
    }

    /// The open connections.
    pub(super) fn open(&self) -> impl Iterator<Item = &Stream> {
        self.slots.iter().chain(&self.alone).flatten()
    }

    /// Takes in what the TCP half told, in order, leaving `events` empty.
    pub(crate) fn apply(&mut self, events: &mut Events) {
        let Events { list, bytes } = events;
        for e in list.drain(..) {
            if self.plain.is_some() {
                if let Some(at) = e.at_us() {
                    self.feed_plaintext_until(at);
                }
            }
            match e {
                StreamEvent::Open {
                    slot,
                    id,
                    client,
                    server,
                    at_us,
                    mid_stream,
                    udp,
                    origin,
                } => {
                    let start = match mid_stream {
                        true => Start::MidStream,
                        false => Start::Beginning,
                    };
                    // A flow opened anew in its slot (its first bytes said
                    // the other end was the client) was fed already.
                    let mut first_open = false;
                    let plain = self.plain.as_mut().and_then(|p| {
                        let key = p.feed.key(client, server)?;
                        first_open = p.slot_of[key as usize].replace(slot).is_none();
                        Some(key)
                    });
                    let keys = self.options.keylog.clone().filter(|_| plain.is_none());
                    let mut header = Connection::new(id, client, server, at_us);
                    header.udp = udp;
                    origin.stamp(&mut header);
                    let proto = match udp {
                        true => Sniffer::dns(id),
                        false => Sniffer::with_keys(id, server.port(), start, keys),
                    };
                    let stream = Stream {
                        header,
                        proto,
                        exchanges: 0,
                        plain,
                    };
                    let i = slot as usize;
                    if self.slots.len() <= i {
                        self.slots.resize_with(i + 1, || None);
                    }
                    self.slots[i] = Some(stream);
                    if let (Some(key), true) = (plain, mid_stream && first_open) {
                        self.feed_before_open(slot, key, at_us);
                    }
                }
                StreamEvent::Data {
                    slot,
                    direction,
                    bytes: range,
                    at_us,
                    packet,
                } => {
                    if self.reads_plaintext(slot) {
                        continue;
                    }
                    let data = &bytes[range];
                    self.last_data_us = at_us;
                    self.feed(At::Slot(slot), |p, out| {
                        p.on_data_into(direction, data, at_us, packet, out)
                    });
                }
                StreamEvent::Gap {
                    slot,
                    direction,
                    len,
                } => {
                    if !self.reads_plaintext(slot) {
                        if let Some(Some(s)) = self.slots.get_mut(slot as usize) {
                            note_gap(s, direction, len, self.last_data_us);
                        }
                        self.feed(At::Slot(slot), |p, _| p.on_gap(direction, len));
                    }
                }
                StreamEvent::End { slot, conn } => self.retire(slot, *conn),
            }
        }
        bytes.clear();
    }

    /// Whether `slot`'s analyzer reads the plaintext feed.
    fn reads_plaintext(&self, slot: u32) -> bool {
        self.plain.is_some()
            && matches!(self.slots.get(slot as usize), Some(Some(s)) if s.plain.is_some())
    }

    /// Feeds the plaintext chunks up to capture time `at` to their open
    /// connections; a chunk whose connection is not open is left out.
    fn feed_plaintext_until(&mut self, at: u64) {
        let Some(mut p) = self.plain.take() else {
            return;
        };
        p.now = p.now.max(at);
        while let Some((key, c)) = p.feed.chunk(p.next).filter(|(_, c)| c.at_us <= p.now) {
            let i = p.next;
            p.next += 1;
            if p.early.remove(&i) {
                continue;
            }
            if let Some(slot) = p.slot_of[key as usize] {
                self.feed_chunk(At::Slot(slot), c);
            } else if let Some(only) = &c.events_only {
                self.open_alone(key, c, only);
                self.feed_chunk(At::Alone(key), c);
            }
        }
        self.plain = Some(p);
    }

    /// A connection the packets do not show, opened at its first chunk.
    fn open_alone(&mut self, key: u32, c: &plaintext::PlainChunk, only: &plaintext::EventsOnly) {
        let i = key as usize;
        if self.alone.len() <= i {
            self.alone.resize_with(i + 1, || None);
        }
        if self.alone[i].is_some() {
            return;
        }
        let client = if c.local == only.server {
            c.remote
        } else {
            c.local
        };
        let id = EVENTS_ONLY_FIRST_ID.saturating_add(key);
        let mut header = Connection::new(id, client, only.server, c.at_us);
        header.socket_path = Some(only.path.to_string());
        let start = Start::MidStream;
        self.alone[i] = Some(Stream {
            header,
            proto: Sniffer::with_keys(id, only.server.port(), start, None),
            exchanges: 0,
            plain: None,
        });
    }

    /// A connection first seen mid-stream at `at`: its chunks the cursor
    /// passed while it was not open, within PLAIN_OPEN_SLACK_US, are fed
    /// first (a write enters before its packet is captured).
    fn feed_before_open(&mut self, slot: u32, key: u32, at: u64) {
        let Some(p) = self.plain.take() else {
            return;
        };
        let since = at.saturating_sub(PLAIN_OPEN_SLACK_US);
        let first = (0..p.next)
            .rev()
            .take_while(|&i| p.feed.chunk(i).is_some_and(|(_, c)| c.at_us >= since))
            .last()
            .unwrap_or(p.next);
        for i in first..p.next {
            if let Some((_, c)) = p.feed.chunk(i).filter(|(k, _)| *k == key) {
                self.feed_chunk(At::Slot(slot), c);
            }
        }
        self.plain = Some(p);
    }

    /// The end of the capture: what the feed holds past the last packet is
    /// fed, and the connections seen in it alone end.
    pub(crate) fn close_events_only(&mut self) {
        if self.plain.is_none() {
            return;
        }
        self.feed_plaintext_until(u64::MAX);
        for i in 0..self.alone.len() {
            if let Some(s) = self.alone[i].take() {
                let conn = s.header.clone();
                self.retire_stream(s, conn);
            }
        }
    }

    /// A plaintext-fed connection ends: its chunks until shortly after are
    /// fed now, ahead of the cursor.
    fn flush_plaintext(&mut self, slot: u32, key: u32) {
        let Some(mut p) = self.plain.take() else {
            return;
        };
        let until = p.now.saturating_add(PLAIN_RETIRE_SLACK_US);
        let mut i = p.next;
        while let Some((k, c)) = p.feed.chunk(i).filter(|(_, c)| c.at_us <= until) {
            if k == key && p.early.insert(i) {
                self.feed_chunk(At::Slot(slot), c);
            }
            i += 1;
        }
        p.slot_of[key as usize] = None;
        self.plain = Some(p);
    }

    fn feed_chunk(&mut self, at: At, c: &plaintext::PlainChunk) {
        let Some(s) = stream_at(&mut self.slots, &mut self.alone, at) else {
            return;
        };
        let direction = plaintext::direction(c, s.header.client);
        if s.header.socket_path.is_some() {
            s.header.last_at_us = s.header.last_at_us.max(c.at_us);
            let side = match direction {
                whyslow_model::Direction::ToServer => &mut s.header.to_server,
                whyslow_model::Direction::ToClient => &mut s.header.to_client,
            };
            side.payload_bytes += c.whole;
        }
        let missing = c.whole.saturating_sub(c.data.len() as u64);
        if missing > 0 {
            note_gap(s, direction, missing, c.at_us);
        }
        self.feed(at, |p, out| {
            p.on_data_into(direction, &c.data, c.at_us, 0, out);
            if missing > 0 {
                p.on_gap(direction, missing);
            }
        });
    }

    /// Runs `f` on the analyzer at `at` and takes the exchanges it completed.
    fn feed(&mut self, at: At, f: impl FnOnce(&mut Sniffer, &mut Vec<Exchange>)) {
        let Some(s) = stream_at(&mut self.slots, &mut self.alone, at) else {
            return;
        };
        let (mut out, from) = sink(self.windowed, &mut self.exchanges, &mut self.scratch);
        f(&mut s.proto, &mut out);
        s.proto.drain_exchanges(&mut out);
        s.exchanges += (out.len() - from) as u64;
        let port = s.header.server.port();
        if let (true, Some(shared)) = (s.header.mirror, s.header.shared) {
            self.callees.take(shared, &mut out, from);
        }
        self.add_exchanges(out, from, port);
    }

    /// A connection ended: its analyzer flushes, and it joins those waiting
    /// with what its bytes said.
    fn retire(&mut self, slot: u32, conn: Connection) {
        if let Some(Some(Stream {
            plain: Some(key), ..
        })) = self.slots.get(slot as usize)
        {
            let key = *key;
            self.flush_plaintext(slot, key);
        }
        let Some(s) = self.slots.get_mut(slot as usize).and_then(Option::take) else {
            return;
        };
        self.retire_stream(s, conn);
    }

    fn retire_stream(&mut self, mut s: Stream, mut conn: Connection) {
        conn.gaps = std::mem::take(&mut s.header.gaps);
        for d in [Direction::ToServer, Direction::ToClient] {
            let (from, to) = (s.header.stats(d), conn.stats_mut(d));
            (to.gaps, to.gap_bytes) = (from.gaps, from.gap_bytes);
        }
        let mut ex = Vec::new();
        s.proto.drain_exchanges(&mut ex);
        ex.extend(s.proto.finish());
        conn.exchanges = s.exchanges + ex.len() as u64;
        conn.protocol = s.proto.protocol();
        conn.tls |= s.plain.is_some();
        if let Some(f) = s.proto.tls_facts() {
            conn.tls = true;
            conn.tls_facts = Some(f.clone());
        }
        if let Some(e) = s.proto.error() {
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
        let (mirror, shared) = (conn.mirror, conn.shared);
        if mirror {
            // Counted on the copy read as the connection.
            let events = conn.segments.len() + conn.acks.len();
            self.released.fetch_add(events, Ordering::Relaxed);
        } else if self.keeps_connection(conn.id) {
            self.connections.push(conn);
        } else {
            self.counters.connections_dropped += 1;
            let events = conn.segments.len() + conn.acks.len();
            self.released.fetch_add(events, Ordering::Relaxed);
        }
        let (mut out, from) = sink(self.windowed, &mut self.exchanges, &mut self.scratch);
        out.append(&mut ex);
        if let (true, Some(shared)) = (mirror, shared) {
            self.callees.take(shared, &mut out, from);
        }
        self.add_exchanges(out, from, port);
    }

    /// Connections are kept in the order they were opened (ids are given
    /// then), so the timeline holds the first `max_connections` of them.
    fn keeps_connection(&self, id: u32) -> bool {
        self.windowed
            || (id as usize) < self.options.bounds.max_connections
            || id >= EVENTS_ONLY_FIRST_ID
    }

    /// Numbers and keeps (within the limits) the exchanges of `out` from
    /// `from` on, which `sink` handed out; `port`: their server's.
    fn add_exchanges(&mut self, mut out: Vec<Exchange>, from: usize, port: u16) {
        if self.windowed {
            if self.service.as_ref().is_some_and(|f| f.contains(&port)) {
                self.service_waiting += out.len() - from;
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
            if self.exchanges.len() < self.options.bounds.max_exchanges
                && self.keeps_connection(e.connection)
            {
                self.exchanges.push(e);
            } else {
                self.counters.exchanges_dropped += 1;
            }
        }
        self.scratch = out;
    }

    /// After the last connection ended: the count of errors not kept.
    pub(crate) fn note_errors_dropped(&mut self) {
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
    pub(super) fn take_timeline(&mut self) -> Timeline {
        let mut t = Timeline {
            connections: std::mem::take(&mut self.connections),
            exchanges: std::mem::take(&mut self.exchanges),
        };
        t.sort();
        t
    }
}

/// The open connection at `at`.
fn stream_at<'a>(
    slots: &'a mut [Option<Stream>],
    alone: &'a mut [Option<Stream>],
    at: At,
) -> Option<&'a mut Stream> {
    let (list, i) = match at {
        At::Slot(slot) => (slots, slot),
        At::Alone(key) => (alone, key),
    };
    list.get_mut(i as usize)?.as_mut()
}

/// Where a connection's new exchanges go, and how many the vector holds
/// before them. A windowed table keeps every exchange, so the analyzers
/// append to the window itself: each exchange is moved once fewer.
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

/// Counts a gap of `len` bytes in `direction` on a stream, and keeps it
/// (within `GAPS_KEPT`) with `after_us`, the last bytes the capture
/// carried before it was noticed.
fn note_gap(s: &mut Stream, direction: Direction, len: u64, after_us: u64) {
    let stats = s.header.stats_mut(direction);
    stats.gaps += 1;
    stats.gap_bytes += len;
    if s.header.gaps.len() < GAPS_KEPT {
        s.header.gaps.push(Gap {
            after_us,
            direction,
            bytes: len,
        });
    }
}
