//! Joins socket calls to the exchanges read from packets: each exchange
//! gains the thread that sent its request (a call the traced process made)
//! or read it (a request to the traced service).
//!
//! The join is by socket and time. On loopback a packet is captured inside
//! the `write` that sent it, so the request's first packet falls between
//! that call's entry and exit; a request is read by the first read on the
//! server's socket that returns after its first packet arrived (on a TLS
//! socket whose library calls were traced, the first such call). Calls on
//! one socket are serialized, so the match is unique. A goroutine's read
//! of one byte is a peek (Go's net/http watches for the client closing
//! with a one-byte read on a goroutine of its own, which may take the next
//! request's first byte); the request's reader is then the next read of
//! more, if one returns before the answer.

use crate::event::{Kind, SockEvent};
use crate::lives::ThreadLives;
use foldhash::HashMap;
use std::net::SocketAddr;
use whyslow_model::{Thread, Timeline};

/// Slack for the two clocks (packets: CLOCK_REALTIME in µs; events:
/// CLOCK_MONOTONIC, put on the same clock by the offset taken when tracing
/// began). The offset is read within a microsecond; 50 µs also covers a
/// capture that timestamps a packet a little after the call returned.
pub const CLOCK_SLACK_US: u64 = 50;

#[derive(Debug, Clone, Copy)]
struct Call {
    enter_us: u64,
    exit_us: u64,
    thread: Thread,
    bytes: u64,
    /// A TLS library call's plaintext, not a socket call.
    tls: bool,
}

/// The calls of each socket, as (local, remote): sends by entry, receives
/// by exit.
#[derive(Debug, Default)]
pub struct ThreadIndex {
    sends: HashMap<(SocketAddr, SocketAddr), Vec<Call>>,
    receives: HashMap<(SocketAddr, SocketAddr), Vec<Call>>,
    lives: ThreadLives,
}

/// An IPv4 peer of a dual-stack socket shows as ::ffff:a.b.c.d; the
/// packets say a.b.c.d.
fn canonical(a: SocketAddr) -> SocketAddr {
    SocketAddr::new(a.ip().to_canonical(), a.port())
}

/// An event's monotonic nanoseconds on the capture's clock (µs).
pub fn capture_us(ns: u64, offset_ns: i64) -> u64 {
    ((i128::from(ns) + i128::from(offset_ns)).max(0) / 1000) as u64
}

impl ThreadIndex {
    pub fn new(events: &[SockEvent], clock_offset_ns: i64) -> Self {
        let mut out = ThreadIndex::default();
        for e in events {
            let (Some(local), Some(remote)) = (e.local, e.remote) else {
                continue;
            };
            let call = Call {
                enter_us: capture_us(e.enter_ns, clock_offset_ns),
                exit_us: capture_us(e.exit_ns, clock_offset_ns),
                thread: e.thread,
                bytes: e.bytes,
                tls: matches!(e.kind, Kind::TlsSend | Kind::TlsReceive),
            };
            // An exchange read from TLS plaintext starts when the library
            // call does, so those calls are indexed beside the socket's own.
            let side = match e.kind {
                Kind::Send | Kind::TlsSend => &mut out.sends,
                Kind::Receive | Kind::TlsReceive => &mut out.receives,
                Kind::NewThread { .. } | Kind::ThreadEnd | Kind::UnixName { .. } => continue,
            };
            side.entry((canonical(local), canonical(remote)))
                .or_default()
                .push(call);
        }
        out.lives = ThreadLives::new(events, clock_offset_ns);
        for calls in out.sends.values_mut() {
            calls.sort_unstable_by_key(|c| c.enter_us);
        }
        for calls in out.receives.values_mut() {
            // A TLS socket's requests are read by its library's calls: a
            // socket read takes a whole record, whatever the caller asked.
            if calls.iter().any(|c| c.tls) {
                calls.retain(|c| c.tls);
            }
            calls.sort_unstable_by_key(|c| c.exit_us);
        }
        out
    }

    pub fn is_empty(&self) -> bool {
        self.sends.is_empty() && self.receives.is_empty()
    }

