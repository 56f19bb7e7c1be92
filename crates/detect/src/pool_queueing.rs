//! `pool_queueing`: calls to one upstream waited for a free connection of a
//! client pool (case 002: 11 calls through 5 connections per host ran in
//! rounds). Two ways, added up per request: inside one inbound request, K
//! calls to one server never have more than C in flight although more are
//! still to come, and each later call starts as an earlier one ends; and,
//! under load, the request sat idle while other requests' calls held every
//! connection of the pool (`pools`). Time lost = the calls' span minus what
//! they would take with enough connections (the longest call alone), plus
//! that idle wait.

use crate::intervals::most_at_once;
use crate::request_calls::{with_calls, Call, RequestCalls};
use crate::request_findings::{self, median_of, Hit};
use crate::sentence::{count, median_of_requests, of_this_request, Sentence, REQUESTS_HIT};
use crate::thresholds::WORTH_SHARE;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use whyslow_model::{Evidence, Facts, Finding, FindingKind, Protocol, Severity};

/// Fewer calls than this are sequential_calls' case or nothing at all.
pub(crate) const MIN_CALLS: usize = 3;
/// One call at a time is sequential_calls' case: on the wire a pool of one
/// looks like code that makes its calls one after another.
pub(crate) const MIN_IN_FLIGHT: usize = 2;
/// Of the calls that started once the pool was full, at least this share
/// must start on a handoff: a few by chance do not make a queue.
pub(crate) const QUEUED_SHARE: f64 = 0.5;
/// Below a millisecond a queue is not worth a finding.
pub(crate) const MIN_TIME_LOST_US: u64 = 1_000;
/// A call of the same request waiting for the pool leaves as soon as a
/// connection comes back, unless its client is off the CPU then: a
/// runnable thread on a busy host waits a scheduler period (CFS: 6 ms ×
/// (1 + log2 CPUs), 24 ms from 8 CPUs on), and a virtual machine's stolen
/// time comes on top. 25 ms keeps one such pause in; `pools`' 10 ms bound
/// for calls of other requests stays tighter, as there a late start is as
/// likely a request that arrived late. A Python client whose whole host
/// paused 10 ms between two rounds of its pool fell outside 10 ms.
const OWN_HANDOFF_MAX_US: u64 = 25_000;
/// Calls of one request to one server that queued for a connection.
#[derive(Debug, Clone, PartialEq)]
pub struct PoolWait {
    pub server: SocketAddr,
    pub calls: usize,
    /// Most connections busy at once: the pool size seen.
    pub in_flight_max: usize,
    /// Calls that started as another one ended, with the pool full.
    pub queued: usize,
    pub time_lost_us: u64,
}

/// The queue of `calls` (one request's calls to one server, by start), if
/// any. `request_us`: the inbound request's total time.
pub fn pool_wait(calls: &[Call], request_us: u64) -> Option<PoolWait> {
    // HTTP/2 connections carry many calls at once: stream_queueing's case.
    if calls.iter().any(|c| c.exchange.protocol == Protocol::Http2) {
        return None;
    }
    let k = calls.len();
    let c = connections_busy_max(calls);
    if k < MIN_CALLS || c < MIN_IN_FLIGHT || c >= k {
        return None;
    }
    let queued = calls[c..]
        .iter()
        .filter(|call| started_on_handoff(calls, call, c))
        .count();
    if queued == 0 || (queued as f64) < QUEUED_SHARE * (k - c) as f64 {
        return None;
    }
    let first = calls.iter().map(|x| x.start).min()?;
    let last = calls.iter().map(|x| x.end).max()?;
    let longest = calls.iter().map(Call::duration_us).max()?;
    let lost = (last - first).saturating_sub(longest).min(request_us);
    let worth = lost as f64 >= WORTH_SHARE * request_us as f64;
    (lost >= MIN_TIME_LOST_US && worth).then(|| PoolWait {
        server: calls[0].server,
        calls: k,
        in_flight_max: c,
        queued,
        time_lost_us: lost,
    })
}

/// `call` started right after another call ended, and the pool was full
/// until that end: every connection was busy, then one came back. Where
/// the source knows the call did not wait (a span), it was not queued.
fn started_on_handoff(calls: &[Call], call: &Call, pool: usize) -> bool {
    if call.exchange.waited_before_sent() == Some(false) {
        return false;
    }
    calls.iter().any(|freed| {
        let handoff = freed.end <= call.start && call.start - freed.end <= OWN_HANDOFF_MAX_US;
        handoff && busy_until(calls, freed.end) >= pool
    })
}

/// Connections busy up to `at`, calls ending exactly then included.
fn busy_until(calls: &[Call], at: u64) -> usize {
    let mut busy: Vec<u32> = calls
        .iter()
        .filter(|c| c.start < at && c.end >= at)
        .map(|c| c.exchange.connection)
        .collect();
    busy.sort_unstable();
    busy.dedup();
    busy.len()
}

