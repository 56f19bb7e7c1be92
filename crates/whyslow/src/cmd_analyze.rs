//! `whyslow analyze FILE`: a pcap/pcapng capture, through the one analysis
//! path, rendered.

use crate::flags::commands::AnalyzeArgs;
use crate::flags::exit::Exit;
use crate::stdout::{self, Done};
use whyslow_investigate::{analyze_capture, AnalysisOptions, CaptureSource, Scope};
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
        scope: Scope::Everything,
        flow,
        evidence: args.output.evidence(),
        events: AnalysisOptions::events_for(&args.file, args.events.clone()),
    };
    let analysis = match analyze_capture(CaptureSource::File(&args.file), &opts) {
        Ok(a) => a,
        Err(e) => return stdout::fail(json, "analyze", file, Exit::NotACapture, &e),
    };
    let partial = analysis.partial.clone();
    let mut report = Report::new("analyze", file);
    analysis.fill(&mut report, opts.evidence);
    args.output.emit(
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
