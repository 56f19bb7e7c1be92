//! What a whole capture held, counted over every packet, connection and
//! exchange, however much of it was kept as evidence.

use crate::Protocol;
use serde::{Deserialize, Serialize};

/// Counts and latency distributions over the whole capture.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CaptureSummary {
    pub packets: u64,
    /// TCP connections and UDP flows (`udp_flows` of them).
    pub connections: u64,
    pub tls_connections: u64,
    /// Flows of DNS datagrams among `connections`.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub udp_flows: u64,
    /// UDP datagrams that were not DNS, by the lower of their ports: counted, not read.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub other_udp: Vec<PortPackets>,
    /// Packets that came in a tunnel (VXLAN, Geneve, GRE, ERSPAN, IP in IP):
    /// read as the packets they carry, or counted where not opened.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tunnels: Vec<TunnelPackets>,
    /// Every exchange rebuilt from the capture, each analyzed.
    pub exchanges: u64,
    pub retransmissions: u64,
    pub zero_windows: u64,
    /// Bytes the capture never held (drops by tcpdump or the kernel, a
    /// snapshot length): counted, never read as retransmissions or waits.
    #[serde(default, skip_serializing_if = "CaptureGaps::is_empty")]
    pub gaps: CaptureGaps,
    /// Packets the capturing tool counted as dropped (pcapng interface
    /// statistics: isb_ifdrop + isb_osdrop), when the file says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dropped_while_capturing: Option<u64>,
    /// Per server: protocol, connections and exchanges.
    pub servers: Vec<ServerCount>,
    /// Inbound request kinds, each followed by the call groups made for it;
    /// calls made for no request last.
    pub groups: Vec<ExchangeGroup>,
    /// What was kept for evidence (`--timeline`, `--html`, findings'
    /// examples), within the `--max-*` bounds; everything else was counted
    /// and analyzed, then let go.
    pub kept_exchanges: u64,
    pub kept_connections: u64,
    /// Windows the capture was analyzed in, and those cut at a moment
    /// when a request of the service was still open for too long.
    pub windows: u64,
    pub windows_forced: u64,
    /// The service under investigation and how it was chosen.
    #[serde(default)]
    pub service: ServiceChoice,
    /// Servers (ports) whose exchanges nest inside the service's requests.
    #[serde(default)]
    pub backing_ports: Vec<u16>,
    /// Packets that were not IPv4/IPv6 TCP or UDP (ARP, ICMP, fragments), and
    /// packets the capture cut short (snapshot length).
    #[serde(default)]
    pub non_tcp_packets: u64,
    #[serde(default)]
    pub truncated_packets: u64,
    /// Kept connections whose per-segment events were cut at
    /// `--max-events`/`--max-events-total`: TCP findings on them cover the
    /// events kept.
    #[serde(default)]
    pub connections_events_cut: u64,
    /// Inbound requests of the service that got their whole response.
    #[serde(default)]
    pub requests_answered: u64,
    /// Trace ids that more than one inbound request carried (a client
    /// reusing one `traceparent`): no call was attributed by them.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub repeated_trace_ids: u64,
    /// Threads that read a request before answering the last (event
    /// loops): no call was given by them, only by what the wire showed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub event_loops: Vec<crate::Thread>,
    /// Captures of several hosts analyzed as one (`analyze A B C`): each
    /// host, its clock against the first file's, and the connections it
    /// shares with the others. Empty for one capture.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hosts: Vec<HostClock>,
    /// The eBPF events read beside the capture, when there were any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threads: Option<ThreadSource>,
    /// The spans read, when the source was OTLP traces, not packets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spans: Option<SpanSource>,
}

/// Packets seen on one port (`port` 0: every port past those listed).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PortPackets {
    pub port: u16,
    pub packets: u64,
}

/// Packets in one kind of tunnel, by its outermost one when `opened` (the
/// packets inside were read), else by the one whose contents were not read.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TunnelPackets {
    pub tunnel: String,
    pub packets: u64,
    pub opened: bool,
}

