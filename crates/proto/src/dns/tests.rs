use super::message::{parse, read_name, Bad, TYPE_A, TYPE_AAAA};
use super::*;
use crate::testkit::feed;
use std::net::{IpAddr, Ipv4Addr};
use whyslow_model::Direction::{ToClient, ToServer};

fn name(n: &str) -> Vec<u8> {
    let mut v = Vec::new();
    for label in n.split('.').filter(|l| !l.is_empty()) {
        v.push(label.len() as u8);
        v.extend_from_slice(label.as_bytes());
    }
    v.push(0);
    v
}

fn header(id: u16, flags: u16, qd: u16, an: u16) -> Vec<u8> {
    let mut v = Vec::new();
    for x in [id, flags, qd, an, 0, 0] {
        v.extend_from_slice(&x.to_be_bytes());
    }
    v
}

fn query(id: u16, n: &str, qtype: u16) -> Vec<u8> {
    let mut v = header(id, 0x0100, 1, 0);
    v.extend(name(n));
    v.extend_from_slice(&qtype.to_be_bytes());
    v.extend_from_slice(&1u16.to_be_bytes());
    v
}

/// A response with A records, each naming the question by a pointer.
fn response(id: u16, n: &str, qtype: u16, rcode: u16, addrs: &[Ipv4Addr]) -> Vec<u8> {
    let mut v = header(id, 0x8180 | rcode, 1, addrs.len() as u16);
    v.extend(name(n));
    v.extend_from_slice(&qtype.to_be_bytes());
    v.extend_from_slice(&1u16.to_be_bytes());
    for a in addrs {
        v.extend_from_slice(&[0xc0, 12]);
        v.extend_from_slice(&TYPE_A.to_be_bytes());
        v.extend_from_slice(&[0, 1, 0, 0, 0, 60, 0, 4]);
        v.extend_from_slice(&a.octets());
    }
    v
}

fn framed(m: &[u8]) -> Vec<u8> {
    let mut v = (m.len() as u16).to_be_bytes().to_vec();
    v.extend_from_slice(m);
    v
}

#[test]
fn a_response_is_read_with_its_addresses_through_pointers() {
    let ip = Ipv4Addr::new(10, 0, 0, 7);
    let m = parse(&response(7, "Api.Internal", TYPE_A, 0, &[ip, ip])).unwrap();
    assert!(m.response);
    assert_eq!(m.id, 7);
    assert_eq!(m.answers, 2);
    let q = m.question.unwrap();
    assert_eq!((q.name.as_str(), q.qtype), ("api.internal", TYPE_A));
    assert_eq!(m.addresses, vec![IpAddr::from(ip); 2]);
}

#[test]
fn hostile_names_are_refused_not_followed() {
    // A pointer to itself, one forward, one past the end.
    let mut looped = header(1, 0, 1, 0);
    looped.extend_from_slice(&[0xc0, 12, 0, 1, 0, 1]);
    assert_eq!(read_name(&looped, 12), None);
    assert!(parse(&looped).unwrap().question.is_none());
    let mut forward = header(1, 0, 1, 0);
    forward.extend_from_slice(&[0xc0, 20, 0, 1, 0, 1, 0, 0, 0]);
    assert_eq!(read_name(&forward, 12), None);
    let mut past = header(1, 0, 1, 0);
    past.extend_from_slice(&[0xc0, 0xff]);
    assert_eq!(read_name(&past, 12), None);
    // Two pointers pointing at each other: the second is not before the first's target.
    let mut pair = header(1, 0, 1, 0);
    pair.extend_from_slice(&[0xc0, 14, 0xc0, 12]);
    assert_eq!(read_name(&pair, 12), None);
    // A 64-byte label, and a name over 255 bytes.
    let mut long_label = header(1, 0, 1, 0);
    long_label.push(64);
    long_label.extend_from_slice(&[b'a'; 64]);
    long_label.push(0);
    assert_eq!(read_name(&long_label, 12), None);
    let long = vec!["abcdefghij"; 30].join(".");
    assert_eq!(read_name(&query(1, &long, 1), 12), None);
    // Extended label types.
    let mut ext = header(1, 0, 1, 0);
    ext.extend_from_slice(&[0x41, 0]);
    assert_eq!(read_name(&ext, 12), None);
    assert_eq!(parse(&[0; 11]), Err(Bad::Short));
}

