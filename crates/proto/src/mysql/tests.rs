//! Sessions as libmysqlclient, PyMySQL and Connector/J send them.

use super::*;
use crate::testkit::feed;
use whyslow_model::Direction::{ToClient, ToServer};

type Chunks = Vec<(Direction, Vec<u8>)>;

fn pkt(seq: u8, body: &[u8]) -> Vec<u8> {
    let len = body.len() as u32;
    let mut v = len.to_le_bytes()[..3].to_vec();
    v.push(seq);
    v.extend_from_slice(body);
    v
}

fn cat(parts: &[Vec<u8>]) -> Vec<u8> {
    parts.concat()
}

const SERVER_CAPS: u32 = 0xf7ff | (0x81bf << 16);

fn greeting(caps: u32) -> Vec<u8> {
    let mut b = vec![PROTOCOL_V10];
    b.extend_from_slice(b"10.11.19-MariaDB\0");
    b.extend_from_slice(&7u32.to_le_bytes());
    b.extend_from_slice(b"abcdefgh\0");
    b.extend_from_slice(&(caps as u16).to_le_bytes());
    b.push(45);
    b.extend_from_slice(&2u16.to_le_bytes());
    b.extend_from_slice(&((caps >> 16) as u16).to_le_bytes());
    b.push(21);
    b.extend_from_slice(&[0; 10]);
    b.extend_from_slice(b"ijklmnopqrst\0mysql_native_password\0");
    pkt(0, &b)
}

fn login(caps: u32) -> Vec<u8> {
    let mut b = caps.to_le_bytes().to_vec();
    b.extend_from_slice(&(1u32 << 24).to_le_bytes());
    b.push(45);
    b.extend_from_slice(&[0; 23]);
    b.extend_from_slice(b"app\0\x14aaaaaaaaaaaaaaaaaaaa");
    pkt(1, &b)
}

fn ok(seq: u8, status: u16) -> Vec<u8> {
    let mut b = vec![0x00, 0, 0];
    b.extend_from_slice(&status.to_le_bytes());
    b.extend_from_slice(&[0, 0]);
    pkt(seq, &b)
}

fn eof(seq: u8, status: u16) -> Vec<u8> {
    let mut b = vec![0xFE, 0, 0];
    b.extend_from_slice(&status.to_le_bytes());
    pkt(seq, &b)
}

/// The OK that ends a result set when EOFs are deprecated.
fn ok_eof(seq: u8, status: u16) -> Vec<u8> {
    let mut b = vec![0xFE, 0, 0];
    b.extend_from_slice(&status.to_le_bytes());
    b.extend_from_slice(&[0, 0]);
    pkt(seq, &b)
}

fn err(seq: u8, code: u16, state: &str) -> Vec<u8> {
    let mut b = vec![0xFF];
    b.extend_from_slice(&code.to_le_bytes());
    b.push(b'#');
    b.extend_from_slice(state.as_bytes());
    b.extend_from_slice(b"Duplicate entry 'secret' for key 'PRIMARY'");
    pkt(seq, &b)
}

fn coldef(seq: u8, name: &str) -> Vec<u8> {
    let mut b = Vec::new();
    for s in ["def", "shop", "t", "t", name, name] {
        b.push(s.len() as u8);
        b.extend_from_slice(s.as_bytes());
    }
    b.extend_from_slice(&[0x0c, 45, 0, 11, 0, 0, 0, 3, 0, 0, 0, 0, 0]);
    pkt(seq, &b)
}

fn text_row(seq: u8, values: &[&str]) -> Vec<u8> {
    let mut b = Vec::new();
    for v in values {
        b.push(v.len() as u8);
        b.extend_from_slice(v.as_bytes());
    }
    pkt(seq, &b)
}

fn query(text: &str) -> Vec<u8> {
    let mut b = vec![command::COM_QUERY];
    b.extend_from_slice(text.as_bytes());
    pkt(0, &b)
}