/// What OTLP traces gave the analysis (`analyze traces.json`, `receive`).
/// Connections are lanes per peer: the most calls in flight at once.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SpanSource {
    /// The file, or the address spans were received on.
    pub from: String,
    pub spans: u64,
    /// Export requests read (lines, frames, HTTP bodies).
    pub requests: u64,
    /// The service whose requests were analyzed: the one that made the most calls.
    pub service: Option<String>,
    /// Other services whose spans were only read for timing.
    pub other_services: Vec<String>,
    /// Calls given to a request by their span's parent.
    pub calls_by_parent: u64,
    /// Calls whose parent chain reached no request of the service.
    pub calls_without_request: u64,
    /// Client spans inside another (one call instrumented twice): counted once.
    pub nested_calls: u64,
    /// Spans outside their parent's time (clock skew), moved inside it.
    pub skewed: u64,
    /// Parent chains that looped or ran too deep.
    pub broken_chains: u64,
    /// Calls that reached their traced callee late while connections to it
    /// were free: not counted as waiting for one.
    #[serde(default)]
    pub waits_not_for_a_connection: u64,
    /// Spans past the bound, not read.
    pub dropped: u64,
    /// Peers named by a host name, and the stand-in address shown for each.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub named_peers: std::collections::BTreeMap<String, String>,
}

/// What an eBPF events file gave the analysis.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ThreadSource {
    pub file: String,
    /// Socket calls read (within the bound).
    pub socket_calls: u64,
    /// Exchanges that gained the thread that made or read them.
    pub exchanges_joined: u64,
    /// Events the kernel side could not hand over.
    pub lost: u64,
    /// TLS library calls whose plaintext was read in place of ciphertext.
    #[serde(default)]
    pub plaintext_calls: u64,
    /// Goroutines whose calls were told apart (Go processes: the goroutine
    /// stands for the thread).
    #[serde(default)]
    pub goroutines: u64,
    /// Calls on Unix-domain sockets, read as connections no packet shows.
    #[serde(default)]
    pub unix_socket_calls: u64,
    /// The address that stands for each Unix socket's server end
    /// (`unix_socket`), and its path, by address.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub unix_sockets: std::collections::BTreeMap<String, String>,
}

/// How the service under investigation was chosen.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ServiceHow {
    /// Given by the user (`--service`) or the command (diagnose's target).
    Given,
    /// Found from the wire: the server whose requests enclose other servers' exchanges.
    Found,
    /// From spans: the service whose server spans made the most calls.
    Spans,
    /// No server's requests enclose another's: every exchange stands alone.
    #[default]
    None,
}

/// The service under investigation: its ports, and how they were chosen.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServiceChoice {
    pub ports: Vec<u16>,
    pub how: ServiceHow,
}

/// One server seen in the capture.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ServerCount {
    /// "127.0.0.1:8080".
    pub server: String,
    pub protocol: Protocol,
    pub connections: u64,
    /// Exchanges on its connections.
    pub exchanges: u64,
}

/// The exchanges of one request kind, or of one call group made for a kind.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExchangeGroup {
    /// The request kind ("GET /dashboard"), or for calls "→ postgres :5432 SELECT …".
    pub label: String,
    /// For a call group: the inbound request kind it was made for; "" when
    /// made for no request. None for an inbound kind.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub made_for: Option<String>,
    /// For a call group: how many requests of that kind there were.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requests_of_kind: Option<u64>,
    pub count: u64,
    /// For a call group: `count` per request of that kind.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_request: Option<f64>,
    /// Durations (first request byte → last response byte), from an HDR
    /// histogram of every exchange of the group (3 significant digits).
    pub min_us: u64,
    pub p50_us: u64,
    pub p90_us: u64,
    pub p99_us: u64,
    pub max_us: u64,
    pub mean_us: u64,
    /// For an inbound kind: how the calls made for it were given to its
    /// requests (absent when it made none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attribution: Option<crate::AttributionCounts>,
    /// For an inbound kind: the share of its calls given to a request, in %.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub calls_given_percent: Option<f64>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl ExchangeGroup {
    /// `made_for` of calls made while requests of several kinds waited,
    /// none told apart.
    pub const AMBIGUOUS_KINDS: &'static str = "(ambiguous between kinds)";
}

/// Connections listed by the bytes their gaps lost, the most first.
pub const GAP_CONNECTIONS_LISTED: usize = 10;

/// Gaps in the capture's streams, in all and on the connections that lost
/// the most to them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CaptureGaps {
    pub gaps: u64,
    pub bytes: u64,
    pub connections: u64,
    /// At most `GAP_CONNECTIONS_LISTED`, the most bytes first.
    pub worst: Vec<ConnectionGaps>,
    /// Per second of the capture (Unix time) in which a kept gap was
    /// noticed, in time order: when the capture lost bytes. At most
    /// `GAP_SECONDS_LISTED`, the first ones.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub seconds: Vec<GapSecond>,
}

/// Seconds listed with gaps: an hour of a capture that lost bytes in
/// every one of them.
pub const GAP_SECONDS_LISTED: usize = 3600;

