//! From client timings alone: reused requests that wait a delayed-ACK timeout
//! longer than the first one on the connection. Linux acks the first segments
//! of a connection at once (quick-ack mode), so a Nagle × delayed-ACK stall
//! usually shows from the second request on.

use crate::thresholds::{DELAYED_ACK_MAX_US, DELAYED_ACK_MIN_US};
use whyslow_model::stats::median;
use whyslow_model::{fmt_ms, Evidence, Finding, FindingKind, RequestPhases, Severity};

/// What the client timings suggest, before any packet is looked at.
#[derive(Debug, Clone, PartialEq)]
pub struct DelayedAckSignature {
    /// Median wait on reused requests minus the first request's wait.
    pub extra_wait_us: u64,
    pub reused_requests: usize,
}

pub fn delayed_ack_signature(requests: &[RequestPhases]) -> Option<DelayedAckSignature> {
    let first = requests.iter().find(|r| !r.reused)?;
    let reused: Vec<u64> = requests
        .iter()
        .filter(|r| r.reused)
        .map(|r| r.wait_us + r.send_us)
        .collect();
    if reused.is_empty() {
        return None;
    }
    let n = reused.len();
    let extra = median(reused).saturating_sub(first.wait_us + first.send_us);
    (DELAYED_ACK_MIN_US..=DELAYED_ACK_MAX_US)
        .contains(&extra)
        .then_some(DelayedAckSignature {
            extra_wait_us: extra,
            reused_requests: n,
        })
}

/// The signature as a finding of `probe`, from timings alone: a suspect for
/// `diagnose` to confirm on the wire, not a proof.
pub fn delayed_ack_finding(requests: &[RequestPhases], url: &str) -> Option<Finding> {
    let sig = delayed_ack_signature(requests)?;
    Some(Finding {
        time_lost_us: sig.extra_wait_us * sig.reused_requests as u64,
        time_lost_per_occurrence_us: sig.extra_wait_us,
        occurrences: sig.reused_requests as u32,
        evidence: vec![Evidence::Measurement {
            facts: Default::default(),
            note: format!(
                "median send + wait of {} reused request(s) minus the first request's",
                sig.reused_requests
            ),
        }],
        ..Finding::new(
            FindingKind::NagleDelayedAck,
            Severity::Warning,
            format!(
                "reused requests wait {} longer than the first: the signature of Nagle × delayed \
             ACK (Linux delays ACKs 40 ms at least, other stacks 200 ms), from timings alone",
                fmt_ms(sig.extra_wait_us)
            ),
            &format!(
                "`whyslow diagnose {url}` shows it on the wire and which side splits its writes; \
             the usual fix is TCP_NODELAY or one write per message"
            ),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(index: u32, reused: bool, wait_us: u64) -> RequestPhases {
        RequestPhases {
            index,
            reused,
            send_us: 10,
            wait_us,
            receive_us: 10,
            total_us: wait_us + 20,
            status: 200,
            http_version: "1.1".into(),
            ..RequestPhases::default()
        }
    }

    #[test]
    fn reused_requests_waiting_40ms_more_match() {
        let rs = [
            req(0, false, 400),
            req(1, true, 44_000),
            req(2, true, 44_500),
            req(3, true, 43_900),
        ];
        let sig = delayed_ack_signature(&rs).unwrap();
        assert_eq!(sig.reused_requests, 3);
        assert!((43_000..45_000).contains(&sig.extra_wait_us));
        let f = delayed_ack_finding(&rs, "http://127.0.0.1:1/").unwrap();
        assert_eq!(f.kind, FindingKind::NagleDelayedAck);
        assert_eq!(f.occurrences, 3);
        assert_eq!(f.time_lost_us, 3 * sig.extra_wait_us);
        assert!(f.fix.contains("diagnose http://127.0.0.1:1/"));
    }

    #[test]
    fn uniform_waits_or_fresh_connections_do_not() {
        assert!(delayed_ack_signature(&[req(0, false, 400), req(1, true, 420)]).is_none());
        assert!(delayed_ack_finding(&[req(0, false, 400), req(1, true, 420)], "u").is_none());
        assert!(delayed_ack_signature(&[req(0, false, 400), req(1, false, 44_000)]).is_none());
        // A second-long stall is something else, not a delayed ACK.
        assert!(delayed_ack_signature(&[req(0, false, 400), req(1, true, 1_000_000)]).is_none());
    }
}
