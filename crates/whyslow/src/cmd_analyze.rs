//! `whyslow analyze FILE`: a pcap/pcapng capture → timeline → findings.

use crate::flags::commands::AnalyzeArgs;
use crate::flags::exit::Exit;
use crate::stdout::{self, Done};
use crate::{out, outln};
use whyslow_detect::pipeline::{Analysis, Service};
use whyslow_detect::whole::{Keep, Whole, WholeAnalysis};
use whyslow_model::{CaptureSummary, Report, Timeline};
use whyslow_report::{breakdown, findings, sql_summary, timeline};
use whyslow_wire::{windows_from_file, Window, WindowSink};

/// `diagnose` reads the service's key log as `analyze --keylog` does.
pub use crate::flags::keylog::read_keylog;

/// Share of `--max-events-total` kept as evidence on finished connections:
/// a quarter, so the evidence stops growing early in a large capture and
/// the rest stays for the flows still open.
const EVIDENCE_EVENTS_SHARE: usize = 4;

/// Hands the capture's windows to the whole-capture analysis.
struct Sink<'a>(&'a mut WholeAnalysis);

impl WindowSink for Sink<'_> {
    fn front(&mut self, first: &Timeline, last_chance: bool) -> Option<Vec<u16>> {
        self.0.front(first, last_chance)
    }
    fn window(&mut self, w: &mut Window) {
        self.0.window(&mut w.timeline, &w.headers);
    }
}

pub fn run(args: AnalyzeArgs) -> Done {
    let json = args.output.json();
    let file = Some(args.file.display().to_string());
    let limits = match args.limits.with_keylog(&args.keylog) {
        Ok(l) => l,
        Err(e) => return stdout::fail(json, "analyze", file, Exit::Usage, &e),
    };
    let given = (!args.service.is_empty()).then_some(args.service.as_slice());
    let keep = Keep {
        exchanges: limits.max_exchanges,
        connections: limits.max_connections,
        events: limits.max_events_total / EVIDENCE_EVENTS_SHARE,
    };
    let mut whole = WholeAnalysis::new(given, keep);
    let outcome = match windows_from_file(&args.file, &limits, &mut Sink(&mut whole)) {
        Ok(o) => o,
        Err(e) => {
            let msg = format!("{}: {e}", args.file.display());
            return stdout::fail(json, "analyze", file, Exit::NotACapture, &msg);
        }
    };
    let Whole {
        analysis,
        mut summary,
        evidence,
    } = whole.finish();
    summary.packets = outcome.packets;
    summary.exchanges = outcome.exchanges_seen;
    summary.windows = outcome.windows;
    summary.windows_forced = outcome.windows_forced;
    let mut report = Report::new("analyze", Some(args.file.display().to_string()));
    report.findings = analysis.findings.clone();
    report.time_breakdown = analysis.time_breakdown.clone();
    report.sql_summary = analysis.sql_summary.clone();
    let kept = kept_notes(&summary, &evidence);
    if args.output.timeline && summary.kept_exchanges < summary.exchanges {
        report.errors.push(format!(
            "--timeline holds the first {} of {} exchanges (--max-exchanges); \
             counts, percentiles and findings cover them all",
            summary.kept_exchanges, summary.exchanges
        ));
    }
    report.errors.extend(outcome.error.iter().cloned());
    report
        .errors
        .extend(outcome.protocol_errors.iter().cloned());
    report.capture = Some(summary);
    report.timeline = Some(evidence);
    crate::flags::output::write_html(args.output.html(), || {
        whyslow_report::html::report(&report, None)
    });
    let evidence = report.timeline.take().unwrap_or_default();
    if json {
        if args.output.timeline {
            report.timeline = Some(evidence);
        }
        stdout::json(&report)?;
    } else {
        outln!(
            "{}: {} packets ({} not TCP, {} cut short by the snapshot length)",
            args.file.display(),
            outcome.packets,
            outcome.non_tcp,
            outcome.truncated_packets
        )?;
        for note in &kept {
            outln!("{note}")?;
        }
        outln!("{}", service_line(&analysis))?;
        if let Some(s) = &report.capture {
            out!("{}", timeline::capture_summary(s, &evidence))?;
        }
        out!("{}", breakdown::text(&report.time_breakdown))?;
        out!("{}", sql_summary::text(&report.sql_summary))?;
        outln!("\nfindings, most time lost first:")?;
        out!("{}", findings::text(&report.findings))?;
        for e in &outcome.protocol_errors {
            outln!("note: {e}")?;
        }
    }
    if let Some(e) = &outcome.error {
        eprintln!("whyslow: {e}; the result above covers what was read");
        return Ok(Exit::PartialCapture);
    }
    Ok(Exit::Ok)
}

/// Which service the inbound requests are, and how that was decided.
fn service_line(a: &Analysis) -> String {
    let ports = |p: &[u16]| {
        p.iter()
            .map(|p| format!(":{p}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let backing = match a.backing.as_slice() {
        [] => "no backing calls seen".to_string(),
        b => format!("backing services {}", ports(b)),
    };
    match &a.service {
        Service::Given(p) => format!("service {} (--service); {backing}", ports(p)),
        Service::Found(p) => format!(
            "service :{p} (found: its requests enclose the calls to its backing services); {backing}"
        ),
        Service::None => "no service found (no server's requests enclose another's); \
                          every exchange is listed as a request (--service PORT to say which)"
            .to_string(),
    }
}

/// What was analyzed, and what was kept as evidence when not everything was.
fn kept_notes(s: &CaptureSummary, evidence: &Timeline) -> Vec<String> {
    let mut notes = vec![format!(
        "analyzed every exchange ({}) and connection ({}), in {} window(s)",
        s.exchanges, s.connections, s.windows
    )];
    if s.windows_forced > 0 {
        notes.push(format!(
            "{} window(s) were cut while a request of the service stayed open for long: \
             calls near those cuts may be counted as made for no request",
            s.windows_forced
        ));
    }
    if s.kept_exchanges < s.exchanges || s.kept_connections < s.connections {
        notes.push(format!(
            "kept the first {} exchanges and {} connections as evidence for --timeline/--html \
             (--max-exchanges, --max-connections)",
            s.kept_exchanges, s.kept_connections
        ));
    }
    let cut = evidence
        .connections
        .iter()
        .filter(|c| c.events_truncated)
        .count();
    if cut > 0 {
        notes.push(format!(
            "per-segment events of {cut} connection(s) were cut at --max-events/--max-events-total; \
             TCP findings on them cover the events kept"
        ));
    }
    notes
}
