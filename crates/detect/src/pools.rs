//! Client pools on the wire: the connections a service keeps to one backing
//! server, seen across all its requests at once. Under load a pool is
//! shared: a request's call waits while other requests' calls hold every
//! connection, and the request sits idle meanwhile — time that would
//! otherwise read as the service's own. A call waited for the pool when
//! it took a connection just as another request gave it back; its wait runs
//! from when its request had nothing else to do (arrival, or the end of its
//! previous call) to its start, counted only while every connection was
//! busy. A request that held a connection across several calls (an ORM's
//! session) kept it busy between them.

use crate::attribution::{interleaved, HeldRuns};
use crate::intervals::{covered_us, running_max};
use crate::request_calls::RequestCalls;
use foldhash::{HashMap, HashMapExt};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use whyslow_model::{ExchangeRole, Protocol, Timeline};

/// A waiting call leaves as soon as a connection comes back: microseconds
/// on the client, one RTT later when captured at the server. 10 ms keeps
/// LAN round trips in (the same bound as Nagle's release after an ACK).
pub const HANDOFF_MAX_US: u64 = 10_000;

/// Every server's pool, by server.
pub type Pools = HashMap<SocketAddr, Pool>;

/// A call as a pool sees it: (connection, start, end, request made for).
type PoolCall = (u32, u64, u64, Option<u32>);

/// Who held a connection across several calls: the request they were given
/// to, or the ambiguous run they were in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum HeldBy {
    Request(u32),
    Run(u32),
}

/// One backing server's pool, as every call to it used it.
#[derive(Debug, Default)]
pub struct Pool {
    /// Most connections busy at once: the pool size seen.
    pub size: usize,
    /// When every connection was busy, by start, disjoint.
    full: Vec<(u64, u64)>,
    /// When a call gave its connection back, the request it was made for
    /// (None: not attributed) and the connection, by time. (Calls of a
    /// saturated pool often end together: the second to end finds the pool
    /// no longer full, yet its connection goes straight to a waiting call.)
    releases: Vec<(u64, Option<u32>, u32)>,
    /// Calls (a held run counted once) and those that took their
    /// connection as it came back from a full pool, whoever they were for.
    pub calls: usize,
    pub saturated_handoffs: usize,
    /// Time connections were held, summed over the calls.
    pub held_us: u64,
    /// From the first call's start to the last one's end.
    pub span_us: u64,
}

impl Pool {
    /// A call of request `inbound` starting at `start` on `conn` took that
    /// connection just as another request's call gave it back, after
    /// `since` (when the request's previous call ended: a release before it
    /// was not what this call waited for).
    fn handed_over(&self, since: u64, start: u64, conn: u32, inbound: u32) -> bool {
        let from = start.saturating_sub(HANDOFF_MAX_US).max(since);
        let i = self.releases.partition_point(|r| r.0 < from);
        self.releases[i..]
            .iter()
            .take_while(|r| r.0 <= start)
            .any(|r| r.2 == conn && r.1 != Some(inbound))
    }

    /// A call starting at `start` on `conn` took it as it came back while
    /// every connection was busy: the pool was full until that release or
    /// shortly before it (calls of a saturated pool often end together,
    /// and each connection goes straight to a waiting call).
    fn saturated_handoff(&self, start: u64, conn: u32) -> bool {
        let from = start.saturating_sub(HANDOFF_MAX_US);
        let full_ended = |at: u64| {
            let i = self
                .full
                .partition_point(|f| f.1 < at.saturating_sub(HANDOFF_MAX_US));
            self.full.get(i).is_some_and(|f| f.1 <= at)
        };
        let i = self.releases.partition_point(|r| r.0 < from);
        self.releases[i..]
            .iter()
            .take_while(|r| r.0 <= start)
            .any(|r| r.2 == conn && full_ended(r.0))
    }

    /// When every connection was busy, by start, disjoint.
    pub fn full(&self) -> &[(u64, u64)] {
        &self.full
    }

