use super::*;
use crate::digest::ParamDigest;
use crate::normalize;

const C: Direction = Direction::ToServer;
const S: Direction = Direction::ToClient;

/// Feeds `steps` (one packet each, 10 µs apart) and finishes.
fn run_on(a: &mut MemcachedAnalyzer, steps: &[(Direction, &[u8])]) -> Vec<Exchange> {
    let mut out = Vec::new();
    for (i, (d, bytes)) in steps.iter().enumerate() {
        let pkt = i as u64 + 1;
        a.on_data(*d, bytes, pkt * 10, pkt);
        out.extend(a.take_exchanges());
    }
    out.extend(a.finish());
    assert_clean(&out);
    out
}

fn run(steps: &[(Direction, &[u8])]) -> (Vec<Exchange>, Option<String>) {
    let mut a = MemcachedAnalyzer::new(7, Start::Beginning);
    let out = run_on(&mut a, steps);
    (out, a.error().map(str::to_string))
}

/// Values and key ids never reach an exchange.
fn assert_clean(ex: &[Exchange]) {
    let text = format!("{ex:?}");
    for secret in ["secret-4111", "9931", "bad data chunk", "out of memory"] {
        assert!(!text.contains(secret), "{secret} leaked: {text}");
    }
}

fn word(e: &Exchange) -> Option<&str> {
    match &e.status {
        Some(Status::Memcached(w)) => Some(w),
        _ => None,
    }
}

fn labels(ex: &[Exchange]) -> Vec<&str> {
    ex.iter().map(|e| e.request.as_str()).collect()
}

fn key_label(cmd: &str, key: &[u8]) -> String {
    format!("{cmd} {}", normalize::key(key, &mut ParamDigest::new()))
}

const SET: &[u8] = b"set user:9931:cart 0 0 11\r\nsecret-4111\r\n";
const GET: &[u8] = b"get user:9931:cart\r\n";
const HIT: &[u8] = b"VALUE user:9931:cart 0 11\r\nsecret-4111\r\nEND\r\n";
const MULTI: &[u8] = b"get a b c\r\n";
const MULTI_REPLY: &[u8] = b"VALUE a 0 1\r\nx\r\nVALUE c 0 1\r\ny\r\nEND\r\n";

#[test]
fn pymemcache_set_get_and_multiget_with_a_miss() {
    let (ex, err) = run(&[
        (C, SET),
        (S, b"STORED\r\n"),
        (C, GET),
        (S, HIT),
        (C, MULTI),
        (S, MULTI_REPLY),
        (C, b"get nothing\r\n"),
        (S, b"END\r\n"),
    ]);
    assert_eq!(err, None);
    assert_eq!(ex.len(), 4);
    assert_eq!(ex[0].request, key_label("set", b"user:9931:cart"));
    assert_eq!(ex[1].request, key_label("get", b"user:9931:cart"));
    assert_eq!(
        ex[2].request,
        format!("{} (+2 keys)", key_label("get", b"a"))
    );
    assert_eq!(
        ex.iter().map(word).collect::<Vec<_>>(),
        [Some("STORED"), Some("HIT"), Some("PARTIAL"), Some("MISS")]
    );
    assert_eq!(
        ex.iter().map(|e| e.rows).collect::<Vec<_>>(),
        [None, Some(1), Some(2), Some(0)]
    );
    assert_eq!(ex[0].request_bytes, SET.len() as u64);
    assert_eq!(ex[1].response_bytes, HIT.len() as u64);
    assert_eq!(
        (ex[1].request_first_at_us, ex[1].response_last_at_us),
        (30, Some(40))
    );
    assert_eq!(ex[1].response_packets, Some((4, 4)));
    assert!(ex[0].params_digest.is_some());
    assert_eq!(
        ex[0].params_digest, ex[1].params_digest,
        "same key, same digest"
    );
    assert!(ex
        .iter()
        .all(|e| e.protocol == Protocol::Memcached && e.connection == 7));
}

/// Fields compared across different chunkings (times and packets differ).
type Shape = (String, Option<Status>, u64, u64, Option<u64>);