/// Most connections busy at once. A pool lends connections, not calls:
/// calls that overlap on one connection were pipelined on it (pgJDBC sends
/// BEGIN in the same write as the first query) and hold one.
fn connections_busy_max(calls: &[Call]) -> usize {
    let mut spans: Vec<(u32, u64, u64)> = calls
        .iter()
        .map(|c| (c.exchange.connection, c.start, c.end))
        .collect();
    spans.sort_unstable();
    let mut merged: Vec<(u64, u64)> = Vec::with_capacity(spans.len());
    let mut last_conn = None;
    for (conn, start, end) in spans {
        match merged.last_mut() {
            Some(m) if last_conn == Some(conn) && start <= m.1 => m.1 = m.1.max(end),
            _ => merged.push((start, end)),
        }
        last_conn = Some(conn);
    }
    most_at_once(merged.into_iter())
}

/// Exchange ids per connection, in start order.
pub(crate) fn lanes(calls: &[Call]) -> Vec<Vec<u32>> {
    let mut by_conn: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
    for c in calls {
        by_conn
            .entry(c.exchange.connection)
            .or_default()
            .push(c.exchange.id);
    }
    by_conn.into_values().collect()
}

/// What one request lost to one server's pool: its calls queued behind
/// each other (`PoolWait`) and behind other requests' calls (`PoolQueue`).
#[derive(Debug, Clone, Copy)]
struct Lost {
    calls: usize,
    pool: usize,
    peak_demand: usize,
    waited: usize,
    request_us: u64,
}

/// The request's loss to `server`'s pool, if worth a finding.
fn lost_to_pool(r: &RequestCalls, server: SocketAddr, calls: &[Call]) -> Option<(u64, Lost)> {
    // HTTP/2's streams queue in stream_queueing.
    if calls.iter().any(|c| c.exchange.protocol == Protocol::Http2) {
        return None;
    }
    let total = r.total_us();
    let own = pool_wait(calls, total);
    let shared = r.queued.iter().find(|q| q.server == server);
    let shared_us = shared.map_or(0, |q| q.waited_us);
    let worth = shared_us >= MIN_TIME_LOST_US && shared_us as f64 >= WORTH_SHARE * total as f64;
    if own.is_none() && !worth {
        return None;
    }
    let (own_us, own_pool, own_waited) =
        own.map_or((0, 0, 0), |w| (w.time_lost_us, w.in_flight_max, w.queued));
    let (pool, peak_demand, shared_waited) =
        shared.map_or((0, 0, 0), |q| (q.pool, q.peak_demand, q.calls));
    Some((
        (own_us + shared_us).min(total),
        Lost {
            calls: calls.len(),
            pool: pool.max(own_pool),
            peak_demand,
            waited: own_waited + shared_waited,
            request_us: total,
        },
    ))
}

/// The calls that waited for a connection, by exchange, with when their
/// request had them due: for the waterfall's queueing bars. Only where the
/// request lost enough to its pool for a finding. A call queued behind its
/// own request's calls was due when the request first called that server
/// (the calls were issued together); one queued behind other requests'
/// calls was due when its request was last idle (`pools`).
pub fn queued_calls(requests: &[RequestCalls]) -> Vec<(u32, u64)> {
    let mut out = Vec::new();
    for r in with_calls(requests) {
        for (server, calls) in r.per_server() {
            if lost_to_pool(r, server, &calls).is_none() {
                continue;
            }
            if let Some(w) = pool_wait(&calls, r.total_us()) {
                let due = calls[0].start;
                out.extend(
                    calls[w.in_flight_max..]
                        .iter()
                        .filter(|c| started_on_handoff(&calls, c, w.in_flight_max))
                        .map(|c| (c.exchange.id, due)),
                );
            }
            if let Some(q) = r.queued.iter().find(|q| q.server == server) {
                out.extend(q.waits());
            }
        }
    }
    out.sort_unstable();
    out.dedup_by_key(|w| w.0);
    out
}

