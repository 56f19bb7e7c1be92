//! Plaintext of TLS connections, read from an endpoint's TLS library (the
//! eBPF source's OpenSSL uprobes) rather than from the packets: the flow
//! table feeds it to the connection's analyzer in place of the ciphertext,
//! in capture time, so a TLS connection without a key log is read as if it
//! were in the clear. The packets still give the connection its TCP side
//! (handshake, segments, retransmissions).
//!
//! The same feed carries the calls on Unix-domain sockets, which no packet
//! shows (`EventsOnly`): the flow table opens those connections from their
//! chunks alone.
//!
//! The feed is handed over whole, sorted by time, and read once: the flow
//! table's cursor moves with the packets' clock.

use foldhash::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use whyslow_model::Direction;

/// One library call's plaintext on one socket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlainChunk {
    /// Capture clock: a write's entry, a read's return.
    pub at_us: u64,
    /// The socket's ends, from the calling process's side.
    pub local: SocketAddr,
    pub remote: SocketAddr,
    /// Written (true) or read by the calling process.
    pub sent: bool,
    /// The first bytes (the source bounds them).
    pub data: Vec<u8>,
    /// Bytes the call moved, whole: those past `data` are a gap.
    pub whole: u64,
    /// Set when no packet shows the connection.
    pub events_only: Option<EventsOnly>,
}

/// A connection seen only through its endpoints' socket calls: a
/// Unix-domain socket, with addresses that stand for its ends
/// (`whyslow_model::unix_socket`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventsOnly {
    pub path: Arc<str>,
    /// Which of `local` and `remote` is the server's end.
    pub server: SocketAddr,
}

/// A connection's ends, whichever side saw them: the smaller first.
pub(crate) type PairKey = (SocketAddr, SocketAddr);

fn canonical(a: SocketAddr) -> SocketAddr {
    SocketAddr::new(a.ip().to_canonical(), a.port())
}

fn pair(a: SocketAddr, b: SocketAddr) -> PairKey {
    let (a, b) = (canonical(a), canonical(b));
    if a <= b {
        (a, b)
    } else {
        (b, a)
    }
}

/// The chunks of every connection, in time order.
#[derive(Debug, Default)]
pub struct PlaintextFeed {
    chunks: Vec<PlainChunk>,
    /// Connection of each chunk (index into `keys`).
    key_of: Vec<u32>,
    keys: HashMap<PairKey, u32>,
    /// Chunks left out: the other end of a connection whose plaintext one
    /// end already gives (both ends traced read the same bytes).
    pub other_side: u64,
}

impl PlaintextFeed {
    /// Sorts `chunks` by time; where both ends of a connection were traced,
    /// keeps the end seen first.
    pub fn new(mut chunks: Vec<PlainChunk>) -> Self {
        chunks.sort_by_key(|c| c.at_us);
        let mut feed = PlaintextFeed::default();
        let mut side: Vec<SocketAddr> = Vec::new();
        for c in chunks {
            let k = pair(c.local, c.remote);
            let next = feed.keys.len() as u32;
            let key = *feed.keys.entry(k).or_insert(next);
            if key == next {
                side.push(canonical(c.local));
            }
            if side[key as usize] != canonical(c.local) {
                feed.other_side += 1;
                continue;
            }
            feed.key_of.push(key);
            feed.chunks.push(c);
        }
        feed
    }

    pub fn len(&self) -> usize {
        self.chunks.len()
    }

    pub fn is_empty(&self) -> bool {
        self.chunks.is_empty()
    }

    /// The feed's connection between `client` and `server`, if it has one.
    pub(crate) fn key(&self, client: SocketAddr, server: SocketAddr) -> Option<u32> {
        self.keys.get(&pair(client, server)).copied()
    }

    pub(crate) fn keys(&self) -> usize {
        self.keys.len()
    }

    pub(crate) fn chunk(&self, i: usize) -> Option<(u32, &PlainChunk)> {
        Some((*self.key_of.get(i)?, self.chunks.get(i)?))
    }
}

/// Which way a chunk's bytes went on a connection from `client`.
pub(crate) fn direction(c: &PlainChunk, client: SocketAddr) -> Direction {
    let from_client = (canonical(c.local) == canonical(client)) == c.sent;
    if from_client {
        Direction::ToServer
    } else {
        Direction::ToClient
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(at_us: u64, local: &str, remote: &str, sent: bool) -> PlainChunk {
        PlainChunk {
            at_us,
            local: local.parse().unwrap(),
            remote: remote.parse().unwrap(),
            sent,
            data: b"x".to_vec(),
            whole: 1,
            events_only: None,
        }
    }

    #[test]
    fn one_end_of_a_connection_is_kept_and_chunks_go_in_time_order() {
        let feed = PlaintextFeed::new(vec![
            chunk(30, "127.0.0.1:443", "127.0.0.1:5000", false),
            chunk(10, "127.0.0.1:5000", "[::ffff:127.0.0.1]:443", true),
            chunk(20, "127.0.0.1:5000", "127.0.0.1:443", false),
            chunk(15, "127.0.0.1:5001", "127.0.0.1:443", true),
        ]);
        assert_eq!((feed.len(), feed.keys(), feed.other_side), (3, 2, 1));
        let times: Vec<_> = (0..3).map(|i| feed.chunk(i).unwrap().1.at_us).collect();
        assert_eq!(times, [10, 15, 20]);
        let client: SocketAddr = "127.0.0.1:5000".parse().unwrap();
        let server: SocketAddr = "127.0.0.1:443".parse().unwrap();
        assert_eq!(feed.key(server, client), feed.key(client, server));
        let (_, first) = feed.chunk(0).unwrap();
        assert_eq!(direction(first, client), Direction::ToServer);
        let (_, reply) = feed.chunk(2).unwrap();
        assert_eq!(direction(reply, client), Direction::ToClient);
    }
}
