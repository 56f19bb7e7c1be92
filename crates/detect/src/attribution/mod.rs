//! Which inbound request was each backing call made for? Exchanges to the
//! service under test are inbound; the rest are outbound calls. Each call
//! says how it was given to its request, strongest evidence first: its
//! trace id (exact), the thread that handled the request (exact), a trace
//! group or transaction placed whole, timing that tells one request apart —
//! or it is declared ambiguous and kept out of per-request evidence.

mod assign;
mod matching;
mod runs;
mod shapes;
mod threads;
mod units;
mod windows;

pub use assign::{BRACKET_MARGIN, FILL_SHARE};
use foldhash::{HashMap, HashMapExt, HashSet, HashSetExt};
pub use runs::{MIN_RUN_OPENERS, RUN_OPENER_SHARE};
pub use units::interleaved;
use units::{call_span, Holder};
use whyslow_model::{Attribution, CutEdges, Exchange, ExchangeRole, Rule, Timeline, TraceId};
use windows::{Window, Windows};

fn server_ports(t: &Timeline) -> HashMap<u32, u16> {
    t.connections
        .iter()
        .map(|c| (c.id, c.server.port()))
        .collect()
}

/// Windows of the exchanges to servers on `ports`. An unanswered request
/// waits until its connection closed, or to the end of the capture — but on
/// a connection that carries one request at a time (no HTTP/2 stream), no
/// longer than until the next request on it began: its answer came before
/// that, and a capture that lost it (a gap, a drop) must not leave it
/// waiting through every later call.
fn windows_of(t: &Timeline, port: &HashMap<u32, u16>, ports: &[u16]) -> Windows {
    let closed: HashMap<u32, u64> = t
        .connections
        .iter()
        .filter(|c| c.closed_by.is_some())
        .map(|c| (c.id, c.last_at_us))
        .collect();
    let inbound = |e: &&Exchange| port.get(&e.connection).is_some_and(|p| ports.contains(p));
    // Each one-at-a-time connection's request starts, sorted.
    let mut starts: HashMap<u32, Vec<u64>> = HashMap::new();
    for e in t
        .exchanges
        .iter()
        .filter(inbound)
        .filter(|e| e.stream.is_none())
    {
        starts
            .entry(e.connection)
            .or_default()
            .push(e.request_first_at_us);
    }
    for v in starts.values_mut() {
        v.sort_unstable();
    }
    let next_request = |e: &Exchange| {
        let v = starts.get(&e.connection).filter(|_| e.stream.is_none())?;
        let i = v.partition_point(|&s| s <= e.request_first_at_us);
        v.get(i).copied()
    };
    Windows::new(
        t.exchanges
            .iter()
            .filter(inbound)
            .map(|e| Window {
                start: e.request_first_at_us,
                answer: e
                    .response_first_at_us
                    .or_else(|| next_request(e))
                    .or_else(|| closed.get(&e.connection).copied())
                    .unwrap_or(u64::MAX),
                id: e.id,
            })
            .collect(),
    )
}

/// What attribution found besides the parents and levels it set.
#[derive(Debug, Default)]
pub struct Attributed {
    /// Ambiguous call id → an inbound request of the one kind all its
    /// candidates were of (calls whose candidates differ in kind are absent).
    pub ambiguous_kind: HashMap<u32, u32>,
    /// A trace id that more than one inbound request carried: no call is
    /// given by it.
    pub repeated_traces: usize,
    pub held_runs: HeldRuns,
}

/// Runs of calls on held connections (`runs`): a request holds one per
/// server, so once it was given one, an ambiguous run to that server is
/// another request's — the request is still told apart.
#[derive(Debug, Default)]
pub struct HeldRuns {
    /// Ambiguous call → the server port and the number of the run it was in.
    pub ambiguous: HashMap<u32, (u16, u32)>,
    /// (Inbound request, server port) of each run given.
    pub given: HashSet<(u32, u16)>,
}

impl HeldRuns {
    /// Whether ambiguous call `call` cannot be request `request`'s.
    pub fn rules_out(&self, request: u32, call: u32) -> bool {
        self.ambiguous
            .get(&call)
            .is_some_and(|&(server, _)| self.given.contains(&(request, server)))
    }

    /// The run an ambiguous call was in, if any.
    pub fn run_of(&self, call: u32) -> Option<u32> {
        self.ambiguous.get(&call).map(|&(_, run)| run)
    }
}

/// Marks roles, parents and attribution levels in place. `service_ports`:
/// the service's own ports.
pub fn attribute(timeline: &mut Timeline, service_ports: &[u16]) -> Attributed {
    attribute_within(timeline, service_ports, CutEdges::default())
}

