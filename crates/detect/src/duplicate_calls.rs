//! `duplicate_calls`: the same call — one normalized shape with the same
//! parameters — repeated within one inbound request (Django Debug Toolbar's
//! "duplicated" queries; case 003's re-read of an unchanging tax rate). Any
//! protocol: SQL, Redis, memcached, HTTP. The answer could have been kept
//! from the first call: time lost = every repeat's own time, clipped to
//! what the repeats covered (they may run at once).

use crate::intervals::covered_us;
use crate::request_calls::{by_shape, with_calls, Call, RequestCalls};
use crate::request_findings::{self, median_of, Hit};
use crate::sentence::{count, place, Sentence, REQUESTS_HIT};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use whyslow_model::{fmt_ms, Facts, Finding, FindingKind, Severity, Subject};

/// Repeats of one call in one request: (calls, time lost).
pub fn repeats(calls: &[Call]) -> Vec<(usize, u64)> {
    let mut same: BTreeMap<Option<u64>, Vec<Call>> = BTreeMap::new();
    // Calls whose parameters the source did not see are not known to repeat.
    for c in calls.iter().filter(|c| !c.exchange.params_unknown) {
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

/// One finding per (server, shape) repeated with the same parameters.
/// What to change.
const FIX: &str =
    "keep the first answer for the rest of the request (memoize), or cache data that \
     rarely changes in the process";

pub fn detect(requests: &[RequestCalls]) -> Vec<Finding> {
    let mut hits: BTreeMap<(SocketAddr, String), Vec<Hit<u64>>> = BTreeMap::new();
    for r in with_calls(requests) {
        for ((server, shape), calls) in by_shape(&r.calls) {
            let reps = repeats(&calls);
            let lost: u64 = reps.iter().map(|r| r.1).sum();
            let n: usize = reps.iter().map(|r| r.0 - 1).sum();
            // No time floor: a repeat is pure waste however quick the server.
            if n == 0 {
                continue;
            }
            request_findings::push(
                hits.entry((server, shape.to_string())).or_default(),
                lost,
                n as u64,
                |_| {
                    r.inbound_evidence(
                        format!(
                            "{n} repeat(s) of an earlier identical call, {}",
                            fmt_ms(lost)
                        ),
                        Facts::of(&[("repeats", n as f64), ("lost_us", lost as f64)]),
                    )
                },
            );
        }
    }
    hits.into_iter()
        .map(|((server, shape), hits)| {
            let facts = |hits: &[Hit<u64>], _, facts: &mut Facts| {
                facts.set("repeats_per_request", median_of(hits, |n| *n) as f64);
                String::new()
            };
            let kind = FindingKind::DuplicateCalls;
            let mut f = request_findings::finding(kind, Severity::Warning, hits, facts, FIX);
            f.subject = Subject::on_server(server, shape);
            f.summary = tell(&f);
            f
        })
        .collect()
}

/// Told from the subject and numbers alone, a window's or the capture's.
pub const SENTENCE: Sentence = Sentence::summing(REQUESTS_HIT, tell);

fn tell(f: &Finding) -> String {
    format!(
        "`{}` to {} was repeated {} times per request with the same parameters: {} per \
         request (median of {} requests)",
        f.subject.what,
        place(f),
        count(f, "repeats_per_request"),
        fmt_ms(f.time_lost_per_occurrence_us),
        f.occurrences
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    crate::testkit::detect_on_requests!();
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
