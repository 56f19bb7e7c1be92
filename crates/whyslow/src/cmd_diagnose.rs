//! `whyslow diagnose URL`: one report of where the time went and why.

use crate::flags::commands::DiagnoseArgs;
use crate::flags::exit::Exit;
use crate::stdout::{self, Done};
use crate::{interrupt_flag, runtime};
use whyslow_client::redact_url;
use whyslow_investigate::diagnose::{diagnose, DiagnoseOptions, LoadPhase};

pub fn run(args: DiagnoseArgs) -> Done {
    let usage = |msg: &str| {
        let target = Some(redact_url(&args.url));
        stdout::fail(args.output.json(), "diagnose", target, Exit::Usage, msg)
    };
    // Entered before any thread starts: the probes, the load and the
    // capture all run inside the workload's network namespace.
    let target = match args.target.one() {
        Ok(t) => t,
        Err(e) => return usage(&e),
    };
    if let Some(Err(e)) = target.as_ref().map(|t| t.enter()) {
        return usage(&e);
    }
    let spec = match args.request.spec(whyslow_client::TraceContext::Sampled) {
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
        ebpf: args.ebpf,
        target,
        keep_capture: args.save.clone(),
        flow: args.limits.bounds(),
        evidence: args.output.evidence(),
        service_keylog: args.keylog.keylog.clone(),
        load: match args
            .rate
            .map(|r| LoadPhase::new(r, &args.duration, args.connections))
        {
            Some(Err(e)) => return usage(&e),
            phase => phase.and_then(Result::ok),
        },
    };
    let d = runtime(1).block_on(async { diagnose(&opts, &interrupt_flag()).await });
    let failed = d.failure();
    let mut doc = d.document(&opts.spec);
    args.output.emit(
        &mut doc,
        |d| &mut d.report,
        |d| whyslow_report::html::report(&d.report, d.load.as_ref()),
        whyslow_report::diagnose::text,
    )?;
    Ok(match failed {
        Some(e) => {
            eprintln!("whyslow: {e}");
            e.kind.into()
        }
        None => Exit::Ok,
    })
}
