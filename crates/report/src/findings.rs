//! Findings as text: ranked by time lost, each with its evidence and fix.

use crate::fmt_ms;
use std::fmt::Write;
use whyslow_model::fmt_bytes;
use whyslow_model::{Evidence, Finding};

/// Evidence lines shown per finding in text; JSON has them all.
const EVIDENCE_SHOWN: usize = 3;

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
            let lanes: Vec<String> = lanes
                .iter()
                .map(|l| {
                    let ids: Vec<String> = l.iter().map(|id| format!("#{id}")).collect();
                    format!("[{}]", ids.join(" "))
                })
                .collect();
            format!("request #{inbound}: {note}; lanes {}", lanes.join(" "))
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
