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

use crate::intervals::most_at_once;
use crate::request_calls::{with_calls, Call, RequestCalls};
use crate::request_findings::{self, median_of, Hit};
use crate::sentence::{count, median_of_requests, of_this_request, Sentence, REQUESTS_HIT};
use crate::thresholds::WORTH_SHARE;
use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use whyslow_model::{Evidence, Facts, Finding, FindingKind, Protocol, Severity};

// The bounds `pool_queueing` holds a pool of connections to, for the same
// reasons: fewer calls are sequential_calls' case, a few handoffs by chance
// make no queue (of a request's calls past its first round), and below a
// millisecond no queue is worth a finding.
use crate::pool_queueing::{lanes, MIN_CALLS, MIN_TIME_LOST_US, QUEUED_SHARE};
use crate::streams::{on_handoff, Limit, MIN_STREAMS};

/// The HTTP/2 connections whose streams queued at a limit, by connection,
/// as the requests' calls used them.
fn limits(requests: &[RequestCalls]) -> HashMap<u32, Limit> {
    let spans = with_calls(requests)
        .flat_map(|r| r.calls.iter())
        .filter(|c| c.exchange.protocol == Protocol::Http2)
        .map(|c| (c.exchange.connection, c.start, c.end));
    crate::streams::limits(spans).into_iter().collect()
}

/// What one request lost to one connection's stream limit.
#[derive(Debug, Clone, Copy)]
struct Lost {
    calls: usize,
    streams: usize,
    connections: usize,
    request_us: u64,
}

/// The request's loss to the stream limits of `server`'s connections: its
/// own calls queued behind each other (`own_rounds`), and its idle time
/// while other requests' calls held every stream (`streams::attach`), not
/// counting twice what lies inside its own rounds.
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
    // A pool's queue for a server this request reached over HTTP/1 or SQL
    // is pool_queueing's.
    if !calls.iter().any(|c| c.exchange.protocol == Protocol::Http2) {
        return None;
    }
    let own = own_rounds(&limited, &connections, limits);
    let total = r.total_us();
    let shared = calls
        .first()
        .and_then(|c| r.queued.iter().find(|q| q.server == c.server))
        .filter(|q| q.waited_us >= MIN_TIME_LOST_US);
    // Its own rounds' span holds every wait between them: of the shared
    // waits, only the one before its first call adds to it.
    let lost = match (own, shared) {
        (Some(own), Some(q)) => {
            let first = limited.first().map_or(0, |c| c.start);
            let before = q.spans().iter().filter(|s| s.1 <= first);
            own + before.map(|s| s.1 - s.0).max().unwrap_or(0)
        }
        (Some(own), None) => own,
        (None, q) => q.map_or(0, |q| q.waited_us),
    }
    .min(total);
    let worth = lost >= MIN_TIME_LOST_US && lost as f64 >= WORTH_SHARE * total as f64;
    let streams = connections.iter().map(|c| limits[c].streams).sum::<usize>();
    let streams = streams.max(shared.map_or(0, |q| q.pool));
    (worth && (own.is_some() || shared.is_some())).then_some((
        lost,
        Lost {
            calls: calls.len(),
            streams,
            connections: connections.len().max(1),
            request_us: total,
        },
    ))
}

/// What `limited` (one request's calls on limited connections, by start)
/// lost queued behind each other: more calls than the connections' limits
/// hold, run at once (a request that makes its calls one after another
/// waits for none of its own), those past the first round opening as
/// streams closed at the limit. Their span minus their longest call, what
/// they would take with enough streams.
fn own_rounds(limited: &[&Call], connections: &[u32], limits: &HashMap<u32, Limit>) -> Option<u64> {
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
        .filter(|c| on_handoff(&limits[&c.exchange.connection].full_closes, 0, c.start))
        .count();
    if queued == 0 || (queued as f64) < QUEUED_SHARE * (k - at_once) as f64 {
        return None;
    }
    let first = limited.iter().map(|c| c.start).min()?;
    let last = limited.iter().map(|c| c.end).max()?;
    let longest = limited.iter().map(|c| c.duration_us()).max()?;
    let lost = (last - first).saturating_sub(longest);
    (lost >= MIN_TIME_LOST_US).then_some(lost)
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
    request_findings::per_server(FindingKind::StreamQueueing, callers, per_server, finding)
}

/// What to change where calls to `server` queued for one of `streams`
/// HTTP/2 streams, `calls` of them per request where known.
pub(crate) fn fix(server: impl std::fmt::Display, streams: usize, calls: Option<u64>) -> String {
    let enough = calls.map_or(String::new(), |c| format!(" to at least {c}"));
    format!(
        "the connection to {server} carried at most {streams} streams at once: the server's \
         SETTINGS_MAX_CONCURRENT_STREAMS (grpc-go's MaxConcurrentStreams, grpcio's \
         grpc.max_concurrent_streams, nginx's http2_max_concurrent_streams) or a limit in the \
         client; raise it{enough}, spread the calls over more connections, or batch them into \
         fewer calls"
    )
}

fn finding(server: SocketAddr, hits: Vec<Hit<Lost>>) -> Finding {
    let calls = median_of(&hits, |l| l.calls as u64);
    let streams = median_of(&hits, |l| l.streams as u64);
    let facts = |hits: &[Hit<Lost>], facts: &mut Facts| {
        facts.set("calls", calls as f64);
        facts.set("streams", streams as f64);
        let connections = median_of(hits, |l| l.connections as u64);
        facts.set("connections", connections as f64);
        facts.set("request_us", median_of(hits, |l| l.request_us) as f64);
    };
    let kind = FindingKind::StreamQueueing;
    let at = (server, Some(Protocol::Http2));
    request_findings::told(kind, Severity::Critical, at, hits, facts, &SENTENCE, "")
}

/// Told from the numbers alone, a window's or the whole capture's.
pub const SENTENCE: Sentence = Sentence {
    fix: Some(advise),
    ..Sentence::summing(REQUESTS_HIT, tell)
};

fn advise(f: &Finding) -> String {
    let (streams, calls) = (count(f, "streams"), count(f, "calls"));
    fix(&f.subject, streams as usize, Some(calls))
}

fn tell(f: &Finding) -> String {
    let (calls, streams) = (count(f, "calls"), count(f, "streams"));
    let connections = count(f, "connections");
    let (of, median) = (of_this_request(f), median_of_requests(f));
    format!(
        "{calls} calls to {} waited for one of {streams} HTTP/2 streams on {connections} \
         connection(s): {of} {median}",
        f.subject
    )
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let mut named = detect(&requests);
        crate::merge::judge(&mut named);
        assert!(named.is_empty(), "{named:?}");
    }
}
