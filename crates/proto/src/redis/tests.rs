use super::*;
use crate::digest::ParamDigest;
use crate::normalize;
use Direction::{ToClient as S, ToServer as C};

/// Gaps, resynchronization, mid-stream starts, sniffing, hostile input, fuzzing.
mod hostile;

/// A command as clients send it: an array of bulk strings.
fn cmd(args: &[&[u8]]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
    out
}

fn key(k: &str) -> String {
    normalize::key(k.as_bytes(), &mut ParamDigest::new())
}

/// Feeds each step as one packet (time 1000 + 10·i, packet i + 1).
fn run(start: Start, steps: &[(Direction, Vec<u8>)]) -> (Vec<Exchange>, Option<String>) {
    let mut a = RespAnalyzer::new(7, start);
    let mut out = Vec::new();
    for (i, (d, bytes)) in steps.iter().enumerate() {
        a.on_data(*d, bytes, 1000 + i as u64 * 10, i as u64 + 1);
        a.drain_exchanges(&mut out);
    }
    out.extend(a.finish());
    (out, a.error().map(str::to_owned))
}

fn labels(ex: &[Exchange]) -> Vec<&str> {
    ex.iter().map(|e| e.request.as_str()).collect()
}

fn redis_py_session() -> Vec<(Direction, Vec<u8>)> {
    vec![
        (C, cmd(&[b"CLIENT", b"SETINFO", b"LIB-NAME", b"redis-py"])),
        (S, b"+OK\r\n".to_vec()),
        (C, cmd(&[b"CLIENT", b"SETINFO", b"LIB-VER", b"5.0.1"])),
        (S, b"+OK\r\n".to_vec()),
        (C, cmd(&[b"SET", b"user:1000:name", b"alice"])),
        (S, b"+OK\r\n".to_vec()),
        (C, cmd(&[b"GET", b"user:1000:name"])),
        (S, b"$5\r\nalice\r\n".to_vec()),
        (C, cmd(&[b"HGETALL", b"session:8f14e45f"])),
        (
            S,
            b"*4\r\n$4\r\nuser\r\n$4\r\n1000\r\n$2\r\nts\r\n$10\r\n1700000000\r\n".to_vec(),
        ),
        (C, cmd(&[b"INCR", b"user:1000:name"])),
        (
            S,
            b"-ERR value is not an integer or out of range\r\n".to_vec(),
        ),
        (C, b"PING\r\n".to_vec()),
        (S, b"+PONG\r\n".to_vec()),
    ]
}

#[test]
fn redis_py_session_pairs_labels_status_rows_and_spans() {
    let (ex, err) = run(Start::Beginning, &redis_py_session());
    assert_eq!(err, None);
    let get = format!("GET {}", key("user:1000:name"));
    assert_eq!(
        labels(&ex),
        [
            "CLIENT SETINFO".to_string(),
            "CLIENT SETINFO".into(),
            format!("SET {}", key("user:1000:name")),
            get,
            format!("HGETALL {}", key("session:8f14e45f")),
            format!("INCR {}", key("user:1000:name")),
            "PING".into(),
        ]
    );
    let get = &ex[3];
    assert_eq!(
        (get.request_first_at_us, get.request_last_at_us),
        (1060, 1060)
    );
    assert_eq!(get.request_packets, (7, 7));
    assert_eq!(get.response_first_at_us, Some(1070));
    assert_eq!(get.response_packets, Some((8, 8)));
    assert_eq!(
        get.request_bytes,
        cmd(&[b"GET", b"user:1000:name"]).len() as u64
    );
    assert_eq!(get.response_bytes, 11);
    assert_eq!(get.status, None);
    assert_eq!(ex[4].rows, Some(4));
    assert_eq!(ex[5].status, Some(Status::RedisError("ERR".into())));
    assert!(ex
        .iter()
        .all(|e| e.protocol == Protocol::Redis && e.connection == 7));
    assert!(ex.iter().all(|e| e.response_packets.is_some()));
    // Same arguments, same digest; other arguments, other digest.
    assert!(ex[0].params_digest.is_some());
    assert_ne!(ex[0].params_digest, ex[1].params_digest);
    assert_ne!(ex[2].params_digest, ex[3].params_digest);
}

