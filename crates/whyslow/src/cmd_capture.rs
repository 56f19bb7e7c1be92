//! `whyslow capture`: live capture to pcapng, for a duration, while a command
//! runs, or until Ctrl-C.

use crate::flags::commands::CaptureArgs;
use crate::flags::exit::Exit;
use crate::stdout::Done;
use whyslow_investigate::record::{record, RecordError, Recording, Traced};

pub fn run(args: CaptureArgs) -> Done {
    let target = match args.target.one() {
        Ok(t) => t,
        Err(e) => {
            eprintln!("whyslow: {e}");
            return Ok(Exit::Usage);
        }
    };
    // A container is traced by its cgroup; processes by their pids.
    let cgroup = match &target {
        Some(t) if !args.target.container.is_empty() => t.workload.cgroup.clone(),
        _ => args.target.cgroup.clone(),
    };
    let job = Recording {
        iface: args.iface.clone(),
        ports: args.ports.clone(),
        file: args.file.clone(),
        duration: args.duration,
        command: args.command.clone(),
        ebpf: args.ebpf.then(|| Traced {
            pids: args.target.pid.clone(),
            cgroup,
        }),
        target,
    };
    let place = job
        .target
        .as_ref()
        .map_or(String::new(), |t| format!(" {}", t.said()));
    let waiting = || eprintln!("capturing on {}{place} until Ctrl-C …", args.iface);
    Ok(match record(&job, waiting) {
        Ok(done) => {
            eprintln!("{}", done.summary(&args.file));
            let code = done.command.and_then(|s| s.code());
            code.map_or(Exit::Ok, |c| Exit::Child(c as u8))
        }
        Err(e) => {
            let (exit, msg) = match e {
                RecordError::Start(m) | RecordError::Capture(m) => (Exit::CaptureFailed, m),
                RecordError::Command(m) => (Exit::CannotRun, m),
            };
            eprintln!("whyslow: {msg}");
            exit
        }
    })
}