/// One finding per backing server whose calls queued.
pub fn detect(requests: &[RequestCalls]) -> Vec<Finding> {
    let mut per_server: BTreeMap<SocketAddr, Vec<Hit<Lost>>> = BTreeMap::new();
    let mut callers: BTreeMap<SocketAddr, (usize, Protocol)> = BTreeMap::new();
    for r in with_calls(requests) {
        for (server, calls) in r.per_server() {
            let protocol = calls[0].exchange.protocol;
            callers.entry(server).or_insert((0, protocol)).0 += 1;
            let Some((lost, facts)) = lost_to_pool(r, server, &calls) else {
                continue;
            };
            let hits = per_server.entry(server).or_default();
            request_findings::push(hits, lost, facts, |l| {
                let lanes = lanes(&calls);
                let others = match l.peak_demand > l.pool {
                    true => format!(", at least {} calls wanting one at once", l.peak_demand),
                    false => String::new(),
                };
                let note = format!(
                    "{} calls, at most {} at a time on {} connection(s); {} of them waited for \
                     one{others}",
                    l.calls,
                    connections_busy_max(&calls),
                    lanes.len(),
                    l.waited
                );
                Evidence::Calls {
                    facts: Facts::default()
                        .with("connections", lanes.len() as f64)
                        .with("waited", l.waited as f64)
                        .with("pool", l.pool as f64)
                        .with("peak_demand", l.peak_demand as f64),
                    inbound: r.inbound.id,
                    server: server.to_string(),
                    calls: l.calls as u32,
                    in_flight_max: connections_busy_max(&calls) as u32,
                    lanes,
                    note,
                }
            });
        }
    }
    let protocol: BTreeMap<SocketAddr, Protocol> =
        callers.iter().map(|(&s, &(_, p))| (s, p)).collect();
    let callers = callers.into_iter().map(|(s, (n, _))| (s, n));
    request_findings::per_server(
        FindingKind::PoolQueueing,
        callers,
        per_server,
        |server, waits| finding(server, protocol[&server], waits),
    )
}

/// What to change where calls to `server` queue for a connection, at least
/// `enough` of them wanted at once: an HTTP client's limit per host, which
/// HTTP/2 lifts; a database or cache pool's size, or how long each request
/// holds its connection.
fn fix(server: impl std::fmt::Display, protocol: Protocol, enough: u64) -> String {
    match protocol {
        Protocol::Http1 | Protocol::Tls | Protocol::Unknown => format!(
            "let the calls run at once: raise the client's connection limit for {server} to at \
             least {enough} (pool size, connections per host), multiplex them over HTTP/2 on one \
             connection, or batch them into fewer calls"
        ),
        _ => format!(
            "raise the pool's size for {server} toward {enough} connections (HikariCP's \
             maximumPoolSize, SQLAlchemy's pool_size and max_overflow, within what the server \
             allows), hold each connection for less of the request, or batch the calls into \
             fewer"
        ),
    }
}

fn finding(server: SocketAddr, protocol: Protocol, waits: Vec<Hit<Lost>>) -> Finding {
    let calls = median_of(&waits, |f| f.calls as u64);
    let peak = waits.iter().map(|h| h.facts.peak_demand).max().unwrap_or(0);
    let facts = |waits: &[Hit<Lost>], facts: &mut Facts| {
        let pool = median_of(waits, |f| f.pool as u64);
        facts.set("calls", calls as f64);
        facts.set("connections", pool as f64);
        facts.set("request_us", median_of(waits, |f| f.request_us) as f64);
        if peak > 0 {
            facts.set("peak_demand", peak as f64);
        }
    };
    let kind = FindingKind::PoolQueueing;
    let at = (server, Some(protocol));
    request_findings::told(kind, Severity::Critical, at, waits, facts, &SENTENCE, "")
}

/// Told from the numbers alone, a window's or the whole capture's.
pub const SENTENCE: Sentence = Sentence {
    maxed: &["peak_demand"],
    fix: Some(advise),
    ..Sentence::summing(REQUESTS_HIT, tell)
};

/// The fix for as many connections as the calls wanted: those of one
/// request, or of all requests at once where more.
fn advise(f: &Finding) -> String {
    let enough = count(f, "calls").max(count(f, "peak_demand"));
    fix(&f.subject, f.protocol.unwrap_or(Protocol::Unknown), enough)
}