#[test]
fn every_split_point_gives_the_same_exchanges() {
    let steps = redis_py_session();
    let (whole, _) = run(Start::Beginning, &steps);
    let longest = steps.iter().map(|(_, b)| b.len()).max().unwrap_or(0);
    for k in 1..longest {
        let mut a = RespAnalyzer::new(7, Start::Beginning);
        let mut out = Vec::new();
        for (i, (d, bytes)) in steps.iter().enumerate() {
            let (x, y) = bytes.split_at(k.min(bytes.len()));
            for part in [x, y] {
                a.on_data(*d, part, 1000 + i as u64 * 10, i as u64 + 1);
            }
            out.extend(a.take_exchanges());
        }
        out.extend(a.finish());
        assert_eq!(out, whole, "split at {k}");
        assert_eq!(a.error(), None);
    }
    // And one byte at a time.
    let mut a = RespAnalyzer::new(7, Start::Beginning);
    for (i, (d, bytes)) in steps.iter().enumerate() {
        for b in bytes.chunks(1) {
            a.on_data(*d, b, 1000 + i as u64 * 10, i as u64 + 1);
        }
    }
    assert_eq!(a.finish(), whole);
}

#[test]
fn pipeline_of_100_commands_pairs_in_order() {
    let mut reqs = Vec::new();
    let mut reps = Vec::new();
    for i in 0..100 {
        reqs.extend(cmd(&[b"INCRBY", format!("counter:{i}").as_bytes(), b"5"]));
        reps.extend(format!(":{}\r\n", i * 1000).as_bytes());
    }
    let mut a = RespAnalyzer::new(1, Start::Beginning);
    for c in reqs.chunks(1460) {
        a.on_data(C, c, 10, 1);
    }
    assert!(a.take_exchanges().is_empty());
    for (i, c) in reps.chunks(7).enumerate() {
        a.on_data(S, c, 20 + i as u64, 2 + i as u64);
    }
    let ex = a.finish();
    assert_eq!(ex.len(), 100);
    assert_eq!(a.error(), None);
    for (i, e) in ex.iter().enumerate() {
        assert_eq!(
            e.request,
            format!("INCRBY {}", key(&format!("counter:{i}")))
        );
        let len = format!(":{}\r\n", i * 1000).len() as u64;
        assert_eq!(e.response_bytes, len, "exchange {i}");
    }
}

#[test]
fn queue_bound_evicts_oldest_and_keeps_pairing_right() {
    let n = MAX_PENDING + 76;
    let mut a = RespAnalyzer::new(1, Start::Beginning);
    for i in 0..n {
        a.on_data(C, &cmd(&[b"GET", format!("k{i}").as_bytes()]), 10, i as u64);
    }
    for i in 0..n {
        a.on_data(S, b"$1\r\nv\r\n", 20, 100_000 + i as u64);
    }
    let ex = a.finish();
    assert_eq!(ex.len(), n);
    assert!(a.error().unwrap_or_default().contains("unanswered"));
    let mut answered = 0;
    for e in &ex {
        if let Some((first, _)) = e.response_packets {
            assert_eq!(first, 100_000 + e.request_packets.0);
            answered += 1;
        }
    }
    assert_eq!(answered, MAX_PENDING);
}

#[test]
fn multi_exec_queued_replies_and_one_exec_exchange() {
    let steps = vec![
        (C, cmd(&[b"MULTI"])),
        (S, b"+OK\r\n".to_vec()),
        (
            C,
            [
                cmd(&[b"SET", b"a", b"1"]),
                cmd(&[b"INCR", b"a"]),
                cmd(&[b"EXEC"]),
            ]
            .concat(),
        ),
        (S, b"+QUEUED\r\n+QUEUED\r\n*2\r\n+OK\r\n:2\r\n".to_vec()),
    ];
    let (ex, err) = run(Start::Beginning, &steps);
    assert_eq!(err, None);
    assert_eq!(
        labels(&ex),
        [
            "MULTI".to_string(),
            format!("SET {}", key("a")),
            format!("INCR {}", key("a")),
            "EXEC".into()
        ]
    );
    assert_eq!(ex[3].rows, Some(2));
    assert_eq!(ex[3].response_bytes, 13);
    assert!(ex.iter().all(|e| e.response_bytes > 0));
}

