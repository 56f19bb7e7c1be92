//! gRPC calls on HTTP/2: statuses from trailers, messages counted and
//! hashed; and which side sent a connection's first frames.

use super::frame::*;
use super::tests::*;
use super::*;
use whyslow_model::Direction::{ToClient, ToServer};
use whyslow_model::Status;

/// A gRPC message: flag, 4-byte length, bytes.
fn message(body: &[u8]) -> Vec<u8> {
    let mut m = vec![0];
    m.extend((body.len() as u32).to_be_bytes());
    m.extend_from_slice(body);
    m
}

fn grpc_request(stream: u32) -> Vec<u8> {
    let mut block = req_block("POST", "/shop.Items/Get");
    block.extend(lit_new("content-type", "application/grpc"));
    frame(HEADERS, EH, stream, &block)
}

/// One unary call on stream 1: its message split over two DATA frames,
/// answered with `answer` (server frames after the preface's SETTINGS).
fn call(body: &[u8], answer: &[u8]) -> Exchange {
    let m = message(body);
    let (a, b) = m.split_at(3);
    let mut client = client_start();
    client.extend(grpc_request(1));
    client.extend(frame(DATA, 0, 1, a));
    let last = frame(DATA, ES, 1, b);
    let (ex, err) = run(&[(ToServer, &client), (ToServer, &last), (ToClient, answer)]);
    assert_eq!(err, None);
    assert_eq!(ex.len(), 1);
    ex.into_iter().next().unwrap()
}

fn answered(status: &str, messages: &[&[u8]]) -> Vec<u8> {
    let mut v = server_start();
    v.extend(frame(HEADERS, EH, 1, &[0x88]));
    for m in messages {
        v.extend(frame(DATA, 0, 1, &message(m)));
    }
    v.extend(frame(HEADERS, ES | EH, 1, &lit_new("grpc-status", status)));
    v
}

#[test]
fn a_unary_call_has_its_status_rows_and_message_digest() {
    let ok = call(b"item-1", &answered("0", &[b"price"]));
    assert_eq!(ok.request, "POST /shop.Items/Get");
    assert_eq!(ok.status, Some(Status::Grpc(0)));
    assert_eq!(ok.rows, Some(1));
    assert!(ok.params_digest.is_some() && !ok.params_unknown);
    let same = call(b"item-1", &answered("0", &[b"price"]));
    let other = call(b"item-2", &answered("0", &[b"price"]));
    assert_eq!(same.params_digest, ok.params_digest);
    assert_ne!(other.params_digest, ok.params_digest);
    let streamed = call(b"item-1", &answered("0", &[b"a", b"b", b"c"]));
    assert_eq!(streamed.rows, Some(3));
}

#[test]
fn a_trailers_only_answer_carries_the_status() {
    let mut answer = server_start();
    let mut block = vec![0x88];
    block.extend(lit_new("content-type", "application/grpc"));
    block.extend(lit_new("grpc-status", "5"));
    answer.extend(frame(HEADERS, ES | EH, 1, &block));
    let e = call(b"item-x", &answer);
    assert_eq!(e.status, Some(Status::Grpc(5)));
    assert!(!e.status.as_ref().unwrap().is_error(), "NOT_FOUND answers");
    assert_eq!(e.rows, Some(0));
    let unavailable = call(b"item-x", &answered("14", &[]));
    assert!(unavailable.status.unwrap().is_error());
}

#[test]
fn messages_that_cannot_be_followed_give_no_digest() {
    // Padding: a DATA frame's pad length and padding are no message bytes.
    let mut client = client_start();
    client.extend(grpc_request(1));
    let mut padded = vec![2];
    padded.extend(message(b"item-1"));
    padded.extend([0, 0]);
    client.extend(frame(DATA, ES | PADDED, 1, &padded));
    let (ex, _) = run(&[(ToServer, &client), (ToClient, &answered("0", &[b"p"]))]);
    assert_eq!(ex[0].params_digest, None);
    assert!(ex[0].params_unknown);

    // A gap inside the message.
    let mut a = Http2Analyzer::new(7, Start::Beginning);
    let mut client = client_start();
    client.extend(grpc_request(1));
    let data = frame(DATA, ES, 1, &message(b"item-1"));
    client.extend(&data[..12]);
    a.on_data(ToServer, &client, 1000, 1);
    a.on_gap(ToServer, 2);
    a.on_data(ToServer, &data[14..], 2000, 2);
    a.on_data(ToClient, &answered("0", &[b"p"]), 3000, 3);
    let ex = a.finish();
    assert_eq!(ex.len(), 1);
    assert_eq!(ex[0].params_digest, None);
    assert_eq!(ex[0].status, Some(Status::Grpc(0)));
}

#[test]
fn a_plain_post_keeps_its_http_status() {
    let mut client = client_start();
    client.extend(frame(HEADERS, EH, 1, &req_block("POST", "/upload")));
    client.extend(frame(DATA, ES, 1, &message(b"looks like one")));
    let (ex, _) = run(&[(ToServer, &client), (ToClient, &answered("3", &[b"x"]))]);
    assert_eq!(ex[0].status, Some(Status::Http(200)));
    assert_eq!(ex[0].rows, None);
}

