//! `whyslow merge A.json B.json …`: combine load result files (from several
//! machines, or several runs) exactly: histograms and counters add.

use crate::cmd_load::print_result;
use crate::cmd_probe::usage;
use crate::EXIT_BREACH;
use clap::Args;
use std::path::PathBuf;
use whyslow_check::{parse_rules, slo_checks, SLO_METRICS};
use whyslow_load::{merge, LoadResult};

#[derive(Args)]
pub struct MergeArgs {
    /// Result files written by `whyslow load -o`
    #[arg(required = true, num_args = 1..)]
    pub files: Vec<PathBuf>,
    /// Write the merged result file here
    #[arg(short = 'o', long = "output")]
    pub output: Option<PathBuf>,
    /// Check the merged result: 'p99<200ms,errors<0.1%' (exit 1 when broken)
    #[arg(long)]
    pub slo: Option<String>,
    /// Print the JSON report instead of text
    #[arg(long)]
    pub json: bool,
}

fn read(files: &[PathBuf]) -> Result<Vec<LoadResult>, String> {
    files
        .iter()
        .map(|p| {
            let text = std::fs::read_to_string(p).map_err(|e| format!("{}: {e}", p.display()))?;
            LoadResult::parse(&text).map_err(|e| format!("{}: {e}", p.display()))
        })
        .collect()
}

pub fn run(args: MergeArgs) -> u8 {
    let rules = match args.slo.as_deref().map(|s| parse_rules(s, SLO_METRICS)) {
        Some(Err(e)) => return usage(&format!("--slo: {e}")),
        Some(Ok(r)) => r,
        None => Vec::new(),
    };
    let merged = match read(&args.files).and_then(|r| merge(&r)) {
        Ok(m) => m,
        Err(e) => return usage(&e),
    };
    if let Some(path) = &args.output {
        let text = serde_json::to_string_pretty(&merged).unwrap_or_default();
        if let Err(e) = std::fs::write(path, text + "\n") {
            eprintln!("whyslow: -o {}: {e}", path.display());
            return 1;
        }
    }
    let rec = merged.recorded().unwrap_or_default();
    let checks = slo_checks(&rules, &rec, &merged);
    print_result(args.json, &merged.setup.target, &merged, &checks, None);
    match checks.iter().find(|c| !c.passed) {
        Some(c) => {
            eprintln!(
                "whyslow: SLO broken: {}",
                whyslow_report::load::check_line(c)
            );
            EXIT_BREACH
        }
        None => 0,
    }
}
