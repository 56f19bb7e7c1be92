//! The host's USE samples of a run, judged.

use std::path::PathBuf;
use whyslow_model::{HostReport, HostSample, SCHEMA_VERSION};

/// Where /proc is: tests point it at recorded files (`WHYSLOW_PROC`).
pub fn proc_root() -> PathBuf {
    std::env::var_os("WHYSLOW_PROC").map_or_else(|| PathBuf::from("/proc"), PathBuf::from)
}

/// The host report of a run's samples, findings included.
pub fn host_report(
    command: &str,
    samples: Vec<HostSample>,
    unavailable: Vec<String>,
) -> HostReport {
    HostReport {
        schema_version: SCHEMA_VERSION,
        command: command.into(),
        cpus: whyslow_host::cpus(),
        findings: whyslow_detect::host_findings(&samples),
        samples,
        unavailable,
    }
}