    /// The thread whose send on (local, remote) was under way at `at_us`:
    /// one that had entered by then, before one the clocks' slack lets in
    /// (the next holder of a pooled connection may send within
    /// CLOCK_SLACK_US of the last one's packet).
    fn sender(&self, local: SocketAddr, remote: SocketAddr, at_us: u64) -> Option<Thread> {
        let calls = self.sends.get(&(local, remote))?;
        let k = calls.partition_point(|c| c.enter_us <= at_us + CLOCK_SLACK_US);
        // A TLS write's ciphertext goes out after its call entered, and Go's
        // is read at its entry alone (no end): the latest entered is it.
        let covers = |c: &&Call| c.tls || at_us <= c.exit_us + CLOCK_SLACK_US;
        let entered = calls[..k].iter().rev().find(|c| c.enter_us <= at_us);
        entered
            .filter(covers)
            .or_else(|| calls[..k].last().filter(covers))
            .map(|c| c.thread)
    }

    /// The read on (local, remote) that first returned after `at_us`; past
    /// a one-byte peek, the first read of more that returned before
    /// `answered_us`.
    fn reader(
        &self,
        local: SocketAddr,
        remote: SocketAddr,
        at_us: u64,
        answered_us: Option<u64>,
    ) -> Option<Call> {
        let calls = self.receives.get(&(local, remote))?;
        let k = calls.partition_point(|c| c.exit_us + CLOCK_SLACK_US < at_us);
        let first = calls.get(k).copied()?;
        let peek = first.bytes == 1 && first.thread.is_goroutine();
        let Some(answered) = answered_us.filter(|_| peek) else {
            return Some(first);
        };
        let more = calls[k + 1..]
            .iter()
            .take_while(|c| c.exit_us <= answered + CLOCK_SLACK_US)
            .find(|c| c.bytes > 1);
        Some(more.copied().unwrap_or(first))
    }

