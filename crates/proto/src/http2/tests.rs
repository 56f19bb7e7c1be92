//! Exchanges from realistic HTTP/2 conversations, built with a tiny frame/HPACK encoder.

use super::frame::*;
use super::*;
use whyslow_model::Direction::{ToClient, ToServer};
use whyslow_model::{Protocol, Status};

// ---- a tiny encoder: frames and HPACK literals, as clients and servers send them

pub(super) fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let mut v = (payload.len() as u32).to_be_bytes()[1..].to_vec();
    v.extend([kind, flags]);
    v.extend(stream.to_be_bytes());
    v.extend_from_slice(payload);
    v
}

/// An HPACK integer: `flags` in the bits above an N-bit prefix.
pub(super) fn int(flags: u8, prefix: u8, value: usize) -> Vec<u8> {
    let max = (1usize << prefix) - 1;
    if value < max {
        return vec![flags | value as u8];
    }
    let mut v = vec![flags | max as u8];
    let mut rest = value - max;
    while rest >= 128 {
        v.push((rest as u8 & 0x7f) | 0x80);
        rest >>= 7;
    }
    v.push(rest as u8);
    v
}

/// Literal without indexing, name from static `index` (§6.2.2).
pub(super) fn lit(index: usize, value: &str) -> Vec<u8> {
    let mut v = int(0x00, 4, index);
    v.extend(int(0, 7, value.len()));
    v.extend(value.as_bytes());
    v
}

/// Literal with incremental indexing, new name (§6.2.1).
pub(super) fn lit_new(name: &str, value: &str) -> Vec<u8> {
    let mut v = vec![0x40];
    v.extend(int(0, 7, name.len()));
    v.extend(name.as_bytes());
    v.extend(int(0, 7, value.len()));
    v.extend(value.as_bytes());
    v
}

/// Request headers as curl sends them: :method, :path, :scheme, :authority, more.
pub(super) fn req_block(method: &str, path: &str) -> Vec<u8> {
    let mut v = match method {
        "GET" => vec![0x82],
        "POST" => vec![0x83],
        m => lit(2, m),
    };
    v.extend(lit(4, path));
    v.push(0x86);
    v.extend(int(0x40, 6, 1)); // :authority, indexed
    v.extend(int(0, 7, 9));
    v.extend(b"localhost");
    v.extend(lit(58, "curl/8.5.0"));
    v
}

pub(super) fn resp_block(status: &str, gzip: bool) -> Vec<u8> {
    let mut v = match status {
        "200" => vec![0x88],
        s => lit(8, s),
    };
    if gzip {
        v.extend(lit(26, "gzip"));
    }
    v.extend(lit(31, "application/json"));
    v
}

pub(super) const ES: u8 = END_STREAM;
pub(super) const EH: u8 = END_HEADERS;

pub(super) fn client_start() -> Vec<u8> {
    let mut v = PREFACE.to_vec();
    v.extend(frame(
        SETTINGS,
        0,
        0,
        &[0, 3, 0, 0, 0, 100, 0, 4, 0, 0xa0, 0, 0],
    ));
    v.extend(frame(WINDOW_UPDATE, 0, 0, &[0x3e, 0x7f, 0, 1]));
    v
}

pub(super) fn server_start() -> Vec<u8> {
    let mut v = frame(SETTINGS, 0, 0, &[0, 3, 0, 0, 0, 100]);
    v.extend(frame(SETTINGS, ACK, 0, &[]));
    v
}

/// Feeds chunks in order (packet number = index + 1, time = 1000 × packet).
pub(super) fn run_with(
    mut a: Http2Analyzer,
    chunks: &[(Direction, &[u8])],
) -> (Vec<Exchange>, Option<String>) {
    crate::testkit::feed(&mut a, chunks.iter().copied())
}

pub(super) fn run(chunks: &[(Direction, &[u8])]) -> (Vec<Exchange>, Option<String>) {
    run_with(Http2Analyzer::new(7, Start::Beginning), chunks)
}

/// One GET: client bytes, server bytes, and the request/response frame sizes.
pub(super) fn one_get() -> (Vec<u8>, Vec<u8>, u64, u64) {
    let headers = frame(
        HEADERS,
        ES | EH,
        1,
        &req_block("GET", "/api/items?id=42&token=s3cr3t"),
    );
    let mut client = client_start();
    client.extend(&headers);
    let resp_headers = frame(HEADERS, EH, 1, &resp_block("200", true));
    let data = frame(DATA, ES, 1, b"{\"items\":[]}");
    let mut server = server_start();
    server.extend(&resp_headers);
    server.extend(&data);
    let req = headers.len() as u64;
    (
        client,
        server,
        req,
        (resp_headers.len() + data.len()) as u64,
    )
}

