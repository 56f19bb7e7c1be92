//! TLS plaintext read in place of ciphertext (`FlowOptions::plaintext`):
//! the connection's exchanges come from the plaintext, in capture time,
//! its TCP side from the packets; chunks that fit no connection, arrive
//! before it opened, or claim huge lengths are left out or skipped by
//! length, never a panic. Connections no packet shows (Unix-domain
//! sockets) are opened from their chunks alone.

mod common;

use common::*;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use whyslow_model::unix_socket::{client_address, server_address};
use whyslow_wire::{timeline_from_reader, EventsOnly, FlowOptions, PlainChunk, PlaintextFeed};

fn addr(ip: [u8; 4], port: u16) -> SocketAddr {
    SocketAddr::new(IpAddr::from(ip), port)
}

fn chunk(at_us: u64, local: SocketAddr, remote: SocketAddr, sent: bool, data: &[u8]) -> PlainChunk {
    PlainChunk {
        at_us,
        local,
        remote,
        sent,
        data: data.to_vec(),
        whole: data.len() as u64,
        events_only: None,
    }
}

#[test]
fn plaintext_gives_the_exchanges_and_hostile_chunks_are_left_out() {
    let (client, server) = (addr(CLIENT, 40100), addr(SERVER, 443));
    let mut s = Sim::new(40100, 443);
    let opened = s.now_us;
    s.handshake();
    s.wait_ms(1);
    let sent_at = s.now_us;
    // Ciphertext: nothing an analyzer could read.
    s.send(
        true,
        &[0x17, 0x03, 0x03, 0x00, 0x20, 0xde, 0xad, 0xbe, 0xef],
    );
    s.wait_ms(5);
    let answered_at = s.now_us;
    s.send(false, &[0x17, 0x03, 0x03, 0x00, 0x40, 0xca, 0xfe]);
    s.wait_ms(1);
    s.fin(true);
    let cap = s.bytes();
    let mut huge = chunk(answered_at + 2, client, server, false, b"junk");
    huge.whole = 16 << 20;
    let feed = PlaintextFeed::new(vec![
        // Read by the client (its side of the connection).
        chunk(sent_at, client, server, true, GET),
        chunk(answered_at + 1, client, server, false, OK),
        // Before the connection opened, and on a connection never seen.
        chunk(
            opened - 10,
            client,
            server,
            true,
            b"GET /before HTTP/1.1\r\n\r\n",
        ),
        chunk(sent_at, addr(CLIENT, 1), server, true, GET),
        // The server's end of the same connection: one end is enough.
        chunk(sent_at + 1, server, client, false, GET),
        // A length past anything held: skipped by length.
        huge,
    ]);
    assert_eq!(feed.other_side, 1);
    let options = FlowOptions {
        plaintext: Some(Arc::new(feed)),
        ..FlowOptions::default()
    };
    let out = timeline_from_reader(&cap[..], &options).unwrap();
    let t = out.timeline;
    assert_eq!(t.connections.len(), 1);
    assert!(t.connections[0].tls, "read from plaintext, still TLS");
    let requests: Vec<&str> = t.exchanges.iter().map(|e| e.request.as_str()).collect();
    assert_eq!(requests.len(), 1, "{requests:?}");
    assert!(requests[0].starts_with("GET /items"), "{requests:?}");
    let e = &t.exchanges[0];
    assert_eq!(e.request_first_at_us, sent_at);
    assert_eq!(e.response_first_at_us, Some(answered_at + 1));
    assert_eq!(e.status, Some(whyslow_model::Status::Http(200)));
}

#[test]
fn without_a_feed_the_same_capture_stays_encrypted() {
    let mut s = Sim::new(40100, 443);
    s.handshake();
    s.send(
        true,
        &[0x17, 0x03, 0x03, 0x00, 0x20, 0xde, 0xad, 0xbe, 0xef],
    );
    s.fin(true);
    let out = timeline_from_reader(&s.bytes()[..], &FlowOptions::default()).unwrap();
    assert!(out.timeline.exchanges.is_empty());
}

