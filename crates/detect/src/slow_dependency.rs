//! `slow_dependency`: one backing service takes most of the inbound
//! request's time: more than half of it, and at least 100 ms, on the
//! critical path (time queued for a pool's connection excluded: that is
//! pool_queueing's).

use crate::breakdown::parts;
use crate::calls::{by_request, median};
use crate::thresholds::{DOMINANT_SHARE, SLOW_PART_US};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use whyslow_model::{Evidence, Finding, FindingKind, Protocol, Severity, Timeline};

/// Requests kept as evidence.
const MAX_EVIDENCE: usize = 20;

/// One finding per backing service that dominated requests.
pub fn detect(t: &Timeline) -> Vec<Finding> {
    let mut slow: BTreeMap<SocketAddr, Vec<(u64, u64, Protocol, Evidence)>> = BTreeMap::new();
    for r in by_request(t) {
        let p = parts(&r);
        for (server, (protocol, calls, us)) in p.backing {
            if us < SLOW_PART_US || (us as f64) <= DOMINANT_SHARE * p.total_us as f64 {
                continue;
            }
            let note = format!(
                "{calls} call(s) to {server} held {} of {} {}",
                whyslow_model::fmt_ms(us),
                whyslow_model::fmt_ms(p.total_us),
                r.inbound.request
            );
            let evidence = Evidence::Exchange {
                id: r.inbound.id,
                request: r.inbound.request.clone(),
                note,
            };
            slow.entry(server)
                .or_default()
                .push((us, p.total_us, protocol, evidence));
        }
    }
    slow.into_iter()
        .map(|(server, hits)| {
            let per = median(hits.iter().map(|h| h.0).collect());
            let total = median(hits.iter().map(|h| h.1).collect());
            let protocol = hits[0].2;
            Finding {
                kind: FindingKind::SlowDependency,
                severity: Severity::Warning,
                summary: format!(
                    "{server} ({}) took {} of the request's {} (median of {} requests)",
                    protocol.name(),
                    whyslow_model::fmt_ms(per),
                    whyslow_model::fmt_ms(total),
                    hits.len()
                ),
                time_lost_us: hits.iter().map(|h| h.0).sum(),
                time_lost_per_occurrence_us: per,
                occurrences: hits.len() as u32,
                evidence: hits.into_iter().take(MAX_EVIDENCE).map(|h| h.3).collect(),
                fix: "look inside that service (its own diagnosis, slow log, EXPLAIN); cache what it \
                      answers, or call it less often or off the request's path"
                    .into(),
                background: false,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::calls::tests::{call, conn};
    use crate::testkit::exchange;

    fn request_with_call(call_us: u64, request_us: u64) -> Timeline {
        Timeline {
            connections: vec![conn(0, 8080), conn(1, 5432)],
            exchanges: vec![
                exchange(0, 0, (0, 100), (request_us - 100, request_us)),
                call(1, 1, 0, (200, 200 + call_us)),
            ],
        }
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
