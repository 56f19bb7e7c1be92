//! Backing calls grouped by the inbound request they were made for (after
//! attribution set roles and parents): what the request-level detectors and
//! the time breakdown read.

use crate::attribution::HeldRuns;
use crate::intervals::{merged_spans, most_at_once};
use crate::pools::{self, PoolQueue, Pools};
use foldhash::{HashMap, HashMapExt, HashSet};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use whyslow_model::{
    Attribution, Connection, Evidence, Exchange, ExchangeRole, Facts, Protocol, Timeline,
};

/// Ambiguous calls looked at per request: past it, the rest of the
/// request's wait counts as ambiguous (a bound on work, not a guess).
const MAX_AMBIGUOUS: usize = 4096;

/// One backing call: an outbound exchange and the server it went to.
#[derive(Debug, Clone, Copy)]
pub struct Call<'a> {
    pub exchange: &'a Exchange,
    pub server: SocketAddr,
    /// First request byte.
    pub start: u64,
    /// Last response byte (last request byte when unanswered).
    pub end: u64,
}

impl<'a> Call<'a> {
    /// Outbound exchange `e`, made to `server`.
    pub fn of(e: &'a Exchange, server: SocketAddr) -> Self {
        Call {
            exchange: e,
            server,
            start: e.request_first_at_us,
            end: e.end_us(),
        }
    }

    /// When the caller issued it: its source's `due_at_us`, else when sent.
    pub fn due(&self) -> u64 {
        self.exchange
            .due_at_us
            .map_or(self.start, |due| due.min(self.start))
    }

    pub fn duration_us(&self) -> u64 {
        self.end.saturating_sub(self.start)
    }

    /// What the network took of it, where the callee's end was captured
    /// too: what the caller saw past the callee's own time.
    pub fn network_us(&self) -> Option<u64> {
        let callee = self.exchange.callee_us?;
        Some(self.duration_us().saturating_sub(callee))
    }

    pub fn protocol(&self) -> Protocol {
        self.exchange.protocol
    }
}

/// An answered inbound request and the calls made for it, by start time.
#[derive(Debug, Clone)]
pub struct RequestCalls<'a> {
    pub inbound: &'a Exchange,
    /// The service that answered it.
    pub server: SocketAddr,
    pub calls: Vec<Call<'a>>,
    /// Spans of calls this request's wait encloses that attribution left
    /// ambiguous: maybe its own, maybe another's; and, when there are any,
    /// the spans a pool was full meanwhile (it may have waited for one).
    /// Its own time excludes them.
    pub ambiguous: Vec<(u64, u64)>,
    /// What it waited for shared pools with none of its calls in flight
    /// (known for requests with no ambiguous call only).
    pub queued: Vec<PoolQueue>,
    /// The service opened a backing connection it went on using while it
    /// worked on this request (a pool filling as the service warms up):
    /// its own time may be connecting, authenticating, a driver's first
    /// queries or first-use work, whichever request the connection was for.
    pub warming: bool,
    /// The capture lost bytes (a gap) on its own connection or on one the
    /// service's calls went out on while it was in flight: calls may be
    /// missing from it, and its own time is not known.
    pub damaged: bool,
}

impl<'a> RequestCalls<'a> {
    /// First request byte → last response byte.
    pub fn total_us(&self) -> u64 {
        self.inbound.duration_us()
    }

    /// Last request byte → first response byte: while the service worked.
    pub fn waiting(&self) -> (u64, u64) {
        let from = self.inbound.request_last_at_us;
        let to = self.inbound.response_first_at_us.unwrap_or(from).max(from);
        (from, to)
    }

    /// Evidence pointing at this inbound request: `note`, and the numbers it quotes.
    pub fn inbound_evidence(&self, note: String, facts: Facts) -> Evidence {
        Evidence::Exchange {
            facts,
            id: self.inbound.id,
            request: self.inbound.request.to_string(),
            note,
        }
    }

    /// Whether all the calls made for it are known: no ambiguous call
    /// in its wait.
    pub fn told_apart(&self) -> bool {
        self.ambiguous.is_empty()
    }

    /// The calls to each backing server, by server.
    pub fn per_server(&self) -> BTreeMap<SocketAddr, Vec<Call<'a>>> {
        let mut out: BTreeMap<SocketAddr, Vec<Call<'a>>> = BTreeMap::new();
        for c in &self.calls {
            out.entry(c.server).or_default().push(*c);
        }
        out
    }
}