#[test]
fn one_exchange_fields() {
    let (client, server, req, resp) = one_get();
    let (ex, err) = run(&[(ToServer, &client), (ToClient, &server)]);
    assert_eq!(err, None);
    assert_eq!(ex.len(), 1);
    let e = &ex[0];
    assert_eq!(e.request, "GET /api/items");
    assert_eq!(e.protocol, Protocol::Http2);
    assert_eq!(e.connection, 7);
    assert_eq!(e.stream, Some(1));
    assert_eq!(e.status, Some(Status::Http(200)));
    assert_eq!((e.request_bytes, e.response_bytes), (req, resp));
    assert_eq!(e.request_packets, (1, 1));
    assert_eq!(e.response_packets, Some((2, 2)));
    assert_eq!(e.response_first_at_us, Some(2000));
    assert!(e.response_encoded);
    // The query string goes into the digest, as HTTP/1's does.
    let mut d = ParamDigest::new();
    let path = e.request.split_once(' ').unwrap().1;
    crate::http1::request_label_digest("GET", &format!("{path}?id=42&token=s3cr3t"), &mut d);
    assert_eq!(e.params_digest, Some(d.finish()));
    let mut other = ParamDigest::new();
    crate::http1::request_label_digest("GET", &format!("{path}?id=43&token=s3cr3t"), &mut other);
    assert_ne!(e.params_digest, Some(other.finish()));
}

#[test]
fn split_at_every_byte() {
    let (client, server, req, resp) = one_get();
    for i in 0..=client.len() {
        for j in [0, 1, 9, 20, server.len() - 1, server.len()] {
            let (a, b) = client.split_at(i);
            let (c, d) = server.split_at(j);
            let (ex, err) = run(&[(ToServer, a), (ToServer, b), (ToClient, c), (ToClient, d)]);
            assert_eq!(err, None, "split {i}/{j}");
            assert_eq!(ex.len(), 1, "split {i}/{j}");
            assert_eq!(ex[0].request, "GET /api/items");
            assert_eq!((ex[0].request_bytes, ex[0].response_bytes), (req, resp));
            assert_eq!(ex[0].status, Some(Status::Http(200)));
        }
    }
    for j in 0..=server.len() {
        let (c, d) = server.split_at(j);
        let (ex, err) = run(&[(ToServer, &client), (ToClient, c), (ToClient, d)]);
        assert_eq!(err, None, "split {j}");
        assert_eq!(ex[0].response_bytes, resp, "split {j}");
    }
}

#[test]
fn one_byte_at_a_time_keeps_first_and_last_packets() {
    let (client, server, _, _) = one_get();
    let mut chunks: Vec<(Direction, &[u8])> = Vec::new();
    chunks.extend(client.chunks(1).map(|c| (ToServer, c)));
    chunks.extend(server.chunks(1).map(|c| (ToClient, c)));
    let (ex, err) = run(&chunks);
    assert_eq!(err, None);
    let start = client_start().len() as u64;
    assert_eq!(ex[0].request_packets, (start + 1, client.len() as u64));
    let server_first = client.len() as u64 + server_start().len() as u64 + 1;
    assert_eq!(
        ex[0].response_packets,
        Some((server_first, (client.len() + server.len()) as u64))
    );
}

#[test]
fn concurrent_streams_complete_out_of_order() {
    let mut client = client_start();
    for (id, path) in [(1, "/a"), (3, "/b"), (5, "/c")] {
        client.extend(frame(HEADERS, ES | EH, id, &req_block("GET", path)));
    }
    let mut s1 = server_start();
    s1.extend(frame(HEADERS, EH, 1, &resp_block("200", false)));
    s1.extend(frame(HEADERS, EH, 3, &resp_block("404", false)));
    s1.extend(frame(DATA, 0, 1, b"partial"));
    let s2 = [
        frame(DATA, ES, 3, b"nope"),
        frame(HEADERS, ES | EH, 5, &resp_block("503", false)),
    ]
    .concat();
    let s3 = frame(DATA, ES, 1, b"rest");
    let (ex, err) = run(&[
        (ToServer, &client),
        (ToClient, &s1),
        (ToClient, &s2),
        (ToClient, &s3),
    ]);
    assert_eq!(err, None);
    let got: Vec<_> = ex
        .iter()
        .map(|e| (e.stream, e.request.as_str(), e.status.clone()))
        .collect();
    assert_eq!(
        got,
        vec![
            (Some(3), "GET /b", Some(Status::Http(404))),
            (Some(5), "GET /c", Some(Status::Http(503))),
            (Some(1), "GET /a", Some(Status::Http(200))),
        ]
    );
    assert_eq!(ex[2].response_packets, Some((2, 4)));
}

