//! TCP flow reconstruction: packets → `Connection`s with Wireshark-style
//! analysis, reassembled streams → protocol `Exchange`s.

mod analysis;
mod callee;
mod conn;
mod events;
pub mod plaintext;
mod streams;
mod tcp;
mod udp;
mod window;

use crate::decode::{decode, Decoded, Skip, TcpPacket};
use crate::merged::SharedCopy;
use crate::packet::{LinkType, Packet};
use crate::reassembly::Budget;
use crate::tunnel::Tunnel;
use events::Events;
use std::hash::{BuildHasher, Hasher, RandomState};
use std::net::SocketAddr;
use whyslow_model::Timeline;

pub use analysis::{seq_gt, seq_lt};
pub(crate) use events::Events as StreamEvents;
pub use streams::Streams;
pub(crate) use tcp::TcpFlows;
pub(crate) use window::SERVICE_SAMPLE;
pub use window::{Window, DEFAULT_WINDOW_EXCHANGES, MIN_WINDOW_EXCHANGES};

/// Per-segment events kept per connection. At ~40 bytes an event, 100 000
/// events is ~4 MB: enough for minutes of a busy keep-alive connection.
pub const DEFAULT_MAX_EVENTS_PER_CONNECTION: usize = 100_000;
/// Per-segment events held over all connections at once (a segment event
/// is 40 bytes, an ACK event 32): ~10 MB. A connection's events leave with
/// it when analyze takes its window; without the bound they would grow with
/// the open connections up to connections × the per-connection bound.
/// Connections past it keep their counters, not events. Measured on a 1.3 GB
/// capture of 32 busy keep-alive connections: at 1 000 000, RSS on the whole
/// file was 1.13× RSS on a quarter; at 250 000, 1.00×.
pub const DEFAULT_MAX_EVENTS_TOTAL: usize = 250_000;
/// Connections tracked at once. Each costs a few hundred bytes, its HTTP
/// head buffers (4 KiB kept between messages, up to 64 KiB while a head is
/// incomplete) and at most 64 pending request labels of up to 200 bytes;
/// past the bound the idlest flow is closed early.
pub const DEFAULT_MAX_FLOWS: usize = 10_000;
/// Closed flows kept for their last packets (the final ACK, a retransmitted
/// FIN) before they are handed on; loopback and LAN captures carry those
/// within microseconds, so a few hundred connection closes later is long
/// after. Without this bound a closed flow stayed until `max_flows` forced
/// it out, and memory grew with every connection up to that bound.
const MAX_CLOSED_FLOWS: usize = 256;
/// Keys of handed-on connections remembered, so a packet of theirs even
/// later is ignored rather than taken for a connection seen mid-stream.
const RECENTLY_RETIRED: usize = 4096;
/// Out-of-order bytes held per direction while waiting for a hole to fill.
/// 1 MiB covers several round trips of a fast link's window.
pub const DEFAULT_MAX_HELD_PER_FLOW: usize = 1 << 20;
/// Out-of-order bytes held over all flows.
pub const DEFAULT_MAX_HELD_TOTAL: usize = 64 << 20;
/// Exchanges kept in the timeline; later ones are only counted. An exchange
/// is ~200 bytes (struct + normalized request), so 200 000 bound them to
/// ~40 MB: ~1 M small keep-alive requests (a 200 MB capture) would otherwise
/// take ~200 MB.
pub const DEFAULT_MAX_EXCHANGES: usize = 200_000;
/// Finished connections kept in the timeline (the first ones opened); later
/// ones, and their exchanges, are only counted. A short connection with its
/// ~10 segment/ACK events is ~1 KB, so 100 000 bound them to ~100 MB.
pub const DEFAULT_MAX_CONNECTIONS: usize = 100_000;
/// Protocol errors kept for the report; the rest are only counted.
pub const MAX_ERRORS: usize = 100;

/// Bounds on memory, all adjustable.
#[derive(Debug, Clone)]
pub struct Bounds {
    pub max_events_per_connection: usize,
    pub max_events_total: usize,
    pub max_flows: usize,
    pub max_held_bytes_per_flow: usize,
    pub max_held_bytes_total: usize,
    pub max_exchanges: usize,
    pub max_connections: usize,
}

impl Default for Bounds {
    fn default() -> Self {
        Bounds {
            max_events_per_connection: DEFAULT_MAX_EVENTS_PER_CONNECTION,
            max_events_total: DEFAULT_MAX_EVENTS_TOTAL,
            max_flows: DEFAULT_MAX_FLOWS,
            max_held_bytes_per_flow: DEFAULT_MAX_HELD_PER_FLOW,
            max_held_bytes_total: DEFAULT_MAX_HELD_TOTAL,
            max_exchanges: DEFAULT_MAX_EXCHANGES,
            max_connections: DEFAULT_MAX_CONNECTIONS,
        }
    }
}

