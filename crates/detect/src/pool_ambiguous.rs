//! `pool_queueing` (and `stream_queueing`) where the requests were not told apart: calls of many
//! requests through one client pool (a fan-out's HTTP pool at 16 clients,
//! no trace context), each call ambiguous. Per request the wait cannot be
//! measured, but the pool can be judged across all its calls: most of
//! them took a connection the moment another came back while every
//! connection was busy — they had queued for it. A request's loss is then
//! estimated from the pool's full time within its wait, less the time an
//! average request holds a connection itself (it cannot wait for the pool
//! while in a call of its own); the finding says it is an estimate.
//!
//! A request whose calls run at once (a fan-out) is in a call of its own
//! for all its wait, yet its other calls queue: there the held time says
//! nothing. Every moment the pool was full, some call queued for it (most
//! calls took a connection the moment one came back), so each such moment
//! is shared among the requests waiting on the service then; a request's
//! loss is at least its share, and the larger of the two estimates is told.
//!
//! While exactly as many requests wait on the service as the pool has
//! connections, each may hold one of its own — calls made one after another
//! hand their connection back to their own request's next call, and look
//! like handoffs from a full pool — or some hold two while others queue.
//! The wire cannot tell these apart, so that time is not counted as full.

use crate::intervals::covered_us;
use crate::pools::Pools;
use crate::request_calls::RequestCalls;
use crate::request_findings::{self, median_of, Hit};
use crate::streams::Limit;
use crate::thresholds::WORTH_SHARE;
use foldhash::HashMap;
use std::net::SocketAddr;
use whyslow_model::{fmt_ms, Facts, Finding, FindingKind, Severity, Subject, Timeline};

/// Calls a pool must have carried before its handoffs are counted: a few
/// calls on a busy pool take a returned connection by chance.
const MIN_CALLS: usize = 20;
/// Share of a pool's calls that must start on a handoff from a full pool,
/// as `pool_queueing` asks of one request's calls.
const QUEUED_SHARE: f64 = 0.5;
/// Share of the time its calls ran that every connection must have been
/// busy: a pool full only at moments is busy, not queueing. At 16 clients
/// the lab's healthy pools were full for under 0.4 ms of their runs, and
/// their keep-alive connections, reused at once, looked like handoffs;
/// the broken fan-out's pool was full for 99 % of its run.
const MIN_FULL_SHARE: f64 = 0.5;
/// Below a millisecond a request's estimated wait is not counted.
const MIN_TIME_LOST_US: u64 = 1_000;

/// What one request is estimated to have lost to one pool.
#[derive(Debug, Clone, Copy)]
struct Wait {
    full_us: u64,
    request_us: u64,
}

/// A limit every request's calls to one server shared, as the wire saw it
/// across all of them: a client pool's connections (`pool_queueing`), or
/// an HTTP/2 connection's streams (`stream_queueing`).
#[derive(Debug)]
struct Shared<'a> {
    server: SocketAddr,
    kind: FindingKind,
    size: usize,
    calls: usize,
    /// Calls that took a connection, or opened a stream, the moment another
    /// came back with the limit reached.
    handoffs: usize,
    span_us: u64,
    /// Time connections (streams) were held, summed over the calls.
    held_us: u64,
    /// When the limit was reached, disjoint, by start.
    full: &'a [(u64, u64)],
}

/// One finding per pool that queued, judged across its calls. Where
/// requests told apart name the same server's queue, the capture's
/// judgement keeps theirs (`MergedFindings::finish`): not named twice.
pub fn detect(pools: &Pools, requests: &[RequestCalls]) -> Vec<Finding> {
    let mut servers: Vec<&SocketAddr> = pools.keys().collect();
    servers.sort();
    let shared = servers.into_iter().map(|&server| {
        let pool = &pools[&server];
        Shared {
            server,
            kind: FindingKind::PoolQueueing,
            size: pool.size,
            calls: pool.calls,
            handoffs: pool.saturated_handoffs,
            span_us: pool.span_us,
            held_us: pool.held_us,
            full: pool.full(),
        }
    });
    judged(shared, requests)
}

