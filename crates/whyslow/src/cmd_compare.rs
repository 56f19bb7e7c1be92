//! `whyslow compare A.json B.json`: is B really faster (or slower) than A?

use crate::cmd_probe::usage;
use crate::EXIT_BREACH;
use clap::Args;
use std::path::{Path, PathBuf};
use whyslow_compare::run::Run;
use whyslow_compare::{compare, gate};
use whyslow_report::to_json;

#[derive(Args)]
pub struct CompareArgs {
    /// The baseline: a `load -o` result file, or `--json` of probe, diagnose or load
    pub a: PathBuf,
    /// The candidate, from the same command
    pub b: PathBuf,
    /// Exit 1 on a significant regression past a limit: 'p99>+10%,wait.p50>+5ms'
    #[arg(long)]
    pub fail_if: Option<String>,
    /// Print the comparison as JSON
    #[arg(long)]
    pub json: bool,
    /// Also write a self-contained HTML report here
    #[arg(long)]
    pub html: Option<PathBuf>,
}

fn read(path: &Path) -> Result<Run, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    Run::parse(&path.display().to_string(), &text)
}

pub fn run(args: CompareArgs) -> u8 {
    let gates = match args.fail_if.as_deref().map(gate::parse).transpose() {
        Ok(g) => g.unwrap_or_default(),
        Err(e) => return usage(&format!("--fail-if: {e}")),
    };
    let comparison = match (read(&args.a), read(&args.b)) {
        (Ok(a), Ok(b)) => compare(&a, &b, &gates),
        (Err(e), _) | (_, Err(e)) => Err(e),
    };
    let c = match comparison {
        Ok(c) => c,
        Err(e) => return usage(&e),
    };
    if args.json {
        println!("{}", to_json(&c));
    } else {
        print!("{}", whyslow_report::compare::text(&c));
    }
    if let Some(path) = &args.html {
        if let Err(e) = std::fs::write(path, whyslow_report::html::compare(&c)) {
            eprintln!("whyslow: {}: {e}", path.display());
        }
    }
    match c.checks.iter().all(|k| k.passed) {
        true => 0,
        false => EXIT_BREACH,
    }
}
