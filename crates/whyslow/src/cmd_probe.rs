//! `whyslow probe URL`: the client's view of N requests.

use crate::ctrl_c;
use crate::flags::commands::ProbeArgs;
use crate::flags::exit::Exit;
use crate::out;
use crate::stdout::{self, Done};
use whyslow_check::{flag_rules, Rule, BUDGET_METRICS};
use whyslow_client::{redact_url, ProbeOptions, ProbeRun, TlsOptions, WritePattern};
use whyslow_investigate::probe;
use whyslow_model::CheckResult;
use whyslow_report::{probe as table, writeout};

/// The flags, as probe options and budget rules.
fn options(args: &ProbeArgs) -> Result<(ProbeOptions, Vec<Rule>), String> {
    let rules = flag_rules("--budget", args.budget.as_deref(), BUDGET_METRICS)?;
    if args.requests == 0 {
        return Err("-n must be at least 1".into());
    }
    let opts = ProbeOptions {
        url: args.url.clone(),
        requests: args.requests,
        fresh: args.fresh,
        spec: args.request.spec(whyslow_client::TraceContext::Sampled)?,
        tls: TlsOptions {
            keylog: args.keylog.writer()?,
            ..args.request.tls()
        },
        walk_dns: true,
    };
    Ok((opts, rules))
}

pub fn run(args: ProbeArgs) -> Done {
    let json = args.output.json;
    let (opts, rules) = match options(&args) {
        Ok(o) => o,
        Err(e) => {
            let target = Some(redact_url(&args.url));
            return stdout::fail(json, "probe", target, Exit::Usage, &e);
        }
    };
    let run = probe::run(&opts, ctrl_c());
    let report = probe::report(&opts, &run, &rules);
    if json {
        stdout::json(&report)?;
    } else if let Some(fmt) = &args.write_out {
        for r in &run.requests {
            out!("{}", writeout::expand(fmt, r))?;
        }
    } else {
        let spec = &opts.spec;
        let split = spec.write == WritePattern::Split && !spec.body.is_empty();
        let header = table::header(
            &spec.method,
            &report.target.clone().unwrap_or_default(),
            run.requests.len(),
            run.connections_opened,
            spec.nodelay,
            split,
        );
        out!("{}", table::text(&header, &report))?;
    }
    Ok(exit_code(&run, &report.checks))
}

fn exit_code(run: &ProbeRun, checks: &[CheckResult]) -> Exit {
    if let Some(e) = &run.error {
        if !run.requests.is_empty() || !checks.is_empty() {
            eprintln!("whyslow: request {} {e}", run.requests.len() + 1);
        } else {
            eprintln!("whyslow: {e}");
        }
        return e.kind.into();
    }
    if checks.iter().any(|c| !c.passed) {
        return Exit::Breach;
    }
    Exit::Ok
}