/// A classic (EOF) result set of one column and `rows` rows, status `status`.
fn result(rows: &[&str], status: u16) -> Vec<u8> {
    let mut parts = vec![pkt(1, &[1]), coldef(2, "name"), eof(3, 2)];
    let mut seq = 4;
    for r in rows {
        parts.push(text_row(seq, &[r]));
        seq += 1;
    }
    parts.push(eof(seq, status));
    cat(&parts)
}

fn run(chunks: &Chunks, start: Start) -> (Vec<Exchange>, Option<String>) {
    let mut a = MysqlAnalyzer::new(1, start);
    feed(&mut a, chunks.iter().map(|(d, b)| (*d, &b[..])))
}

fn hello() -> Chunks {
    vec![
        (ToClient, greeting(SERVER_CAPS & !CLIENT_DEPRECATE_EOF)),
        (ToServer, login(0x000f_a68d)),
        (ToClient, ok(2, 2)),
    ]
}

#[test]
fn text_queries_are_normalized_with_rows_errors_and_times() {
    let mut s = hello();
    s.push((
        ToServer,
        query("SELECT name FROM users WHERE email = \"bob@example.com\" AND id = 42"),
    ));
    s.push((ToClient, result(&["bob", "bobby"], 2)));
    s.push((ToServer, query("INSERT INTO users VALUES (1, 'secret')\0")));
    s.push((ToClient, err(1, 1062, "23000")));
    let (ex, note) = run(&s, Start::Beginning);
    assert_eq!(note, None);
    assert_eq!(ex.len(), 2, "{ex:#?}");
    assert_eq!(
        ex[0].request,
        "SELECT name FROM users WHERE email = ? AND id = ?"
    );
    assert_eq!(ex[0].protocol, Protocol::Mysql);
    assert_eq!(ex[0].rows, Some(2));
    assert_eq!(ex[0].status, None);
    assert_eq!(ex[0].transaction, Some(TxState::Idle));
    assert_eq!(ex[0].request_first_at_us, 4000);
    assert_eq!(ex[0].response_first_at_us, Some(5000));
    assert_eq!(ex[0].request_packets, (4, 4));
    assert_eq!(ex[1].request, "INSERT INTO users VALUES (?, ?)");
    assert_eq!(ex[1].status, Some(Status::Sqlstate("23000".into())));
    for e in &ex {
        assert!(!e.request.contains("bob") && !e.request.contains("secret"));
    }
}

#[test]
fn deprecated_eofs_and_transactions_and_multiple_results() {
    let both = SERVER_CAPS | CLIENT_DEPRECATE_EOF;
    let mut s = vec![
        (ToClient, greeting(both)),
        (ToServer, login(0x000f_a68d | CLIENT_DEPRECATE_EOF)),
        (ToClient, ok(2, 2)),
        (ToServer, query("BEGIN")),
        (ToClient, ok(1, IN_TRANS_FLAG)),
    ];
    // Rows then an OK in place of the EOF; the status says a transaction is open.
    let rows = cat(&[
        pkt(1, &[1]),
        coldef(2, "n"),
        text_row(3, &["1"]),
        text_row(4, &["2"]),
        text_row(5, &["3"]),
        ok_eof(6, IN_TRANS_FLAG),
    ]);
    s.push((ToServer, query("SELECT n FROM t FOR UPDATE")));
    s.push((ToClient, rows));
    // A procedure: a result, then the final OK.
    let call = cat(&[
        pkt(1, &[1]),
        coldef(2, "n"),
        text_row(3, &["1"]),
        ok_eof(4, IN_TRANS_FLAG | response::MORE_RESULTS),
        ok(5, IN_TRANS_FLAG),
    ]);
    s.push((ToServer, query("CALL p(7)")));
    s.push((ToClient, call));
    s.push((ToServer, query("COMMIT")));
    s.push((ToClient, ok(1, 2)));
    let (ex, note) = run(&s, Start::Beginning);
    assert_eq!(note, None);
    let got: Vec<(&str, Option<u64>, Option<TxState>)> = ex
        .iter()
        .map(|e| (e.request.as_str(), e.rows, e.transaction))
        .collect();
    use TxState::*;
    assert_eq!(
        got,
        [
            ("BEGIN", None, Some(InTransaction)),
            ("SELECT n FROM t FOR UPDATE", Some(3), Some(InTransaction)),
            ("CALL p(?)", Some(1), Some(InTransaction)),
            ("COMMIT", None, Some(Idle)),
        ]
    );
}

