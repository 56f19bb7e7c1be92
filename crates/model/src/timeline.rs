use serde::{Deserialize, Serialize};
use smol_str::SmolStr;
use std::net::{IpAddr, SocketAddr};

/// Everything seen during one run: connections and the exchanges on them.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Timeline {
    pub connections: Vec<Connection>,
    pub exchanges: Vec<Exchange>,
}

/// from[k]: where the exchange that belongs at k (by request start, then
/// id) is now; None when they are in order already.
///
/// The (time, id) pair is packed into one integer of as few bits as the
/// window needs (time offset above, id offset below) and radix-sorted
/// (radsort, stable, bytes that never vary skipped). A window of 50 000
/// keys took 0.96 ms with the standard library's unstable sort of u64
/// keys, 0.40 ms radix-sorted as u64 and 0.29 ms as u32. When the ids
/// already rise along the vector (the flow table numbers exchanges as it
/// appends them), the stable sort keeps ties in id order by itself and the
/// key is the time offset alone: u32 for windows up to 71 minutes long.
fn sorted_positions(exchanges: &[Exchange]) -> Option<Vec<usize>> {
    let at = |e: &Exchange| (e.request_first_at_us, e.id);
    if exchanges.is_sorted_by_key(at) {
        return None;
    }
    let mut ids_rising = true;
    let mut last_id = None;
    let (first, last, low_id, high_id) =
        exchanges
            .iter()
            .fold((u64::MAX, 0, u32::MAX, 0), |(t0, t1, i0, i1), e| {
                let (t, i) = at(e);
                ids_rising &= last_id.is_none_or(|l| l < i);
                last_id = Some(i);
                (t0.min(t), t1.max(t), i0.min(i), i1.max(i))
            });
    let bits = |v: u64| u64::BITS - v.leading_zeros();
    let id_bits = if ids_rising {
        0
    } else {
        bits(u64::from(high_id - low_id))
    };
    let key_bits = bits(last - first) + id_bits;
    let id_mask = (1u64 << id_bits) - 1;
    let packed = |e: &Exchange| {
        (e.request_first_at_us - first) << id_bits | (u64::from(e.id - low_id) & id_mask)
    };
    if u32::try_from(exchanges.len()).is_ok() {
        if key_bits <= u32::BITS {
            return Some(radix_positions(exchanges, |e| packed(e) as u32));
        }
        if key_bits <= u64::BITS {
            return Some(radix_positions(exchanges, packed));
        }
    }
    let mut keys: Vec<((u64, u32), usize)> = exchanges
        .iter()
        .enumerate()
        .map(|(i, e)| (at(e), i))
        .collect();
    keys.sort_unstable();
    Some(keys.into_iter().map(|(_, i)| i).collect())
}

/// The exchanges' positions in the order of their `key`s (radix-sorted;
/// fewer than 2^32 exchanges).
fn radix_positions<K: radsort::Key>(
    exchanges: &[Exchange],
    key: impl Fn(&Exchange) -> K,
) -> Vec<usize> {
    let mut keys: Vec<(K, u32)> = exchanges
        .iter()
        .zip(0u32..)
        .map(|(e, i)| (key(e), i))
        .collect();
    radsort::sort_by_key(&mut keys, |k| k.0);
    keys.into_iter().map(|(_, i)| i as usize).collect()
}

impl Timeline {
    /// Connections by id (tshark's tcp.stream order), exchanges by request
    /// start. Exchanges are large and arrive in order of completion, far
    /// from sorted when calls are pipelined: their keys are sorted, then the
    /// exchanges are permuted in place, each cycle followed once.
    pub fn sort(&mut self) {
        self.connections.sort_by_key(|c| c.id);
        let Some(mut from) = sorted_positions(&self.exchanges) else {
            return;
        };
        // Each cycle of the permutation rotates with every exchange moved
        // once (a swap moves two, through a third place).
        let base = self.exchanges.as_mut_ptr();
        for start in 0..from.len() {
            if from[start] == start {
                continue;
            }
            // SAFETY: `from` is a permutation of 0..len (the positions in
            // `keys`), so every index is in bounds and each slot is read
            // once and written once. `hole` is the one slot moved out and
            // not yet refilled; nothing between the read and the last write
            // can panic.
            unsafe {
                let held = std::ptr::read(base.add(start));
                let mut hole = start;
                loop {
                    let next = *from.get_unchecked(hole);
                    *from.get_unchecked_mut(hole) = hole;
                    if next == start {
                        std::ptr::write(base.add(hole), held);
                        break;
                    }
                    std::ptr::copy_nonoverlapping(base.add(next), base.add(hole), 1);
                    hole = next;
                }
            }
        }
    }