/// The same for HTTP/2 connections at a stream limit (`streams::of`), one
/// finding per server.
pub fn detect_streams(
    limits: &HashMap<u32, Limit>,
    t: &Timeline,
    requests: &[RequestCalls],
) -> Vec<Finding> {
    // The busiest connection of each server first: one opened before a
    // reconnect may carry too few calls to judge.
    let mut conns: Vec<(&u32, &Limit)> = limits.iter().collect();
    conns.sort_by_key(|c| (std::cmp::Reverse(c.1.calls), *c.0));
    let mut seen = Vec::new();
    let shared = conns.into_iter().filter_map(|(id, l)| {
        let server = t.connections.iter().find(|c| c.id == *id)?.server;
        // One judgment per server: its busiest limited connection.
        (!seen.contains(&server)).then(|| seen.push(server))?;
        Some(Shared {
            server,
            kind: FindingKind::StreamQueueing,
            size: l.streams,
            calls: l.calls,
            handoffs: l.opened_on_handoff,
            span_us: l.span_us,
            held_us: l.held_us,
            full: &l.full,
        })
    });
    judged(shared, requests)
}

fn judged<'a>(shared: impl Iterator<Item = Shared<'a>>, requests: &[RequestCalls]) -> Vec<Finding> {
    let mut out = Vec::new();
    for pool in shared {
        let server = &pool.server;
        let queued = pool.handoffs as f64 >= QUEUED_SHARE * pool.calls as f64;
        if pool.calls < MIN_CALLS || !queued || requests.is_empty() {
            continue;
        }
        let contested = contested_full(&pool, requests);
        let contested_us: u64 = contested.iter().map(|f| f.1 - f.0).sum();
        if (contested_us as f64) < MIN_FULL_SHARE * pool.span_us as f64 {
            continue;
        }
        let held_per_request = pool.held_us / requests.len() as u64;
        let steps = in_flight(requests);
        let mut hits: Vec<Hit<Wait>> = Vec::new();
        let mut full_spans = Vec::new();
        for r in requests.iter().filter(|r| !r.told_apart()) {
            let (from, to) = r.waiting();
            full_spans.clear();
            within(&contested, from, to, &mut full_spans);
            let full_us = covered_us(full_spans.iter().copied(), (from, to));
            let lost = full_us
                .saturating_sub(held_per_request)
                .max(shared_us(&full_spans, &steps));
            let total = r.total_us();
            if lost < MIN_TIME_LOST_US || (lost as f64) < WORTH_SHARE * total as f64 {
                continue;
            }
            let wait = Wait {
                full_us,
                request_us: total,
            };
            request_findings::push(&mut hits, lost, wait, |w| {
                r.inbound_evidence(
                    format!(
                        "every {} to {server} busy for {} of its {} wait; a request holds one \
                         {} on average",
                        match pool.kind {
                            FindingKind::StreamQueueing => "stream",
                            _ => "connection",
                        },
                        fmt_ms(w.full_us),
                        fmt_ms(to - from),
                        fmt_ms(held_per_request)
                    ),
                    Facts::default()
                        .with("full_us", w.full_us as f64)
                        .with("wait_us", (to - from) as f64)
                        .with("held_per_request_us", held_per_request as f64),
                )
            });
        }
        if !hits.is_empty() {
            out.push(finding(&pool, contested_us, hits));
        }
    }
    out
}

/// When `pool` was full, less the time exactly as many requests were
/// waiting on the service as it has connections (each could hold one of
/// its own).
fn contested_full(pool: &Shared, requests: &[RequestCalls]) -> Vec<(u64, u64)> {
    let exactly: Vec<(u64, u64)> = in_flight(requests)
        .into_iter()
        .filter(|s| s.2 == pool.size)
        .map(|s| (s.0, s.1))
        .collect();
    minus(pool.full, &exactly)
}

/// How many requests were waiting on the service, as steps (from, to,
/// count) of at least one, disjoint, by start.
fn in_flight(requests: &[RequestCalls]) -> Vec<(u64, u64, usize)> {
    let mut edges: Vec<(u64, i32)> = Vec::with_capacity(requests.len() * 2);
    for (from, to) in requests.iter().map(RequestCalls::waiting) {
        if to > from {
            edges.push((from, 1));
            edges.push((to, -1));
        }
    }
    edges.sort_unstable(); // at equal times, ends (-1) come first
    let mut out = Vec::new();
    let (mut now, mut since) = (0usize, 0u64);
    for (at, step) in edges {
        if now > 0 && at > since {
            out.push((since, at, now));
        }
        now = now.saturating_add_signed(step as isize);
        since = at;
    }
    out
}

