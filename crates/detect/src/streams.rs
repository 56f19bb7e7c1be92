//! HTTP/2 connections at their stream limit, seen across all requests at
//! once. A connection carries at most so many streams at once (the
//! server's SETTINGS_MAX_CONCURRENT_STREAMS, or a limit in the client);
//! past it a call opens its stream only as another closes. Under load that
//! limit is shared: a gRPC channel every request of a service uses queues
//! one request's calls behind the others', and the request sits idle
//! meanwhile — time that would otherwise read as the service's own. As for
//! a pool of connections (`pools`), a call waited when its stream opened as
//! another closed at the limit; its wait runs from when its request had
//! nothing else to do (arrival, or the end of its previous call) to its
//! start, counted only while the connection was at its limit.

use crate::intervals::covered_us;
use crate::pools::{PoolQueue, HANDOFF_MAX_US};
use crate::request_calls::RequestCalls;
use foldhash::HashMap;
use std::collections::BTreeMap;
use whyslow_model::{ExchangeRole, Protocol, Timeline};

/// Fewest streams open at once that can be a limit: one at a time is code
/// that calls one after another (`pool_queueing`'s bound for a pool).
pub(crate) use crate::pool_queueing::MIN_IN_FLIGHT as MIN_STREAMS;

/// A limit shows by being reached again and again: at least this many
/// streams opened as another closed at the limit.
const MIN_HANDOFFS: usize = 3;

/// One connection's streams at their limit.
#[derive(Debug, Clone, PartialEq)]
pub struct Limit {
    pub streams: usize,
    /// Streams that opened as another closed while `streams` were open.
    pub handoffs: usize,
    /// When a stream closed with `streams` open, in order.
    pub full_closes: Vec<u64>,
    /// When `streams` were open, by start, disjoint.
    pub full: Vec<(u64, u64)>,
    /// Streams the connection carried, and those that opened as another
    /// closed at the limit (at once or after it: a call waiting in the
    /// client opens the moment a stream comes back).
    pub calls: usize,
    pub opened_on_handoff: usize,
    /// From its first stream's open to its last one's close.
    pub span_us: u64,
    /// Time streams were open, summed.
    pub held_us: u64,
}

/// The connections, of `spans` as (connection, start, end), whose streams
/// queued at a limit.
pub fn limits(spans: impl Iterator<Item = (u32, u64, u64)>) -> HashMap<u32, Limit> {
    let mut by_conn: BTreeMap<u32, Vec<(u64, u64)>> = BTreeMap::new();
    for (conn, start, end) in spans.filter(|s| s.2 > s.1) {
        by_conn.entry(conn).or_default().push((start, end));
    }
    by_conn
        .into_iter()
        .filter_map(|(conn, spans)| limit(&spans).map(|l| (conn, l)))
        .collect()
}

/// Streams opened on handoffs at the most open at once, if that is a limit.
pub fn limit(spans: &[(u64, u64)]) -> Option<Limit> {
    // (time, +1 open / -1 close); closes first at one instant.
    let mut edges: Vec<(u64, i32)> = spans.iter().flat_map(|&(s, e)| [(s, 1), (e, -1)]).collect();
    edges.sort_unstable();
    let (mut open, mut most) = (0i32, 0i32);
    for &(_, step) in &edges {
        open += step;
        most = most.max(open);
    }
    let streams = usize::try_from(most).ok()?;
    if streams < MIN_STREAMS {
        return None;
    }
    // Closes at the limit, opens that reached it, and the spans between.
    let (mut full_closes, mut opens_at_limit, mut full) = (Vec::new(), Vec::new(), Vec::new());
    let mut full_since = 0;
    open = 0;
    for &(at, step) in &edges {
        if step < 0 && open == most {
            full_closes.push(at);
            if at > full_since {
                full.push((full_since, at));
            }
        }
        open += step;
        if step > 0 && open == most {
            opens_at_limit.push(at);
            full_since = at;
        }
    }
    let handoffs = opens_at_limit
        .iter()
        .filter(|&&at| on_handoff(&full_closes, 0, at))
        .count();
    let queued = handoffs >= MIN_HANDOFFS
        && handoffs as f64 >= crate::pool_queueing::QUEUED_SHARE * opens_at_limit.len() as f64;
    let opened_on_handoff = spans
        .iter()
        .filter(|s| on_handoff(&full_closes, 0, s.0))
        .count();
    let first = spans.iter().map(|s| s.0).min().unwrap_or(0);
    let last = spans.iter().map(|s| s.1).max().unwrap_or(0);
    queued.then(|| Limit {
        streams,
        handoffs,
        full_closes,
        full,
        calls: spans.len(),
        opened_on_handoff,
        span_us: last.saturating_sub(first),
        held_us: spans.iter().map(|s| s.1.saturating_sub(s.0)).sum(),
    })
}