const IN_TRANS_FLAG: u16 = response::IN_TRANS | 2;

fn prepare(text: &str) -> Vec<u8> {
    let mut b = vec![command::COM_STMT_PREPARE];
    b.extend_from_slice(text.as_bytes());
    pkt(0, &b)
}

fn prepare_ok(id: u32, cols: u16, params: u16) -> Vec<u8> {
    let mut b = vec![0];
    b.extend_from_slice(&id.to_le_bytes());
    b.extend_from_slice(&cols.to_le_bytes());
    b.extend_from_slice(&params.to_le_bytes());
    b.extend_from_slice(&[0, 0, 0]);
    let mut parts = vec![pkt(1, &b)];
    let mut seq = 2;
    for _ in 0..params {
        parts.push(coldef(seq, "?"));
        seq += 1;
    }
    if params > 0 {
        parts.push(eof(seq, 2));
        seq += 1;
    }
    for _ in 0..cols {
        parts.push(coldef(seq, "c"));
        seq += 1;
    }
    if cols > 0 {
        parts.push(eof(seq, 2));
    }
    cat(&parts)
}

/// An execution of `id` with one 8-byte integer parameter; `types`: sent.
fn execute(id: u32, value: i64, types: bool) -> Vec<u8> {
    let mut b = vec![command::COM_STMT_EXECUTE];
    b.extend_from_slice(&id.to_le_bytes());
    b.push(0);
    b.extend_from_slice(&1u32.to_le_bytes());
    b.push(0); // null bitmap
    b.push(u8::from(types));
    if types {
        b.extend_from_slice(&[8, 0]);
    }
    b.extend_from_slice(&value.to_le_bytes());
    pkt(0, &b)
}

/// A binary result set of two columns and one row.
fn binary_result() -> Vec<u8> {
    cat(&[
        pkt(1, &[2]),
        coldef(2, "a"),
        coldef(3, "b"),
        eof(4, 2),
        pkt(5, &[0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 1, b'x']),
        eof(6, 2),
    ])
}

#[test]
fn prepared_statements_are_joined_to_their_text_by_id() {
    let mut s = hello();
    s.push((ToServer, prepare("SELECT a, b FROM items WHERE owner = ?")));
    s.push((ToClient, prepare_ok(5, 2, 1)));
    for (value, types) in [(7, true), (7, false), (8, false)] {
        s.push((ToServer, execute(5, value, types)));
        s.push((ToClient, binary_result()));
    }
    let mut close = vec![command::COM_STMT_CLOSE];
    close.extend_from_slice(&5u32.to_le_bytes());
    s.push((ToServer, pkt(0, &close)));
    // Closed: the id is no longer known.
    s.push((ToServer, execute(5, 9, true)));
    s.push((ToClient, err(1, 1243, "HY000")));
    let (ex, note) = run(&s, Start::Beginning);
    assert_eq!(note, None);
    let labels: Vec<&str> = ex.iter().map(|e| e.request.as_str()).collect();
    let text = "SELECT a, b FROM items WHERE owner = ?";
    assert_eq!(
        labels,
        [
            &format!("PREPARE {text}")[..],
            text,
            text,
            text,
            "? (statement #5, prepared before the capture)",
        ]
    );
    assert_eq!(ex[1].rows, Some(1));
    // Equal values digest alike, whether or not the types came along.
    assert_eq!(ex[1].params_digest, ex[2].params_digest);
    assert_ne!(ex[2].params_digest, ex[3].params_digest);
}

