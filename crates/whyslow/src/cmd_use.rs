//! `whyslow use`: Brendan Gregg's USE checklist for this host.

use crate::flags::commands::UseArgs;
use crate::flags::exit::Exit;
use crate::out;
use crate::stdout::{self, Done};
use std::path::PathBuf;
use std::time::Duration;
use whyslow_check::parse_duration;
use whyslow_host::Sampler;
use whyslow_model::{HostReport, HostSample, SCHEMA_VERSION};

/// Where /proc is: tests point it at recorded files.
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

pub fn run(args: UseArgs) -> Done {
    let usage = |msg: &str| stdout::fail(args.output.json, "use", None, Exit::Usage, msg);
    let (duration, interval) = match (
        parse_duration(&args.duration),
        parse_duration(&args.interval),
    ) {
        (Ok(d), Ok(i)) if i >= Duration::from_millis(100) => (d.max(i), i),
        (Ok(_), Ok(_)) => return usage("--interval must be at least 100ms"),
        (Err(e), _) | (_, Err(e)) => return usage(&e),
    };
    let sampler = Sampler::start(proc_root(), interval);
    // Ctrl-C ends sampling early; what was sampled is reported.
    crate::runtime(1).block_on(async {
        tokio::select! {
            _ = tokio::time::sleep(duration + interval / 4) => {}
            _ = crate::ctrl_c() => {}
        }
    });
    let (samples, unavailable) = sampler.finish();
    let report = host_report("use", samples, unavailable);
    if args.output.json {
        stdout::json(&report)?;
    } else {
        out!("{}", whyslow_report::host::text(&report))?;
    }
    Ok(Exit::Ok)
}