/// A stream opening at `at` followed a close at the limit (`full_closes`,
/// sorted) after `since` and closely enough to have waited for it.
pub fn on_handoff(full_closes: &[u64], since: u64, at: u64) -> bool {
    let from = at.saturating_sub(HANDOFF_MAX_US);
    // A close at `since` is the request's own call ending: not a wait.
    let i = full_closes.partition_point(|&c| c < from || (since > 0 && c <= since));
    full_closes.get(i).is_some_and(|&c| c <= at)
}

/// The HTTP/2 connections of `t` at a stream limit, from every call on them
/// whichever request it was for.
pub fn of(t: &Timeline) -> HashMap<u32, Limit> {
    let spans = t.exchanges.iter().filter_map(|e| {
        let outbound = e.role == ExchangeRole::Outbound && e.protocol == Protocol::Http2;
        let end = e.response_last_at_us.filter(|_| outbound)?;
        Some((e.connection, e.request_first_at_us, end))
    });
    limits(spans)
}

/// Each request's waits for streams of `limits`' connections: told apart,
/// a queue per server it waited for (`RequestCalls::queued`, as for a
/// pool); not told apart, the time a connection was at its limit within
/// its wait is ambiguous too, not the service's own.
pub fn attach(limits: &HashMap<u32, Limit>, requests: &mut [RequestCalls]) {
    if limits.is_empty() {
        return;
    }
    for r in requests.iter_mut() {
        if r.told_apart() {
            let queues = queues(limits, r);
            r.queued.extend(queues);
            continue;
        }
        let (from, to) = r.waiting();
        let mut full = Vec::new();
        for l in limits.values() {
            let i = l.full.partition_point(|f| f.1 <= from);
            for &(a, b) in l.full[i..].iter().take_while(|f| f.0 < to) {
                full.push((a.max(from), b.min(to)));
            }
        }
        r.ambiguous.extend(full);
    }
}

