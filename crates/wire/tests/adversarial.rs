//! Hostile captures analyzed whole, in windows: a SYN flood that never
//! closes, tens of thousands of one-packet connections, an ACK storm,
//! pathological out-of-order delivery. Each must come out counted in full,
//! with memory held to the limits (`bench/analyze_adversarial.sh` measures
//! time and peak RSS on bigger ones).

mod common;

use common::*;
use std::collections::HashSet;
use whyslow_model::Timeline;
use whyslow_wire::{
    windows_from_reader, AnalyzeOutcome, Bounds, FlowOptions, Window, WindowPolicy, WindowSink,
};

/// Counts what the windows carried; keeps nothing.
#[derive(Default)]
struct Count {
    connections: u64,
    exchanges: u64,
    /// Exchanges the whole connections say they carried.
    carried: u64,
    response_bytes: u64,
    most_events: usize,
    ids: HashSet<u32>,
}

impl WindowSink for Count {
    /// As analyze's sink does when no service shows: wait until told it
    /// is the last chance (connections piling up must not be copied again
    /// and again while it waits).
    fn service_ports(&mut self, _: &Timeline, last_chance: bool) -> Option<Vec<u16>> {
        last_chance.then(Vec::new)
    }
    fn window(&mut self, w: &mut Window) {
        for c in w
            .timeline
            .connections
            .iter()
            .filter(|c| !w.headers.contains(&c.id))
        {
            assert!(
                self.ids.insert(c.id),
                "connection {} came whole twice",
                c.id
            );
            self.connections += 1;
            self.carried += c.exchanges;
            self.most_events = self.most_events.max(c.segments.len() + c.acks.len());
        }
        self.exchanges += w.timeline.exchanges.len() as u64;
        self.response_bytes += w
            .timeline
            .exchanges
            .iter()
            .map(|e| e.response_bytes)
            .sum::<u64>();
    }
}

fn run(bytes: &[u8], limits: &FlowOptions) -> (AnalyzeOutcome, Count) {
    let mut count = Count::default();
    let out = windows_from_reader(bytes, limits, &mut count).expect("a capture");
    assert_eq!(out.error, None);
    (out, count)
}

fn small() -> FlowOptions {
    FlowOptions {
        bounds: Bounds {
            max_flows: 1_000,
            ..Bounds::default()
        },
        window: WindowPolicy {
            exchanges: 500,
            ..WindowPolicy::default()
        },
        ..FlowOptions::default()
    }
}

const FLOOD: u16 = 60_000;

#[test]
fn a_syn_flood_that_never_closes_is_counted_in_full() {
    let mut s = Sim::new(1, 80);
    for port in 1..=FLOOD {
        s.cport = port;
        s.syn();
    }
    let (out, count) = run(&s.bytes(), &small());
    assert_eq!(out.connections_seen, u64::from(FLOOD));
    assert_eq!(count.connections, u64::from(FLOOD));
    assert!(out.windows > 1, "{} windows", out.windows);
}

#[test]
fn one_packet_connections_are_each_counted() {
    let mut s = Sim::new(1, 6379);
    for port in 1..=FLOOD {
        s.cport = port;
        s.send(true, b"*1\r\n$4\r\nPING\r\n");
    }
    let (out, count) = run(&s.bytes(), &small());
    assert_eq!(out.connections_seen, u64::from(FLOOD));
    assert_eq!(count.connections, u64::from(FLOOD));
}

#[test]
fn a_connection_counts_the_exchanges_of_every_window_it_spans() {
    // Past the exchanges the sink waits for before its first window.
    const REQUESTS: u64 = 12_000;
    let mut s = Sim::new(40002, 80);
    s.handshake();
    for _ in 0..REQUESTS {
        s.send(true, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
        s.send(false, b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
    }
    s.fin(true);
    s.fin(false);
    let (out, count) = run(&s.bytes(), &small());
    assert!(out.windows > 3, "{} windows", out.windows);
    assert_eq!((count.exchanges, count.carried), (REQUESTS, REQUESTS));
}

#[test]
fn an_ack_storm_keeps_events_to_the_bound() {
    let mut s = Sim::new(40000, 80);
    s.handshake();
    s.send(true, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    s.send(false, b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello");
    for i in 0..200_000u32 {
        s.ack(true);
        if i % 1000 == 0 {
            let old = s.snext.wrapping_sub(40);
            s.send_at(false, old, &[b'x'; 40]); // old data again
        }
    }
    s.fin(true);
    s.fin(false);
    let limits = {
        let mut o = small();
        o.bounds.max_events_per_connection = 10_000;
        o
    };
    let (out, count) = run(&s.bytes(), &limits);
    assert_eq!((out.connections_seen, count.exchanges), (1, 1));
    assert!(count.most_events <= 10_000, "{}", count.most_events);
}

#[test]
fn a_body_in_pathological_order_is_rebuilt_once() {
    const SEGMENTS: u32 = 20_000;
    const SIZE: u32 = 100;
    let mut s = Sim::new(40001, 80);
    s.handshake();
    s.send(true, b"GET /big HTTP/1.1\r\nHost: x\r\n\r\n");
    let head = format!(
        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n",
        SEGMENTS * SIZE
    );
    s.send(false, head.as_bytes());
    let base = s.snext;
    // Reversed in blocks of 1000, every 7th segment twice.
    for block in (0..SEGMENTS).step_by(1000) {
        for i in (block..(block + 1000).min(SEGMENTS)).rev() {
            let seq = base.wrapping_add(i * SIZE);
            s.send_at(false, seq, &[b'y'; SIZE as usize]);
            if i % 7 == 0 {
                s.send_at(false, seq, &[b'y'; SIZE as usize]);
            }
        }
    }
    s.advance(false, SEGMENTS * SIZE);
    s.fin(true);
    s.fin(false);
    let (_, count) = run(&s.bytes(), &small());
    assert_eq!(count.exchanges, 1);
    assert_eq!(
        count.response_bytes,
        (head.len() as u32 + SEGMENTS * SIZE) as u64
    );
}

/// Closed connections are handed on after a bounded number of later closes,
/// not held until `max_flows` open ones force them out: twice `max_flows`
/// connections, one after another, evict nothing. A packet of the first one
/// long after its close is ignored, not taken for a new connection.
#[test]
fn closed_connections_leave_the_flow_table() {
    const N: u16 = 2_000;
    let mut s = Sim::new(1, 6379);
    for port in 1..=N {
        s.cport = port;
        s.handshake();
        s.send(true, b"*1\r\n$4\r\nPING\r\n");
        s.send(false, b"+PONG\r\n");
        s.fin(true);
        s.fin(false);
        s.ack(true);
    }
    s.cport = 1;
    s.ack(true);
    let (out, count) = run(&s.bytes(), &small());
    assert_eq!(out.evicted_flows, 0);
    assert_eq!(out.late_packets, 1);
    assert_eq!(out.connections_seen, u64::from(N));
    assert_eq!(count.connections, u64::from(N));
    assert_eq!(count.exchanges, u64::from(N));
}
