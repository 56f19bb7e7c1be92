//! `large_response`: moving the response body takes most of the request's
//! time — more than half of it and at least 100 ms (case 002's 130 kB page
//! took over 100 ms after its first byte). Says how many bytes, and whether
//! they were compressed.

use crate::calls::median;
use crate::thresholds::{DOMINANT_SHARE, SLOW_PART_US};
use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use whyslow_model::{Evidence, ExchangeRole, Finding, FindingKind, Severity, Timeline};

/// Responses kept as evidence.
const MAX_EVIDENCE: usize = 20;

/// One finding per server whose responses' transfer dominated.
pub fn detect(t: &Timeline) -> Vec<Finding> {
    let server: HashMap<u32, SocketAddr> = t.connections.iter().map(|c| (c.id, c.server)).collect();
    let mut hits: BTreeMap<SocketAddr, Vec<(u64, u64, bool, Evidence)>> = BTreeMap::new();
    for e in t
        .exchanges
        .iter()
        .filter(|e| e.role == ExchangeRole::Inbound)
    {
        let (Some(first), Some(last), Some(&s)) = (
            e.response_first_at_us,
            e.response_last_at_us,
            server.get(&e.connection),
        ) else {
            continue;
        };
        let transfer = last.saturating_sub(first);
        if transfer < SLOW_PART_US || (transfer as f64) <= DOMINANT_SHARE * e.duration_us() as f64 {
            continue;
        }
        let note = format!(
            "{} bytes{} took {} after the first byte",
            e.response_bytes,
            if e.response_encoded {
                " (compressed)"
            } else {
                " (not compressed)"
            },
            whyslow_model::fmt_ms(transfer)
        );
        let evidence = Evidence::Exchange {
            id: e.id,
            request: e.request.clone(),
            note,
        };
        hits.entry(s)
            .or_default()
            .push((transfer, e.response_bytes, e.response_encoded, evidence));
    }
    hits.into_iter()
        .map(|(server, hits)| {
            let per = median(hits.iter().map(|h| h.0).collect());
            let bytes = median(hits.iter().map(|h| h.1).collect());
            let plain = hits.iter().filter(|h| !h.2).count();
            Finding {
                kind: FindingKind::LargeResponse,
                severity: Severity::Warning,
                summary: format!(
                    "responses from {server} of {bytes} bytes (median) took {per} to transfer, more than \
                     the rest of the request; {plain} of {} were not compressed",
                    hits.len(),
                    per = whyslow_model::fmt_ms(per),
                ),
                time_lost_us: hits.iter().map(|h| h.0).sum(),
                time_lost_per_occurrence_us: per,
                occurrences: hits.len() as u32,
                evidence: hits.into_iter().take(MAX_EVIDENCE).map(|h| h.3).collect(),
                fix: "send less: compress (gzip, br), paginate or trim the response; a slow reader \
                      (small receive window, slow link) also shows here"
                    .into(),
                background: false,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::calls::tests::conn;
    use crate::testkit::exchange;

    #[test]
    fn a_slow_uncompressed_body_is_named() {
        let mut e = exchange(0, 0, (0, 100), (20_000, 220_000));
        e.response_bytes = 132_653;
        let t = Timeline {
            connections: vec![conn(0, 8080)],
            exchanges: vec![e],
        };
        let f = detect(&t);
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].time_lost_per_occurrence_us, 200_000);
        assert!(f[0].summary.contains("132653 bytes"));
        assert!(f[0].summary.contains("1 of 1 were not compressed"));
    }

    #[test]
    fn a_quick_body_is_not() {
        let t = Timeline {
            connections: vec![conn(0, 8080)],
            exchanges: vec![exchange(0, 0, (0, 100), (200_000, 250_000))],
        };
        assert!(detect(&t).is_empty());
    }
}