fn tell(f: &Finding) -> String {
    let (calls, pool) = (count(f, "calls"), count(f, "connections"));
    let peak = count(f, "peak_demand");
    let demand = match peak > pool {
        true => format!(" (at least {peak} calls wanted one at once)"),
        false => String::new(),
    };
    let (at, of) = (&f.subject, of_this_request(f));
    let median = median_of_requests(f);
    format!("{calls} calls to {at} waited for one of {pool} connections{demand}: {of} {median}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use whyslow_model::Timeline;

    crate::testkit::detect_on_requests!();
    use crate::request_calls::tests::{call, conn};
    use crate::testkit::{exchange, servers};
    use whyslow_model::Exchange;

    const L: u64 = 30_000;

    /// One inbound request whose `k` calls of `L` µs run through `pool` connections, handed on
    /// after `gap` µs.
    fn fanout(k: u32, pool: u32, gap: u64) -> Timeline {
        let mut connections = vec![conn(0, 8080)];
        connections.extend((1..=pool).map(|i| conn(i, 9090)));
        let mut exchanges: Vec<Exchange> = Vec::new();
        let mut free_at = vec![1_000u64; pool as usize];
        for i in 0..k {
            let lane = (i % pool) as usize;
            let start = free_at[lane] + if i >= pool { gap } else { 0 };
            free_at[lane] = start + L;
            exchanges.push(call(i + 1, lane as u32 + 1, 0, (start, start + L)));
        }
        let end = free_at.iter().max().unwrap() + 5_000;
        exchanges.insert(0, exchange(0, 0, (0, 100), (end, end + 100)));
        Timeline {
            connections,
            exchanges,
        }
    }

    #[test]
    fn eleven_calls_through_five_connections_queue() {
        let f = detect(&fanout(11, 5, 50));
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].kind, FindingKind::PoolQueueing);
        // Three rounds of 30 ms where one would do: ~60 ms lost.
        let lost = f[0].time_lost_per_occurrence_us;
        assert!((60_000..=60_200).contains(&lost), "{lost}");
        let Evidence::Calls {
            calls,
            in_flight_max,
            lanes,
            ..
        } = &f[0].evidence[0]
        else {
            panic!("{:?}", f[0].evidence)
        };
        assert_eq!((*calls, *in_flight_max, lanes.len()), (11, 5, 5));
        assert!(f[0]
            .summary
            .starts_with("11 calls to 127.0.0.1:9090 waited for one of 5"));
    }

    #[test]
    fn one_queued_request_among_many_that_called_freely_is_not_a_pool_too_small() {
        crate::request_calls::tests::named_past_the_request_share(fanout(11, 5, 50), detect);
    }

    #[test]
    fn the_calls_after_the_first_round_waited_since_the_request_called() {
        let t = fanout(11, 5, 50);
        let waits = queued_calls(&crate::request_calls::by_request(&t));
        let ids: Vec<u32> = waits.iter().map(|w| w.0).collect();
        assert_eq!(ids, (6..=11).collect::<Vec<_>>(), "rounds two and three");
        let first = t.exchanges[1].request_first_at_us;
        assert!(waits.iter().all(|w| w.1 == first), "{waits:?}");
        let fixed = fanout(11, 11, 50);
        assert!(queued_calls(&crate::request_calls::by_request(&fixed)).is_empty());
    }

    #[test]
    fn enough_connections_or_one_at_a_time_is_not_a_pool_queue() {
        assert!(detect(&fanout(11, 11, 50)).is_empty(), "all at once");
        assert!(
            detect(&fanout(5, 1, 50)).is_empty(),
            "sequential_calls' case"
        );
    }

    #[test]
    fn calls_that_do_not_start_as_others_end_are_not_queued() {
        // Later calls start 40 ms after a connection frees: the app was doing something else.
        assert!(detect(&fanout(11, 5, 40_000)).is_empty());
    }

    #[test]
    fn a_client_paused_between_rounds_still_queued() {
        // A busy host kept the client off the CPU for 12 ms as connections came back.
        let f = detect(&fanout(11, 5, 12_000));
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(f[0].kind, FindingKind::PoolQueueing);
    }

    #[test]
    fn calls_pipelined_on_one_connection_are_not_a_pool() {
        // pgJDBC: BEGIN and the first query in one write, both answered
        // in one segment, then each statement as the one before it is
        // answered, all on the connection the request holds.
        let mut exchanges = vec![exchange(0, 0, (0, 100), (60_000, 60_100))];
        exchanges.push(call(1, 1, 0, (1_000, 6_000)));
        exchanges.push(call(2, 1, 0, (1_000, 6_000)));
        for i in 0..9u32 {
            let start = 6_050 + u64::from(i) * 5_050;
            exchanges.push(call(i + 3, 1, 0, (start, start + 5_000)));
        }
        let t = servers(&[8080, 5432]).with(exchanges);
        assert!(detect(&t).is_empty(), "{:?}", detect(&t));
    }

    #[test]
    fn a_tiny_queue_is_not_worth_a_finding() {
        let mut t = fanout(11, 5, 50);
        // Make the inbound request long: 60 ms is under 10 % of it.
        t.exchanges[0].response_first_at_us = Some(5_000_000);
        t.exchanges[0].response_last_at_us = Some(5_000_100);
        assert!(detect(&t).is_empty());
    }

    #[test]
    fn a_database_pool_is_told_to_grow_not_to_speak_http2() {
        let server: SocketAddr = "127.0.0.1:3306".parse().unwrap();
        let sql = fix(server, Protocol::Mysql, 10);
        assert!(
            sql.contains("pool's size") && !sql.contains("HTTP/2"),
            "{sql}"
        );
        let http = fix(server, Protocol::Http1, 11);
        assert!(
            http.contains("at least 11") && http.contains("HTTP/2"),
            "{http}"
        );
    }
}
