//! `pool_queueing`: calls to one upstream waited for a free connection of a
//! client pool (case 002: 11 calls through 5 connections per host ran in
//! rounds). Inside one inbound request, K calls to one server never have
//! more than C in flight although more are still to come, and each later
//! call starts as an earlier one ends: it was waiting for that connection.
//! Time lost = the calls' span minus what they would take with enough
//! connections (the longest call alone).

use crate::request_calls::{in_flight_max, with_calls, Call, RequestCalls};
use crate::request_findings::{self, median_of, Hit};
use crate::thresholds::WORTH_SHARE;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use whyslow_model::{fmt_ms, Evidence, Facts, Finding, FindingKind, Severity};

/// Fewer calls than this are sequential_calls' case or nothing at all.
const MIN_CALLS: usize = 3;
/// One call at a time is sequential_calls' case: on the wire a pool of one
/// looks like code that makes its calls one after another.
const MIN_IN_FLIGHT: usize = 2;
/// A waiting call leaves as soon as a connection comes back: microseconds
/// on the client, one RTT later when captured at the server. 10 ms keeps
/// LAN round trips in (the same bound as Nagle's release after an ACK).
const HANDOFF_MAX_US: u64 = 10_000;
/// Of the calls that started once the pool was full, at least this share
/// must start on a handoff: a few by chance do not make a queue.
const QUEUED_SHARE: f64 = 0.5;
/// Below a millisecond a queue is not worth a finding.
const MIN_TIME_LOST_US: u64 = 1_000;
/// Calls of one request to one server that queued for a connection.
#[derive(Debug, Clone, PartialEq)]
pub struct PoolWait {
    pub server: SocketAddr,
    pub calls: usize,
    /// Most calls in flight at once: the pool size seen.
    pub in_flight_max: usize,
    /// Calls that started as another one ended, with the pool full.
    pub queued: usize,
    pub time_lost_us: u64,
}

/// The queue of `calls` (one request's calls to one server, by start), if
/// any. `request_us`: the inbound request's total time.
pub fn pool_wait(calls: &[Call], request_us: u64) -> Option<PoolWait> {
    let k = calls.len();
    let c = in_flight_max(calls);
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
/// until that end: every connection was busy, then one came back.
fn started_on_handoff(calls: &[Call], call: &Call, pool: usize) -> bool {
    calls.iter().any(|freed| {
        let handoff = freed.end <= call.start && call.start - freed.end <= HANDOFF_MAX_US;
        handoff && busy_until(calls, freed.end) >= pool
    })
}

/// Calls in flight up to `at`, those ending exactly then included.
fn busy_until(calls: &[Call], at: u64) -> usize {
    calls.iter().filter(|c| c.start < at && c.end >= at).count()
}

/// Exchange ids per connection, in start order.
fn lanes(calls: &[Call]) -> Vec<Vec<u32>> {
    let mut by_conn: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
    for c in calls {
        by_conn
            .entry(c.exchange.connection)
            .or_default()
            .push(c.exchange.id);
    }
    by_conn.into_values().collect()
}

/// One finding per backing server whose calls queued.
pub fn detect(requests: &[RequestCalls]) -> Vec<Finding> {
    let mut per_server: BTreeMap<SocketAddr, Vec<Hit<(PoolWait, u64)>>> = BTreeMap::new();
    for r in with_calls(requests) {
        for (server, calls) in r.per_server() {
            let Some(w) = pool_wait(&calls, r.total_us()) else {
                continue;
            };
            request_findings::push(
                per_server.entry(server).or_default(),
                w.time_lost_us,
                (w, r.total_us()),
                |(w, _)| {
                    let lanes = lanes(&calls);
                    let note = format!(
                    "{} calls, at most {} at a time on {} connection(s); {} of them waited for one",
                    w.calls,
                    w.in_flight_max,
                    lanes.len(),
                    w.queued
                );
                    Evidence::Calls {
                        facts: whyslow_model::Facts::default()
                            .with("connections", lanes.len() as f64)
                            .with("waited", w.queued as f64),
                        inbound: r.inbound.id,
                        server: server.to_string(),
                        calls: w.calls as u32,
                        in_flight_max: w.in_flight_max as u32,
                        lanes,
                        note,
                    }
                },
            );
        }
    }
    per_server
        .into_iter()
        .map(|(server, waits)| finding(server, waits))
        .collect()
}

fn finding(server: SocketAddr, waits: Vec<Hit<(PoolWait, u64)>>) -> Finding {
    let calls = median_of(&waits, |f| f.0.calls as u64);
    let summary = |waits: &[Hit<(PoolWait, u64)>], per, facts: &mut Facts| {
        let pool = median_of(waits, |f| f.0.in_flight_max as u64);
        let request = median_of(waits, |f| f.1);
        facts.set("calls", calls as f64);
        facts.set("connections", pool as f64);
        facts.set("request_us", request as f64);
        format!(
            "{calls} calls to {server} waited for one of {} connections: {} of this request's {} \
             (median of {} requests)",
            pool,
            fmt_ms(per),
            fmt_ms(request),
            waits.len()
        )
    };
    let fix = format!(
        "let the calls run at once: raise the client's connection limit for {server} to at least \
         {calls} (pool size, connections per host), multiplex them over HTTP/2 on one connection, \
         or batch them into fewer calls"
    );
    request_findings::finding(
        FindingKind::PoolQueueing,
        Severity::Critical,
        waits,
        summary,
        fix,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use whyslow_model::{Finding, Timeline};

    /// The detector over a hand-built timeline's requests.
    fn detect(t: &Timeline) -> Vec<Finding> {
        super::detect(&crate::request_calls::by_request(t))
    }
    use crate::request_calls::tests::{call, conn};
    use crate::testkit::exchange;
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
    fn enough_connections_or_one_at_a_time_is_not_a_pool_queue() {
        assert!(detect(&fanout(11, 11, 50)).is_empty(), "all at once");
        assert!(
            detect(&fanout(5, 1, 50)).is_empty(),
            "sequential_calls' case"
        );
    }

    #[test]
    fn calls_that_do_not_start_as_others_end_are_not_queued() {
        // Later calls start 20 ms after a connection frees: the app was doing something else.
        assert!(detect(&fanout(11, 5, 20_000)).is_empty());
    }

    #[test]
    fn a_tiny_queue_is_not_worth_a_finding() {
        let mut t = fanout(11, 5, 50);
        // Make the inbound request long: 60 ms is under 10 % of it.
        t.exchanges[0].response_first_at_us = Some(5_000_000);
        t.exchanges[0].response_last_at_us = Some(5_000_100);
        assert!(detect(&t).is_empty());
    }
}
