//! `stream_queueing`: calls over one HTTP/2 connection waited for a free
//! stream. A connection carries at most so many streams at once (the
//! server's SETTINGS_MAX_CONCURRENT_STREAMS, or a limit in the client); past
//! it a call opens its stream only as another closes — case 002 in HTTP/2
//! form: a gRPC server that allows 2 streams, 11 calls per page, in rounds.
//! The connection's limit is the most streams it carried at once, and it is
//! judged a limit only where streams kept opening as others closed while it
//! was reached (a peak of demand is reached once, a limit over and over).
//! Time lost per request, as for `pool_queueing`: its calls' span on the
//! server minus its longest call, what they would take with enough streams.

use crate::pools::HANDOFF_MAX_US;
use crate::request_calls::{most_at_once, with_calls, Call, RequestCalls};
use crate::request_findings::{self, median_of, Hit};
use crate::thresholds::{seen_enough, WORTH_SHARE};
use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use whyslow_model::{fmt_ms, Evidence, Facts, Finding, FindingKind, Protocol, Severity};

// The bounds `pool_queueing` holds a pool of connections to, for the same
// reasons: fewer calls are sequential_calls' case, a limit of one stream is
// code that calls one after another, a few handoffs by chance make no queue
// (of the streams that opened at the limit, and of a request's calls past
// its first round), and below a millisecond no queue is worth a finding.
use crate::pool_queueing::{
    lanes, MIN_CALLS, MIN_IN_FLIGHT as MIN_STREAMS, MIN_TIME_LOST_US, QUEUED_SHARE,
};

/// A limit shows by being reached again and again: at least this many
/// streams opened as another closed at the limit.
const MIN_HANDOFFS: usize = 3;

/// One connection's streams at their limit.
#[derive(Debug, Clone, PartialEq)]
struct Limit {
    streams: usize,
    /// Streams that opened as another closed while `streams` were open.
    handoffs: usize,
    /// When a stream closed with `streams` open, in order.
    full_closes: Vec<u64>,
}

/// The HTTP/2 connections whose streams queued at a limit, by connection.
fn limits(requests: &[RequestCalls]) -> HashMap<u32, Limit> {
    let mut by_conn: BTreeMap<u32, Vec<(u64, u64)>> = BTreeMap::new();
    for c in with_calls(requests).flat_map(|r| r.calls.iter()) {
        if c.exchange.protocol == Protocol::Http2 && c.end > c.start {
            by_conn
                .entry(c.exchange.connection)
                .or_default()
                .push((c.start, c.end));
        }
    }
    by_conn
        .into_iter()
        .filter_map(|(conn, spans)| limit(&spans).map(|l| (conn, l)))
        .collect()
}

/// Streams opened on handoffs at the most open at once, if that is a limit.
fn limit(spans: &[(u64, u64)]) -> Option<Limit> {
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
    // Closes at the limit, and opens that reached it.
    let (mut full_closes, mut opens_at_limit) = (Vec::new(), Vec::new());
    open = 0;
    for &(at, step) in &edges {
        if step < 0 && open == most {
            full_closes.push(at);
        }
        open += step;
        if step > 0 && open == most {
            opens_at_limit.push(at);
        }
    }
    let handoffs = opens_at_limit
        .iter()
        .filter(|&&at| on_handoff(&full_closes, at))
        .count();
    let queued =
        handoffs >= MIN_HANDOFFS && handoffs as f64 >= QUEUED_SHARE * opens_at_limit.len() as f64;
    queued.then_some(Limit {
        streams,
        handoffs,
        full_closes,
    })
}

/// A stream opening at `at` followed a close at the limit (`full_closes`,
/// sorted) closely enough to have waited for it.
fn on_handoff(full_closes: &[u64], at: u64) -> bool {
    let i = full_closes.partition_point(|&c| c < at.saturating_sub(HANDOFF_MAX_US));
    full_closes.get(i).is_some_and(|&c| c <= at)
}

/// What one request lost to one connection's stream limit.
#[derive(Debug, Clone, Copy)]
struct Lost {
    calls: usize,
    streams: usize,
    connections: usize,
    request_us: u64,
}

/// The request's loss to the stream limits of `server`'s connections: more
/// calls than the connections' limits hold, run at once (a request that
/// makes its calls one after another waits for none), those past the first
/// round opening as streams closed at the limit.
fn lost_to_limit(
    r: &RequestCalls,
    calls: &[Call],
    limits: &HashMap<u32, Limit>,
) -> Option<(u64, Lost)> {
    let mut limited: Vec<&Call> = calls
        .iter()
        .filter(|c| limits.contains_key(&c.exchange.connection))
        .collect();
    limited.sort_by_key(|c| c.start);
    let mut connections: Vec<u32> = limited.iter().map(|c| c.exchange.connection).collect();
    connections.sort_unstable();
    connections.dedup();
    let streams: usize = connections.iter().map(|c| limits[c].streams).sum();
    let k = limited.len();
    if k < MIN_CALLS || k <= streams {
        return None;
    }
    let at_once = most_at_once(limited.iter().map(|c| (c.start, c.end)));
    if at_once < MIN_STREAMS {
        return None;
    }
    let queued = limited[at_once.min(k)..]
        .iter()
        .filter(|c| on_handoff(&limits[&c.exchange.connection].full_closes, c.start))
        .count();
    if queued == 0 || (queued as f64) < QUEUED_SHARE * (k - at_once) as f64 {
        return None;
    }
    let first = limited.iter().map(|c| c.start).min()?;
    let last = limited.iter().map(|c| c.end).max()?;
    let longest = limited.iter().map(|c| c.duration_us()).max()?;
    let total = r.total_us();
    let lost = (last - first).saturating_sub(longest).min(total);
    let worth = lost >= MIN_TIME_LOST_US && lost as f64 >= WORTH_SHARE * total as f64;
    worth.then_some((
        lost,
        Lost {
            calls: k,
            streams,
            connections: connections.len(),
            request_us: total,
        },
    ))
}

