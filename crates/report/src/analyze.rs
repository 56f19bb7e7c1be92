//! The text of `analyze`: what was read, which service the requests are,
//! the capture's counts and groups, where the time went and the findings.

use crate::{breakdown, findings, sql_summary, timeline};
use std::fmt::Write;
use whyslow_model::{CaptureSummary, Report, ServiceChoice, ServiceHow, Timeline};

pub fn text(r: &Report) -> String {
    let mut out = String::new();
    let empty = CaptureSummary::default();
    let s = r.capture.as_ref().unwrap_or(&empty);
    let target = r.target.as_deref().unwrap_or("capture");
    let _ = match &s.spans {
        Some(_) => writeln!(out, "{target}: OpenTelemetry spans (OTLP), no packets"),
        None => writeln!(
            out,
            "{target}: {} packets ({} not TCP or UDP, {} cut short by the snapshot length)",
            s.packets, s.non_tcp_packets, s.truncated_packets
        ),
    };
    kept_notes(&mut out, s);
    let _ = writeln!(out, "{}", service_line(&s.service, &s.backing_ports));
    if r.capture.is_some() {
        let none = Timeline::default();
        let evidence = r.timeline.as_ref().unwrap_or(&none);
        out.push_str(&timeline::capture_summary(s, evidence));
    }
    out.push_str(&breakdown::text(&r.time_breakdown));
    out.push_str(&sql_summary::text(&r.sql_summary));
    out.push_str("\nfindings, most time lost first:\n");
    out.push_str(&findings::text(&r.findings));
    for k in &r.skipped {
        let _ = writeln!(out, "not examined: {}: {}", k.what, k.why);
    }
    for e in &r.errors {
        let _ = writeln!(out, "note: {e}");
    }
    out
}

fn ports(p: &[u16]) -> String {
    p.iter()
        .map(|p| format!(":{p}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Which service the inbound requests are, and how that was decided.
pub fn service_line(service: &ServiceChoice, backing: &[u16]) -> String {
    let backing = match backing {
        [] => "no backing calls seen".to_string(),
        b => format!("backing services {}", ports(b)),
    };
    match service.how {
        ServiceHow::Given => format!("service {} (--service); {backing}", ports(&service.ports)),
        ServiceHow::Found => format!(
            "service {} (found: its requests enclose the calls to its backing services); {backing}",
            ports(&service.ports)
        ),
        ServiceHow::Spans => format!(
            "service {} (from spans: the service whose requests made the most calls); {backing}",
            ports(&service.ports)
        ),
        ServiceHow::None => "no service found (no server's requests enclose another's); \
                             every exchange is listed as a request (--service PORT to say which)"
            .to_string(),
    }
}

/// What was analyzed, and what was kept as evidence when not everything was.
fn kept_notes(out: &mut String, s: &CaptureSummary) {
    let _ = writeln!(
        out,
        "analyzed every exchange ({}) and connection ({}), in {} window(s)",
        s.exchanges, s.connections, s.windows
    );
    if s.windows_forced > 0 {
        let _ = writeln!(
            out,
            "{} window(s) were cut while requests of the service were open (a service \
             never idle): calls near those cuts count as ambiguous unless trace context \
             or a thread gave them",
            s.windows_forced
        );
    }
    let some_kept = s.kept_exchanges > 0;
    if some_kept && (s.kept_exchanges < s.exchanges || s.kept_connections < s.connections) {
        let _ = writeln!(
            out,
            "kept the first {} exchanges and {} connections as evidence for --timeline/--html \
             (--max-exchanges, --max-connections)",
            s.kept_exchanges, s.kept_connections
        );
    }
    if s.connections_events_cut > 0 {
        let _ = writeln!(
            out,
            "per-segment events of {} connection(s) were cut at --max-events/--max-events-total; \
             TCP findings on them cover the events kept",
            s.connections_events_cut
        );
    }
}