#[test]
fn the_first_frames_say_who_sent_them() {
    let settings = frame(SETTINGS, 0, 0, &[0, 3, 0, 0, 0, 100]);
    let request = grpc_request(5);
    let response = frame(HEADERS, EH, 5, &[0x88]);
    assert_eq!(sender_is_client(&request), Some(true));
    assert_eq!(
        sender_is_client(&[settings.clone(), request].concat()),
        Some(true)
    );
    assert_eq!(sender_is_client(&response), Some(false));
    // A size update before :status.
    let updated = frame(HEADERS, EH, 5, &[0x3f, 0xe1, 0x1f, 0x88]);
    assert_eq!(sender_is_client(&updated), Some(false));
    assert_eq!(
        sender_is_client(&frame(PUSH_PROMISE, EH, 5, &[0, 0, 0, 2, 0x82])),
        Some(false)
    );
    // Trailers, a field from the dynamic table, frames only: no telling.
    let trailers = frame(HEADERS, ES | EH, 5, &lit_new("grpc-status", "0"));
    assert_eq!(sender_is_client(&trailers), None);
    assert_eq!(sender_is_client(&frame(HEADERS, EH, 5, &[0xbe])), None);
    // grpc-core's request: :path and :authority from the dynamic table,
    // then POST; a literal before them skipped by its length.
    let mut grpc_core = vec![0xc4, 0xc3];
    grpc_core.extend(lit_new("te", "trailers"));
    grpc_core.extend([0x83, 0x86]);
    assert_eq!(
        sender_is_client(&frame(HEADERS, EH, 5, &grpc_core)),
        Some(true)
    );
    // A literal cut short tells nothing past it.
    assert_eq!(
        sender_is_client(&frame(HEADERS, EH, 5, &[0xc4, 0x40, 0x7f])),
        None
    );
    assert_eq!(sender_is_client(&settings), None);
    assert_eq!(sender_is_client(b"*3\r\n$3\r\nSET\r\n"), None);
    assert_eq!(sender_is_client(&[0, 0, 5, 1, 4, 0, 0, 0]), None);
}

#[test]
fn a_request_whose_headers_predate_the_capture_has_unknown_parameters() {
    // :path from a dynamic-table entry never seen (index 62).
    let mut a = Http2Analyzer::new(7, Start::MidStream);
    let request = frame(HEADERS, EH, 5, &[0x83, 0xbe]);
    let data = frame(DATA, ES, 5, &message(b"item-1"));
    a.on_data(ToServer, &[request, data].concat(), 1000, 1);
    let mut answer = frame(HEADERS, EH, 5, &[0x88]);
    answer.extend(frame(DATA, ES, 5, &message(b"p")));
    a.on_data(ToClient, &answer, 2000, 2);
    let ex = a.finish();
    assert_eq!(ex.len(), 1);
    assert_eq!(ex[0].params_digest, None);
    assert!(ex[0].params_unknown);
}

#[test]
fn a_call_whose_request_predates_the_capture_keeps_its_answer() {
    // The request's :path and content-type from the dynamic table; the
    // answer says gRPC, one message, then UNAVAILABLE.
    let mut a = Http2Analyzer::new(7, Start::MidStream);
    let request = frame(HEADERS, EH, 5, &[0x83, 0xbe, 0xbf]);
    a.on_data(
        ToServer,
        &[request, frame(DATA, ES, 5, &message(b"x"))].concat(),
        1000,
        1,
    );
    let mut block = vec![0x88];
    block.extend(lit_new("content-type", "application/grpc"));
    let mut answer = frame(HEADERS, EH, 5, &block);
    answer.extend(frame(DATA, 0, 5, &message(b"partial")));
    answer.extend(frame(HEADERS, ES | EH, 5, &lit_new("grpc-status", "14")));
    a.on_data(ToClient, &answer, 2000, 2);
    let ex = a.finish();
    assert_eq!(ex[0].status, Some(Status::Grpc(14)));
    assert!(ex[0].status.as_ref().unwrap().is_error());
    assert_eq!(ex[0].rows, Some(1));
}

#[test]
fn a_direction_that_stops_leaves_its_messages_uncounted() {
    let mut a = Http2Analyzer::new(7, Start::Beginning);
    let mut client = client_start();
    client.extend(grpc_request(1));
    client.extend(frame(DATA, ES, 1, &message(b"item-1")));
    a.on_data(ToServer, &client, 1000, 1);
    let mut answer = server_start();
    answer.extend(frame(HEADERS, EH, 1, &[0x88]));
    answer.extend(frame(DATA, 0, 1, &message(b"one")));
    a.on_data(ToClient, &answer, 2000, 2);
    // Between frames: the boundaries are lost, the direction stops.
    a.on_gap(ToClient, 40);
    let ex = a.finish();
    assert_eq!(ex.len(), 1);
    assert_eq!(ex[0].rows, None);
}

/// The label of a request's header block of `path`, as gRPC or not.
fn label_of(path: &str, grpc: bool) -> String {
    let fields = hpack::Fields {
        method: Some("POST".into()),
        path: Some(path.into()),
        grpc,
        ..Default::default()
    };
    super::label(fields).0
}

#[test]
fn a_grpc_method_is_shown_whole() {
    // Method paths of real APIs: a versioned package, digits in a name,
    // PascalCase words that a token heuristic could take for base64.
    for path in [
        "/timeseriesquery.TimeSeriesQueryService/ServerStreamQuery",
        "/google.pubsub.v1.Publisher/Publish",
        "/grpc.health.v1.Health/Check",
        "/routeguide2.RouteGuide/ListFeatures",
        "/lab.Prices/Quote",
    ] {
        assert_eq!(label_of(path, true), format!("POST {path}"));
    }
    // Not gRPC, or not a method's shape: templated as any path.
    assert_eq!(
        label_of("/routeguide2.RouteGuide/ListFeatures", false),
        "POST /?.RouteGuide/ListFeatures"
    );
    assert_eq!(label_of("/users/42/orders", true), "POST /users/?/orders");
    assert_eq!(label_of("/a.B/C?token=s3cr3t", true), "POST /a.B/C");
}