/// `attribute` in a window whose `edges` forced cuts made: a call near them
/// that no exact evidence gives is ambiguous.
pub fn attribute_within(
    timeline: &mut Timeline,
    service_ports: &[u16],
    edges: CutEdges,
) -> Attributed {
    let port = server_ports(timeline);
    let windows = windows_of(timeline, &port, service_ports);
    // Inbound trace id → the one request that carried it (None: several did).
    let mut inbound_trace: HashMap<TraceId, Option<u32>> = HashMap::new();
    for e in timeline.exchanges.iter_mut() {
        let inbound = port
            .get(&e.connection)
            .is_some_and(|p| service_ports.contains(p));
        e.role = if inbound {
            ExchangeRole::Inbound
        } else {
            ExchangeRole::Outbound
        };
        // A span's parent is the source's own word: kept (`given_by_span`).
        if inbound || !given_by_span(e) {
            e.parent = None;
            e.attribution = None;
            e.rule = None;
        } else {
            e.rule = Some(Rule::SpanParent);
        }
        if inbound {
            if let Some(t) = e.trace {
                inbound_trace
                    .entry(t)
                    .and_modify(|id| *id = None)
                    .or_insert(Some(e.id));
            }
        }
    }
    let mut out = Attributed {
        repeated_traces: inbound_trace.values().filter(|id| id.is_none()).count(),
        ..Attributed::default()
    };
    let (exact, mut todo, traced) = by_trace(timeline, &inbound_trace);
    let mut held = HashSet::new();
    for &(i, id) in &exact {
        let e = &mut timeline.exchanges[i];
        (e.parent, e.attribution, e.rule) = match id {
            Some(id) => {
                held.insert((id, Holder::Trace));
                let rule = Rule::TraceContext;
                (Some(id), Some(Attribution::TraceContext), Some(rule))
            }
            None => (None, Some(Attribution::Ambiguous), None),
        };
    }
    for (i, id) in threads::given(&timeline.exchanges, &mut todo) {
        let e = &mut timeline.exchanges[i];
        (e.parent, e.attribution, e.rule) =
            (Some(id), Some(Attribution::Thread), Some(Rule::Thread));
    }
    let units = units::build(&timeline.exchanges, &todo, &traced, &port);
    let mut units = runs::join(units, &timeline.exchanges, &answers(timeline), &port);
    // Inbound request → (server port, request kind), built only when a call
    // is left to timing: a call of a shape each request of a kind made once
    // is placed by deduction, and an ambiguous call still counts for its
    // kind when every candidate was of it.
    let kind = std::cell::OnceCell::new();
    let kinds = || kind.get_or_init(|| request_kinds(timeline, &port));
    if units.iter().any(|u| u.holder == Holder::Call) {
        shapes::mark(&mut units, &timeline.exchanges, &port, kinds());
    }
    let kind_of = |id: u32| kinds().get(&id).copied();
    let same_kind = |a: u32, b: u32| kind_of(a).is_some_and(|k| Some(k) == kind_of(b));
    let decisions = assign::decide(&units, &windows, edges, held, same_kind);
    assign::apply(&mut timeline.exchanges, &units, &decisions, &mut out);
    out
}

/// A call a trace source gave its request (its span's parent), before
/// attribution ran.
fn given_by_span(e: &whyslow_model::Exchange) -> bool {
    e.attribution == Some(Attribution::Span) && e.parent.is_some()
}

/// When the inbound requests were answered (first response byte), sorted.
fn answers(t: &Timeline) -> Vec<u64> {
    let mut out: Vec<u64> = t
        .exchanges
        .iter()
        .filter(|e| e.role == ExchangeRole::Inbound)
        .filter_map(|e| e.response_first_at_us)
        .collect();
    out.sort_unstable();
    out
}

/// Each inbound request's server port and request kind.
fn request_kinds<'t>(t: &'t Timeline, port: &HashMap<u32, u16>) -> HashMap<u32, (u16, &'t str)> {
    t.exchanges
        .iter()
        .filter(|e| e.role == ExchangeRole::Inbound)
        .map(|e| {
            let p = port.get(&e.connection).copied().unwrap_or(0);
            (e.id, (p, e.request.as_str()))
        })
        .collect()
}

/// Outbound calls by what their trace id says: (index, request) given
/// exactly (None: the trace id repeats across requests), the indices
/// of calls without a trace, and calls of traces no request carried, by trace.
#[allow(clippy::type_complexity)]
fn by_trace(
    t: &Timeline,
    inbound_trace: &HashMap<TraceId, Option<u32>>,
) -> (
    Vec<(usize, Option<u32>)>,
    Vec<usize>,
    HashMap<TraceId, Vec<usize>>,
) {
    let mut exact = Vec::new();
    let mut todo = Vec::new();
    let mut traced: HashMap<TraceId, Vec<usize>> = HashMap::new();
    for (i, e) in t.exchanges.iter().enumerate() {
        if e.role != ExchangeRole::Outbound || given_by_span(e) {
            continue;
        }
        match e.trace.map(|t| (t, inbound_trace.get(&t))) {
            Some((_, Some(&id))) => exact.push((i, id)),
            Some((t, None)) => traced.entry(t).or_default().push(i),
            None => todo.push(i),
        }
    }
    (exact, todo, traced)
}

