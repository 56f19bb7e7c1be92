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
    let shown: Vec<String> = ids
        .iter()
        .take(IDS_SHOWN)
        .map(|id| format!("#{id}"))
        .collect();
    match ids.len() > IDS_SHOWN {
        true => format!("[{} …]", shown.join(" ")),
        false => format!("[{}]", shown.join(" ")),
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
            let list: Vec<String> = packets.iter().map(|p| p.to_string()).collect();
            format!(
                "connection #{connection}, packets {}: {note}",
                list.join(", ")
            )
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
            let ahead: Vec<String> = ahead.iter().map(|id| format!("#{id}")).collect();
            format!(
                "connection #{connection}: exchange #{exchange} {request} waited {} behind {} ({} ahead): {note}",
                fmt_ms(*waited_us),
                ahead.join(" "),
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
            "request #7: 331 calls; lanes [#0 #1 #2 …] [#100 #101 #102 …] [#200 #201 #202 …] [#300 #301 #302 …]"
        );
    }
}
