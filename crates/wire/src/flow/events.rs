//! What the TCP half of the flow table tells its protocol half, in capture
//! order: a connection opened, bytes of one direction reassembled in order,
//! bytes never captured, a connection ended. The halves may run on two
//! threads (`analyze`): the TCP half on the reader's, the protocol half on
//! its own, passing these in batches, so that neither alone sets the pace.

use crate::reassembly::Chunk;
use std::net::SocketAddr;
use std::ops::Range;
use whyslow_model::{Connection, Direction};

/// One thing a connection did. `slot`: where the protocol half keeps the
/// connection while it is open (the TCP half reuses a slot once its `End`
/// went out, so the protocol half needs no lookup by key).
#[derive(Debug)]
pub(crate) enum StreamEvent {
    Open {
        slot: u32,
        id: u32,
        client: SocketAddr,
        server: SocketAddr,
        at_us: u64,
        /// First seen without its SYN: it began before the capture did.
        mid_stream: bool,
        /// A UDP flow of DNS datagrams, each one length-prefixed message.
        udp: bool,
        origin: super::conn::Origin,
    },
    Data {
        slot: u32,
        direction: Direction,
        /// Where the bytes are in `Events::bytes`.
        bytes: Range<usize>,
        at_us: u64,
        packet: u64,
    },
    Gap {
        slot: u32,
        direction: Direction,
        len: u64,
    },
    /// The connection's TCP side, whole: events, counters, handshake.
    End { slot: u32, conn: Box<Connection> },
}

impl StreamEvent {
    /// Capture time of the event, where it has one.
    pub fn at_us(&self) -> Option<u64> {
        match self {
            StreamEvent::Open { at_us, .. } | StreamEvent::Data { at_us, .. } => Some(*at_us),
            _ => None,
        }
    }
}

/// A batch of events and the bytes their `Data` carry, back to back.
#[derive(Debug, Default)]
pub(crate) struct Events {
    pub list: Vec<StreamEvent>,
    pub bytes: Vec<u8>,
}

impl Events {
    /// A chunk the reassembler handed on for `direction` of `slot`.
    pub fn chunk(&mut self, slot: u32, direction: Direction, c: Chunk) {
        match c {
            Chunk::Data {
                data,
                at_us,
                packet,
            } => {
                let start = self.bytes.len();
                self.bytes.extend_from_slice(data);
                self.list.push(StreamEvent::Data {
                    slot,
                    direction,
                    bytes: start..self.bytes.len(),
                    at_us,
                    packet,
                });
            }
            Chunk::Gap(len) => self.list.push(StreamEvent::Gap {
                slot,
                direction,
                len,
            }),
        }
    }
}
