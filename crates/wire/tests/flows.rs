mod common;

use common::*;
use whyslow_model::{CloseKind, Direction, Timeline};
use whyslow_wire::{timeline_from_reader, AnalyzeOutcome, Bounds, FlowOptions};

fn analyze(bytes: &[u8]) -> AnalyzeOutcome {
    timeline_from_reader(bytes, &FlowOptions::default()).expect("a capture")
}

fn only_conn(t: &Timeline) -> &whyslow_model::Connection {
    assert_eq!(t.connections.len(), 1, "{:#?}", t.connections);
    &t.connections[0]
}

#[test]
fn keep_alive_http_exchanges() {
    let mut s = Sim::new(40000, 80);
    s.handshake();
    for _ in 0..2 {
        s.wait_ms(5);
        s.send(true, GET);
        s.wait_ms(10);
        s.send(false, OK);
        s.ack(true);
    }
    s.fin(true);
    s.fin(false);
    s.ack(true);
    let n = s.packets;
    let out = analyze(&s.bytes());
    assert_eq!(out.error, None);
    assert_eq!(out.packets, n);
    assert!(out.protocol_errors.is_empty(), "{:?}", out.protocol_errors);
    let c = only_conn(&out.timeline);
    assert_eq!(c.client.port(), 40000);
    assert_eq!(c.handshake_us(), Some(1100));
    assert!(c.established_at_us.is_some());
    assert_eq!(c.closed_by, Some((Direction::ToServer, CloseKind::Fin)));
    assert_eq!(c.to_server.payload_bytes, 2 * GET.len() as u64);
    assert_eq!(c.to_server.retransmissions + c.to_client.retransmissions, 0);
    let ex = &out.timeline.exchanges;
    assert_eq!(ex.len(), 2);
    assert_eq!(c.exchanges, 2);
    assert_eq!(ex[0].request, "GET /items");
    assert_eq!(ex[0].status, Some(whyslow_model::Status::Http(200)));
    assert_eq!((ex[0].id, ex[1].id), (0, 1));
    assert_eq!(ex[0].request_packets, (4, 4));
    assert_eq!(ex[0].response_packets, Some((5, 5)));
    assert_eq!(ex[0].wait_us(), Some(10_100));
    // Segments: SYN, SYN/ACK, 4 data, 2 FINs; stream offsets are relative.
    let data: Vec<_> = c.segments.iter().filter(|s| s.len > 0).collect();
    assert_eq!(data[0].stream_offset, 0);
    assert_eq!(data[2].stream_offset, GET.len() as u64);
    // The server's data is acked by the client; windows are scaled by 2^7.
    let ack = c
        .acks
        .iter()
        .find(|a| a.direction == Direction::ToServer && a.acked_offset == OK.len() as u64)
        .unwrap();
    assert_eq!(ack.window, 65535 << 7);
}

#[test]
fn retransmission_is_counted_once() {
    let mut s = Sim::new(40001, 80);
    s.handshake();
    let seq = s.send(true, GET);
    s.wait_ms(200);
    s.send_at(true, seq, GET);
    s.send(false, OK);
    let out = analyze(&s.bytes());
    let c = only_conn(&out.timeline);
    assert_eq!(c.to_server.retransmissions, 1);
    assert!(c.segments.iter().any(|s| s.flags.retransmission));
    assert_eq!(
        out.timeline.exchanges.len(),
        1,
        "reassembly drops the duplicate"
    );
}

