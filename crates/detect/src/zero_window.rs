//! `zero_window`: a receiver advertised a zero window (its application stopped
//! reading) and the sender stalled until a window update reopened it.

use whyslow_model::{AckEvent, Direction, Evidence, Finding, FindingKind, Severity, Timeline};

const MAX_EVIDENCE: usize = 50;

pub fn detect(timeline: &Timeline) -> Vec<Finding> {
    let mut stalls = Vec::new();
    let mut evidence = Vec::new();
    for conn in &timeline.connections {
        for d in [Direction::ToServer, Direction::ToClient] {
            let acks: Vec<&AckEvent> = conn.acks.iter().filter(|a| a.direction == d).collect();
            let mut i = 0;
            while i < acks.len() {
                if acks[i].window != 0 {
                    i += 1;
                    continue;
                }
                let start = acks[i];
                let reopen = acks[i..].iter().find(|a| a.window > 0);
                let end = reopen.map(|a| a.at_us).unwrap_or(conn.last_at_us);
                let stall = end.saturating_sub(start.at_us);
                stalls.push(stall);
                if evidence.len() < MAX_EVIDENCE {
                    let mut packets = vec![start.packet];
                    packets.extend(reopen.map(|a| a.packet));
                    evidence.push(Evidence::Packets {
                        connection: conn.id,
                        packets,
                        at_us: start.at_us,
                        note: format!(
                            "{} advertised a zero window; {} for {:.1} ms",
                            d.sender(),
                            if reopen.is_some() {
                                "reopened after"
                            } else {
                                "still closed at the end of the capture,"
                            },
                            stall as f64 / 1000.0
                        ),
                    });
                }
                i += acks[i..]
                    .iter()
                    .position(|a| a.window > 0)
                    .unwrap_or(acks.len() - i);
            }
        }
    }
    if stalls.is_empty() {
        return Vec::new();
    }
    let total = stalls.iter().sum();
    stalls.sort_unstable();
    vec![Finding {
        kind: FindingKind::ZeroWindow,
        severity: Severity::Warning,
        summary: format!("a receiver stopped reading {} times: its window closed and the sender waited", stalls.len()),
        time_lost_us: total,
        time_lost_per_occurrence_us: stalls[stalls.len() / 2],
        occurrences: stalls.len() as u32,
        evidence,
        fix: "the receiving application reads too slowly: look at what blocks its read loop (CPU, locks, \
              a slow consumer downstream), or raise its socket receive buffer"
            .into(),
    }]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::ConnBuilder;

    #[test]
    fn measures_zero_window_until_update() {
        let mut b = ConnBuilder::new(1, 40000);
        b.data(Direction::ToClient, 1_000_000, 65535);
        b.ack(Direction::ToServer, 1_000_100, 0, false);
        b.ack(Direction::ToServer, 1_000_300, 0, false); // zero-window probe answer
        b.ack(Direction::ToServer, 1_250_100, 65535, false);
        let f = detect(&Timeline {
            connections: vec![b.conn],
            exchanges: vec![],
        });
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].occurrences, 1);
        assert_eq!(f[0].time_lost_us, 250_000);
    }

    #[test]
    fn open_windows_are_fine() {
        let mut b = ConnBuilder::new(1, 40000);
        b.ack(Direction::ToServer, 1_000_100, 1000, false);
        assert!(detect(&Timeline {
            connections: vec![b.conn],
            exchanges: vec![]
        })
        .is_empty());
    }
}
