//! `whyslow agent`: windows of the node's or some containers' traffic,
//! each analyzed and said, until Ctrl-C, SIGTERM or `--windows`.

use crate::flags::commands::AgentArgs;
use crate::flags::exit::Exit;
use crate::out;
use crate::stdout::Done;
use whyslow_agent::AgentOptions;

pub fn run(args: AgentArgs) -> Done {
    let targets = match args.target.all() {
        Ok(t) => t,
        Err(e) => {
            eprintln!("whyslow: {e}");
            return Ok(Exit::Usage);
        }
    };
    let otlp_endpoint = match args.export.destination() {
        Ok(d) => d,
        Err(e) => {
            eprintln!("whyslow: --otlp-endpoint {e}");
            return Ok(Exit::Usage);
        }
    };
    let per_window = args.window.as_secs_f64().max(1e-3);
    let opts = AgentOptions {
        targets,
        iface: args.iface,
        ports: args.ports,
        service: (!args.service.is_empty()).then_some(args.service),
        window: args.window,
        windows: args.windows,
        dir: args
            .dir
            .unwrap_or_else(|| std::env::temp_dir().join("whyslow-agent")),
        keep_windows: (args.keep.as_secs_f64() / per_window).ceil() as u64,
        keep_bytes: args.keep_size,
        otlp_endpoint,
        ebpf: args.ebpf,
    };
    let stop = whyslow_investigate::record::stop_signal();
    let mut said = Ok(());
    let json = args.json;
    let ran = whyslow_agent::run(&opts, stop, &mut |w| {
        if said.is_ok() {
            said = match json {
                true => out!("{}\n", serde_json::to_string(w).unwrap_or_default()),
                false => out!("{}", whyslow_report::agent::window_text(w)),
            };
        }
    });
    said?;
    Ok(match ran {
        Ok(_) => Exit::Ok,
        Err(e) => {
            eprintln!("whyslow: {e}");
            Exit::CaptureFailed
        }
    })
}
