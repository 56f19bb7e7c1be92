//! `whyslow analyze FILE…` (a pcap/pcapng capture or OTLP traces; several
//! hosts' captures joined into one) and
//! `whyslow receive` (OTLP/HTTP spans), through the one analysis path, rendered.

use crate::flags::commands::{AnalyzeArgs, ReceiveArgs};
use crate::flags::exit::Exit;
use crate::flags::output::TimelineOutput;
use crate::stdout::{self, Done};
use std::path::PathBuf;
use whyslow_investigate::{
    analyze_capture, analyze_hosts, analyze_spans, receive, AnalysisOptions, CaptureAnalysis,
};
use whyslow_investigate::{CaptureSource, Scope};
use whyslow_model::Report;

pub fn run(args: AnalyzeArgs) -> Done {
    let json = args.output.json();
    let hosts = match hosts(&args) {
        Ok(h) => h,
        Err(e) => return stdout::fail(json, "analyze", None, Exit::Usage, &e),
    };
    let names: Vec<String> = hosts.iter().map(|h| h.1.display().to_string()).collect();
    let file = Some(names.join(" "));
    let flow = match args.limits.with_keylog(&args.keylog) {
        Ok(l) => l,
        Err(e) => return stdout::fail(json, "analyze", file, Exit::Usage, &e),
    };
    let first = &hosts[0].1;
    let opts = AnalysisOptions {
        service: (!args.service.is_empty()).then(|| args.service.clone()),
        service_name: args.service_name.clone(),
        scope: Scope::Everything,
        flow,
        evidence: args.output.evidence(),
        events: AnalysisOptions::events_for(first, args.events.clone()),
    };
    let analysis = match hosts.len() {
        1 => analyze_capture(CaptureSource::File(first), &opts),
        _ => analyze_hosts(&hosts, &opts),
    };
    let analysis = match analysis {
        Ok(a) => a,
        Err(e) => return stdout::fail(json, "analyze", file, Exit::NotACapture, &e),
    };
    emit("analyze", file, analysis, &args.output)
}

/// The captures to analyze, one per host: the FILEs (each named by its
/// stem), then `--host NAME=FILE`. Two hosts of one name, or one file
/// given twice, is a usage error: nothing would tell them apart.
fn hosts(args: &AnalyzeArgs) -> Result<Vec<(String, PathBuf)>, String> {
    let stem = |p: &PathBuf| {
        p.file_stem().map_or_else(
            || p.display().to_string(),
            |s| s.to_string_lossy().into_owned(),
        )
    };
    let mut out: Vec<(String, PathBuf)> = args.files.iter().map(|p| (stem(p), p.clone())).collect();
    out.extend(args.host.iter().cloned());
    for (i, (name, path)) in out.iter().enumerate() {
        for (other, other_path) in &out[..i] {
            if other_path == path {
                return Err(format!("{} is given twice", path.display()));
            }
            if other == name {
                return Err(format!(
                    "two captures of one host name, {name}: name them with --host NAME=FILE"
                ));
            }
        }
    }
    if out.len() > 1 && args.events.is_some() {
        return Err("--events goes with one capture".into());
    }
    Ok(out)
}

pub fn receive(args: ReceiveArgs) -> Done {
    let listen = receive::Listen {
        http: args.otlp,
        grpc: args.otlp_grpc,
    };
    let from = listen.describe();
    let ready = |at: receive::Listen| {
        eprintln!("whyslow: receiving {}; Ctrl-C to stop", at.describe());
    };
    let set = match receive::otlp(listen, args.duration, ready) {
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
        export: Default::default(),
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