/// Where a windowed analysis cuts its windows.
#[derive(Debug, Clone)]
pub struct WindowPolicy {
    /// Finished exchanges (or connections) per window, at most. A window
    /// is cut at `MIN_WINDOW_EXCHANGES` already when no service is under
    /// investigation, or when it holds `requests` of the service's requests.
    pub exchanges: usize,
    /// The service's requests a window must hold before it is cut short of
    /// `exchanges` (what the detectors that judge a population need; the
    /// default never cuts short).
    pub requests: usize,
}

impl Default for WindowPolicy {
    fn default() -> Self {
        WindowPolicy {
            exchanges: DEFAULT_WINDOW_EXCHANGES,
            requests: usize::MAX,
        }
    }
}

/// What a flow table is given: its memory bounds, where windows are cut,
/// and what is known besides the packets.
#[derive(Debug, Clone, Default)]
pub struct FlowOptions {
    pub bounds: Bounds,
    pub window: WindowPolicy,
    /// TLS session secrets (`--keylog`) to see inside TLS streams with.
    /// Held per session, a few hundred bytes each.
    pub keylog: Option<std::sync::Arc<whyslow_proto::tls::KeyLog>>,
    /// Ports known to listen (diagnose finds the target's and its backing
    /// services' on this host), so that a connection first seen mid-stream
    /// between two ephemeral ports is given the right server.
    pub listening: Vec<u16>,
    /// Plaintext of TLS connections from their endpoints' TLS library
    /// (`capture --ebpf`), read in place of their ciphertext.
    pub plaintext: Option<std::sync::Arc<plaintext::PlaintextFeed>>,
}

/// Packet counters of a `FlowTable`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FlowCounts {
    pub packets: u64,
    pub tcp_packets: u64,
    /// Not IPv4/IPv6 TCP or UDP (ARP, ICMP, fragments, unknown link types).
    pub non_tcp: u64,
    /// UDP datagrams: DNS flows' and the others (`other_udp`).
    pub udp_packets: u64,
    /// Packets the capture cut short (snapshot length), TCP or not.
    pub truncated_packets: u64,
    /// Packets read inside a tunnel, by the outermost (`Tunnel::index`).
    pub tunneled: [u64; Tunnel::ALL.len()],
    /// Packets in a tunnel whose contents are not read (in `non_tcp` too).
    pub tunnels_unopened: [u64; Tunnel::ALL.len()],
    /// Flows closed early because `max_flows` was reached.
    pub evicted_flows: u64,
    /// Connections seen, and those left out of the timeline (`max_connections`).
    pub connections_seen: u64,
    pub connections_dropped: u64,
    /// Exchanges seen, and those left out of the timeline (`max_exchanges`,
    /// or on a connection left out).
    pub exchanges_seen: u64,
    pub exchanges_dropped: u64,
    /// Packets of a connection already closed and handed on (a last ACK or
    /// retransmitted FIN long after the close): ignored, not a new connection.
    pub late_packets: u64,
}

/// A flow's two ends in a fixed order, and the capture (host) it is in:
/// two hosts' loopbacks may carry one 4-tuple each.
type Key = (SocketAddr, SocketAddr, u16);

/// Connections several hosts captured, by each copy's ends (in either
/// order) and host.
pub type Copies = std::collections::HashMap<(SocketAddr, SocketAddr, u16), SharedCopy>;

/// Hasher of flow keys: FxHash's rotate-xor-multiply (as in rustc-hash), a
/// few times faster than SipHash on these small keys, which are looked up
/// once per packet. Seeded per table; the table's size bound (`max_flows`)
/// caps what crafted collisions could cost.
#[derive(Clone, Copy)]
struct FlowHasher(u64);

/// FxHash's multiplier (rustc-hash).
const FX_K: u64 = 0x51_7c_c1_b7_27_22_0a_95;

impl FlowHasher {
    fn add(&mut self, w: u64) {
        self.0 = (self.0.rotate_left(5) ^ w).wrapping_mul(FX_K);
    }
}

impl Hasher for FlowHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let mut w = [0u8; 8];
            w.copy_from_slice(c);
            self.add(u64::from_le_bytes(w));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut w = [0u8; 8];
            w[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(w));
        }
    }
    fn write_u8(&mut self, i: u8) {
        self.add(u64::from(i));
    }
    fn write_u16(&mut self, i: u16) {
        self.add(u64::from(i));
    }
    fn write_u32(&mut self, i: u32) {
        self.add(u64::from(i));
    }
    fn write_u64(&mut self, i: u64) {
        self.add(i);
    }
    fn write_usize(&mut self, i: usize) {
        self.add(i as u64);
    }
    fn finish(&self) -> u64 {
        // hashbrown takes the bucket from the low bits: fold the high ones in.
        self.0.rotate_left(26)
    }
}

#[derive(Clone, Copy)]
struct FlowHashState(u64);

impl FlowHashState {
    fn new() -> Self {
        FlowHashState(RandomState::new().hash_one(0u8))
    }
}

