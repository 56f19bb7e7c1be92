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
        unix_socket_calls: unix_calls as u64,
        unix_sockets: unix.servers(),
    };
    let plaintext = (!chunks.is_empty()).then(|| Arc::new(PlaintextFeed::new(chunks)));
    Ok(EventSources {
        threads,
        plaintext,
        summary,
        problems,
    })
}