#[test]
fn a_prepare_pipelined_with_its_execution_names_it() {
    let mut s = hello();
    s.push((
        ToServer,
        cat(&[
            prepare("UPDATE t SET n = n + 1 WHERE id = ?"),
            execute(command::LAST_PREPARED, 1, true),
        ]),
    ));
    s.push((ToClient, cat(&[prepare_ok(9, 0, 1), ok(1, 2)])));
    s.push((ToServer, execute(9, 2, true)));
    s.push((ToClient, ok(1, 2)));
    let (ex, _) = run(&s, Start::Beginning);
    let labels: Vec<&str> = ex.iter().map(|e| e.request.as_str()).collect();
    let text = "UPDATE t SET n = n + ? WHERE id = ?";
    assert_eq!(labels, [&format!("PREPARE {text}")[..], text, text]);
    assert!(ex.iter().all(|e| e.response_first_at_us.is_some()));
}

#[test]
fn mid_stream_old_answers_are_skipped_and_unknown_ids_keep_an_identity() {
    let s: Chunks = vec![
        // The tail of an answer to a command sent before the capture.
        (ToClient, cat(&[text_row(9, &["x"]), eof(10, 2)])),
        (ToServer, execute(12, 3, false)),
        (ToClient, binary_result()),
        (ToServer, execute(12, 4, false)),
        (ToClient, binary_result()),
        (ToServer, query("SELECT 1")),
        (ToClient, result(&["1"], 2)),
    ];
    let (ex, note) = run(&s, Start::MidStream);
    assert_eq!(note, None);
    let labels: Vec<&str> = ex.iter().map(|e| e.request.as_str()).collect();
    let before = "? (statement #12, 2 columns, prepared before the capture)";
    assert_eq!(labels, [before, before, "SELECT ?"]);
    assert!(ex.iter().all(|e| e.response_first_at_us.is_some()));
}

#[test]
fn a_gap_inside_a_row_keeps_the_answer_and_one_across_packets_resyncs() {
    let mut a = MysqlAnalyzer::new(1, Start::Beginning);
    let mut out = Vec::new();
    for (d, b) in hello() {
        a.on_data(d, &b, 1, 1);
    }
    a.on_data(ToServer, &query("SELECT big FROM blobs"), 2, 2);
    let mut row = vec![0xFC, 0x10, 0x27];
    row.extend(std::iter::repeat_n(b'z', 10_000));
    let answer = cat(&[
        pkt(1, &[1]),
        coldef(2, "big"),
        eof(3, 2),
        text_row(4, &[]),
        pkt(5, &row),
        eof(6, 2),
    ]);
    let cut = answer.len() - 9 - 5_000;
    a.on_data(ToClient, &answer[..cut], 3, 3);
    a.on_gap(ToClient, 4_000);
    a.on_data(ToClient, &answer[cut + 4_000..], 4, 4);
    a.drain_exchanges(&mut out);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].rows, Some(2));
    // A gap across packet boundaries: that command goes unanswered, the next is paired.
    a.on_data(ToServer, &query("SELECT a FROM b"), 5, 5);
    a.on_data(ToClient, &result(&["1", "2"], 2)[..20], 6, 6);
    a.on_gap(ToClient, 500);
    a.on_data(ToServer, &query("SELECT c FROM d"), 7, 7);
    a.on_data(ToClient, &result(&["1"], 2), 8, 8);
    out.extend(a.finish());
    let got: Vec<(&str, Option<u64>)> = out
        .iter()
        .map(|e| (e.request.as_str(), e.response_first_at_us))
        .collect();
    assert_eq!(
        got,
        [
            ("SELECT big FROM blobs", Some(3)),
            ("SELECT a FROM b", Some(6)),
            ("SELECT c FROM d", Some(8))
        ]
    );
    assert!(a.error().is_some_and(|e| e.contains("missing")));
    assert!(a.buffered() < 8 * KEEP_BUFFER);
}

