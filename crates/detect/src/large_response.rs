//! `large_response`: moving the response body takes most of the request's
//! time — more than half of it and at least 100 ms (case 002's 130 kB page
//! took over 100 ms after its first byte). Says how many bytes, and whether
//! they were compressed.

use crate::request_calls::RequestCalls;
use crate::request_findings::{self, quote_median, Hit};
use crate::thresholds::{DOMINANT_SHARE, SLOW_PART_US};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use whyslow_model::{fmt_ms, Facts, Finding, FindingKind, Severity};

/// A body no larger than TCP's initial congestion window (10 segments of
/// 1 460 bytes: RFC 6928, Linux's default since 2.6.39) leaves in one
/// flight: when it still took long after the first byte, the server paced
/// its writes (a long-poll, a stream of events), and its size is not why.
/// Seen on a real capture: a 252-byte long-poll answer spread over 30.9 s.
pub const ONE_FLIGHT_BYTES: u64 = 10 * 1_460;

/// What to change.
const FIX: &str = "send less: compress (gzip, br), paginate or trim the response; a slow reader \
     (small receive window, slow link) also shows here";

/// One finding per server whose responses' transfer dominated.
pub fn detect(requests: &[RequestCalls]) -> Vec<Finding> {
    let mut hits: BTreeMap<SocketAddr, Vec<Hit<(u64, bool)>>> = BTreeMap::new();
    for r in requests {
        let e = r.inbound;
        let (Some(first), Some(last)) = (e.response_first_at_us, e.response_last_at_us) else {
            continue;
        };
        let transfer = last.saturating_sub(first);
        if transfer < SLOW_PART_US
            || (transfer as f64) <= DOMINANT_SHARE * e.duration_us() as f64
            || e.response_bytes <= ONE_FLIGHT_BYTES
        {
            continue;
        }
        let compressed = if e.response_encoded {
            "compressed"
        } else {
            "not compressed"
        };
        request_findings::push(
            hits.entry(r.server).or_default(),
            transfer,
            (e.response_bytes, e.response_encoded),
            |_| {
                r.inbound_evidence(
                    format!(
                        "{} bytes ({compressed}) took {} after the first byte",
                        e.response_bytes,
                        fmt_ms(transfer)
                    ),
                    Facts::default()
                        .with("response_bytes", e.response_bytes as f64)
                        .with("transfer_us", transfer as f64),
                )
            },
        );
    }
    hits.into_iter()
        .map(|(server, hits)| finding(server, hits))
        .collect()
}

/// The finding of one server's slow transfers.
fn finding(server: SocketAddr, hits: Vec<Hit<(u64, bool)>>) -> Finding {
    let summary = |hits: &[Hit<(u64, bool)>], per, facts: &mut Facts| {
        let bytes = quote_median(hits, |f| f.0, "response_bytes", facts);
        let plain = hits.iter().filter(|h| !h.facts.1).count();
        facts.set("not_compressed", plain as f64);
        format!(
            "responses from {server} of {} bytes (median) took {} to transfer, more than \
             the rest of the request; {} of {} were not compressed",
            bytes,
            fmt_ms(per),
            plain,
            hits.len(),
        )
    };
    let (kind, severity) = (FindingKind::LargeResponse, Severity::Warning);
    request_findings::finding(kind, severity, hits, summary, FIX)
}

#[cfg(test)]
mod tests {

    crate::testkit::detect_on_requests!();

    use crate::testkit::{exchange, servers};

    #[test]
    fn a_slow_uncompressed_body_is_named() {
        let mut e = exchange(0, 0, (0, 100), (20_000, 220_000));
        e.response_bytes = 132_653;
        let t = servers(&[8080]).with(vec![e]);
        let f = detect(&t);
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].time_lost_per_occurrence_us, 200_000);
        assert!(f[0].summary.contains("132653 bytes"));
        assert!(f[0].summary.contains("1 of 1 were not compressed"));
    }

    #[test]
    fn a_long_poll_is_not_a_large_response() {
        // 252 bytes answered over 30.9 s: the server paced its writes.
        let mut e = exchange(0, 0, (0, 100), (1_000, 30_900_000));
        e.response_bytes = 252;
        let t = servers(&[8080]).with(vec![e.clone()]);
        assert!(detect(&t).is_empty());
        // The same time for a body several flights long is its size's.
        e.response_bytes = 4 * super::ONE_FLIGHT_BYTES;
        let t = servers(&[8080]).with(vec![e]);
        assert_eq!(detect(&t).len(), 1);
    }

    #[test]
    fn a_quick_body_is_not() {
        let t = servers(&[8080]).with(vec![exchange(0, 0, (0, 100), (200_000, 250_000))]);
        assert!(detect(&t).is_empty());
    }
}