/// `spans` (disjoint, by start), each moment divided among the requests
/// in flight then (`steps`): one request's share of them.
fn shared_us(spans: &[(u64, u64)], steps: &[(u64, u64, usize)]) -> u64 {
    let mut share = 0.0;
    for &(a, b) in spans {
        let i = steps.partition_point(|s| s.1 <= a);
        for &(from, to, n) in steps[i..].iter().take_while(|s| s.0 < b) {
            share += (to.min(b) - from.max(a)) as f64 / n as f64;
        }
    }
    share as u64
}

/// `spans` less `holes`; both disjoint and by start.
fn minus(spans: &[(u64, u64)], holes: &[(u64, u64)]) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    let mut h = 0;
    for &(mut a, b) in spans {
        while h < holes.len() && holes[h].1 <= a {
            h += 1;
        }
        let mut k = h;
        while k < holes.len() && holes[k].0 < b {
            if holes[k].0 > a {
                out.push((a, holes[k].0));
            }
            a = a.max(holes[k].1);
            k += 1;
        }
        if a < b {
            out.push((a, b));
        }
    }
    out
}

/// The parts of `spans` (disjoint, by start) within [from, to], into `out`.
fn within(spans: &[(u64, u64)], from: u64, to: u64, out: &mut Vec<(u64, u64)>) {
    let i = spans.partition_point(|f| f.1 <= from);
    for &(a, b) in spans[i..].iter().take_while(|f| f.0 < to) {
        out.push((a.max(from), b.min(to)));
    }
}

/// `full_us`: the time the pool was full that counts (`contested_full`).
fn finding(pool: &Shared, full_us: u64, hits: Vec<Hit<Wait>>) -> Finding {
    let (server, size) = (pool.server, pool.size);
    let streams = pool.kind == FindingKind::StreamQueueing;
    let (unit, fact, busy, took) = match streams {
        true => ("HTTP/2 streams", "streams", "open", "opened one"),
        false => ("connections", "connections", "busy", "took one"),
    };
    let summary = |hits: &[Hit<Wait>], per, facts: &mut Facts| {
        let request = median_of(hits, |w| w.request_us);
        facts.set(fact, size as f64);
        facts.set("calls", pool.calls as f64);
        facts.set("saturated_handoffs", pool.handoffs as f64);
        facts.set("full_us", full_us as f64);
        facts.set("request_us", request as f64);
        format!(
            "calls to {server} queued for one of {size} {unit}: all {size} {busy} for {} in \
             all, and {} of {} calls {took} the moment another came back; about {} of the \
             request's {} (median of {} requests not told apart: an estimate from the time all \
             were {busy} in each wait, less a request's own hold or shared among the requests \
             waiting then)",
            fmt_ms(full_us),
            pool.handoffs,
            pool.calls,
            fmt_ms(per),
            fmt_ms(request),
            hits.len()
        )
    };
    let measure = "send trace context (traceparent) to measure each request's wait";
    let fix = match streams {
        true => format!(
            "{}; {measure}",
            crate::stream_queueing::fix(server, size, None)
        ),
        false => format!(
            "let the calls run at once: raise the client's connection limit for {server} (pool \
             size, connections per host), multiplex them over HTTP/2 on one connection, or batch \
             them into fewer calls; {measure}"
        ),
    };
    let mut f = request_findings::finding(pool.kind, Severity::Critical, hits, summary, &fix);
    f.subject = Subject::server(server);
    f
}

#[cfg(test)]
mod tests {
    use crate::request_calls::by_request_and_pools;
    use crate::request_calls::tests::ambiguous_call;
    use crate::request_calls::tests::conn;
    use crate::testkit::exchange;
    use whyslow_model::{Finding, Severity, Timeline};

    const MS: u64 = 1_000;

