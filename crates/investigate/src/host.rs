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

/// `use`: samples the host every `interval` for `duration` or until
/// `stop` completes (Ctrl-C); what was sampled is reported.
pub fn sample_for(
    duration: std::time::Duration,
    interval: std::time::Duration,
    stop: impl std::future::Future<Output = ()>,
) -> HostReport {
    let sampler = whyslow_host::Sampler::start(proc_root(), interval);
    crate::runtime(1).block_on(async {
        tokio::select! {
            _ = tokio::time::sleep(duration + interval / 4) => {}
            _ = stop => {}
        }
    });
    let (samples, unavailable) = sampler.finish();
    host_report("use", samples, unavailable)
}
