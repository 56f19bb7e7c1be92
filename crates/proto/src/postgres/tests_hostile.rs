//! Gaps, resyncs, absurd lengths, floods, huge values, fuzzing.

use super::queue::MAX_PENDING;
use super::test_wire::*;
use super::*;
use whyslow_model::Direction::{ToClient, ToServer};
use whyslow_model::{Status, TxState};

fn started() -> PgAnalyzer {
    let mut a = PgAnalyzer::new(1, Start::Beginning);
    a.on_data(ToServer, &startup(), 1, 1);
    a.on_data(ToClient, &server_hello(), 2, 2);
    a
}

#[test]
fn message_claiming_1_gb_is_not_buffered() {
    let mut a = started();
    let mut head = vec![b'Q'];
    head.extend_from_slice(&(1u32 << 30).to_be_bytes());
    a.on_data(ToServer, &head, 3, 3);
    let chunk = vec![b'a'; 64 * 1024];
    for i in 0..48 {
        a.on_data(ToServer, &chunk, 4 + i, 4 + i);
        assert!(a.buffered() <= MAX_QUERY_TEXT + 8192, "{}", a.buffered());
    }
    assert_eq!(a.error(), None);
    let _ = a.finish();
    // Lengths past i32::MAX (negative) and below 4 are framing errors.
    for len in [0x8000_0000u32, 0xffff_fff0, 3, 0] {
        let mut a = started();
        let mut m = vec![b'Q'];
        m.extend_from_slice(&len.to_be_bytes());
        a.on_data(ToServer, &m, 3, 3);
        assert!(a.error().unwrap().contains("length out of range"), "{len}");
        let mut a = started();
        let mut m = vec![b'D'];
        m.extend_from_slice(&len.to_be_bytes());
        a.on_data(ToClient, &m, 3, 3);
        assert!(a.error().unwrap().contains("server"), "{len}");
    }
}

#[test]
fn ten_megabyte_data_row_is_skipped() {
    let mut a = started();
    a.on_data(ToServer, &q("SELECT blob FROM files"), 3, 3);
    let size = 10 << 20;
    let mut head = vec![b'D'];
    head.extend_from_slice(&(size as u32 + 4).to_be_bytes());
    a.on_data(ToClient, &row_desc(), 4, 4);
    a.on_data(ToClient, &head, 5, 5);
    let chunk = vec![0x5a; 64 * 1024];
    for i in 0..size / chunk.len() {
        a.on_data(ToClient, &chunk, 6 + i as u64, 6 + i as u64);
        assert!(a.buffered() <= 8192);
    }
    a.on_data(
        ToClient,
        &cat(&[complete("SELECT 1"), ready(b'I')]),
        999,
        999,
    );
    let ex = a.take_exchanges();
    assert_eq!(ex.len(), 1);
    assert_eq!(ex[0].rows, Some(1));
    let expect = row_desc().len() + 5 + size + complete("SELECT 1").len();
    assert_eq!(ex[0].response_bytes, expect as u64);
    // A 16 MB bind value costs no buffer either, and is hashed.
    let mut a = started();
    let value = vec![7u8; 16 << 20];
    let m = cat(&[
        parse("", "INSERT INTO f VALUES ($1)"),
        bind("", &[Some(&value)]),
        execute(0),
        sync(),
    ]);
    for (i, piece) in m.chunks(65_536).enumerate() {
        a.on_data(ToServer, piece, 3 + i as u64, 3 + i as u64);
        assert!(a.buffered() <= 8192);
    }
    a.on_data(
        ToClient,
        &cat(&[
            msg(b'1', b""),
            msg(b'2', b""),
            complete("INSERT 0 1"),
            ready(b'I'),
        ]),
        9,
        9,
    );
    let ex = a.finish();
    assert_eq!(ex.len(), 1);
    assert!(ex[0].params_digest.is_some());
}

#[test]
fn gap_inside_a_data_row_is_counted() {
    let mut a = started();
    a.on_data(ToServer, &q("SELECT 1"), 3, 3);
    let r = row(&[9; 100]);
    a.on_data(ToClient, &r[..20], 4, 4);
    a.on_gap(ToClient, 50);
    a.on_data(ToClient, &r[70..], 5, 5);
    a.on_data(ToClient, &cat(&[complete("SELECT 1"), ready(b'I')]), 6, 6);
    let ex = a.finish();
    assert_eq!(a.error(), None);
    assert_eq!(ex.len(), 1);
    assert_eq!(ex[0].rows, Some(1));
    assert_eq!(ex[0].transaction, Some(TxState::Idle));
}

