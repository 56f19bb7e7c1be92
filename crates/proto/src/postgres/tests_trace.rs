//! sqlcommenter comments: the trace id on the statement, the comment out of its shape.

use super::test_wire::*;
use whyslow_model::Direction::{ToClient, ToServer};
use whyslow_model::TraceId;

const TRACE: &str = "0af7651916cd43dd8448eb211c80319c";

fn commented(sql: &str, flags: &str) -> String {
    format!("{sql} /*db_driver='psycopg2',traceparent='00-{TRACE}-b7ad6b7169203331-{flags}'*/")
}

#[test]
fn simple_queries_carry_their_comment_trace() {
    let mut chunks = begin();
    chunks.extend([
        (
            ToServer,
            q(&commented("SELECT * FROM t WHERE id = 7", "03")),
        ),
        (
            ToClient,
            cat(&[row_desc(), row(b"1"), complete("SELECT 1"), ready(b'I')]),
        ),
        (ToServer, q("SELECT * FROM t WHERE id = 8")),
        (
            ToClient,
            cat(&[row_desc(), row(b"1"), complete("SELECT 1"), ready(b'I')]),
        ),
    ]);
    let (ex, err) = run(&chunks);
    assert_eq!(err, None);
    assert_eq!(ex.len(), 2);
    let want = TraceId(u128::from_str_radix(TRACE, 16).unwrap());
    assert_eq!(ex[0].trace, Some(want));
    assert_eq!(ex[1].trace, None);
    assert_eq!(
        ex[0].request, ex[1].request,
        "the comment is not in the shape"
    );
    assert_eq!(ex[0].params_digest.is_some(), ex[1].params_digest.is_some());
}

#[test]
fn a_named_statement_carries_its_texts_trace_to_every_bind() {
    // tokio-postgres: Parse + Describe + Sync (no exchange of its own),
    // then Bind + Execute + Sync.
    let mut chunks = begin();
    chunks.extend([
        (
            ToServer,
            cat(&[
                parse("s1", &commented("SELECT a FROM t WHERE id = $1", "01")),
                msg(b'D', b"Ss1\0"),
                sync(),
            ]),
        ),
        (
            ToClient,
            cat(&[msg(b'1', b""), msg(b't', &[0, 0]), row_desc(), ready(b'I')]),
        ),
        (
            ToServer,
            cat(&[bind("s1", &[Some(b"7")]), execute(0), sync()]),
        ),
        (ToClient, extended_one_row()),
        (
            ToServer,
            cat(&[bind("", &[Some(b"7")]), execute(0), sync()]),
        ),
        (ToClient, extended_one_row()),
    ]);
    let (ex, err) = run(&chunks);
    assert_eq!(err, None);
    assert_eq!(ex.len(), 2, "{ex:#?}");
    assert!(ex[0].trace.is_some(), "{ex:#?}");
    assert_eq!(ex[1].trace, None, "an unknown statement names no trace");
}

#[test]
fn a_malformed_trace_is_noted_and_dropped() {
    let mut chunks = begin();
    chunks.extend([
        (
            ToServer,
            q("SELECT 1 /*traceparent='00-zz-b7ad6b7169203331-01'*/"),
        ),
        (
            ToClient,
            cat(&[row_desc(), row(b"1"), complete("SELECT 1"), ready(b'I')]),
        ),
    ]);
    let (ex, err) = run(&chunks);
    assert_eq!(ex.len(), 1);
    assert_eq!(ex[0].trace, None);
    assert!(err.unwrap().contains("traceparent"));
}