#[test]
fn subscribe_confirmations_and_messages() {
    let steps = vec![
        (C, cmd(&[b"SUBSCRIBE", b"news:1", b"news:2"])),
        (S, b"*3\r\n$9\r\nsubscribe\r\n$6\r\nnews:1\r\n:1\r\n*3\r\n$9\r\nsubscribe\r\n$6\r\nnews:2\r\n:2\r\n".to_vec()),
        (S, b"*3\r\n$7\r\nmessage\r\n$6\r\nnews:1\r\n$5\r\nhello\r\n".to_vec()),
        (C, cmd(&[b"PING"])),
        (S, b"*3\r\n$7\r\nmessage\r\n$6\r\nnews:2\r\n$3\r\nbye\r\n*2\r\n$4\r\npong\r\n$0\r\n\r\n".to_vec()),
        (C, cmd(&[b"UNSUBSCRIBE"])),
        (S, b"*3\r\n$11\r\nunsubscribe\r\n$6\r\nnews:1\r\n:1\r\n".to_vec()),
        (S, b"*3\r\n$11\r\nunsubscribe\r\n$6\r\nnews:2\r\n:0\r\n".to_vec()),
        // Out of subscribed mode: a list holding "message" is a plain reply.
        (C, cmd(&[b"LRANGE", b"q", b"0", b"-1"])),
        (S, b"*3\r\n$7\r\nmessage\r\n$1\r\nx\r\n$1\r\ny\r\n".to_vec()),
    ];
    let (ex, err) = run(Start::Beginning, &steps);
    assert_eq!(err, None);
    assert_eq!(
        labels(&ex),
        [
            format!("SUBSCRIBE {} (+1 channels)", key("news:1")),
            "PING".into(),
            "UNSUBSCRIBE".into(),
            format!("LRANGE {}", key("q")),
        ]
    );
    assert_eq!(ex[0].response_packets, Some((2, 2)));
    assert_eq!(ex[0].rows, None);
    assert_eq!(ex[1].response_bytes, 20);
    assert_eq!(ex[2].response_packets, Some((7, 7)));
    assert_eq!(ex[3].rows, Some(3));
}

#[test]
fn hello3_map_reply_pushes_and_attributes() {
    let hello = b"%7\r\n$6\r\nserver\r\n$5\r\nredis\r\n$7\r\nversion\r\n$5\r\n7.2.4\r\n\
$5\r\nproto\r\n:3\r\n$2\r\nid\r\n:5\r\n$4\r\nmode\r\n$10\r\nstandalone\r\n\
$4\r\nrole\r\n$6\r\nmaster\r\n$7\r\nmodules\r\n*0\r\n";
    let steps = vec![
        (C, cmd(&[b"HELLO", b"3"])),
        (S, hello.to_vec()),
        (C, cmd(&[b"CLIENT", b"TRACKING", b"ON"])),
        (S, b"+OK\r\n".to_vec()),
        (C, cmd(&[b"GET", b"k"])),
        // An invalidation push arrives before the reply.
        (S, b">2\r\n$10\r\ninvalidate\r\n*1\r\n$1\r\nk\r\n$1\r\nv\r\n".to_vec()),
        (C, cmd(&[b"ZRANGE", b"z", b"0", b"1"])),
        (S, b"|1\r\n+key-popularity\r\n%2\r\n$1\r\na\r\n,0.1923\r\n$1\r\nb\r\n,0.0012\r\n*2\r\n:2039123\r\n:9543892\r\n".to_vec()),
        (C, cmd(&[b"SMEMBERS", b"s"])),
        (S, b"~2\r\n#t\r\n(3492890328409238509324850943850943825024385\r\n".to_vec()),
        (C, cmd(&[b"SUBSCRIBE", b"ch"])),
        (S, b">3\r\n$9\r\nsubscribe\r\n$2\r\nch\r\n:1\r\n>3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$2\r\nhi\r\n".to_vec()),
        (C, cmd(&[b"GET", b"x"])),
        (S, b"_\r\n".to_vec()),
        (C, cmd(&[b"FCALL", b"f", b"0"])),
        (S, b"!21\r\nSYNTAX invalid syntax\r\n".to_vec()),
    ];
    let (ex, err) = run(Start::Beginning, &steps);
    assert_eq!(err, None);
    assert_eq!(ex.len(), 8, "{:?}", labels(&ex));
    assert_eq!(ex[0].request, "HELLO");
    assert_eq!(ex[0].rows, Some(7));
    assert_eq!(ex[0].params_digest, None);
    assert_eq!(ex[1].request, "CLIENT TRACKING");
    // The push is not GET's reply: its bytes are not counted in.
    assert_eq!(ex[2].response_bytes, 7);
    assert_eq!(ex[3].rows, Some(2));
    assert_eq!(ex[4].rows, Some(2));
    assert_eq!(ex[5].response_packets, Some((12, 12)));
    assert_eq!(ex[6].response_bytes, 3);
    assert_eq!(ex[7].status, Some(Status::RedisError("SYNTAX".into())));
}