/// Each connection's server.
fn servers(t: &Timeline) -> HashMap<u32, SocketAddr> {
    t.connections.iter().map(|c| (c.id, c.server)).collect()
}

/// Every answered inbound request with its calls, in capture order.
pub fn by_request(t: &Timeline) -> Vec<RequestCalls<'_>> {
    by_request_with(t, &HeldRuns::default())
}

/// The same, knowing which ambiguous calls `runs` rules out for a request.
pub fn by_request_with<'t>(t: &'t Timeline, runs: &HeldRuns) -> Vec<RequestCalls<'t>> {
    by_request_and_pools(t, runs).0
}

/// The same, and the client pools every call to a server used, whichever
/// request it was for.
pub fn by_request_and_pools<'t>(
    t: &'t Timeline,
    runs: &HeldRuns,
) -> (Vec<RequestCalls<'t>>, Pools) {
    let server = servers(t);
    let mut out = Vec::new();
    let mut index: HashMap<u32, usize> = HashMap::new();
    // Most windows of plain HTTP traffic carry no call: no index to build.
    let any_call = t
        .exchanges
        .iter()
        .any(|e| e.parent.is_some() || e.attribution == Some(Attribution::Ambiguous));
    for e in &t.exchanges {
        let answered = e.response_last_at_us.is_some();
        if e.role == ExchangeRole::Inbound && answered {
            if let Some(&s) = server.get(&e.connection) {
                if any_call {
                    index.insert(e.id, out.len());
                }
                out.push(RequestCalls {
                    inbound: e,
                    server: s,
                    calls: Vec::new(),
                    ambiguous: Vec::new(),
                    queued: Vec::new(),
                    warming: false,
                    damaged: false,
                });
            }
        }
    }
    for e in t.exchanges.iter().filter(|_| any_call) {
        let (Some(parent), Some(&s)) = (e.parent, server.get(&e.connection)) else {
            continue;
        };
        if let Some(&i) = index.get(&parent) {
            out[i].calls.push(Call::of(e, s));
        }
    }
    for r in &mut out {
        r.calls.sort_by_key(|c| (c.start, c.end));
    }
    add_ambiguous(t, runs, &mut out);
    if any_call {
        mark_warming(t, &mut out);
    }
    mark_damaged(t, &mut out);
    let mut pools = Pools::default();
    if any_call {
        pools = pools::of(t, &server, runs);
        pools::attach(&pools, &mut out);
        crate::streams::attach(&crate::streams::of(t), &mut out);
    }
    (out, pools)
}

/// The calls of each run on a held connection that attribution left
/// ambiguous, by start: each is one request's calls to its server, which
/// request not told apart.
pub fn ambiguous_runs<'t>(t: &'t Timeline, runs: &HeldRuns) -> Vec<Vec<Call<'t>>> {
    if runs.ambiguous.is_empty() {
        return Vec::new();
    }
    let server = servers(t);
    let mut by_run: BTreeMap<(SocketAddr, u32), Vec<Call<'t>>> = BTreeMap::new();
    for e in &t.exchanges {
        let (Some(&run), Some(&s)) = (runs.ambiguous.get(&e.id), server.get(&e.connection)) else {
            continue;
        };
        by_run.entry(run).or_default().push(Call::of(e, s));
    }
    let mut out: Vec<Vec<Call<'t>>> = by_run.into_values().collect();
    for run in &mut out {
        run.sort_by_key(|c| (c.start, c.end));
    }
    out
}

/// Gives each request the spans of the ambiguous calls its wait encloses,
/// but those of runs to a server it holds a run on.
fn add_ambiguous(t: &Timeline, runs: &HeldRuns, requests: &mut [RequestCalls]) {
    let mut spans: Vec<(u64, u64, u32)> = t
        .exchanges
        .iter()
        .filter(|e| e.attribution == Some(Attribution::Ambiguous))
        .map(|e| (e.request_first_at_us, e.end_us(), e.id))
        .collect();
    if spans.is_empty() {
        return;
    }
    spans.sort_unstable();
    for r in requests {
        let (from, to) = (r.inbound.request_first_at_us, r.waiting().1);
        let first = spans.partition_point(|s| s.0 < from);
        let inside = spans[first..].iter().take_while(|s| s.0 <= to);
        for (looked, &(start, end, call)) in inside.enumerate() {
            if looked == MAX_AMBIGUOUS {
                r.ambiguous.push((start, to));
                break;
            }
            if end <= to && !runs.rules_out(r.inbound.id, call) {
                r.ambiguous.push((start, end));
            }
        }
    }
}

