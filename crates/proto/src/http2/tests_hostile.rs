//! Hostile input, gaps, bounds, data safety, sniffing and fuzzing.

use super::frame::*;
use super::tests::*;
use super::*;
use whyslow_model::Direction::{ToClient, ToServer};
use whyslow_model::Status;

#[test]
fn huge_data_frame_is_skipped_not_buffered() {
    const LEN: usize = (1 << 24) - 1;
    let mut client = client_start();
    client.extend(frame(HEADERS, EH, 1, &req_block("PUT", "/blob")));
    let header = frame(DATA, ES, 1, &[])[..9].to_vec();
    let mut header = header;
    header[..3].copy_from_slice(&[0xff, 0xff, 0xff]);
    client.extend(header);
    let mut a = Http2Analyzer::new(1, Start::Beginning);
    a.on_data(ToServer, &client, 1, 1);
    let chunk = vec![0u8; 65536];
    let mut left = LEN;
    while left > 0 {
        let n = left.min(chunk.len());
        a.on_data(ToServer, &chunk[..n], 2, 2);
        left -= n;
        assert!(a.client.framer.payload().is_none_or(|p| p.is_empty()));
    }
    let server = [
        server_start(),
        frame(HEADERS, ES | EH, 1, &resp_block("200", false)),
    ]
    .concat();
    a.on_data(ToClient, &server, 3, 3);
    let ex = a.take_exchanges();
    assert_eq!(a.error(), None);
    assert_eq!(ex.len(), 1);
    assert_eq!(ex[0].request, "PUT /blob");
    assert!(ex[0].request_bytes > LEN as u64);
}

#[test]
fn huge_headers_frame_is_skipped_with_a_note() {
    let mut client = client_start();
    let mut header = frame(HEADERS, ES | EH, 1, &[])[..9].to_vec();
    header[..3].copy_from_slice(&[0xff, 0xff, 0xff]);
    client.extend(header);
    let mut a = Http2Analyzer::new(1, Start::Beginning);
    a.on_data(ToServer, &client, 1, 1);
    a.on_data(ToServer, &vec![0x82; (1 << 24) - 1], 2, 2);
    assert!(a.client.block.is_none());
    // The next request decodes (its dynamic references get placeholders).
    a.on_data(
        ToServer,
        &frame(HEADERS, ES | EH, 3, &[0x82, 0x84, 0xbe]),
        3,
        3,
    );
    let server = [server_start(), frame(HEADERS, ES | EH, 3, &[0x88])].concat();
    a.on_data(ToClient, &server, 4, 4);
    let ex = a.take_exchanges();
    assert_eq!(ex.len(), 1);
    assert_eq!(ex[0].request, "GET /");
    assert!(a.error().unwrap().contains("skipped"));
    let rest = a.finish();
    assert_eq!(rest[0].request, "? ?");
}

#[test]
fn hostile_hpack_blocks_are_notes_and_exchanges_survive() {
    let mut overflow = vec![0x82, 0xff];
    overflow.extend([0xff; 11]);
    overflow.push(0x01);
    let mut far = vec![0x82];
    far.extend(int(0x80, 7, 1_000_000));
    let cases: [(&[u8], &str); 3] = [
        (&overflow, "integer longer"),
        (&far, "past the dynamic table"),
        (&[0x82, 0x04, 0x7f, 0x10, b'/'], "past the end"),
    ];
    for (block, note) in cases {
        let mut client = client_start();
        client.extend(frame(HEADERS, ES | EH, 1, block));
        client.extend(frame(HEADERS, ES | EH, 3, &req_block("GET", "/after")));
        let server = frame(HEADERS, ES | EH, 1, &[0x88]);
        let (ex, err) = run(&[(ToServer, &client), (ToClient, &server)]);
        assert!(err.as_deref().unwrap_or("").contains(note), "{err:?}");
        assert_eq!(ex.len(), 2);
        assert_eq!(ex[0].request, "GET ?");
        assert_eq!(ex[0].status, Some(Status::Http(200)));
        assert_eq!(ex[1].request, "GET /after");
    }
}