#[test]
fn client_reply_off_and_skip() {
    let mut a = RespAnalyzer::new(1, Start::Beginning);
    a.on_data(C, &cmd(&[b"CLIENT", b"REPLY", b"OFF"]), 10, 1);
    a.on_data(C, &cmd(&[b"SET", b"a", b"1"]), 11, 2);
    a.on_data(C, &cmd(&[b"SET", b"b", b"2"]), 12, 3);
    let now = a.take_exchanges();
    assert_eq!(now.len(), 3, "emitted right away");
    assert!(now.iter().all(|e| e.response_packets.is_none()));
    a.on_data(C, &cmd(&[b"CLIENT", b"REPLY", b"ON"]), 13, 4);
    a.on_data(S, b"+OK\r\n", 14, 5);
    a.on_data(C, &cmd(&[b"CLIENT", b"REPLY", b"SKIP"]), 15, 6);
    a.on_data(C, &cmd(&[b"SET", b"c", b"3"]), 16, 7);
    a.on_data(C, &cmd(&[b"GET", b"c"]), 17, 8);
    a.on_data(S, b"$1\r\n3\r\n", 18, 9);
    let ex = [now, a.finish()].concat();
    assert_eq!(a.error(), None);
    let answered: Vec<_> = ex.iter().map(|e| e.response_packets).collect();
    assert_eq!(
        answered,
        [None, None, None, Some((5, 5)), None, None, Some((9, 9))]
    );
    assert_eq!(ex[3].request, "CLIENT REPLY");
}

#[test]
fn set_of_16_mb_in_1_kib_chunks_is_not_buffered() {
    let value_len = 16 * 1024 * 1024;
    let head = b"*3\r\n$3\r\nSET\r\n$9\r\nblob:big1\r\n$16777216\r\n";
    let mut a = RespAnalyzer::new(1, Start::Beginning);
    a.on_data(C, head, 1, 1);
    // The value looks like RESP itself: it must be skipped, not parsed.
    let chunk = b"*1\r\n$4\r\nPING\r\n-ERR x\r\n".repeat(60);
    let chunk = &chunk[..1024];
    let mut sent = 0;
    let mut max_debug = 0;
    while sent < value_len {
        a.on_data(C, chunk, 2, 2 + (sent / 1024) as u64);
        sent += 1024;
        if sent % (1 << 20) == 0 {
            max_debug = max_debug.max(format!("{a:?}").len());
        }
    }
    a.on_data(C, b"\r\n", 3, 20_000);
    a.on_data(S, b"+OK\r\n", 4, 20_001);
    let ex = a.finish();
    assert_eq!(a.error(), None);
    assert_eq!(ex.len(), 1);
    assert_eq!(ex[0].request_bytes, (head.len() + value_len + 2) as u64);
    assert_eq!(ex[0].response_packets, Some((20_001, 20_001)));
    assert!(max_debug < 4096, "analyzer state grew to {max_debug} bytes");
}

