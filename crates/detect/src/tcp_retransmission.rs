//! `tcp_retransmission`: bytes sent again. The time lost is the wait between
//! the original transmission and the retransmission; a wait at or above the
//! minimum RTO means the loss was recovered by timeout, not by fast retransmit.

use whyslow_model::{Evidence, Finding, FindingKind, Segment, Severity, Timeline};

/// Linux TCP_RTO_MIN = 200 ms (include/net/tcp.h): a retransmission after at
/// least this long was driven by the retransmission timer.
pub const RTO_MIN_US: u64 = 200_000;
const MAX_EVIDENCE: usize = 50;

pub fn detect(timeline: &Timeline) -> Vec<Finding> {
    let mut lost = Vec::new();
    let mut evidence = Vec::new();
    let mut timeouts = 0u32;
    for conn in &timeline.connections {
        for (i, re) in conn
            .segments
            .iter()
            .enumerate()
            .filter(|(_, s)| s.flags.retransmission)
        {
            let wait = original(&conn.segments[..i], re)
                .map(|o| re.at_us.saturating_sub(o.at_us))
                .unwrap_or(0);
            timeouts += u32::from(wait >= RTO_MIN_US);
            lost.push(wait);
            if evidence.len() < MAX_EVIDENCE {
                evidence.push(Evidence::Packets {
                    connection: conn.id,
                    packets: vec![re.packet],
                    at_us: re.at_us,
                    note: format!(
                        "{} resent {} bytes after {:.1} ms",
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
    Vec::from([Finding {
        kind: FindingKind::TcpRetransmission,
        severity: if timeouts > 0 { Severity::Critical } else { Severity::Warning },
        summary: format!(
            "{} retransmitted segments, {} of them after a timeout (≥ 200 ms): packets were lost",
            lost.len(),
            timeouts
        ),
        time_lost_us: total,
        time_lost_per_occurrence_us: lost[lost.len() / 2],
        occurrences: lost.len() as u32,
        evidence,
        fix: "find where packets are dropped (interface errors, full queues, policers: `ip -s link`, `nstat`); \
              retransmission timeouts cost at least 200 ms each"
            .into(),
    }])
}

/// The first transmission of the bytes `re` carries again.
fn original<'a>(earlier: &'a [Segment], re: &Segment) -> Option<&'a Segment> {
    let same_dir = |s: &&Segment| s.direction == re.direction && !s.flags.retransmission;
    earlier.iter().filter(same_dir).find(|s| {
        s.stream_offset <= re.stream_offset
            && re.stream_offset < s.stream_offset + s.len.max(1) as u64
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::ConnBuilder;
    use whyslow_model::{Direction, SegmentFlags};

    #[test]
    fn measures_the_wait_before_each_retransmission() {
        let mut b = ConnBuilder::new(1, 40000);
        b.data(Direction::ToServer, 1_000_000, 100);
        let re = SegmentFlags {
            retransmission: true,
            ..Default::default()
        };
        b.segment(Direction::ToServer, 1_210_000, 0, 100, re);
        b.data(Direction::ToServer, 1_300_000, 100);
        b.segment(Direction::ToServer, 1_305_000, 100, 100, re);
        let f = detect(&Timeline {
            connections: vec![b.conn],
            exchanges: vec![],
        });
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].occurrences, 2);
        assert_eq!(f[0].time_lost_us, 210_000 + 5_000);
        assert!(f[0].summary.contains("1 of them after a timeout"));
    }

    #[test]
    fn nothing_without_retransmissions() {
        let mut b = ConnBuilder::new(1, 40000);
        b.data(Direction::ToServer, 1_000_000, 100);
        assert!(detect(&Timeline {
            connections: vec![b.conn],
            exchanges: vec![]
        })
        .is_empty());
    }
}