#[test]
fn many_continuations_bounded() {
    let mut client = client_start();
    client.extend(frame(HEADERS, ES, 1, &[0x82]));
    let piece = frame(CONTINUATION, 0, 1, &[0x82; 10]);
    for _ in 0..10_000 {
        client.extend(&piece);
    }
    client.extend(frame(CONTINUATION, EH, 1, &[0x84]));
    let (ex, err) = run(&[(ToServer, &client)]);
    assert!(err.unwrap().contains("header block over"));
    assert_eq!(ex[0].request, "? ?");
}

#[test]
fn gap_inside_data_is_counted_elsewhere_stops_the_direction() {
    let mut client = client_start();
    client.extend(frame(HEADERS, EH, 1, &req_block("POST", "/x")));
    let data = frame(DATA, ES, 1, &[7; 1000]);
    let mut a = Http2Analyzer::new(1, Start::Beginning);
    a.on_data(ToServer, &client, 1, 1);
    a.on_data(ToServer, &data[..100], 2, 2);
    a.on_gap(ToServer, 909); // the rest of the payload
    a.on_data(
        ToServer,
        &frame(HEADERS, ES | EH, 3, &req_block("GET", "/y")),
        3,
        3,
    );
    a.on_data(ToClient, &frame(HEADERS, ES | EH, 1, &[0x88]), 4, 4);
    let ex = a.take_exchanges();
    assert_eq!(a.error(), None);
    assert_eq!(ex.len(), 1);
    assert_eq!(
        ex[0].request_bytes,
        (client.len() - client_start().len() + data.len()) as u64
    );
    // A gap in a frame header: that direction stops; stream 3 is flushed at finish.
    a.on_gap(ToServer, 3);
    a.on_data(
        ToServer,
        &frame(HEADERS, ES | EH, 5, &req_block("GET", "/z")),
        5,
        5,
    );
    assert!(a.error().unwrap().contains("missing"));
    let rest = a.finish();
    assert_eq!(rest.len(), 1);
    assert_eq!((rest[0].stream, rest[0].response_packets), (Some(3), None));
}

#[test]
fn hostile_frames_do_not_panic() {
    // Reserved bit and stream id 2^31-1, SETTINGS of bad length, preface wrong.
    let mut client = client_start();
    client.extend(frame(HEADERS, ES | EH, 0xffff_ffff, &[0x82, 0x84]));
    client.extend(frame(SETTINGS, 0, 0, &[1, 2, 3]));
    let (ex, err) = run(&[(ToServer, &client)]);
    assert!(err.unwrap().contains("RFC 9113"));
    assert_eq!(ex.len(), 1);
    let (ex, err) = run(&[(ToServer, b"GET / HTTP/1.1\r\n\r\n")]);
    assert!(err.unwrap().contains("preface"));
    assert!(ex.is_empty());
    // Truncated: the connection ends inside a HEADERS frame.
    let mut client = client_start();
    client.extend(&frame(HEADERS, ES | EH, 1, &req_block("GET", "/t"))[..15]);
    let (ex, err) = run(&[(ToServer, &client)]);
    assert_eq!(err, None);
    assert_eq!(ex[0].request, "? ?");
}

#[test]
fn open_streams_are_bounded() {
    let mut client = client_start();
    for i in 0..(MAX_OPEN_STREAMS as u32 + 5) {
        client.extend(frame(HEADERS, ES | EH, 2 * i + 1, &[0x82, 0x84]));
    }
    let (ex, err) = run(&[(ToServer, &client)]);
    assert!(err.unwrap().contains("open HTTP/2 streams"));
    assert_eq!(ex.len(), MAX_OPEN_STREAMS);
}