    pub fn connection(&self, id: u32) -> Option<&Connection> {
        self.connections.iter().find(|c| c.id == id)
    }

    /// Keeps only connections to servers on `ports`, and their exchanges.
    pub fn retain_servers(&mut self, ports: &[u16]) {
        self.connections
            .retain(|c| ports.contains(&c.server.port()));
        let kept: std::collections::HashSet<u32> = self.connections.iter().map(|c| c.id).collect();
        self.exchanges.retain(|e| kept.contains(&e.connection));
    }

    pub fn exchanges_on(&self, connection: u32) -> impl Iterator<Item = &Exchange> {
        self.exchanges
            .iter()
            .filter(move |e| e.connection == connection)
    }
}

/// Which way bytes travel on a connection. The client is the side that sent
/// the SYN (or, when the handshake was not seen, the side with the ephemeral port).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    ToServer,
    ToClient,
}

impl Direction {
    pub fn reverse(self) -> Direction {
        match self {
            Direction::ToServer => Direction::ToClient,
            Direction::ToClient => Direction::ToServer,
        }
    }
    /// The side that sends in this direction.
    pub fn sender(self) -> &'static str {
        match self {
            Direction::ToServer => "client",
            Direction::ToClient => "server",
        }
    }
    pub fn receiver(self) -> &'static str {
        self.reverse().sender()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CloseKind {
    Fin,
    Rst,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SegmentFlags {
    pub syn: bool,
    pub fin: bool,
    pub rst: bool,
    pub psh: bool,
    /// Same sequence range sent again.
    pub retransmission: bool,
    /// Arrived before a gap in the sequence space was filled.
    pub out_of_order: bool,
    /// Advertised a receive window of zero.
    pub zero_window: bool,
}

/// One TCP segment that carried data (or SYN/FIN/RST), in one direction.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Segment {
    /// 1-based packet number in the capture (as Wireshark counts them).
    pub packet: u64,
    pub at_us: u64,
    pub direction: Direction,
    /// Offset of the first payload byte in this direction's byte stream
    /// (relative sequence number, 0 = first byte after SYN).
    pub stream_offset: u64,
    pub len: u32,
    pub flags: SegmentFlags,
}

/// One acknowledgement: a segment whose ACK number moved forward (or a pure
/// window update), with no payload of its own or with payload (piggybacked).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AckEvent {
    pub packet: u64,
    pub at_us: u64,
    /// Direction the ACK segment travelled; it acknowledges bytes of the reverse direction.
    pub direction: Direction,
    /// Relative stream offset acknowledged (all bytes before it are received).
    pub acked_offset: u64,
    /// Receive window advertised, in bytes (scaled when the scale was seen).
    pub window: u32,
    /// True when the ACK rode on a data segment.
    pub piggybacked: bool,
}

/// Per-direction counters.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DirectionStats {
    pub packets: u64,
    pub payload_bytes: u64,
    pub retransmissions: u64,
    pub out_of_order: u64,
    pub zero_windows: u64,
    pub dup_acks: u64,
    /// Stretches of the stream the capture never held (`Gap`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub gaps: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub gap_bytes: u64,
}

fn is_zero_u16(n: &u16) -> bool {
    *n == 0
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// Bytes of one direction of a stream the capture never held (tcpdump's or
/// the kernel's drops, a snapshot length): no retransmission and no wait,
/// a hole analysis resumed after.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Gap {
    /// The last bytes the capture carried before the hole was noticed (on
    /// any connection, at most a batch of packets late): the hole lies
    /// before the next bytes of its stream.
    pub after_us: u64,
    pub direction: Direction,
    pub bytes: u64,
}

