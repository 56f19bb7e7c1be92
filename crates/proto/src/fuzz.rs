//! Entry points shared by the cargo-fuzz targets and the in-tree tests that
//! run them on pseudo-random input.

use crate::http1::Http1Analyzer;
use crate::StreamAnalyzer;
use whyslow_model::Direction;

/// Splits `data` into chunks for both directions and feeds an HTTP/1
/// analyzer. Each chunk starts with one control byte: bit 7 = direction,
/// bit 6 = report a gap instead of data, bits 0..5 = chunk length.
pub fn http1(data: &[u8]) {
    let mut a = Http1Analyzer::new(0);
    let mut rest = data;
    let mut packet = 0u64;
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
        let _ = a.take_exchanges();
    }
    let _ = a.finish();
    let _ = a.error();
}
