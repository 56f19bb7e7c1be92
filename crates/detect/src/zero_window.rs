//! `zero_window`: a receiver advertised a zero window (its application stopped
//! reading) and the sender stalled until a window update reopened it.

use whyslow_model::{
    AckEvent, Connection, Direction, Evidence, Finding, FindingKind, Severity, Timeline,
};

const MAX_EVIDENCE: usize = 50;

/// One closed window: the zero-window advert, the update that reopened it
/// (None: still closed when the capture ended) and how long it stayed shut.
struct Closure<'a> {
    start: &'a AckEvent,
    reopen: Option<&'a AckEvent>,
    stall_us: u64,
}

/// Closed windows advertised by the receiver whose ACKs travel in `d`.
fn closures(conn: &Connection, d: Direction) -> Vec<Closure<'_>> {
    let mut out = Vec::new();
    let mut closed: Option<&AckEvent> = None;
    for a in conn.acks.iter().filter(|a| a.direction == d) {
        match (closed, a.window) {
            (None, 0) => closed = Some(a),
            (Some(start), w) if w > 0 => {
                out.push(Closure {
                    start,
                    reopen: Some(a),
                    stall_us: a.at_us.saturating_sub(start.at_us),
                });
                closed = None;
            }
            _ => {}
        }
    }
    // Still closed at the end: the reopening update may be among the events
    // dropped to bound memory, so only a complete record is trusted.
    if let Some(start) = closed.filter(|_| !conn.events_truncated) {
        out.push(Closure {
            start,
            reopen: None,
            stall_us: conn.last_at_us.saturating_sub(start.at_us),
        });
    }
    out
}

fn evidence(conn: &Connection, d: Direction, c: &Closure) -> Evidence {
    let state = if c.reopen.is_some() {
        "reopened after"
    } else {
        "still closed at the end of the capture,"
    };
    Evidence::Packets {
        facts: whyslow_model::Facts::default().with("stall_us", c.stall_us as f64),
        connection: conn.id,
        packets: std::iter::once(c.start.packet)
            .chain(c.reopen.map(|a| a.packet))
            .collect(),
        at_us: c.start.at_us,
        note: format!(
            "{} advertised a zero window; {state} {:.1} ms",
            d.sender(),
            c.stall_us as f64 / 1000.0
        ),
    }
}

/// What to change.
const FIX: &str =
    "the receiving application reads too slowly: look at what blocks its read loop (CPU, locks, \
     a slow consumer downstream), or raise its socket receive buffer";

pub fn detect(timeline: &Timeline) -> Vec<Finding> {
    let mut stalls = Vec::new();
    let mut evidence_list = Vec::new();
    for conn in &timeline.connections {
        for d in [Direction::ToServer, Direction::ToClient] {
            for c in closures(conn, d) {
                stalls.push(c.stall_us);
                if evidence_list.len() < MAX_EVIDENCE {
                    evidence_list.push(evidence(conn, d, &c));
                }
            }
        }
    }
    if stalls.is_empty() {
        return Vec::new();
    }
    let total = stalls.iter().sum();
    stalls.sort_unstable();
    let summary = format!(
        "a receiver stopped reading {} times: its window closed and the sender waited",
        stalls.len()
    );
    vec![Finding {
        time_lost_us: total,
        time_lost_per_occurrence_us: whyslow_model::stats::percentile(&stalls, 0.5),
        occurrences: stalls.len() as u32,
        evidence: evidence_list,
        ..Finding::new(FindingKind::ZeroWindow, Severity::Warning, summary, FIX)
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
        let f = detect(&b.timeline());
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].occurrences, 1);
        assert_eq!(f[0].time_lost_us, 250_000);
    }

    #[test]
    fn open_windows_are_fine() {
        let mut b = ConnBuilder::new(1, 40000);
        b.ack(Direction::ToServer, 1_000_100, 1000, false);
        assert!(detect(&b.timeline()).is_empty());
    }
}
