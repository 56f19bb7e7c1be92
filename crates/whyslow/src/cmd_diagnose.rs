//! `whyslow diagnose URL`: one report of where the time went and why.

use crate::flags::commands::DiagnoseArgs;
use crate::flags::exit::Exit;
use crate::stdout::{self, Done};
use crate::{interrupt_flag, out, runtime};
use whyslow_check::parse_duration;
use whyslow_client::{redact_url, ErrorKind};
use whyslow_investigate::diagnose::{diagnose, DiagnoseOptions, LoadPhase};
use whyslow_load::plan::check_rate;

pub fn run(args: DiagnoseArgs) -> Done {
    let usage = |msg: &str| {
        let target = Some(redact_url(&args.url));
        stdout::fail(args.output.json(), "diagnose", target, Exit::Usage, msg)
    };
    let spec = match args.request.spec() {
        Ok(s) => s,
        Err(e) => return usage(&e),
    };
    let opts = DiagnoseOptions {
        url: args.url.clone(),
        spec,
        tls: args.request.tls(),
        requests: args.requests.max(2),
        extra_ports: args.ports.clone(),
        iface: args.iface.clone(),
        capture: !args.no_capture,
        keep_capture: args.save.clone(),
        flow: args.limits.bounds(),
        evidence: args.output.evidence(),
        service_keylog: args.keylog.keylog.clone(),
        load: match args.rate.map(|r| check_rate(r, "--rate")) {
            Some(Err(e)) => return usage(&e),
            Some(Ok(rate)) => match parse_duration(&args.duration) {
                Ok(duration) => Some(LoadPhase {
                    rate,
                    duration,
                    connections: args.connections,
                }),
                Err(e) => return usage(&format!("--duration: {e}")),
            },
            None => None,
        },
    };
    let d = runtime(1).block_on(async { diagnose(&opts, &interrupt_flag()).await });
    let failed = d
        .patterns
        .iter()
        .find_map(|p| p.error.clone())
        .filter(|e| e.kind == ErrorKind::Interrupted || d.patterns[0].requests.is_empty());
    let mut doc = d.document(&opts.spec);
    crate::flags::output::write_html(args.output.html(), || {
        whyslow_report::html::report(&doc.report, doc.load.as_ref())
    });
    if args.output.json() {
        if !args.output.timeline {
            doc.report.timeline = None;
        }
        stdout::json(&doc)?;
    } else {
        out!("{}", whyslow_report::diagnose::text(&doc))?;
    }
    Ok(match failed {
        Some(e) => {
            eprintln!("whyslow: {e}");
            e.kind.into()
        }
        None => Exit::Ok,
    })
}