#[test]
fn odd_bytes_in_names_are_escaped() {
    let mut m = header(1, 0, 1, 0);
    m.extend_from_slice(&[3, b'a', b'.', 0x07, 0]);
    assert_eq!(read_name(&m, 12).unwrap().0, "a\\.\\007");
    let root = query(1, "", 2);
    assert_eq!(parse(&root).unwrap().question.unwrap().name, ".");
}

#[test]
fn answers_pair_by_id_in_any_order() {
    let ip = Ipv4Addr::LOCALHOST;
    let mut a = DnsAnalyzer::new(1, Start::Beginning);
    let (q1, q2) = (
        query(10, "api.internal", TYPE_A),
        query(11, "api.internal", TYPE_AAAA),
    );
    let r2 = response(11, "api.internal", TYPE_AAAA, 3, &[]);
    let r1 = response(10, "api.internal", TYPE_A, 0, &[ip]);
    let (ex, note) = feed(
        &mut a,
        [
            (ToServer, &framed(&q1)[..]),
            (ToServer, &framed(&q2)[..]),
            (ToClient, &framed(&r2)[..]),
            (ToClient, &framed(&r1)[..]),
        ],
    );
    assert_eq!(note, None);
    assert_eq!(ex.len(), 2);
    let aaaa = ex
        .iter()
        .find(|e| e.request == "AAAA api.internal")
        .unwrap();
    assert_eq!(aaaa.status, Some(Status::Dns("NXDOMAIN".into())));
    assert_eq!(
        (aaaa.request_first_at_us, aaaa.response_last_at_us),
        (2000, Some(3000))
    );
    let a4 = ex.iter().find(|e| e.request == "A api.internal").unwrap();
    assert_eq!(a4.status, Some(Status::Dns("NOERROR".into())));
    assert_eq!((a4.rows, a4.response_first_at_us), (Some(1), Some(4000)));
    // The answer's address, for the call that follows the lookup.
    assert_eq!(a4.resolved_to.as_deref(), Some(&[IpAddr::from(ip)][..]));
    assert_eq!(aaaa.resolved_to, None, "an answer with no records");
}

#[test]
fn a_retry_ends_the_first_try_unanswered() {
    let q = framed(&query(5, "db.internal", TYPE_A));
    let r = framed(&response(
        5,
        "db.internal",
        TYPE_A,
        0,
        &[Ipv4Addr::LOCALHOST],
    ));
    let lone = framed(&query(6, "never.internal", TYPE_A));
    let mut a = DnsAnalyzer::new(1, Start::Beginning);
    let (ex, _) = feed(
        &mut a,
        [
            (ToServer, &q[..]),
            (ToServer, &q[..]),
            (ToClient, &r[..]),
            (ToServer, &lone[..]),
        ],
    );
    assert_eq!(ex.len(), 3);
    let tries: Vec<_> = ex.iter().filter(|e| e.request == "A db.internal").collect();
    assert_eq!(tries[0].response_first_at_us, None);
    assert_eq!(tries[0].request_first_at_us, 1000);
    assert_eq!(tries[1].response_first_at_us, Some(3000));
    assert_eq!(tries[1].request_first_at_us, 2000);
    assert_eq!(
        tries[0].params_digest,
        Some(5),
        "a try and its retry share the id"
    );
    assert_eq!(tries[1].params_digest, Some(5));
    let never = ex.iter().find(|e| e.request == "A never.internal").unwrap();
    assert_eq!((never.status.clone(), never.params_digest), (None, None));
}

#[test]
fn an_id_reused_on_a_busy_socket_is_no_retry() {
    let q = framed(&query(5, "db.internal", TYPE_A));
    let mut a = DnsAnalyzer::new(1, Start::Beginning);
    let mut chunks = vec![(ToServer, q.clone())];
    for i in 0..10u16 {
        chunks.push((ToServer, framed(&query(100 + i, "x.internal", TYPE_A))));
        chunks.push((
            ToClient,
            framed(&response(100 + i, "x.internal", TYPE_A, 0, &[])),
        ));
    }
    chunks.push((ToServer, q));
    let (ex, _) = feed(&mut a, chunks.iter().map(|(d, b)| (*d, &b[..])));
    let tries: Vec<_> = ex.iter().filter(|e| e.request == "A db.internal").collect();
    assert_eq!(tries.len(), 2);
    assert!(tries.iter().all(|e| e.params_digest.is_none()), "{tries:?}");
}

