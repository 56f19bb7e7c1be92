//! Captures of several hosts analyzed as one (`analyze A B C`): each file
//! scanned for the connections the hosts share (`whyslow_hosts`), then all
//! of them read as one capture on the first file's clock, each shared
//! connection from the copy nearest its client, through the one analysis
//! path.

use crate::analysis::{analyze_windows, is_trace_file, AnalysisOptions, CaptureAnalysis};
use std::path::PathBuf;
use whyslow_hosts::Host;
use whyslow_wire::scan::scan_file;
use whyslow_wire::windows_from_files;

/// Analyzes `hosts` (name, capture), the first one's clock the reference.
/// Err: a file cannot be read as a capture, or holds traces (analyzed one
/// file at a time).
pub fn analyze_hosts(
    hosts: &[(String, PathBuf)],
    opts: &AnalysisOptions,
) -> Result<CaptureAnalysis, String> {
    let mut scanned = Vec::with_capacity(hosts.len());
    let mut notes = Vec::new();
    for (name, path) in hosts {
        if is_trace_file(path) {
            return Err(format!(
                "{}: OTLP traces are analyzed one file at a time",
                path.display()
            ));
        }
        let scan = scan_file(path).map_err(|e| format!("{}: {e}", path.display()))?;
        notes.extend(
            scan.error
                .as_ref()
                .map(|e| format!("{}: {e}", path.display())),
        );
        if whyslow_ebpf::events_path(path).exists() {
            notes.push(format!(
                "{}: its eBPF events are not read beside other hosts' captures: analyze it alone \
                 for its threads",
                path.display()
            ));
        }
        scanned.push(Host {
            name: name.clone(),
            path: path.clone(),
            scan,
        });
    }
    let joined = whyslow_hosts::join(&scanned);
    for (i, clock) in joined.clocks.iter().enumerate().skip(1) {
        if clock.clock_offset_us.is_none() {
            let why = match clock.shared_connections {
                0 => format!("shares no connection with {}", joined.clocks[0].name),
                n => format!(
                    "shares {n} connection(s) whose times fit no one clock offset (its clock \
                     stepped or drifted during the capture)"
                ),
            };
            notes.push(format!(
                "host {}: {why}: it is left out of this analysis (analyze it alone)",
                clock.name
            ));
            continue;
        }
        if clock.clock_disagrees {
            notes.push(format!(
                "host {}: its shared connections disagree on its clock (a step or drift during \
                 the captures): the offset is their median",
                hosts[i].0
            ));
        }
    }
    let opts = AnalysisOptions {
        events: None,
        ..opts.clone()
    };
    let mut analysis = analyze_windows(&opts, |flow, sink| {
        windows_from_files(&joined.feeds, flow, sink).map_err(|e| e.to_string())
    })?;
    analysis.summary.hosts = joined.clocks;
    analysis.errors.extend(notes);
    Ok(analysis)
}