fn shape(ex: &[Exchange]) -> Vec<Shape> {
    ex.iter()
        .map(|e| {
            (
                e.request.to_string(),
                e.status.clone(),
                e.request_bytes,
                e.response_bytes,
                e.rows,
            )
        })
        .collect()
}

#[test]
fn every_split_point_gives_the_same_exchanges() {
    let client = [SET, GET, MULTI, b"mg foo v q O1\r\nmn\r\n"].concat();
    let server = [
        b"STORED\r\n".as_slice(),
        HIT,
        MULTI_REPLY,
        b"VA 2 O1\r\nhi\r\nMN\r\n",
    ]
    .concat();
    let (whole, _) = run(&[(C, &client), (S, &server)]);
    assert_eq!(whole.len(), 5);
    for k in 0..=client.len() {
        let (ex, err) = run(&[(C, &client[..k]), (C, &client[k..]), (S, &server)]);
        assert_eq!(
            (shape(&ex), err),
            (shape(&whole), None),
            "client split at {k}"
        );
    }
    for k in 0..=server.len() {
        let (ex, err) = run(&[(C, &client), (S, &server[..k]), (S, &server[k..])]);
        assert_eq!(
            (shape(&ex), err),
            (shape(&whole), None),
            "server split at {k}"
        );
    }
}

#[test]
fn gets_and_cas() {
    let (ex, err) = run(&[
        (C, b"gets k\r\n"),
        (S, b"VALUE k 0 2 12345\r\nhi\r\nEND\r\n"),
        (C, b"cas k 0 0 2 12345\r\nho\r\n"),
        (S, b"EXISTS\r\n"),
        (C, b"gat 300 k\r\n"),
        (S, b"END\r\n"),
    ]);
    assert_eq!(err, None);
    assert_eq!(
        ex.iter().map(word).collect::<Vec<_>>(),
        [Some("HIT"), Some("EXISTS"), Some("MISS")]
    );
    assert_eq!(ex[1].request, key_label("cas", b"k"));
    assert_eq!(ex[2].request, key_label("gat", b"k"));
}

#[test]
fn noreply_commands_are_emitted_at_once_without_response() {
    let mut a = MemcachedAnalyzer::new(1, Start::Beginning);
    a.on_data(
        C,
        b"set k 0 0 2 noreply\r\nhi\r\ndelete k noreply\r\nincr n 5 noreply\r\n",
        10,
        1,
    );
    a.on_data(C, b"touch k 10 noreply\r\nget k\r\n", 20, 2);
    let early = a.take_exchanges();
    assert_ne!(early[2].params_digest, {
        let mut b = MemcachedAnalyzer::new(1, Start::Beginning);
        b.on_data(C, b"incr n 6 noreply\r\n", 1, 1);
        b.take_exchanges()[0].params_digest
    });
    assert_eq!(
        labels(&early),
        [
            key_label("set", b"k"),
            key_label("delete", b"k"),
            key_label("incr", b"n"),
            key_label("touch", b"k")
        ]
    );
    assert!(early
        .iter()
        .all(|e| e.response_first_at_us.is_none() && e.status.is_none()));
    a.on_data(S, b"END\r\n", 30, 3);
    let ex = a.finish();
    assert_eq!(ex.len(), 1);
    assert_eq!(word(&ex[0]), Some("MISS"));
    assert_eq!(a.error(), None);
}

#[test]
fn quiet_meta_commands_pair_by_opaque_and_the_mn_flush() {
    let (ex, err) = run(&[
        (
            C,
            b"ms foo 2 T90 q\r\nhi\r\nmg foo v q O1\r\nmg bar v q O2\r\nmd baz q\r\nmn\r\n",
        ),
        (S, b"VA 2 O1\r\nhi\r\nNF\r\nMN\r\n"),
    ]);
    assert_eq!(err, None);
    assert_eq!(
        labels(&ex),
        [
            key_label("ms", b"foo"),
            key_label("mg", b"foo"),
            key_label("mg", b"bar"),
            key_label("md", b"baz"),
            "mn".into()
        ]
    );
    assert_eq!(
        ex.iter().map(word).collect::<Vec<_>>(),
        [Some("HD"), Some("VA"), Some("EN"), Some("NF"), Some("MN")]
    );
    // Omitted replies: proven done by later ones, but no bytes of their own.
    assert!(ex[0].response_packets.is_none() && ex[2].response_packets.is_none());
    assert_eq!(ex[1].response_bytes, b"VA 2 O1\r\nhi\r\n".len() as u64);
    assert_eq!((ex[1].rows, ex[2].rows), (Some(1), Some(0)));
}