/// Share of the exchanges on a server's backing connections (those that
/// carried a call inside the service's requests) that must fall inside them:
/// unrelated traffic on the same host lands inside them only by chance, and
/// rarely for nearly all of its exchanges.
const NESTED_SHARE: f64 = 0.9;
/// Share of a server's connections that must be backing connections: a
/// writer connection whose asynchronous writes outlive every request sits
/// beside a reader connection (case 004's fix); many short unrelated
/// connections landing inside requests by chance do not make a backing server.
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
    let windows = windows_of(t, &port, service_ports);
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
    // Per server: (connections, backing connections, their exchanges inside, in all).
    let mut per_server: HashMap<u16, (usize, usize, Nested)> = HashMap::new();
    for (conn, n) in per_conn {
        let s = per_server.entry(port[&conn]).or_default();
        s.0 += 1;
        if n.inside > 0 {
            s.1 += 1;
            s.2.inside += n.inside;
            s.2.all += n.all;
        }
    }
    let mut out = Vec::new();
    let mut nested = 0;
    for (p, (conns, backing, n)) in per_server {
        let enough_conns = backing as f64 >= BACKING_CONNECTION_SHARE * conns as f64;
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
    ports
        .iter()
        .take(SERVICE_CANDIDATES)
        .map(|&(_, p)| (nesting(t, &[p]).1, p))
        .filter(|&(nested, _)| nested > 0)
        .max_by_key(|&(nested, p)| (nested, std::cmp::Reverse(p)))
        .map(|(_, p)| p)
}

#[cfg(test)]
mod tests_concurrent;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::{conn, exchange};

    #[test]
    fn calls_belong_to_the_request_waiting_for_them() {
        let mut t = Timeline {
            connections: vec![conn(0, 8080), conn(1, 6379)],
            exchanges: vec![
                exchange(0, 0, (100, 110), (500, 510)),     // inbound A
                exchange(1, 1, (200, 210), (300, 310)),     // call inside A
                exchange(2, 0, (1000, 1010), (1500, 1510)), // inbound B
                exchange(3, 1, (1100, 1110), (1200, 1210)), // call inside B
                exchange(4, 1, (2000, 2010), (2100, 2110)), // call outside any request
            ],
        };
        assert!(
            nested_servers(&t, &[8080]).is_empty(),
            "1 of 3 calls outside: not nested enough"
        );
        t.exchanges.pop();
        assert_eq!(nested_servers(&t, &[8080]), vec![6379]);
        assert_eq!(
            find_service(&t),
            Some(8080),
            "the server enclosing the calls"
        );
        attribute(&mut t, &[8080]);
        let parents: Vec<Option<u32>> = t.exchanges.iter().map(|e| e.parent).collect();
        assert_eq!(parents, vec![None, Some(0), None, Some(2)]);
        assert_eq!(t.exchanges[1].role, ExchangeRole::Outbound);
        assert_eq!(t.exchanges[2].role, ExchangeRole::Inbound);
    }

    #[test]
    fn asynchronous_writes_make_a_backing_server_without_a_parent() {
        // Each request reads on one connection; a writer connection's writes
        // start during or after a request and end after it answered (case
        // 004's fixed page): none nests, the reads alone make Redis backing.
        let mut t = Timeline {
            connections: vec![conn(0, 8080), conn(1, 6379), conn(2, 6379)],
            exchanges: vec![
                exchange(0, 0, (100, 110), (500, 510)),
                exchange(1, 1, (200, 210), (300, 310)),
                exchange(2, 2, (150, 400), (900, 910)),
                exchange(3, 0, (1000, 1010), (1500, 1510)),
                exchange(4, 1, (1100, 1110), (1200, 1210)),
                exchange(5, 2, (1600, 1700), (1900, 1910)),
            ],
        };
        assert_eq!(find_service(&t), Some(8080));
        assert_eq!(nested_servers(&t, &[8080]), vec![6379]);
        attribute(&mut t, &[8080]);
        let parents: Vec<Option<u32>> = t.exchanges.iter().map(|e| e.parent).collect();
        assert_eq!(parents, vec![None, Some(0), None, None, Some(3), None]);
        // Unrelated short connections, most of them outside the requests.
        for (i, at) in [(3, 2000), (4, 3000), (5, 250)] {
            t.connections.push(conn(i, 9000));
            t.exchanges
                .push(exchange(10 + i, i, (at, at + 5), (at + 10, at + 20)));
        }
        assert_eq!(nested_servers(&t, &[8080]), vec![6379]);
    }
}