/// Gaps kept per connection; `DirectionStats` counts them all.
pub const GAPS_KEPT: usize = 256;

/// One TCP connection (or, for active sources, one client connection).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Connection {
    pub id: u32,
    pub client: SocketAddr,
    pub server: SocketAddr,
    pub first_at_us: u64,
    pub last_at_us: u64,
    /// SYN → SYN/ACK, when both were seen.
    pub syn_at_us: Option<u64>,
    pub syn_ack_at_us: Option<u64>,
    /// The client's ACK that completed the handshake.
    pub established_at_us: Option<u64>,
    pub closed_by: Option<(Direction, CloseKind)>,
    pub to_server: DirectionStats,
    pub to_client: DirectionStats,
    /// Data-carrying and control segments, in capture order. Bounded: see `events_truncated`.
    pub segments: Vec<Segment>,
    /// ACK number advances and window changes, in capture order. Bounded likewise.
    pub acks: Vec<AckEvent>,
    /// True when per-segment events were dropped to keep memory bounded.
    pub events_truncated: bool,
    /// TLS was seen on this connection.
    pub tls: bool,
    /// What its TLS handshake said, decrypted or not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_facts: Option<TlsFacts>,
    /// What the stream carries, as sniffed from its first bytes.
    #[serde(default = "unknown_protocol")]
    pub protocol: Protocol,
    /// Exchanges it carried in the whole capture, windows before this one
    /// included (0 in reports written before it was counted).
    #[serde(default)]
    pub exchanges: u64,
    /// A Unix-domain socket's path: the connection was seen by the eBPF
    /// source alone, its addresses stand for its ends (`unix_socket`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub socket_path: Option<String>,
    /// The first `GAPS_KEPT` gaps in its streams, in capture order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gaps: Vec<Gap>,
    /// UDP: a flow of datagrams between two sockets, with no handshake,
    /// acknowledgement or close (its "connection" facts are empty).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub udp: bool,
    /// Of captures of several hosts (`capture.hosts`): the index of the
    /// host whose capture it was read from; 0 for the first, or the only one.
    #[serde(default, skip_serializing_if = "is_zero_u16")]
    pub host: u16,
    /// Of captures of several hosts: the connection, as one, that two or more
    /// hosts captured (the same number on each copy), when this is a copy.
    #[serde(skip)]
    pub shared: Option<u32>,
    /// A shared connection's copy that is not read as the connection (the
    /// one captured farther from its client): its exchanges only tell the
    /// callee's own time of each call (`Exchange::callee_us`).
    #[serde(skip)]
    pub mirror: bool,
}

/// What a TLS handshake said, read from its cleartext messages (and
/// EncryptedExtensions when decrypted).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TlsFacts {
    /// "1.2", "1.3".
    pub version: Option<String>,
    pub cipher: Option<String>,
    pub alpn: Option<String>,
    pub sni: Option<String>,
    /// Resumed (TLS 1.2 session id or ticket, TLS 1.3 PSK) rather than full.
    pub resumed: bool,
    /// ClientHello → the later of each side's first protected record: the
    /// client's Finished (TLS 1.3, resumed 1.2) or the server's (full 1.2),
    /// after which the client may send data. Known with or without keys.
    pub handshake_us: Option<u64>,
    /// Records opened with the key log's keys.
    pub decrypted: bool,
}

fn unknown_protocol() -> Protocol {
    Protocol::Unknown
}

impl Connection {
    /// The server as people know it: its address, or for a Unix-domain
    /// socket "unix:PATH".
    pub fn server_name(&self) -> String {
        match &self.socket_path {
            Some(path) => format!("unix:{path}"),
            None => self.server.to_string(),
        }
    }

