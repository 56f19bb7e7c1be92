//! Sessions as psql, libpq pipelines and JDBC/psycopg send them.

use super::test_wire::*;
use super::*;
use whyslow_model::Direction::{ToClient, ToServer};
use whyslow_model::{Status, TxState};

/// psql: SSLRequest refused, startup, auth ok, two statements in one Query,
/// then a query on a missing table (42P01).
fn psql_session() -> Chunks {
    let secret_query = if literals_normalized() {
        "SELECT * FROM cards WHERE pan = 'secret-4111'"
    } else {
        "SELECT * FROM cards WHERE pan = $1"
    };
    vec![
        (ToServer, untyped(80_877_103, b"")),
        (ToClient, b"N".to_vec()),
        (ToServer, startup()),
        (ToClient, msg(b'R', &3u32.to_be_bytes())),
        (ToServer, msg(b'p', b"passw0rd\0")),
        (ToClient, server_hello()),
        (ToServer, q(&format!("SELECT 1;\n {secret_query}"))),
        (
            ToClient,
            cat(&[row_desc(), row(b"1"), complete("SELECT 1")]),
        ),
        (
            ToClient,
            cat(&[row_desc(), row(b"a"), row(b"b"), complete("SELECT 2")]),
        ),
        (ToClient, ready(b'I')),
        (ToServer, q("SELECT * FROM missing")),
        (ToClient, cat(&[error("42P01"), ready(b'I')])),
    ]
}

#[test]
fn psql_session_statements_and_errors() {
    let (ex, err) = run(&psql_session());
    assert_eq!(err, None);
    assert_eq!(ex.len(), 3, "{ex:#?}");
    assert_eq!(ex[0].request, norm("SELECT 1"));
    assert!(ex[1]
        .request
        .to_uppercase()
        .starts_with("SELECT * FROM CARDS"));
    assert_eq!(ex[2].request, norm("SELECT * FROM missing"));
    assert_eq!(ex[0].protocol, Protocol::Postgres);
    assert_eq!(ex[0].connection, 3);
    // Statements of one Query share its request span, answers are their own.
    assert_eq!(ex[0].request_packets, (7, 7));
    assert_eq!(ex[1].request_packets, (7, 7));
    assert_eq!(ex[0].response_packets, Some((8, 8)));
    assert_eq!(ex[1].response_packets, Some((9, 9)));
    assert_eq!((ex[0].rows, ex[1].rows), (Some(1), Some(2)));
    assert_eq!((ex[0].status.clone(), ex[1].status.clone()), (None, None));
    assert_eq!(
        ex[0].transaction, None,
        "ReadyForQuery goes to the last one"
    );
    assert_eq!(ex[1].transaction, Some(TxState::Idle));
    assert_eq!(ex[2].status, Some(Status::Sqlstate("42P01".into())));
    assert_eq!(ex[2].transaction, Some(TxState::Idle));
    assert_eq!(ex[2].rows, None);
    let expect: u64 = [row_desc(), row(b"a"), row(b"b"), complete("SELECT 2")]
        .iter()
        .map(|m| m.len() as u64)
        .sum();
    assert_eq!(ex[1].response_bytes, expect);
}

#[test]
fn psql_session_split_at_every_byte() {
    let session = psql_session();
    let whole = run(&session).0;
    for dir in [ToServer, ToClient] {
        let total: usize = session
            .iter()
            .filter(|(d, _)| *d == dir)
            .map(|(_, b)| b.len())
            .sum();
        for i in 0..=total {
            let (ex, err) = run(&split_at(&session, dir, i));
            assert_eq!(err, None, "split {dir:?} {i}");
            assert_eq!(labels(&ex), labels(&whole), "split {dir:?} {i}");
            assert_eq!(ex[1].rows, Some(2));
            assert_eq!(ex[1].transaction, Some(TxState::Idle));
            assert_eq!(ex[2].status, Some(Status::Sqlstate("42P01".into())));
            assert_eq!(ex[1].response_bytes, whole[1].response_bytes);
        }
    }
}

