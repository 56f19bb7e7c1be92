//! Calls through hops: a backing server of the service whose own requests
//! enclose other servers' exchanges (an API the front calls, which calls a
//! database) is a service in turn. Its calls are given to its requests
//! first, as the service's are (every rule, on that hop alone); then its
//! requests, calls of the service, are given to the service's requests; a
//! call two hops down goes to the request its hop's request was made for,
//! at the weaker of the two levels. Given to the entry's requests directly,
//! by time alone, the database's calls of an API shared by 4 fronts' requests
//! in flight were nearly all ambiguous: each lies inside several front
//! requests, but inside only one of the API's.

use super::{attribute_within, nested_servers, server_ports, Attributed};
use foldhash::{HashMap, HashMapExt, HashSet};
use whyslow_model::{Attribution, CutEdges, ExchangeRole, Timeline};

/// Hops looked through below the service: front → API → database is one.
const MAX_DEPTH: usize = 3;

/// `attribute_within`, through the hops below the service (see the module
/// comment).
pub fn attribute_through(
    timeline: &mut Timeline,
    service_ports: &[u16],
    edges: CutEdges,
) -> Attributed {
    attribute_at(timeline, service_ports, edges, MAX_DEPTH)
}

fn attribute_at(
    timeline: &mut Timeline,
    service_ports: &[u16],
    edges: CutEdges,
    depth: usize,
) -> Attributed {
    // Each hop with the servers nested in its requests (found once: each
    // search is a pass over the window).
    let hops: Vec<(u16, Vec<u16>)> = match depth {
        0 => Vec::new(),
        _ => nested_servers(timeline, service_ports)
            .into_iter()
            .filter(|p| !service_ports.contains(p))
            .map(|p| (p, nested_servers(timeline, &[p])))
            .filter(|(p, nested)| answers_from_others(timeline, *p, nested))
            .collect(),
    };
    if hops.is_empty() {
        return attribute_within(timeline, service_ports, edges);
    }
    // Each hop's calls, given to its own requests (or ambiguous among them).
    // They move into the hop's timeline (its requests, calls of the
    // service, are copied): a window's exchanges are not held twice.
    let mut below: HashMap<u32, (Option<u32>, Attribution, Option<whyslow_model::Rule>)> =
        HashMap::new();
    let mut hop_calls = Vec::new();
    let mut runs = Vec::new();
    for (hop, nested) in &hops {
        let hop = *hop;
        let mut sub = hop_timeline(timeline, hop, nested, service_ports);
        let inner = attribute_at(&mut sub, &[hop], edges, depth - 1);
        runs.push(inner.held_runs.ambiguous);
        // The hop's requests are the service's calls, kept above.
        let port = server_ports(&sub);
        sub.exchanges
            .retain(|e| port.get(&e.connection) != Some(&hop));
        for e in &sub.exchanges {
            if let Some(level) = e.attribution {
                below.entry(e.id).or_insert((e.parent, level, e.rule));
            }
        }
        match hop_calls.is_empty() {
            true => hop_calls = sub.exchanges,
            false => hop_calls.append(&mut sub.exchanges),
        }
    }
    // A hop's call that carries the trace of one of the service's requests
    // (propagated through the hop) is given by it there, exactly: it goes
    // back among the service's own.
    let port = server_ports(timeline);
    let traces: HashSet<whyslow_model::TraceId> = timeline
        .exchanges
        .iter()
        .filter(|e| {
            port.get(&e.connection)
                .is_some_and(|p| service_ports.contains(p))
        })
        .filter_map(|e| e.trace)
        .collect();
    let back = |e: &mut whyslow_model::Exchange| {
        !below.contains_key(&e.id) || e.trace.is_some_and(|t| traces.contains(&t))
    };
    timeline.exchanges.extend(hop_calls.extract_if(.., back));
    let mut out = attribute_within(timeline, service_ports, edges);
    let made_for: HashMap<u32, (Option<u32>, Option<Attribution>)> = timeline
        .exchanges
        .iter()
        .map(|e| (e.id, (e.parent, e.attribution)))
        .collect();
    for e in hop_calls.iter_mut() {
        let (hop_request, level, rule) = below[&e.id];
        let up = hop_request.and_then(|r| made_for.get(&r)).copied();
        e.role = ExchangeRole::Outbound;
        match up {
            Some((Some(parent), Some(up_level))) if level != Attribution::Ambiguous => {
                e.parent = Some(parent);
                e.attribution = Some(weaker(up_level, level));
                e.rule = rule;
            }
            _ => {
                e.parent = None;
                e.attribution = Some(Attribution::Ambiguous);
                e.rule = None;
            }
        }
    }
    // Back in the hops' vector, the window's own: no second one grows.
    hop_calls.append(&mut timeline.exchanges);
    timeline.exchanges = hop_calls;
    timeline.sort();
    // Runs of the hops' calls on held connections, numbered after the
    // service's own.
    let mut next = out
        .held_runs
        .ambiguous
        .values()
        .map(|r| r.1 + 1)
        .max()
        .unwrap_or(0);
    for hop_runs in runs {
        let base = next;
        for (call, (server, run)) in hop_runs {
            out.held_runs.ambiguous.insert(call, (server, base + run));
            next = next.max(base + run + 1);
        }
    }
    out
}

