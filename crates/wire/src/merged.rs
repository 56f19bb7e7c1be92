//! Several hosts' captures read as one stream of packets: each host's
//! timestamps moved onto the first host's clock before anything reads them,
//! the packets of all files in time order (one pending packet per file).
//! Packets keep their numbers in their own file, and say which file
//! (`Packet::host`): the flow table keeps each host's flows apart, and
//! reads a connection that two hosts captured from one copy (`Feed::copies`).

use crate::packet::Packet;
use crate::read::{CaptureReader, ReadOutcome};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;

/// One host's capture as the merged stream reads it.
#[derive(Debug, Clone, Default)]
pub struct Feed {
    pub path: PathBuf,
    /// Subtracted from every timestamp of the file (µs).
    pub shift_us: i64,
    /// Connections (by `scan::ends`) another host captured too: which
    /// shared connection each is, and whether this copy is the mirror.
    pub copies: HashMap<(SocketAddr, SocketAddr), SharedCopy>,
    /// The host it is, as its packets say (`Packet::host`).
    pub host: u16,
}

/// A copy of a connection that several hosts captured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SharedCopy {
    /// The shared connection, the same number on every copy.
    pub shared: u32,
    /// Not the copy read as the connection (the one captured farther from
    /// its client): its exchanges tell the callee's time only.
    pub mirror: bool,
}

struct Pending {
    reader: CaptureReader<'static>,
    packet: Packet,
    has: bool,
}

fn shifted(at_us: u64, shift_us: i64) -> u64 {
    (at_us as i64).saturating_sub(shift_us).max(0) as u64
}

/// Calls `f` with every packet of `feeds`, merged (see the module comment).
/// A file cut or corrupt ends its own packets; the first such error is told.
pub fn read(feeds: &[Feed], f: &mut dyn FnMut(&Packet)) -> ReadOutcome {
    let mut error = None;
    let mut pending: Vec<Pending> = Vec::new();
    for feed in feeds {
        match CaptureReader::open(&feed.path) {
            Ok(reader) => pending.push(Pending {
                reader,
                packet: Packet::empty(),
                has: false,
            }),
            Err(e) => {
                error.get_or_insert(e);
                return ReadOutcome {
                    packets_read: 0,
                    dropped_while_capturing: None,
                    error,
                };
            }
        }
    }
    let advance = |p: &mut Pending, error: &mut Option<_>| match p.reader.read_into(&mut p.packet) {
        Ok(has) => p.has = has,
        Err(e) => {
            p.has = false;
            error.get_or_insert(e);
        }
    };
    for p in pending.iter_mut() {
        advance(p, &mut error);
    }
    loop {
        let next = pending
            .iter()
            .zip(feeds)
            .enumerate()
            .filter(|(_, (p, _))| p.has)
            .min_by_key(|(_, (p, feed))| shifted(p.packet.at_us, feed.shift_us))
            .map(|(i, _)| i);
        let Some(i) = next else { break };
        let (p, feed) = (&mut pending[i], &feeds[i]);
        p.packet.host = feed.host;
        p.packet.at_us = shifted(p.packet.at_us, feed.shift_us);
        f(&p.packet);
        advance(p, &mut error);
    }
    ReadOutcome {
        packets_read: pending.iter().map(|p| p.reader.packets_read()).sum(),
        dropped_while_capturing: pending
            .iter()
            .filter_map(|p| p.reader.dropped_while_capturing())
            .reduce(|a, b| a + b),
        error,
    }
}