#[test]
fn one_byte_at_a_time() {
    let mut chunks: Chunks = Vec::new();
    for (d, data) in psql_session() {
        chunks.extend(data.chunks(1).map(|b| (d, b.to_vec())));
    }
    let (ex, err) = run(&chunks);
    assert_eq!(err, None);
    assert_eq!(ex.len(), 3);
    assert_eq!(ex[2].status, Some(Status::Sqlstate("42P01".into())));
}

/// JDBC/psycopg style: a named statement, a Bind of it again later, an
/// unnamed statement, then the first values again.
fn jdbc_session(sql: &str) -> Chunks {
    let mut c = begin();
    c.push((
        ToServer,
        cat(&[
            parse("S_1", sql),
            bind("S_1", &[Some(b"42"), Some(b"passw0rd")]),
            describe_portal(),
            execute(0),
            sync(),
        ]),
    ));
    c.push((
        ToClient,
        cat(&[
            msg(b'1', b""),
            msg(b'2', b""),
            row_desc(),
            row(b"42"),
            complete("SELECT 1"),
            ready(b'I'),
        ]),
    ));
    // Bind of the statement parsed earlier, a NULL this time.
    c.push((
        ToServer,
        cat(&[bind("S_1", &[Some(b"43"), None]), execute(0), sync()]),
    ));
    c.push((
        ToClient,
        cat(&[msg(b'2', b""), complete("SELECT 0"), ready(b'I')]),
    ));
    c.push((
        ToServer,
        cat(&[
            parse("", "UPDATE cards SET pan = $1"),
            bind("", &[Some(b"secret-4111")]),
            execute(0),
            sync(),
        ]),
    ));
    c.push((
        ToClient,
        cat(&[
            msg(b'1', b""),
            msg(b'2', b""),
            complete("UPDATE 3"),
            ready(b'T'),
        ]),
    ));
    c.push((
        ToServer,
        cat(&[
            bind("S_1", &[Some(b"42"), Some(b"passw0rd")]),
            execute(0),
            sync(),
        ]),
    ));
    c.push((
        ToClient,
        cat(&[msg(b'2', b""), complete("SELECT 1"), ready(b'I')]),
    ));
    c
}

#[test]
fn extended_named_unnamed_and_rebind() {
    let sql = "SELECT * FROM users WHERE id = $1 AND pw = $2";
    let c = jdbc_session(sql);
    let (ex, err) = run(&c);
    assert_eq!(err, None);
    assert_eq!(
        labels(&ex),
        norms(&[sql, sql, "UPDATE cards SET pan = $1", sql])
    );
    assert_eq!(
        ex.iter().map(|e| e.rows).collect::<Vec<_>>(),
        [Some(1), Some(0), Some(3), Some(1)]
    );
    assert_eq!(ex[2].transaction, Some(TxState::InTransaction));
    let d: Vec<_> = ex.iter().map(|e| e.params_digest).collect();
    assert!(d.iter().all(Option::is_some));
    assert_ne!(d[0], d[1]);
    assert_eq!(d[0], d[3], "same values, same digest");
    // Request: Parse..Execute in packet 3; response: ParseComplete..CommandComplete.
    assert_eq!(ex[0].request_packets, (3, 3));
    assert_eq!(ex[0].response_packets, Some((4, 4)));
    let sync_len = sync().len() as u64;
    let sent = c[2].1.len() as u64;
    assert_eq!(ex[0].request_bytes, sent - sync_len);
    assert_eq!(
        ex[0].response_bytes,
        c[3].1.len() as u64 - ready(b'I').len() as u64
    );
}