#[test]
fn huge_bulk_reply_is_skipped_and_counted() {
    let mut a = RespAnalyzer::new(1, Start::Beginning);
    a.on_data(C, &cmd(&[b"GET", b"blob"]), 1, 1);
    a.on_data(S, b"$8000000\r\n", 2, 2);
    let chunk = vec![b'\n'; 8000];
    for i in 0..1000 {
        a.on_data(S, &chunk, 3, 3 + i);
    }
    a.on_data(S, b"\r\n", 4, 2000);
    let ex = a.finish();
    assert_eq!(ex[0].response_bytes, 8_000_000 + 12);
    assert_eq!(ex[0].response_packets, Some((2, 2000)));
}

#[test]
fn monitor_feed_is_not_paired() {
    let steps = vec![
        (C, cmd(&[b"MONITOR"])),
        (S, b"+OK\r\n".to_vec()),
        (
            S,
            b"+1339518083.107412 [0 127.0.0.1:60866] \"set\" \"k\" \"secret\"\r\n".to_vec(),
        ),
        (C, cmd(&[b"RESET"])),
        (S, b"+RESET\r\n".to_vec()),
    ];
    let (ex, err) = run(Start::Beginning, &steps);
    assert_eq!(err, None);
    assert_eq!(labels(&ex), ["MONITOR", "RESET"]);
    assert_eq!(ex[1].response_packets, Some((5, 5)));
}

#[test]
fn labels_for_multi_key_subcommand_and_non_key_commands() {
    let steps = vec![
        (C, cmd(&[b"mget", b"user:1", b"user:2", b"user:3"])),
        (C, cmd(&[b"MSET", b"a:1", b"x", b"a:2", b"y"])),
        (C, cmd(&[b"BLPOP", b"q:1", b"q:2", b"0"])),
        (C, cmd(&[b"OBJECT", b"encoding", b"user:1"])),
        (
            C,
            cmd(&[
                b"EVALSHA",
                b"e0e1f9fabfc9d4800c877a703b823ac0578ff831",
                b"1",
                b"k",
            ]),
        ),
        (C, cmd(&[b"SELECT", b"2"])),
        (C, cmd(&[b"config", b"set", b"maxmemory", b"1gb"])),
        (C, cmd(&[b"\x00\xffbin", b"x"])),
        (C, b"get foo\r\n".to_vec()),
        (C, cmd(&[b"JSON.GET", b"doc:9"])),
    ];
    let (ex, _) = run(Start::Beginning, &steps);
    assert_eq!(
        labels(&ex),
        [
            format!("MGET {} (+2 keys)", key("user:1")),
            format!("MSET {} (+1 keys)", key("a:1")),
            format!("BLPOP {} (+1 keys)", key("q:1")),
            format!("OBJECT ENCODING {}", key("user:1")),
            "EVALSHA".into(),
            "SELECT".into(),
            "CONFIG SET".into(),
            "<not a command>".into(),
            format!("GET {}", key("foo")),
            format!("JSON.GET {}", key("doc:9")),
        ]
    );
    assert_eq!(ex[6].params_digest, None);
}