#[test]
fn zero_window_is_flagged() {
    let mut s = Sim::new(40002, 80);
    s.handshake();
    s.send(true, GET);
    s.cwin = 0;
    s.send(false, b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhe");
    s.ack(true);
    s.wait_ms(50);
    s.cwin = 1000;
    s.ack(true);
    s.send(false, b"llo");
    let out = analyze(&s.bytes());
    let c = only_conn(&out.timeline);
    assert_eq!(c.to_server.zero_windows, 1);
    assert!(c.acks.iter().any(|a| a.window == 0));
    assert_eq!(
        out.timeline.exchanges[0].status,
        Some(whyslow_model::Status::Http(200))
    );
}

#[test]
fn out_of_order_is_reassembled() {
    let mut s = Sim::new(40003, 80);
    s.handshake();
    let (a, b) = GET.split_at(10);
    let seq = s.cnext;
    s.advance(true, GET.len() as u32);
    s.send_at(true, seq + 10, b);
    s.send_at(true, seq, a);
    s.send(false, OK);
    let out = analyze(&s.bytes());
    let c = only_conn(&out.timeline);
    assert_eq!(c.to_server.out_of_order, 1);
    assert_eq!(c.to_server.retransmissions, 0);
    assert_eq!(out.timeline.exchanges.len(), 1);
    assert_eq!(out.timeline.exchanges[0].request, "GET /items");
}

#[test]
fn reset_and_port_reuse() {
    let mut s = Sim::new(40004, 80);
    s.handshake();
    s.send(true, GET);
    s.rst(false);
    s.cnext = 90_000;
    s.snext = 70_000;
    s.handshake();
    let out = analyze(&s.bytes());
    let t = &out.timeline;
    assert_eq!(t.connections.len(), 2);
    assert_eq!(
        t.connections[0].closed_by,
        Some((Direction::ToClient, CloseKind::Rst))
    );
    assert_eq!(t.connections[1].closed_by, None);
    assert_eq!(t.exchanges.len(), 1, "request without response is kept");
    assert_eq!(t.exchanges[0].status, None);
}

#[test]
fn capture_ending_mid_handshake() {
    let mut s = Sim::new(40005, 80);
    s.syn();
    let out = analyze(&s.bytes());
    let c = only_conn(&out.timeline);
    assert!(c.syn_at_us.is_some());
    assert_eq!(c.syn_ack_at_us, None);
    assert_eq!(c.handshake_us(), None);
}

#[test]
fn mid_stream_capture_guesses_client_by_port() {
    let mut s = Sim::new(50000, 8080);
    s.send(false, OK);
    s.send(true, GET);
    let out = analyze(&s.bytes());
    let c = only_conn(&out.timeline);
    assert_eq!(c.client.port(), 50000);
    // Mid-stream, the response seen first answers a request sent before the
    // capture: it is not paired with the request that follows it.
    let ex = &out.timeline.exchanges;
    assert_eq!(ex.len(), 1, "{ex:?}");
    assert_eq!(ex[0].request, "GET /items");
    assert_eq!(ex[0].response_first_at_us, None);
}

#[test]
fn tls_is_recognised() {
    let mut s = Sim::new(40006, 443);
    s.handshake();
    s.send(true, &[0x16, 0x03, 0x01, 0x00, 0x05, 1, 0, 0, 1, 0]);
    let out = analyze(&s.bytes());
    assert!(only_conn(&out.timeline).tls);
}

#[test]
fn events_are_capped() {
    let mut s = Sim::new(40007, 80);
    s.handshake();
    for _ in 0..50 {
        s.send(true, b"x");
        s.ack(false);
    }
    let lim = FlowOptions {
        bounds: Bounds {
            max_events_per_connection: 10,
            ..Bounds::default()
        },
        ..FlowOptions::default()
    };
    let out = timeline_from_reader(&s.bytes()[..], &lim).unwrap();
    let c = only_conn(&out.timeline);
    assert!(c.events_truncated);
    assert_eq!(c.segments.len() + c.acks.len(), 10);
    assert_eq!(c.to_server.packets, 52);
}

#[test]
fn flow_limit_evicts() {
    let mut s = Sim::new(1, 80);
    for port in 1000..1100 {
        s.cport = port;
        s.syn();
    }
    let lim = FlowOptions {
        bounds: Bounds {
            max_flows: 10,
            ..Bounds::default()
        },
        ..FlowOptions::default()
    };
    let out = timeline_from_reader(&s.bytes()[..], &lim).unwrap();
    assert_eq!(out.timeline.connections.len(), 100);
}

#[test]
fn exchanges_beyond_the_limit_are_counted_not_kept() {
    let mut s = Sim::new(40008, 80);
    s.handshake();
    for _ in 0..30 {
        s.send(true, GET);
        s.send(false, OK);
        s.ack(true);
    }
    let lim = FlowOptions {
        bounds: Bounds {
            max_exchanges: 10,
            ..Bounds::default()
        },
        ..FlowOptions::default()
    };
    let out = timeline_from_reader(&s.bytes()[..], &lim).unwrap();
    assert_eq!(out.timeline.exchanges.len(), 10);
    assert_eq!((out.exchanges_seen, out.exchanges_dropped), (30, 20));
    // The first ones are kept, with their ids.
    let ids: Vec<u32> = out.timeline.exchanges.iter().map(|e| e.id).collect();
    assert_eq!(ids, (0..10).collect::<Vec<_>>());
    // The connection's counters still cover every packet.
    assert_eq!(only_conn(&out.timeline).to_server.packets, 2 + 60);
    // And they count as carried by it.
    assert_eq!(only_conn(&out.timeline).exchanges, 30);
}

#[test]
fn many_short_connections_stay_bounded() {
    let mut s = Sim::new(1000, 80);
    for port in 1000..1300 {
        s.cport = port;
        s.handshake();
        s.send(true, GET);
        s.send(false, OK);
        s.fin(true);
        s.fin(false);
        s.ack(true);
    }
    let lim = FlowOptions {
        bounds: Bounds {
            max_flows: 8,
            max_connections: 100,
            ..Bounds::default()
        },
        ..FlowOptions::default()
    };
    let out = timeline_from_reader(&s.bytes()[..], &lim).unwrap();
    assert_eq!(out.timeline.connections.len(), 100);
    assert_eq!((out.connections_seen, out.connections_dropped), (300, 200));
    // Exchanges of connections left out are left out too: none is orphaned.
    assert_eq!(out.timeline.exchanges.len(), 100);
    assert_eq!((out.exchanges_seen, out.exchanges_dropped), (300, 200));
    let kept: Vec<u32> = out.timeline.connections.iter().map(|c| c.id).collect();
    assert_eq!(kept, (0..100).collect::<Vec<_>>());
    assert!(out
        .timeline
        .exchanges
        .iter()
        .all(|e| out.timeline.connection(e.connection).is_some()));
    // Closed flows went first when the table was full: every connection complete.
    assert!(out
        .timeline
        .connections
        .iter()
        .all(|c| c.closed_by.is_some()));
}

#[test]
fn events_total_is_bounded_over_connections() {
    let mut s = Sim::new(2000, 80);
    for port in 2000..2010 {
        s.cport = port;
        s.handshake();
        for _ in 0..5 {
            s.send(true, GET);
            s.send(false, OK);
        }
        s.fin(true);
        s.fin(false);
    }
    let lim = FlowOptions {
        bounds: Bounds {
            max_events_total: 40,
            ..Bounds::default()
        },
        ..FlowOptions::default()
    };
    let out = timeline_from_reader(&s.bytes()[..], &lim).unwrap();
    let events: usize = out
        .timeline
        .connections
        .iter()
        .map(|c| c.segments.len() + c.acks.len())
        .sum();
    assert_eq!(events, 40);
    assert!(out.timeline.connections[0].segments.len() > 2);
    assert!(out.timeline.connections.last().unwrap().events_truncated);
    // Counters and exchanges do not depend on the events kept.
    assert_eq!(out.timeline.exchanges.len(), 50);
    assert!(out
        .timeline
        .connections
        .iter()
        .all(|c| c.to_server.packets == 8));
}

#[test]
fn batched_reading_matches_packet_by_packet() {
    // More packets than one hand-over batch between the reading and the
    // analyzing thread.
    let mut s = Sim::new(3000, 80);
    for port in 3000..3020 {
        s.cport = port;
        s.handshake();
        for _ in 0..40 {
            s.send(true, GET);
            s.send(false, OK);
            s.ack(true);
        }
        s.fin(true);
        s.fin(false);
    }
    let bytes = s.bytes();
    let threaded = timeline_from_reader(&bytes[..], &FlowOptions::default()).unwrap();
    let mut table = whyslow_wire::FlowTable::new(FlowOptions::default());
    let read = whyslow_wire::read_packets(&bytes[..], |p| table.push(p));
    assert!(read.error.is_none());
    assert_eq!(threaded.packets, read.packets_read);
    assert_eq!(threaded.timeline, table.finish());
    assert!(threaded.packets > 2048);
    assert_eq!(threaded.timeline.exchanges.len(), 800);
}

#[test]
fn bytes_the_capture_never_held_are_counted_per_connection_not_resent() {
    let mut s = Sim::new(40000, 80);
    s.handshake();
    s.round_trip(GET, OK);
    s.wait_ms(5);
    let before_gap = s.now_us;
    // A request the capture lost (tcpdump dropped its packet), then one it held.
    s.advance(true, 100);
    s.wait_ms(5);
    s.round_trip(GET, OK);
    s.fin(true);
    s.fin(false);
    let out = analyze(&s.bytes());
    let c = only_conn(&out.timeline);
    assert_eq!((c.to_server.gaps, c.to_server.gap_bytes), (1, 100));
    assert_eq!((c.to_client.gaps, c.to_client.gap_bytes), (0, 0));
    assert_eq!(c.to_server.retransmissions + c.to_client.retransmissions, 0);
    assert_eq!(c.gaps.len(), 1);
    assert_eq!(c.gaps[0].direction, Direction::ToServer);
    assert!(c.gaps[0].after_us <= before_gap, "{:?}", c.gaps[0]);
    // The request after the gap is read.
    let ex = &out.timeline.exchanges;
    assert_eq!(
        ex.iter().filter(|e| e.status.is_some()).count(),
        2,
        "{ex:#?}"
    );
}

#[test]
fn connections_seen_mid_stream_take_their_server_from_the_port_they_share() {
    // A pool's connections to PostgreSQL on a port above the clients',
    // all open before the capture began; each first seen on a bare ACK
    // from its client, which names no side. The server's port recurs.
    let mut s = Sim::new(40000, 45593);
    for port in [40000, 40001, 40002] {
        s.cport = port;
        s.ack(true);
        s.wait_ms(1);
    }
    let out = analyze(&s.bytes());
    let servers: Vec<u16> = out
        .timeline
        .connections
        .iter()
        .map(|c| c.server.port())
        .collect();
    // The first is a guess (the higher port); the others know.
    assert_eq!(servers[1..], [45593, 45593], "{servers:?}");
    // And a handshake seen to a port settles it at once.
    let mut s = Sim::new(50000, 45594);
    s.handshake();
    s.cport = 40003;
    s.ack(true);
    let out = analyze(&s.bytes());
    let c = &out.timeline.connections;
    assert!(c.iter().all(|c| c.server.port() == 45594), "{c:#?}");
}

#[test]
fn a_guess_from_ports_yields_to_the_first_bytes() {
    // A pooled connection to PostgreSQL on a port above its client's, first
    // seen on the client's bare ACK (the port order guesses it wrong), then
    // used: the query says who the client is, and the flow turns round.
    let mut s = Sim::new(40000, 45593);
    s.ack(true);
    s.wait_ms(1);
    s.send(true, b"Q\x00\x00\x00\x0dSELECT 1\x00");
    s.wait_ms(1);
    s.send(false, b"C\x00\x00\x00\x0dSELECT 1\x00Z\x00\x00\x00\x05I");
    s.wait_ms(1);
    s.send(true, b"Q\x00\x00\x00\x0dSELECT 2\x00");
    s.wait_ms(1);
    s.send(false, b"C\x00\x00\x00\x0dSELECT 1\x00Z\x00\x00\x00\x05I");
    let out = analyze(&s.bytes());
    let c = only_conn(&out.timeline);
    assert_eq!((c.client.port(), c.server.port()), (40000, 45593), "{c:#?}");
    // Mid-stream, the first answer only resyncs; the second is paired.
    let ex = &out.timeline.exchanges;
    assert!(
        ex.iter()
            .any(|e| e.request == "SELECT ?" && e.response_last_at_us.is_some()),
        "{ex:#?}"
    );
}

/// A pcapng interface statistics block for interface 0 with these
/// (option code, counter) pairs, little-endian.
fn statistics_block(counters: &[(u16, u64)]) -> Vec<u8> {
    let mut body = Vec::new();
    body.extend_from_slice(&0u32.to_le_bytes()); // interface id
    body.extend_from_slice(&[0; 8]); // timestamp
    for &(code, n) in counters {
        body.extend_from_slice(&code.to_le_bytes());
        body.extend_from_slice(&8u16.to_le_bytes());
        body.extend_from_slice(&n.to_le_bytes());
    }
    body.extend_from_slice(&[0; 4]); // end of options
    let len = (body.len() + 12) as u32;
    let mut block = 5u32.to_le_bytes().to_vec();
    block.extend_from_slice(&len.to_le_bytes());
    block.extend_from_slice(&body);
    block.extend_from_slice(&len.to_le_bytes());
    block
}

#[test]
fn drops_the_capturing_tool_counted_are_read_from_the_file() {
    let mut s = Sim::new(40000, 80);
    s.handshake();
    s.send(true, GET);
    let mut bytes = s.bytes();
    let plain = analyze(&bytes);
    assert_eq!(
        plain.dropped_while_capturing, None,
        "no statistics, no claim"
    );
    // Counters are cumulative: the last block holds the totals.
    bytes.extend(statistics_block(&[(5, 1), (7, 2)]));
    bytes.extend(statistics_block(&[(5, 3), (7, 4), (6, 99)]));
    let out = analyze(&bytes);
    assert_eq!(out.error, None);
    assert_eq!(out.dropped_while_capturing, Some(7));
    assert_eq!(out.packets, plain.packets);
    // What `whyslow capture` writes at its end reads back the same way.
    let mut s = Sim::new(40000, 80);
    s.handshake();
    let at = s.now_us;
    s.w.write_statistics(0, at, 42).unwrap();
    assert_eq!(analyze(&s.bytes()).dropped_while_capturing, Some(42));
}

#[test]
fn statistics_for_no_interface_or_with_short_counters_are_ignored() {
    let mut s = Sim::new(40000, 80);
    s.handshake();
    let mut bytes = s.bytes();
    let mut odd = statistics_block(&[(5, 9)]);
    odd[8..12].copy_from_slice(&7u32.to_le_bytes()); // interface 7: undeclared
    bytes.extend(odd);
    // A 4-byte isb_osdrop: too short for its 64-bit counter.
    let mut short = vec![5, 0, 0, 0, 36, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
    short.extend_from_slice(&[7, 0, 4, 0, 1, 0, 0, 0, 0, 0, 0, 0, 36, 0, 0, 0]);
    bytes.extend(short);
    let out = analyze(&bytes);
    assert_eq!(out.error, None);
    assert_eq!(out.dropped_while_capturing, None);
}
