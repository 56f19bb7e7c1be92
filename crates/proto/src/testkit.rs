//! Shared by the analyzers' unit tests.

use crate::StreamAnalyzer;
use whyslow_model::{Direction, Exchange};

/// Feeds chunks in order (packet number = index + 1, time = 1000 × packet),
/// then finishes: every exchange and the analyzer's note.
pub fn feed<'c>(
    a: &mut dyn StreamAnalyzer,
    chunks: impl IntoIterator<Item = (Direction, &'c [u8])>,
) -> (Vec<Exchange>, Option<String>) {
    let mut out = Vec::new();
    for (i, (d, data)) in chunks.into_iter().enumerate() {
        let pkt = i as u64 + 1;
        a.on_data(d, data, pkt * 1000, pkt);
        out.extend(a.take_exchanges());
    }
    out.extend(a.finish());
    (out, a.error().map(str::to_string))
}