    /// Sets the thread of each exchange of `t` it can: on connections to
    /// `service_ports` the service's thread that read the request, on the
    /// rest the thread that sent it. Returns how many got one.
    pub fn annotate(&self, t: &mut Timeline, service_ports: &[u16]) -> usize {
        if self.is_empty() {
            return 0;
        }
        let ends: HashMap<u32, (SocketAddr, SocketAddr)> = t
            .connections
            .iter()
            .map(|c| (c.id, (canonical(c.client), canonical(c.server))))
            .collect();
        let mut joined = 0;
        for e in t.exchanges.iter_mut() {
            let Some(&(client, server)) = ends.get(&e.connection) else {
                continue;
            };
            let at = e.request_first_at_us;
            if service_ports.contains(&server.port()) {
                let read = self.reader(server, client, at, e.response_first_at_us);
                e.thread = read.map(|c| c.thread);
                e.read_at_us = read.map(|c| c.exit_us.saturating_sub(CLOCK_SLACK_US).max(at));
            } else {
                e.thread = self.sender(client, server, at);
                let starters = e.thread.map(|t| self.lives.starters(t, at));
                e.started_by = starters
                    .filter(|s| !s.is_empty())
                    .map(Vec::into_boxed_slice);
            }
            joined += usize::from(e.thread.is_some());
        }
        joined
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use whyslow_model::{Connection, Exchange, Protocol};

    fn call(kind: Kind, tid: u32, local: &str, remote: &str, (a, b): (u64, u64)) -> SockEvent {
        SockEvent {
            enter_ns: a * 1000,
            exit_ns: b * 1000,
            thread: Thread { pid: 1, tid },
            kind,
            bytes: 10,
            seq: 0,
            fd: 3,
            local: Some(local.parse().unwrap()),
            remote: Some(remote.parse().unwrap()),
            unix: None,
            comm: String::new(),
            payload: Vec::new(),
        }
    }

    fn timeline() -> Timeline {
        let conn = |id, client: &str, server: &str| {
            Connection::new(id, client.parse().unwrap(), server.parse().unwrap(), 0)
        };
        let at = |id, connection, t| {
            let mut e = Exchange::new(connection, Protocol::Http1, "GET /".into());
            e.id = id;
            e.request_first_at_us = t;
            e
        };
        Timeline {
            connections: vec![
                conn(0, "127.0.0.1:50000", "127.0.0.1:8080"),
                conn(1, "127.0.0.1:50001", "127.0.0.1:5432"),
            ],
            exchanges: vec![at(0, 0, 1_500), at(1, 1, 1_200), at(2, 1, 5_000)],
        }
    }

    #[test]
    fn requests_get_their_reader_and_calls_their_sender() {
        use Kind::*;
        // Clocks 1000 µs apart: events on the monotonic clock, packets on
        // the real-time one.
        let events = [
            call(Receive, 7, "127.0.0.1:8080", "127.0.0.1:50000", (0, 10)),
            call(
                Send,
                7,
                "127.0.0.1:50001",
                "[::ffff:127.0.0.1]:5432",
                (199, 203),
            ),
            call(Send, 8, "127.0.0.1:50001", "127.0.0.1:5432", (4_000, 4_010)),
            // The service's blocking read, entered before the request came.
            call(Receive, 9, "127.0.0.1:8080", "127.0.0.1:50000", (50, 1_001)),
        ];
        let mut t = timeline();
        let index = ThreadIndex::new(&events, 1_000_000);
        assert_eq!(index.annotate(&mut t, &[8080]), 3);
        let tids: Vec<_> = t.exchanges.iter().map(|e| e.thread.unwrap().tid).collect();
        assert_eq!(tids, vec![9, 7, 8]);
        // The request arrived at 1 500 µs and its reader returned at 2 001
        // (1 001 on the events' clock), less the clocks' slack.
        assert_eq!(t.exchanges[0].read_at_us, Some(2_001 - CLOCK_SLACK_US));
        assert_eq!(t.exchanges[1].read_at_us, None);
    }

    #[test]
    fn an_exchange_no_call_covers_gets_no_thread() {
        let events = [call(
            Kind::Send,
            7,
            "127.0.0.1:50001",
            "127.0.0.1:5432",
            (0, 5),
        )];
        let mut t = timeline();
        assert_eq!(ThreadIndex::new(&events, 0).annotate(&mut t, &[8080]), 0);
    }

    #[test]
    fn a_goroutines_one_byte_peek_is_not_the_reader_when_a_read_of_more_comes_before_the_answer() {
        use whyslow_model::GOROUTINE_BIT;
        use Kind::*;
        let (watcher, server) = (GOROUTINE_BIT | 20, GOROUTINE_BIT | 21);
        let read = |kind, tid, bytes, (a, b)| {
            let mut e = call(kind, tid, "127.0.0.1:8080", "127.0.0.1:50000", (a, b));
            e.bytes = bytes;
            e
        };
        // Clocks 1000 µs apart, as above: the request came at 1 500 µs.
        let plain = [
            read(Receive, watcher, 1, (0, 510)),
            read(Receive, server, 90, (600, 700)),
        ];
        // Over TLS the watcher's socket read takes the whole record; its
        // library call, one byte.
        let tls = [
            read(Receive, watcher, 120, (0, 505)),
            read(TlsReceive, watcher, 1, (0, 510)),
            read(TlsReceive, server, 89, (600, 700)),
        ];
        for events in [&plain[..], &tls[..]] {
            let index = ThreadIndex::new(events, 1_000_000);
            let mut t = timeline();
            t.exchanges[0].response_first_at_us = Some(1_900);
            index.annotate(&mut t, &[8080]);
            assert_eq!(t.exchanges[0].thread.unwrap().tid, server);
            assert_eq!(t.exchanges[0].read_at_us, Some(1_700 - CLOCK_SLACK_US));
            // No read of more before the answer: the peek it is.
            let mut t = timeline();
            t.exchanges[0].response_first_at_us = Some(1_600);
            index.annotate(&mut t, &[8080]);
            assert_eq!(t.exchanges[0].thread.unwrap().tid, watcher);
        }
        // A thread's one-byte read (nginx's MSG_PEEK) is its read.
        let threads = [
            read(Receive, 20, 1, (0, 510)),
            read(Receive, 21, 90, (600, 700)),
        ];
        let mut t = timeline();
        t.exchanges[0].response_first_at_us = Some(1_900);
        ThreadIndex::new(&threads, 1_000_000).annotate(&mut t, &[8080]);
        assert_eq!(t.exchanges[0].thread.unwrap().tid, 20);
    }

    #[test]
    fn a_send_under_way_at_the_packet_wins_over_one_entered_just_after() {
        // Clocks 1000 µs apart: the call's packet at 1 200 µs; its sender
        // entered at 190 and left at 205; the next holder of the connection
        // entered at 230, within the slack of the packet.
        let events = [
            call(
                Kind::Send,
                7,
                "127.0.0.1:50001",
                "127.0.0.1:5432",
                (190, 205),
            ),
            call(
                Kind::Send,
                8,
                "127.0.0.1:50001",
                "127.0.0.1:5432",
                (230, 240),
            ),
        ];
        let mut t = timeline();
        ThreadIndex::new(&events, 1_000_000).annotate(&mut t, &[8080]);
        assert_eq!(t.exchanges[1].thread.unwrap().tid, 7);
    }
}
