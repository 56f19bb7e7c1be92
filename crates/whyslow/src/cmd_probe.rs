//! `whyslow probe URL`: the client's view of N requests.

use crate::flags::commands::ProbeArgs;
use crate::flags::exit::Exit;
use crate::stdout::{self, Done};
use crate::{ctrl_c, out, runtime};
use whyslow_check::{check_budget, parse_rules, BUDGET_METRICS};
use whyslow_client::{probe_until, redact_url, ProbeOptions, ProbeRun, TlsOptions, WritePattern};
use whyslow_model::{CheckResult, Report, ReportSection};
use whyslow_report::{probe as table, writeout};

pub fn run(args: ProbeArgs) -> Done {
    let json = args.output.json;
    let usage = |msg: &str| {
        let target = Some(redact_url(&args.url));
        stdout::fail(json, "probe", target, Exit::Usage, msg)
    };
    let spec = match args.request.spec() {
        Ok(s) => s,
        Err(e) => return usage(&e),
    };
    let rules = match args
        .budget
        .as_deref()
        .map(|b| parse_rules(b, BUDGET_METRICS))
    {
        Some(Err(e)) => return usage(&format!("--budget: {e}")),
        Some(Ok(r)) => r,
        None => Vec::new(),
    };
    if args.requests == 0 {
        return usage("-n must be at least 1");
    }
    let keylog = match args.keylog.writer() {
        Ok(k) => k,
        Err(e) => return usage(&e),
    };
    let opts = ProbeOptions {
        url: args.url.clone(),
        requests: args.requests,
        fresh: args.fresh,
        spec,
        tls: TlsOptions {
            keylog,
            ..args.request.tls()
        },
    };
    let run = runtime(1).block_on(probe_until(&opts, ctrl_c()));
    let checks = check_budget(&rules, &run.requests);
    let report = report(&args, &run, checks);
    if json {
        stdout::json(&report)?;
    } else if let Some(fmt) = &args.write_out {
        for r in &run.requests {
            out!("{}", writeout::expand(fmt, r))?;
        }
    } else {
        out!("{}", table::text(&header(&args, &opts, &run), &report))?;
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

fn report(args: &ProbeArgs, run: &ProbeRun, checks: Vec<CheckResult>) -> Report {
    let mut r = Report::new("probe", Some(redact_url(&args.url)));
    let label = if args.fresh { "fresh" } else { "reused" };
    r.sections.push(ReportSection {
        label: label.into(),
        requests: run.requests.clone(),
    });
    r.checks = checks;
    r.findings.extend(whyslow_detect::probe_findings(
        &run.requests,
        &redact_url(&args.url),
    ));
    if let Some(e) = &run.error {
        r.errors
            .push(format!("request {}: {e}", run.requests.len() + 1));
    }
    r
}

/// The first line of the text: what was asked, as a person would say it.
fn header(args: &ProbeArgs, opts: &ProbeOptions, run: &ProbeRun) -> String {
    let spec = &opts.spec;
    format!(
        "{} {}  {} request(s), {} connection(s) opened, TCP_NODELAY {}, {} writes",
        spec.method,
        redact_url(&args.url),
        run.requests.len(),
        run.connections_opened,
        if spec.nodelay { "on" } else { "off" },
        if spec.write == WritePattern::Split && !spec.body.is_empty() {
            "split"
        } else {
            "coalesced"
        },
    )
}
