//! From client timings alone: reused requests that wait a delayed-ACK timeout
//! longer than the first one on the connection. Linux acks the first segments
//! of a connection at once (quick-ack mode), so a Nagle × delayed-ACK stall
//! usually shows from the second request on.

use crate::thresholds::{DELAYED_ACK_MAX_US, DELAYED_ACK_MIN_US};
use whyslow_model::stats::median;
use whyslow_model::RequestPhases;

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

#[cfg(test)]
mod tests {
    use super::*;

    fn req(index: u32, reused: bool, wait_us: u64) -> RequestPhases {
        RequestPhases {
            index,
            connection: 0,
            reused,
            dns_us: 0,
            connect_us: 0,
            tls_us: 0,
            send_us: 10,
            wait_us,
            receive_us: 10,
            total_us: wait_us + 20,
            status: 200,
            http_version: "1.1".into(),
            remote: None,
            local: None,
            request_bytes: 0,
            response_header_bytes: 0,
            response_body_bytes: 0,
            content_encoding: None,
            tls: None,
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
    }

    #[test]
    fn uniform_waits_or_fresh_connections_do_not() {
        assert!(delayed_ack_signature(&[req(0, false, 400), req(1, true, 420)]).is_none());
        assert!(delayed_ack_signature(&[req(0, false, 400), req(1, false, 44_000)]).is_none());
        // A second-long stall is something else, not a delayed ACK.
        assert!(delayed_ack_signature(&[req(0, false, 400), req(1, true, 1_000_000)]).is_none());
    }
}
