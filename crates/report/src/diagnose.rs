//! The text of `diagnose`: the typical request, the client write patterns,
//! the load phase, the capture, where the time went and the findings.

use crate::{breakdown, findings, fmt_ms, sql_summary, timeline};
use std::fmt::Write;
use whyslow_model::{CaptureInfo, ClientView, DiagnoseDocument, Timeline};

pub fn text(doc: &DiagnoseDocument) -> String {
    let r = &doc.report;
    let mut out = format!(
        "diagnose {} {}\n",
        doc.method,
        r.target.as_deref().unwrap_or("")
    );
    if let Some(v) = &doc.client_view {
        typical_text(&mut out, v);
        patterns_text(&mut out, &doc.client, v);
    }
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

/// The phases of the typical request, and what a new connection adds.
fn typical_text(out: &mut String, v: &ClientView) {
    let t = &v.typical;
    let _ = writeln!(
        out,
        "\nwhere the time of a typical request went (median of {} on a reused connection):",
        v.requests
    );
    let _ = writeln!(
        out,
        "  send {} | wait (server) {} | receive {} | total {}",
        fmt_ms(t.send_us),
        fmt_ms(t.wait_us),
        fmt_ms(t.receive_us),
        fmt_ms(t.total_us)
    );
    if let Some(first) = &v.first_new_connection {
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
        "all TCP and DNS".to_string()
    } else {
        format!("ports {}", list(&c.ports))
    };
    let saved = c
        .file
        .as_ref()
        .map(|f| format!(", saved to {f}"))
        .unwrap_or_default();
    let when = match c.seconds_with_drops {
        0 => String::new(),
        n => format!(
            " in {n} of {} seconds (at most {} in one)",
            c.seconds, c.max_drops_per_second
        ),
    };
    let inside = c.workload.as_ref().map_or(String::new(), |w| {
        format!(" in the network namespace of {} (pid {})", w.label(), w.pid)
    });
    let _ = writeln!(
        out,
        "\ncapture: {} packets on {}{inside} ({filter}), {} dropped by the kernel{when}{saved}",
        c.packets, c.iface, c.kernel_drops
    );
    for s in &c.servers {
        let _ = writeln!(out, "  listening on :{}: {}", s.port, s.workload.label());
    }
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

fn patterns_text(out: &mut String, client: &str, v: &ClientView) {
    let (Some(base), Some(split)) = (v.as_given_median_us, v.split_median_us) else {
        return;
    };
    out.push_str("\nclient write patterns (median total on a reused connection):\n");
    let given = format!("as given ({client})");
    let _ = writeln!(out, "  {given:<42} {}", fmt_ms(base));
    let _ = writeln!(
        out,
        "  {:<42} {}",
        "headers then body, TCP_NODELAY off (Ruby)",
        fmt_ms(split)
    );
    if let Some(lost) = v.split_loses_us {
        let _ = writeln!(
            out,
            "  → clients that split headers and body lose {} per request here",
            fmt_ms(lost)
        );
    }
}