#[test]
fn sixteen_mib_packets_continue_and_only_the_head_is_kept() {
    let mut a = MysqlAnalyzer::new(1, Start::Beginning);
    for (d, b) in hello() {
        a.on_data(d, &b, 1, 1);
    }
    let mut text = b"SELECT '".to_vec();
    text.resize(packet::MAX_PAYLOAD as usize - 1 + 100, b'v');
    text.extend_from_slice(b"'");
    let mut body = vec![command::COM_QUERY];
    body.extend_from_slice(&text);
    let first = &body[..packet::MAX_PAYLOAD as usize];
    let mut wire = packet::MAX_PAYLOAD.to_le_bytes()[..3].to_vec();
    wire.push(0);
    wire.extend_from_slice(first);
    wire.extend_from_slice(&pkt(1, &body[packet::MAX_PAYLOAD as usize..]));
    for chunk in wire.chunks(65_536) {
        a.on_data(ToServer, chunk, 2, 2);
        assert!(a.buffered() <= MAX_QUERY_TEXT + KEEP_BUFFER);
    }
    a.on_data(ToClient, &result(&["v"], 2), 3, 3);
    let ex = a.finish();
    assert_eq!(ex.len(), 1);
    assert_eq!(ex[0].request, "SELECT ?");
    assert_eq!(ex[0].request_bytes, wire.len() as u64);
    assert!(a.error().is_some_and(|e| e.contains("cut")));
}

#[test]
fn sniffing_tells_greetings_commands_and_others_apart() {
    let g = greeting(SERVER_CAPS);
    assert_eq!(MysqlAnalyzer::sniff_greeting(&g), Sniff::Yes);
    assert_eq!(MysqlAnalyzer::sniff_greeting(&g[..8]), Sniff::NeedMore);
    assert_eq!(
        MysqlAnalyzer::sniff_greeting(b"\x00\x00\x12\x04\x00\x00"),
        Sniff::No
    );
    assert_eq!(
        MysqlAnalyzer::sniff(&query("SELECT 1"), Start::MidStream),
        Sniff::Yes
    );
    assert_eq!(
        MysqlAnalyzer::sniff(&execute(3, 1, true), Start::MidStream),
        Sniff::Yes
    );
    assert_eq!(
        MysqlAnalyzer::sniff(b"GET / HTTP/1.1\r\n\r\n", Start::MidStream),
        Sniff::No
    );
    assert_eq!(
        MysqlAnalyzer::sniff(b"*1\r\n$4\r\nPING\r\n", Start::MidStream),
        Sniff::No
    );
    assert_eq!(
        MysqlAnalyzer::sniff(b"Q\0\0\0\x0dSELECT 1\0", Start::MidStream),
        Sniff::No
    );
    // Inside TLS, the login comes first (sequence 2 after the SSL request).
    let mut l = login(0x000f_a68d);
    l[3] = 2;
    assert_eq!(MysqlAnalyzer::sniff(&l, Start::Beginning), Sniff::Yes);
    assert_eq!(sender_is_client(&query("SELECT 1")), Some(true));
    assert_eq!(sender_is_client(&ok(1, 2)), Some(false));
    assert_eq!(sender_is_client(&g), Some(false));
    assert_eq!(sender_is_client(b"HTTP/1.1 200 OK\r\n"), None);
}

#[test]
fn the_sniffer_picks_mysql_from_the_greeting_on_any_port() {
    let mut s = crate::Sniffer::new(1, 13306, Start::Beginning);
    let (ex, _) = feed(
        &mut s,
        hello()
            .iter()
            .chain(&[(ToServer, query("SELECT 1")), (ToClient, result(&["1"], 2))])
            .map(|(d, b)| (*d, &b[..])),
    );
    assert_eq!(s.protocol(), Protocol::Mysql);
    assert_eq!(ex.len(), 1);
}

