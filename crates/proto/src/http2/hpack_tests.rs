//! HPACK decoder against RFC 7541 Appendix C, and hostile blocks.

use super::hpack::{integer, Decoder, Fields};

fn hex(s: &str) -> Vec<u8> {
    let digits: Vec<u8> = s.bytes().filter(u8::is_ascii_hexdigit).collect();
    digits
        .chunks(2)
        .map(|p| u8::from_str_radix(std::str::from_utf8(p).unwrap(), 16).unwrap())
        .collect()
}

fn decode(d: &mut Decoder, block: &[u8]) -> Result<Fields, String> {
    let mut f = Fields::default();
    d.decode(block, &mut f).map(|()| f)
}

type Table = &'static [(&'static str, &'static str, usize)];

fn table(t: Table) -> Vec<(String, String, usize)> {
    t.iter()
        .map(|&(n, v, s)| (n.to_string(), v.to_string(), s))
        .collect()
}

const REQUEST_TABLES: [Table; 3] = [
    &[(":authority", "www.example.com", 57)],
    &[
        ("cache-control", "no-cache", 53),
        (":authority", "www.example.com", 57),
    ],
    &[
        ("custom-key", "custom-value", 54),
        ("cache-control", "no-cache", 53),
        (":authority", "www.example.com", 57),
    ],
];

const DATE_1: &str = "Mon, 21 Oct 2013 20:13:21 GMT";
const DATE_2: &str = "Mon, 21 Oct 2013 20:13:22 GMT";
const COOKIE: &str = "foo=ASDJKHQKBZXOQWEOPIUAXQWEOIU; max-age=3600; version=1";
const LOCATION: &str = "https://www.example.com";

const RESPONSE_TABLES: [Table; 3] = [
    &[
        ("location", LOCATION, 63),
        ("date", DATE_1, 65),
        ("cache-control", "private", 52),
        (":status", "302", 42),
    ],
    &[
        (":status", "307", 42),
        ("location", LOCATION, 63),
        ("date", DATE_1, 65),
        ("cache-control", "private", 52),
    ],
    &[
        ("set-cookie", COOKIE, 98),
        ("content-encoding", "gzip", 52),
        ("date", DATE_2, 65),
    ],
];

/// C.3 (plain) and C.4 (Huffman): three requests on one table.
fn request_chain(blocks: [&str; 3]) {
    let mut d = Decoder::new(false);
    let paths = ["/", "/", "/index.html"];
    for (i, block) in blocks.iter().enumerate() {
        let f = decode(&mut d, &hex(block)).unwrap();
        assert_eq!(f.method.as_deref(), Some("GET"), "block {i}");
        assert_eq!(f.path.as_deref(), Some(paths[i]), "block {i}");
        assert!(!f.placeholder);
        assert_eq!(d.table(), table(REQUEST_TABLES[i]), "block {i}");
        let size: usize = REQUEST_TABLES[i].iter().map(|e| e.2).sum();
        assert_eq!(d.size(), size);
    }
}

#[test]
fn rfc7541_c3_requests_without_huffman() {
    request_chain([
        "8286 8441 0f77 7777 2e65 7861 6d70 6c65 2e63 6f6d",
        "8286 84be 5808 6e6f 2d63 6163 6865",
        "8287 85bf 400a 6375 7374 6f6d 2d6b 6579 0c63 7573 746f 6d2d 7661 6c75 65",
    ]);
}

#[test]
fn rfc7541_c4_requests_with_huffman() {
    request_chain([
        "8286 8441 8cf1 e3c2 e5f2 3a6b a0ab 90f4 ff",
        "8286 84be 5886 a8eb 1064 9cbf",
        "8287 85bf 4088 25a8 49e9 5ba9 7d7f 8925 a849 e95b b8e8 b4bf",
    ]);
}

/// C.5 (plain) and C.6 (Huffman): three responses on a 256-byte table,
/// with evictions.
fn response_chain(blocks: [&str; 3]) {
    let mut d = Decoder::new(false);
    // Dynamic table size update to 256 (§6.3): 5-bit prefix, 31 + 225.
    decode(&mut d, &[0x3f, 0xe1, 0x01]).unwrap();
    let statuses = [302, 307, 200];
    for (i, block) in blocks.iter().enumerate() {
        let f = decode(&mut d, &hex(block)).unwrap();
        assert_eq!(f.status, Some(statuses[i]), "block {i}");
        assert_eq!(f.encoded, i == 2, "block {i}");
        assert_eq!(d.table(), table(RESPONSE_TABLES[i]), "block {i}");
        let size: usize = RESPONSE_TABLES[i].iter().map(|e| e.2).sum();
        assert_eq!(d.size(), size);
    }
}

#[test]
fn rfc7541_c5_responses_without_huffman() {
    response_chain([
        "4803 3330 3258 0770 7269 7661 7465 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133 2032 303a 3133 3a32
         3120 474d 546e 1768 7474 7073 3a2f 2f77 7777 2e65 7861 6d70 6c65 2e63 6f6d",
        "4803 3330 37c1 c0bf",
        "88c1 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133 2032 303a 3133 3a32 3220 474d 54c0 5a04 677a 6970
         7738 666f 6f3d 4153 444a 4b48 514b 425a 584f 5157 454f 5049 5541 5851 5745 4f49 553b 206d 6178 2d61
         6765 3d33 3630 303b 2076 6572 7369 6f6e 3d31",
    ]);
}