#[test]
fn secrets_never_reach_exchanges() {
    let steps = vec![
        (C, cmd(&[b"AUTH", b"hunter2pass"])),
        (S, b"+OK\r\n".to_vec()),
        (C, cmd(&[b"AUTH", b"admin", b"Sup3rS3cret"])),
        (
            S,
            b"-WRONGPASS invalid username-password pair or user is disabled.\r\n".to_vec(),
        ),
        (
            C,
            cmd(&[b"HELLO", b"3", b"AUTH", b"default", b"helloPassw0rd"]),
        ),
        (S, b"%1\r\n$5\r\nproto\r\n:3\r\n".to_vec()),
        (C, cmd(&[b"SET", b"user:42:token", b"tok_9f8e7d6c5b4a"])),
        (S, b"+OK\r\n".to_vec()),
        (C, cmd(&[b"EVAL", b"return 'scriptsecretbody'", b"0"])),
        (S, b"-ERR user_script:1: oops leakedmessage\r\n".to_vec()),
        (C, cmd(&[b"CONFIG", b"SET", b"requirepass", b"cfgpassw0rd"])),
        (S, b"+OK\r\n".to_vec()),
        (C, b"AUTH inlinepassw0rd\r\n".to_vec()),
        (S, b"+OK\r\n".to_vec()),
        (C, cmd(&[b"ACL", b"SETUSER", b"bob", b">aclpassw0rd"])),
        (S, b"+OK\r\n".to_vec()),
    ];
    let (ex, err) = run(Start::Beginning, &steps);
    assert_eq!(err, None);
    assert_eq!(ex.len(), 8);
    let text = format!("{ex:?}");
    for secret in [
        "hunter2pass",
        "Sup3rS3cret",
        "helloPassw0rd",
        "tok_9f8e7d6c5b4a",
        "scriptsecretbody",
        "leakedmessage",
        "cfgpassw0rd",
        "inlinepassw0rd",
        "aclpassw0rd",
        "requirepass",
    ] {
        assert!(!text.contains(secret), "{secret} in {text}");
    }
    for i in [0, 1, 2, 5, 6, 7] {
        assert_eq!(ex[i].params_digest, None, "{}", ex[i].request);
    }
    assert_eq!(ex[1].status, Some(Status::RedisError("WRONGPASS".into())));
    assert_eq!(ex[4].status, Some(Status::RedisError("ERR".into())));
}

#[test]
fn digest_covers_arguments_and_ignores_chunking() {
    let digest = |bytes: &[u8], chunk: usize| {
        let mut a = RespAnalyzer::new(1, Start::Beginning);
        for c in bytes.chunks(chunk) {
            a.on_data(C, c, 1, 1);
        }
        a.finish()[0].params_digest
    };
    let long = vec![b'v'; 5000];
    let set = cmd(&[b"SET", b"k", &long]);
    assert_eq!(digest(&set, 1), digest(&set, 4096));
    assert_eq!(digest(&set, 3), digest(&set, 7));
    let other = cmd(&[b"SET", b"k", &long[1..]]);
    assert_ne!(digest(&set, 100), digest(&other, 100));
    assert_ne!(
        digest(&cmd(&[b"GET", b"a"]), 1),
        digest(&cmd(&[b"GET", b"b"]), 1)
    );
    assert_eq!(digest(b"GET a\r\n", 1), digest(&cmd(&[b"GET", b"a"]), 9));
}

/// A repeated command is described from the memo: the same label and the
/// same effect (CLIENT REPLY OFF twice still silences both) as described
/// anew; a changed argument is described again.
#[test]
fn repeated_commands_are_described_as_fresh_ones() {
    let set = |k: &[u8], v: &[u8]| cmd(&[b"SET", k, v]);
    let off = cmd(&[b"CLIENT", b"REPLY", b"OFF"]);
    let on = cmd(&[b"CLIENT", b"REPLY", b"ON"]);
    let steps = [
        (C, set(b"user:1", b"a")),
        (S, b"+OK\r\n".to_vec()),
        (C, set(b"user:1", b"a")),
        (S, b"+OK\r\n".to_vec()),
        (C, set(b"user:2", b"b")),
        (S, b"+OK\r\n".to_vec()),
        (C, off.clone()),
        (C, off),
        (C, set(b"user:2", b"b")),
        (C, on),
        (S, b"+OK\r\n".to_vec()),
        (C, cmd(&[b"GET", b"user:1"])),
        (S, b"$1\r\na\r\n".to_vec()),
    ];
    let (ex, err) = run(Start::Beginning, &steps);
    assert_eq!(err, None);
    let set_label = format!("SET {}", key("user:1"));
    assert_eq!(
        labels(&ex),
        [
            set_label.as_str(),
            &set_label,
            &set_label,
            "CLIENT REPLY",
            "CLIENT REPLY",
            &set_label,
            "CLIENT REPLY",
            &format!("GET {}", key("user:1")),
        ]
    );
    // Silenced: the two OFFs and the SET between them got no reply.
    let answered: Vec<bool> = ex
        .iter()
        .map(|e| e.response_first_at_us.is_some())
        .collect();
    assert_eq!(
        answered,
        [true, true, true, false, false, false, true, true]
    );
    assert_eq!(ex[0].params_digest, ex[1].params_digest);
    assert_ne!(ex[1].params_digest, ex[2].params_digest);
}

