//! OTLP traces through the one analysis path: the spans become a timeline
//! (`whyslow_otlp::import`), and the same attribution, detectors and
//! summaries run on it as on a capture. What spans cannot show (packets:
//! Nagle, retransmissions, windows, handshakes) is said as not examined.

use crate::analysis::{evidence_keep, AnalysisOptions, CaptureAnalysis};
use std::collections::HashSet;
use whyslow_detect::windowed::{CaptureResult, WindowedAnalysis};
use whyslow_model::{ExchangeRole, Facts, FindingKind, ServiceHow, Skipped, SpanSource};
use whyslow_otlp::import::{to_timeline_of, SpanSet};

/// Causes only packets show, as the report lists them.
fn packet_causes() -> String {
    let kinds = FindingKind::ALL.into_iter().filter(|k| k.needs_packets());
    kinds
        .map(FindingKind::as_str)
        .collect::<Vec<_>>()
        .join(", ")
}

/// Analyzes the spans of `set`, read from `from` (a file, an address).
/// Err: `opts.service_name` names no service with server spans there.
pub fn analyze_spans(
    set: SpanSet,
    from: &str,
    opts: &AnalysisOptions,
) -> Result<CaptureAnalysis, String> {
    let read = to_timeline_of(&set, opts.service_name.as_deref());
    if let (Some(name), None) = (&opts.service_name, &read.service) {
        let there = match set.services.is_empty() {
            true => "no spans came".to_string(),
            false => format!("services there: {}", set.services.join(", ")),
        };
        return Err(format!(
            "{from}: no server spans of a service named {name:?} ({there})"
        ));
    }
    let mut timeline = read.timeline;
    let ports = (!read.service_ports.is_empty()).then_some(&read.service_ports[..]);
    let mut whole = WindowedAnalysis::new(ports, opts.scope.clone(), evidence_keep(opts));
    let exchanges = timeline.exchanges.len() as u64;
    let calls_by_parent = timeline
        .exchanges
        .iter()
        .filter(|e| e.role == ExchangeRole::Outbound && e.span_parent.is_some())
        .count() as u64;
    whole.window(&mut timeline, &HashSet::new());
    let CaptureResult {
        analysis,
        mut summary,
        evidence,
    } = whole.finish();
    summary.exchanges = exchanges;
    if summary.service.how == ServiceHow::Given {
        summary.service.how = ServiceHow::Spans;
    }
    summary.windows = 1;
    summary.spans = Some(SpanSource {
        from: from.to_string(),
        spans: set.spans.len() as u64,
        requests: set.requests,
        service: read.service,
        other_services: read.other_services,
        calls_by_parent,
        calls_without_request: read.calls_without_request,
        nested_calls: read.nested_calls,
        skewed: read.skewed,
        broken_chains: read.broken_chains,
        waits_not_for_a_connection: read.waits_not_for_a_connection,
        dropped: set.dropped,
        named_peers: read
            .named_peers
            .into_iter()
            .map(|(name, addr)| (name, addr.to_string()))
            .collect(),
    });
    let skipped = vec![Skipped {
        what: packet_causes(),
        why: "spans carry no packets: capture the service (whyslow diagnose, capture) \
              to examine the network and TCP"
            .into(),
        facts: Facts::default(),
    }];
    Ok(CaptureAnalysis {
        analysis,
        summary,
        evidence,
        skipped,
        errors: set.all_notes(),
        partial: None,
    })
}