    /// Time every connection was busy, over the capture.
    pub fn full_us(&self) -> u64 {
        self.full.iter().map(|f| f.1 - f.0).sum()
    }

    /// The parts of [from, to] when the pool was full, into `out`.
    pub fn full_within(&self, from: u64, to: u64, out: &mut Vec<(u64, u64)>) {
        let i = self.full.partition_point(|f| f.1 <= from);
        for &(a, b) in self.full[i..].iter().take_while(|f| f.0 < to) {
            out.push((a.max(from), b.min(to)));
        }
    }
}

/// What one request waited for one server's pool.
#[derive(Debug, Clone, PartialEq)]
pub struct PoolQueue {
    pub server: SocketAddr,
    /// The pool size seen.
    pub pool: usize,
    /// Most calls to the server wanted at once (in flight or waiting), over
    /// the requests whose waits are known.
    pub peak_demand: usize,
    /// Its calls that took a connection another request gave back.
    pub calls: usize,
    /// Time it waited with none of its own calls in flight.
    pub waited_us: u64,
    /// When each waiting call started waiting, when it started, and its exchange.
    spans: Vec<(u64, u64, u32)>,
}

impl PoolQueue {
    /// A queue for `server`'s `pool` connections (or streams) of `waited_us`
    /// in all, a span (waiting from, start, exchange) per call that waited.
    pub fn new(
        server: SocketAddr,
        pool: usize,
        waited_us: u64,
        spans: Vec<(u64, u64, u32)>,
    ) -> Self {
        PoolQueue {
            server,
            pool,
            peak_demand: pool,
            calls: spans.len(),
            waited_us,
            spans,
        }
    }

    /// Each waiting call's (waiting from, start, exchange).
    pub fn spans(&self) -> &[(u64, u64, u32)] {
        &self.spans
    }

    /// Each call that waited, by exchange, with when it started waiting.
    pub fn waits(&self) -> impl Iterator<Item = (u32, u64)> + '_ {
        self.spans.iter().map(|&(from, _, id)| (id, from))
    }
}

/// Pools of the servers whose connections carry one call at a time (a
/// multiplexed or pipelined connection is not a pool of connections).
pub fn of(t: &Timeline, server_of: &HashMap<u32, SocketAddr>, runs: &HeldRuns) -> Pools {
    let mut calls: BTreeMap<SocketAddr, Vec<(PoolCall, Option<HeldBy>)>> = BTreeMap::new();
    // HTTP/2 multiplexes a request's calls on one connection: its streams
    // are `streams`' case, not a pool's.
    for e in t
        .exchanges
        .iter()
        .filter(|e| e.role == ExchangeRole::Outbound && e.protocol != Protocol::Http2)
    {
        if let (Some(&s), Some(end)) = (server_of.get(&e.connection), e.response_last_at_us) {
            let c = (e.connection, e.request_first_at_us, end, e.parent);
            let holder = e
                .parent
                .map(HeldBy::Request)
                .or_else(|| runs.run_of(e.id).map(HeldBy::Run));
            calls.entry(s).or_default().push((c, holder));
        }
    }
    let mut out = HashMap::new();
    for (server, mut calls) in calls {
        calls.sort_unstable_by_key(|(c, _)| (c.0, c.1, c.2));
        // One holder's calls pipelined on its connection (pgJDBC sends BEGIN
        // in the same write as the first query) are one checkout of it.
        let calls = held(calls);
        let one_at_a_time = interleaved(calls.iter().map(|c| (c.0, c.1, c.2))).is_empty();
        if one_at_a_time {
            let pool = sweep(&calls);
            if pool.size >= 2 {
                out.insert(server, pool);
            }
        }
    }
    out
}

