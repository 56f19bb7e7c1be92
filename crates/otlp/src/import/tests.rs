use super::record::kind;
use super::*;
use crate::proto::{KeyValue, Resource, ResourceSpans, ScopeSpans, Span};
use whyslow_model::{Attribution, ExchangeRole};

const MS: u64 = 1_000_000;

fn span(trace: u128, id: u64, parent: u64, k: i32, ms: (u64, u64), attrs: Vec<KeyValue>) -> Span {
    Span {
        trace_id: trace.to_be_bytes().to_vec(),
        span_id: id.to_be_bytes().to_vec(),
        parent_span_id: if parent == 0 {
            Vec::new()
        } else {
            parent.to_be_bytes().to_vec()
        },
        name: "span".into(),
        kind: k,
        start_time_unix_nano: ms.0 * MS,
        end_time_unix_nano: ms.1 * MS,
        attributes: attrs,
        ..Default::default()
    }
}

fn request(service: &str, spans: Vec<Span>) -> ExportTraceServiceRequest {
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource: Some(Resource {
                attributes: vec![KeyValue::string("service.name", service)],
                dropped_attributes_count: 0,
            }),
            scope_spans: vec![ScopeSpans {
                spans,
                ..Default::default()
            }],
            schema_url: String::new(),
        }],
    }
}

fn sql(statement: &str) -> Vec<KeyValue> {
    vec![
        KeyValue::string("db.system", "postgresql"),
        KeyValue::string("db.statement", statement),
        KeyValue::string("net.peer.name", "127.0.0.1"),
        KeyValue::int("net.peer.port", 5432),
    ]
}

fn http_server() -> Vec<KeyValue> {
    vec![
        KeyValue::string("http.request.method", "GET"),
        KeyValue::string("url.path", "/checkout"),
    ]
}

/// Two requests of one trace each: a server span, an INTERNAL span under
/// it, and `n` statements under that, one after another.
fn two_requests(n: u64) -> Vec<Span> {
    let mut out = Vec::new();
    for r in 0..2u64 {
        let trace = 0xabc0 + u128::from(r);
        let at = r * 5; // overlapping requests
        out.push(span(
            trace,
            1,
            0,
            kind::SERVER,
            (at, at + 100),
            http_server(),
        ));
        out.push(span(trace, 2, 1, kind::INTERNAL, (at + 1, at + 99), vec![]));
        for i in 0..n {
            let s = at + 2 + i * 4;
            out.push(span(
                trace,
                10 + i,
                2,
                kind::CLIENT,
                (s, s + 3),
                sql(&format!("SELECT * FROM items WHERE id = {i}")),
            ));
        }
    }
    out
}

fn framed(reqs: &[ExportTraceServiceRequest]) -> Vec<u8> {
    crate::frames(reqs)
}

#[test]
fn calls_are_given_to_their_nearest_server_ancestor() {
    let set = read_bytes(&framed(&[request("front", two_requests(6))]));
    assert_eq!(set.spans.len(), 2 * 8, "{:?}", set.notes);
    let st = to_timeline(&set);
    assert_eq!(st.service.as_deref(), Some("front"));
    let t = &st.timeline;
    let inbound: Vec<_> = t
        .exchanges
        .iter()
        .filter(|e| e.role == ExchangeRole::Inbound)
        .collect();
    assert_eq!(inbound.len(), 2);
    for r in &inbound {
        let calls: Vec<_> = t
            .exchanges
            .iter()
            .filter(|e| e.span_parent == Some(r.id))
            .collect();
        assert_eq!(calls.len(), 6);
        assert!(calls.iter().all(|c| c.trace == r.trace));
        assert!(calls
            .iter()
            .all(|c| c.request == "SELECT * FROM items WHERE id = ?"));
    }
    // One at a time per request, two requests at once: two lanes.
    let lanes: std::collections::HashSet<u32> = t
        .exchanges
        .iter()
        .filter(|e| e.role == ExchangeRole::Outbound)
        .map(|e| e.connection)
        .collect();
    assert_eq!(lanes.len(), 2);
}

