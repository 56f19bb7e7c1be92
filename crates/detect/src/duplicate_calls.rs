//! `duplicate_calls`: the same call — one normalized shape with the same
//! parameters — repeated within one inbound request (Django Debug Toolbar's
//! "duplicated" queries; case 003's re-read of an unchanging tax rate). Any
//! protocol: SQL, Redis, memcached, HTTP. The answer could have been kept
//! from the first call: time lost = every repeat's own time, clipped to
//! what the repeats covered (they may run at once).

use crate::calls::{by_request, covered_us, median, Call};
use crate::n_plus_one::by_shape;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use whyslow_model::{Evidence, Finding, FindingKind, Severity, Timeline};

/// Requests kept as evidence.
const MAX_EVIDENCE: usize = 20;

/// Repeats of one call in one request: (calls, time lost).
pub fn repeats(calls: &[Call]) -> Vec<(usize, u64)> {
    let mut same: BTreeMap<Option<u64>, Vec<Call>> = BTreeMap::new();
    for c in calls {
        same.entry(c.exchange.params_digest).or_default().push(*c);
    }
    same.into_values()
        .filter(|v| v.len() >= 2)
        .map(|v| {
            let again = v[1..].iter().map(|c| (c.start, c.end));
            (v.len(), covered_us(again, (0, u64::MAX)))
        })
        .collect()
}

/// Per request with repeats: (time lost, repeats, evidence).
type Hits = Vec<(u64, u64, Evidence)>;

/// One finding per (server, shape) repeated with the same parameters.
pub fn detect(t: &Timeline) -> Vec<Finding> {
    let mut hits: BTreeMap<(SocketAddr, String), Hits> = BTreeMap::new();
    for r in by_request(t) {
        for ((server, shape), calls) in by_shape(&r.calls) {
            let reps = repeats(&calls);
            let lost: u64 = reps.iter().map(|r| r.1).sum();
            let n: usize = reps.iter().map(|r| r.0 - 1).sum();
            // No time floor: a repeat is pure waste however quick the server.
            if n == 0 {
                continue;
            }
            let note = format!(
                "{n} repeat(s) of an earlier identical call, {}",
                whyslow_model::fmt_ms(lost)
            );
            let evidence = Evidence::Exchange {
                id: r.inbound.id,
                request: r.inbound.request.clone(),
                note,
            };
            hits.entry((server, shape.to_string()))
                .or_default()
                .push((lost, n as u64, evidence));
        }
    }
    hits.into_iter()
        .map(|((server, shape), hits)| {
            let per = median(hits.iter().map(|h| h.0).collect());
            let n = median(hits.iter().map(|h| h.1).collect());
            Finding {
                kind: FindingKind::DuplicateCalls,
                severity: Severity::Warning,
                summary: format!(
                    "`{shape}` to {server} was repeated {n} times per request with the same parameters: \
                     {} per request (median of {} requests)",
                    whyslow_model::fmt_ms(per),
                    hits.len()
                ),
                time_lost_us: hits.iter().map(|h| h.0).sum(),
                time_lost_per_occurrence_us: per,
                occurrences: hits.len() as u32,
                evidence: hits.into_iter().take(MAX_EVIDENCE).map(|h| h.2).collect(),
                fix: "keep the first answer for the rest of the request (memoize), or cache data that \
                      rarely changes in the process"
                    .into(),
                background: false,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::n_plus_one::tests::statements;

    #[test]
    fn the_same_call_again_is_a_duplicate() {
        // 20 reads of one tax rate: 19 repeats of ~1 ms.
        let f = detect(&statements(20, 1_000, |_| 7));
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].kind, FindingKind::DuplicateCalls);
        assert!(
            f[0].summary.contains("repeated 19 times"),
            "{}",
            f[0].summary
        );
        let lost = f[0].time_lost_per_occurrence_us;
        assert!((18_500..=19_000).contains(&lost), "{lost}");
    }

    #[test]
    fn different_parameters_are_not_duplicates() {
        assert!(detect(&statements(20, 1_000, |i| i as u64)).is_empty());
    }
}
