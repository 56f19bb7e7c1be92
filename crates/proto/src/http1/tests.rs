use super::*;
use crate::{Sniff, Start};
use whyslow_model::Direction::{ToClient, ToServer};
use whyslow_model::Status;

/// Feeds chunks in order (packet number = index + 1, time = 1000 × packet).
fn run(chunks: &[(Direction, &[u8])]) -> (Vec<Exchange>, Option<String>) {
    crate::testkit::feed(&mut Http1Analyzer::new(7), chunks.iter().copied())
}

const REQ: &[u8] =
    b"POST /api/items?token=secret#frag HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello";
const RESP: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n3;ext=1\r\nabc\r\n0\r\nX-T: 1\r\n\r\n";

#[test]
fn one_exchange_fields() {
    let (ex, err) = run(&[(ToServer, REQ), (ToClient, RESP)]);
    assert_eq!(err, None);
    assert_eq!(ex.len(), 1);
    let e = &ex[0];
    assert_eq!(e.request, "POST /api/items");
    assert_eq!(e.status, Some(Status::Http(200)));
    assert_eq!(e.connection, 7);
    assert_eq!(e.protocol, Protocol::Http1);
    assert_eq!(e.request_bytes, REQ.len() as u64);
    assert_eq!(e.response_bytes, RESP.len() as u64);
    assert_eq!(e.request_packets, (1, 1));
    assert_eq!(e.response_packets, Some((2, 2)));
    assert_eq!((e.request_first_at_us, e.request_last_at_us), (1000, 1000));
    assert_eq!(e.response_first_at_us, Some(2000));
    assert!(e.response_encoded);
}

/// Splitting either stream at any byte gives the same exchange, apart from
/// the packet numbers and times the split introduces.
#[test]
fn split_at_every_byte() {
    let (whole, _) = run(&[(ToServer, REQ), (ToClient, RESP)]);
    for i in 0..=REQ.len() {
        for j in [0, 1, RESP.len() / 2, RESP.len() - 1, RESP.len()] {
            let (a, b) = REQ.split_at(i);
            let (c, d) = RESP.split_at(j);
            let (ex, err) = run(&[(ToServer, a), (ToServer, b), (ToClient, c), (ToClient, d)]);
            assert_eq!(err, None, "split {i}/{j}");
            assert_eq!(ex.len(), 1, "split {i}/{j}");
            assert_eq!(ex[0].request, whole[0].request);
            assert_eq!(ex[0].request_bytes, whole[0].request_bytes);
            assert_eq!(ex[0].response_bytes, whole[0].response_bytes);
            assert_eq!(ex[0].status, Some(Status::Http(200)));
        }
    }
    for j in 0..=RESP.len() {
        let (c, d) = RESP.split_at(j);
        let (ex, err) = run(&[(ToServer, REQ), (ToClient, c), (ToClient, d)]);
        assert_eq!(err, None, "split {j}");
        assert_eq!(ex[0].response_bytes, RESP.len() as u64, "split {j}");
    }
}

#[test]
fn one_byte_at_a_time() {
    let mut chunks: Vec<(Direction, &[u8])> = Vec::new();
    for i in 0..REQ.len() {
        chunks.push((ToServer, &REQ[i..i + 1]));
    }
    for i in 0..RESP.len() {
        chunks.push((ToClient, &RESP[i..i + 1]));
    }
    let (ex, err) = run(&chunks);
    assert_eq!(err, None);
    assert_eq!(ex.len(), 1);
    assert_eq!(ex[0].request_packets, (1, REQ.len() as u64));
    let first = REQ.len() as u64 + 1;
    assert_eq!(
        ex[0].response_packets,
        Some((first, first + RESP.len() as u64 - 1))
    );
}

#[test]
fn keep_alive_and_pipelining_pair_fifo() {
    let reqs = b"GET /a HTTP/1.1\r\n\r\nHEAD /b HTTP/1.1\r\n\r\nGET /c?x=1 HTTP/1.1\r\n\r\n";
    let resps = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokHTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nHTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n";
    let (ex, err) = run(&[(ToServer, reqs), (ToClient, resps)]);
    assert_eq!(err, None);
    let got: Vec<_> = ex
        .iter()
        .map(|e| (e.request.as_str(), e.status.as_ref().and_then(Status::http)))
        .collect();
    assert_eq!(
        got,
        [
            ("GET /a", Some(200)),
            ("HEAD /b", Some(200)),
            ("GET /c", Some(404))
        ]
    );
    assert_eq!(ex[1].response_bytes, 40, "HEAD: head only");
}

