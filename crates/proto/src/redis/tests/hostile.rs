//! Gaps, resynchronization, mid-stream starts, sniffing, hostile input.

use super::*;

#[test]
fn ten_thousand_nested_arrays_stop_at_the_depth_bound() {
    let mut a = RespAnalyzer::new(1, Start::Beginning);
    a.on_data(C, &cmd(&[b"EVAL", b"return nested", b"0"]), 1, 1);
    let mut deep = b"*1\r\n".repeat(10_000);
    deep.extend_from_slice(b":1\r\n");
    a.on_data(S, &deep, 2, 2);
    assert!(a.error().unwrap_or_default().contains("nesting"));
    // Pairing starts again with the next command.
    a.on_data(C, &cmd(&[b"PING"]), 3, 3);
    a.on_data(S, b"+PONG\r\n", 4, 4);
    let ex = a.finish();
    assert_eq!(labels(&ex), ["EVAL", "PING"]);
    assert_eq!(ex[0].response_packets, None);
    assert_eq!(ex[1].response_packets, Some((4, 4)));
    // Within the bound, nesting is fine.
    let mut a = RespAnalyzer::new(1, Start::Beginning);
    a.on_data(C, &cmd(&[b"PING"]), 1, 1);
    let mut ok = b"*1\r\n".repeat(frame::MAX_DEPTH);
    ok.extend_from_slice(b"_\r\n");
    a.on_data(S, &ok, 2, 2);
    assert_eq!(a.finish()[0].rows, Some(1));
    assert_eq!(a.error(), None);
}

#[test]
fn hostile_lengths_are_errors_not_allocations() {
    for bad in [
        &b"$-5\r\n"[..],
        b"*-2\r\n",
        b"$2147483648\r\n",
        b"*99999999999999999999\r\n",
        b"?\r\n",
    ] {
        let mut a = RespAnalyzer::new(1, Start::Beginning);
        a.on_data(C, &cmd(&[b"GET", b"k"]), 1, 1);
        a.on_data(S, bad, 2, 2);
        assert!(a.error().is_some(), "{bad:?}");
        let ex = a.finish();
        assert_eq!(ex.len(), 1);
        assert_eq!(ex[0].response_packets, None);
    }
    for bad in [
        &b"*1\r\n$2147483648\r\n"[..],
        b"*1\r\n$-5\r\n",
        b"*2147483648\r\n$3\r\n",
        b"*1\r\n+OK\r\n",
    ] {
        let mut a = RespAnalyzer::new(1, Start::Beginning);
        a.on_data(C, bad, 1, 1);
        assert!(a.error().is_some(), "{bad:?}");
        // The command after it is read again.
        a.on_data(C, b"\r\n", 1, 1);
        a.on_data(C, &cmd(&[b"GET", b"k"]), 2, 2);
        a.on_data(S, b"$-1\r\n", 3, 3);
        let ex = a.finish();
        assert_eq!(labels(&ex), [format!("GET {}", key("k"))]);
        assert_eq!(ex[0].response_packets, Some((3, 3)));
    }
}

#[test]
fn truncated_messages_flush_at_finish() {
    let mut a = RespAnalyzer::new(1, Start::Beginning);
    a.on_data(C, &cmd(&[b"GET", b"k"]), 1, 1);
    a.on_data(C, b"*2\r\n$3\r\nGE", 2, 2);
    a.on_data(S, b"$10\r\nabc", 3, 3);
    let ex = a.finish();
    assert_eq!(ex.len(), 1);
    assert_eq!(ex[0].response_packets, Some((3, 3)));
    assert_eq!(ex[0].status, None);
}