    /// Four requests in flight for 400 ms and a pool of two connections
    /// (10, 11) to :9090 carrying ten 20 ms calls each, `gap` apart.
    fn shared(gap: u64) -> Timeline {
        let mut t = Timeline::default();
        for c in 0..4 {
            t.connections.push(conn(c, 8080));
            t.exchanges
                .push(exchange(c, c, (0, 100), (400 * MS, 400 * MS + 100)));
        }
        t.connections.push(conn(10, 9090));
        t.connections.push(conn(11, 9090));
        let mut id = 100;
        for (connection, offset) in [(10, MS), (11, 6 * MS)] {
            for k in 0..10 {
                let start = offset + k * (20 * MS + gap);
                t.exchanges
                    .push(ambiguous_call(id, connection, (start, start + 20 * MS)));
                id += 1;
            }
        }
        t
    }

    fn detect(t: &Timeline) -> Vec<Finding> {
        let (requests, pools) = by_request_and_pools(t, &Default::default());
        super::detect(&pools, &requests)
    }

    #[test]
    fn a_pool_whose_calls_start_on_handoffs_queued_whoever_they_were_for() {
        let f = detect(&shared(100));
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(f[0].subject.to_string(), "127.0.0.1:9090");
        assert_eq!(f[0].occurrences, 4);
        // Full for about 195 ms of each wait (from 6 ms to 202 ms), less
        // the 100 ms a request holds a connection on average.
        let per = f[0].time_lost_per_occurrence_us;
        assert!((90 * MS..=100 * MS).contains(&per), "{per}");
        assert!(f[0].summary.contains("an estimate"), "{}", f[0].summary);
    }

    /// Four requests in flight for 300 ms whose calls run at once (a
    /// fan-out) on a pool of five connections busy throughout: each request
    /// holds more than one connection at a time, so its held time exceeds
    /// its wait, yet the pool was full all along; each request is given its
    /// share of that, a quarter.
    #[test]
    fn a_fan_out_sharing_a_full_pool_loses_its_share_of_the_full_time() {
        let mut t = Timeline::default();
        for c in 0..4 {
            t.connections.push(conn(c, 8080));
            t.exchanges
                .push(exchange(c, c, (0, 100), (300 * MS, 300 * MS + 100)));
        }
        let mut id = 100;
        for connection in 10..15 {
            t.connections.push(conn(connection, 9090));
            for k in 0..10 {
                let start = MS + k * (29 * MS + 100);
                t.exchanges
                    .push(ambiguous_call(id, connection, (start, start + 29 * MS)));
                id += 1;
            }
        }
        let f = detect(&t);
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(f[0].occurrences, 4);
        let per = f[0].time_lost_per_occurrence_us;
        assert!((70 * MS..=75 * MS).contains(&per), "{per}");
    }

    /// As many requests in flight as connections, each making its calls one
    /// after another on one of them: every call takes a connection back
    /// from a full pool, its own request's.
    #[test]
    fn as_many_requests_as_connections_each_on_its_own_is_not_queueing() {
        let mut t = shared(100);
        // Two of the four requests come later, quick and with no call: the
        // average request holds a connection less than the two in flight.
        for e in t.exchanges.iter_mut().filter(|e| (2..4).contains(&e.id)) {
            *e = exchange(
                e.id,
                e.connection,
                (500 * MS, 500 * MS),
                (510 * MS, 510 * MS),
            );
        }
        let f = detect(&t);
        assert!(f.is_empty(), "{f:?}");
    }

    #[test]
    fn spans_less_holes() {
        let spans = [(0, 10), (20, 30), (40, 50)];
        let holes = [(5, 8), (9, 22), (25, 26), (45, 60)];
        let got = super::minus(&spans, &holes);
        assert_eq!(got, vec![(0, 5), (8, 9), (22, 25), (26, 30), (40, 45)]);
    }

    #[test]
    fn calls_that_find_a_connection_free_did_not_queue() {
        assert!(detect(&shared(15 * MS)).is_empty());
    }

    /// `f`'s queue named from requests told apart too, on 3 of 4 requests:
    /// common enough, as far as they go.
    fn told_apart_too(f: &Finding) -> Finding {
        Finding {
            population: Some(crate::thresholds::requests_seen(3, 4)),
            subject: f.subject.clone(),
            occurrences: 3,
            ..Finding::new(f.kind, Severity::Critical, "told".into(), "")
        }
    }