#[test]
fn an_ssl_request_hands_the_stream_to_tls() {
    let mut a = MysqlAnalyzer::new(1, Start::Beginning);
    a.on_data(ToClient, &greeting(SERVER_CAPS), 1, 1);
    let mut ssl = (0x000f_a68d | CLIENT_SSL).to_le_bytes().to_vec();
    ssl.extend_from_slice(&[0, 0, 0, 1, 45]);
    ssl.extend_from_slice(&[0; 23]);
    a.on_data(ToServer, &pkt(1, &ssl), 2, 2);
    assert!(a.tls_follows());
}

#[test]
fn the_compressed_protocol_is_noted_and_left_unread() {
    let mut s = vec![
        (ToClient, greeting(SERVER_CAPS | CLIENT_COMPRESS)),
        (ToServer, login(0x000f_a68d | CLIENT_COMPRESS)),
    ];
    s.push((ToClient, ok(2, 2)));
    s.push((ToServer, query("SELECT 1")));
    let (ex, note) = run(&s, Start::Beginning);
    assert!(ex.is_empty());
    assert!(note.is_some_and(|n| n.contains("compressed")));
}

#[test]
fn mysql_text_is_normalized_by_its_own_rules() {
    let n = |s: &str| crate::normalize::mysql(s, &mut ParamDigest::new());
    assert_eq!(
        n("SELECT `order`.id FROM `order` WHERE note = \"it\\\"s\" # c"),
        "SELECT `order`.id FROM `order` WHERE note = ?"
    );
    assert_eq!(
        n("SELECT 'a\\'b', x FROM t /* x */ WHERE y IN (1, 2, 3)"),
        "SELECT ?, x FROM t WHERE y IN (?)"
    );
    assert_eq!(n("SELECT $x FROM t"), "SELECT $x FROM t");
    // The memo gives what the lexer gives.
    let mut memo = SqlMemo::mysql();
    for s in [
        "SELECT a FROM t WHERE id = 1 # 5",
        "SELECT `a` FROM t WHERE id = 2",
        "SELECT a FROM t WHERE id = 3",
    ] {
        for _ in 0..2 {
            assert_eq!(memo.sql(s, &mut ParamDigest::new()), n(s), "{s}");
        }
    }
}

#[test]
fn hostile_input_ends_in_notes_not_panics_and_memory_stays_bounded() {
    // A column count of 2^64 - 1, deep "results" that never end, huge lengths.
    let mut huge = vec![0xFE];
    huge.extend_from_slice(&u64::MAX.to_le_bytes());
    let mut s = hello();
    s.push((ToServer, query("SELECT 1")));
    s.push((ToClient, pkt(1, &huge)));
    for i in 0..1000u32 {
        s.push((ToClient, pkt((i % 256) as u8, &[0xFB; 100])));
    }
    s.push((ToClient, b"\xff\xff\xff\x07".to_vec()));
    let (ex, _) = run(&s, Start::Beginning);
    assert_eq!(ex.len(), 1);
    // Random bytes, from the beginning and mid-stream.
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    for _ in 0..300 {
        let data: Vec<u8> = (0..600)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        fuzz(&data);
        crate::fuzz::sniffed(
            &[0x0c, 0xea, (x & 1) as u8]
                .iter()
                .chain(&data)
                .copied()
                .collect::<Vec<_>>(),
        );
    }
}

#[test]
fn the_fuzz_seed_is_a_whole_session() {
    let seed = include_bytes!("../../../../fuzz/seeds/mysql/conversation");
    let mut a = MysqlAnalyzer::new(0, Start::Beginning);
    let ex = crate::fuzz::collect_chunks(&mut a, seed, true);
    let labels: Vec<&str> = ex.iter().map(|e| e.request.as_str()).collect();
    let text = "SELECT a FROM t WHERE id = ?";
    assert_eq!(labels, [text, &format!("PREPARE {text}")[..], text]);
    assert_eq!(a.error(), None);
    let rows: Vec<Option<u64>> = ex.iter().map(|e| e.rows).collect();
    assert_eq!(rows, [Some(1), None, Some(1)]);
}

