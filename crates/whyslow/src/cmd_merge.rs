//! `whyslow merge A.json B.json …`: combine load result files (from several
//! machines, or several runs) exactly: histograms and counters add.

use crate::cmd_load::print_result;
use crate::flags::commands::MergeArgs;
use crate::flags::exit::Exit;
use crate::stdout::{self, Done};
use std::path::PathBuf;
use whyslow_check::{parse_rules, slo_checks, SLO_METRICS};
use whyslow_load::{merge, LoadResult};

fn read(files: &[PathBuf]) -> Result<Vec<LoadResult>, String> {
    files
        .iter()
        .map(|p| {
            let text = std::fs::read_to_string(p).map_err(|e| format!("{}: {e}", p.display()))?;
            LoadResult::parse(&text).map_err(|e| format!("{}: {e}", p.display()))
        })
        .collect()
}

pub fn run(args: MergeArgs) -> Done {
    let json = args.output.json;
    let fail = |exit: Exit, msg: &str| stdout::fail(json, "merge", None, exit, msg);
    let rules = match args.slo.as_deref().map(|s| parse_rules(s, SLO_METRICS)) {
        Some(Err(e)) => return fail(Exit::Usage, &format!("--slo: {e}")),
        Some(Ok(r)) => r,
        None => Vec::new(),
    };
    let merged = match read(&args.files).and_then(|r| merge(&r)) {
        Ok(m) => m,
        Err(e) => return fail(Exit::Usage, &e),
    };
    if let Some(path) = &args.result {
        let text = serde_json::to_string_pretty(&merged).unwrap_or_default();
        if let Err(e) = std::fs::write(path, text + "\n") {
            let msg = format!("-o {}: {e}", path.display());
            return fail(Exit::WriteFailed, &msg);
        }
    }
    let rec = merged.recorded().unwrap_or_default();
    let checks = slo_checks(&rules, &rec, &merged);
    print_result(json, &merged.setup.target, &merged, &checks, None)?;
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
