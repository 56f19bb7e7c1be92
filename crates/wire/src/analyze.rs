//! Capture file → `Timeline`, streaming: memory depends on the number of
//! connections and the limits, not on the file size.

use crate::flow::{FlowTable, Limits};
use crate::read::read_packets;
use crate::WireError;
use std::fs::File;
use std::io::{BufReader, Read};
use std::path::Path;
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
    let file = File::open(path)?;
    timeline_from_reader(BufReader::new(file), limits)
}

/// As `timeline_from_file`, from any reader.
pub fn timeline_from_reader<R: Read>(
    reader: R,
    limits: &Limits,
) -> Result<AnalyzeOutcome, WireError> {
    let mut table = FlowTable::new(limits.clone());
    let outcome = read_packets(reader, |p| table.push(&p));
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