/// Marks the requests in whose wait the service opened (SYN) a backing
/// connection that carried more than one call.
fn mark_warming(t: &Timeline, requests: &mut [RequestCalls]) {
    let mut calls: HashMap<u32, usize> = HashMap::new();
    for e in t
        .exchanges
        .iter()
        .filter(|e| e.role == ExchangeRole::Outbound)
    {
        *calls.entry(e.connection).or_default() += 1;
    }
    let mut opened: Vec<u64> = t
        .connections
        .iter()
        .filter(|c| calls.get(&c.id).is_some_and(|&n| n > 1))
        .filter_map(|c| c.syn_at_us)
        .collect();
    if opened.is_empty() {
        return;
    }
    opened.sort_unstable();
    for r in requests {
        let (from, to) = r.waiting();
        let i = opened.partition_point(|&syn| syn < from);
        r.warming = opened.get(i).is_some_and(|&syn| syn <= to);
    }
}

/// Sets `damaged` where a gap was noticed on a request's own connection or
/// on any connection that carried calls, between its first request byte
/// and its last response byte. A connection with more gaps than it keeps
/// (`GAPS_KEPT`) is damaged from its last kept gap to its end.
fn mark_damaged(t: &Timeline, requests: &mut [RequestCalls]) {
    let lost = |c: &Connection| {
        let mut spans: Vec<(u64, u64)> = c.gaps.iter().map(|g| (g.after_us, g.after_us)).collect();
        let counted = c.to_server.gaps + c.to_client.gaps;
        if counted > c.gaps.len() as u64 {
            let since = c.gaps.last().map_or(c.first_at_us, |g| g.after_us);
            // A connection still open (in a window, its header) lasts.
            let until = if c.closed_by.is_some() {
                c.last_at_us.max(since)
            } else {
                u64::MAX
            };
            spans.push((since, until));
        }
        spans
    };
    if t.connections.iter().all(|c| c.gaps.is_empty()) {
        return;
    }
    let calling: HashSet<u32> = t
        .exchanges
        .iter()
        .filter(|e| e.role == ExchangeRole::Outbound)
        .map(|e| e.connection)
        .collect();
    let mut backing: Vec<(u64, u64)> = t
        .connections
        .iter()
        .filter(|c| calling.contains(&c.id))
        .flat_map(lost)
        .collect();
    // Gaps are points, by time; a connection's unkept gaps a range each,
    // merged.
    let (mut ranges, mut points): (Vec<_>, Vec<_>) = backing.drain(..).partition(|s| s.0 < s.1);
    points.sort_unstable();
    ranges.sort_unstable();
    let ranges = merged_spans(ranges);
    let own: HashMap<u32, Vec<(u64, u64)>> = t
        .connections
        .iter()
        .filter(|c| !c.gaps.is_empty())
        .map(|c| (c.id, lost(c)))
        .collect();
    let meets = |spans: &[(u64, u64)], (from, to): (u64, u64)| {
        spans.iter().any(|&(a, b)| a <= to && b >= from)
    };
    for r in requests {
        let span = (r.inbound.request_first_at_us, r.inbound.end_us());
        let i = points.partition_point(|&(a, _)| a < span.0);
        // Merged ranges are disjoint and by start: the last one starting
        // by the span's end is the only one that may reach into it.
        let k = ranges.partition_point(|&(a, _)| a <= span.1);
        r.damaged = points.get(i).is_some_and(|&(a, _)| a <= span.1)
            || k.checked_sub(1).is_some_and(|k| ranges[k].1 >= span.0)
            || own
                .get(&r.inbound.connection)
                .is_some_and(|spans| meets(spans, span));
    }
}

/// The requests told apart that made at least one call: most make none
/// (every exchange of a capture without a service is a request of its
/// own), and the call detectors have nothing to look at in those. A request
/// with ambiguous calls in its wait may be missing some of its own: its
/// counts would be wrong, so per-request evidence never uses it.
pub fn with_calls<'r, 'a>(
    requests: &'r [RequestCalls<'a>],
) -> impl Iterator<Item = &'r RequestCalls<'a>> {
    requests
        .iter()
        .filter(|r| r.told_apart() && !r.calls.is_empty())
}