#[test]
fn pipeline_of_three_syncs_and_an_error() {
    let mut c = begin();
    let mut req = Vec::new();
    for i in 1..=3 {
        req.extend(cat(&[
            parse("", &format!("INSERT INTO t{i} VALUES ($1)")),
            bind("", &[Some(b"secret-4111")]),
            execute(0),
            sync(),
        ]));
    }
    c.push((ToServer, req));
    let ok = |tag: &str| cat(&[msg(b'1', b""), msg(b'2', b""), complete(tag)]);
    c.push((
        ToClient,
        cat(&[ok("INSERT 0 1"), ready(b'I'), ok("INSERT 0 2")]),
    ));
    c.push((ToClient, cat(&[ready(b'I'), ok("INSERT 0 3"), ready(b'I')])));
    let (ex, err) = run(&c);
    assert_eq!(err, None);
    assert_eq!(
        labels(&ex),
        norms(&[
            "INSERT INTO t1 VALUES ($1)",
            "INSERT INTO t2 VALUES ($1)",
            "INSERT INTO t3 VALUES ($1)"
        ])
    );
    assert_eq!(
        ex.iter().map(|e| e.rows).collect::<Vec<_>>(),
        [Some(1), Some(2), Some(3)]
    );
    assert_eq!(ex[1].response_packets, Some((4, 4)));
    assert_eq!(ex[2].response_packets, Some((5, 5)));
    assert!(ex.iter().all(|e| e.transaction == Some(TxState::Idle)));
}

/// An error in the first Execute of a two-Execute batch: the server skips
/// the second (dropped), and the next batch pairs normally.
#[test]
fn error_in_a_batch_skips_to_sync() {
    let mut c = begin();
    c.push((
        ToServer,
        cat(&[
            parse("", "INSERT INTO a VALUES ($1)"),
            bind("", &[Some(b"1")]),
            execute(0),
            parse("", "INSERT INTO b VALUES ($1)"),
            bind("", &[Some(b"2")]),
            execute(0),
            sync(),
            parse("", "SELECT now()"),
            bind("", &[]),
            execute(0),
            sync(),
        ]),
    ));
    c.push((
        ToClient,
        cat(&[msg(b'1', b""), msg(b'2', b""), error("23505"), ready(b'I')]),
    ));
    c.push((ToClient, extended_one_row()));
    let (ex, err) = run(&c);
    assert_eq!(err, None);
    assert_eq!(
        labels(&ex),
        norms(&["INSERT INTO a VALUES ($1)", "SELECT now()"])
    );
    assert_eq!(ex[0].status, Some(Status::Sqlstate("23505".into())));
    assert_eq!(
        ex[0].transaction, None,
        "the Sync goes with the last Execute"
    );
    assert_eq!(ex[1].status, None);
    assert_eq!(ex[1].params_digest, None, "no values, no literals");
}

#[test]
fn copy_in_and_copy_out() {
    let mut c = begin();
    c.push((ToServer, q("COPY items FROM STDIN")));
    c.push((ToClient, msg(b'G', &[0, 0, 1, 0, 0])));
    c.push((
        ToServer,
        cat(&[msg(b'd', b"1\tsecret-4111\n"), msg(b'd', b"2\tb\n")]),
    ));
    c.push((ToServer, msg(b'c', b"")));
    c.push((ToClient, cat(&[complete("COPY 2"), ready(b'I')])));
    c.push((ToServer, q("COPY items TO STDOUT")));
    c.push((
        ToClient,
        cat(&[
            msg(b'H', &[0, 0, 1, 0, 0]),
            msg(b'd', b"1\ta\n"),
            msg(b'd', b"2\tb\n"),
            msg(b'c', b""),
        ]),
    ));
    c.push((ToClient, cat(&[complete("COPY 2"), ready(b'I')])));
    let (ex, err) = run(&c);
    assert_eq!(err, None);
    assert_eq!(
        labels(&ex),
        norms(&["COPY items FROM STDIN", "COPY items TO STDOUT"])
    );
    assert_eq!((ex[0].rows, ex[1].rows), (Some(2), Some(2)));
    assert_eq!(ex[0].request_packets, (3, 6), "COPY data is request");
    assert_eq!(ex[0].response_packets, Some((4, 7)));
    assert_eq!(ex[1].response_packets, Some((9, 10)));
    assert_eq!(
        ex[1].response_bytes,
        (c[8].1.len() + complete("COPY 2").len()) as u64
    );
}

