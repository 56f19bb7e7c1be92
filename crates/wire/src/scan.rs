//! A first, light pass over one host's capture for joining it with other
//! hosts' (`analyze A B C`): per TCP connection, its first data segments'
//! sequence numbers, lengths and times in each direction, and who sent its
//! SYN. The same connection captured on two hosts carries the same
//! sequence numbers whatever NAT did to its addresses; the times say how
//! the two clocks stand. Bounded: `MAX_SEGMENTS` per direction, `MAX_FLOWS`
//! connections.

use crate::decode::{decode, Decoded};
use crate::error::WireError;
use crate::read::read_packets_buffered;
use foldhash::{HashMap, HashMapExt};
use std::fs::File;
use std::net::SocketAddr;
use std::path::Path;

/// Data segments kept per direction of a connection: enough to match it
/// and bound the clocks, whatever its length.
pub const MAX_SEGMENTS: usize = 64;
/// Connections scanned per capture.
pub const MAX_FLOWS: usize = 200_000;
/// Bytes of a direction's first payload kept, to tell a request from an
/// answer.
const HEAD_BYTES: usize = 64;

/// One data segment as a host's capture saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seg {
    pub seq: u32,
    pub len: u32,
    pub at_us: u64,
}

/// One direction of a connection: the segments sent from `from`.
#[derive(Debug, Clone, Default)]
pub struct Side {
    pub segs: Vec<Seg>,
    /// The direction's first payload bytes.
    pub head: Vec<u8>,
}

/// One TCP connection of a host's capture, by its two ends (`a` < `b`).
#[derive(Debug, Clone)]
pub struct FlowScan {
    pub a: SocketAddr,
    pub b: SocketAddr,
    /// Segments `a` sent, and `b` sent.
    pub sides: [Side; 2],
    /// The end that sent a SYN without ACK, if the capture holds it.
    pub syn_from: Option<SocketAddr>,
    /// When the SYN was seen.
    pub syn_at_us: Option<u64>,
}

impl FlowScan {
    /// Which side `from` is (0: `a`, 1: `b`).
    pub fn side_of(&self, from: SocketAddr) -> usize {
        usize::from(from != self.a)
    }
}

/// What one capture holds for the join.
#[derive(Debug, Clone, Default)]
pub struct HostScan {
    pub flows: Vec<FlowScan>,
    pub packets: u64,
    /// The read stopped early: cut or corrupt.
    pub error: Option<String>,
}

/// The two ends of a connection in a fixed order: how it is known in a
/// capture whatever the direction of a packet.
pub fn ends(x: SocketAddr, y: SocketAddr) -> (SocketAddr, SocketAddr) {
    if x <= y {
        (x, y)
    } else {
        (y, x)
    }
}

/// Scans the capture at `path`. Err: it cannot be opened or is no capture.
pub fn scan_file(path: &Path) -> Result<HostScan, WireError> {
    scan_reader(File::open(path)?)
}

/// Scans a capture read from `reader`. Err: it is no capture.
pub fn scan_reader<R: std::io::Read>(reader: R) -> Result<HostScan, WireError> {
    let mut index: HashMap<(SocketAddr, SocketAddr), usize> = HashMap::new();
    let mut flows: Vec<FlowScan> = Vec::new();
    let read = read_packets_buffered(reader, 1 << 20, |p| {
        let Ok(Decoded::Tcp(t)) = decode(p.link, &p.data) else {
            return;
        };
        let key = ends(t.src, t.dst);
        let n = match index.get(&key) {
            Some(&n) => n,
            None if flows.len() < MAX_FLOWS => {
                index.insert(key, flows.len());
                flows.push(FlowScan {
                    a: key.0,
                    b: key.1,
                    sides: Default::default(),
                    syn_from: None,
                    syn_at_us: None,
                });
                flows.len() - 1
            }
            None => return,
        };
        let f = &mut flows[n];
        if t.syn && !t.ack_flag && f.syn_from.is_none() {
            f.syn_from = Some(t.src);
            f.syn_at_us = Some(p.at_us);
        }
        let side = &mut f.sides[f.side_of(t.src)];
        if t.seg_len > 0 && side.segs.len() < MAX_SEGMENTS {
            if side.head.is_empty() {
                side.head = t.payload[..t.payload.len().min(HEAD_BYTES)].to_vec();
            }
            side.segs.push(Seg {
                seq: t.seq,
                len: t.seg_len,
                at_us: p.at_us,
            });
        }
    });
    if read.packets_read == 0 {
        if let Some(e) = read.error {
            return Err(e);
        }
    }
    Ok(HostScan {
        flows,
        packets: read.packets_read,
        error: read.error.map(|e| e.to_string()),
    })
}
