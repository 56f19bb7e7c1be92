//! `whyslow compare A.json B.json`: is B really faster (or slower) than A?

use crate::flags::commands::CompareArgs;
use crate::flags::exit::Exit;
use crate::out;
use crate::stdout::{self, Done};
use whyslow_compare::run::Run;
use whyslow_compare::{compare, gate};

pub fn run(args: CompareArgs) -> Done {
    let json = args.output.json();
    let usage = |msg: &str| stdout::fail(json, "compare", None, Exit::Usage, msg);
    let gates = match args.fail_if.as_deref().map(gate::parse).transpose() {
        Ok(g) => g.unwrap_or_default(),
        Err(e) => return usage(&format!("--fail-if: {e}")),
    };
    let comparison = match (Run::read(&args.a), Run::read(&args.b)) {
        (Ok(a), Ok(b)) => compare(&a, &b, &gates),
        (Err(e), _) | (_, Err(e)) => Err(e),
    };
    let c = match comparison {
        Ok(c) => c,
        Err(e) => return usage(&e),
    };
    args.output.write_html(|| whyslow_report::html::compare(&c));
    if json {
        stdout::json(&c)?;
    } else {
        out!("{}", whyslow_report::compare::text(&c))?;
    }
    Ok(match c.checks.iter().all(|k| k.passed) {
        true => Exit::Ok,
        false => Exit::Breach,
    })
}
