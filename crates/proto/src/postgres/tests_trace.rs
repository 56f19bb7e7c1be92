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
fn only_unnamed_statements_name_their_request() {
    let mut chunks = begin();
    for name in ["", "s1"] {
        chunks.extend([
            (
                ToServer,
                cat(&[
                    parse(name, &commented("SELECT a FROM t WHERE id = $1", "01")),
                    bind(name, &[Some(b"7")]),
                    execute(0),
                    sync(),
                ]),
            ),
            (ToClient, extended_one_row()),
        ]);
    }
    let (ex, err) = run(&chunks);
    assert_eq!(err, None);
    assert_eq!(ex.len(), 2, "{ex:#?}");
    assert!(ex[0].trace.is_some());
    assert_eq!(
        ex[1].trace, None,
        "a named statement is run again for others"
    );
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
