//! Capture file → `Timeline`, streaming: memory depends on the number of
//! connections and the limits, not on the file size.

use crate::decode::{decode_tcp, Skip, TcpPacket};
use crate::flow::{FlowTable, Limits};
use crate::packet::Packet;
use crate::read::{read_packets_buffered, INITIAL_BUFFER};
use crate::WireError;
use std::fs::File;
use std::io::Read;
use std::ops::Range;
use std::path::Path;
use std::sync::mpsc::sync_channel;
use whyslow_model::Timeline;

/// What analyzing a capture produced.
#[derive(Debug)]
pub struct AnalyzeOutcome {
    pub timeline: Timeline,
    pub packets: u64,
    pub non_tcp: u64,
    pub truncated_packets: u64,
    /// Set when the file was cut or corrupt: the timeline is then partial.
    pub error: Option<String>,
    /// Protocol parse problems per connection (analysis of that stream stopped).
    pub protocol_errors: Vec<String>,
    /// Connections and exchanges seen in the capture, and those left out of
    /// the timeline by `Limits::max_connections` / `max_exchanges`.
    pub connections_seen: u64,
    pub connections_dropped: u64,
    pub exchanges_seen: u64,
    pub exchanges_dropped: u64,
}

/// Reads a pcap/pcapng file and rebuilds its TCP connections and exchanges.
/// Fails only when the file cannot be opened or is not a capture at all.
pub fn timeline_from_file(path: &Path, limits: &Limits) -> Result<AnalyzeOutcome, WireError> {
    // No BufReader: the capture reader reads into its own buffer.
    timeline_from(File::open(path)?, FILE_BUFFER, limits)
}

/// Read buffer for files: a tenth of the reads and refills of the default
/// 64 KiB (each refill moves the partial block left over to the front).
const FILE_BUFFER: usize = 1 << 20;

/// As `timeline_from_file`, from any reader.
///
/// Two threads: one reads the capture and decodes its packets' headers, the
/// other rebuilds flows and exchanges; packets pass between them in small
/// batches, so memory stays bounded and the two halves of the work overlap.
pub fn timeline_from_reader<R: Read + Send>(
    reader: R,
    limits: &Limits,
) -> Result<AnalyzeOutcome, WireError> {
    timeline_from(reader, INITIAL_BUFFER, limits)
}

fn timeline_from<R: Read + Send>(
    reader: R,
    buffer: usize,
    limits: &Limits,
) -> Result<AnalyzeOutcome, WireError> {
    let mut table = FlowTable::new(limits.clone());
    let outcome = std::thread::scope(|s| {
        let (full_tx, full_rx) = sync_channel::<Batch>(BATCHES_IN_FLIGHT);
        let (free_tx, free_rx) = sync_channel::<Batch>(BATCHES_IN_FLIGHT + 1);
        let reading = s.spawn(move || {
            let mut batch = Batch::default();
            let outcome = read_packets_buffered(reader, buffer, |p| {
                batch.push(p);
                if batch.metas.len() >= BATCH_PACKETS || batch.bytes.len() >= BATCH_BYTES {
                    let next = free_rx.try_recv().unwrap_or_default();
                    // A closed channel means the other side is gone: stop feeding it.
                    let _ = full_tx.send(std::mem::replace(&mut batch, next));
                }
            });
            if !batch.metas.is_empty() {
                let _ = full_tx.send(batch);
            }
            outcome
        });
        for mut batch in full_rx {
            for m in &batch.metas {
                let tcp = match &m.tcp {
                    Ok((head, payload)) => Ok(TcpPacket {
                        payload: &batch.bytes[payload.clone()],
                        ..head.clone()
                    }),
                    Err(skip) => Err(*skip),
                };
                table.push_decoded(tcp, m.cut, m.at_us, m.number);
            }
            batch.clear();
            let _ = free_tx.try_send(batch);
        }
        reading
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    });
    let error = match outcome.error {
        Some(e @ (WireError::NotACapture | WireError::Io(_))) if outcome.packets_read == 0 => {
            return Err(e)
        }
        Some(e) => Some(e.to_string()),
        None => None,
    };
    table.close_all();
    let c = table.counters();
    let protocol_errors = table.errors().to_vec();
    Ok(AnalyzeOutcome {
        timeline: table.finish(),
        packets: c.packets,
        non_tcp: c.non_tcp,
        truncated_packets: c.truncated_packets,
        error,
        protocol_errors,
        connections_seen: c.connections_seen,
        connections_dropped: c.connections_dropped,
        exchanges_seen: c.exchanges_seen,
        exchanges_dropped: c.exchanges_dropped,
    })
}

/// Packets per batch passed from the reading thread (~0.5 MiB of small
/// HTTP packets with their headers): hand-overs, which may wake a thread,
/// stay rare.
const BATCH_PACKETS: usize = 2048;
/// Payload bytes per batch: big segments (TSO/GRO captures carry up to 64 KiB
/// per packet) close a batch before its packet count does, so the memory in
/// flight stays near BATCHES_IN_FLIGHT × 1 MiB.
const BATCH_BYTES: usize = 1 << 20;
/// Batches queued between the threads: bounds the memory in flight.
const BATCHES_IN_FLIGHT: usize = 4;

/// Packets read and decoded; their TCP payloads back to back.
#[derive(Default)]
struct Batch {
    bytes: Vec<u8>,
    metas: Vec<Meta>,
}

struct Meta {
    number: u64,
    at_us: u64,
    cut: bool,
    /// The TCP header (empty payload) and where its payload is in `bytes`.
    tcp: Result<(TcpPacket<'static>, Range<usize>), Skip>,
}

impl Batch {
    fn push(&mut self, p: &Packet) {
        let tcp = decode_tcp(p.link, &p.data).map(|t| {
            let start = self.bytes.len();
            self.bytes.extend_from_slice(t.payload);
            let head = TcpPacket { payload: &[], ..t };
            (head, start..self.bytes.len())
        });
        self.metas.push(Meta {
            number: p.number,
            at_us: p.at_us,
            cut: p.is_cut(),
            tcp,
        });
    }

    fn clear(&mut self) {
        self.bytes.clear();
        self.metas.clear();
    }
}