/// The hosts whose captures hold the connections to the server on `port`
/// (each copy read is the one nearest its client: the callers' hosts).
fn caller_hosts(t: &Timeline, port: u16) -> HashSet<u16> {
    t.connections
        .iter()
        .filter(|c| c.server.port() == port)
        .map(|c| c.host)
        .collect()
}

/// Whether the server on `port` calls other servers while its clients
/// wait: some servers' exchanges nest inside its requests, made from a host
/// other than its callers' (where several hosts were captured, a connection
/// is read from its client's host), and it is no cache or database
/// enclosing another kind of server's by chance (a long write to Redis while
/// pages come and go; `servers::is_datastore`). Within one host's capture
/// nothing tells a hop's calls from its caller's own made meanwhile (under
/// load, a front's DNS lookups fell inside its calls to the price API): no
/// hop is taken there.
fn answers_from_others(t: &Timeline, port: u16, nested: &[u16]) -> bool {
    let protocol = |p: u16| {
        t.connections
            .iter()
            .find(|c| c.server.port() == p)
            .map(|c| c.protocol)
    };
    let callers = caller_hosts(t, port);
    let nested: Vec<u16> = nested
        .iter()
        .copied()
        .filter(|&n| {
            t.connections
                .iter()
                .any(|c| c.server.port() == n && !callers.contains(&c.host))
        })
        .collect();
    let own = protocol(port);
    match own {
        Some(p) if super::servers::is_datastore(p) => {
            !nested.is_empty() && nested.iter().all(|&n| protocol(n) == own)
        }
        _ => !nested.is_empty(),
    }
}

/// The hop's requests (copied) and the exchanges of the servers they
/// enclose (moved out of `t`, in `t`'s vector), on their own: the
/// service's requests left out.
fn hop_timeline(t: &mut Timeline, hop: u16, nested: &[u16], service_ports: &[u16]) -> Timeline {
    let port = server_ports(t);
    let mut servers: HashSet<u16> = nested.iter().copied().collect();
    for p in service_ports {
        servers.remove(p);
    }
    let callers = caller_hosts(t, hop);
    let keep = |c: &whyslow_model::Connection| {
        let p = c.server.port();
        p == hop || (servers.contains(&p) && !callers.contains(&c.host))
    };
    let kept: HashSet<u32> = t
        .connections
        .iter()
        .filter(|c| keep(c))
        .map(|c| c.id)
        .collect();
    let on_hop = |e: &whyslow_model::Exchange| port.get(&e.connection) == Some(&hop);
    let nested = |e: &whyslow_model::Exchange| {
        kept.contains(&e.connection) && port.contains_key(&e.connection) && !on_hop(e)
    };
    // The window's vector goes to the hop (most of it is the hop's calls);
    // the service's own move to a new one.
    let mut exchanges = std::mem::take(&mut t.exchanges);
    t.exchanges = exchanges.extract_if(.., |e| !nested(e)).collect();
    exchanges.extend(t.exchanges.iter().filter(|e| on_hop(e)).cloned());
    let mut sub = Timeline {
        connections: t
            .connections
            .iter()
            .filter(|c| kept.contains(&c.id))
            .map(whyslow_model::Connection::without_events)
            .collect(),
        exchanges,
    };
    sub.sort();
    sub
}