/// Calls grouped by (server, normalized request): one shape each. DNS
/// queries are left to the DNS detectors: a name looked up again is a
/// missing cache (`dns_per_call`), not a duplicate call or an N+1.
pub fn by_shape<'a>(calls: &[Call<'a>]) -> BTreeMap<(SocketAddr, &'a str), Vec<Call<'a>>> {
    let mut out: BTreeMap<(SocketAddr, &str), Vec<Call>> = BTreeMap::new();
    for c in calls.iter().filter(|c| c.protocol() != Protocol::Dns) {
        out.entry((c.server, c.exchange.request.as_str()))
            .or_default()
            .push(*c);
    }
    out
}

/// Most calls in flight at one instant. A call ending when another starts
/// does not overlap it: the connection was handed on.
pub fn in_flight_max(calls: &[Call]) -> usize {
    most_at_once(calls.iter().map(|c| (c.start, c.end)))
}

/// The most calls the app had issued and not yet seen answered at once:
/// from when each was due where the source knows it (a span that began
/// before its pooled connection was handed over). Calls a caller issued
/// together but a full pool sent one at a time were not made one after
/// another.
pub fn issued_at_once_max(calls: &[Call]) -> usize {
    most_at_once(calls.iter().map(|c| (c.due(), c.end)))
}

/// The median (what a typical occurrence cost), by the project's one rule.
pub use whyslow_model::stats::median;

#[cfg(test)]
pub mod tests {
    use super::*;
    use crate::testkit::{exchange, request_0, servers};

    pub use crate::testkit::conn;

    /// An outbound call on `connection` from `start` to `end`, made for `parent`.
    pub fn call(id: u32, connection: u32, parent: u32, (start, end): (u64, u64)) -> Exchange {
        let mut e = exchange(id, connection, (start, start + 10), (end - 10, end));
        e.role = ExchangeRole::Outbound;
        e.parent = Some(parent);
        e
    }

    /// A call no request was told apart for.
    pub fn ambiguous_call(id: u32, connection: u32, (start, end): (u64, u64)) -> Exchange {
        let mut e = exchange(id, connection, (start, start + 10), (end - 10, end));
        e.role = ExchangeRole::Outbound;
        e.attribution = Some(whyslow_model::Attribution::Ambiguous);
        e
    }

    /// Asserts `detect` names the one request of `t` only while it is at
    /// least `MIN_REQUEST_SHARE` of the requests: not among 10 quick ones,
    /// named among 9.
    pub fn named_past_the_request_share(
        mut t: Timeline,
        detect: impl Fn(&Timeline) -> Vec<whyslow_model::Finding>,
    ) {
        add_quick_requests(&mut t, 10);
        assert!(detect(&t).is_empty(), "1 request of 11");
        t.exchanges.truncate(t.exchanges.len() - 2);
        assert_eq!(detect(&t).len(), 1, "1 of 10");
    }

    /// Appends `n` requests on connection 0, a second apart, each making
    /// one 30 ms call on connection 1 and answered 10 ms after it: quick
    /// requests for a cause to stand out among (or not).
    pub fn add_quick_requests(t: &mut Timeline, n: u32) {
        for k in 1..=n {
            let at = u64::from(k) * 1_000_000;
            let id = 100 + 2 * k;
            t.exchanges
                .push(exchange(id, 0, (at, at + 100), (at + 40_000, at + 40_100)));
            t.exchanges
                .push(call(id + 1, 1, id, (at + 200, at + 30_200)));
        }
    }

    #[test]
    fn groups_calls_under_their_request_and_counts_overlap() {
        let t = servers(&[8080, 9090, 9090]).with(vec![
            request_0(1000),
            call(1, 1, 0, (100, 300)),
            call(2, 2, 0, (150, 400)),
            call(3, 1, 0, (300, 500)),
            call(4, 1, 99, (600, 700)), // parent not in the capture
        ]);
        let r = by_request(&t);
        assert_eq!(r.len(), 1);
        let ids: Vec<u32> = r[0].calls.iter().map(|c| c.exchange.id).collect();
        assert_eq!(ids, vec![1, 2, 3]);
        assert_eq!(
            in_flight_max(&r[0].calls),
            2,
            "call 3 starts as call 1 ends"
        );
        assert_eq!(r[0].per_server().len(), 1);
        let spans = r[0].calls.iter().map(|c| (c.start, c.end));
        assert_eq!(crate::intervals::covered_us(spans, (0, 450)), 350);
    }
}
