//! What an eBPF events file (`capture --ebpf`) gives the analysis: the
//! socket calls each exchange is joined to for its thread, the plaintext of
//! TLS connections, read by the flow table in place of their ciphertext,
//! and the calls on Unix-domain sockets, which no packet shows.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use whyslow_ebpf::{capture_us, Kind, Payloads, SockEvent, ThreadIndex};
use whyslow_model::{unix_socket, ThreadSource};
use whyslow_wire::{EventsOnly, PlainChunk, PlaintextFeed};

/// Socket calls kept from an events file: each costs a few dozen bytes in
/// the join's index; 4 M of them is a long, busy capture.
pub const MAX_SOCKET_CALLS: usize = 4 << 20;

/// An events file, read for the analysis.
pub(crate) struct EventSources {
    pub threads: ThreadIndex,
    pub plaintext: Option<Arc<PlaintextFeed>>,
    pub summary: ThreadSource,
    /// Ports the socket calls show serving (`server_ports`).
    pub server_ports: Vec<u16>,
    /// What did not stop the read but is worth a note.
    pub problems: Vec<String>,
}

/// A call the analyzers read from the events: a TLS library call, or a
/// call on a Unix-domain socket; a write at its entry, a read at its return
/// (when the bytes were the caller's).
fn plain_chunk(e: &mut SockEvent, offset_ns: i64, unix: &UnixSockets) -> Option<PlainChunk> {
    let sent = e.kind.sends();
    let events_only = match (e.kind, e.unix) {
        (Kind::TlsSend | Kind::TlsReceive, _) => None,
        (Kind::Send | Kind::Receive, Some(ends)) => {
            let (path, _) = unix.names.get(&ends.own)?;
            Some(EventsOnly {
                path: path.clone(),
                server: unix_socket::server_address(path),
            })
        }
        _ => return None,
    };
    Some(PlainChunk {
        at_us: capture_us(if sent { e.enter_ns } else { e.exit_ns }, offset_ns),
        local: e.local?,
        remote: e.remote?,
        sent,
        data: std::mem::take(&mut e.payload),
        whole: e.bytes,
        events_only,
    })
}

/// The Unix-domain sockets of an events file, by inode: the path each
/// connection goes by, and whether it is the socket's own (a server's end).
#[derive(Default)]
struct UnixSockets {
    names: HashMap<u64, (Arc<str>, bool)>,
}

impl UnixSockets {
    /// Reads the names; every call on a named socket then gets the
    /// addresses that stand for its ends, the client's inode in both.
    fn name(events: &mut [SockEvent]) -> Self {
        let mut out = UnixSockets::default();
        for e in events.iter() {
            if let (Kind::UnixName { own }, Some(ends)) = (e.kind, e.unix) {
                let path = String::from_utf8_lossy(&e.payload);
                let path = match path.strip_prefix('\0') {
                    Some(abstract_name) => format!("@{abstract_name}"),
                    None => path.trim_end_matches('\0').to_string(),
                };
                out.names.insert(ends.own, (path.into(), own));
            }
        }
        for e in events.iter_mut() {
            let Some(ends) = e.unix.filter(|_| !matches!(e.kind, Kind::UnixName { .. })) else {
                continue;
            };
            let Some((path, serves)) = out.names.get(&ends.own) else {
                continue;
            };
            let server = unix_socket::server_address(path);
            if *serves {
                e.local = Some(server);
                e.remote = Some(unix_socket::client_address(ends.peer));
            } else {
                e.local = Some(unix_socket::client_address(ends.own));
                e.remote = Some(server);
            }
        }
        out
    }

    /// The address standing for each path's server end, and the path.
    fn servers(&self) -> std::collections::BTreeMap<String, String> {
        let paths = self.names.values().map(|(path, _)| path);
        paths
            .map(|p| (unix_socket::server_address(p).to_string(), p.to_string()))
            .collect()
    }
}

