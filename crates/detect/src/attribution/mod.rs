//! Which inbound request was each backing call made for? Exchanges to the
//! service under test are inbound; the rest are outbound calls. The rules
//! run in one order, strongest evidence first (`CALL_RULES`, then
//! `UNIT_RULES`); each decides only the calls no earlier rule decided and
//! writes to one side table (`table`), naming itself. A call no rule gives
//! is ambiguous, kept out of per-request evidence. A new rule is one file
//! in `rules/` and one line in a list.

mod deduction;
mod fingerprints;
mod fit;
mod hops;
mod matching;
mod rules;
mod runs;
mod scene;
mod servers;
mod table;
mod units;
mod windows;

pub use fit::BRACKET_MARGIN;
use foldhash::{HashMap, HashSet};
pub use hops::attribute_through;
pub use rules::bracket::FILL_SHARE;
pub use runs::{MIN_RUN_OPENERS, RUN_OPENER_SHARE};
use scene::Scene;
use servers::server_ports;
pub use servers::{find_service, nested_servers};
use std::net::SocketAddr;
use table::{Decision, Table};
pub use units::interleaved;
use units::{Holder, Unit};
use whyslow_model::{Attribution, CutEdges, Direction, Exchange, ExchangeRole, Timeline};

/// A rule on single calls: it reads the exchanges and the table.
type CallRule = fn(&[Exchange], &mut Table);
/// A rule on units of calls (`units`): it reads them and the table.
type UnitRule = fn(&Scene, &mut Table);

/// The rules that place a call on its own evidence: the source's span
/// parent, the trace id a request carried, the thread that read it.
const CALL_RULES: [CallRule; 3] = [
    rules::span_parent::place,
    rules::trace_context::place,
    rules::thread::place,
];

/// Then, on the calls left, grouped into units (a trace the service
/// started, a transaction, a run on a checked-out connection, a call of a
/// fingerprint, a single call): deduction for what a request holds one of,
/// then a sole candidate, then timing; last, a DNS lookup goes with the
/// call it preceded, once that call is placed.
const UNIT_RULES: [UnitRule; 8] = [
    rules::trace_group::place,
    rules::affinity::place,
    rules::transaction::place,
    rules::checkout::place,
    rules::fingerprint::place,
    rules::sole_candidate::place,
    rules::bracket::place,
    rules::lookup::place,
];

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
    /// Threads that interleaved requests (event loops): no call was given
    /// by them (`rules::thread`).
    pub event_loops: Vec<whyslow_model::Thread>,
}

/// Runs of calls on held connections (`runs`): a request holds one per
/// server, so once it was given one, an ambiguous run to that server is
/// another request's — the request is still told apart.
#[derive(Debug, Default)]
pub struct HeldRuns {
    /// Ambiguous call → the server and the number of the run it was in.
    pub ambiguous: HashMap<u32, (SocketAddr, u32)>,
    /// (Inbound request, server) of each run given.
    pub given: HashSet<(u32, SocketAddr)>,
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
    let windows = windows::requests(timeline, &port, service_ports);
    mark_roles(timeline, &port, service_ports);
    let exchanges = &timeline.exchanges;
    let mut table = Table::new(exchanges.len());
    for rule in CALL_RULES {
        rule(exchanges, &mut table);
    }
    let mut scene = Scene::new(timeline, &port);
    let server = servers::servers(timeline);
    let units = units::build(exchanges, &table, &server);
    let mut units = runs::join(
        units,
        exchanges,
        &answers(timeline, service_ports),
        &holes(timeline),
        &server,
    );
    // A fingerprint each request of a kind made once is counted
    // against the requests of that kind: a lost request leaves the count
    // short, whatever its kind.
    if units.iter().any(|u| u.holder == Holder::Call) && !windows.any_lost() {
        fingerprints::mark(&mut units, exchanges, &server, scene.kinds());
    }
    units::enclose(&mut units, &windows);
    for u in units.iter().filter(|u| u.complete && u.cands.is_empty()) {
        table.decide_unit(u, Decision::Outside);
    }
    scene.set_units(units);
    for rule in UNIT_RULES {
        rule(&scene, &mut table);
    }
    for u in &scene.units {
        if table.unit_open(u) {
            table.decide_unit(u, scene.ambiguous(u));
        }
    }
    near_cut_edges(&scene, edges, &mut table);
    let out = Attributed {
        repeated_traces: rules::trace_context::repeated(exchanges),
        event_loops: rules::thread::event_loops(exchanges),
        ..Attributed::default()
    };
    let units = std::mem::take(&mut scene.units);
    apply(&mut timeline.exchanges, &units, &table, out)
}

/// Each exchange's role: inbound to the service's ports, else outbound.
fn mark_roles(t: &mut Timeline, port: &HashMap<u32, u16>, service_ports: &[u16]) {
    for e in t.exchanges.iter_mut() {
        let inbound = port
            .get(&e.connection)
            .is_some_and(|p| service_ports.contains(p));
        e.role = if inbound {
            ExchangeRole::Inbound
        } else {
            ExchangeRole::Outbound
        };
    }
}

