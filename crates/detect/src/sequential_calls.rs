//! `sequential_calls`: independent HTTP calls made one after another — none
//! overlaps, at least 3, and running them at once would save at least 100 ms
//! and 10 % of the request (Sentry's consecutive-HTTP and -DB rules). Only
//! HTTP calls: statements on one database connection run one at a time by
//! nature and may depend on each other.

use crate::request_calls::{issued_at_once_max, with_calls, Call, RequestCalls};
use crate::request_findings::{self, Hit};
use crate::sentence::{Sentence, REQUESTS_HIT};
use crate::thresholds::{DOMINANT_SHARE, SLOW_PART_US, WORTH_SHARE};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use whyslow_model::{fmt_ms, Facts, Finding, FindingKind, Protocol, Severity, Subject};

/// Sentry's consecutive-HTTP detector starts at 3 calls.
const MIN_CALLS: usize = 3;
fn is_http(c: &Call) -> bool {
    matches!(c.protocol(), Protocol::Http1 | Protocol::Http2)
}

/// What running one request's HTTP calls at once would save, if they ran one at a time.
pub fn saving_us(calls: &[Call], request_us: u64) -> Option<u64> {
    let http: Vec<Call> = calls.iter().copied().filter(is_http).collect();
    if http.len() < MIN_CALLS || issued_at_once_max(&http) > 1 {
        return None;
    }
    let sum: u64 = http.iter().map(Call::duration_us).sum();
    let longest = http.iter().map(Call::duration_us).max()?;
    let saving = sum - longest;
    let worth = saving as f64 >= WORTH_SHARE * request_us as f64;
    (saving >= SLOW_PART_US && worth).then_some(saving)
}

/// One finding per service whose requests made sequential calls.
/// What to change.
const FIX: &str =
    "make independent calls concurrently (async, a thread pool) with a pool that allows \
     as many connections, or over HTTP/2; if a pool of one connection serializes them, \
     raise it";

pub fn detect(requests: &[RequestCalls]) -> Vec<Finding> {
    let mut hits: BTreeMap<SocketAddr, Vec<Hit<Option<Network>>>> = BTreeMap::new();
    for r in with_calls(requests) {
        let Some(saving) = saving_us(&r.calls, r.total_us()) else {
            continue;
        };
        let http: Vec<Call> = r.calls.iter().copied().filter(is_http).collect();
        let n = http.len();
        let network = Network::of(&http);
        request_findings::push(hits.entry(r.server).or_default(), saving, network, |_| {
            r.inbound_evidence(
                format!(
                    "{n} HTTP calls one after another; at once they would take {} less",
                    fmt_ms(saving)
                ),
                Facts::of(&[("calls", n as f64), ("saving_us", saving as f64)]),
            )
        });
    }
    hits.into_iter()
        .map(|(server, hits)| {
            let quoted = |hits: &[Hit<Option<Network>>], _, facts: &mut Facts| {
                let split: Vec<Network> = hits.iter().filter_map(|h| h.facts).collect();
                if !split.is_empty() {
                    let median = |f: fn(&Network) -> f64| {
                        let mut v: Vec<f64> = split.iter().map(f).collect();
                        v.sort_by(f64::total_cmp);
                        v[v.len() / 2]
                    };
                    facts.set("network_share", median(|n| n.share));
                    facts.set("network_per_call_us", median(|n| n.per_call_us));
                }
                String::new()
            };
            let kind = FindingKind::SequentialCalls;
            let mut f = request_findings::finding(kind, Severity::Warning, hits, quoted, FIX);
            f.subject = Subject::server(server);
            f.summary = tell(&f);
            f
        })
        .collect()
}

/// Where the callee's end of the calls was captured too (another host's
/// capture): the network's share of the calls' time, and its time per call
/// (about the link's round trip for small requests and answers).
#[derive(Debug, Clone, Copy)]
struct Network {
    share: f64,
    per_call_us: f64,
}

