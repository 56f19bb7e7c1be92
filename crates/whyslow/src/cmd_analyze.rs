//! `whyslow analyze FILE` (a pcap/pcapng capture or OTLP traces) and
//! `whyslow receive` (OTLP/HTTP spans), through the one analysis path, rendered.

use crate::flags::commands::{AnalyzeArgs, ReceiveArgs};
use crate::flags::exit::Exit;
use crate::flags::output::TimelineOutput;
use crate::stdout::{self, Done};
use whyslow_investigate::{
    analyze_capture, analyze_spans, receive, AnalysisOptions, CaptureAnalysis,
};
use whyslow_investigate::{CaptureSource, Scope};
use whyslow_model::Report;

pub fn run(args: AnalyzeArgs) -> Done {
    let json = args.output.json();
    let file = Some(args.file.display().to_string());
    let flow = match args.limits.with_keylog(&args.keylog) {
        Ok(l) => l,
        Err(e) => return stdout::fail(json, "analyze", file, Exit::Usage, &e),
    };
    let opts = AnalysisOptions {
        service: (!args.service.is_empty()).then(|| args.service.clone()),
        service_name: args.service_name.clone(),
        scope: Scope::Everything,
        flow,
        evidence: args.output.evidence(),
        events: AnalysisOptions::events_for(&args.file, args.events.clone()),
    };
    let analysis = match analyze_capture(CaptureSource::File(&args.file), &opts) {
        Ok(a) => a,
        Err(e) => return stdout::fail(json, "analyze", file, Exit::NotACapture, &e),
    };
    emit("analyze", file, analysis, &args.output)
}

pub fn receive(args: ReceiveArgs) -> Done {
    let from = format!("OTLP/HTTP on {}", args.otlp);
    let ready =
        |at| eprintln!("whyslow: receiving OTLP/HTTP on http://{at}/v1/traces; Ctrl-C to stop");
    let set = match receive::otlp_http(args.otlp, args.duration, ready) {
        Ok(set) => set,
        Err(e) => {
            let json = args.output.json();
            return stdout::fail(json, "receive", Some(from), Exit::CaptureFailed, &e);
        }
    };
    let output = TimelineOutput {
        output: args.output,
        timeline: args.timeline,
        otlp: None,
        otlp_endpoint: None,
    };
    let opts = AnalysisOptions {
        evidence: output.evidence(),
        service_name: args.service_name,
        ..AnalysisOptions::default()
    };
    match analyze_spans(set, &from, &opts) {
        Ok(analysis) => emit("receive", Some(from), analysis, &output),
        // The one way it fails: --service-name names no service that sent spans.
        Err(e) => stdout::fail(output.json(), "receive", Some(from), Exit::Usage, &e),
    }
}

fn emit(
    command: &str,
    file: Option<String>,
    analysis: CaptureAnalysis,
    output: &TimelineOutput,
) -> Done {
    let partial = analysis.partial.clone();
    let evidence = output.evidence();
    let mut report = Report::new(command, file);
    analysis.fill(&mut report, evidence);
    output.emit(
        &mut report,
        |r| r,
        |r| whyslow_report::html::report(r, None),
        whyslow_report::analyze::text,
    )?;
    if let Some(e) = &partial {
        eprintln!("whyslow: {e}; the result above covers what was read");
        return Ok(Exit::PartialCapture);
    }
    Ok(Exit::Ok)
}