#[test]
fn chunked_request_and_no_body_statuses() {
    let req = b"PUT /u HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\nGET /n HTTP/1.1\r\n\r\nGET /m HTTP/1.1\r\n\r\n";
    let resp = b"HTTP/1.1 204 No Content\r\n\r\nHTTP/1.1 304 Not Modified\r\nContent-Length: 9\r\n\r\nHTTP/1.0 200 OK\r\n\r\nuntil close";
    let (ex, err) = run(&[(ToServer, req), (ToClient, resp)]);
    assert_eq!(err, None);
    assert_eq!(ex.len(), 3);
    assert_eq!(ex[0].request_bytes, 62, "head 47 + chunked body 15");
    assert_eq!(ex[1].status, Some(Status::Http(304)));
    assert_eq!(
        ex[2].response_bytes,
        19 + 11,
        "read to close ends at finish"
    );
}

#[test]
fn interim_100_continue_does_not_complete() {
    let head = b"POST /up HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\n";
    let cont = b"HTTP/1.1 100 Continue\r\n\r\n";
    let fin = b"HTTP/1.1 201 Created\r\nContent-Length: 0\r\n\r\n";
    let (ex, err) = run(&[
        (ToServer, head),
        (ToClient, cont),
        (ToServer, b"abc"),
        (ToClient, fin),
    ]);
    assert_eq!(err, None);
    assert_eq!(ex.len(), 1);
    assert_eq!(ex[0].status, Some(Status::Http(201)));
    assert_eq!(ex[0].request_packets, (1, 3));
    assert_eq!(
        ex[0].response_packets,
        Some((4, 4)),
        "final response, not the 100"
    );
    assert_eq!(ex[0].response_bytes, (cont.len() + fin.len()) as u64);
}

#[test]
fn upgrade_stops_parsing() {
    let req = b"GET /ws HTTP/1.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n";
    let resp = b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n\x81\x05hello";
    let (ex, err) = run(&[
        (ToServer, req),
        (ToClient, resp),
        (ToServer, b"\x82\x00garbage"),
    ]);
    assert_eq!(err, None);
    assert_eq!(ex.len(), 1);
    assert_eq!(ex[0].status, Some(Status::Http(101)));
    let (ex, err) = run(&[
        (
            ToServer,
            b"CONNECT example.com:443 HTTP/1.1\r\n\r\n\x16\x03\x01",
        ),
        (ToClient, b"HTTP/1.1 200 OK\r\n\r\n\x16\x03\x03"),
    ]);
    assert_eq!(err, None);
    assert_eq!(ex[0].request, "CONNECT example.com:?");
}