    /// A copy without its packets' events (`segments`, `acks`), which are
    /// most of a connection's memory: what reads no event holds no copy.
    pub fn without_events(&self) -> Connection {
        Connection {
            id: self.id,
            client: self.client,
            server: self.server,
            first_at_us: self.first_at_us,
            last_at_us: self.last_at_us,
            syn_at_us: self.syn_at_us,
            syn_ack_at_us: self.syn_ack_at_us,
            established_at_us: self.established_at_us,
            closed_by: self.closed_by,
            to_server: self.to_server.clone(),
            to_client: self.to_client.clone(),
            segments: Vec::new(),
            acks: Vec::new(),
            events_truncated: self.events_truncated,
            tls: self.tls,
            tls_facts: self.tls_facts.clone(),
            protocol: self.protocol,
            exchanges: self.exchanges,
            socket_path: self.socket_path.clone(),
            gaps: self.gaps.clone(),
            udp: self.udp,
            host: self.host,
            shared: self.shared,
            mirror: self.mirror,
        }
    }

    pub fn new(id: u32, client: SocketAddr, server: SocketAddr, at_us: u64) -> Self {
        Connection {
            id,
            client,
            server,
            first_at_us: at_us,
            last_at_us: at_us,
            syn_at_us: None,
            syn_ack_at_us: None,
            established_at_us: None,
            closed_by: None,
            to_server: DirectionStats::default(),
            to_client: DirectionStats::default(),
            segments: Vec::new(),
            acks: Vec::new(),
            events_truncated: false,
            tls: false,
            tls_facts: None,
            protocol: Protocol::Unknown,
            exchanges: 0,
            socket_path: None,
            gaps: Vec::new(),
            udp: false,
            host: 0,
            shared: None,
            mirror: false,
        }
    }

    /// SYN → SYN/ACK: one network round trip plus the server's accept path.
    pub fn handshake_us(&self) -> Option<u64> {
        Some(self.syn_ack_at_us?.saturating_sub(self.syn_at_us?))
    }

    pub fn stats(&self, d: Direction) -> &DirectionStats {
        match d {
            Direction::ToServer => &self.to_server,
            Direction::ToClient => &self.to_client,
        }
    }

    pub fn stats_mut(&mut self, d: Direction) -> &mut DirectionStats {
        match d {
            Direction::ToServer => &mut self.to_server,
            Direction::ToClient => &mut self.to_client,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Protocol {
    Http1,
    Http2,
    Redis,
    Postgres,
    Memcached,
    /// MySQL and MariaDB's client/server protocol.
    Mysql,
    /// DNS, over UDP or TCP.
    Dns,
    Tls,
    /// Last: `Protocols` gives each a bit, up to this one.
    Unknown,
}

/// The protocols a set of exchanges speaks, found in one pass: the work
/// for a protocol a window does not speak (DNS, HTTP/2) then costs it no
/// pass of its own over a window of a few hundred thousand exchanges.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Protocols(u16);

impl Protocols {
    pub fn of(exchanges: &[Exchange]) -> Self {
        Protocols(
            exchanges
                .iter()
                .fold(0, |set, e| set | Self::bit(e.protocol)),
        )
    }

    fn bit(p: Protocol) -> u16 {
        // Every protocol has its own of the 16 bits: `Unknown` is the last.
        const _: () = assert!((Protocol::Unknown as u16) < 16);
        1 << p as u16
    }

    pub fn has(self, p: Protocol) -> bool {
        self.0 & Self::bit(p) != 0
    }
}

impl Protocol {
    /// An inbound request kind: HTTP requests as they are, other protocols
    /// with their name and server port ("redis :6379 GET user:?").
    pub fn request_kind(self, request: &str, port: u16) -> String {
        match self {
            Protocol::Http1 | Protocol::Http2 => request.to_string(),
            _ => format!("{} :{port} {request}", self.name()),
        }
    }

    /// A SQL database's protocol: statements, transactions, prepared
    /// statements by name or id.
    pub fn is_sql(self) -> bool {
        matches!(self, Protocol::Postgres | Protocol::Mysql)
    }

    /// The name people know the protocol by.
    pub fn name(self) -> &'static str {
        match self {
            Protocol::Http1 => "http",
            Protocol::Http2 => "h2",
            Protocol::Redis => "redis",
            Protocol::Postgres => "postgres",
            Protocol::Memcached => "memcached",
            Protocol::Mysql => "mysql",
            Protocol::Dns => "dns",
            Protocol::Tls => "tls",
            Protocol::Unknown => "tcp",
        }
    }
}

/// Whether an exchange is a request to the service under investigation or a
/// call the service made to something it depends on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum ExchangeRole {
    #[default]
    Inbound,
    Outbound,
}

/// How a request was answered, in its protocol's own terms.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// HTTP status code (HTTP/1 and HTTP/2).
    Http(u16),
    /// SQLSTATE of a PostgreSQL ErrorResponse or a MySQL ERR packet
    /// ("23505"); success has no status.
    Sqlstate(String),
    /// RESP error reply: its first word ("ERR", "WRONGTYPE", "MOVED").
    RedisError(String),
    /// memcached reply word ("HIT", "NOT_FOUND", "STORED", "EN", "SERVER_ERROR").
    Memcached(String),
    /// DNS response code ("NOERROR", "NXDOMAIN", "SERVFAIL"), with " TC"
    /// when the answer was truncated.
    Dns(String),
    /// gRPC status code of a call's trailers (`grpc-status`; 0 is OK).
    Grpc(u8),
}