#[test]
fn gap_inside_query_text_loses_only_the_text() {
    let mut a = started();
    let m = q("SELECT * FROM t WHERE pan = 'secret-4111'");
    a.on_data(ToServer, &m[..10], 3, 3);
    a.on_gap(ToServer, 10);
    a.on_data(ToServer, &m[20..], 4, 4);
    a.on_data(ToClient, &cat(&[complete("SELECT 0"), ready(b'I')]), 5, 5);
    let ex = a.finish();
    assert_no_secrets(&ex);
    assert_eq!(ex.len(), 1);
    assert_eq!(ex[0].request, LOST_TEXT);
    assert_eq!(ex[0].rows, Some(0));
}

#[test]
fn server_gap_resyncs_at_ready_for_query() {
    let mut a = started();
    a.on_data(ToServer, &q("SELECT 1"), 3, 3);
    a.on_data(ToClient, &row_desc()[..3], 4, 4);
    a.on_gap(ToClient, 400);
    // The rest of the lost answer, then its ReadyForQuery.
    a.on_data(
        ToClient,
        &cat(&[b"\x00\x02zz".to_vec(), complete("SELECT 1"), ready(b'I')]),
        5,
        5,
    );
    a.on_data(ToServer, &q("SELECT 2"), 6, 6);
    a.on_data(ToClient, &cat(&[complete("SELECT 1"), ready(b'T')]), 7, 7);
    let ex = a.finish();
    assert!(a.error().unwrap().contains("missing"));
    assert_eq!(ex.len(), 2);
    assert_eq!(ex[0].response_packets, None, "flushed unanswered");
    assert_eq!(ex[1].request, norm("SELECT 2"));
    assert_eq!(ex[1].transaction, Some(TxState::InTransaction));
    assert_eq!(ex[1].response_packets, Some((7, 7)));
}

#[test]
fn client_gap_resyncs_and_never_mispairs() {
    let mut a = started();
    a.on_data(ToServer, &q("SELECT one"), 3, 3);
    let lost = q("SELECT 'lost'");
    a.on_data(ToServer, &lost[..2], 4, 4);
    a.on_gap(ToServer, 1000);
    a.on_data(
        ToServer,
        &cat(&[b"xx\0".to_vec(), q("SELECT three"), sync()]),
        5,
        5,
    );
    a.on_data(ToClient, &cat(&[complete("SELECT 1"), ready(b'I')]), 6, 6);
    a.on_data(ToClient, &cat(&[complete("SELECT 2"), ready(b'I')]), 7, 7);
    a.on_data(ToServer, &q("SELECT four"), 8, 8);
    a.on_data(ToClient, &cat(&[complete("SELECT 4"), ready(b'I')]), 9, 9);
    let ex = a.finish();
    assert!(a.error().unwrap().contains("missing"));
    let paired: Vec<_> = ex
        .iter()
        .filter(|e| e.response_packets.is_some())
        .map(|e| (e.request.to_string(), e.rows))
        .collect();
    assert_eq!(paired, [(norm("SELECT four"), Some(4))]);
}

#[test]
fn garbage_from_the_client_resyncs() {
    let mut a = started();
    a.on_data(ToServer, b"\x01\x02\x03garbage\x00\x00", 3, 3);
    a.on_data(ToServer, &cat(&[q("SELECT five"), sync()]), 4, 4);
    a.on_data(ToClient, &cat(&[complete("SELECT 1"), ready(b'I')]), 5, 5);
    a.on_data(ToServer, &q("SELECT six"), 6, 6);
    a.on_data(ToClient, &cat(&[complete("SELECT 1"), ready(b'I')]), 7, 7);
    let ex = a.finish();
    assert!(a.error().unwrap().contains("unknown message type"));
    assert_eq!(
        ex.last().map(|e| (e.request.to_string(), e.rows)),
        Some((norm("SELECT six"), Some(1)))
    );
}

#[test]
fn flood_without_answers_is_bounded() {
    let mut a = started();
    let one = cat(&[bind("S_1", &[Some(b"1")]), execute(0)]);
    let mut n = 0;
    for i in 0..3 * MAX_PENDING {
        a.on_data(ToServer, &one, 3 + i as u64, 3 + i as u64);
        n += a.take_exchanges().len();
        assert!(a.queue.waits.len() <= queue::MAX_WAITS);
    }
    n += a.finish().len();
    assert_eq!(n, 3 * MAX_PENDING, "every request is reported once");
    assert!(a.error().unwrap().contains("too many"));
    // 10000 Syncs in a row: bounded too.
    let mut a = started();
    a.on_data(ToServer, &sync().repeat(10_000), 3, 3);
    assert!(a.queue.waits.len() <= queue::MAX_WAITS);
    a.on_data(ToClient, &ready(b'I').repeat(10_000), 4, 4);
    assert!(a.finish().is_empty());
}