#[test]
fn garbage_is_an_error_and_keeps_earlier_exchanges() {
    let (ex, err) = run(&[(ToServer, b"\x16\x03\x01\x02\x00\x01\x00")]);
    assert!(ex.is_empty());
    assert!(err.unwrap().contains("not an HTTP/1 request"));
    let (ex, err) = run(&[
        (ToServer, b"GET / HTTP/1.1\r\n\r\n"),
        (ToClient, b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"),
        (ToServer, b"\x00\x01\x02 binary"),
    ]);
    assert_eq!(ex.len(), 1);
    assert!(err.is_some());
    let (_, err) = run(&[
        (ToServer, b"GET / HTTP/1.1\r\n\r\n"),
        (ToClient, b"SSH-2.0-x\r\n"),
    ]);
    assert!(err.unwrap().contains("not an HTTP/1 response"));
}

#[test]
fn absurd_lengths_are_refused_without_overflow() {
    let (_, err) = run(&[(
        ToServer,
        b"POST / HTTP/1.1\r\nContent-Length: 99999999999999999999999\r\n\r\n",
    )]);
    assert!(err.unwrap().contains("64 bits"));
    let (_, err) = run(&[(
        ToServer,
        b"POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
    )]);
    assert!(err.unwrap().contains("conflicting"));
    let (_, err) = run(&[
        (ToServer, b"GET / HTTP/1.1\r\n\r\n"),
        (
            ToClient,
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1ffffffffffffffff\r\n",
        ),
    ]);
    assert!(err.unwrap().contains("64 bits"));
    // A huge but valid length is counted, never allocated.
    let (ex, err) = run(&[
        (ToServer, b"GET / HTTP/1.1\r\n\r\n"),
        (
            ToClient,
            b"HTTP/1.1 200 OK\r\nContent-Length: 18446744073709551615\r\n\r\nabc",
        ),
    ]);
    assert_eq!(err, None);
    assert_eq!(
        ex[0].status,
        Some(Status::Http(200)),
        "partial response flushed at finish"
    );
}

#[test]
fn head_without_end_is_bounded() {
    let mut big = b"GET / HTTP/1.1\r\nX: ".to_vec();
    big.resize(MAX_HEAD_BYTES * 2, b'a');
    let (ex, err) = run(&[(ToServer, &big)]);
    assert!(ex.is_empty());
    assert!(err.unwrap().contains("64 KiB"));
}

#[test]
fn truncated_exchanges_are_flushed() {
    let (ex, err) = run(&[(ToServer, b"GET /slow HTTP/1.1\r\n\r\n")]);
    assert_eq!(err, None);
    assert_eq!(ex.len(), 1);
    assert_eq!(ex[0].status, None);
    assert_eq!(ex[0].response_first_at_us, None);
    let (ex, _) = run(&[(ToServer, b"GET /slow HTT")]);
    assert!(ex.is_empty(), "no exchange before a complete request head");
}

#[test]
fn gaps_in_bodies_are_absorbed_elsewhere_resynchronized() {
    let mut a = Http1Analyzer::new(0);
    a.on_data(
        ToServer,
        b"GET / HTTP/1.1\r\n\r\nGET /2 HTTP/1.1\r\n\r\n",
        1,
        1,
    );
    a.on_data(
        ToClient,
        b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nab",
        2,
        2,
    );
    a.on_gap(ToClient, 5);
    a.on_data(
        ToClient,
        b"abcHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
        3,
        3,
    );
    assert_eq!(a.error(), None);
    assert_eq!(a.take_exchanges().len(), 2);
    a.on_gap(ToServer, 3);
    assert!(a.error().unwrap().contains("missing"));
}

/// A response with no body.
const EMPTY_OK: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n";

#[test]
fn a_whole_message_right_after_a_gap_is_read_and_body_bytes_are_not() {
    let mut a = Http1Analyzer::new(0);
    a.on_data(ToServer, b"GET /a HTTP/1.1\r\n\r\n", 1, 1);
    a.on_data(ToClient, EMPTY_OK, 2, 2);
    // A request the capture lost whole, then one it held from its first byte.
    a.on_gap(ToServer, 40);
    a.on_data(ToServer, b"GET /b HTTP/1.1\r\n\r\n", 3, 3);
    a.on_data(ToClient, EMPTY_OK, 4, 4);
    // A gap ending inside a body that happens to read "GET ": not a request.
    a.on_gap(ToServer, 7);
    a.on_data(ToServer, b"GET lost\r\nGET /c HTTP/1.1\r\n\r\n", 5, 5);
    a.on_data(ToClient, b"HTTP/1.1 204 No\r\n\r\n", 6, 6);
    let got: Vec<_> = a
        .take_exchanges()
        .iter()
        .map(|e| (e.request.to_string(), e.status.clone()))
        .collect();
    let ok = |n| Some(whyslow_model::Status::Http(n));
    let want = [
        ("GET /a", ok(200)),
        ("GET /b", ok(200)),
        ("GET /c", ok(204)),
    ];
    assert_eq!(got, want.map(|(r, s)| (r.to_string(), s)));
}

#[test]
fn request_labels_drop_queries_and_hosts() {
    assert_eq!(request_label("GET", "http://h:8080/p?q#f"), "GET /p");
    assert_eq!(request_label("GET", "http://h"), "GET /");
    assert_eq!(request_label("OPTIONS", "*"), "OPTIONS *");
    assert_eq!(request_label("GET", "HTTP://user:pw@h/x"), "GET /x");
    assert_eq!(request_label("GET", "ws://user:pw@h"), "GET /");
    assert_eq!(request_label("GET", "/a;jsessionid=SECRET/b"), "GET /a");
    // Ids in the path are variable parts, as in cache keys.
    assert_eq!(
        request_label("GET", "/item/k42z/reviews"),
        "GET /item/?/reviews"
    );
    assert_eq!(
        request_label("GET", "/api/v2/users/1234"),
        "GET /api/v2/users/?"
    );
    assert_eq!(
        request_label("GET", "/redirect/http://x"),
        "GET /redirect/http://x"
    );
    assert!(request_label("GET", &"/x".repeat(500)).len() <= head::MAX_REQUEST_LABEL);
}

#[test]
fn looks_like_request_needs_a_method() {
    assert_eq!(
        Http1Analyzer::looks_like_request(b"GET / HTTP/1.1"),
        Some(true)
    );
    assert_eq!(Http1Analyzer::looks_like_request(b"PO"), None);
    assert_eq!(
        Http1Analyzer::looks_like_request(b"\x16\x03\x01"),
        Some(false)
    );
    // Any method token, when its line names an HTTP/1 version (RFC 9110).
    assert_eq!(Http1Analyzer::looks_like_request(b"GETX"), None);
    for line in [
        &b"PROPFIND /dav/ HTTP/1.1\r\n"[..],
        b"QUERY /search HTTP/1.1\r\n",
        b"PURGE /cache/x HTTP/1.0\n",
    ] {
        assert_eq!(Http1Analyzer::looks_like_request(line), Some(true));
    }
    assert_eq!(
        Http1Analyzer::looks_like_request(b"PROPFIND /dav/ HTT"),
        None
    );
    // Not a request line: a memcached or Redis inline command.
    assert_eq!(
        Http1Analyzer::looks_like_request(b"get user:1\r\n"),
        Some(false)
    );
    assert_eq!(
        Http1Analyzer::looks_like_request(b"set k 0 0 5\r\nhello\r\n"),
        Some(false)
    );
    assert_eq!(Http1Analyzer::looks_like_request(b"PING\r\n"), Some(false));
    let long = [b"X ".to_vec(), vec![b'a'; 4096]].concat();
    assert_eq!(Http1Analyzer::looks_like_request(&long), Some(false));
}

/// A snapshot length that cuts each segment's tail leaves a gap that ends
/// exactly where a body ends: the message completes and parsing goes on.
#[test]
fn gap_to_the_end_of_a_body_completes_the_message() {
    let mut a = Http1Analyzer::new(0);
    a.on_data(
        ToServer,
        b"GET / HTTP/1.1\r\n\r\nGET /2 HTTP/1.1\r\n\r\n",
        1,
        1,
    );
    a.on_data(
        ToClient,
        b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nab",
        2,
        2,
    );
    a.on_gap(ToClient, 8);
    assert_eq!(a.take_exchanges().len(), 1);
    a.on_data(
        ToClient,
        b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
        3,
        3,
    );
    assert_eq!(a.error(), None);
    assert_eq!(a.take_exchanges().len(), 1);
}

#[test]
fn a_lost_gap_resumes_at_the_next_message() {
    let mut a = Http1Analyzer::new(0);
    a.on_data(ToServer, b"GET /a HTTP/1.1\r\n\r\n", 1, 1);
    a.on_data(
        ToClient,
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab",
        2,
        2,
    );
    a.on_gap(ToClient, 100);
    // The rest of the lost response, then the next exchange in step.
    a.on_data(ToClient, b"zz\r\n0\r\n\r\n", 3, 3);
    a.on_data(ToServer, b"GET /b HTTP/1.1\r\n\r\n", 4, 4);
    a.on_data(
        ToClient,
        b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n",
        5,
        5,
    );
    let ex = a.finish();
    let got: Vec<_> = ex
        .iter()
        .map(|e| (e.request.as_str(), e.status.as_ref().and_then(Status::http)))
        .collect();
    assert_eq!(got, [("GET /a", Some(200)), ("GET /b", Some(404))]);
    assert_eq!(ex[1].request_first_at_us, 4);
    assert_eq!(ex[1].response_first_at_us, Some(5));
    assert!(a.error().unwrap().contains("resumed"));
}

#[test]
fn mid_stream_start_skips_to_a_request_line() {
    let client: &[u8] = b"dy bytes\r\nGET /x?token=s3cret HTTP/1.1\r\nHost: a\r\n\r\n";
    assert_eq!(Http1Analyzer::sniff(client, Start::MidStream), Sniff::Yes);
    assert_eq!(
        Http1Analyzer::sniff(b"random\r\nbytes", Start::MidStream),
        Sniff::NeedMore
    );
    let mut a = Http1Analyzer::with_start(0, Start::MidStream);
    // The tail of an earlier response, which no request here waits for.
    a.on_data(
        ToClient,
        b"K\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
        1,
        1,
    );
    a.on_data(ToServer, client, 2, 2);
    a.on_data(ToClient, b"HTTP/1.1 204 No Content\r\n\r\n", 3, 3);
    let ex = a.finish();
    assert_eq!(ex.len(), 1);
    assert_eq!(ex[0].request, "GET /x");
    assert_eq!(ex[0].status, Some(Status::Http(204)));
}

#[test]
fn h2c_upgrade_hands_over_with_the_bytes_after_101() {
    let mut a = Http1Analyzer::new(0);
    a.on_data(
        ToServer,
        b"GET /up HTTP/1.1\r\nHost: a\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQAAP__\r\n\r\n",
        1,
        1,
    );
    a.on_data(
        ToClient,
        b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00",
        2,
        2,
    );
    let up = a.take_h2c_upgrade().expect("upgrade");
    assert_eq!(up.label, "GET /up");
    assert_eq!(up.request.first_at, 1);
    assert_eq!(up.leftover.len(), 1);
    assert_eq!(up.leftover[0].1.len(), 9, "the server's SETTINGS frame");
    assert!(a.finish().is_empty(), "stream 1 is the HTTP/2 analyzer's");
}

/// Repeated heads come from the memo: the same fields as parsing them, and
/// a head that differs in one byte is parsed anew.
#[test]
fn repeated_heads_are_the_same_exchange_as_parsed_ones() {
    let get = |q: &str| format!("GET /items/{q}?k=v HTTP/1.1\r\nHost: x\r\n\r\n");
    let ok = |body: &str| {
        format!(
            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
    };
    let (a, b, c) = (get("7"), get("7"), get("8"));
    let (r1, r2, r3) = (ok("hello"), ok("hello"), ok("hi"));
    let (ex, err) = run(&[
        (ToServer, a.as_bytes()),
        (ToClient, r1.as_bytes()),
        (ToServer, b.as_bytes()),
        (ToClient, r2.as_bytes()),
        (ToServer, c.as_bytes()),
        (ToClient, r3.as_bytes()),
    ]);
    assert_eq!(err, None);
    let alone =
        |req: &str, resp: &str| run(&[(ToServer, req.as_bytes()), (ToClient, resp.as_bytes())]).0;
    for (e, (req, resp)) in ex.iter().zip([(&a, &r1), (&b, &r2), (&c, &r3)]) {
        let fresh = &alone(req, resp)[0];
        assert_eq!(e.request, fresh.request);
        assert_eq!(e.params_digest, fresh.params_digest);
        assert_eq!(e.response_bytes, resp.len() as u64);
        assert_eq!(e.status, Some(Status::Http(200)));
    }
    assert_eq!(ex[0].params_digest, ex[1].params_digest);
    assert_ne!(ex[1].params_digest, ex[2].params_digest);
}

#[test]
fn traceparent_names_the_exchange_trace() {
    let traced = b"GET /a HTTP/1.1\r\nHost: x\r\ntraceparent: 00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\r\n\r\n";
    let bad =
        b"GET /a HTTP/1.1\r\nHost: x\r\nTraceparent: 00-0af7651916cd43dd8448eb211c80319c\r\n\r\n";
    let ok = b"HTTP/1.1 204 No Content\r\n\r\n";
    let (ex, err) = run(&[
        (ToServer, traced),
        (ToClient, ok),
        (ToServer, bad),
        (ToClient, ok),
    ]);
    assert_eq!(ex.len(), 2);
    assert_eq!(
        ex[0].trace.map(|t| t.to_string()).as_deref(),
        Some("0af7651916cd43dd8448eb211c80319c")
    );
    assert_eq!(ex[1].trace, None);
    assert!(err.unwrap().contains("traceparent shorter"), "a clear note");
}

/// A server that answers one GET three times: the extra responses wait for
/// no request; they are skipped and the pairs after them kept.
#[test]
fn responses_without_a_request_are_skipped_and_later_pairs_kept() {
    let ok = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
    let three = [&ok[..], ok, ok].concat();
    let (ex, err) = run(&[
        (ToServer, &b"GET /a HTTP/1.1\r\n\r\n"[..]),
        (ToClient, &three[..]),
        (ToServer, &b"GET /b HTTP/1.1\r\n\r\n"[..]),
        (ToClient, &b"HTTP/1.1 204 No Content\r\n\r\n"[..]),
    ]);
    let labels: Vec<&str> = ex.iter().map(|e| e.request.as_str()).collect();
    assert_eq!(labels, ["GET /a", "GET /b"]);
    assert_eq!(ex[1].status, Some(Status::Http(204)));
    assert!(err.unwrap_or_default().contains("without a request"));
}

/// `http/1.1 200 OK`: a version in lower case, which clients accept.
#[test]
fn a_status_line_in_lower_case_is_read() {
    let (ex, err) = run(&[
        (ToServer, &b"GET /a HTTP/1.1\r\n\r\n"[..]),
        (
            ToClient,
            &b"http/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"[..],
        ),
        (ToServer, &b"GET /b HTTP/1.1\r\n\r\n"[..]),
        (ToClient, &b"HTTP/1.1 204 No Content\r\n\r\n"[..]),
    ]);
    assert_eq!(err, None);
    assert_eq!(ex.len(), 2);
    assert_eq!(ex[0].status, Some(Status::Http(200)));
    assert_eq!(ex[0].response_bytes, 40);
}