/// One finding per backing server whose HTTP/2 calls queued for streams.
pub fn detect(requests: &[RequestCalls]) -> Vec<Finding> {
    let limits = limits(requests);
    if limits.is_empty() {
        return Vec::new();
    }
    let mut per_server: BTreeMap<SocketAddr, Vec<Hit<Lost>>> = BTreeMap::new();
    let mut callers: BTreeMap<SocketAddr, usize> = BTreeMap::new();
    for r in with_calls(requests) {
        for (server, calls) in r.per_server() {
            *callers.entry(server).or_default() += 1;
            let Some((lost, facts)) = lost_to_limit(r, &calls, &limits) else {
                continue;
            };
            let hits = per_server.entry(server).or_default();
            let limited: Vec<Call> = calls
                .iter()
                .filter(|c| limits.contains_key(&c.exchange.connection))
                .copied()
                .collect();
            request_findings::push(hits, lost, facts, |l| Evidence::Calls {
                facts: Facts::default()
                    .with("streams", l.streams as f64)
                    .with("connections", l.connections as f64),
                inbound: r.inbound.id,
                server: server.to_string(),
                calls: l.calls as u32,
                in_flight_max: l.streams as u32,
                lanes: lanes(&limited),
                note: format!(
                    "{} calls over {} HTTP/2 connection(s) that carried at most {} streams at once",
                    l.calls, l.connections, l.streams
                ),
            });
        }
    }
    per_server
        .into_iter()
        .filter(|(server, hits)| seen_enough(hits.len(), callers[server]))
        .map(|(server, hits)| finding(server, hits))
        .collect()
}

fn finding(server: SocketAddr, hits: Vec<Hit<Lost>>) -> Finding {
    let calls = median_of(&hits, |l| l.calls as u64);
    let streams = median_of(&hits, |l| l.streams as u64);
    let connections = median_of(&hits, |l| l.connections as u64);
    let summary = |hits: &[Hit<Lost>], per, facts: &mut Facts| {
        let request = median_of(hits, |l| l.request_us);
        facts.set("calls", calls as f64);
        facts.set("streams", streams as f64);
        facts.set("connections", connections as f64);
        facts.set("request_us", request as f64);
        format!(
            "{calls} calls to {server} waited for one of {streams} HTTP/2 streams on {connections} \
             connection(s): {} of this request's {} (median of {} requests)",
            fmt_ms(per),
            fmt_ms(request),
            hits.len()
        )
    };
    let fix = format!(
        "the connection carried at most {streams} streams at once: the server's \
         SETTINGS_MAX_CONCURRENT_STREAMS (grpc-go's MaxConcurrentStreams, grpcio's \
         grpc.max_concurrent_streams, nginx's http2_max_concurrent_streams) or a limit in the \
         client; raise it to at least {calls}, spread the calls over more connections, or batch \
         them into fewer calls"
    );
    let mut f = request_findings::finding(
        FindingKind::StreamQueueing,
        Severity::Critical,
        hits,
        summary,
        &fix,
    );
    f.subject = server.to_string();
    f
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Streams of `calls` µs each, `at_once` at a time, opening as others close.
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
    fn requests_that_call_one_after_another_lose_nothing_to_a_shared_channel() {
        use crate::request_calls::tests::{call, conn};
        use crate::testkit::exchange;
        use whyslow_model::{ExchangeRole, Timeline};
        // Three requests at once, each making 6 calls one after another
        // over one HTTP/2 connection: three streams open again and again.
        let mut t = Timeline {
            connections: vec![conn(0, 8080), conn(1, 9090)],
            ..Timeline::default()
        };
        for r in 0..3u32 {
            let mut inbound = exchange(100 + r, 0, (0, 0), (70_000, 70_000));
            inbound.role = ExchangeRole::Inbound;
            t.exchanges.push(inbound);
            for i in 0..6u32 {
                let start = 1_000 + u64::from(i) * 11_000 + u64::from(r) * 10;
                let mut c = call(r * 10 + i, 1, 100 + r, (start, start + 10_900));
                c.protocol = Protocol::Http2;
                t.exchanges.push(c);
            }
        }
        let requests = crate::request_calls::by_request(&t);
        assert!(detect(&requests).is_empty());
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
}
