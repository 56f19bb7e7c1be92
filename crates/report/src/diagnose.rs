//! The text of `diagnose`: the typical request, the client write patterns,
//! the load phase, the capture, where the time went and the findings.

use crate::{breakdown, findings, fmt_ms, sql_summary, timeline};
use std::fmt::Write;
use whyslow_model::stats::nearest_rank;
use whyslow_model::{CaptureInfo, DiagnoseDocument, Report, RequestPhases, Timeline};
use whyslow_model::{AS_GIVEN, SPLIT_NO_NODELAY};

/// The median reused request of a section (by total), as the typical one;
/// every request when none was reused.
pub fn typical(requests: &[RequestPhases]) -> Option<&RequestPhases> {
    let mut pick: Vec<&RequestPhases> = requests.iter().filter(|r| r.reused).collect();
    if pick.is_empty() {
        pick = requests.iter().collect();
    }
    pick.sort_by_key(|r| r.total_us);
    pick.get(nearest_rank(pick.len(), 0.5)).copied()
}

/// Median total of the reused requests of a section.
pub fn median_reused_total(report: &Report, label: &str) -> Option<u64> {
    let v: Vec<u64> = report
        .section(label)?
        .iter()
        .filter(|r| r.reused)
        .map(|r| r.total_us)
        .collect();
    (!v.is_empty()).then(|| whyslow_model::stats::median(v))
}

pub fn text(doc: &DiagnoseDocument) -> String {
    let r = &doc.report;
    let mut out = format!(
        "diagnose {} {}\n",
        doc.method,
        r.target.as_deref().unwrap_or("")
    );
    typical_text(&mut out, r);
    patterns_text(&mut out, doc);
    if let Some(l) = &doc.load {
        out.push_str("\nload phase:\n");
        out.push_str(&crate::load::summary(l));
    }
    if let Some(c) = &doc.live_capture {
        capture_text(&mut out, c);
        if let Some(s) = &r.capture {
            backing_text(&mut out, &union(&c.backing_ports, &s.backing_ports));
            let none = Timeline::default();
            out.push_str(&timeline::capture_summary(
                s,
                r.timeline.as_ref().unwrap_or(&none),
            ));
        }
        out.push_str(&breakdown::text(&r.time_breakdown));
        out.push_str(&sql_summary::text(&r.sql_summary));
        out.push_str("\nfindings, most time lost first:\n");
        out.push_str(&findings::text(&r.findings));
    }
    for s in &r.skipped {
        let _ = writeln!(out, "not examined: {}: {}", s.what, s.why);
    }
    for e in &r.errors {
        let _ = writeln!(out, "error: {e}");
    }
    out
}

/// The phases of the median reused request, and what a new connection adds.
fn typical_text(out: &mut String, r: &Report) {
    let Some(requests) = r.sections.first().map(|s| s.requests.as_slice()) else {
        return;
    };
    let Some(t) = typical(requests) else {
        return;
    };
    let _ = writeln!(
        out,
        "\nwhere the time of a typical request went (median of {} on a reused connection):",
        requests.len()
    );
    let _ = writeln!(
        out,
        "  send {} | wait (server) {} | receive {} | total {}",
        fmt_ms(t.send_us),
        fmt_ms(t.wait_us),
        fmt_ms(t.receive_us),
        fmt_ms(t.total_us)
    );
    if let Some(first) = requests.iter().find(|r| !r.reused) {
        let tls = first
            .tls
            .as_ref()
            .map(|_| format!(" + tls {}", fmt_ms(first.tls_us)))
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "  a new connection adds dns {} + connect {}{tls} (first request: {})",
            fmt_ms(first.dns_us),
            fmt_ms(first.connect_us),
            fmt_ms(first.total_us)
        );
    }
}

fn capture_text(out: &mut String, c: &CaptureInfo) {
    let list = |ports: &[u16]| {
        ports
            .iter()
            .map(|p| p.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let filter = if c.ports.is_empty() {
        "all TCP".to_string()
    } else {
        format!("ports {}", list(&c.ports))
    };
    let saved = c
        .file
        .as_ref()
        .map(|f| format!(", saved to {f}"))
        .unwrap_or_default();
    let _ = writeln!(
        out,
        "\ncapture: {} packets on {} ({filter}), {} dropped by the kernel{saved}",
        c.packets, c.iface, c.kernel_drops
    );
}

/// Ports in either list, once each, in order.
fn union(a: &[u16], b: &[u16]) -> Vec<u16> {
    let mut all: Vec<u16> = a.iter().chain(b).copied().collect();
    all.sort_unstable();
    all.dedup();
    all
}

fn backing_text(out: &mut String, backing: &[u16]) {
    if !backing.is_empty() {
        let ports: Vec<String> = backing.iter().map(|p| p.to_string()).collect();
        let _ = writeln!(
            out,
            "  backing services of the target on this host: ports {}",
            ports.join(", ")
        );
    }
}

fn patterns_text(out: &mut String, doc: &DiagnoseDocument) {
    let (Some(base), Some(split)) = (
        median_reused_total(&doc.report, AS_GIVEN),
        median_reused_total(&doc.report, SPLIT_NO_NODELAY),
    ) else {
        return;
    };
    out.push_str("\nclient write patterns (median total on a reused connection):\n");
    let given = format!("as given ({})", doc.client);
    let _ = writeln!(out, "  {given:<42} {}", fmt_ms(base));
    let _ = writeln!(
        out,
        "  {:<42} {}",
        "headers then body, TCP_NODELAY off (Ruby)",
        fmt_ms(split)
    );
    if split > base {
        let _ = writeln!(
            out,
            "  → clients that split headers and body lose {} per request here",
            fmt_ms(split - base)
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(index: u32, reused: bool, total_us: u64) -> RequestPhases {
        RequestPhases {
            index,
            reused,
            total_us,
            ..RequestPhases::default()
        }
    }

    #[test]
    fn the_typical_request_is_the_median_reused_one() {
        let rs = [
            req(0, false, 900),
            req(1, true, 30),
            req(2, true, 10),
            req(3, true, 20),
        ];
        assert_eq!(typical(&rs).unwrap().index, 3);
        assert_eq!(typical(&rs[..1]).unwrap().index, 0);
        assert!(typical(&[]).is_none());
    }
}