impl Default for FlowHashState {
    fn default() -> Self {
        FlowHashState::new()
    }
}

impl BuildHasher for FlowHashState {
    type Hasher = FlowHasher;
    fn build_hasher(&self) -> FlowHasher {
        FlowHasher(self.0)
    }
}

fn key(a: SocketAddr, b: SocketAddr, host: u16) -> Key {
    if a <= b {
        (a, b, host)
    } else {
        (b, a, host)
    }
}

/// Streaming flow table: push packets in capture order, then `finish`.
///
/// Two halves: `TcpFlows` rebuilds connections and their in-order bytes,
/// `Streams` runs each connection's protocol analyzer and keeps what ends.
/// Here they run one after the other on each packet; `analyze` runs them on
/// two threads (`halves`).
pub struct FlowTable {
    tcp: TcpFlows,
    streams: Streams,
    /// What the TCP half told about the packet being pushed (reused buffer).
    events: Events,
}

impl FlowTable {
    pub fn new(options: FlowOptions) -> Self {
        Self::with(options, false)
    }

    /// A table whose exchanges and connections are taken in windows.
    pub fn windowed(options: FlowOptions) -> Self {
        Self::with(options, true)
    }

    fn with(options: FlowOptions, windowed: bool) -> Self {
        let budget = Budget {
            held: 0,
            max_total: options.bounds.max_held_bytes_total,
            events: 0,
            max_events: options.bounds.max_events_total,
            released: Default::default(),
        };
        let released = budget.released.clone();
        FlowTable {
            streams: Streams::new(options.clone(), released, windowed),
            tcp: TcpFlows::new(options, budget),
            events: Events::default(),
        }
    }

    /// The two halves, to run on two threads: whatever the TCP half writes
    /// to a `StreamEvents` goes, in order, to the protocol half's `apply`.
    pub(crate) fn halves(&mut self) -> (&mut TcpFlows, &mut Streams) {
        (&mut self.tcp, &mut self.streams)
    }

    /// The connections several hosts captured (`merged`): each read from
    /// one copy, the other copies kept for the callee's times.
    pub fn set_copies(&mut self, copies: Copies) {
        self.tcp.copies = copies;
    }

    /// The protocol half: windows are cut from it.
    pub fn streams(&mut self) -> &mut Streams {
        &mut self.streams
    }

    pub fn counters(&self) -> FlowCounts {
        let s = self.streams.counters;
        FlowCounts {
            connections_dropped: s.connections_dropped,
            exchanges_seen: s.exchanges_seen,
            exchanges_dropped: s.exchanges_dropped,
            ..self.tcp.counters
        }
    }

    /// UDP datagrams that were not DNS, by the lower of their ports, the
    /// most first; port 0 for every port past those counted.
    pub fn other_udp(&self) -> Vec<(u16, u64)> {
        self.tcp.other_udp()
    }

    /// Protocol parse errors met so far ("connection 3 (a → b): ...").
    pub fn errors(&self) -> &[String] {
        &self.streams.errors
    }

    /// Decodes and accounts one captured packet.
    pub fn push(&mut self, p: &Packet) {
        self.push_frame(p.link, &p.data, p.orig_len, p.at_us, p.number);
    }

    /// As `push`, from the parts of a packet: `frame` as captured, `orig_len`
    /// its length on the wire.
    pub fn push_frame(
        &mut self,
        link: LinkType,
        frame: &[u8],
        orig_len: u32,
        at_us: u64,
        number: u64,
    ) {
        let cut = (frame.len() as u64) < u64::from(orig_len);
        self.push_decoded(decode(link, frame), cut, at_us, number);
    }

    /// As `push`, for a packet already decoded (`cut`: shorter than on the wire).
    pub fn push_decoded(&mut self, tcp: Result<Decoded, Skip>, cut: bool, at_us: u64, number: u64) {
        self.tcp
            .push_decoded(tcp, cut, at_us, number, &mut self.events);
        self.streams.apply(&mut self.events);
    }

    /// Accounts one decoded TCP segment (`number`: 1-based packet number).
    pub fn push_tcp(&mut self, tcp: &TcpPacket, at_us: u64, number: u64) {
        self.tcp.push_tcp(tcp, at_us, number, &mut self.events);
        self.streams.apply(&mut self.events);
    }

    /// Ends every open flow (end of capture). Errors then include theirs.
    pub fn close_all(&mut self) {
        self.tcp.close_all(&mut self.events);
        self.streams.apply(&mut self.events);
        self.streams.close_events_only();
        self.streams.note_errors_dropped();
    }

    /// The timeline: connections by id (tshark's tcp.stream order), exchanges
    /// by request start.
    pub fn finish(mut self) -> Timeline {
        self.take_timeline()
    }

    /// As `finish`, leaving the table's counters and errors to read.
    pub fn take_timeline(&mut self) -> Timeline {
        self.close_all();
        self.streams.take_timeline()
    }
}
