//! Cutting the stream of finished exchanges and connections into windows
//! of bounded size, so that a capture of any length is analyzed whole with
//! flat memory.
//!
//! A cut must not separate an inbound request from the calls made for it.
//! Attribution gives a call to an inbound request whose wait (first request
//! byte → first response byte) encloses the call, so a cut at time T is
//! exact when:
//! - T is no later than the first byte of any request of the service still
//!   open (its calls may still come), and
//! - no inbound request that started before T encloses a call held back
//!   (one that started at T or later): such requests are held back too,
//!   which moves T earlier, until nothing changes.

use super::streams::{Stream, Streams};
use foldhash::{HashMap, HashSet};
use std::sync::atomic::Ordering;
use whyslow_model::{Connection, CutEdges, Exchange, Timeline};

/// Exchanges of one window at most, by default: ~10 MB of exchanges at
/// ~200 bytes each, and as many connections (~1 KB each with their events).
pub const DEFAULT_WINDOW_EXCHANGES: usize = 50_000;
/// Exchanges of one window when no population the detectors judge needs
/// more (no service, or enough of its requests): ~1 MB, which stays in a
/// 2 MB L2 cache through the two dozen passes a window's analysis makes.
/// Measured on a 1151 MB Redis+PostgreSQL capture, against windows of 50 000:
/// the analyzing thread's CPU time 2.9 → 1.1 s, wall time −15%.
pub const MIN_WINDOW_EXCHANGES: usize = 5_000;
/// Exchanges looked at, at most, before the service under investigation
/// must be decided: enough for thousands of requests and their calls.
pub(crate) const SERVICE_SAMPLE: usize = 10_000;
/// Exchanges held back past one window's worth (and at least
/// MIN_WINDOW_EXCHANGES) force a cut at the present: the window is then
/// marked `exact: false`. A service that is never idle (a closed loop of
/// clients, any busy production service) has no exact cut at all: every
/// moment lies inside a request that encloses a call begun after it. Held
/// back until four windows' worth, a 40 s capture of `orm-storm` at 16
/// clients was one window of 154 000 exchanges (242 MB peak RSS, against
/// 70 MB for 10 s of it); forced at one, memory stays that of one window.
const FORCE_AFTER_WINDOWS: usize = 1;

/// One window of a capture: whole connections that ended in it (with their
/// events), the exchanges cut into it, and an event-free copy of each
/// connection still open that carried one of them.
#[derive(Debug, Default)]
pub struct Window {
    pub timeline: Timeline,
    /// Connections in `timeline` that are only headers (`Flow::header`):
    /// they come whole in a later window.
    pub headers: std::collections::HashSet<u32>,
    /// False when the cut was forced (see FORCE_AFTER_WINDOWS): a request
    /// and its calls may then sit in two windows.
    pub exact: bool,
    /// Where forced cuts, this window's and the one before's, may have
    /// parted calls from their requests.
    pub edges: CutEdges,
}

/// When an inbound request began answering: with a call's end
/// (`Exchange::end_us`), the span attribution compares.
fn answer(e: &Exchange) -> u64 {
    e.response_first_at_us.unwrap_or(u64::MAX)
}

/// The exact cut at or before `cut` (see the module comment): the latest
/// time T ≤ `cut` at which every request of the service that began before
/// T was answered before the first call held back (begun at T or later)
/// ended. `is_service`: whether an exchange is an inbound request of the
/// service.
///
/// One sort and one pass, whatever the concurrency: under a closed loop of
/// clients the service is never idle, and walking back request by request
/// (each pulled back by the call it encloses) took thousands of passes over
/// the held exchanges per window — analysis time grew with the square of
/// the capture (a 40 s capture of `orm-storm` at 16 clients: 15.7 s).
fn closed_cut(exchanges: &[Exchange], cut: u64, is_service: impl Fn(&Exchange) -> bool) -> u64 {
    // (start, answer of a request of the service, or end of a call).
    let mut by_start: Vec<(u64, Option<u64>, u64)> = exchanges
        .iter()
        .map(|e| match is_service(e) {
            true => (e.request_first_at_us, Some(answer(e)), u64::MAX),
            false => (e.request_first_at_us, None, e.end_us()),
        })
        .collect();
    by_start.sort_unstable_by_key(|x| x.0);
    // Latest answer among the service's requests begun before each index.
    let mut answered_by = Vec::with_capacity(by_start.len() + 1);
    let mut latest = None;
    answered_by.push(latest);
    for x in &by_start {
        latest = latest.max(x.1);
        answered_by.push(latest);
    }
    let mut i = by_start.partition_point(|x| x.0 < cut);
    // Earliest end among the calls held back: begun at the cut or later.
    let mut held_end = by_start[i..]
        .iter()
        .filter(|x| x.1.is_none())
        .map(|x| x.2)
        .min();
    let mut t = cut;
    loop {
        let valid = match (answered_by[i], held_end) {
            (Some(answer), Some(end)) => answer < end,
            _ => true,
        };
        // Nothing begun before the first exchange: always valid there.
        if valid || i == 0 {
            return t;
        }
        // Hold back every exchange begun at the latest start before `t`.
        t = by_start[i - 1].0;
        while i > 0 && by_start[i - 1].0 == t {
            i -= 1;
            if by_start[i].1.is_none() {
                let end = by_start[i].2;
                held_end = Some(held_end.map_or(end, |h| h.min(end)));
            }
        }
    }
}

