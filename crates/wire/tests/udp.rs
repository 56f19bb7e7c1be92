//! UDP in the flow table: DNS datagrams become flows whose queries and
//! answers pair into exchanges; a DNS answer past the MTU (its first IPv4
//! fragment) still pairs; mDNS and other UDP are counted by port, not read;
//! a flood of lookup sockets stays within the flow bound.

use etherparse::PacketBuilder;
use whyslow_model::{Protocol, Status};
use whyslow_wire::{Bounds, FlowOptions, FlowTable, LinkType};

const CLIENT: [u8; 4] = [10, 0, 0, 1];
const RESOLVER: [u8; 4] = [10, 0, 0, 53];

fn name(n: &str) -> Vec<u8> {
    let mut v = Vec::new();
    for l in n.split('.') {
        v.push(l.len() as u8);
        v.extend_from_slice(l.as_bytes());
    }
    v.push(0);
    v
}

/// A query (or, `answers` set, a response with that many A records).
fn dns(id: u16, n: &str, answers: Option<u16>) -> Vec<u8> {
    let flags: u16 = if answers.is_some() { 0x8180 } else { 0x0100 };
    let mut v = Vec::new();
    for x in [id, flags, 1, answers.unwrap_or(0), 0, 0] {
        v.extend_from_slice(&x.to_be_bytes());
    }
    v.extend(name(n));
    v.extend_from_slice(&[0, 1, 0, 1]);
    for _ in 0..answers.unwrap_or(0) {
        v.extend_from_slice(&[0xc0, 12, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4, 10, 0, 0, 9]);
    }
    v
}

fn udp(src: ([u8; 4], u16), dst: ([u8; 4], u16), payload: &[u8]) -> Vec<u8> {
    let b = PacketBuilder::ipv4(src.0, dst.0, 64).udp(src.1, dst.1);
    let mut out = Vec::with_capacity(b.size(payload.len()));
    b.write(&mut out, payload).unwrap();
    out
}

fn table(max_flows: usize) -> FlowTable {
    FlowTable::new(FlowOptions {
        bounds: Bounds {
            max_flows,
            ..Bounds::default()
        },
        ..FlowOptions::default()
    })
}

fn push(t: &mut FlowTable, frame: &[u8], orig: usize, n: u64) {
    t.push_frame(LinkType::RAW, frame, orig as u32, n * 1_000, n);
}

#[test]
fn a_query_and_its_answer_are_one_exchange_on_a_udp_flow() {
    let mut t = table(100);
    push(
        &mut t,
        &udp(
            (CLIENT, 40000),
            (RESOLVER, 53),
            &dns(7, "db.internal", None),
        ),
        0,
        1,
    );
    push(
        &mut t,
        &udp(
            (RESOLVER, 53),
            (CLIENT, 40000),
            &dns(7, "db.internal", Some(1)),
        ),
        0,
        2,
    );
    let timeline = t.finish();
    assert_eq!(timeline.connections.len(), 1);
    let c = &timeline.connections[0];
    assert!(c.udp);
    assert_eq!((c.protocol, c.server.port()), (Protocol::Dns, 53));
    let e = &timeline.exchanges[0];
    assert_eq!(e.request, "A db.internal");
    assert_eq!(e.status, Some(Status::Dns("NOERROR".into())));
    // The size on the wire, without the length prefix the flow table adds.
    assert_eq!(e.request_bytes, dns(7, "db.internal", None).len() as u64);
}

#[test]
fn an_answer_past_the_mtu_pairs_by_its_first_fragment() {
    let mut t = table(100);
    push(
        &mut t,
        &udp(
            (CLIENT, 40001),
            (RESOLVER, 53),
            &dns(9, "big.internal", None),
        ),
        0,
        1,
    );
    // The answer's first fragment: 40 records, its first 176 bytes.
    let whole = udp(
        (RESOLVER, 53),
        (CLIENT, 40001),
        &dns(9, "big.internal", Some(40)),
    );
    let mut first = whole[..196].to_vec();
    first[6] |= 0x20; // more fragments, offset 0
    first[2..4].copy_from_slice(&196u16.to_be_bytes());
    push(&mut t, &first, 0, 2);
    let mut later = whole[..20].to_vec();
    later.extend_from_slice(&whole[196..]);
    later[6..8].copy_from_slice(&(176u16 / 8).to_be_bytes()); // the rest, last
    push(&mut t, &later, 0, 3);
    let timeline = t.finish();
    let e = &timeline.exchanges[0];
    assert_eq!(e.status, Some(Status::Dns("NOERROR".into())));
    assert_eq!(e.rows, Some(40));
}

#[test]
fn mdns_and_other_udp_are_counted_not_read() {
    let mut t = table(100);
    let mdns = dns(0, "printer.local", None);
    push(
        &mut t,
        &udp((CLIENT, 5353), ([224, 0, 0, 251], 5353), &mdns),
        0,
        1,
    );
    push(
        &mut t,
        &udp((CLIENT, 40002), (RESOLVER, 123), &[0x23; 48]),
        0,
        2,
    );
    push(
        &mut t,
        &udp((CLIENT, 40002), (RESOLVER, 123), &[0x23; 48]),
        0,
        3,
    );
    let other = t.other_udp();
    let timeline = t.finish();
    assert!(
        timeline.connections.is_empty(),
        "{:?}",
        timeline.connections
    );
    assert_eq!(other, vec![(123, 2), (5353, 1)]);
}

#[test]
fn a_flood_of_lookup_sockets_stays_within_the_flow_bound() {
    // Each lookup on its own socket, the answers missing: flows never settle.
    let mut t = table(64);
    for i in 0..5_000u16 {
        let q = udp(
            (CLIENT, 20000 + i),
            (RESOLVER, 53),
            &dns(i, "lost.internal", None),
        );
        push(&mut t, &q, 0, u64::from(i) + 1);
    }
    let c = t.counters();
    assert!(c.evicted_flows >= 5_000 - 64, "{c:?}");
    let timeline = t.finish();
    assert_eq!(
        timeline.exchanges.len(),
        5_000,
        "every query kept, unanswered"
    );
    assert!(timeline
        .exchanges
        .iter()
        .all(|e| e.response_first_at_us.is_none()));
}