#[test]
fn an_answer_to_another_question_is_not_paired() {
    let q = framed(&query(9, "a.example", TYPE_A));
    let other = framed(&response(9, "b.example", TYPE_A, 3, &[]));
    let right = framed(&response(9, "A.Example", TYPE_A, 0, &[]));
    let mut a = DnsAnalyzer::new(1, Start::Beginning);
    let (ex, _) = feed(
        &mut a,
        [
            (ToServer, &q[..]),
            (ToClient, &other[..]),
            (ToClient, &right[..]),
        ],
    );
    assert_eq!(a.unmatched_responses, 1);
    assert_eq!(ex.len(), 1);
    assert_eq!(
        ex[0].status,
        Some(Status::Dns("NOERROR".into())),
        "case folded"
    );
}

#[test]
fn a_long_chain_of_pointers_is_cut_short() {
    // 200 pointers, each to the one before: backwards, but past a name's labels.
    let mut m = header(1, 0, 1, 0);
    m.extend_from_slice(&[1, b'a', 0]);
    for k in 0..200usize {
        let to = if k == 0 { 12 } else { 15 + 2 * (k - 1) };
        m.extend_from_slice(&[0xc0 | (to >> 8) as u8, to as u8]);
    }
    let last = m.len() - 2;
    assert_eq!(read_name(&m, last), None);
    assert!(read_name(&m, 15 + 2 * 100).is_some());
}

#[test]
fn tcp_framing_split_and_packed_reads_the_same() {
    let mut stream = framed(&query(1, "a.example", TYPE_A));
    stream.extend(framed(&query(2, "b.example", TYPE_A)));
    let mut answers = framed(&response(2, "b.example", TYPE_A, 0, &[]));
    answers.extend(framed(&response(1, "a.example", TYPE_A, 2, &[])));
    let mut chunks: Vec<(whyslow_model::Direction, &[u8])> =
        stream.chunks(3).map(|c| (ToServer, c)).collect();
    chunks.push((ToClient, &answers[..]));
    let (ex, note) = feed(&mut DnsAnalyzer::new(1, Start::Beginning), chunks);
    assert_eq!(note, None);
    let mut got: Vec<_> = ex
        .iter()
        .map(|e| (e.request.to_string(), e.status.clone()))
        .collect();
    got.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        got,
        vec![
            ("A a.example".into(), Some(Status::Dns("SERVFAIL".into()))),
            ("A b.example".into(), Some(Status::Dns("NOERROR".into()))),
        ]
    );
    assert!(Status::Dns("SERVFAIL".into()).is_error());
    assert!(!Status::Dns("NXDOMAIN".into()).is_error());
}

#[test]
fn a_cut_datagram_is_read_as_far_as_it_goes() {
    // The response's answer section lies past the snapshot length.
    let r = framed(&response(3, "c.example", TYPE_A, 0, &[Ipv4Addr::LOCALHOST]));
    let q = framed(&query(3, "c.example", TYPE_A));
    let next = framed(&query(4, "d.example", TYPE_A));
    let mut a = DnsAnalyzer::new(1, Start::Beginning);
    a.on_data(ToServer, &q, 1, 1);
    a.on_data(ToClient, &r[..r.len() - 10], 2, 2);
    a.on_gap(ToClient, 10);
    a.on_data(ToServer, &next, 3, 3);
    let mut ex = a.take_exchanges();
    ex.extend(a.finish());
    assert_eq!(ex.len(), 2);
    assert_eq!(ex[0].status, Some(Status::Dns("NOERROR".into())));
    assert_eq!(ex[1].request, "A d.example");
    assert_eq!(a.error(), None);
}

#[test]
fn after_a_gap_the_stream_resyncs_at_the_next_message() {
    let q1 = framed(&query(1, "a.example", TYPE_A));
    let q2 = framed(&query(2, "b.example", TYPE_A));
    let r2 = framed(&response(2, "b.example", TYPE_A, 0, &[]));
    let mut a = DnsAnalyzer::new(1, Start::Beginning);
    a.on_data(ToServer, &q1[..5], 1, 1);
    a.on_gap(ToServer, 5000);
    a.on_data(ToServer, &q1[10..], 2, 2); // the middle of a message: skipped
    a.on_data(ToServer, &q2, 3, 3);
    a.on_data(ToClient, &r2, 4, 4);
    let ex = a.take_exchanges();
    assert_eq!(ex.len(), 1);
    assert_eq!(ex[0].request, "A b.example");
}