#[test]
fn quiet_meta_gets_pair_by_echoed_key() {
    let (ex, _) = run(&[
        (C, b"mg foo v k q\r\nmg bar v k q\r\nmn\r\n"),
        (S, b"VA 2 kbar\r\nhi\r\nMN\r\n"),
    ]);
    assert_eq!(
        ex.iter().map(word).collect::<Vec<_>>(),
        [Some("EN"), Some("VA"), Some("MN")]
    );
    // Not quiet: plain FIFO.
    let (ex, err) = run(&[
        (C, b"mg a v\r\nmd b\r\nma c v\r\nme d\r\n"),
        (
            S,
            b"EN\r\nHD\r\nVA 1\r\n7\r\nME d exp=-1 la=3 cas=2 fetch=no cls=1 size=63\r\n",
        ),
    ]);
    assert_eq!(err, None);
    assert_eq!(
        ex.iter().map(word).collect::<Vec<_>>(),
        [Some("EN"), Some("HD"), Some("VA"), Some("ME")]
    );
}

#[test]
fn quiet_commands_never_proven_done_stay_unanswered() {
    let (ex, _) = run(&[(C, b"mg a v q\r\n")]);
    assert_eq!(ex.len(), 1);
    assert_eq!(ex[0].status, None);
}

#[test]
fn pipelined_gets_pair_in_order() {
    let mut client = Vec::new();
    let mut server = Vec::new();
    for i in 0..200 {
        client.extend(format!("get key:{i}\r\n").bytes());
        if i % 2 == 0 {
            server.extend(format!("VALUE key:{i} 0 3\r\nv{:02}\r\nEND\r\n", i % 100).bytes());
        } else {
            server.extend(b"END\r\n");
        }
    }
    let (ex, err) = run(&[(C, &client), (S, &server)]);
    assert_eq!(err, None);
    assert_eq!(ex.len(), 200);
    for (i, e) in ex.iter().enumerate() {
        assert_eq!(
            word(e),
            Some(if i % 2 == 0 { "HIT" } else { "MISS" }),
            "{i}"
        );
    }
}

#[test]
fn sixteen_megabyte_value_is_counted_not_buffered() {
    const SIZE: usize = 16 << 20;
    let mut a = MemcachedAnalyzer::new(1, Start::Beginning);
    let chunk = vec![b'x'; 1024];
    let mut pkt = 0;
    let mut send = |a: &mut MemcachedAnalyzer, d: Direction, bytes: &[u8]| {
        pkt += 1;
        a.on_data(d, bytes, pkt, pkt);
    };
    send(&mut a, C, format!("set big 0 0 {SIZE}\r\n").as_bytes());
    for _ in 0..SIZE / 1024 {
        send(&mut a, C, &chunk);
    }
    send(&mut a, C, b"\r\nget big\r\n");
    send(&mut a, S, b"STORED\r\n");
    send(&mut a, S, format!("VALUE big 0 {SIZE}\r\n").as_bytes());
    for _ in 0..SIZE / 1024 {
        send(&mut a, S, &chunk);
    }
    assert!(a.client.buffered() < 4096 && a.server.buffered() < 4096);
    send(&mut a, S, b"\r\nEND\r\n");
    let ex = a.finish();
    assert_eq!(a.error(), None);
    assert_eq!(ex.len(), 2);
    assert!(ex[0].request_bytes > SIZE as u64);
    assert!(ex[1].response_bytes > SIZE as u64);
    assert_eq!(word(&ex[1]), Some("HIT"));
}