/// Mid-stream (EOFs deprecated or not unknown yet): a prepare whose
/// definitions no EOF closes ends at them; the next packet is the
/// execution's answer, not the prepare's.
#[test]
fn definitions_with_no_eof_end_before_the_next_answer() {
    let mut prep = vec![0];
    prep.extend_from_slice(&4u32.to_le_bytes());
    prep.extend_from_slice(&0u16.to_le_bytes());
    prep.extend_from_slice(&2u16.to_le_bytes());
    prep.extend_from_slice(&[0, 0, 0]);
    let s: Chunks = vec![
        (ToServer, prepare("UPDATE t SET a = ? WHERE id = ?")),
        (
            ToClient,
            cat(&[pkt(1, &prep), coldef(2, "?"), coldef(3, "?")]),
        ),
        (ToServer, execute(4, 1, true)),
        (ToClient, ok(1, 2)),
        (ToServer, query("SELECT 1")),
        (
            ToClient,
            cat(&[
                pkt(1, &[1]),
                coldef(2, "1"),
                text_row(3, &["1"]),
                ok_eof(4, 2),
            ]),
        ),
    ];
    let (ex, _) = run(&s, Start::MidStream);
    let got: Vec<(&str, Option<u64>)> = ex
        .iter()
        .map(|e| (e.request.as_str(), e.response_first_at_us))
        .collect();
    assert_eq!(
        got,
        [
            ("PREPARE UPDATE t SET a = ? WHERE id = ?", Some(2000)),
            ("UPDATE t SET a = ? WHERE id = ?", Some(4000)),
            ("SELECT ?", Some(6000)),
        ]
    );
    assert_eq!(ex[2].rows, Some(1));
}

#[test]
fn a_local_infile_upload_is_data_whatever_its_sequence() {
    let mut s = hello();
    s.push((
        ToServer,
        query("LOAD DATA LOCAL INFILE 'x.csv' INTO TABLE t"),
    ));
    s.push((ToClient, pkt(1, b"\xfbx.csv")));
    // 300 packets of the file: sequence 2, 3, … wraps to 0 after 255, and
    // a line of the file may start with a byte that is a command's.
    let data: Vec<u8> = (0..300u32)
        .flat_map(|i| pkt((i + 2) as u8, b"\t1,2\n"))
        .collect();
    s.push((ToServer, cat(&[data, pkt(46, b"")])));
    s.push((ToClient, ok(47, 2)));
    s.push((ToServer, query("SELECT 2")));
    s.push((ToClient, result(&["2"], 2)));
    let (ex, note) = run(&s, Start::Beginning);
    assert_eq!(note, None);
    let labels: Vec<&str> = ex.iter().map(|e| e.request.as_str()).collect();
    assert_eq!(
        labels,
        ["LOAD DATA LOCAL INFILE ? INTO TABLE t", "SELECT ?"]
    );
    assert!(ex[0].request_bytes > 300 * 9);
    assert_eq!(ex[1].rows, Some(1));
}

#[test]
fn a_long_version_string_keeps_the_capabilities_after_it() {
    let both = SERVER_CAPS | CLIENT_DEPRECATE_EOF;
    let mut g = greeting(both);
    let version = b"5.5.5-10.11.8-MariaDB-1:10.11.8+maria~ubu2204-log";
    let at = 5 + g[5..].iter().position(|&b| b == 0).unwrap();
    g.splice(5..at, version.iter().copied());
    let len = (g.len() - 4) as u32;
    g[..3].copy_from_slice(&len.to_le_bytes()[..3]);
    let s: Chunks = vec![
        (ToClient, g),
        (ToServer, login(0x000f_a68d | CLIENT_DEPRECATE_EOF)),
        (ToClient, ok(2, 2)),
        // No EOF after the definitions: rows, then an OK in its place.
        (ToServer, query("SELECT n FROM t")),
        (
            ToClient,
            cat(&[
                pkt(1, &[1]),
                coldef(2, "n"),
                text_row(3, &["1"]),
                text_row(4, &["2"]),
                ok_eof(5, 2),
            ]),
        ),
        (ToServer, query("SELECT 1")),
        (ToClient, cat(&[pkt(1, &[1]), coldef(2, "1"), ok_eof(3, 2)])),
    ];
    let (ex, note) = run(&s, Start::Beginning);
    assert_eq!(note, None);
    let rows: Vec<Option<u64>> = ex.iter().map(|e| e.rows).collect();
    assert_eq!(rows, [Some(2), Some(0)]);
}