impl Streams {
    /// Enough finished exchanges or connections wait for a window (or,
    /// before the service is decided, to decide it).
    pub fn window_ready(&self) -> bool {
        if self.exchanges.len() < self.retry_at {
            return false;
        }
        let most = self.options.window.exchanges.max(1);
        let least = MIN_WINDOW_EXCHANGES.min(most);
        let n = self.exchanges.len().max(self.connections.len());
        match &self.service {
            None => n >= SERVICE_SAMPLE.min(most),
            Some(f) if f.is_empty() => n >= least,
            Some(_) => {
                n >= most || (n >= least && self.service_waiting >= self.options.window.requests)
            }
        }
    }

    /// Sets the ports of the service under investigation (empty: none),
    /// whose open requests bound the cuts and whose requests a window
    /// counts.
    pub fn set_service(&mut self, ports: &[u16]) {
        self.service = Some(ports.to_vec());
        self.service_waiting = self.count_front();
    }

    /// Exchanges waiting that are requests of the service.
    fn count_front(&self) -> usize {
        let service = self.service.as_deref().unwrap_or_default();
        if service.is_empty() {
            return 0;
        }
        let port = self.server_ports();
        self.exchanges
            .iter()
            .filter(|e| port.get(&e.connection).is_some_and(|p| service.contains(p)))
            .count()
    }

    /// Finished exchanges not yet taken in a window.
    pub fn waiting_exchanges(&self) -> usize {
        self.exchanges.len()
    }

    /// Ended connections not yet taken in a window.
    pub fn waiting_connections(&self) -> usize {
        self.connections.len()
    }

    /// The exchanges and connections finished so far, as a timeline, without
    /// taking them: to find the service under investigation before the
    /// first cut.
    pub fn peek(&self) -> Timeline {
        let mut t = Timeline {
            connections: self
                .connections
                .iter()
                .map(Connection::without_events)
                .collect(),
            exchanges: self.exchanges.clone(),
        };
        let ids = &self.waiting;
        t.connections.extend(
            self.open()
                .filter(|s| ids.contains(&s.header.id))
                .map(Stream::header),
        );
        t.sort();
        t
    }

    /// Takes the next window. The open requests of the service
    /// (`set_service`) bound the cut; without one every exchange finished so
    /// far is taken. The timeline is in the order things finished: the
    /// receiver sorts it (`Timeline::sort`), on its own thread, so the table
    /// can go on reading.
    pub fn take_window(&mut self) -> Window {
        debug_assert_eq!(self.waiting, connections_of(&self.exchanges));
        let service = self.service.clone().unwrap_or_default();
        let mut open = None;
        let mut cut = if service.is_empty() {
            u64::MAX
        } else {
            let port = self.server_ports();
            let is_front =
                |e: &Exchange| port.get(&e.connection).is_some_and(|p| service.contains(p));
            open = self
                .open()
                .filter(|s| service.contains(&s.header.server.port()))
                .filter_map(Stream::open_since)
                .min();
            closed_cut(&self.exchanges, open.unwrap_or(u64::MAX), is_front)
        };
        let force = (FORCE_AFTER_WINDOWS * self.options.window.exchanges).max(MIN_WINDOW_EXCHANGES);
        let taken = if cut == u64::MAX {
            self.exchanges.len()
        } else {
            self.exchanges
                .iter()
                .filter(|e| e.request_first_at_us < cut)
                .count()
        };
        let held = self.exchanges.len() - taken;
        let exact = held < force;
        if !exact {
            cut = u64::MAX;
        }
        // A cut that took less than it held back waits until as many more
        // exchanges came (up to the forced cut) before it is tried again:
        // each try costs a pass over those held, and under a service that
        // is never idle most tries take little.
        self.retry_at = match exact && taken < held {
            true => (2 * held).min(force),
            false => 0,
        };
        // The whole vector goes: the held-back ones (few) move to a new one.
        let mut out = std::mem::take(&mut self.exchanges);
        let in_window = if taken < out.len() {
            self.exchanges = out
                .extract_if(.., |e| e.request_first_at_us >= cut)
                .collect();
            self.waiting = connections_of(&self.exchanges);
            self.service_waiting = self.count_front();
            connections_of(&out)
        } else {
            self.service_waiting = 0;
            std::mem::take(&mut self.waiting)
        };
        self.room = out.capacity();
        let mut t = Timeline {
            connections: self.take_connections(),
            exchanges: out,
        };
        let headers = self.add_headers(&mut t, in_window);
        self.callees.pair(&mut t);
        // An empty window (a cut that took nothing) leaves the edge of the
        // last forced cut to the next window that holds exchanges.
        let mut edges = CutEdges {
            open_from: None,
            carried_until: match t.exchanges.is_empty() {
                true => None,
                false => self.carried_until.take(),
            },
        };
        if !exact {
            edges.open_from = open;
            self.carried_until = self.last_answer(&t, &service);
        }
        Window {
            timeline: t,
            headers,
            exact,
            edges,
        }
    }

