//! `tcp_retransmission`: bytes sent again. The time lost is the wait between
//! the original transmission and the retransmission; a wait at or above the
//! minimum RTO means the loss was recovered by timeout, not by fast retransmit.

use foldhash::{HashMap, HashMapExt};
use whyslow_model::{Direction, Evidence, Finding, FindingKind, Segment, Severity, Timeline};

/// Linux TCP_RTO_MIN = 200 ms (include/net/tcp.h): a retransmission after at
/// least this long was driven by the retransmission timer.
pub const RTO_MIN_US: u64 = 200_000;
const MAX_EVIDENCE: usize = 50;

/// How far back to look for the previous send of a range that was
/// repacketized (no send started at the same offset): bounds the work per segment.
const LOOKBACK: usize = 1_000;

/// Each retransmission's wait, timed from the previous send of those bytes
/// (so an RTO backoff of 200 then 400 ms counts 600 ms, not 800).
fn waits(segments: &[Segment]) -> Vec<(usize, u64)> {
    // Most connections retransmit nothing: no sends to remember.
    if !segments.iter().any(|s| s.flags.retransmission) {
        return Vec::new();
    }
    let mut last_send: HashMap<(Direction, u64), u64> = HashMap::new();
    let mut out = Vec::new();
    for (i, s) in segments.iter().enumerate() {
        if s.flags.retransmission {
            let previous = last_send
                .get(&(s.direction, s.stream_offset))
                .copied()
                .or_else(|| {
                    let from = i.saturating_sub(LOOKBACK);
                    segments[from..i]
                        .iter()
                        .rev()
                        .find(|p| covers(p, s))
                        .map(|p| p.at_us)
                });
            out.push((i, previous.map_or(0, |at| s.at_us.saturating_sub(at))));
        }
        if s.len > 0 {
            last_send.insert((s.direction, s.stream_offset), s.at_us);
        }
    }
    out
}

/// `p` carried the first byte that `re` carries again, in the same direction.
fn covers(p: &Segment, re: &Segment) -> bool {
    p.direction == re.direction
        && p.stream_offset <= re.stream_offset
        && re.stream_offset < p.stream_offset + u64::from(p.len.max(1))
}

/// What to change.
const FIX: &str = "find where packets are dropped (interface errors, full queues, policers: `ip -s link`, `nstat`); \
     retransmission timeouts cost at least 200 ms each";

pub fn detect(timeline: &Timeline) -> Vec<Finding> {
    let mut lost = Vec::new();
    let mut evidence = Vec::new();
    let mut timeouts = 0u32;
    for conn in &timeline.connections {
        for (i, wait) in waits(&conn.segments) {
            let re = &conn.segments[i];
            timeouts += u32::from(wait >= RTO_MIN_US);
            lost.push(wait);
            if evidence.len() < MAX_EVIDENCE {
                evidence.push(Evidence::Packets {
                    facts: whyslow_model::Facts::default()
                        .with("bytes", re.len as f64)
                        .with("after_us", wait as f64),
                    connection: conn.id,
                    packets: vec![re.packet],
                    at_us: re.at_us,
                    note: format!(
                        "{} resent {} bytes {:.1} ms after the previous send",
                        re.direction.sender(),
                        re.len,
                        wait as f64 / 1000.0
                    ),
                });
            }
        }
    }
    if lost.is_empty() {
        return Vec::new();
    }
    let total: u64 = lost.iter().sum();
    lost.sort_unstable();
    let summary = format!(
            "{} retransmitted segments (fast, timeout or spurious), {} of them after a timeout (≥ 200 ms)",
            lost.len(),
            timeouts
        );
    Vec::from([Finding {
        facts: whyslow_model::Facts::default()
            .with("timeouts", timeouts as f64)
            .with("rto_min_us", RTO_MIN_US as f64),
        time_lost_us: total,
        time_lost_per_occurrence_us: whyslow_model::stats::median(lost.clone()),
        occurrences: lost.len() as u32,
        evidence,
        ..Finding::new(
            FindingKind::TcpRetransmission,
            if timeouts > 0 {
                Severity::Critical
            } else {
                Severity::Warning
            },
            summary,
            FIX,
        )
    }])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::ConnBuilder;

    /// The findings on one connection that sent 100 bytes at each time
    /// given and sent them again at each of its resend times.
    fn resent(sends: &[(u64, &[u64])]) -> Vec<Finding> {
        let mut b = ConnBuilder::new(1, 40000);
        for (&(at, resends), offset) in sends.iter().zip((0..).step_by(100)) {
            b.data(Direction::ToServer, at, 100);
            for &again in resends {
                b.resend(Direction::ToServer, again, offset, 100);
            }
        }
        detect(&b.timeline())
    }

    #[test]
    fn measures_the_wait_before_each_retransmission() {
        let f = resent(&[(1_000_000, &[1_210_000]), (1_300_000, &[1_305_000])]);
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].occurrences, 2);
        assert_eq!(f[0].time_lost_us, 210_000 + 5_000);
        assert!(f[0].summary.contains("1 of them after a timeout"));
    }

    #[test]
    fn a_backoff_counts_each_wait_once() {
        let f = resent(&[(1_000_000, &[1_200_000, 1_600_000])]);
        assert_eq!(f[0].time_lost_us, 600_000, "200 ms then 400 ms");
        assert_eq!(f[0].occurrences, 2);
    }

    #[test]
    fn nothing_without_retransmissions() {
        assert!(resent(&[(1_000_000, &[])]).is_empty());
    }
}
