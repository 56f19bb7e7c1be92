//! `server_time`: the inbound request's time not explained by its backing
//! calls — the service's own work (case 002's HTML rendering). Named when it
//! is more than half of the request and at least 100 ms.

use crate::breakdown::parts;
use crate::calls::{by_request, median};
use crate::thresholds::{DOMINANT_SHARE, SLOW_PART_US};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use whyslow_model::{Evidence, Finding, FindingKind, Severity, Timeline};

/// Requests kept as evidence.
const MAX_EVIDENCE: usize = 20;

/// One finding per service whose own time dominated requests.
pub fn detect(t: &Timeline) -> Vec<Finding> {
    let mut slow: BTreeMap<SocketAddr, Vec<(u64, u64, bool, Evidence)>> = BTreeMap::new();
    for r in by_request(t) {
        let p = parts(&r);
        let own = p.server_us;
        if own < SLOW_PART_US || (own as f64) <= DOMINANT_SHARE * p.total_us as f64 {
            continue;
        }
        let note = format!(
            "{} of {} in the service itself, {} call(s) made",
            whyslow_model::fmt_ms(own),
            whyslow_model::fmt_ms(p.total_us),
            r.calls.len()
        );
        let evidence = Evidence::Exchange {
            id: r.inbound.id,
            request: r.inbound.request.clone(),
            note,
        };
        let with_calls = !r.calls.is_empty();
        slow.entry(r.server)
            .or_default()
            .push((own, p.total_us, with_calls, evidence));
    }
    slow.into_iter()
        .map(|(server, hits)| {
            let per = median(hits.iter().map(|h| h.0).collect());
            let total = median(hits.iter().map(|h| h.1).collect());
            let calls = if hits.iter().any(|h| h.2) {
                "not waiting for any backing call"
            } else {
                "no backing call seen"
            };
            Finding {
                kind: FindingKind::ServerTime,
                severity: Severity::Warning,
                summary: format!(
                    "{server} spent {} of the request's {} in itself, {calls} (median of {} requests)",
                    whyslow_model::fmt_ms(per),
                    whyslow_model::fmt_ms(total),
                    hits.len()
                ),
                time_lost_us: hits.iter().map(|h| h.0).sum(),
                time_lost_per_occurrence_us: per,
                occurrences: hits.len() as u32,
                evidence: hits.into_iter().take(MAX_EVIDENCE).map(|h| h.3).collect(),
                fix: "profile the service's own work on this request (rendering, serialization, CPU, \
                      locks); backing calls outside this capture (other hosts, files) also count here"
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

    #[test]
    fn own_work_beyond_the_calls_is_named() {
        let t = Timeline {
            connections: vec![conn(0, 8080), conn(1, 9090)],
            exchanges: vec![
                exchange(0, 0, (0, 100), (400_100, 400_200)),
                call(1, 1, 0, (200, 50_200)),
            ],
        };
        let f = detect(&t);
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].time_lost_per_occurrence_us, 350_000);
    }

    #[test]
    fn a_request_mostly_in_its_calls_is_not() {
        let t = Timeline {
            connections: vec![conn(0, 8080), conn(1, 9090)],
            exchanges: vec![
                exchange(0, 0, (0, 100), (400_100, 400_200)),
                call(1, 1, 0, (200, 390_000)),
            ],
        };
        assert!(detect(&t).is_empty());
    }
}