#[test]
fn transaction_states() {
    let mut c = begin();
    for (query, answer, status) in [
        ("BEGIN", complete("BEGIN"), b'T'),
        ("INSERT INTO t VALUES (1)", complete("INSERT 0 1"), b'T'),
        ("SELECT nope", error("42703"), b'E'),
        ("COMMIT", complete("ROLLBACK"), b'I'),
    ] {
        c.push((ToServer, q(query)));
        c.push((ToClient, cat(&[answer, ready(status)])));
    }
    let (ex, err) = run(&c);
    assert_eq!(err, None);
    let tx: Vec<_> = ex.iter().map(|e| e.transaction).collect();
    use TxState::*;
    assert_eq!(
        tx,
        [
            Some(InTransaction),
            Some(InTransaction),
            Some(Failed),
            Some(Idle)
        ]
    );
    assert_eq!(ex[1].rows, Some(1));
    assert!(ex[2].status.as_ref().is_some_and(Status::is_error));
}

#[test]
fn error_stops_the_rest_of_a_query() {
    let mut c = begin();
    c.push((ToServer, q("SELECT 1; SELECT nope; SELECT 3")));
    c.push((
        ToClient,
        cat(&[
            row_desc(),
            row(b"1"),
            complete("SELECT 1"),
            error("42703"),
            ready(b'I'),
        ]),
    ));
    let (ex, _) = run(&c);
    assert_eq!(ex.len(), 2, "the third statement never ran");
    assert_eq!(ex[1].status, Some(Status::Sqlstate("42703".into())));
    assert_eq!(ex[1].transaction, Some(TxState::Idle));
    assert_eq!(ex[1].response_packets, Some((4, 4)));
}

/// Statements prepared by name before the capture keep their name as their
/// identity: executions of one name are one statement with other values,
/// two names are two statements (pgJDBC past its prepare threshold sends
/// only `S_n`, COMMIT included). The unnamed statement has no identity.
#[test]
fn statements_prepared_before_the_capture_are_told_apart_by_name() {
    let mut to_server = Vec::new();
    let mut to_client = Vec::new();
    for (name, value) in [
        ("S_3", Some(&b"1"[..])),
        ("S_3", Some(&b"2"[..])),
        ("S_4", Some(&b"1"[..])),
        ("S_9", None),
        ("", Some(&b"1"[..])),
    ] {
        let values: Vec<Option<&[u8]>> = value.into_iter().map(Some).collect();
        to_server.extend(cat(&[bind(name, &values), execute(0), sync()]));
        to_client.extend(cat(&[msg(b'2', b""), complete("SELECT 1"), ready(b'I')]));
    }
    let c: Chunks = vec![(ToServer, to_server), (ToClient, to_client)];
    let (ex, err) = run_from(Start::MidStream, &c);
    assert_eq!(err, None);
    let l = labels(&ex);
    assert_eq!(l.len(), 5, "{l:?}");
    assert_eq!(l[0], l[1], "one statement, other values");
    assert_ne!(ex[0].params_digest, ex[1].params_digest);
    assert_ne!(l[0], l[2], "two names, two statements");
    assert_eq!(
        l[2],
        "? (statement S_4, 1 parameter, SELECT, prepared before the capture)"
    );
    assert_eq!(
        l[3],
        "? (statement S_9, 0 parameters, SELECT, prepared before the capture)"
    );
    assert_eq!(l[4], UNKNOWN_STATEMENT);
    // A name is shown printable and bounded, whatever the client sent.
    let odd = prepared_before(&[b'a', 0xff, b'\n', b'b'], Some(2));
    assert_eq!(
        odd,
        "? (statement a??b, 2 parameters, prepared before the capture)"
    );
    let long = prepared_before(&[b'x'; 300], None);
    assert!(long.len() < 120 && long.contains("…"), "{long}");
}