/// Calls (by connection, then start) with consecutive calls of one holder
/// on one connection as one: it held the connection between them (an ORM's
/// session), so no other request's call could take it then. So are calls
/// sent in one message (the statements of one simple query, asyncpg's
/// reset of a connection taken back), whoever held them.
fn held(calls: Vec<(PoolCall, Option<HeldBy>)>) -> Vec<PoolCall> {
    let mut out: Vec<(PoolCall, Option<HeldBy>)> = Vec::with_capacity(calls.len());
    for (c, holder) in calls {
        match out.last_mut() {
            Some((last, h))
                if last.0 == c.0 && ((holder.is_some() && *h == holder) || last.1 == c.1) =>
            {
                last.2 = last.2.max(c.2)
            }
            _ => out.push((c, holder)),
        }
    }
    out.into_iter().map(|(c, _)| c).collect()
}

/// Busy connections over time: the size, the full spans, the releases.
fn sweep(calls: &[PoolCall]) -> Pool {
    // (time, +1 start / -1 end, request, connection); ends before starts
    // at one instant.
    let mut edges: Vec<(u64, i32, Option<u32>, u32)> = Vec::with_capacity(calls.len() * 2);
    // A call that took no time (a span read back with no answer ends where
    // it began) held no connection: its end would sort before its start.
    for &(conn, start, end, parent) in calls.iter().filter(|c| c.2 > c.1) {
        edges.push((start, 1, parent, conn));
        edges.push((end, -1, parent, conn));
    }
    edges.sort_unstable_by_key(|e| (e.0, e.1));
    let size = running_max(edges.iter().map(|e| e.1)) as usize;
    let mut pool = Pool {
        size,
        ..Pool::default()
    };
    let mut now = 0usize;
    let mut full_since = None;
    for &(at, step, parent, conn) in &edges {
        if step < 0 {
            pool.releases.push((at, parent, conn));
            if now == size {
                pool.full.extend(full_since.take().map(|s| (s, at)));
            }
            now -= 1;
        } else {
            now += 1;
            if now == size {
                full_since = Some(at);
            }
        }
    }
    pool.full.retain(|f| f.1 > f.0);
    pool.calls = calls.len();
    pool.held_us = calls.iter().map(|c| c.2.saturating_sub(c.1)).sum();
    let first = calls.iter().map(|c| c.1).min().unwrap_or(0);
    pool.span_us = calls
        .iter()
        .map(|c| c.2)
        .max()
        .unwrap_or(0)
        .saturating_sub(first);
    pool.saturated_handoffs = calls
        .iter()
        .filter(|&&(conn, start, _, _)| pool.saturated_handoff(start, conn))
        .count();
    pool
}

/// Each complete request's waits for a pool (`RequestCalls::queued`),
/// then every server's peak demand over them. A request some of whose calls
/// were not told apart may have waited for a pool whenever one was full:
/// that time is ambiguous too, not the service's own.
pub fn attach(pools: &Pools, requests: &mut [RequestCalls]) {
    if pools.is_empty() {
        return;
    }
    let mut full = Vec::new();
    for r in requests.iter_mut() {
        if r.told_apart() {
            r.queued = queues(pools, r);
            continue;
        }
        let (from, to) = r.waiting();
        full.clear();
        for pool in pools.values() {
            pool.full_within(from, to, &mut full);
        }
        r.ambiguous.extend_from_slice(&full);
    }
    let mut peaks: HashMap<SocketAddr, usize> = HashMap::new();
    for (&server, pool) in pools {
        peaks.insert(server, peak_demand(pool, server, requests));
    }
    for q in requests.iter_mut().flat_map(|r| r.queued.iter_mut()) {
        q.peak_demand = peaks.get(&q.server).copied().unwrap_or(q.pool);
    }
}