#[test]
fn post_with_data_frames_and_interim_and_trailers() {
    let headers = frame(HEADERS, EH, 1, &req_block("POST", "/upload"));
    let d1 = frame(DATA, 0, 1, &[b'x'; 100]);
    let d2 = frame(DATA, ES, 1, &[b'y'; 50]);
    let mut client = client_start();
    client.extend(&headers);
    let r100 = frame(HEADERS, EH, 1, &lit(8, "100"));
    let r201 = frame(HEADERS, EH, 1, &resp_block("201", false));
    let trailers = frame(HEADERS, ES | EH, 1, &lit_new("grpc-status", "0"));
    let (ex, err) = run(&[
        (ToServer, &client),
        (ToServer, &d1),
        (ToClient, &r100),
        (ToServer, &d2),
        (ToClient, &[r201.clone(), trailers.clone()].concat()),
    ]);
    assert_eq!(err, None);
    assert_eq!(ex.len(), 1);
    let e = &ex[0];
    assert_eq!(e.request, "POST /upload");
    assert_eq!(
        e.request_bytes,
        (headers.len() + d1.len() + d2.len()) as u64
    );
    assert_eq!(e.request_packets, (1, 4));
    assert_eq!(e.status, Some(Status::Http(201)));
    assert_eq!(
        e.response_bytes,
        (r100.len() + r201.len() + trailers.len()) as u64
    );
    assert_eq!(e.response_packets, Some((3, 5)));
    assert!(!e.response_encoded);
}

#[test]
fn rst_stream_ends_the_exchange() {
    let mut client = client_start();
    client.extend(frame(HEADERS, ES | EH, 1, &req_block("GET", "/slow")));
    client.extend(frame(HEADERS, EH, 3, &req_block("POST", "/big")));
    let rst = frame(RST_STREAM, 0, 1, &[0, 0, 0, 8]); // client cancels stream 1
    let server_rst = frame(RST_STREAM, 0, 3, &[0, 0, 0, 7]); // REFUSED_STREAM
    let (ex, err) = run(&[
        (ToServer, &client),
        (ToServer, &rst),
        (ToClient, &server_rst),
    ]);
    assert_eq!(err, None);
    assert_eq!(ex.len(), 2);
    assert_eq!(
        (ex[0].stream, ex[0].status.clone(), ex[0].response_packets),
        (Some(1), None, None)
    );
    assert_eq!(ex[1].stream, Some(3));
    assert_eq!(ex[1].response_bytes, server_rst.len() as u64);
}

#[test]
fn continuation_and_padding() {
    let block = req_block("GET", "/continued/path");
    let (a, b) = block.split_at(5);
    let (b, c) = b.split_at(7);
    // HEADERS padded (pad length 4) with priority fields, then two CONTINUATIONs.
    let mut payload = vec![4];
    payload.extend([0, 0, 0, 0, 15]);
    payload.extend(a);
    payload.extend([0; 4]);
    let mut client = client_start();
    client.extend(frame(HEADERS, ES | PADDED | PRIORITY_FLAG, 1, &payload));
    client.extend(frame(CONTINUATION, 0, 1, b));
    client.extend(frame(CONTINUATION, EH, 1, c));
    // Padded DATA in the response.
    let mut server = server_start();
    server.extend(frame(HEADERS, EH, 1, &resp_block("200", false)));
    server.extend(frame(DATA, ES | PADDED, 1, &[3, b'o', b'k', 0, 0, 0]));
    let (ex, err) = run(&[(ToServer, &client), (ToClient, &server)]);
    assert_eq!(err, None);
    assert_eq!(ex[0].request, "GET /continued/path");
    assert_eq!(
        ex[0].request_bytes,
        (9 + payload.len() + 9 + b.len() + 9 + c.len()) as u64
    );
    assert_eq!(ex[0].status, Some(Status::Http(200)));
}

#[test]
fn padding_longer_than_frame_and_broken_block_are_notes() {
    let mut client = client_start();
    client.extend(frame(HEADERS, ES | EH | PADDED, 1, &[200, 0x82]));
    let (ex, err) = run(&[(ToServer, &client)]);
    assert!(err.unwrap().contains("padding"));
    assert_eq!(ex.len(), 1, "the stream opened is flushed");
    // A frame of another type inside a header block.
    let mut client = client_start();
    client.extend(frame(HEADERS, EH ^ EH, 1, &[0x82]));
    client.extend(frame(PING, 0, 0, &[0; 8]));
    let (_, err) = run(&[(ToServer, &client)]);
    assert!(err.unwrap().contains("header block"));
}