/// One request's waits for streams, a queue per server.
fn queues(limits: &HashMap<u32, Limit>, r: &RequestCalls) -> Vec<PoolQueue> {
    let mut out = Vec::new();
    let own = || r.calls.iter().map(|c| (c.start, c.end));
    let mut ends: Vec<u64> = r.calls.iter().map(|c| c.end).collect();
    ends.sort_unstable();
    for (server, calls) in r.per_server() {
        let (mut spans, mut full, mut streams) = (Vec::new(), Vec::new(), 0);
        for c in &calls {
            let Some(limit) = limits.get(&c.exchange.connection) else {
                continue;
            };
            // Idle since arrival or since its latest call before this one ended.
            let before = ends.partition_point(|&end| end <= c.start);
            let since = before
                .checked_sub(1)
                .map_or(0, |i| ends[i])
                .max(r.inbound.request_last_at_us);
            if since >= c.start || !on_handoff(&limit.full_closes, since, c.start) {
                continue;
            }
            streams = streams.max(limit.streams);
            spans.push((since, c.start, c.exchange.id));
            let i = limit.full.partition_point(|f| f.1 <= since);
            for &(a, b) in limit.full[i..].iter().take_while(|f| f.0 < c.start) {
                full.push((a.max(since), b.min(c.start)));
            }
        }
        let window = (r.inbound.request_first_at_us, r.waiting().1);
        let idle_full =
            covered_us(own().chain(full.iter().copied()), window) - covered_us(own(), window);
        if idle_full > 0 {
            out.push(PoolQueue::new(server, streams, idle_full, spans));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request_calls::tests::{call, conn};
    use crate::testkit::exchange;

    /// Streams of `each` µs, `at_once` at a time, opening as others close.
    fn rounds(calls: u64, at_once: u64, each: u64) -> Vec<(u64, u64)> {
        (0..calls)
            .map(|i| {
                let start = (i / at_once) * each;
                (start, start + each)
            })
            .collect()
    }

    #[test]
    fn streams_in_rounds_at_a_limit_are_one() {
        let l = limit(&rounds(11, 2, 10_000)).unwrap();
        assert_eq!(l.streams, 2);
        // Rounds close together: one open per round reaches the limit again.
        assert_eq!(l.handoffs, 4);
        assert_eq!(l.full.first(), Some(&(0, 10_000)));
    }

    #[test]
    fn a_peak_of_demand_reached_once_is_no_limit() {
        // Eleven at once, then a few one at a time: most open is 11, reached once.
        let mut spans: Vec<(u64, u64)> = (0..11).map(|_| (0, 10_000)).collect();
        spans.extend((0..5).map(|i| (20_000 + i * 20_000, 30_000 + i * 20_000)));
        assert_eq!(limit(&spans), None);
        // One at a time: sequential code, not a limit.
        assert_eq!(limit(&rounds(8, 1, 5_000)), None);
    }

    #[test]
    fn opens_long_after_a_close_are_no_handoff() {
        // Two at a time, each round 50 ms after the last closed.
        let spans: Vec<(u64, u64)> = (0..10u64)
            .map(|i| {
                let start = (i / 2) * 60_000;
                (start, start + 10_000)
            })
            .collect();
        assert_eq!(limit(&spans), None);
    }

    /// Two requests over one HTTP/2 connection of 2 streams: request 0's
    /// eight calls take both streams in four rounds of 10 ms; request 1
    /// arrives at 1 ms and its one call opens as request 0's last close.
    fn shared_channel() -> Timeline {
        let mut t = Timeline {
            connections: vec![conn(0, 8080), conn(1, 8080), conn(2, 9090)],
            ..Timeline::default()
        };
        let mut inbound = |id, c, at: u64, end: u64| {
            let mut e = exchange(id, c, (at, at + 100), (end, end + 100));
            e.role = ExchangeRole::Inbound;
            t.exchanges.push(e);
        };
        inbound(0, 0, 0, 41_000);
        inbound(1, 1, 1_000, 50_000);
        let mut calls = Vec::new();
        for i in 0..8u32 {
            let start = 200 + u64::from(i / 2) * 10_000;
            calls.push(call(10 + i, 2, 0, (start, start + 10_000)));
        }
        calls.push(call(20, 2, 1, (40_250, 45_000)));
        for mut c in calls {
            c.protocol = Protocol::Http2;
            t.exchanges.push(c);
        }
        t
    }

    #[test]
    fn a_request_idle_while_others_hold_every_stream_waited_for_one() {
        let t = shared_channel();
        let limits = of(&t);
        assert_eq!(limits[&2].streams, 2, "{limits:?}");
        let r = crate::request_calls::by_request(&t);
        let q = &r[1].queued;
        assert_eq!(q.len(), 1, "{q:?}");
        // Idle from 1.1 ms (its request read) to 40.2 ms, all at the limit.
        assert_eq!((q[0].pool, q[0].waited_us), (2, 40_200 - 1_100));
        assert!(
            r[0].queued.is_empty(),
            "its own rounds are stream_queueing's"
        );
        // Its own time is its 5 ms after the call, not the wait.
        let p = crate::breakdown::parts(&r[1]);
        assert!(p.server_us < 6_000, "{p:?}");
    }

    #[test]
    fn a_requests_own_close_is_not_what_its_next_call_waited_for() {
        // One request, calls one after another on a connection that other
        // requests keep at its limit: each opens as its own previous closes.
        let full_closes = [10_000, 20_000];
        assert!(!on_handoff(&full_closes, 10_000, 10_050));
        assert!(on_handoff(&full_closes, 5_000, 10_050));
    }
}