/// One request's waits, a queue per pool it waited for.
fn queues(pools: &Pools, r: &RequestCalls) -> Vec<PoolQueue> {
    let mut out = Vec::new();
    let own = || r.calls.iter().map(|c| (c.start, c.end));
    let mut ends: Vec<u64> = r.calls.iter().map(|c| c.end).collect();
    ends.sort_unstable();
    for (server, calls) in r.per_server() {
        let Some(pool) = pools.get(&server) else {
            continue;
        };
        let (mut spans, mut full, mut waiting) = (Vec::new(), Vec::new(), 0);
        for c in &calls {
            // Idle since arrival or since its latest call before this one ended.
            let before = ends.partition_point(|&end| end <= c.start);
            let since = before
                .checked_sub(1)
                .map_or(0, |i| ends[i])
                .max(r.inbound.request_last_at_us);
            match (c.exchange.waited_before_sent(), c.exchange.due_at_us) {
                // The source saw it wait for a connection from when it was
                // due (a span): all of that wait was the pool's, whether or
                // not its handoffs were quick enough to show on the wire.
                (Some(true), Some(due)) => {
                    let from = due.max(r.inbound.request_last_at_us).min(c.start);
                    spans.push((from, c.start, c.exchange.id));
                    full.push((from, c.start));
                }
                (Some(false), _) => continue,
                _ if !pool.handed_over(since, c.start, c.exchange.connection, r.inbound.id) => {
                    continue
                }
                _ => {
                    spans.push((since.min(c.start), c.start, c.exchange.id));
                    pool.full_within(since, c.start, &mut full);
                }
            }
            waiting += 1;
        }
        let window = (r.inbound.request_first_at_us, r.waiting().1);
        let idle_full =
            covered_us(own().chain(full.iter().copied()), window) - covered_us(own(), window);
        if idle_full > 0 {
            out.push(PoolQueue {
                server,
                pool: pool.size,
                peak_demand: pool.size,
                calls: waiting,
                waited_us: idle_full,
                spans,
            });
        }
    }
    out
}

/// Most calls to `server` wanted at once: those in flight plus those
/// waiting (of the requests whose waits are known), never below the pool.
fn peak_demand(pool: &Pool, server: SocketAddr, requests: &[RequestCalls]) -> usize {
    let mut edges: Vec<(u64, i32)> = Vec::new();
    for q in requests
        .iter()
        .flat_map(|r| &r.queued)
        .filter(|q| q.server == server)
    {
        for &(from, to, _) in &q.spans {
            edges.push((from, 1));
            edges.push((to, -1));
        }
    }
    edges.sort_unstable();
    // While calls wait the pool is full, so demand is its size plus them.
    pool.size + running_max(edges.iter().map(|e| e.1)) as usize
}

#[cfg(test)]
mod tests {
    use crate::request_calls::by_request;
    use crate::request_calls::tests::call;
    use crate::testkit::{exchange, servers};
    use whyslow_model::{FindingKind, Timeline};

    const MS: u64 = 1_000;

    /// Two requests and a pool of two connections (2, 3) to :9090. Request
    /// 0 holds both for 100 ms; request 3 arrives at 2 ms and its call takes
    /// connection 2 as request 0's call gives it back.
    fn shared_pool() -> Timeline {
        let mut t = servers(&[8080, 8080, 9090, 9090]).with(vec![
            exchange(0, 0, (0, 100), (102 * MS, 102 * MS + 100)),
            call(1, 2, 0, (MS, 101 * MS)),
            call(2, 3, 0, (MS, 101 * MS)),
            exchange(3, 1, (2 * MS, 2 * MS + 100), (203 * MS, 203 * MS + 100)),
            call(4, 2, 3, (101 * MS + 50, 201 * MS + 50)),
        ]);
        t.exchanges[2].request = "GET /b".into(); // not a duplicate of call 1
        t
    }