#[test]
fn gap_inside_a_value_is_absorbed() {
    let mut a = MemcachedAnalyzer::new(1, Start::Beginning);
    a.on_data(C, b"get k\r\n", 1, 1);
    a.on_data(S, b"VALUE k 0 1000\r\nabc", 2, 2);
    a.on_gap(S, 990);
    a.on_data(S, b"defghij\r\nEND\r\n", 3, 3);
    let ex = a.finish();
    assert_eq!(a.error(), None);
    assert_eq!(word(&ex[0]), Some("HIT"));
    assert_eq!(ex[0].response_bytes, 16 + 1000 + 2 + 5);
}

#[test]
fn value_claiming_two_to_the_forty_bytes() {
    let (ex, err) = run(&[
        (C, b"get k\r\n"),
        (S, b"VALUE k 0 1099511627776\r\nxxxxxxxxxxxxxxxx"),
        (C, b"get j\r\n"),
        (S, b"xxxx\r\nEND\r\n"),
    ]);
    assert!(err.unwrap().contains("1099511627776"));
    assert_eq!(ex.len(), 2);
    assert_eq!((ex[0].status.clone(), word(&ex[1])), (None, Some("MISS")));
}

#[test]
fn hostile_lengths_and_malformed_lines() {
    // 2^31 bytes is over memcached's 1 GiB item limit: not trusted.
    let (ex, err) = run(&[
        (C, b"set k 0 0 2147483648\r\nzz\r\n"),
        (S, b"SERVER_ERROR object too large for cache\r\n"),
        (C, b"get k\r\n"),
        (S, b"END\r\n"),
    ]);
    assert!(err.unwrap().contains("longer than"));
    assert_eq!(labels(&ex), [key_label("get", b"k")]);
    assert_eq!(word(&ex[0]), Some("MISS"));
    // -1 is no length: memcached answers the line alone.
    let (ex, err) = run(&[
        (C, b"set k 0 0 -1\r\n"),
        (S, b"CLIENT_ERROR bad command line format\r\n"),
        (C, b"get k\r\n"),
        (S, b"SERVER_ERROR out of memory\r\n"),
    ]);
    assert!(err.unwrap().contains("malformed"));
    assert_eq!(labels(&ex), ["set", &key_label("get", b"k")]);
    assert_eq!(
        ex.iter().map(word).collect::<Vec<_>>(),
        [Some("CLIENT_ERROR"), Some("SERVER_ERROR")]
    );
    // A reply with no request, a bad VA length, binary garbage: no panic.
    let (ex, err) = run(&[
        (S, b"STORED\r\n"),
        (C, b"\x00\x01\xff\r\nget a\r\n"),
        (S, b"VA -5\r\nEND\r\n"),
    ]);
    assert!(err.is_some());
    assert!(ex.len() <= 1);
}

#[test]
fn line_without_newline_past_the_bound() {
    let mut a = MemcachedAnalyzer::new(1, Start::Beginning);
    a.on_data(C, b"get ", 1, 1);
    let chunk = vec![b'a'; 1000];
    for i in 0..100 {
        a.on_data(C, &chunk, 2 + i, 2 + i);
    }
    assert!(a.client.buffered() <= 2 * MAX_LINE);
    assert!(a.error().unwrap().contains("longer than"));
    a.on_data(C, b"\r\nget b\r\n", 200, 200);
    a.on_data(S, b"END\r\n", 201, 201);
    let ex = a.finish();
    assert_eq!(labels(&ex), [key_label("get", b"b")]);
    assert_eq!(word(&ex[0]), Some("MISS"));
}

#[test]
fn garbage_after_a_server_gap_then_resync() {
    let mut a = MemcachedAnalyzer::new(1, Start::Beginning);
    a.on_data(C, b"get a\r\nget b\r\n", 1, 1);
    a.on_gap(S, 100);
    let flushed = a.take_exchanges();
    assert_eq!(flushed.len(), 2);
    assert!(flushed.iter().all(|e| e.status.is_none()));
    // Stale replies with nothing pending after the gap are skipped.
    a.on_data(S, b"\x17\x03garbage\r\nx\r\nEND\r\n", 2, 2);
    a.on_data(C, b"get c\r\n", 3, 3);
    // A stale reply that cannot answer a get is skipped too.
    a.on_data(S, b"STORED\r\nVALUE c 0 1\r\nz\r\nEND\r\n", 4, 4);
    let ex = a.finish();
    assert_eq!(labels(&ex), [key_label("get", b"c")]);
    assert_eq!(word(&ex[0]), Some("HIT"));
    assert!(a.error().unwrap().contains("missing"));
}