impl Status {
    /// The HTTP status code, when this is one.
    pub fn http(&self) -> Option<u16> {
        match self {
            Status::Http(code) => Some(*code),
            _ => None,
        }
    }

    /// The server refused or failed the request (not a cache miss or a 4xx/5xx only).
    pub fn is_error(&self) -> bool {
        match self {
            Status::Http(code) => *code >= 500,
            Status::Sqlstate(_) | Status::RedisError(_) => true,
            Status::Memcached(word) => word.contains("ERROR"),
            // NXDOMAIN is an answer (the name does not exist), as a 404 is.
            Status::Dns(rcode) => !rcode.starts_with("NOERROR") && !rcode.starts_with("NXDOMAIN"),
            Status::Grpc(code) => GRPC_SERVER_ERRORS.contains(code),
        }
    }
}

/// gRPC codes a server's fault or overload gives (gRPC's statuscodes.md:
/// UNKNOWN, DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED, ABORTED, INTERNAL,
/// UNAVAILABLE, DATA_LOSS); the others answer the request, as a 4xx does.
const GRPC_SERVER_ERRORS: [u8; 7] = [2, 4, 8, 10, 13, 14, 15];

/// PostgreSQL transaction state after an exchange (ReadyForQuery).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TxState {
    Idle,
    InTransaction,
    Failed,
}

/// A call sent this long after it was due waited before it was sent (for
/// a pooled connection, a lock): from 1 ms, above a thread's wake-up.
pub const WAITED_MIN_US: u64 = 1_000;