#[test]
fn a_connection_no_packet_shows_is_read_from_its_chunks_alone() {
    let path = "/run/app/api.sock";
    let (client, server) = (client_address(7), server_address(path));
    let only = Some(EventsOnly {
        path: path.into(),
        server,
    });
    let unix = |at_us, sent, data: &[u8]| PlainChunk {
        events_only: only.clone(),
        ..chunk(at_us, client, server, sent, data)
    };
    // The server's end is traced too, from its side: one end is enough.
    let server_side = PlainChunk {
        events_only: only.clone(),
        ..chunk(1_050, server, client, false, GET)
    };
    let mut huge = unix(3_000, false, b"junk");
    huge.whole = 16 << 20;
    let feed = PlaintextFeed::new(vec![
        unix(1_000, true, GET),
        server_side,
        unix(2_000, false, OK),
        unix(2_500, true, GET),
        huge,
    ]);
    // A capture with one packet-seen connection, before the socket's calls.
    let mut s = Sim::new(40100, 80);
    s.handshake();
    s.fin(true);
    let options = FlowOptions {
        plaintext: Some(Arc::new(feed)),
        ..FlowOptions::default()
    };
    let t = timeline_from_reader(&s.bytes()[..], &options)
        .unwrap()
        .timeline;
    assert_eq!(t.connections.len(), 2, "{:?}", t.connections);
    let c = t
        .connections
        .iter()
        .find(|c| c.socket_path.is_some())
        .unwrap();
    assert_eq!((c.client, c.server), (client, server));
    assert_eq!(c.server_name(), "unix:/run/app/api.sock");
    assert!(!c.tls);
    assert_eq!((c.first_at_us, c.last_at_us), (1_000, 3_000));
    let on: Vec<_> = t
        .exchanges
        .iter()
        .filter(|e| e.connection == c.id)
        .collect();
    assert_eq!(on.len(), 2, "{on:?}");
    assert_eq!(on[0].request_first_at_us, 1_000);
    assert_eq!(on[0].status, Some(whyslow_model::Status::Http(200)));
    // Junk that claims 16 MiB answers nothing, and costs no memory.
    assert_eq!(on[1].request_first_at_us, 2_500);
    assert_eq!(on[1].response_first_at_us, None);
}

/// A connection opened before the capture: its first packet is captured a
/// little after the library call that wrote it entered (the encryption and
/// the syscall between), so that call's plaintext is fed when the
/// connection opens; a call long before it is from before the capture.
#[test]
fn a_connection_first_seen_mid_stream_gets_the_write_that_entered_before_its_packet() {
    let (client, server) = (addr(CLIENT, 40100), addr(SERVER, 443));
    let mut s = Sim::new(40100, 443);
    s.wait_ms(2_000);
    let first_packet = s.now_us;
    s.send(true, &[0x17, 0x03, 0x03, 0x00, 0x20, 0xde, 0xad]);
    s.wait_ms(3);
    let answered = s.now_us;
    s.send(false, &[0x17, 0x03, 0x03, 0x00, 0x40, 0xca, 0xfe]);
    s.wait_ms(1);
    s.fin(true);
    let feed = PlaintextFeed::new(vec![
        chunk(
            first_packet - 1_500_000,
            client,
            server,
            true,
            b"GET /old HTTP/1.1\r\n\r\n",
        ),
        chunk(first_packet - 1_500_000 + 1_000, client, server, false, OK),
        chunk(first_packet - 80, client, server, true, GET),
        chunk(answered + 20, client, server, false, OK),
    ]);
    let options = FlowOptions {
        plaintext: Some(Arc::new(feed)),
        ..FlowOptions::default()
    };
    let t = timeline_from_reader(&s.bytes()[..], &options)
        .unwrap()
        .timeline;
    let requests: Vec<&str> = t.exchanges.iter().map(|e| e.request.as_str()).collect();
    assert_eq!(requests.len(), 1, "{requests:?}");
    assert!(requests[0].starts_with("GET /items"), "{requests:?}");
    assert_eq!(t.exchanges[0].request_first_at_us, first_packet - 80);
}