    #[test]
    fn a_pool_named_from_told_apart_requests_is_not_named_twice() {
        let t = shared(100);
        let across = detect(&t);
        assert_eq!(across.len(), 1);
        // The same server's queue named from requests told apart: common
        // enough (3 of 4 requests), it is the one the capture keeps.
        let told = told_apart_too(&across[0]);
        let mut m = crate::merge::MergedFindings::default();
        m.add(vec![told.clone()]);
        m.add(across.clone());
        let kept = m.finish();
        assert_eq!(kept.len(), 1, "{kept:?}");
        assert_eq!(kept[0].population, told.population, "{kept:?}");
        // Not common enough over the capture (3 of 40): the pool judged
        // across its calls is named instead.
        let mut m = crate::merge::MergedFindings::default();
        m.add(vec![told]);
        m.add(vec![Finding::tally(
            across[0].kind,
            across[0].subject.clone(),
            crate::thresholds::requests_seen(0, 36),
        )]);
        m.add(across.clone());
        let kept = m.finish();
        assert_eq!(kept.len(), 1, "{kept:?}");
        assert_eq!(kept[0].summary, across[0].summary);
    }

    /// Measured on 1 request told apart of the 4 the pool judged across its
    /// calls: the judgement over all of them is the one told.
    #[test]
    fn a_pool_measured_on_few_of_its_requests_is_told_from_all() {
        let across = detect(&shared(100));
        let told = Finding {
            population: Some(crate::thresholds::requests_seen(1, 1)),
            occurrences: 1,
            ..told_apart_too(&across[0])
        };
        let mut m = crate::merge::MergedFindings::default();
        m.add(vec![told]);
        m.add(across.clone());
        let kept = m.finish();
        assert_eq!(kept.len(), 1, "{kept:?}");
        assert_eq!(kept[0].summary, across[0].summary);
        assert_eq!(kept[0].occurrences, 4);
    }

    /// The same calls over one HTTP/2 connection (10) that carries two
    /// streams at once: `shared`'s two lanes on one connection.
    fn one_channel(gap: u64) -> Timeline {
        let mut t = shared(gap);
        t.connections.retain(|c| c.id != 11);
        for e in t.exchanges.iter_mut().filter(|e| e.id >= 100) {
            e.connection = 10;
            e.protocol = whyslow_model::Protocol::Http2;
        }
        t
    }

    fn detect_streams(t: &Timeline) -> Vec<Finding> {
        let (requests, _) = by_request_and_pools(t, &Default::default());
        let limits = crate::streams::of(t);
        super::detect_streams(&limits, t, &requests)
    }

    #[test]
    fn every_detector_run_on_a_window_that_speaks_http2_reads_its_stream_limits() {
        let t = one_channel(100);
        let f = crate::tests::ranked(&t, &by_request_and_pools(&t, &Default::default()).0);
        let kinds: Vec<_> = f.iter().map(|f| f.kind).collect();
        assert!(
            kinds.contains(&whyslow_model::FindingKind::StreamQueueing),
            "{kinds:?}"
        );
    }

    #[test]
    fn streams_opened_on_handoffs_queued_whoever_they_were_for() {
        let t = one_channel(100);
        assert!(detect(&t).is_empty(), "one connection is no pool");
        let f = detect_streams(&t);
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(f[0].kind, whyslow_model::FindingKind::StreamQueueing);
        assert_eq!(f[0].facts.0.get("streams"), Some(&2.0), "{f:?}");
        let per = f[0].time_lost_per_occurrence_us;
        assert!((90 * MS..=100 * MS).contains(&per), "{per}");
        assert!(detect_streams(&one_channel(15 * MS)).is_empty());
        // Named from requests told apart too: the capture names it once.
        let told = told_apart_too(&f[0]);
        let mut m = crate::merge::MergedFindings::default();
        m.add(vec![told]);
        m.add(f.clone());
        assert_eq!(m.finish().len(), 1, "named once");
        // Over two windows its sentence is its own, not one told from the
        // numbers of a queue seen on requests told apart.
        let mut m = crate::merge::MergedFindings::default();
        m.add(f.clone());
        m.add(f.clone());
        let merged = m.finish();
        let own = format!("{} (the worst of the 2 windows it showed in)", f[0].summary);
        assert_eq!(merged[0].summary, own);
    }
}
