//! One workload's window, from its analysis: the request kinds and the
//! causes named, in the record a dashboard keeps.

use whyslow_investigate::CaptureAnalysis;
use whyslow_model::{Evidence, Finding, RequestKind, WindowFinding, Workload, WorkloadWindow};
use whyslow_wire::live::WindowFile;

/// The request kind a finding's evidence names first.
fn request_of(f: &Finding) -> String {
    f.evidence
        .iter()
        .find_map(|e| match e {
            Evidence::Exchange { request, .. } | Evidence::Queued { request, .. } => {
                Some(request.clone())
            }
            _ => None,
        })
        .unwrap_or_default()
}

pub fn workload_window(
    label: &str,
    workload: Option<&Workload>,
    file: &WindowFile,
    analysis: Result<CaptureAnalysis, String>,
) -> WorkloadWindow {
    let mut w = WorkloadWindow {
        label: label.to_string(),
        workload: workload.cloned(),
        file: file.path.display().to_string(),
        packets: file.stats.packets,
        kernel_drops: file.stats.kernel_drops,
        requests: Vec::new(),
        findings: Vec::new(),
        errors: Vec::new(),
    };
    let a = match analysis {
        Ok(a) => a,
        Err(e) => {
            w.errors.push(e);
            return w;
        }
    };
    w.requests = a
        .summary
        .groups
        .iter()
        .filter(|g| g.made_for.is_none())
        .map(|g| RequestKind {
            kind: g.label.clone(),
            count: g.count,
            p50_us: g.p50_us,
            p99_us: g.p99_us,
            max_us: g.max_us,
        })
        .collect();
    w.findings = a
        .analysis
        .findings
        .iter()
        .map(|f| WindowFinding {
            kind: f.kind,
            request: request_of(f),
            subject: f.subject.to_string(),
            time_lost_us: f.time_lost_us,
            summary: f.summary.clone(),
            secondary: f.background || f.symptom_of.is_some(),
        })
        .collect();
    w.errors = a.errors;
    w.errors.extend(a.partial);
    w
}
