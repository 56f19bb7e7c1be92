//! Detectors: pure functions of what was measured, one file each, no I/O.
//! Each names a cause from DESIGN's vocabulary with the time it cost and evidence.

pub mod probe_pattern;
pub mod thresholds;

use whyslow_model::{Finding, Timeline};

/// Runs every timeline detector and ranks the findings by time lost.
pub fn run_all(timeline: &Timeline) -> Vec<Finding> {
    let mut findings = Vec::new();
    for detect in DETECTORS {
        findings.extend(detect(timeline));
    }
    Finding::sort(&mut findings);
    findings
}

/// Every detector over a timeline, in no particular order.
pub const DETECTORS: &[fn(&Timeline) -> Vec<Finding>] = &[];