/// What the answers show of a statement prepared before the capture joins
/// its label: the verb of its tag, the columns of its rows once one came
/// back. An execution with no rows does not say, but one learned before it
/// does: one statement, one label, once known.
#[test]
fn a_statement_prepared_before_is_labelled_with_what_its_answers_show() {
    let mut to_server = Vec::new();
    let mut to_client = Vec::new();
    for rows in [0, 2, 0] {
        to_server.extend(cat(&[bind("s17", &[Some(b"1")]), execute(0), sync()]));
        to_client.extend(msg(b'2', b""));
        for _ in 0..rows {
            to_client.extend(row(b"x"));
        }
        to_client.extend(cat(&[complete(&format!("SELECT {rows}")), ready(b'I')]));
    }
    to_server.extend(cat(&[bind("s18", &[Some(b"1")]), execute(0), sync()]));
    to_client.extend(cat(&[msg(b'2', b""), complete("UPDATE 1"), ready(b'I')]));
    // Mid-stream, the server's side is trusted from a ReadyForQuery on.
    let c: Chunks = vec![
        (ToClient, ready(b'I')),
        (ToServer, to_server),
        (ToClient, to_client),
    ];
    let (ex, err) = run_from(Start::MidStream, &c);
    assert_eq!(err, None);
    let l = labels(&ex);
    assert_eq!(l.len(), 4, "{l:?}");
    assert_eq!(
        l[0],
        "? (statement s17, 1 parameter, SELECT, prepared before the capture)"
    );
    let shaped = "? (statement s17, 1 parameter → 1 column, SELECT, prepared before the capture)";
    assert_eq!((l[1].as_str(), l[2].as_str()), (shaped, shaped));
    assert_eq!(
        l[3],
        "? (statement s18, 1 parameter, UPDATE, prepared before the capture)"
    );
}

/// A pooled connection idle when the capture began: its next request is
/// the first thing seen, and the server's first bytes answer it. They are
/// read at once, unless they do not fit it (an answer to a request sent
/// before the capture, or bytes from inside one).
#[test]
fn an_idle_connection_seen_from_its_next_request_is_answered_at_once() {
    let ask = cat(&[bind("S_1", &[Some(b"7")]), execute(0), sync()]);
    let answer = cat(&[msg(b'2', b""), row(b"x"), complete("SELECT 1"), ready(b'I')]);
    let c: Chunks = vec![(ToServer, ask.clone()), (ToClient, answer.clone())];
    let (ex, err) = run_from(Start::MidStream, &c);
    assert_eq!(err, None);
    assert_eq!(ex.len(), 1);
    assert!(ex[0].response_last_at_us.is_some(), "{ex:?}");
    assert_eq!(ex[0].rows, Some(1));
    // The server's first bytes answer a Query sent before the capture.
    let earlier = cat(&[complete("SELECT 1"), ready(b'I')]);
    let c: Chunks = vec![
        (ToServer, ask.clone()),
        (ToClient, cat(&[earlier, answer.clone()])),
    ];
    let (ex, _) = run_from(Start::MidStream, &c);
    assert_eq!(ex.len(), 1);
    assert_eq!(ex[0].response_last_at_us, None, "{ex:?}");
    // Bytes from inside an earlier answer that happen to begin with an
    // answer's type, but not with its length: not trusted.
    let c: Chunks = vec![
        (ToServer, ask.clone()),
        (
            ToClient,
            cat(&[b"2\x00\x00\x01\x00".to_vec(), answer.clone()]),
        ),
    ];
    let (ex, _) = run_from(Start::MidStream, &c);
    assert!(ex.iter().all(|e| e.response_last_at_us.is_none()), "{ex:?}");
    // The client's first bytes begin inside a message: not trusted either.
    let mut tail = b"\x00\x00\x00\x04".to_vec();
    tail.extend_from_slice(&ask);
    let c: Chunks = vec![(ToServer, tail), (ToClient, answer)];
    let (ex, _) = run_from(Start::MidStream, &c);
    assert!(ex.iter().all(|e| e.response_last_at_us.is_none()), "{ex:?}");
}

