//! `whyslow use`: Brendan Gregg's USE checklist for this host.

use crate::cmd_probe::usage;
use clap::Args;
use std::time::Duration;
use whyslow_check::parse_duration;
use whyslow_host::Sampler;
use whyslow_investigate::host::{host_report, proc_root};
use whyslow_report::to_json;

#[derive(Args)]
pub struct UseArgs {
    /// How long to sample (at least one interval)
    #[arg(long, default_value = "1s")]
    pub duration: String,
    /// Sampling interval
    #[arg(long, default_value = "1s")]
    pub interval: String,
    /// Print the JSON report instead of text
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: UseArgs) -> u8 {
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
    if args.json {
        println!("{}", to_json(&report));
    } else {
        print!("{}", whyslow_report::host::text(&report));
    }
    0
}