#[test]
fn rfc7541_c6_responses_with_huffman() {
    response_chain([
        "4882 6402 5885 aec3 771a 4b61 96d0 7abe 9410 54d4 44a8 2005 9504 0b81 66e0 82a6 2d1b ff6e 919d 29ad
         1718 63c7 8f0b 97c8 e9ae 82ae 43d3",
        "4883 640e ffc1 c0bf",
        "88c1 6196 d07a be94 1054 d444 a820 0595 040b 8166 e084 a62d 1bff c05a 839b d9ab 77ad 94e7 821d d7f2
         e6c7 b335 dfdf cd5b 3960 d5af 2708 7f36 72c1 ab27 0fb5 291f 9587 3160 65c0 03ed 4ee5 b106 3d50 07",
    ]);
}

#[test]
fn rfc7541_c1_integers() {
    // C.1.1: 10 in a 5-bit prefix; C.1.2: 1337 in a 5-bit prefix; C.1.3: 42 at an octet boundary.
    let mut pos = 0;
    assert_eq!(integer(&[0x0a], &mut pos, 5), Ok(10));
    pos = 0;
    assert_eq!(integer(&[0x1f, 0x9a, 0x0a], &mut pos, 5), Ok(1337));
    assert_eq!(pos, 3);
    pos = 0;
    assert_eq!(integer(&[0x2a], &mut pos, 8 - 1), Ok(42));
}

#[test]
fn integer_longer_than_ten_bytes_is_an_error() {
    let mut block = vec![0xff];
    block.extend([0xff; 11]);
    block.push(0x01);
    let err = decode(&mut Decoder::new(false), &block).unwrap_err();
    assert!(err.contains("integer longer"), "{err}");
    // 2^32 + : too large, though short enough.
    let err = decode(
        &mut Decoder::new(false),
        &[0xff, 0x80, 0x80, 0x80, 0x80, 0x10],
    )
    .unwrap_err();
    assert!(err.contains("overflows"), "{err}");
    let mut pos = 0;
    assert!(integer(&[0x1f, 0x80], &mut pos, 5).is_err(), "truncated");
}

#[test]
fn index_past_any_entry_is_an_error_not_a_panic() {
    // Indexed field 1000000: 127 + 999873 in 7-bit groups.
    let mut block = vec![0xff];
    let mut rest = 1_000_000u32 - 127;
    while rest >= 128 {
        block.push((rest as u8 & 0x7f) | 0x80);
        rest >>= 7;
    }
    block.push(rest as u8);
    for partial in [false, true] {
        let err = decode(&mut Decoder::new(partial), &block).unwrap_err();
        assert!(err.contains("1000000"), "{err}");
    }
    assert!(
        decode(&mut Decoder::new(false), &[0x80]).is_err(),
        "index 0"
    );
    // Index 62 with an empty table, from the start of a connection.
    assert!(decode(&mut Decoder::new(false), &[0xbe]).is_err());
}

#[test]
fn unknown_dynamic_entries_become_placeholders_mid_stream() {
    let mut d = Decoder::new(true);
    // GET, :path from dynamic 62 (unknown), literal indexed name 63 (unknown).
    let f = decode(&mut d, &[0x82, 0xbe, 0x7f, 0x00, 0x01, b'x']).unwrap();
    assert_eq!(f.method.as_deref(), Some("GET"));
    assert!(f.placeholder);
    assert_eq!(f.path, None);
    // The inserted entry (placeholder name) is index 62 now.
    assert_eq!(d.table(), vec![("?".into(), "x".into(), 34)]);
    let f = decode(&mut d, &[0x84, 0x82]).unwrap();
    assert!(!f.placeholder);
    assert_eq!(f.path.as_deref(), Some("/"));
}

#[test]
fn string_literal_past_the_block() {
    let err = decode(&mut Decoder::new(false), &[0x00, 0x05, b'a']).unwrap_err();
    assert!(err.contains("past the end"), "{err}");
    // A length of 2^31 cannot wrap around either.
    let err = decode(
        &mut Decoder::new(false),
        &[0x00, 0x7f, 0x81, 0xff, 0xff, 0xff, 0x07],
    )
    .unwrap_err();
    assert!(err.contains("past the end"), "{err}");
    // Bad Huffman padding.
    assert!(decode(&mut Decoder::new(false), &[0x00, 0x81, 0x00, 0x00]).is_err());
}

#[test]
fn table_bounded_and_size_updates_evict() {
    let mut d = Decoder::new(false);
    // Size update to 10 MiB: entries past MAX_TABLE_BYTES are dropped, and
    // references to them then get placeholders instead of errors.
    let mut block = vec![0x3f];
    let mut rest = 10u32 * 1024 * 1024 - 31;
    while rest >= 128 {
        block.push((rest as u8 & 0x7f) | 0x80);
        rest >>= 7;
    }
    block.push(rest as u8);
    decode(&mut d, &block).unwrap();
    let value = vec![b'v'; 100];
    for _ in 0..2000 {
        let mut b = vec![0x40, 0x01, b'k', 0x64];
        b.extend_from_slice(&value);
        decode(&mut d, &b).unwrap();
    }
    assert!(d.size() <= super::MAX_TABLE_BYTES);
    let f = decode(&mut d, &[0xff, 0x80, 0x0f]).unwrap(); // index 2047
    assert!(f.placeholder);
    // Size update to 0 empties the table.
    decode(&mut d, &[0x20]).unwrap();
    assert_eq!(d.size(), 0);
    assert!(d.table().is_empty());
}