#[test]
fn json_lines_read_as_protobuf_frames_do() {
    let spans = two_requests(3);
    let mut line = String::from(
        r#"{"resourceSpans":[{"resource":{"attributes":[{"key":"service.name","value":{"stringValue":"front"}}]},"scopeSpans":[{"spans":["#,
    );
    for (n, s) in spans.iter().enumerate() {
        let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
        let attrs: Vec<String> = s
            .attributes
            .iter()
            .map(
                |kv| match kv.value.as_ref().unwrap().value.as_ref().unwrap() {
                    crate::proto::Value::StringValue(v) => format!(
                        r#"{{"key":"{}","value":{{"stringValue":"{}"}}}}"#,
                        kv.key, v
                    ),
                    crate::proto::Value::IntValue(v) => {
                        format!(r#"{{"key":"{}","value":{{"intValue":"{}"}}}}"#, kv.key, v)
                    }
                    _ => unreachable!(),
                },
            )
            .collect();
        line.push_str(&format!(
            r#"{}{{"traceId":"{}","spanId":"{}","parentSpanId":"{}","name":"{}","kind":{},"startTimeUnixNano":"{}","endTimeUnixNano":"{}","attributes":[{}]}}"#,
            if n > 0 { "," } else { "" },
            hex(&s.trace_id),
            hex(&s.span_id),
            hex(&s.parent_span_id),
            s.name,
            s.kind,
            s.start_time_unix_nano,
            s.end_time_unix_nano,
            attrs.join(",")
        ));
    }
    line.push_str("]}]}]}\n");
    let from_json = read_bytes(line.as_bytes());
    let from_proto = read_bytes(&framed(&[request("front", spans)]));
    assert!(from_json.notes.is_empty(), "{:?}", from_json.notes);
    assert_eq!(from_json.spans, from_proto.spans);
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    std::io::Write::write_all(&mut gz, line.as_bytes()).unwrap();
    assert_eq!(read_bytes(&gz.finish().unwrap()).spans, from_proto.spans);
}

#[test]
fn a_cut_or_corrupt_file_keeps_what_came_before() {
    let whole = framed(&[
        request("front", two_requests(2)),
        request("front", two_requests(2)),
    ]);
    let first_len = u32::from_be_bytes(whole[..4].try_into().unwrap()) as usize + 4;
    let cut = read_bytes(&whole[..whole.len() - 3]);
    assert_eq!(cut.spans.len(), 8);
    assert!(
        cut.notes.iter().any(|n| n.contains("cut short")),
        "{:?}",
        cut.notes
    );
    let mut huge = whole[..first_len].to_vec();
    huge.extend_from_slice(&[0xff, 0xff, 0xff, 0xf0, 0x0a]);
    let set = read_bytes(&huge);
    assert_eq!(set.spans.len(), 8);
    assert!(
        set.notes.iter().any(|n| n.contains("past")),
        "{:?}",
        set.notes
    );
    let mut garbage = whole[..first_len].to_vec();
    garbage.extend_from_slice(&[0, 0, 0, 3, 0xff, 0xff, 0xff]);
    let set = read_bytes(&garbage);
    assert_eq!(set.spans.len(), 8);
    assert!(
        set.notes.iter().any(|n| n.contains("frame 2")),
        "{:?}",
        set.notes
    );
    let bad_json = read_bytes(b"{\"resourceSpans\": [\n{\"resourceSpans\":[]}\n");
    assert!(
        bad_json.notes.iter().any(|n| n.contains("line 1")),
        "{:?}",
        bad_json.notes
    );
    assert_eq!(bad_json.requests, 1);
}

#[test]
fn missing_parents_cycles_and_skew_are_counted_not_fatal() {
    let t = 0x77u128;
    let spans = vec![
        span(t, 1, 0, kind::SERVER, (0, 50), http_server()),
        // Parent never exported: a call of no known request.
        span(t, 2, 99, kind::CLIENT, (5, 6), sql("SELECT 1")),
        // A loop of two INTERNAL spans.
        span(t, 3, 4, kind::INTERNAL, (1, 2), vec![]),
        span(t, 4, 3, kind::INTERNAL, (1, 2), vec![]),
        span(t, 5, 3, kind::CLIENT, (7, 8), sql("SELECT 2")),
        // Outside its parent: another host's clock.
        span(t, 6, 1, kind::CLIENT, (45, 70), sql("SELECT 3")),
    ];
    let st = to_timeline(&read_bytes(&framed(&[request("front", spans)])));
    assert_eq!(st.calls_without_request, 1);
    assert_eq!(st.broken_chains, 1);
    assert_eq!(st.skewed, 1);
    let skewed = st
        .timeline
        .exchanges
        .iter()
        .find(|e| e.request_first_at_us == 45_000)
        .unwrap();
    assert!(skewed.response_last_at_us.unwrap() <= 50_000, "{skewed:?}");
    assert_eq!(st.timeline.exchanges.len(), 4);
}

/// A GET to the traced API at 127.0.0.1:9000, as a client span's attributes.
fn api_get() -> Vec<KeyValue> {
    vec![
        KeyValue::string("http.method", "GET"),
        KeyValue::string("http.url", "http://127.0.0.1:9000/data/1"),
    ]
}

/// The front's spans and the API's (`callee`), read as one file: the
/// front's calls, in start order, and what reading them found.
fn front_calling_api(
    front: Vec<Span>,
    callee: Vec<Span>,
) -> (SpanTimeline, Vec<whyslow_model::Exchange>) {
    let st = to_timeline(&read_bytes(&framed(&[
        request("front", front),
        request("api", callee),
    ])));
    let calls = st
        .timeline
        .exchanges
        .iter()
        .filter(|e| e.role == ExchangeRole::Outbound)
        .cloned()
        .collect();
    (st, calls)
}

#[test]
fn a_traced_callee_says_when_a_queued_call_was_sent() {
    let t = 0x99u128;
    let api = |id, parent, ms| {
        let mut s = span(t, id, parent, kind::SERVER, ms, http_server());
        s.name = "GET /data".into();
        s
    };
    let get = api_get();
    let front = vec![
        span(t, 1, 0, kind::SERVER, (0, 100), http_server()),
        span(t, 2, 1, kind::CLIENT, (1, 31), get.clone()),
        // Waited 30 ms for the connection the first call held.
        span(t, 3, 1, kind::CLIENT, (1, 61), get),
    ];
    let callee = vec![api(10, 2, (1, 30)), api(11, 3, (31, 60))];
    let (st, calls) = front_calling_api(front, callee);
    assert_eq!(st.service.as_deref(), Some("front"));
    assert_eq!(st.other_services, vec!["api".to_string()]);
    assert_eq!(calls.len(), 2);
    assert_eq!(calls[1].request_first_at_us, 31_000);
    assert_eq!(
        calls[0].connection, calls[1].connection,
        "the second followed the first"
    );
}

#[test]
fn a_wait_is_for_a_connection_only_while_the_lanes_were_full() {
    let t = 0x98u128;
    let api = |id, parent, ms| span(t, id, parent, kind::SERVER, ms, http_server());
    let get = api_get();
    let front = vec![
        span(t, 1, 0, kind::SERVER, (0, 200), http_server()),
        span(t, 2, 1, kind::CLIENT, (1, 31), get.clone()),
        // Reached the callee 40 ms late, its one lane busy for 30 of them
        // (a slow handoff): a wait for the connection.
        span(t, 3, 1, kind::CLIENT, (1, 81), get.clone()),
        // Reached it 40 ms late with its lane free: the callee's delay.
        span(t, 4, 1, kind::CLIENT, (100, 160), get),
    ];
    let callee = vec![
        api(10, 2, (1, 30)),
        api(11, 3, (41, 80)),
        api(12, 4, (140, 159)),
    ];
    let (st, calls) = front_calling_api(front, callee);
    assert_eq!(st.waits_not_for_a_connection, 1);
    assert_eq!(calls.len(), 3);
    assert_eq!(calls[1].request_first_at_us, 41_000);
    assert_eq!(calls[1].waited_before_sent(), Some(true));
    assert_eq!(calls[2].waited_before_sent(), Some(false));
}

#[test]
fn not_otlp_is_an_error_with_no_spans() {
    assert!(!looks_like_otlp(&[0xd4, 0xc3, 0xb2, 0xa1, 2, 0]));
    assert!(!looks_like_otlp(&[0x0a, 0x0d, 0x0d, 0x0a, 0x1c, 0]));
    assert!(looks_like_otlp(b"  {\"resourceSpans\":[]}"));
    let set = read_bytes(b"\x00\x00\x00\x02\x0a\x99");
    assert!(set.spans.is_empty() && !set.notes.is_empty());
}

/// A request (#1) with three SQL calls on one connection: exact (#2),
/// inferred (#3), and one no request was given (#4); a second request (#5).
fn wire_timeline() -> whyslow_model::Timeline {
    use whyslow_model::{Connection, Exchange, Protocol};
    let conn = |id, client: &str, server: &str| {
        Connection::new(id, client.parse().unwrap(), server.parse().unwrap(), 0)
    };
    let exchange = |id, connection, level: Option<Attribution>, span: (u64, u64)| {
        let mut e = Exchange::new(connection, Protocol::Postgres, "SELECT 1".into());
        e.id = id;
        e.role = ExchangeRole::Outbound;
        e.request_first_at_us = span.0;
        e.request_last_at_us = span.0;
        e.response_first_at_us = Some(span.1);
        e.response_last_at_us = Some(span.1);
        e.attribution = level;
        e.parent = level.filter(|l| *l != Attribution::Ambiguous).map(|_| 1);
        e
    };
    let mut req = exchange(1, 1, None, (1_000, 9_000));
    let mut other = exchange(5, 3, None, (3_500, 8_000));
    for r in [&mut req, &mut other] {
        (r.protocol, r.role, r.request) = (Protocol::Http1, ExchangeRole::Inbound, "GET /".into());
    }
    whyslow_model::Timeline {
        connections: vec![
            conn(1, "127.0.0.1:40000", "127.0.0.1:8080"),
            conn(2, "127.0.0.1:40001", "127.0.0.1:5432"),
            conn(3, "127.0.0.1:40002", "127.0.0.1:8080"),
        ],
        exchanges: vec![
            req,
            exchange(2, 2, Some(Attribution::TraceContext), (2_000, 3_000)),
            exchange(3, 2, Some(Attribution::Inferred), (3_000, 3_400)),
            exchange(4, 2, Some(Attribution::Ambiguous), (4_000, 5_000)),
            other,
        ],
    }
}

#[test]
fn spans_written_from_the_wire_read_back_as_the_wire_had_them() {
    let set = read_bytes(&crate::file(&wire_timeline(), &[]));
    assert_eq!(set.spans.len(), 5, "{:?}", set.notes);
    let st = to_timeline(&set);
    let t = &st.timeline;
    let calls: Vec<_> = t
        .exchanges
        .iter()
        .filter(|e| e.role == ExchangeRole::Outbound)
        .collect();
    // Every call, the unattributed one too, on the connection it used,
    // with its wire times: not a wait the spans could not have seen.
    assert_eq!(calls.len(), 3);
    assert!(calls.iter().all(|c| c.connection == calls[0].connection));
    let conn = &t.connections[calls[0].connection as usize - 1];
    assert_eq!(conn.client.port(), 40001);
    assert!(calls.iter().all(|c| c.due_at_us.is_none()));
    // The exact parent is the source's word; the guessed one is guessed
    // again, and so is the one no request was given.
    assert!(calls[0].span_parent.is_some());
    assert!(calls[1..]
        .iter()
        .all(|c| c.span_parent.is_none() && c.trace.is_none()));
}

#[test]
fn children_before_their_parents_are_given_as_in_order() {
    let mut spans = two_requests(6);
    let in_order = to_timeline(&read_bytes(&framed(&[request("front", spans.clone())])));
    // Each child in a request of its own, before its parent's request.
    spans.reverse();
    let reqs: Vec<_> = spans
        .into_iter()
        .map(|s| request("front", vec![s]))
        .collect();
    let reversed = to_timeline(&read_bytes(&framed(&reqs)));
    let parents = |st: &SpanTimeline| {
        let mut v: Vec<_> = st
            .timeline
            .exchanges
            .iter()
            .map(|e| {
                (
                    e.request_first_at_us,
                    e.role,
                    e.parent.is_some(),
                    e.attribution,
                )
            })
            .collect();
        v.sort_by_key(|x| (x.0, x.2));
        v
    };
    assert_eq!(parents(&reversed), parents(&in_order));
    assert_eq!(reversed.calls_without_request, 0);
}

#[test]
fn an_oversized_attribute_is_cut_before_it_is_read() {
    let statement = format!(
        "SELECT * FROM items WHERE id = 7 AND note = '{}'",
        "x".repeat(8 << 20)
    );
    let spans = vec![
        span(9, 1, 0, kind::SERVER, (0, 10), http_server()),
        span(9, 2, 1, kind::CLIENT, (1, 2), sql(&statement)),
    ];
    let set = read_bytes(&framed(&[request("front", spans)]));
    assert_eq!(set.spans.len(), 2, "{:?}", set.notes);
    let call = &set.spans[1];
    assert!(
        call.request.len() <= MAX_ATTRIBUTE_BYTES,
        "{}",
        call.request.len()
    );
    assert!(!call.request.contains("xxxx"), "a literal reported");
    assert!(call.request.starts_with("SELECT * FROM items WHERE id = ?"));
}