impl Network {
    fn of(calls: &[Call]) -> Option<Network> {
        let split: Vec<(u64, u64)> = calls
            .iter()
            .filter_map(|c| Some((c.duration_us(), c.network_us()?)))
            .collect();
        let seen: u64 = split.iter().map(|s| s.0).sum();
        let network: u64 = split.iter().map(|s| s.1).sum();
        (seen > 0).then(|| Network {
            share: network as f64 / seen as f64,
            per_call_us: network as f64 / split.len() as f64,
        })
    }
}

/// Told from the subject and numbers alone, a window's or the capture's.
pub const SENTENCE: Sentence = Sentence::summing(REQUESTS_HIT, tell);

fn tell(f: &Finding) -> String {
    let share = f.facts.get("network_share");
    // Where the network took most of the calls' time, batching saves the
    // round trips that running them at once would overlap.
    let network = match share >= DOMINANT_SHARE {
        true => format!(
            "; the network took {:.0} % of these calls' time ({} a call, about the link's round \
             trip): batch them into one call, or make them at once",
            share * 100.0,
            fmt_ms(f.facts.get("network_per_call_us") as u64)
        ),
        false => String::new(),
    };
    format!(
        "requests to {} made their HTTP calls one at a time: {} per request could be saved \
         by making them at once (median of {} requests){network}",
        f.subject,
        fmt_ms(f.time_lost_per_occurrence_us),
        f.occurrences
    )
}

#[cfg(test)]
mod tests {
    use whyslow_model::Timeline;

    crate::testkit::detect_on_requests!();
    use crate::request_calls::tests::call;
    use crate::testkit::{exchange, servers};

    fn chain(n: u32, each: u64, overlap: u64) -> Timeline {
        let mut exchanges = vec![exchange(0, 0, (0, 100), (2_000_000, 2_000_100))];
        let mut at = 1_000;
        for i in 0..n {
            exchanges.push(call(i + 1, 1, 0, (at, at + each)));
            at += each - overlap;
        }
        servers(&[8080, 9090]).with(exchanges)
    }

    #[test]
    fn calls_one_after_another_are_named_with_the_saving() {
        let f = detect(&chain(4, 100_000, 0));
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].time_lost_per_occurrence_us, 300_000);
    }

    #[test]
    fn overlapping_few_or_quick_calls_are_not() {
        assert!(detect(&chain(4, 100_000, 50_000)).is_empty(), "overlap");
        assert!(detect(&chain(2, 300_000, 0)).is_empty(), "two calls");
        assert!(detect(&chain(5, 10_000, 0)).is_empty(), "40 ms to save");
    }

    #[test]
    fn calls_issued_at_once_but_sent_in_turn_by_a_full_pool_are_not() {
        let mut t = chain(4, 100_000, 0);
        for e in t.exchanges.iter_mut().skip(1) {
            e.due_at_us = Some(1_000);
        }
        assert!(detect(&t).is_empty(), "the app made them at once");
        for e in t.exchanges.iter_mut().skip(1) {
            e.due_at_us = Some(e.request_first_at_us);
        }
        assert_eq!(detect(&t).len(), 1, "each due when sent");
    }

    #[test]
    fn calls_the_network_took_say_so_with_the_round_trip() {
        let mut t = chain(4, 100_000, 0);
        // The callee's end was captured: it took 5 ms of each 100 ms call.
        for e in t.exchanges.iter_mut().skip(1) {
            e.callee_us = Some(5_000);
        }
        let f = detect(&t);
        assert_eq!(f[0].facts.get("network_per_call_us"), 95_000.0);
        assert!(
            f[0].summary.contains("the network took 95 %"),
            "{}",
            f[0].summary
        );
        // The callee's own time, most of it: nothing said of the network.
        for e in t.exchanges.iter_mut().skip(1) {
            e.callee_us = Some(90_000);
        }
        let f = detect(&t);
        assert!(!f[0].summary.contains("network"), "{}", f[0].summary);
    }
}