#[test]
fn client_gap_resyncs_on_the_next_valid_command() {
    let mut a = MemcachedAnalyzer::new(1, Start::Beginning);
    a.on_data(C, b"get a\r\n", 1, 1);
    a.on_data(S, b"END\r\n", 2, 2);
    a.on_data(C, b"set x 0 0 5\r\nab", 3, 3);
    a.on_gap(C, 50);
    a.on_data(C, b"lue tail\r\n0 0 5\r\nget b\r\n", 4, 4);
    a.on_data(S, b"END\r\n", 5, 5);
    let ex = run_on(&mut a, &[]);
    let mut all = ex;
    all.sort_by_key(|e| e.request_first_at_us);
    assert_eq!(
        labels(&all),
        [
            key_label("get", b"a"),
            key_label("set", b"x"),
            key_label("get", b"b")
        ]
    );
    assert_eq!(
        all.iter().map(word).collect::<Vec<_>>(),
        [Some("MISS"), None, Some("MISS")]
    );
}

#[test]
fn mid_stream_start_skips_to_a_trusted_line() {
    let mut a = MemcachedAnalyzer::new(1, Start::MidStream);
    let ex = run_on(
        &mut a,
        &[
            (S, b"ue\r\nEND\r\n"),
            (C, b"lue-tail 0 0\r\nget k\r\n"),
            (S, b"VALUE k 0 1\r\nx\r\nEND\r\n"),
        ],
    );
    assert_eq!(labels(&ex), [key_label("get", b"k")]);
    assert_eq!(word(&ex[0]), Some("HIT"));
}

#[test]
fn stats_version_flush_quit_and_numbers() {
    let (ex, err) = run(&[
        (C, b"stats\r\nstats slabs\r\nversion\r\nflush_all\r\nverbosity 1\r\nincr counter:7 5\r\ndecr x 1\r\n"),
        (S, b"STAT pid 1\r\nSTAT uptime 2\r\nEND\r\nSTAT 1:chunk_size 96\r\nEND\r\nVERSION 1.6.21\r\nOK\r\nOK\r\n12\r\nNOT_FOUND\r\n"),
        (C, b"lru_crawler metadump all\r\nquit\r\n"),
        (S, b"ERROR\r\n"),
    ]);
    assert_eq!(labels(&ex)[..3], ["stats", "stats slabs", "version"]);
    assert_eq!(
        ex.iter().map(word).collect::<Vec<_>>(),
        [
            Some("OK"),
            Some("OK"),
            Some("VERSION"),
            Some("OK"),
            Some("OK"),
            Some("OK"),
            Some("NOT_FOUND"),
            None,
            Some("ERROR")
        ]
    );
    // quit gets no reply: emitted as soon as read, before lru_crawler's ERROR.
    assert_eq!(labels(&ex)[7..], ["quit", "lru_crawler"]);
    assert!(err.unwrap().contains("lru_crawler"));
}

#[test]
fn bad_data_chunk_gets_its_client_error() {
    let (ex, err) = run(&[
        (C, b"set k 0 0 2\r\nabc\r\n"),
        (S, b"CLIENT_ERROR bad data chunk\r\n"),
        (C, b"get k\r\n"),
        (S, b"END\r\n"),
    ]);
    assert!(err.unwrap().contains("CR LF"));
    assert_eq!(
        ex.iter().map(word).collect::<Vec<_>>(),
        [Some("CLIENT_ERROR"), Some("MISS")]
    );
}

