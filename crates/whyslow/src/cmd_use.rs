//! `whyslow use`: Brendan Gregg's USE checklist for this host.

use crate::flags::commands::UseArgs;
use crate::flags::exit::Exit;
use crate::out;
use crate::stdout::{self, Done};
use std::time::Duration;
use whyslow_check::parse_duration;
use whyslow_investigate::host::sample_for;

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
    let report = sample_for(duration, interval, crate::ctrl_c());
    if args.output.json {
        stdout::json(&report)?;
    } else {
        out!("{}", whyslow_report::host::text(&report))?;
    }
    Ok(Exit::Ok)
}