#[test]
fn midstream_statement_parsed_before_the_capture() {
    let mut c: Chunks = vec![
        // The tail of a DataRow and of the answer before the capture began.
        (
            ToClient,
            cat(&[b"\x00\x01tail".to_vec(), complete("SELECT 1"), ready(b'I')]),
        ),
        (
            ToServer,
            cat(&[bind("S_7", &[Some(b"secret-4111")]), execute(0), sync()]),
        ),
        (
            ToClient,
            cat(&[msg(b'2', b""), row(b"x"), complete("SELECT 1"), ready(b'I')]),
        ),
    ];
    let (ex, err) = run_from(Start::MidStream, &c);
    assert_eq!(err, None);
    assert_eq!(
        labels(&ex),
        ["? (statement S_7, 1 parameter → 1 column, SELECT, prepared before the capture)"]
    );
    assert_eq!(ex[0].rows, Some(1));
    assert!(ex[0].params_digest.is_some());
    // Client bytes starting inside a message: resync on the next one; a
    // statement parsed after the capture began is known.
    c.push((
        ToServer,
        cat(&[
            b"ELECT 1\0".to_vec(),
            parse("S_8", "SELECT 2"),
            bind("S_8", &[]),
            execute(0),
            sync(),
        ]),
    ));
    c.push((
        ToClient,
        cat(&[
            msg(b'1', b""),
            msg(b'2', b""),
            complete("SELECT 1"),
            ready(b'T'),
        ]),
    ));
    c.remove(1);
    c.remove(1);
    let (ex, err) = run_from(Start::MidStream, &c);
    assert_eq!(err, None);
    assert_eq!(labels(&ex), norms(&["SELECT 2"]));
    assert_eq!(ex[0].transaction, Some(TxState::InTransaction));
}

#[test]
fn portal_suspended_and_resumed() {
    let mut c = begin();
    c.push((
        ToServer,
        cat(&[
            parse("", "SELECT * FROM big"),
            bind("", &[]),
            execute(2),
            msg(b'H', b""),
        ]),
    ));
    c.push((
        ToClient,
        cat(&[
            msg(b'1', b""),
            msg(b'2', b""),
            row(b"1"),
            row(b"2"),
            msg(b's', b""),
        ]),
    ));
    c.push((ToServer, cat(&[execute(2), sync()])));
    c.push((
        ToClient,
        cat(&[row(b"3"), complete("SELECT 1"), ready(b'T')]),
    ));
    let (ex, err) = run(&c);
    assert_eq!(err, None);
    assert_eq!(
        labels(&ex),
        norms(&["SELECT * FROM big", "SELECT * FROM big"])
    );
    assert_eq!(ex[0].rows, None);
    assert_eq!(ex[1].rows, Some(1));
    assert_eq!(ex[1].transaction, Some(TxState::InTransaction));
}

#[test]
fn function_call_and_prepare_only() {
    let mut c = begin();
    let mut f = 1234u32.to_be_bytes().to_vec();
    f.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 4, b'1', b'2', b'3', b'4', 0, 0]);
    c.push((ToServer, msg(b'F', &f)));
    c.push((
        ToClient,
        cat(&[msg(b'V', &[0, 0, 0, 1, b'1']), ready(b'I')]),
    ));
    // JDBC prepares with Parse/Describe/Sync: no exchange unless it fails.
    c.push((
        ToServer,
        cat(&[parse("S_2", "SELECT 1"), msg(b'D', b"SS_2\0"), sync()]),
    ));
    c.push((
        ToClient,
        cat(&[msg(b'1', b""), msg(b't', &[0, 0]), row_desc(), ready(b'I')]),
    ));
    c.push((
        ToServer,
        cat(&[parse("S_3", "SELEC 1"), msg(b'D', b"SS_3\0"), sync()]),
    ));
    c.push((ToClient, cat(&[error("42601"), ready(b'I')])));
    let (ex, err) = run(&c);
    assert_eq!(err, None);
    assert_eq!(labels(&ex), [FUNCTION_CALL.to_string(), norm("SELEC 1")]);
    assert_eq!(ex[0].transaction, Some(TxState::Idle));
    assert_eq!(ex[1].status, Some(Status::Sqlstate("42601".into())));
}