#[test]
fn statement_map_is_bounded() {
    let mut a = started();
    for i in 0..MAX_STATEMENTS + 500 {
        let m = cat(&[
            parse(&format!("S_{i}"), &format!("SELECT c{i} FROM t")),
            sync(),
        ]);
        a.on_data(ToServer, &m, 3, 3);
        a.on_data(ToClient, &cat(&[msg(b'1', b""), ready(b'I')]), 4, 4);
    }
    assert_eq!(a.statements.len(), MAX_STATEMENTS);
    a.on_data(
        ToServer,
        &cat(&[
            bind("S_0", &[]),
            execute(0),
            bind("S_1400", &[]),
            execute(0),
            sync(),
        ]),
        5,
        5,
    );
    let two = cat(&[msg(b'2', b""), complete("SELECT 1")]);
    a.on_data(ToClient, &cat(&[two.clone(), two, ready(b'I')]), 6, 6);
    let ex = a.finish();
    assert_eq!(
        labels(&ex),
        [
            "? (statement S_0, 0 parameters, SELECT, prepared before the capture)".to_string(),
            norm("SELECT c1400 FROM t")
        ]
    );
}

#[test]
fn truncated_messages_at_finish() {
    for cut in [1, 3, 6, 12] {
        let mut a = started();
        let m = cat(&[parse("", "SELECT 1"), bind("", &[]), execute(0), sync()]);
        a.on_data(ToServer, &m, 3, 3);
        let answer = cat(&[msg(b'1', b""), msg(b'2', b""), complete("SELECT 1")]);
        a.on_data(ToClient, &answer[..cut], 4, 4);
        let ex = a.finish();
        assert_eq!(ex.len(), 1, "cut {cut}");
        assert_eq!(ex[0].status, None);
    }
    let mut a = started();
    a.on_data(ToServer, &q("SELECT 1")[..5], 3, 3);
    assert!(a.finish().is_empty());
}

#[test]
fn error_in_startup_and_at_sync() {
    let mut a = PgAnalyzer::new(1, Start::Beginning);
    a.on_data(ToServer, &startup(), 1, 1);
    a.on_data(ToClient, &error("28P01"), 2, 2);
    assert!(a.finish().is_empty());
    let mut a = started();
    a.on_data(
        ToServer,
        &cat(&[
            parse("", "INSERT INTO d VALUES (1)"),
            bind("", &[]),
            execute(0),
            sync(),
        ]),
        3,
        3,
    );
    let answer = cat(&[
        msg(b'1', b""),
        msg(b'2', b""),
        complete("INSERT 0 1"),
        error("23503"),
        ready(b'I'),
    ]);
    a.on_data(ToClient, &answer, 4, 4);
    let ex = a.finish();
    assert_eq!(ex.len(), 1);
    assert_eq!(ex[0].status, Some(Status::Sqlstate("23503".into())));
}

fn xorshift(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

/// Pseudo-random inputs for `fuzz`: random bytes, and real sessions with
/// random control bytes, cuts and flips.
#[test]
fn fuzz_does_not_panic() {
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let client = cat(&[
        startup(),
        q("SELECT 1; SELECT 2"),
        parse("S_1", "SELECT $1"),
        bind("S_1", &[Some(b"1"), None]),
        describe_portal(),
        execute(0),
        sync(),
        msg(b'd', b"x"),
        msg(b'c', b""),
    ]);
    let server = cat(&[
        server_hello(),
        row_desc(),
        row(b"1"),
        complete("SELECT 1"),
        error("42P01"),
        ready(b'T'),
        msg(b'G', &[0, 0, 0]),
        msg(b'1', b""),
        msg(b'2', b""),
        msg(b's', b""),
    ]);
    for round in 0..4000 {
        let mut data = Vec::new();
        let (mut ci, mut si) = (0, 0);
        while data.len() < 600 {
            let r = xorshift(&mut seed);
            let len = (r >> 8) as usize % 64;
            let to_client = r & 1 == 1;
            let gap = r.is_multiple_of(29);
            data.push(((to_client as u8) << 7) | ((gap as u8) << 6) | len as u8);
            let src = if to_client { &server } else { &client };
            let pos = if to_client { &mut si } else { &mut ci };
            for k in 0..len {
                let b = if round % 3 == 0 {
                    xorshift(&mut seed) as u8
                } else {
                    src.get(*pos + k).copied().unwrap_or(0)
                };
                let flip = xorshift(&mut seed).is_multiple_of(97);
                data.push(if flip { b ^ 0x41 } else { b });
            }
            *pos += len;
        }
        if round % 2 == 1 {
            data[0] |= 1;
        }
        fuzz(&data);
    }
}
