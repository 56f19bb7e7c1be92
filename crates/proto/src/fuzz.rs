//! Entry points shared by the cargo-fuzz targets and the in-tree tests that
//! run them on pseudo-random input.

use crate::digest::ParamDigest;
use crate::http1::Http1Analyzer;
use crate::{Sniffer, Start, StreamAnalyzer};
use whyslow_model::{Direction, Exchange};

/// Splits `data` into chunks for both directions and feeds an HTTP/1
/// analyzer. Each chunk starts with one control byte: bit 7 = direction,
/// bit 6 = report a gap instead of data, bits 0..5 = chunk length.
pub fn http1(data: &[u8]) {
    feed_chunks(&mut Http1Analyzer::new(0), data);
}

/// The protocol layer as the flow table drives it: the first two bytes are
/// the server port (a hint), the third picks the start (even: beginning),
/// the rest are chunks as for `http1`.
pub fn sniffed(data: &[u8]) {
    let [hi, lo, start, rest @ ..] = data else {
        return;
    };
    let start = if start % 2 == 0 {
        Start::Beginning
    } else {
        Start::MidStream
    };
    let mut s = Sniffer::new(0, u16::from_be_bytes([*hi, *lo]), start);
    feed_chunks(&mut s, rest);
}

/// Feeds `data` as chunks (see `http1`) to `a`, draining as it goes.
pub fn feed_chunks(a: &mut dyn StreamAnalyzer, data: &[u8]) {
    collect_chunks(a, data, false);
}

/// As `feed_chunks`; returns the exchanges when `keep` (tests), drops them
/// as they come otherwise (fuzzing: memory stays flat).
pub fn collect_chunks(a: &mut dyn StreamAnalyzer, data: &[u8], keep: bool) -> Vec<Exchange> {
    let mut rest = data;
    let mut packet = 0u64;
    let mut out = Vec::new();
    while let Some((&ctl, tail)) = rest.split_first() {
        let dir = if ctl & 0x80 == 0 {
            Direction::ToServer
        } else {
            Direction::ToClient
        };
        let len = usize::from(ctl & 0x3f).min(tail.len());
        packet += 1;
        if ctl & 0x40 != 0 {
            a.on_gap(dir, len as u64);
        } else {
            a.on_data(dir, &tail[..len], packet * 10, packet);
        }
        rest = &tail[len..];
        a.drain_exchanges(&mut out);
        if !keep {
            out.clear();
        }
    }
    out.extend(a.finish());
    let _ = a.error();
    out
}

/// One analyzer on `data`: its sniffer on the raw bytes, then the chunks
/// (see `http1`); an odd first byte starts it mid-stream.
pub fn analyzer<A: StreamAnalyzer>(
    data: &[u8],
    sniff: fn(&[u8], Start) -> crate::Sniff,
    new: fn(u32, Start) -> A,
) {
    let start = match data.first() {
        Some(b) if b & 1 == 1 => Start::MidStream,
        _ => Start::Beginning,
    };
    let _ = sniff(data, start);
    feed_chunks(&mut new(0, start), data);
}

/// The TLS record layer with a key log: the first two bytes give the length
/// of the key log's text that follows, the rest are chunks as for `http1`,
/// fed to the sniffer.
/// Seeds carry a real session and its secrets, so mutations reach the
/// decryption and the plaintext analyzers behind it.
pub fn tls(data: &[u8]) {
    let [hi, lo, rest @ ..] = data else {
        return;
    };
    let n = usize::from(u16::from_be_bytes([*hi, *lo])).min(rest.len());
    let (text, chunks) = rest.split_at(n);
    let (keys, _) = crate::tls::KeyLog::parse(&String::from_utf8_lossy(text));
    // Through the sniffer, so that TLS negotiated in-band (PostgreSQL's
    // SSLRequest) is reached too.
    let keys = Some(std::sync::Arc::new(keys));
    let mut a = crate::sniff::Sniffer::with_keys(0, 443, Start::Beginning, keys);
    feed_chunks(&mut a, chunks);
}

/// The statement memo against the normalizer: the input as SQL text, then
/// the same text with every digit changed (the same shape, so the second
/// is a memo hit when the first was remembered). Label and digest must be
/// the normalizer's.
pub fn sql_memo(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let other: String = text
        .chars()
        .map(|c| match c.to_digit(10) {
            Some(d) => char::from_digit((d + 7) % 10, 10).unwrap_or(c),
            None => c,
        })
        .collect();
    let mut memo = crate::normalize::SqlMemo::default();
    for statement in [text.as_ref(), other.as_str()] {
        let (mut via_memo, mut direct) = (ParamDigest::new(), ParamDigest::new());
        let label = memo.sql(statement, &mut via_memo);
        assert_eq!(label, crate::normalize::sql(statement, &mut direct));
        assert_eq!(via_memo.finish(), direct.finish());
    }
}