#[test]
fn a_flood_of_answers_and_queries_stays_bounded() {
    let mut a = DnsAnalyzer::new(1, Start::Beginning);
    let r = framed(&response(9, "x.example", TYPE_A, 0, &[]));
    for i in 0..10_000u64 {
        a.on_data(ToClient, &r, i, i);
    }
    assert_eq!(a.unmatched_responses, 10_000);
    for i in 0..(MAX_PENDING as u64 + 100) {
        let q = framed(&query(i as u16, "y.example", TYPE_A));
        a.on_data(ToServer, &q, i, i);
    }
    let sent = MAX_PENDING + 100;
    assert!(
        a.pending.len() as u64 <= GIVE_UP_QUERIES + 1,
        "{}",
        a.pending.len()
    );
    let ended = a.take_exchanges().len();
    assert!(ended >= sent - GIVE_UP_QUERIES as usize - 1, "{ended}");
    assert_eq!(ended + a.finish().len(), sent);
    assert!(a.order.len() <= MAX_PENDING + 1);
}

#[test]
fn a_query_left_unanswered_past_the_longest_wait_is_ended() {
    let mut a = DnsAnalyzer::new(1, Start::Beginning);
    a.on_data(ToServer, &framed(&query(1, "a.example", TYPE_A)), 1_000, 1);
    assert_eq!(a.open_since(), Some(1_000));
    let later = 1_000 + GIVE_UP_US + 1;
    a.on_data(ToServer, &framed(&query(2, "b.example", TYPE_A)), later, 2);
    let ex = a.take_exchanges();
    assert_eq!(ex.len(), 1);
    assert_eq!(ex[0].request, "A a.example");
    assert_eq!(a.open_since(), Some(later));
}

#[test]
fn a_query_left_behind_by_thousands_on_its_flow_is_ended() {
    let mut a = DnsAnalyzer::new(1, Start::Beginning);
    a.on_data(
        ToServer,
        &framed(&query(1, "lost.example", TYPE_A)),
        1_000,
        1,
    );
    for i in 0..2 * GIVE_UP_QUERIES {
        let id = 2 + (i % 60_000) as u16;
        a.on_data(
            ToServer,
            &framed(&query(id, "x.example", TYPE_A)),
            2_000 + i,
            2,
        );
        a.on_data(
            ToClient,
            &framed(&response(id, "x.example", TYPE_A, 0, &[])),
            2_000 + i,
            3,
        );
    }
    let ex = a.take_exchanges();
    let lost: Vec<_> = ex
        .iter()
        .filter(|e| e.request == "A lost.example")
        .collect();
    assert_eq!(lost.len(), 1);
    assert_eq!(lost[0].response_first_at_us, None);
}

#[test]
fn sniffing_takes_a_framed_query_and_nothing_else() {
    let q = framed(&query(1, "a.example", TYPE_A));
    assert_eq!(DnsAnalyzer::sniff(&q, Start::Beginning), Sniff::Yes);
    assert_eq!(
        DnsAnalyzer::sniff(&q[..6], Start::Beginning),
        Sniff::NeedMore
    );
    let r = framed(&response(1, "a.example", TYPE_A, 0, &[]));
    assert_eq!(DnsAnalyzer::sniff(&r, Start::Beginning), Sniff::No);
    for other in [
        &b"GET / HTTP/1.1\r\n\r\n"[..],
        b"*1\r\n$4\r\nPING\r\n",
        b"\x00\x00\x00\x08\x04\xd2\x16\x2f",
    ] {
        assert_eq!(
            DnsAnalyzer::sniff(other, Start::Beginning),
            Sniff::No,
            "{other:?}"
        );
    }
}

#[test]
fn random_bytes_never_panic() {
    let mut x = 0x2545_f491_4f6c_dd1du64;
    for _ in 0..2000 {
        let mut data = Vec::new();
        for _ in 0..(x % 300) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            data.push(x as u8);
        }
        let _ = parse(&data);
        fuzz(&data);
    }
}