/// One request and its response on a connection.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Exchange {
    pub id: u32,
    pub connection: u32,
    pub protocol: Protocol,
    /// Normalized request: "POST /search" (query string dropped), "GET user:?",
    /// "SELECT * FROM t WHERE id = ?". Never carries literals, bodies or credentials.
    pub request: SmolStr,
    pub status: Option<Status>,
    pub request_first_at_us: u64,
    pub request_last_at_us: u64,
    pub response_first_at_us: Option<u64>,
    pub response_last_at_us: Option<u64>,
    pub request_bytes: u64,
    pub response_bytes: u64,
    /// Packet numbers of the first and last segment carrying the request / response.
    pub request_packets: (u64, u64),
    pub response_packets: Option<(u64, u64)>,
    /// Response carried a Content-Encoding (compressed).
    pub response_encoded: bool,
    pub role: ExchangeRole,
    /// For outbound exchanges: the inbound exchange they were made for
    /// (attribution's conclusion).
    pub parent: Option<u32>,
    /// For an outbound call read from spans: the inbound exchange its
    /// span's nearest server ancestor is, as the trace said it (the
    /// `span_parent` rule reads it; attribution writes `parent`).
    #[serde(skip)]
    pub span_parent: Option<u32>,
    /// HTTP/2 stream the exchange ran on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream: Option<u32>,
    /// Rows (SQL CommandComplete), items (memcached values, RESP array length)
    /// where the protocol says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rows: Option<u64>,
    /// Hash of the request's parameter values (literals, bind values, keys'
    /// variable parts): equal digests with equal `request` mean the same call
    /// repeated. Never the values themselves.
    #[serde(default, skip_serializing_if = "Option::is_none", with = "digest_hex")]
    pub params_digest: Option<u64>,
    /// The source did not see the parameters (a span's statement with its
    /// placeholders only): repeats cannot be told from the same call again.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub params_unknown: bool,
    /// When the caller issued the call, where the source knows it apart from
    /// when it was sent (a client span begins before its pooled connection
    /// is handed over; its traced callee says when it arrived).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub due_at_us: Option<u64>,
    /// SQL: transaction state when the server was ready again (PostgreSQL's
    /// ReadyForQuery, MySQL's status flags).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transaction: Option<TxState>,
    /// The distributed trace the request carried (W3C `traceparent`, a
    /// sqlcommenter comment), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<crate::TraceId>,
    /// For outbound exchanges: how `parent` was chosen; Ambiguous when no
    /// request could be told apart (then `parent` is None). None for
    /// inbound exchanges and for calls made while no request waited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attribution: Option<crate::Attribution>,
    /// For an outbound call given to a request: the attribution rule that
    /// gave it (`Rule`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule: Option<crate::Rule>,
    /// The thread that sent the request (an outbound call) or read it (an
    /// inbound request), when an eBPF source saw it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thread: Option<crate::Thread>,
    /// For an inbound request with a `thread`: when that thread's read of
    /// its first bytes returned (less the two clocks' slack). A thread-per-request server takes a
    /// request up only once its thread is free: until then the bytes wait
    /// in the socket, and the thread may still be serving another request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_at_us: Option<u64>,
    /// For a call on a thread the eBPF source saw started: its starter,
    /// that one's starter, … nearest first (`ThreadStart`). Boxed: few
    /// exchanges have one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_by: Option<Box<[crate::ThreadStart]>>,
    /// For an outbound call that waited for a connection of its client pool
    /// (`pool_queueing`'s inference): when its request had it due. The wait
    /// runs from here to `request_first_at_us`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool_wait_from_us: Option<u64>,
    /// For a DNS answer: the addresses its A/AAAA records gave, which the
    /// call that follows a lookup goes to. Boxed: few exchanges have one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolved_to: Option<Box<[IpAddr]>>,
    /// For a call whose callee's end another host's capture holds too: the
    /// time the callee took, its first request byte → last response byte as
    /// it saw them. What the caller saw past it was the network's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub callee_us: Option<u64>,
}

/// Digests travel as 16 hex digits: JSON numbers lose precision past 2^53.
mod digest_hex {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &Option<u64>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            Some(d) => s.serialize_str(&format!("{d:016x}")),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
        let text: Option<String> = Option::deserialize(d)?;
        text.map(|t| u64::from_str_radix(&t, 16).map_err(serde::de::Error::custom))
            .transpose()
    }
}

impl Exchange {
    /// A request on `connection` with nothing measured yet: analyzers fill in
    /// what their protocol says.
    pub fn new(connection: u32, protocol: Protocol, request: SmolStr) -> Self {
        Exchange {
            id: 0,
            connection,
            protocol,
            request,
            status: None,
            request_first_at_us: 0,
            request_last_at_us: 0,
            response_first_at_us: None,
            response_last_at_us: None,
            request_bytes: 0,
            response_bytes: 0,
            request_packets: (0, 0),
            response_packets: None,
            response_encoded: false,
            role: ExchangeRole::Inbound,
            parent: None,
            stream: None,
            rows: None,
            params_digest: None,
            transaction: None,
            trace: None,
            attribution: None,
            rule: None,
            span_parent: None,
            thread: None,
            read_at_us: None,
            started_by: None,
            pool_wait_from_us: None,
            resolved_to: None,
            params_unknown: false,
            due_at_us: None,
            callee_us: None,
        }
    }