/// Commands lying whole in one delivery are read in place; the same bytes a
/// byte at a time go through the states. Both must build the same commands
/// (count, kept arguments, digest), credentials and odd framing included.
/// What a reader makes of `bytes` handed over in pieces of `chunk` bytes.
/// The kept arguments of a reader's last command, owned.
fn kept_args(kept: &request::Kept) -> Vec<Vec<u8>> {
    (0..request::MAX_KEPT_ARGS)
        .map_while(|i| kept.arg(i).map(<[u8]>::to_vec))
        .collect()
}

fn read_in_pieces<T>(
    bytes: &[u8],
    chunk: usize,
    mut feed: impl FnMut(&[u8]) -> (usize, frame::Outcome<T>),
) -> Vec<T> {
    let mut out = Vec::new();
    for mut part in bytes.chunks(chunk) {
        while !part.is_empty() {
            let (used, outcome) = feed(part);
            part = &part[used..];
            match outcome {
                frame::Outcome::Done(v) => out.push(v),
                frame::Outcome::Error(e) => panic!("{e}"),
                _ => {}
            }
        }
    }
    out
}

#[test]
fn replies_read_in_place_equal_replies_read_byte_by_byte() {
    let long_line = format!("+{}\r\n", "7".repeat(frame::MAX_WORD + 5));
    let replies: Vec<&[u8]> = vec![
        b"+OK\r\n",
        b":1\r\n",
        b":-42\r\n",
        b"$3\r\nabc\r\n",
        b"$0\r\n\r\n",
        b"$-1\r\n",
        b"+\r\n",
        b"+123 \"monitor\"\r\n",
        long_line.as_bytes(),
        b"+bare LF\n",
        b":7\n",
        b"$2\nab\r\n",
        b"-ERR wrong\r\n",
        b"*2\r\n$7\r\nmessage\r\n:3\r\n",
        b"|1\r\n+key\r\n+val\r\n$1\r\nx\r\n",
        b"_\r\n",
        b"$+2\r\nab\r\n",
        b":+5\r\n",
    ];
    let bytes: Vec<u8> = replies.concat();
    let read = |chunk: usize| {
        let mut r = frame::ReplyReader::new();
        read_in_pieces(&bytes, chunk, |part| r.feed(part))
    };
    let whole = read(bytes.len());
    // The attribute entry is one reply: the value after the attribute.
    assert_eq!(whole.len(), replies.len());
    assert!(whole[7].digit_line && whole[8].digit_line && !whole[0].digit_line);
    for chunk in [1, 2, 3, 7] {
        assert_eq!(read(chunk), whole, "in pieces of {chunk}");
    }
    // What the states refuse, the way in place does not take either.
    for bad in [
        &b"$5\r\nab\r\n"[..],
        b":x\r\n",
        b"$-2\r\n",
        b"$3\r\nabcX\r\n",
    ] {
        let mut r = frame::ReplyReader::new();
        let (_, outcome) = r.feed(bad);
        assert!(!matches!(outcome, frame::Outcome::Done(_)), "{bad:?}");
    }
}