/// The weaker of two levels: a call is only as sure as each hop that led
/// to it.
fn weaker(a: Attribution, b: Attribution) -> Attribution {
    let rank = |l: Attribution| match l {
        Attribution::TraceContext | Attribution::Thread | Attribution::Span => 0,
        Attribution::TraceGroup => 1,
        Attribution::Inferred => 2,
        Attribution::Ambiguous => 3,
    };
    if rank(a) > rank(b) {
        a
    } else {
        b
    }
}

#[cfg(test)]
mod tests {
    use crate::attribution::attribute_through;
    use crate::testkit::{conn, exchange};
    use whyslow_model::{Attribution, CutEdges, Timeline};

    const MS: u64 = 1_000;

    /// Front requests A (0–9 ms) and B (1–17 ms) on 8080; each calls the
    /// API on 9000 once, A at 2–8 ms, B at 10–16 ms; each API request reads
    /// the database on 5432 three times inside it. The database connection
    /// read from `db_host`'s capture (1: the API's host, 0: all on one).
    fn three_tiers(db_host: u16) -> Timeline {
        let mut t = Timeline::default();
        for (id, port) in [(0, 8080), (1, 8080), (10, 9000), (11, 9000), (20, 5432)] {
            t.connections.push(conn(id, port));
        }
        t.connections[4].host = db_host;
        t.exchanges = vec![
            exchange(0, 0, (0, 10), (9 * MS, 9 * MS + 10)),
            exchange(1, 1, (MS, MS + 10), (17 * MS, 17 * MS + 10)),
            exchange(10, 10, (2 * MS, 2 * MS + 10), (8 * MS, 8 * MS + 10)),
            exchange(11, 11, (10 * MS, 10 * MS + 10), (16 * MS, 16 * MS + 10)),
        ];
        for (api, from) in [(10u32, 3u64), (11, 11)] {
            for n in 0..3u32 {
                let at = (from + u64::from(n)) * MS;
                let id = 100 + (api - 10) * 10 + n;
                t.exchanges
                    .push(exchange(id, 20, (at, at + 10), (at + 500, at + 510)));
            }
        }
        t.sort();
        t
    }

    #[test]
    fn a_call_two_hops_down_goes_to_the_request_its_hops_request_was_made_for() {
        let mut t = three_tiers(1);
        attribute_through(&mut t, &[8080], CutEdges::default());
        let parent = |id: u32| t.exchanges.iter().find(|e| e.id == id).unwrap().parent;
        assert_eq!((parent(10), parent(11)), (Some(0), Some(1)));
        for n in 0..3 {
            assert_eq!(
                parent(100 + n),
                Some(0),
                "database call {n} of A's API call"
            );
            assert_eq!(
                parent(110 + n),
                Some(1),
                "database call {n} of B's API call"
            );
        }
        let mut levels = t.exchanges.iter().filter(|e| e.id >= 100);
        assert!(levels.all(|e| e.attribution == Some(Attribution::Inferred)));
    }

    #[test]
    fn within_one_hosts_capture_no_hop_is_taken() {
        // Told by time alone against the front's requests: A's database
        // calls lie inside A and B alike, and one host's capture does not
        // say they were the API's rather than the front's own.
        let mut t = three_tiers(0);
        attribute_through(&mut t, &[8080], CutEdges::default());
        let parent = |id: u32| t.exchanges.iter().find(|e| e.id == id).unwrap().parent;
        assert!((0..3).all(|n| parent(100 + n) != Some(0)));
    }
}
