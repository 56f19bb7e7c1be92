//! `server_time`: the inbound request's time not explained by its backing
//! calls — the service's own work (case 002's HTML rendering). Named when it
//! is more than half of the request and at least 100 ms, in at least
//! `MIN_REQUEST_SHARE` (`thresholds`) of the requests whose own time is
//! known. Not known while the service opens the connections it pools
//! (warming up): eight threaded Python requests at once to a fresh
//! SQLAlchemy app sat 100–130 ms in themselves while its pool connected,
//! then 40–60 ms. Nor while the capture lost bytes on the service's
//! connections (`damaged`): its missing calls would read as its own time
//! (orm-storm with a tenth of its packets removed named 100 ms of it).

use crate::breakdown::parts;
use crate::request_calls::RequestCalls;
use crate::request_findings::{self, median_of, Hit};
use crate::sentence::{count, median_of_requests, Sentence};
use crate::thresholds::{DOMINANT_SHARE, SLOW_PART_US};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use whyslow_model::{fmt_ms, Facts, Finding, FindingKind, Severity};

/// What to change.
const FIX: &str = "profile the service's own work on this request (rendering, serialization, CPU, \
     locks); backing calls outside this capture (other hosts, files) also count here";

/// One finding per service whose own time dominated requests.
pub fn detect(requests: &[RequestCalls]) -> Vec<Finding> {
    let mut slow: BTreeMap<SocketAddr, Vec<Hit<(u64, bool)>>> = BTreeMap::new();
    let mut known: BTreeMap<SocketAddr, usize> = BTreeMap::new();
    // A request with ambiguous calls in its wait may have waited for a pool
    // or for calls not given to it, one served while the service opened a
    // pooled connection for connecting: its own time is not known.
    for r in requests
        .iter()
        .filter(|r| r.told_apart() && !r.warming && !r.damaged)
    {
        *known.entry(r.server).or_default() += 1;
        // The service's own time is part of its wait: a request that waited
        // less than the threshold (most do) cannot have spent that in itself.
        let (from, to) = r.waiting();
        if to - from < SLOW_PART_US {
            continue;
        }
        let p = parts(r);
        let own = p.server_us;
        if own < SLOW_PART_US || (own as f64) <= DOMINANT_SHARE * p.total_us as f64 {
            continue;
        }
        request_findings::push(
            slow.entry(r.server).or_default(),
            own,
            (p.total_us, !r.calls.is_empty()),
            |_| {
                r.inbound_evidence(
                    format!(
                        "{} of {} in the service itself, {} call(s) made",
                        fmt_ms(own),
                        fmt_ms(p.total_us),
                        r.calls.len()
                    ),
                    Facts::default()
                        .with("own_us", own as f64)
                        .with("request_us", p.total_us as f64)
                        .with("calls", r.calls.len() as f64),
                )
            },
        );
    }
    request_findings::per_server(FindingKind::ServerTime, known, slow, |server, hits| {
        let facts = |hits: &[Hit<(u64, bool)>], facts: &mut Facts| {
            facts.set("request_us", median_of(hits, |f| f.0) as f64);
            let with_calls = hits.iter().filter(|h| h.facts.1).count();
            facts.set("requests_with_calls", with_calls as f64);
        };
        let kind = FindingKind::ServerTime;
        request_findings::told(
            kind,
            Severity::Warning,
            (server, None),
            hits,
            facts,
            &SENTENCE,
            FIX,
        )
    })
}

/// Told from the numbers alone, a window's or the whole capture's.
pub const SENTENCE: Sentence = Sentence::summing(&["requests_hit", "requests_with_calls"], tell);

fn tell(f: &Finding) -> String {
    let calls = match count(f, "requests_with_calls") > 0 {
        true => "not waiting for any backing call",
        false => "no backing call seen",
    };
    let (per, request) = (f.time_lost_per_occurrence_us, count(f, "request_us"));
    let (per, request, median) = (fmt_ms(per), fmt_ms(request), median_of_requests(f));
    format!(
        "{} spent {per} of the request's {request} in itself, {calls} {median}",
        f.subject
    )
}

#[cfg(test)]
mod tests {
    use whyslow_model::Timeline;

    crate::testkit::detect_on_requests!();

    /// Request 0 on port 8080, 400 ms long, with these calls to port 9090.
    fn request_400_ms(calls: Vec<whyslow_model::Exchange>) -> Timeline {
        let mut exchanges = vec![exchange(0, 0, (0, 100), (400_100, 400_200))];
        exchanges.extend(calls);
        servers(&[8080, 9090]).with(exchanges)
    }
    use crate::request_calls::tests::call;
    use crate::testkit::{exchange, lose, servers};
    use whyslow_model::Direction;

    #[test]
    fn own_work_beyond_the_calls_is_named() {
        let t = request_400_ms(vec![call(1, 1, 0, (200, 50_200))]);
        let f = detect(&t);
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].time_lost_per_occurrence_us, 350_000);
    }

    #[test]
    fn one_slow_request_among_many_quick_ones_is_not_the_services_cause() {
        // Request 0 sat 350 ms in the service; twenty more answered as soon
        // as their calls did: below MIN_REQUEST_SHARE, a stall, not the cause.
        let mut t = request_400_ms(vec![call(1, 1, 0, (200, 50_200))]);
        for k in 1..=20u32 {
            let at = u64::from(k) * 1_000_000;
            t.exchanges.push(exchange(
                2 * k,
                0,
                (at, at + 100),
                (at + 200_300, at + 200_400),
            ));
            t.exchanges
                .push(call(2 * k + 1, 1, 2 * k, (at + 200, at + 200_200)));
        }
        assert!(detect(&t).is_empty());
        // The same service slow in its own code on three of them: named.
        for k in [5u32, 10, 15] {
            let at = u64::from(k) * 1_000_000;
            let e = &mut t.exchanges[2 * k as usize];
            (e.response_first_at_us, e.response_last_at_us) =
                (Some(at + 600_300), Some(at + 600_400));
        }
        assert_eq!(detect(&t).len(), 1);
    }

    #[test]
    fn a_request_served_while_a_pooled_connection_opened_is_not_judged() {
        let mut t = request_400_ms(vec![
            call(1, 1, 0, (300_000, 300_200)),
            call(2, 1, 0, (300_300, 300_500)),
        ]);
        t.connections[1].syn_at_us = Some(250_000);
        assert!(detect(&t).is_empty(), "opened during the request");
        t.connections[1].syn_at_us = Some(50);
        assert_eq!(detect(&t).len(), 1, "open before it");
        // A connection of one call (no pool): its own time is judged.
        t.connections[1].syn_at_us = Some(250_000);
        t.exchanges.pop();
        assert_eq!(detect(&t).len(), 1, "a connection per call");
    }

    #[test]
    fn a_request_while_the_capture_lost_bytes_of_its_calls_is_not_judged() {
        let mut t = request_400_ms(vec![call(1, 1, 0, (200, 50_200))]);
        lose(&mut t.connections[1], Direction::ToClient, 120_000, 500);
        assert!(detect(&t).is_empty(), "a call may be missing");
        // The same gap after the request ended damages nothing.
        t.connections[1].gaps[0].after_us = 900_000;
        assert_eq!(detect(&t).len(), 1);
    }

    #[test]
    fn a_request_mostly_in_its_calls_is_not() {
        let t = request_400_ms(vec![call(1, 1, 0, (200, 390_000))]);
        assert!(detect(&t).is_empty());
    }
}