#[test]
fn commands_read_in_place_equal_commands_read_byte_by_byte() {
    let long = vec![b'k'; request::MAX_ARG_BYTES + 10];
    let mut bytes = Vec::new();
    for c in [
        cmd(&[b"GET", b"user:1"]),
        cmd(&[b"SET", b"user:2", b"", b"EX", b"10"]),
        cmd(&[b"AUTH", b"alice", b"s3cret"]),
        cmd(&[b"HELLO", b"3", b"AUTH", b"u", b"p"]),
        cmd(&[b"OBJECT", b"ENCODING", &long]),
        cmd(&[b"PING"]),
        b"*2\n$3\nGET\r\n$1\nk\r\n".to_vec(),
        b"*0\r\n".to_vec(),
        b"PING\r\n".to_vec(),
        cmd(&[b"MSET", b"a", b"1", b"b", b"2"]),
        // More arguments than the first pass remembers the place of.
        cmd(&[
            b"MSET", b"a", b"1", b"b", b"2", b"c", b"3", b"d", b"4", b"e", b"5",
        ]),
        // Lengths the fast way does not read: leading zeros, a sign.
        b"*2\r\n$03\r\nGET\r\n$001\r\nk\r\n".to_vec(),
        b"*+2\r\n$3\r\nGET\r\n$1\r\nk\r\n".to_vec(),
        // Argument boundaries count: ("ab", "c") is not ("a", "bc").
        cmd(&[b"MSET", b"ab", b"c"]),
        cmd(&[b"MSET", b"a", b"bc"]),
    ] {
        bytes.extend_from_slice(&c);
    }
    let read = |chunk: usize| {
        let mut r = request::RequestReader::new();
        read_in_pieces(&bytes, chunk, |part| {
            let (used, outcome) = r.feed(part);
            (
                used,
                outcome.map(|c| (c.argc, kept_args(r.kept()), c.digest)),
            )
        })
    };
    let whole = read(bytes.len());
    assert_eq!(whole.len(), 14);
    assert_eq!(
        whole[10].1, whole[11].1,
        "the same command, leading zeros or a sign"
    );
    assert_ne!(
        whole[12].2, whole[13].2,
        "other argument boundaries, another digest"
    );
    assert_eq!(whole, read(1));
    assert_eq!(whole, read(7));
}

#[test]
fn a_command_repeats_only_with_the_same_count_and_kept_arguments() {
    let long = |last: u8| {
        let mut key = vec![b'k'; request::MAX_ARG_BYTES];
        key.push(last);
        key
    };
    let (long_a, long_b) = (long(b'a'), long(b'b'));
    let commands: Vec<(Vec<u8>, bool)> = vec![
        (cmd(&[b"GET", b"user:1"]), false),
        (cmd(&[b"GET", b"user:1"]), true),
        (cmd(&[b"GET", b"user:2"]), false),
        (cmd(&[b"GET", b"user:2", b"x"]), false),
        (cmd(&[b"GET", b"user:2", b"x"]), true),
        // Past the third argument nothing is kept: still a repeat.
        (cmd(&[b"GET", b"user:2", b"x", b"y"]), false),
        (cmd(&[b"GET", b"user:2", b"x", b"z"]), true),
        // Keys that differ only past MAX_ARG_BYTES are kept the same.
        (cmd(&[b"GET", &long_a]), false),
        (cmd(&[b"GET", &long_b]), true),
        // AUTH keeps only its name.
        (cmd(&[b"AUTH", b"alice", b"one"]), false),
        (cmd(&[b"AUTH", b"bob", b"two"]), true),
        (b"PING\r\n".to_vec(), false),
        (b"PING\r\n".to_vec(), true),
    ];
    let bytes: Vec<u8> = commands.iter().flat_map(|(c, _)| c.clone()).collect();
    let want: Vec<bool> = commands.iter().map(|&(_, r)| r).collect();
    for chunk in [1, 5, bytes.len()] {
        let mut r = request::RequestReader::new();
        let got: Vec<bool> = read_in_pieces(&bytes, chunk, |part| {
            let (used, outcome) = r.feed(part);
            (used, outcome.map(|c| c.repeat))
        });
        assert_eq!(got, want, "in pieces of {chunk}");
    }
}

#[test]
fn exchanges_built_into_the_callers_vector_follow_what_it_held() {
    let steps = redis_py_session();
    let (drained, _) = run(Start::Beginning, &steps);
    let mut a = RespAnalyzer::new(7, Start::Beginning);
    let before = Exchange::new(99, Protocol::Http1, "GET /".into());
    let mut out = vec![before.clone()];
    for (i, (d, bytes)) in steps.iter().enumerate() {
        a.on_data_into(*d, bytes, 1000 + i as u64 * 10, i as u64 + 1, &mut out);
    }
    out.extend(a.finish());
    assert_eq!(out[0], before);
    assert_eq!(out[1..], drained[..]);
}