    #[test]
    fn a_request_idle_while_others_hold_the_pool_waited_for_it() {
        let t = shared_pool();
        let r = by_request(&t);
        assert!(r[0].queued.is_empty(), "request 0 found the pool free");
        let q = &r[1].queued[0];
        assert_eq!((q.pool, q.calls), (2, 1));
        // Idle from its arrival (2.1 ms) until the pool freed (101 ms).
        assert_eq!(q.waited_us, 101 * MS - (2 * MS + 100));
        assert_eq!(q.peak_demand, 3, "two in flight and one waiting");
        let p = crate::breakdown::parts(&r[1]);
        assert!(p.server_us <= 2 * MS, "{p:?}");
        let f = crate::tests::ranked(&t, &r);
        let kinds: Vec<FindingKind> = f.iter().map(|f| f.kind).collect();
        assert!(kinds.contains(&FindingKind::PoolQueueing), "{kinds:?}");
        assert!(!kinds.contains(&FindingKind::ServerTime), "{kinds:?}");
    }

    #[test]
    fn a_call_after_the_requests_own_on_a_held_connection_did_not_queue() {
        let mut t = shared_pool();
        // Request 3's call now follows a call of its own on connection 2.
        t.exchanges[1].parent = Some(3);
        let r = by_request(&t);
        assert!(r[1].queued.is_empty(), "{:?}", r[1].queued);
    }

    #[test]
    fn a_service_slow_in_its_own_code_keeps_server_time_first() {
        // One 5 ms call each, 300 ms of the service's own work, the pool of
        // two never full for long enough to matter.
        let t = servers(&[8080, 8080, 9090, 9090]).with(vec![
            exchange(0, 0, (0, 100), (310 * MS, 310 * MS + 100)),
            call(1, 2, 0, (MS, 6 * MS)),
            exchange(2, 1, (MS, MS + 100), (311 * MS, 311 * MS + 100)),
            call(3, 3, 2, (2 * MS, 7 * MS)),
        ]);
        let r = by_request(&t);
        let f = crate::tests::ranked(&t, &r);
        assert_eq!(f[0].kind, FindingKind::ServerTime, "{f:?}");
        assert!(!f.iter().any(|f| f.kind == FindingKind::PoolQueueing));
    }

    #[test]
    fn multiplexed_connections_are_no_pool() {
        let mut t = shared_pool();
        // Request 3's call overlaps request 0's on connection 2: pipelined.
        t.exchanges[4].request_first_at_us = 50 * MS;
        let pools = super::of(
            &t,
            &t.connections.iter().map(|c| (c.id, c.server)).collect(),
            &crate::attribution::HeldRuns::default(),
        );
        assert!(pools.is_empty());
    }

    #[test]
    fn one_requests_calls_pipelined_on_its_connection_are_one_checkout() {
        let mut t = shared_pool();
        // Request 3 sends a BEGIN in the same write as its call on
        // connection 2 (pgJDBC): two calls at once, one holder.
        let mut begin = call(5, 2, 3, (101 * MS + 50, 101 * MS + 90));
        begin.request = "BEGIN".into();
        t.exchanges.push(begin);
        t.exchanges[4].request_first_at_us = 101 * MS + 60;
        let pools = super::of(
            &t,
            &t.connections.iter().map(|c| (c.id, c.server)).collect(),
            &crate::attribution::HeldRuns::default(),
        );
        assert_eq!(pools.values().map(|p| p.size).collect::<Vec<_>>(), [2]);
        assert_eq!(by_request(&t)[1].queued.len(), 1);
    }

    #[test]
    fn a_call_that_took_no_time_holds_no_connection() {
        let mut t = shared_pool();
        // A call read back from a span with no answer, the pool idle: it
        // ends as it began.
        t.exchanges.push(call(5, 3, 3, (300 * MS, 300 * MS)));
        let pools = super::of(
            &t,
            &t.connections.iter().map(|c| (c.id, c.server)).collect(),
            &crate::attribution::HeldRuns::default(),
        );
        let pool = pools.values().next().expect("the pool of two");
        assert_eq!(pool.size, 2);
        assert_eq!(pool.calls, 4, "every call counted, the instant one too");
    }
}