/// Near a forced cut a candidate may sit in the next or the last window:
/// the candidates seen here are not all there were, so a unit there is
/// given by nothing seen here. It still took its part in deduction, where
/// leaving it out would free a request whose freedom runs through every
/// overlapping request of the window.
fn near_cut_edges(s: &Scene, edges: CutEdges, table: &mut Table) {
    for u in s.units.iter().filter(|u| edges.near(u.start)) {
        let decided = u.calls.first().and_then(|&i| table.get(i));
        if matches!(decided, Some(Decision::Given(..) | Decision::Outside)) {
            table.overrule_unit(u, s.ambiguous(u));
        }
    }
}

/// Writes the table onto the exchanges: parents, levels and rules; into
/// `out`, each ambiguous call's request kind when its candidates agree, and
/// the runs on held connections: who holds one, and which ambiguous calls
/// were in one.
fn apply(
    exchanges: &mut [Exchange],
    units: &[Unit],
    table: &Table,
    mut out: Attributed,
) -> Attributed {
    for (n, u) in units.iter().enumerate() {
        let Holder::Run(server) = u.holder else {
            continue;
        };
        match u.calls.first().and_then(|&i| table.get(i)) {
            Some(Decision::Given(id, ..)) => {
                out.held_runs.given.insert((id, server));
            }
            Some(Decision::Ambiguous { .. }) => {
                for &i in &u.calls {
                    let call = exchanges[i].id;
                    out.held_runs.ambiguous.insert(call, (server, n as u32));
                }
            }
            _ => {}
        }
    }
    for (i, e) in exchanges.iter_mut().enumerate() {
        (e.parent, e.attribution, e.rule) = match table.get(i) {
            None | Some(Decision::Outside) => (None, None, None),
            Some(Decision::Given(id, how, rule)) => (Some(id), Some(how), Some(rule)),
            Some(Decision::Ambiguous { kind_of }) => {
                if let Some(k) = kind_of {
                    out.ambiguous_kind.insert(e.id, k);
                }
                (None, Some(Attribution::Ambiguous), None)
            }
        };
    }
    out
}

/// The holes in each connection's stream toward its server.
fn holes(t: &Timeline) -> runs::Holes {
    let mut out = runs::Holes::default();
    for c in t.connections.iter().filter(|c| !c.gaps.is_empty()) {
        let mut at: Vec<u64> = c
            .gaps
            .iter()
            .filter(|g| g.direction == Direction::ToServer)
            .map(|g| g.after_us)
            .collect();
        at.sort_unstable();
        if c.to_server.gaps > at.len() as u64 {
            let since = c.gaps.last().map_or(c.first_at_us, |g| g.after_us);
            out.unkept_from.insert(c.id, since);
        }
        out.at.insert(c.id, at);
    }
    out
}

/// When the inbound requests were answered (first response byte) and, where
/// an eBPF source saw it, read by the service, and the share of requests
/// whose answer the capture holds. A hole toward the
/// service on an inbound connection hid a request's bytes: where it hid a
/// whole request, its answer was skipped as a response without one, so
/// each such hole noticed while these requests came counts as a request
/// with no answer held (the holes a connection kept: `GAPS_KEPT`).
fn answers(t: &Timeline, service_ports: &[u16]) -> runs::Answers {
    let mut requests = 0u64;
    let mut at: Vec<u64> = Vec::new();
    let mut taken_up: Vec<u64> = Vec::new();
    let (mut first, mut last) = (u64::MAX, 0);
    for e in t
        .exchanges
        .iter()
        .filter(|e| e.role == ExchangeRole::Inbound)
    {
        requests += 1;
        at.extend(e.response_first_at_us);
        taken_up.extend(e.read_at_us);
        first = first.min(e.request_first_at_us);
        last = last.max(e.response_first_at_us.unwrap_or(e.request_last_at_us));
    }
    let hidden = t
        .connections
        .iter()
        .filter(|c| service_ports.contains(&c.server.port()))
        .flat_map(|c| &c.gaps)
        .filter(|g| g.direction == Direction::ToServer && (first..=last).contains(&g.after_us))
        .count() as u64;
    at.sort_unstable();
    taken_up.sort_unstable();
    let captured = if requests == 0 {
        1.0
    } else {
        at.len() as f64 / (requests + hidden) as f64
    };
    runs::Answers {
        at,
        taken_up,
        captured,
    }
}

