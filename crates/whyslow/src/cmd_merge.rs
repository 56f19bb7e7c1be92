//! `whyslow merge A.json B.json …`: combine load result files (from several
//! machines, or several runs) exactly: histograms and counters add.

use crate::flags::commands::MergeArgs;
use crate::flags::exit::Exit;
use crate::stdout::{self, Done};
use whyslow_check::{flag_rules, SLO_METRICS};
use whyslow_investigate::load::{document, judge};
use whyslow_load::{merge, LoadResult};

pub fn run(args: MergeArgs) -> Done {
    let json = args.output.json;
    let fail = |exit: Exit, msg: &str| stdout::fail(json, "merge", None, exit, msg);
    let rules = match flag_rules("--slo", args.slo.as_deref(), SLO_METRICS) {
        Ok(r) => r,
        Err(e) => return fail(Exit::Usage, &e),
    };
    let merged = match args
        .files
        .iter()
        .map(|p| LoadResult::read(p))
        .collect::<Result<Vec<_>, _>>()
        .and_then(|r| merge(&r))
    {
        Ok(m) => m,
        Err(e) => return fail(Exit::Usage, &e),
    };
    if let Some(Err(e)) = args.result.as_deref().map(|p| merged.write(p)) {
        return fail(Exit::WriteFailed, &e);
    }
    let checks = judge(&rules, &merged);
    let doc = document(&merged.setup.target, Some(&merged), &checks, None);
    crate::cmd_load::print(json, &doc)?;
    Ok(match checks.iter().find(|c| !c.passed) {
        Some(c) => {
            eprintln!(
                "whyslow: SLO broken: {}",
                whyslow_report::load::check_line(c)
            );
            Exit::Breach
        }
        None => Exit::Ok,
    })
}
