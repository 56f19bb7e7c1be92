//! What an eBPF events file (`capture --ebpf`) gives the analysis: the
//! socket calls each exchange is joined to for its thread, and the
//! plaintext of TLS connections, read by the flow table in place of their
//! ciphertext.

use std::path::Path;
use std::sync::Arc;
use whyslow_ebpf::{capture_us, Kind, Payloads, SockEvent, ThreadIndex};
use whyslow_model::ThreadSource;
use whyslow_wire::{PlainChunk, PlaintextFeed};

/// Socket calls kept from an events file: each costs a few dozen bytes in
/// the join's index; 4 M of them is a long, busy capture.
pub const MAX_SOCKET_CALLS: usize = 4 << 20;

/// An events file, read for the analysis.
pub(crate) struct EventSources {
    pub threads: ThreadIndex,
    pub plaintext: Option<Arc<PlaintextFeed>>,
    pub summary: ThreadSource,
    /// What did not stop the read but is worth a note.
    pub problems: Vec<String>,
}

/// A TLS library call as a plaintext chunk: a write at its entry, a read
/// at its return (when the bytes were the caller's).
fn plain_chunk(e: &mut SockEvent, offset_ns: i64) -> Option<PlainChunk> {
    let sent = match e.kind {
        Kind::TlsSend => true,
        Kind::TlsReceive => false,
        _ => return None,
    };
    Some(PlainChunk {
        at_us: capture_us(if sent { e.enter_ns } else { e.exit_ns }, offset_ns),
        local: e.local?,
        remote: e.remote?,
        sent,
        data: std::mem::take(&mut e.payload),
        whole: e.bytes,
    })
}

/// Reads `path`. Err: it cannot be read as events at all.
pub(crate) fn read(path: &Path) -> Result<EventSources, String> {
    let shown = path.display();
    let file = std::fs::File::open(path).map_err(|e| format!("{shown}: {e}"))?;
    let mut read = whyslow_ebpf::read_events(
        std::io::BufReader::new(file),
        MAX_SOCKET_CALLS,
        Payloads::Tls,
    )
    .map_err(|e| format!("{shown}: {e}"))?;
    let mut problems: Vec<String> = read
        .error
        .take()
        .map(|e| format!("{shown}: {e}"))
        .into_iter()
        .collect();
    if read.beyond_limit > 0 {
        problems.push(format!(
            "{shown}: the first {MAX_SOCKET_CALLS} socket calls were joined, {} more were not",
            read.beyond_limit
        ));
    }
    if read.payloads_dropped > 0 {
        problems.push(format!(
            "{shown}: TLS plaintext past {} MiB was not read ({} calls)",
            whyslow_ebpf::file::MAX_PAYLOAD_BYTES >> 20,
            read.payloads_dropped
        ));
    }
    let offset = read.clock_offset_ns;
    let threads = ThreadIndex::new(&read.events, offset);
    let chunks: Vec<PlainChunk> = read
        .events
        .iter_mut()
        .filter_map(|e| plain_chunk(e, offset))
        .collect();
    let summary = ThreadSource {
        file: shown.to_string(),
        socket_calls: read.events.len() as u64,
        exchanges_joined: 0,
        lost: read.lost.last().map_or(0, |&(_, total)| total),
        plaintext_calls: chunks.len() as u64,
    };
    let plaintext = (!chunks.is_empty()).then(|| Arc::new(PlaintextFeed::new(chunks)));
    Ok(EventSources {
        threads,
        plaintext,
        summary,
        problems,
    })
}
