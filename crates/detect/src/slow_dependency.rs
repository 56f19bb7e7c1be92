//! `slow_dependency`: one backing service takes most of the inbound
//! request's time: more than half of it, and at least 100 ms, on the
//! critical path (time queued for a pool's connection excluded: that is
//! pool_queueing's), in `MIN_REQUEST_SHARE` of the requests calling it.
//! Time that N+1 storms and repeated calls explain is theirs. A server whose
//! slow calls are a rare tail is periodic_stall's to name: whether the tail
//! is rare is judged over the whole capture, so that is decided there too
//! (`periodic_stall::not_slow_where_stalling`), never per window. Where
//! another host's capture holds the service's end of the calls, only its
//! own part counts: the network's is no sign of a slow service (a slow
//! link is told by the finding its calls' shape makes, sequential_calls).

use crate::breakdown::{parts, Split};
use crate::request_calls::{by_shape, with_calls, Call, RequestCalls};
use crate::request_findings::{self, quote_median, Hit};
use crate::sentence::{count, median_of_requests, Sentence, REQUESTS_HIT};
use crate::thresholds::{DOMINANT_SHARE, SLOW_PART_US};
use crate::{duplicate_calls, n_plus_one};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use whyslow_model::{fmt_ms, Facts, Finding, FindingKind, Protocol, Severity};

/// Time a request's calls to one server would not need without their N+1
/// storms and repeats: n_plus_one's and duplicate_calls' to name. A service
/// that answers each of 100 statements in 1 ms is not slow; the count is.
fn avoidable(calls: &[Call], request_us: u64) -> u64 {
    by_shape(calls)
        .values()
        .map(|c| {
            let storm = n_plus_one::storm(c, request_us).map_or(0, |s| s.time_lost_us);
            storm + duplicate_calls::repeats(c).iter().map(|r| r.1).sum::<u64>()
        })
        .sum()
}

/// What to change.
const FIX: &str = "look inside that service (its own diagnosis, slow log, EXPLAIN); cache what it \
     answers, or call it less often or off the request's path";

/// One finding per backing service that dominated requests.
pub fn detect(requests: &[RequestCalls]) -> Vec<Finding> {
    let mut slow: BTreeMap<SocketAddr, Vec<Hit<(u64, Protocol)>>> = BTreeMap::new();
    let mut callers: BTreeMap<SocketAddr, usize> = BTreeMap::new();
    // A request without calls has no backing time to dominate it.
    for r in with_calls(requests) {
        let p = parts(r);
        let per_server = r.per_server();
        for (server, (protocol, calls, us)) in p.backing {
            *callers.entry(server).or_default() += 1;
            let made = per_server.get(&server);
            let us = us.saturating_sub(made.map_or(0, |c| avoidable(c, p.total_us)));
            let network = made.and_then(|c| Split::of(c).share()).unwrap_or(0.0);
            let us = (us as f64 * (1.0 - network)) as u64;
            if us < SLOW_PART_US || (us as f64) <= DOMINANT_SHARE * p.total_us as f64 {
                continue;
            }
            request_findings::push(
                slow.entry(server).or_default(),
                us,
                (p.total_us, protocol),
                |_| {
                    r.inbound_evidence(
                        format!(
                            "{calls} call(s) to {server} held {} of {} {}",
                            fmt_ms(us),
                            fmt_ms(p.total_us),
                            r.inbound.request
                        ),
                        Facts::default()
                            .with("calls", calls as f64)
                            .with("held_us", us as f64)
                            .with("request_us", p.total_us as f64),
                    )
                },
            );
        }
    }
    let kind = FindingKind::SlowDependency;
    request_findings::per_server(kind, callers, slow, |server, hits| {
        let at = (server, Some(hits[0].facts.1));
        let facts = |hits: &[Hit<(u64, Protocol)>], facts: &mut Facts| {
            quote_median(hits, |f| f.0, "request_us", facts);
        };
        request_findings::told(kind, Severity::Warning, at, hits, facts, &SENTENCE, FIX)
    })
}

/// Told from the numbers alone, a window's or the whole capture's.
pub const SENTENCE: Sentence = Sentence::summing(REQUESTS_HIT, tell);

fn tell(f: &Finding) -> String {
    let protocol = f.protocol.map_or("?", Protocol::name);
    let per = fmt_ms(f.time_lost_per_occurrence_us);
    let request = fmt_ms(count(f, "request_us"));
    let (at, median) = (&f.subject, median_of_requests(f));
    format!("{at} ({protocol}) took {per} of the request's {request} {median}")
}

#[cfg(test)]
mod tests {
    use whyslow_model::Timeline;

    crate::testkit::detect_on_requests!();
    use crate::request_calls::tests::call;
    use crate::testkit::{exchange, servers};

    fn request_with_call(call_us: u64, request_us: u64) -> Timeline {
        servers(&[8080, 5432]).with(vec![
            exchange(0, 0, (0, 100), (request_us - 100, request_us)),
            call(1, 1, 0, (200, 200 + call_us)),
        ])
    }

    #[test]
    fn many_quick_statements_are_n_plus_one_not_a_slow_dependency() {
        // 100 statements of 1.5 ms, one per order: 150 ms of a 160 ms request.
        let mut exchanges = vec![exchange(0, 0, (0, 100), (159_900, 160_000))];
        for i in 0..100u32 {
            let at = 1_000 + i as u64 * 1_550;
            let mut c = call(i + 1, 1, 0, (at, at + 1_500));
            c.request = "SELECT * FROM items WHERE order_id = $1".into();
            c.params_digest = Some(i as u64);
            exchanges.push(c);
        }
        let t = servers(&[8080, 5432]).with(exchanges);
        assert!(detect(&t).is_empty());
    }

    #[test]
    fn a_call_the_network_took_is_no_slow_service() {
        let mut t = request_with_call(300_000, 400_000);
        // The service's end was captured too: it answered in 20 ms.
        t.exchanges[1].callee_us = Some(20_000);
        assert!(detect(&t).is_empty());
        t.exchanges[1].callee_us = Some(280_000);
        assert_eq!(detect(&t).len(), 1, "its own 280 ms are slow");
    }

    #[test]
    fn a_call_holding_most_of_a_slow_request_is_named() {
        let f = detect(&request_with_call(300_000, 400_000));
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].time_lost_per_occurrence_us, 300_000);
        assert!(f[0]
            .summary
            .starts_with("127.0.0.1:5432 (http) took 300 ms"));
    }

    #[test]
    fn over_windows_its_sentence_is_told_from_the_capture() {
        let window = |call_us, request_us| {
            super::detect(&crate::request_calls::by_request(&request_with_call(
                call_us, request_us,
            )))
        };
        let mut m = crate::merge::MergedFindings::default();
        m.add(window(300_000, 400_000));
        m.add(window(200_000, 250_000));
        m.add(window(300_000, 400_000));
        let f = m.finish();
        assert_eq!(
            f[0].summary,
            "127.0.0.1:5432 (http) took 300 ms of the request's 400 ms (median of 3 requests)"
        );
    }

    #[test]
    fn one_slow_request_among_many_quick_ones_is_not_a_slow_dependency() {
        crate::request_calls::tests::named_past_the_request_share(
            request_with_call(300_000, 400_000),
            detect,
        );
    }

    #[test]
    fn fast_or_minor_calls_are_not() {
        assert!(
            detect(&request_with_call(30_000, 40_000)).is_empty(),
            "fast"
        );
        assert!(
            detect(&request_with_call(150_000, 400_000)).is_empty(),
            "minor"
        );
    }
}
