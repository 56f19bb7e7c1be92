//! `whyslow demo`: every lab scenario, broken and fixed, diagnosed.

use crate::flags::commands::DemoArgs;
use crate::flags::exit::Exit;
use crate::stdout::{self, Done};
use crate::{interrupt_flag, out, runtime};
use whyslow_investigate::demo;

pub fn run(args: DemoArgs) -> Done {
    let scenarios = demo::scenarios(&args.only);
    let hosts = demo::hosts_scenarios(&args.only);
    let reports = args.output.html.is_some();
    if let Some(dir) = &args.save {
        if let Err(e) = std::fs::create_dir_all(dir) {
            let why = format!("--save {}: {e}", dir.display());
            return stdout::fail(args.output.json(), "demo", None, Exit::Usage, &why);
        }
    }
    let doc = runtime(2).block_on(async {
        demo::run(
            &scenarios,
            &hosts,
            reports,
            args.save.as_deref(),
            &interrupt_flag(),
            |line| eprintln!("{line}"),
        )
        .await
    });
    args.output.write_html(|| whyslow_report::html::demo(&doc));
    if args.output.json() {
        stdout::json(&doc)?;
    } else {
        out!("{}", whyslow_report::demo::text(&doc))?;
    }
    let hosts_ran = doc.hosts.len() == hosts.len() * 2 || doc.hosts_not_run.is_some();
    let all_ran = doc.rows.len() == scenarios.len() * 2
        && doc.under_load.len() == doc.rows.len()
        && hosts_ran;
    Ok(match all_ran {
        true => Exit::Ok,
        false => Exit::Scenario,
    })
}