    /// When the call ended: its answer's last byte, or its request's last
    /// byte when unanswered. The one end every stage measures a call to.
    pub fn end_us(&self) -> u64 {
        self.response_last_at_us.unwrap_or(self.request_last_at_us)
    }

    /// Whether the source saw this call wait between being due and being
    /// sent (`due_at_us`); None where only timing can tell (packets).
    pub fn waited_before_sent(&self) -> Option<bool> {
        self.due_at_us
            .map(|due| self.request_first_at_us >= due.saturating_add(WAITED_MIN_US))
    }

    /// Request first byte → response last byte (or → request end when no response).
    pub fn duration_us(&self) -> u64 {
        self.response_last_at_us
            .unwrap_or(self.request_last_at_us)
            .saturating_sub(self.request_first_at_us)
    }

    /// Request last byte → response first byte: the time the server took.
    pub fn wait_us(&self) -> Option<u64> {
        Some(
            self.response_first_at_us?
                .saturating_sub(self.request_last_at_us),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn protocols_are_those_the_exchanges_speak() {
        let of = |p| Exchange::new(0, p, "x".into());
        let speaks = Protocols::of(&[
            of(Protocol::Http1),
            of(Protocol::Dns),
            of(Protocol::Unknown),
        ]);
        let said = [Protocol::Http1, Protocol::Dns, Protocol::Unknown];
        for p in [
            Protocol::Http1,
            Protocol::Http2,
            Protocol::Dns,
            Protocol::Mysql,
            Protocol::Unknown,
        ] {
            assert_eq!(speaks.has(p), said.contains(&p), "{p:?}");
        }
        assert!(!Protocols::of(&[]).has(Protocol::Http1));
    }

    /// Pseudo-random starts with many ties (times `time_step` apart), ids
    /// unique (`id_step` apart): sorted as a stable sort by (start, id) would.
    fn sorts_like_a_stable_sort(time_step: u64, id_step: u32) {
        sorts_with_ids(time_step, id_step, false);
        sorts_with_ids(time_step, id_step, true);
    }

    /// As `sorts_like_a_stable_sort`, the ids falling or rising along the
    /// vector.
    fn sorts_with_ids(time_step: u64, id_step: u32, rising: bool) {
        let mut t = Timeline::default();
        let mut x: u64 = 7;
        for n in 0..500u32 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let mut e = Exchange::new(n % 7, Protocol::Redis, format!("r{n}").into());
            e.id = if rising { n } else { 499 - n } * id_step;
            e.request_first_at_us = 1_000 + (x >> 33) % 50 * time_step;
            t.exchanges.push(e);
        }
        let mut want = t.exchanges.clone();
        want.sort_by_key(|e| (e.request_first_at_us, e.id));
        t.sort();
        let ids = |v: &[Exchange]| {
            v.iter()
                .map(|e| (e.id, e.request.clone()))
                .collect::<Vec<_>>()
        };
        assert_eq!(ids(&t.exchanges), ids(&want), "ids rising: {rising}");
    }

    #[test]
    fn sort_orders_exchanges_by_start_then_id_like_a_stable_sort() {
        sorts_like_a_stable_sort(1, 1);
    }

    #[test]
    fn sort_is_the_same_whatever_the_width_of_the_packed_key() {
        // Time offsets up to 49 steps (6 bits), id offsets up to 499 (9 bits).
        // 32 bits exactly, then one more: the u32 and the u64 keys.
        sorts_like_a_stable_sort(1 << 12, 1 << 5);
        sorts_like_a_stable_sort(1 << 13, 1 << 5);
        // 64 bits exactly, then past them: the (start, id) pairs.
        sorts_like_a_stable_sort(1 << 49, 1);
        sorts_like_a_stable_sort(1 << 50, 1);
        sorts_like_a_stable_sort(1 << 40, 1 << 22);
    }
}