#[test]
fn secrets_never_in_requests() {
    let mut client = client_start();
    let mut block = req_block(
        "GET",
        "/login;jsessionid=SECRETSESSION?password=SECRETPW&token=SECRETTOKEN",
    );
    block.extend(lit(23, "Bearer SECRETBEARER"));
    block.extend(lit_new("cookie", "sid=SECRETCOOKIE"));
    client.extend(frame(HEADERS, ES | EH, 1, &block));
    client.extend(frame(
        HEADERS,
        ES | EH,
        3,
        &[
            0x82, 0xbf, 0x04, 0x07, b'/', b'a', b'?', b'S', b'E', b'C', b'R',
        ],
    ));
    let server = frame(
        HEADERS,
        EH | ES,
        1,
        &[lit(55, "session=SECRETSET"), vec![0x88]].concat(),
    );
    let (ex, _) = run(&[(ToServer, &client), (ToClient, &server)]);
    assert_eq!(ex[0].request, "GET /login");
    assert_eq!(ex[1].request, "GET /a");
    let text = format!("{ex:?}");
    assert!(!text.contains("SECR"), "{text}");
}

#[test]
fn sniff_rules() {
    let sniff = Http2Analyzer::sniff;
    assert_eq!(sniff(&PREFACE[..10], Start::Beginning), Sniff::NeedMore);
    assert_eq!(sniff(&client_start(), Start::Beginning), Sniff::Yes);
    assert_eq!(sniff(b"GET / HTTP/1.1\r\n", Start::Beginning), Sniff::No);
    assert_eq!(sniff(&client_start(), Start::MidStream), Sniff::Yes);
    let headers = frame(HEADERS, ES | EH, 7, &req_block("GET", "/"));
    let two = [headers.clone(), frame(DATA, 0, 7, b"abc")].concat();
    assert_eq!(sniff(&two, Start::MidStream), Sniff::Yes);
    assert_eq!(sniff(&headers, Start::MidStream), Sniff::NeedMore);
    assert_eq!(sniff(&headers[..5], Start::MidStream), Sniff::NeedMore);
    // Even stream from a client, PING off stream 0, unknown flags, too long, text protocols.
    let even = [frame(HEADERS, EH, 2, &[0x82]), headers.clone()].concat();
    assert_eq!(sniff(&even, Start::MidStream), Sniff::No);
    let ping = [frame(PING, 0, 1, &[0; 8]), headers.clone()].concat();
    assert_eq!(sniff(&ping, Start::MidStream), Sniff::No);
    let flags = [frame(DATA, 0x40, 1, &[0; 8]), headers.clone()].concat();
    assert_eq!(sniff(&flags, Start::MidStream), Sniff::No);
    let long = [frame(DATA, 0, 1, &[0; 20000]), headers].concat();
    assert_eq!(sniff(&long, Start::MidStream), Sniff::No);
    for text in [
        &b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n"[..],
        b"get user:1\r\n",
        b"HTTP/1.1 200 OK\r\n",
        &[0u8; 64],
    ] {
        assert_eq!(sniff(text, Start::MidStream), Sniff::No, "{text:?}");
    }
}

#[test]
fn fuzz_pseudo_random_inputs() {
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let (client, server, _, _) = one_get();
    for i in 0..3000 {
        let len = (next() % 600) as usize;
        let mut data: Vec<u8> = (0..len).map(|_| next() as u8).collect();
        if i % 2 == 0 {
            // Real conversations, chunked and mutated.
            data.clear();
            for (dir, bytes) in [(0u8, &client), (0x80, &server)] {
                for c in bytes.chunks(1 + (next() % 40) as usize) {
                    data.push(dir | c.len() as u8);
                    data.extend(c);
                }
            }
            for _ in 0..(next() % 4) {
                let at = (next() as usize) % data.len();
                data[at] = next() as u8;
            }
        }
        fuzz(&data);
    }
}
