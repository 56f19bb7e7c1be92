//! `slow_resolver`: a resolver whose answers take long for every lookup,
//! not now and then: a resolver near its clients answers a name it holds
//! in well under a millisecond, so answers that take tens go upstream
//! each time (nothing cached, a TTL of 0) or wait in an overloaded
//! resolver's queue. Time lost: each answer's wait beyond what a near
//! resolver takes.

use crate::dns_lookups::Queries;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use whyslow_model::{fmt_ms, Evidence, Facts, Finding, FindingKind, Severity, Subject};

/// Median answer time from which a resolver is slow. A cached answer
/// from a resolver on the host or its network takes 0.05–1 ms (dnsmasq
/// and systemd-resolved on loopback: ~0.1 ms; CoreDNS in-cluster: under
/// 1 ms); 10 ms is a round trip to another region or a queue.
const SLOW_ANSWER_US: u64 = 10_000;
/// What a near resolver takes: the wait beyond it is lost.
const NEAR_ANSWER_US: u64 = 1_000;
/// Answered queries before a median means something.
const MIN_QUERIES: usize = 10;
/// Evidence queries listed: the slowest.
const EVIDENCE: usize = 5;

const FIX: &str = "put a caching resolver near the service (nscd or systemd-resolved on the \
                   host, a node-local DNS cache in Kubernetes), check the answers' TTLs, or \
                   find why the resolver is slow (its upstream, its load)";

pub fn detect(view: &Queries) -> Vec<Finding> {
    let qs = &view.all;
    let mut by_resolver: BTreeMap<SocketAddr, Vec<(u64, &whyslow_model::Exchange)>> =
        BTreeMap::new();
    for q in qs {
        if let Some(w) = q.wait_us() {
            by_resolver
                .entry(q.resolver)
                .or_default()
                .push((w, q.exchange));
        }
    }
    by_resolver
        .into_iter()
        .filter_map(|(resolver, mut waits)| {
            if waits.len() < MIN_QUERIES {
                return None;
            }
            waits.sort_by_key(|w| w.0);
            let sorted: Vec<u64> = waits.iter().map(|w| w.0).collect();
            let median = whyslow_model::stats::percentile(&sorted, 0.5);
            if median < SLOW_ANSWER_US {
                return None;
            }
            let lost: Vec<u64> = sorted
                .iter()
                .map(|w| w.saturating_sub(NEAR_ANSWER_US))
                .collect();
            let summary = format!(
                "the resolver {resolver} took {} to answer (median of {} answers; a near \
                 resolver answers in under {})",
                fmt_ms(median),
                waits.len(),
                fmt_ms(NEAR_ANSWER_US)
            );
            Some(Finding {
                subject: Subject::server(resolver),
                facts: Facts::default()
                    .with("median_answer_us", median as f64)
                    .with("answers", waits.len() as f64),
                time_lost_us: lost.iter().sum(),
                time_lost_per_occurrence_us: median.saturating_sub(NEAR_ANSWER_US),
                occurrences: waits.len() as u32,
                evidence: waits
                    .iter()
                    .rev()
                    .take(EVIDENCE)
                    .map(|(w, e)| Evidence::Exchange {
                        id: e.id,
                        request: e.request.to_string(),
                        note: format!("answered in {}", fmt_ms(*w)),
                        facts: Facts::default().with("answer_us", *w as f64),
                    })
                    .collect(),
                ..Finding::new(FindingKind::SlowResolver, Severity::Warning, summary, FIX)
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::dns_timeline;
    use whyslow_model::Timeline;

    fn detect(t: &Timeline) -> Vec<Finding> {
        super::detect(&Queries::of(t))
    }

    fn answers(wait_us: u64, n: u64) -> Timeline {
        let qs: Vec<_> = (0..n)
            .map(|i| {
                (
                    "A api.internal",
                    1_000_000 + i * 100_000,
                    Some((wait_us, "NOERROR")),
                )
            })
            .collect();
        dns_timeline(&qs)
    }

    #[test]
    fn answers_that_take_tens_of_milliseconds_are_a_slow_resolver() {
        let f = detect(&answers(25_000, 12));
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].kind, FindingKind::SlowResolver);
        assert_eq!(f[0].time_lost_per_occurrence_us, 24_000);
        assert_eq!(f[0].time_lost_us, 12 * 24_000);
    }

    #[test]
    fn a_near_resolver_or_too_few_answers_is_not() {
        assert!(detect(&answers(300, 50)).is_empty());
        assert!(detect(&answers(25_000, 5)).is_empty());
    }
}