/// The gaps noticed in one second.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GapSecond {
    pub second: u64,
    pub gaps: u64,
    pub bytes: u64,
}

impl CaptureGaps {
    pub fn is_empty(&self) -> bool {
        self.gaps == 0
    }

    /// Counts gaps by the second they were noticed in (`after_us`).
    pub fn add_seconds(&mut self, gaps: &[crate::Gap]) {
        for g in gaps {
            let second = g.after_us / 1_000_000;
            match self.seconds.binary_search_by_key(&second, |s| s.second) {
                Ok(i) => {
                    self.seconds[i].gaps += 1;
                    self.seconds[i].bytes += g.bytes;
                }
                Err(i) if i < GAP_SECONDS_LISTED => {
                    let s = GapSecond {
                        second,
                        gaps: 1,
                        bytes: g.bytes,
                    };
                    self.seconds.insert(i, s);
                    self.seconds.truncate(GAP_SECONDS_LISTED);
                }
                Err(_) => {}
            }
        }
    }

    /// The second that lost the most bytes.
    pub fn worst_second(&self) -> Option<&GapSecond> {
        self.seconds
            .iter()
            .max_by_key(|s| (s.bytes, std::cmp::Reverse(s.second)))
    }

    /// Counts one connection's gaps.
    pub fn add(&mut self, c: ConnectionGaps) {
        if c.gaps == 0 {
            return;
        }
        self.gaps += c.gaps;
        self.bytes += c.to_server_bytes + c.to_client_bytes;
        self.connections += 1;
        self.worst.push(c);
        self.worst.sort_by_key(|c| std::cmp::Reverse(c.bytes()));
        self.worst.truncate(GAP_CONNECTIONS_LISTED);
    }
}

/// One connection's gaps.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ConnectionGaps {
    pub client: String,
    pub server: String,
    pub gaps: u64,
    pub to_server_bytes: u64,
    pub to_client_bytes: u64,
    /// Payload bytes the capture held on the connection, both ways.
    #[serde(default)]
    pub seen_bytes: u64,
}

impl ConnectionGaps {
    pub fn bytes(&self) -> u64 {
        self.to_server_bytes + self.to_client_bytes
    }

    /// Share of the connection's bytes the capture never held.
    pub fn lost_share(&self) -> f64 {
        self.bytes() as f64 / (self.bytes() + self.seen_bytes).max(1) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Direction, Gap};

    #[test]
    fn gaps_are_counted_per_second_in_time_order_and_bounded() {
        let gap = |at_s: u64, bytes| Gap {
            after_us: at_s * 1_000_000 + 500,
            direction: Direction::ToServer,
            bytes,
        };
        let mut g = CaptureGaps::default();
        g.add_seconds(&[gap(12, 10), gap(10, 5), gap(12, 30)]);
        g.add_seconds(&[gap(11, 1)]);
        let seen: Vec<(u64, u64, u64)> = g
            .seconds
            .iter()
            .map(|s| (s.second, s.gaps, s.bytes))
            .collect();
        assert_eq!(seen, [(10, 1, 5), (11, 1, 1), (12, 2, 40)]);
        assert_eq!(g.worst_second().map(|s| s.second), Some(12));
        let many: Vec<Gap> = (0..GAP_SECONDS_LISTED as u64 + 10)
            .map(|s| gap(1000 + s, 1))
            .collect();
        g.add_seconds(&many);
        assert_eq!(g.seconds.len(), GAP_SECONDS_LISTED);
        assert_eq!(g.seconds[0].second, 10, "the first seconds are kept");
    }
}

/// One host of a capture of several (`analyze A B C`), as its shared
/// connections placed its clock.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HostClock {
    pub name: String,
    pub files: Vec<String>,
    /// What is subtracted from this host's timestamps to put them on the
    /// first file's clock (µs): the midpoint of what its shared connections
    /// allow. None when it shares no connection with a host placed already.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clock_offset_us: Option<i64>,
    /// How far the true offset may lie from `clock_offset_us` (µs): half
    /// the range the one-way delays leave, summed along the chain of hosts
    /// it was placed through.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clock_offset_bound_us: Option<u64>,
    /// The host whose shared connections placed it (none for the first).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placed_by: Option<String>,
    /// Connections it shares with the other hosts' captures.
    pub shared_connections: u64,
    /// Of those, the copies left out of the analysis: another host holds
    /// the connection's client end, whose view is kept.
    pub copies_left_out: u64,
    /// Its shared connections disagreed on the offset (a clock that stepped
    /// or drifted during the captures): the offset told is their median.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub clock_disagrees: bool,
}