/// Reads `path`. Err: it cannot be read as events at all.
pub(crate) fn read(path: &Path) -> Result<EventSources, String> {
    let shown = path.display();
    let file = std::fs::File::open(path).map_err(|e| format!("{shown}: {e}"))?;
    let mut read = whyslow_ebpf::read_events(
        std::io::BufReader::new(file),
        MAX_SOCKET_CALLS,
        Payloads::BeyondPackets,
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
    let unix = UnixSockets::name(&mut read.events);
    let threads = ThreadIndex::new(&read.events, offset);
    let chunks: Vec<PlainChunk> = read
        .events
        .iter_mut()
        .filter_map(|e| plain_chunk(e, offset, &unix))
        .collect();
    let unix_calls = chunks.iter().filter(|c| c.events_only.is_some()).count();
    let summary = ThreadSource {
        file: shown.to_string(),
        socket_calls: read.events.len() as u64,
        exchanges_joined: 0,
        lost: read.lost.last().map_or(0, |&(_, total)| total),
        plaintext_calls: (chunks.len() - unix_calls) as u64,
        goroutines: goroutines(&read.events),
        unix_socket_calls: unix_calls as u64,
        unix_sockets: unix.servers(),
    };
    let plaintext = (!chunks.is_empty()).then(|| Arc::new(PlaintextFeed::new(chunks)));
    Ok(EventSources {
        server_ports: server_ports(&read.events),
        threads,
        plaintext,
        summary,
        problems,
    })
}

/// Distinct goroutines among the calls (a reused `g` counts once).
fn goroutines(events: &[whyslow_ebpf::SockEvent]) -> u64 {
    let tasks: std::collections::HashSet<_> = events
        .iter()
        .filter(|e| e.thread.is_goroutine())
        .map(|e| e.thread)
        .collect();
    tasks.len() as u64
}

/// TCP ports the traced processes' sockets show serving: a port at one end
/// of sockets to two or more peers is a server's (a listener's accepted
/// sockets share its port; a pool's connections share their server's),
/// where a client's ephemeral port has one peer (Linux may reuse one for
/// another destination; both ends are then taken as serving and the flow
/// table falls back to its other clues). The flow table orients a
/// connection first seen mid-stream by them: between two ephemeral ports
/// (loopback servers often listen on one), port order alone guesses wrong.
pub(crate) fn server_ports(events: &[SockEvent]) -> Vec<u16> {
    use std::collections::{BTreeMap, BTreeSet};
    use std::net::SocketAddr;
    let canonical = |a: SocketAddr| SocketAddr::new(a.ip().to_canonical(), a.port());
    let mut peers: BTreeMap<u16, BTreeSet<SocketAddr>> = BTreeMap::new();
    // TCP only: a stub resolver's UDP sockets are DNS's, oriented by port.
    let tcp = |e: &&SockEvent| e.unix.is_none() && e.remote.is_some_and(|r| r.port() != 53);
    for e in events.iter().filter(tcp) {
        let (Some(local), Some(remote)) = (e.local, e.remote) else {
            continue;
        };
        let (local, remote) = (canonical(local), canonical(remote));
        peers.entry(local.port()).or_default().insert(remote);
        peers.entry(remote.port()).or_default().insert(local);
    }
    peers
        .into_iter()
        .filter(|(port, ends)| *port != 0 && ends.len() >= 2)
        .map(|(port, _)| port)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use whyslow_ebpf::Kind;
    use whyslow_model::Thread;

    fn call(local: &str, remote: &str) -> SockEvent {
        SockEvent {
            enter_ns: 0,
            exit_ns: 1,
            thread: Thread { pid: 1, tid: 1 },
            kind: Kind::Send,
            bytes: 1,
            seq: 0,
            fd: 3,
            local: Some(local.parse().unwrap()),
            remote: Some(remote.parse().unwrap()),
            unix: None,
            comm: String::new(),
            payload: Vec::new(),
        }
    }

    #[test]
    fn ports_with_two_peers_serve_and_ephemeral_ones_do_not() {
        let events = [
            // A pool's two connections to a server on an ephemeral port.
            call("127.0.0.1:35506", "127.0.0.1:41649"),
            call("127.0.0.1:35507", "127.0.0.1:41649"),
            call("127.0.0.1:35506", "127.0.0.1:41649"),
            // The service's accepted sockets.
            call("127.0.0.1:8080", "127.0.0.1:50000"),
            call("127.0.0.1:8080", "127.0.0.1:50001"),
            // One connection to another server, seen from a dual-stack
            // socket too: one peer, not told.
            call("127.0.0.1:35508", "127.0.0.1:6379"),
            call("[::ffff:127.0.0.1]:35508", "[::ffff:127.0.0.1]:6379"),
            // A resolver's sockets: DNS, oriented by its port.
            call("127.0.0.1:40000", "127.0.0.53:53"),
            call("127.0.0.1:40001", "127.0.0.53:53"),
        ];
        assert_eq!(server_ports(&events), vec![8080, 41649]);
    }
}