#[cfg(test)]
mod tests_concurrent;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::{conn, exchange, servers};

    #[test]
    fn calls_belong_to_the_request_waiting_for_them() {
        let mut t = servers(&[8080, 6379]).with(vec![
            exchange(0, 0, (100, 110), (500, 510)),     // inbound A
            exchange(1, 1, (200, 210), (300, 310)),     // call inside A
            exchange(2, 0, (1000, 1010), (1500, 1510)), // inbound B
            exchange(3, 1, (1100, 1110), (1200, 1210)), // call inside B
            exchange(4, 1, (2000, 2010), (2100, 2110)), // call outside any request
        ]);
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
    fn a_datastore_enclosing_another_kind_of_server_is_not_the_service() {
        use whyslow_model::Protocol;
        // Long writes to Redis (6379) while short HTTP requests (8080) come
        // and go inside them, after each write arrived whole.
        let mut t = servers(&[6379, 8080]).with(Vec::new());
        for k in 0..10u32 {
            let at = u64::from(k) * 10_000;
            t.exchanges.push(exchange(
                2 * k,
                0,
                (at, at + 1_000),
                (at + 5_000, at + 5_010),
            ));
            let call = (at + 2_000, at + 2_010);
            t.exchanges
                .push(exchange(2 * k + 1, 1, call, (at + 2_100, at + 2_110)));
        }
        t.connections[0].protocol = Protocol::Redis;
        t.connections[1].protocol = Protocol::Http1;
        assert_eq!(find_service(&t), None);
        // A proxy of its own protocol (a Redis proxy in front of Redis) may be.
        t.connections[1].protocol = Protocol::Redis;
        assert_eq!(find_service(&t), Some(6379));
        // Calls that began before the write arrived whole were not made for it.
        t.connections[1].protocol = Protocol::Http1;
        t.connections[0].protocol = Protocol::Http1;
        assert_eq!(find_service(&t), Some(6379));
        for e in t.exchanges.iter_mut().filter(|e| e.connection == 0) {
            e.request_last_at_us += 2_500;
        }
        assert_eq!(find_service(&t), None);
    }

    #[test]
    fn asynchronous_writes_make_a_backing_server_without_a_parent() {
        // Each request reads on one connection; a writer connection's writes
        // start during or after a request and end after it answered (case
        // 004's fixed page): none nests, the reads alone make Redis backing.
        let mut t = servers(&[8080, 6379, 6379]).with(vec![
            exchange(0, 0, (100, 110), (500, 510)),
            exchange(1, 1, (200, 210), (300, 310)),
            exchange(2, 2, (150, 400), (900, 910)),
            exchange(3, 0, (1000, 1010), (1500, 1510)),
            exchange(4, 1, (1100, 1110), (1200, 1210)),
            exchange(5, 2, (1600, 1700), (1900, 1910)),
        ]);
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

    #[test]
    fn a_connection_with_calls_no_request_waited_for_gives_none_by_sole_candidate() {
        // Requests at 0–1 ms, 2–3 ms and 4–5 ms. A writer connection (1)
        // sends a stash at 1.2 ms, while no request waits, and another
        // inside the second request alone; a reader connection (2) reads
        // inside the second request alone.
        let mut t = servers(&[8080, 6379, 6379]).with(vec![
            exchange(0, 0, (0, 10), (1_000, 1_010)),
            exchange(1, 0, (2_000, 2_010), (3_000, 3_010)),
            exchange(2, 0, (4_000, 4_010), (5_000, 5_010)),
            exchange(10, 1, (1_200, 1_210), (1_500, 1_510)),
            exchange(11, 1, (2_200, 2_210), (2_500, 2_510)),
            exchange(12, 2, (2_600, 2_610), (2_700, 2_710)),
        ]);
        attribute(&mut t, &[8080]);
        let parent = |id: u32| t.exchanges.iter().find(|e| e.id == id).unwrap().parent;
        assert_eq!(parent(12), Some(1), "the reader's call: its one request's");
        let rule = t.exchanges.iter().find(|e| e.id == 11).unwrap().rule;
        assert_eq!(parent(11), None, "the writer's, given by {rule:?}");
    }

    #[test]
    fn a_pool_that_lends_few_of_its_connections_is_still_backing() {
        // Five pooled connections (1–5) each run a set-up statement before
        // the first request; only two are ever lent to requests.
        let mut t = servers(&[8080, 5432, 5432, 5432, 5432, 5432]).with(Vec::new());
        for c in 1..=5u32 {
            let at = u64::from(c) * 10;
            t.exchanges
                .push(exchange(100 + c, c, (at, at + 1), (at + 5, at + 6)));
        }
        for k in 0..30u32 {
            let at = 1_000 + u64::from(k) * 1_000;
            t.exchanges
                .push(exchange(2 * k, 0, (at, at + 1), (at + 500, at + 501)));
            let call = (at + 100, at + 101);
            t.exchanges
                .push(exchange(2 * k + 1, 1 + k % 2, call, (at + 200, at + 201)));
        }
        assert_eq!(nested_servers(&t, &[8080]), vec![5432]);
        assert_eq!(find_service(&t), Some(8080));
    }
}