    /// The latest answer among the requests of the service in `t`.
    fn last_answer(&self, t: &Timeline, service: &[u16]) -> Option<u64> {
        let ports: HashMap<u32, u16> = t
            .connections
            .iter()
            .map(|c| (c.id, c.server.port()))
            .collect();
        t.exchanges
            .iter()
            .filter(|e| {
                ports
                    .get(&e.connection)
                    .is_some_and(|p| service.contains(p))
            })
            .map(answer)
            .filter(|&a| a != u64::MAX)
            .max()
    }

    /// Gives the next window its room once the last one has been handed on
    /// (and the one before it freed): the table then never holds a third
    /// window's vector, whose memory the allocator would keep. A window is
    /// cut after the batch of packets that filled it, so it runs a little
    /// over; growing a vector would copy every exchange per doubling.
    ///
    /// `spare`: the emptied vector of an earlier window, used instead of a
    /// new one (the held-back exchanges move into it).
    pub fn make_room(&mut self, spare: Option<Vec<Exchange>>) {
        if let Some(mut v) = spare {
            v.append(&mut self.exchanges);
            self.exchanges = v;
        }
        let window = self.options.window.exchanges;
        let room = self.room.min(window + window / 4);
        self.exchanges
            .reserve(room.saturating_sub(self.exchanges.len()));
    }

    /// Server port of every connection with an exchange waiting.
    fn server_ports(&self) -> HashMap<u32, u16> {
        let ids = &self.waiting;
        let open = self.open().map(|s| &s.header);
        self.connections
            .iter()
            .chain(open)
            .filter(|c| ids.contains(&c.id))
            .map(|c| (c.id, c.server.port()))
            .collect()
    }

    /// Ended connections none of whose exchanges are held back; their events
    /// leave the table's budget with them.
    fn take_connections(&mut self) -> Vec<Connection> {
        let held = &self.waiting;
        let (out, kept): (Vec<Connection>, Vec<Connection>) = std::mem::take(&mut self.connections)
            .into_iter()
            .partition(|c| !held.contains(&c.id));
        self.connections = kept;
        let events: usize = out.iter().map(|c| c.segments.len() + c.acks.len()).sum();
        self.released.fetch_add(events, Ordering::Relaxed);
        out
    }

    /// Event-free copies of the connections the window's exchanges ran on
    /// that are not in it whole (still open, or ended with exchanges held).
    /// `in_window`: the connections of the window's exchanges.
    fn add_headers(
        &self,
        t: &mut Timeline,
        in_window: HashSet<u32>,
    ) -> std::collections::HashSet<u32> {
        let whole: HashSet<u32> = t.connections.iter().map(|c| c.id).collect();
        let mut missing = in_window;
        missing.retain(|id| !whole.contains(id));
        if missing.is_empty() {
            return Default::default();
        }
        let open = self
            .open()
            .filter(|s| missing.contains(&s.header.id))
            .map(Stream::header);
        let ended = self
            .connections
            .iter()
            .filter(|c| missing.contains(&c.id))
            .map(header);
        t.connections.extend(open.chain(ended));
        missing.into_iter().collect()
    }
}

/// The connections `exchanges` ran on.
fn connections_of(exchanges: &[Exchange]) -> HashSet<u32> {
    let mut ids = HashSet::default();
    add_connections(&mut ids, exchanges);
    ids
}

/// Adds the connections `exchanges` ran on to `ids`. A connection's
/// exchanges come in runs (a flow hands over what one segment finished),
/// so each run costs one set insert, not each exchange.
pub(super) fn add_connections(ids: &mut HashSet<u32>, exchanges: &[Exchange]) {
    let mut last = None;
    for e in exchanges {
        if last != Some(e.connection) {
            ids.insert(e.connection);
            last = Some(e.connection);
        }
    }
}

