//! Findings as text: ranked by time lost, each with its evidence and fix.

use crate::fmt_ms;
use std::fmt::Write;
use whyslow_model::fmt_bytes;
use whyslow_model::{Evidence, Finding};

/// Evidence lines shown per finding in text; JSON has them all.
const EVIDENCE_SHOWN: usize = 3;

/// A lane's exchange ids in an evidence line: the first few and how many
/// there are, so that a line stays readable under load (--json has all).
const IDS_SHOWN: usize = 3;
/// Lanes listed in an evidence line (each names its ids' count).
const LANES_SHOWN: usize = 8;

fn lane(ids: &[u32]) -> String {
    format!("[{}]", first_few(ids, |id| format!("#{id}"), " "))
}

/// The first IDS_SHOWN of `items`, joined by `sep`, and how many there are
/// in all when that is more.
fn first_few<T>(items: &[T], show: impl Fn(&T) -> String, sep: &str) -> String {
    let shown: Vec<String> = items.iter().take(IDS_SHOWN).map(show).collect();
    match items.len() > IDS_SHOWN {
        true => format!("{} … ({} in all)", shown.join(sep), items.len()),
        false => shown.join(sep),
    }
}

pub(crate) fn evidence_line(e: &Evidence) -> String {
    match e {
        Evidence::Connection { id, client, server } => {
            format!("connection #{id} {client} → {server}")
        }
        Evidence::Packets {
            connection,
            packets,
            note,
            ..
        } => {
            let list = first_few(packets, |p| p.to_string(), ", ");
            format!("connection #{connection}, packets {list}: {note}")
        }
        Evidence::Exchange {
            id, request, note, ..
        } => format!("exchange #{id} {request}: {note}"),
        Evidence::Measurement { note, .. } => note.clone(),
        Evidence::Calls {
            inbound,
            lanes,
            note,
            ..
        } => {
            let shown: Vec<String> = lanes.iter().take(LANES_SHOWN).map(|l| lane(l)).collect();
            let more = match lanes.len().saturating_sub(LANES_SHOWN) {
                0 => String::new(),
                _ => " …".into(),
            };
            format!(
                "request #{inbound}: {note}; lanes {}{more}",
                shown.join(" ")
            )
        }
        Evidence::Queued {
            connection,
            exchange,
            request,
            ahead,
            bytes_ahead,
            waited_us,
            note,
            ..
        } => {
            format!(
                "connection #{connection}: exchange #{exchange} {request} waited {} behind {} ({} ahead): {note}",
                fmt_ms(*waited_us),
                first_few(ahead, |id| format!("#{id}"), " "),
                fmt_bytes(*bytes_ahead)
            )
        }
    }
}

pub fn text(findings: &[Finding]) -> String {
    let mut out = String::new();
    if findings.is_empty() {
        let _ = writeln!(out, "  no findings");
        return out;
    }
    for (i, f) in findings.iter().enumerate() {
        let _ = writeln!(
            out,
            "  {}. {}  ({} lost in total, {} per occurrence, {}×)",
            i + 1,
            f.kind,
            fmt_ms(f.time_lost_us),
            fmt_ms(f.time_lost_per_occurrence_us),
            f.occurrences
        );
        if f.background {
            let _ = writeln!(out, "     (background: no inbound request waited for it)");
        }
        let _ = writeln!(out, "     {}", f.summary);
        for e in f.evidence.iter().take(EVIDENCE_SHOWN) {
            let _ = writeln!(out, "     evidence: {}", evidence_line(e));
        }
        if f.evidence.len() > EVIDENCE_SHOWN {
            let _ = writeln!(out, "     … more evidence in --json");
        }
        let _ = writeln!(out, "     fix: {}", f.fix);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pool_evidence_line_stays_short_under_load() {
        // 331 calls over four lanes, as one request under load made them.
        let lanes: Vec<Vec<u32>> = (0..4u32)
            .map(|l| (0..83u32).map(|i| l * 100 + i).collect())
            .collect();
        let e = Evidence::Calls {
            facts: Default::default(),
            inbound: 7,
            server: "127.0.0.1:9090".into(),
            calls: 331,
            in_flight_max: 4,
            lanes,
            note: "331 calls".into(),
        };
        let line = evidence_line(&e);
        assert_eq!(
            line,
            "request #7: 331 calls; lanes [#0 #1 #2 … (83 in all)] [#100 #101 #102 … (83 in all)] \
             [#200 #201 #202 … (83 in all)] [#300 #301 #302 … (83 in all)]"
        );
    }

    #[test]
    fn packets_and_exchanges_ahead_are_bounded_too() {
        let packets = Evidence::Packets {
            facts: Default::default(),
            connection: 3,
            at_us: 0,
            packets: (1..=500).collect(),
            note: "retransmitted".into(),
        };
        assert_eq!(
            evidence_line(&packets),
            "connection #3, packets 1, 2, 3 … (500 in all): retransmitted"
        );
        let queued = Evidence::Queued {
            facts: Default::default(),
            connection: 1,
            exchange: 900,
            request: "GET hot:config".into(),
            ahead: (0..400).collect(),
            bytes_ahead: 1 << 20,
            waited_us: 15_000,
            note: "behind writes".into(),
        };
        let line = evidence_line(&queued);
        assert!(line.contains("behind #0 #1 #2 … (400 in all) ("), "{line}");
    }
}