#[test]
fn progress_reports_unknown_commands_and_resets() {
    let mut s = hello();
    // MariaDB's progress report (an ERR numbered 0xFFFF) before the OK.
    let mut progress = vec![0xFF, 0xFF, 0xFF, 1, 1, 2];
    progress.extend_from_slice(&[0, 0, 0, 0]);
    s.push((ToServer, query("ALTER TABLE t ADD COLUMN c INT")));
    s.push((
        ToClient,
        cat(&[pkt(1, &progress), pkt(2, &progress), ok(3, 2)]),
    ));
    // COM_REFRESH is not read, but the server answers it.
    s.push((ToServer, pkt(0, &[0x07, 0x01])));
    s.push((ToClient, err(1, 1047, "08S01")));
    s.push((ToServer, prepare("SELECT a FROM t WHERE id = ?")));
    s.push((ToClient, prepare_ok(5, 1, 1)));
    s.push((ToServer, pkt(0, &[command::COM_RESET_CONNECTION])));
    s.push((ToClient, ok(1, 2)));
    // After the reset, id 5 is not the statement prepared before it.
    s.push((ToServer, execute(5, 1, true)));
    s.push((ToClient, err(1, 1243, "HY000")));
    let (ex, note) = run(&s, Start::Beginning);
    assert_eq!(note, None);
    let got: Vec<(&str, Option<&Status>)> = ex
        .iter()
        .map(|e| (e.request.as_str(), e.status.as_ref()))
        .collect();
    let unknown = Status::Sqlstate("08S01".into());
    let gone = Status::Sqlstate("HY000".into());
    assert_eq!(
        got,
        [
            ("ALTER TABLE t ADD COLUMN c INT", None),
            ("COM_UNKNOWN", Some(&unknown)),
            ("PREPARE SELECT a FROM t WHERE id = ?", None),
            ("COM_RESET_CONNECTION", None),
            ("? (statement #5, prepared before the capture)", Some(&gone)),
        ]
    );
}

#[test]
fn zstd_compression_is_noted_and_a_lost_first_byte_resyncs() {
    let s = vec![
        (ToClient, greeting(SERVER_CAPS | CLIENT_ZSTD_COMPRESSION)),
        (ToServer, login(0x000f_a68d | CLIENT_ZSTD_COMPRESSION)),
    ];
    let (ex, note) = run(&s, Start::Beginning);
    assert!(ex.is_empty() && note.is_some_and(|n| n.contains("compressed")));
    // A gap right after a row's header took its first byte: not read on as
    // a row of unknown kind; the next command is paired once seen whole.
    let mut a = MysqlAnalyzer::new(1, Start::Beginning);
    for (d, b) in hello() {
        a.on_data(d, &b, 1, 1);
    }
    a.on_data(ToServer, &query("SELECT a FROM b"), 2, 2);
    let answer = result(&["x", "y"], 2);
    let row_at = 5 + coldef(2, "name").len() + 9;
    a.on_data(ToClient, &answer[..row_at + 4], 3, 3);
    a.on_gap(ToClient, 1);
    a.on_data(ToClient, &answer[row_at + 5..], 4, 4);
    a.on_data(ToServer, &query("SELECT c FROM d"), 5, 5);
    a.on_data(ToClient, &result(&["1"], 2), 6, 6);
    let ex = a.finish();
    let got: Vec<(&str, Option<u64>)> = ex.iter().map(|e| (e.request.as_str(), e.rows)).collect();
    assert_eq!(
        got,
        [("SELECT a FROM b", Some(0)), ("SELECT c FROM d", Some(1))]
    );
}