/// Who and what a connection is, without events, counters or handshake.
pub(super) fn header(c: &Connection) -> Connection {
    let mut h = Connection::new(c.id, c.client, c.server, c.first_at_us);
    h.protocol = c.protocol;
    h.tls = c.tls;
    h.socket_path.clone_from(&c.socket_path);
    h.gaps.clone_from(&c.gaps);
    (h.host, h.shared, h.mirror) = (c.host, c.shared, c.mirror);
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ex(connection: u32, start: u64, answer: u64, end: u64) -> Exchange {
        let mut e = Exchange::new(connection, whyslow_model::Protocol::Http1, "x".into());
        e.request_first_at_us = start;
        e.request_last_at_us = start;
        e.response_first_at_us = Some(answer);
        e.response_last_at_us = Some(end);
        e
    }

    #[test]
    fn the_next_windows_room_waits_for_the_hand_over() {
        // Two windows' vectors at most: the one analyzed and the one handed
        // on. The table's own comes after the hand-over (`make_room`).
        let options = super::super::FlowOptions {
            window: super::super::WindowPolicy {
                exchanges: 8,
                ..Default::default()
            },
            ..Default::default()
        };
        let mut whole = super::super::FlowTable::windowed(options);
        let table = whole.streams();
        table.exchanges = (0..10).map(|i| ex(1, i, i + 1, i + 2)).collect();
        table.waiting = connections_of(&table.exchanges);
        table.set_service(&[]);
        let w = table.take_window();
        assert_eq!(w.timeline.exchanges.len(), 10);
        assert_eq!(
            table.exchanges.capacity(),
            0,
            "no room before the hand-over"
        );
        table.make_room(None);
        assert!(
            table.exchanges.capacity() >= 10,
            "room for a window that runs over"
        );
        // An emptied vector that comes back is the next window's, with the
        // exchanges held back moved into it.
        let w = table.take_window();
        table.exchanges.push(ex(2, 50, 51, 52));
        table.waiting.insert(2);
        let mut spare = w.timeline.exchanges;
        spare.clear();
        let at = spare.as_ptr();
        table.make_room(Some(spare));
        assert_eq!(table.exchanges.as_ptr(), at, "the same vector");
        assert_eq!(table.exchanges.len(), 1);
    }

    #[test]
    fn a_request_enclosing_a_held_call_is_held_with_it() {
        // Inbound 1 on connection 1 (service) waits 100..500; its call on
        // connection 2 runs 300..400. An open request at 250 holds the call
        // back, so the inbound request is held back too.
        let service = |e: &Exchange| e.connection == 1;
        let exs = vec![
            ex(1, 100, 500, 510),
            ex(2, 300, 390, 400),
            ex(1, 10, 50, 60),
        ];
        assert_eq!(closed_cut(&exs, 250, service), 100);
        // Nothing held back encloses: the cut stays.
        let exs = vec![ex(1, 100, 200, 210), ex(2, 300, 390, 400)];
        assert_eq!(closed_cut(&exs, 250, service), 250);
    }

    #[test]
    fn a_long_chain_of_requests_is_walked_back_to_the_last_idle_moment() {
        // Requests of the service every 100 µs, each answered 150 µs after it
        // began, each making a call from 120 to 130 µs in: every call sits
        // inside two requests, so the chain holds back to the last moment
        // the service was idle, 10 requests in (a gap of 1 ms) — whatever
        // the length of the chain after it.
        let service = |e: &Exchange| e.connection == 1;
        let mut exs = Vec::new();
        for k in 0..500u64 {
            let at = 100 * k + if k >= 10 { 1_000 } else { 0 };
            exs.push(ex(1, at, at + 150, at + 160));
            exs.push(ex(2, at + 120, at + 125, at + 130));
        }
        let open = 100 * 500 + 1_000;
        assert_eq!(closed_cut(&exs, open, service), 1_000 + 100 * 10);
        // Without the gap the service was never idle: nothing before the
        // first request can be cut off.
        let chain = &exs[20..];
        assert_eq!(
            closed_cut(chain, open, service),
            chain[0].request_first_at_us
        );
    }

    #[test]
    fn holding_back_cascades_to_earlier_requests() {
        let service = |e: &Exchange| e.connection == 1;
        // Inbound 50..600 encloses the call 120..130, which inbound
        // 100..500 (held for the call at 300) pulled back.
        let exs = vec![
            ex(1, 100, 500, 510),
            ex(2, 300, 390, 400),
            ex(1, 50, 600, 610),
            ex(2, 120, 125, 130),
        ];
        assert_eq!(closed_cut(&exs, 250, service), 50);
    }
}