#[test]
fn gap_inside_a_value_is_counted() {
    let mut a = RespAnalyzer::new(1, Start::Beginning);
    a.on_data(C, b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$5000\r\n", 1, 1);
    // The value is only hashed past its first KiB: a gap there is absorbed.
    a.on_data(C, &[b'x'; 2000], 2, 2);
    a.on_gap(C, 2000);
    a.on_data(C, &[b'x'; 1000], 3, 3);
    a.on_data(C, b"\r\n", 3, 3);
    a.on_data(C, &cmd(&[b"GET", b"k"]), 4, 4);
    a.on_data(S, b"+OK\r\n$3000\r\n", 5, 5);
    a.on_gap(S, 3000);
    a.on_data(S, b"\r\n", 6, 6);
    let ex = a.finish();
    assert_eq!(a.error(), None);
    assert_eq!(ex.len(), 2);
    assert_eq!(ex[0].request_bytes, 27 + 5002);
    assert_eq!(
        ex[0].params_digest, None,
        "digest of a partly missing value"
    );
    assert_eq!(ex[1].response_bytes, 3009);
}

#[test]
fn gap_in_replies_flushes_and_pairs_again_from_the_next_command() {
    let mut a = RespAnalyzer::new(1, Start::Beginning);
    a.on_data(
        C,
        &[cmd(&[b"GET", b"a"]), cmd(&[b"GET", b"b"])].concat(),
        1,
        1,
    );
    a.on_data(S, b"$3\r\nfo", 2, 2);
    a.on_gap(S, 1400);
    // Rest of an unknown reply: not paired with anything.
    a.on_data(S, b"\r\n+OK\r\n:12\r\n", 3, 3);
    a.on_data(C, &cmd(&[b"GET", b"c"]), 4, 4);
    a.on_data(S, b"$1\r\nz\r\n", 5, 5);
    let ex = a.finish();
    assert!(a.error().unwrap_or_default().contains("missing"));
    assert_eq!(ex.len(), 3);
    assert_eq!(ex[0].response_packets, None);
    assert_eq!(ex[1].response_packets, None);
    assert_eq!(ex[2].request, format!("GET {}", key("c")));
    assert_eq!(ex[2].response_packets, Some((5, 5)));
    assert_eq!(ex[2].response_bytes, 7);
}

#[test]
fn gap_in_commands_resyncs_and_drops_replies_to_lost_ones() {
    let mut a = RespAnalyzer::new(1, Start::Beginning);
    a.on_data(C, &cmd(&[b"GET", b"a"]), 1, 1);
    a.on_data(C, b"*3\r\n$3\r\nSET\r\n$1\r\nb", 2, 2);
    a.on_gap(C, 500);
    a.on_data(C, b"lue\r\n*2\r\n$3\r\nGET\r\n$1\r\nb\r\n", 3, 3);
    a.on_data(S, b"$1\r\n1\r\n", 4, 4);
    a.on_data(S, b"$1\r\n2\r\n", 5, 5);
    let ex = a.finish();
    assert!(a.error().is_some());
    assert_eq!(
        labels(&ex),
        [format!("GET {}", key("a")), format!("GET {}", key("b"))]
    );
    assert_eq!(ex[0].response_packets, Some((4, 4)));
    assert_eq!(ex[1].response_packets, Some((5, 5)));

    // A reply that began before the only pending command was sent is not its reply.
    let mut a = RespAnalyzer::new(1, Start::Beginning);
    a.on_data(C, b"*3\r\n$3\r\nSET\r\n$1\r\nb", 1, 1);
    a.on_gap(C, 500);
    a.on_data(S, b"+O", 2, 2);
    a.on_data(C, b"\n*2\r\n$3\r\nGET\r\n$1\r\nb\r\n", 3, 3);
    a.on_data(S, b"K\r\n$1\r\n2\r\n", 4, 4);
    let ex = a.finish();
    assert_eq!(ex.len(), 1);
    assert_eq!(ex[0].response_bytes, 7);
}

#[test]
fn mid_stream_start_skips_to_a_command_and_pairs_after_it() {
    let mut a = RespAnalyzer::new(1, Start::MidStream);
    // Tail of a value; a reply to a command never seen.
    a.on_data(C, b"lue\r\n$3\r\nxyz\r\n", 1, 1);
    a.on_data(S, b"+OK\r\n", 2, 2);
    a.on_data(C, &cmd(&[b"GET", b"k"]), 3, 3);
    a.on_data(S, b"$1\r\nv\r\n", 4, 4);
    a.on_data(C, b"*1\r\n$4\r\nPING\r\n", 5, 5);
    a.on_data(S, b"+PONG\r\n", 6, 6);
    let ex = a.finish();
    assert_eq!(labels(&ex), [format!("GET {}", key("k")), "PING".into()]);
    assert_eq!(ex[0].response_packets, Some((4, 4)));
    assert_eq!(ex[1].response_packets, Some((6, 6)));
}

#[test]
fn sniff_beginning_and_mid_stream() {
    let b = |d: &[u8]| RespAnalyzer::sniff(d, Start::Beginning);
    assert_eq!(b(&cmd(&[b"PING"])), Sniff::Yes);
    assert_eq!(b(b"*3\r\n$"), Sniff::Yes);
    assert_eq!(b(b""), Sniff::NeedMore);
    assert_eq!(b(b"*"), Sniff::NeedMore);
    assert_eq!(b(b"*12"), Sniff::NeedMore);
    assert_eq!(b(b"*0\r\n"), Sniff::No);
    assert_eq!(b(b"*x"), Sniff::No);
    assert_eq!(b(b"*3\r\n+"), Sniff::No);
    assert_eq!(b(b"PING\r\n"), Sniff::Yes);
    assert_eq!(b(b"ping\r\n"), Sniff::Yes);
    assert_eq!(b(b"auth pw\r\n"), Sniff::Yes);
    assert_eq!(b(b"hello 3\r\n"), Sniff::Yes);
    assert_eq!(b(b"PIN"), Sniff::NeedMore);
    assert_eq!(b(b"PING\r"), Sniff::NeedMore);
    assert_eq!(b(b"PINGS\r\n"), Sniff::No);
    // Redis skips blank lines before a command, and knows more than these.
    assert_eq!(b(b"\r\n\r\nPING\r\n"), Sniff::Yes);
    assert_eq!(b(b"\n*1\r\n$4\r\nPING\r\n"), Sniff::Yes);
    assert_eq!(b(b"\r\n"), Sniff::NeedMore);
    assert_eq!(b(b"PUBLISH news hello\r\n"), Sniff::Yes);
    for memcached in [
        &b"get foo\r\n"[..],
        b"set k 0 0 1\r\nx\r\n",
        b"delete k\r\n",
        b"incr k 1\r\n",
        b"stats\r\n",
        b"version\r\n",
        b"quit\r\n",
        b"mg k v\r\n",
    ] {
        assert_eq!(b(memcached), Sniff::No, "{memcached:?}");
    }
    assert_eq!(b(b"GET / HTTP/1.1\r\n"), Sniff::No);
    assert_eq!(b(b"\x16\x03\x01\x02\x00"), Sniff::No);

    let m = |d: &[u8]| RespAnalyzer::sniff(d, Start::MidStream);
    let mut mid = b"tail of some value\r\n".to_vec();
    mid.extend(cmd(&[b"GET", b"k"]));
    assert_eq!(m(&mid), Sniff::Yes);
    assert_eq!(m(&cmd(&[b"GET", b"k"])), Sniff::Yes);
    assert_eq!(m(b"abc\r\n*2\r\n$3"), Sniff::NeedMore);
    assert_eq!(m(b"abc"), Sniff::NeedMore);
    assert_eq!(
        m(&b"GET / HTTP/1.1\r\nHost: x\r\n\r\n".repeat(200)),
        Sniff::No
    );
    assert_eq!(m(&b"*2\r\n+a\r\n".repeat(600)), Sniff::No);
}

#[test]
fn fuzz_on_pseudo_random_inputs() {
    const PIECES: [&[u8]; 16] = [
        b"*",
        b"$",
        b"\r\n",
        b"3",
        b"-1",
        b"%",
        b">",
        b"|",
        b"+OK",
        b"-ERR x",
        b":",
        b"SUBSCRIBE",
        b"message",
        b"CLIENT",
        b"REPLY",
        b"OFF",
    ];
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for _ in 0..4000 {
        let len = (next() % 600) as usize;
        let mut data = Vec::with_capacity(len);
        while data.len() < len {
            let r = next();
            match r % 4 {
                0 => data.push(r as u8 >> 1),
                1 => data.push((r >> 8) as u8),
                _ => data.extend_from_slice(PIECES[(r >> 16) as usize % PIECES.len()]),
            }
        }
        fuzz(&data);
    }
}

#[test]
fn mid_stream_subscriber_messages_are_not_ping_replies() {
    let msg = b"*3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$2\r\nhi\r\n";
    let mut a = RespAnalyzer::new(1, Start::MidStream);
    a.on_data(S, msg, 1, 1);
    a.on_data(C, &cmd(&[b"PING"]), 2, 2);
    a.on_data(S, msg, 3, 3);
    a.on_data(S, b"*2\r\n$4\r\npong\r\n$0\r\n\r\n", 4, 4);
    let ex = a.finish();
    assert_eq!(ex.len(), 1);
    assert_eq!(ex[0].response_packets, Some((4, 4)));
}

#[test]
fn gap_past_the_end_of_a_large_value_completes_its_command() {
    // A capture that dropped a 16 MiB SET's tail and the GET behind it.
    let mut a = RespAnalyzer::new(1, Start::Beginning);
    a.on_data(C, b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$16777216\r\nxxxx", 1, 1);
    a.on_gap(C, 16_777_216 - 4 + 2 + 23);
    a.on_data(S, b"+OK\r\n", 2, 2);
    a.on_data(S, b"$1\r\n1\r\n", 3, 3);
    a.on_data(C, &cmd(&[b"GET", b"k"]), 4, 4);
    a.on_data(S, b"$1\r\n2\r\n", 5, 5);
    let ex = a.finish();
    assert_eq!(
        labels(&ex),
        [format!("SET {}", key("k")), format!("GET {}", key("k"))]
    );
    assert_eq!(ex[0].response_packets, Some((2, 2)));
    assert_eq!(ex[0].request_bytes, 31 + 16_777_216 + 2);
    assert_eq!(ex[0].params_digest, None, "bytes were lost");
    assert_eq!(ex[1].response_packets, Some((5, 5)));

    // The gap ends exactly with the command: nothing is lost after it.
    let mut a = RespAnalyzer::new(1, Start::Beginning);
    a.on_data(C, b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$2000\r\nxx", 1, 1);
    a.on_gap(C, 2000);
    a.on_data(C, &cmd(&[b"GET", b"k"]), 2, 2);
    a.on_data(S, b"+OK\r\n$1\r\n2\r\n", 3, 3);
    assert_eq!(a.finish().len(), 2);
    assert!(a.error().is_none(), "{:?}", a.error());
}

#[test]
fn blank_lines_before_inline_commands_are_skipped_as_redis_skips_them() {
    let (ex, err) = run(
        Start::Beginning,
        &[
            (C, b"\r\n\r\nPUBLISH news hello\r\n\nPING\r\n".to_vec()),
            (S, b":1\r\n+PONG\r\n".to_vec()),
        ],
    );
    assert_eq!(err, None);
    assert_eq!(labels(&ex).len(), 2, "{:?}", labels(&ex));
    assert!(labels(&ex)[0].starts_with("PUBLISH"), "{:?}", labels(&ex));
    assert_eq!(labels(&ex)[1], "PING");
}