#[test]
fn tls_and_gss_stop_parsing() {
    let c: Chunks = vec![
        (ToServer, untyped(80_877_103, b"")),
        (ToClient, b"S".to_vec()),
        (
            ToServer,
            b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03".to_vec(),
        ),
    ];
    let (ex, err) = run(&c);
    assert!(ex.is_empty());
    assert_eq!(err.as_deref(), Some("TLS after SSLRequest"));
    let c: Chunks = vec![
        (ToServer, untyped(80_877_104, b"")),
        (ToClient, b"N".to_vec()),
        (ToServer, startup()),
        (ToClient, server_hello()),
        (ToServer, q("SELECT 1")),
        (ToClient, cat(&[complete("SELECT 1"), ready(b'I')])),
    ];
    let (ex, err) = run(&c);
    assert_eq!(err, None);
    assert_eq!(ex.len(), 1);
}

#[test]
fn sniff_beginning_and_midstream() {
    use Sniff::*;
    let s = |b: &[u8], st| PgAnalyzer::sniff(b, st);
    assert_eq!(s(&startup(), Start::Beginning), Yes);
    assert_eq!(s(&untyped(80_877_103, b""), Start::Beginning), Yes);
    assert_eq!(s(&untyped(80_877_104, b""), Start::Beginning), Yes);
    assert_eq!(s(&untyped(80_877_102, &[0; 8]), Start::Beginning), Yes);
    assert_eq!(s(&startup()[..5], Start::Beginning), NeedMore);
    assert_eq!(s(b"GET / HTTP/1.1\r\n", Start::Beginning), No);
    assert_eq!(s(b"*1\r\n$4\r\nPING\r\n", Start::Beginning), No);
    assert_eq!(s(&untyped(80_877_103, b"xx"), Start::Beginning), No);
    let two = cat(&[bind("S_1", &[Some(b"1")]), execute(0), sync()]);
    assert_eq!(s(&two, Start::MidStream), Yes);
    assert_eq!(
        s(&[b"xyz".to_vec(), two.clone()].concat(), Start::MidStream),
        Yes
    );
    assert_eq!(s(&q("SELECT 1"), Start::MidStream), NeedMore);
    let text = "GET /index.html HTTP/1.1\r\nHost: example.com\r\nQ: x\r\n\r\n".repeat(80);
    assert_eq!(s(text.as_bytes(), Start::MidStream), No);
    assert_eq!(
        s(
            b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n",
            Start::MidStream
        ),
        No
    );
}

#[test]
fn messages_read_whole_equal_messages_read_in_pieces() {
    let what = |ex: &[Exchange]| {
        ex.iter()
            .map(|e| {
                let e = e.clone();
                (
                    e.request,
                    e.status,
                    e.rows,
                    e.transaction,
                    e.params_digest,
                    e.request_bytes,
                    e.response_bytes,
                )
            })
            .collect::<Vec<_>>()
    };
    let sql = "SELECT * FROM t WHERE id = $1 AND pw = $2";
    for session in [psql_session(), jdbc_session(sql)] {
        let (whole, err) = run(&session);
        assert_eq!(err, None);
        assert!(whole.len() >= 3);
        for size in [1, 2, 5, 7] {
            let mut chunks: Chunks = Vec::new();
            for (d, data) in &session {
                chunks.extend(data.chunks(size).map(|b| (*d, b.to_vec())));
            }
            let (ex, err) = run(&chunks);
            assert_eq!(err, None, "in pieces of {size}");
            assert_eq!(what(&ex), what(&whole), "in pieces of {size}");
        }
    }
}