#[test]
fn truncated_request_is_flushed_at_finish() {
    let (ex, _) = run(&[(C, b"set k 0 0 100\r\nsecret-4111")]);
    assert_eq!(ex.len(), 1);
    assert_eq!(
        ex[0].request_bytes,
        b"set k 0 0 100\r\nsecret-4111".len() as u64
    );
    assert!(ex[0].status.is_none() && ex[0].response_packets.is_none());
}

#[test]
fn pending_queue_is_bounded() {
    let client: Vec<u8> = (0..MAX_PENDING + 10)
        .flat_map(|i| format!("get k{i}\r\n").into_bytes())
        .collect();
    let mut a = MemcachedAnalyzer::new(1, Start::Beginning);
    a.on_data(C, &client, 1, 1);
    assert!(a.pending.len() <= MAX_PENDING);
    assert!(a.error().unwrap().contains("unanswered"));
    assert_eq!(a.finish().len(), MAX_PENDING + 10);
}

#[test]
fn sniff_beginning() {
    let b = |d: &[u8]| MemcachedAnalyzer::sniff(d, Start::Beginning);
    assert_eq!(b(b"get user:1\r\n"), Sniff::Yes);
    assert_eq!(b(b"set k 0 0 5\r\nhello\r\n"), Sniff::Yes);
    assert_eq!(b(b"mg foo v\r\n"), Sniff::Yes);
    assert_eq!(b(b"version\r\n"), Sniff::Yes);
    assert_eq!(b(b"get user:1"), Sniff::NeedMore);
    assert_eq!(b(b"ge"), Sniff::NeedMore);
    assert_eq!(b(b"version\r"), Sniff::NeedMore);
    assert_eq!(b(b"GET / HTTP/1.1\r\n"), Sniff::No);
    assert_eq!(b(b"PING\r\n"), Sniff::No);
    assert_eq!(b(b"set foo bar\r\n"), Sniff::No, "redis inline set");
    assert_eq!(b(b"*2\r\n$3\r\nget\r\n$1\r\nk\r\n"), Sniff::No);
    assert_eq!(b(b"\x80\x00\x00\x05"), Sniff::No);
    assert_eq!(b(b"\x16\x03\x01\x02\x00"), Sniff::No);
    assert_eq!(b(b"getx k\r\n"), Sniff::No);
}

#[test]
fn sniff_mid_stream() {
    let m = |d: &[u8]| MemcachedAnalyzer::sniff(d, Start::MidStream);
    assert_eq!(m(b"ta-tail\r\nget user:1\r\n"), Sniff::Yes);
    assert_eq!(m(b"delete k noreply\r\n"), Sniff::Yes);
    assert_eq!(m(b"junk\r\nmg foo v"), Sniff::NeedMore);
    assert_eq!(m(b"junk\r\nmn\r\nmore junk\r\n"), Sniff::No);
    assert_eq!(m(b"*2\r\n$3\r\nget\r\n$3\r\nfoo\r\n"), Sniff::No);
    assert_eq!(m(b"xx get foo\r\n"), Sniff::No);
    assert_eq!(
        m(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabc"),
        Sniff::No
    );
}

#[test]
fn fuzz_on_pseudo_random_inputs() {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let pieces: [&[u8]; 12] = [
        b"get k\r\n",
        b"VALUE k 0 3\r\n",
        b"END\r\n",
        b"mg a v q O1\r\n",
        b"VA 2 O1\r\n",
        b"mn\r\n",
        b"MN\r\n",
        b"set k 0 0 4 noreply\r\n",
        b"STORED\r\n",
        b"\r\n",
        b"4294967296",
        b"VALUE k 0 1099511627776\r\n",
    ];
    for _ in 0..3000 {
        let mut data = Vec::new();
        let len = next() % 400;
        while (data.len() as u64) < len {
            let r = next();
            match r % 4 {
                0 => data.push(r as u8),
                1 => data.push((r as u8) & 0xbf),
                _ => {
                    let p = pieces[(r >> 8) as usize % pieces.len()];
                    data.push((p.len() as u8 & 0x3f) | (r as u8 & 0x80));
                    data.extend_from_slice(p);
                }
            }
        }
        fuzz(&data);
    }
}