#[test]
fn mid_stream_start_with_unknown_dynamic_entries() {
    // Frames from the middle of a connection: the :path and a custom header
    // refer to dynamic entries (62, 63) inserted before the capture began.
    let c1 = frame(WINDOW_UPDATE, 0, 0, &[0, 0, 0x10, 0]);
    let c2 = frame(HEADERS, ES | EH, 41, &[0x82, 0xbe, 0xbf, 0x86]);
    let c3 = frame(HEADERS, ES | EH, 43, &[0xbe, 0xbf]);
    let client = [c1, c2, c3].concat();
    assert_eq!(Http2Analyzer::sniff(&client, Start::MidStream), Sniff::Yes);
    let server = [
        frame(HEADERS, EH, 41, &[0xc0]),
        frame(DATA, ES, 41, b"x"),
        frame(HEADERS, ES | EH, 43, &[0x88]),
    ]
    .concat();
    let a = Http2Analyzer::new(3, Start::MidStream);
    let (ex, err) = run_with(a, &[(ToServer, &client), (ToClient, &server)]);
    assert!(err.unwrap().contains("before the capture"));
    let got: Vec<_> = ex
        .iter()
        .map(|e| (e.stream, e.request.as_str(), e.status.clone()))
        .collect();
    assert_eq!(
        got,
        vec![
            (Some(41), "GET ?", None),
            (Some(43), "? ?", Some(Status::Http(200)))
        ]
    );
}

#[test]
fn mid_stream_start_inside_a_header_block() {
    let client = [
        frame(CONTINUATION, EH, 9, &[0x00, 0x01, b'k', 0x01, b'v']),
        frame(HEADERS, ES | EH, 11, &req_block("GET", "/next")),
    ]
    .concat();
    assert_eq!(Http2Analyzer::sniff(&client, Start::MidStream), Sniff::Yes);
    let a = Http2Analyzer::new(3, Start::MidStream);
    let (ex, err) = run_with(a, &[(ToServer, &client)]);
    assert_eq!(err, None);
    assert_eq!(
        (ex[0].stream, ex[0].request.as_str()),
        (Some(11), "GET /next")
    );
}

#[test]
fn mid_stream_server_bytes_not_at_a_frame() {
    let client = frame(HEADERS, ES | EH, 5, &req_block("GET", "/x"));
    let a = Http2Analyzer::new(3, Start::MidStream);
    let (ex, err) = run_with(
        a,
        &[
            (ToServer, &client),
            (ToClient, b"tail of some DATA payload"),
        ],
    );
    assert!(err.unwrap().contains("do not start"));
    assert_eq!(ex.len(), 1);
    assert_eq!(ex[0].request, "GET /x");
}

#[test]
fn h2c_upgrade_stream_one_answers_the_http1_request() {
    let span = Span {
        first_at: 500,
        last_at: 600,
        first_pkt: 1,
        last_pkt: 2,
        bytes: 120,
    };
    let a = Http2Analyzer::after_h2c_upgrade(9, "GET /upgrade".into(), span);
    let mut client = client_start();
    client.extend(frame(HEADERS, ES | EH, 3, &req_block("GET", "/next")));
    let mut server = server_start();
    server.extend(frame(HEADERS, EH, 1, &resp_block("200", false)));
    server.extend(frame(DATA, ES, 1, b"hello"));
    server.extend(frame(HEADERS, ES | EH, 3, &resp_block("204", false)));
    let (ex, err) = run_with(a, &[(ToServer, &client), (ToClient, &server)]);
    assert_eq!(err, None);
    assert_eq!(ex.len(), 2);
    let e = &ex[0];
    assert_eq!((e.stream, e.request.as_str()), (Some(1), "GET /upgrade"));
    assert_eq!(
        (e.request_first_at_us, e.request_bytes, e.request_packets),
        (500, 120, (1, 2))
    );
    assert_eq!(e.status, Some(Status::Http(200)));
    assert_eq!(e.connection, 9);
    assert_eq!(
        (ex[1].stream, ex[1].request.as_str()),
        (Some(3), "GET /next")
    );
}

#[test]
fn traceparent_names_the_stream_trace() {
    let tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-03";
    let mut client = client_start();
    for (stream, value) in [(1, tp), (3, "00-bad"), (5, "")] {
        let mut block = req_block("GET", "/a");
        if !value.is_empty() {
            block.extend(lit_new("traceparent", value));
        }
        client.extend(frame(HEADERS, ES | EH, stream, &block));
    }
    let mut server = server_start();
    for stream in [1, 3, 5] {
        server.extend(frame(HEADERS, EH | ES, stream, &resp_block("200", false)));
    }
    let (ex, _) = run(&[(ToServer, &client), (ToClient, &server)]);
    assert_eq!(ex.len(), 3);
    let traces: Vec<_> = ex.iter().map(|e| e.trace.map(|t| t.to_string())).collect();
    assert_eq!(
        traces,
        vec![Some("0af7651916cd43dd8448eb211c80319c".into()), None, None],
        "a malformed value and a missing one name no trace"
    );
}
