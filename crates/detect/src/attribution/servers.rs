//! Which servers are the service's and its backing services', from the
//! wire alone: a backing server's exchanges happen while the service's own
//! requests wait for an answer.

use super::units::call_span;
use super::windows;
use foldhash::{HashMap, HashMapExt};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use whyslow_model::{Protocol, Timeline};

/// Each connection's server port: the service is known by its ports.
pub fn server_ports(t: &Timeline) -> HashMap<u32, u16> {
    t.connections
        .iter()
        .map(|c| (c.id, c.server.port()))
        .collect()
}

/// Each connection's server: a backing server is known by its address (a
/// primary and a replica both on 5432 are two).
pub fn servers(t: &Timeline) -> HashMap<u32, SocketAddr> {
    t.connections.iter().map(|c| (c.id, c.server)).collect()
}

/// The server of a connection the timeline does not list (none should be).
pub const NO_SERVER: SocketAddr = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0));

/// Share of the exchanges on a server's backing connections (those that
/// carried a call inside the service's requests) that must fall inside them:
/// unrelated traffic on the same host lands inside them only by chance, and
/// rarely for nearly all of its exchanges.
const NESTED_SHARE: f64 = 0.9;
/// Share of a server's connections, or of their exchanges, that must be on
/// backing connections: a writer connection whose asynchronous writes
/// outlive every request sits beside a reader connection (case 004's fix);
/// many short unrelated connections landing inside requests by chance do
/// not make a backing server. By exchanges too, because a pool opens
/// connections it may never lend: HikariCP lent 2 of its 5 to pages paced
/// 10 ms apart, the other 3 carrying only their set-up statements.
const BACKING_CONNECTION_SHARE: f64 = 0.5;

/// Servers (ports) whose exchanges happen while the service's own requests
/// wait for an answer: its backing services, seen from the wire alone.
pub fn nested_servers(t: &Timeline, service_ports: &[u16]) -> Vec<u16> {
    nesting(t, service_ports).0
}

/// Exchanges inside the service's requests, and in all, on one connection.
#[derive(Default, Clone, Copy)]
struct Nested {
    inside: usize,
    all: usize,
}

/// Backing servers of `service_ports` and how many of their exchanges nest.
fn nesting(t: &Timeline, service_ports: &[u16]) -> (Vec<u16>, usize) {
    let port = server_ports(t);
    let windows = windows::arrived(t, &port, service_ports);
    let mut per_conn: HashMap<u32, Nested> = HashMap::new();
    for e in &t.exchanges {
        if port
            .get(&e.connection)
            .is_none_or(|p| service_ports.contains(p))
        {
            continue;
        }
        let (start, end) = call_span(e);
        let c = per_conn.entry(e.connection).or_default();
        c.inside += usize::from(windows.any_encloses(start, end));
        c.all += 1;
    }
    // Per server: its connections and exchanges, and those of its backing
    // connections (with how many of the latter fell inside).
    let mut per_server: HashMap<u16, (usize, usize, usize, Nested)> = HashMap::new();
    for (conn, n) in per_conn {
        let s = per_server.entry(port[&conn]).or_default();
        s.0 += 1;
        s.1 += n.all;
        if n.inside > 0 {
            s.2 += 1;
            s.3.inside += n.inside;
            s.3.all += n.all;
        }
    }
    let mut out = Vec::new();
    let mut nested = 0;
    for (p, (conns, exchanges, backing, n)) in per_server {
        let enough = |part: usize, all: usize| part as f64 >= BACKING_CONNECTION_SHARE * all as f64;
        let enough_conns = enough(backing, conns) || enough(n.all, exchanges);
        if n.inside > 0 && enough_conns && n.inside as f64 >= NESTED_SHARE * n.all as f64 {
            out.push(p);
            nested += n.inside;
        }
    }
    out.sort_unstable();
    (out, nested)
}

/// Server ports tried as the service under investigation, busiest first:
/// a capture of a host's loopback holds few servers; a bound keeps a capture
/// with thousands of them from costing thousands of passes.
const SERVICE_CANDIDATES: usize = 16;

/// Whether servers of this protocol answer from their own data: a cache or
/// a database makes no call to another kind of server while a client waits
/// (a replica's stream, a foreign table are not such calls). One that
/// encloses another kind's exchanges encloses them by chance: a client
/// streaming a large write to it while unrelated requests come and go.
/// A proxy of its own protocol (pgbouncer, twemproxy) still may be the service.
pub(super) fn is_datastore(p: Protocol) -> bool {
    matches!(
        p,
        Protocol::Redis | Protocol::Postgres | Protocol::Mysql | Protocol::Memcached
    )
}

/// The service under investigation, found from the wire: the server whose
/// requests enclose the most exchanges of other servers (its backing
/// calls). None when no server's requests enclose any.
pub fn find_service(t: &Timeline) -> Option<u16> {
    let port = server_ports(t);
    let mut busy: HashMap<u16, usize> = HashMap::new();
    for e in &t.exchanges {
        if let Some(&p) = port.get(&e.connection) {
            *busy.entry(p).or_default() += 1;
        }
    }
    let mut ports: Vec<(usize, u16)> = busy.into_iter().map(|(p, n)| (n, p)).collect();
    ports.sort_unstable_by(|a, b| b.cmp(a));
    let protocol: HashMap<u16, Protocol> = t
        .connections
        .iter()
        .map(|c| (c.server.port(), c.protocol))
        .collect();
    ports
        .iter()
        .take(SERVICE_CANDIDATES)
        .filter_map(|&(_, p)| {
            let (servers, nested) = nesting(t, &[p]);
            let calls_out = |s: &u16| protocol.get(s) != protocol.get(&p);
            let leaf = protocol.get(&p).is_some_and(|&pr| is_datastore(pr));
            (!(leaf && servers.iter().any(calls_out))).then_some((nested, p))
        })
        .filter(|&(nested, _)| nested > 0)
        .max_by_key(|&(nested, p)| (nested, std::cmp::Reverse(p)))
        .map(|(_, p)| p)
}
