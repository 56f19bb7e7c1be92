//! `whyslow capture`: live capture to pcapng, for a duration, while a command
//! runs, or until Ctrl-C.

use crate::flags::commands::CaptureArgs;
use crate::flags::exit::Exit;
use crate::stdout::{self, Done};
use whyslow_check::parse_duration;
use whyslow_investigate::record::{record, RecordError, Recording};

pub fn run(args: CaptureArgs) -> Done {
    let duration = match args.duration.as_deref().map(parse_duration).transpose() {
        Ok(d) => d,
        Err(e) => {
            let msg = format!("--duration: {e}");
            return stdout::fail(false, "capture", None, Exit::Usage, &msg);
        }
    };
    let job = Recording {
        iface: args.iface.clone(),
        ports: args.ports.clone(),
        file: args.file.clone(),
        duration,
        command: args.command.clone(),
    };
    let waiting = || eprintln!("capturing on {} until Ctrl-C …", args.iface);
    Ok(match record(&job, waiting) {
        Ok(done) => {
            let s = done.stats;
            let file = args.file.display();
            let drops = s.drops_line();
            eprintln!(
                "{} packets ({} bytes) written to {file}; {drops}",
                s.packets, s.bytes
            );
            match done.command.and_then(|s| s.code()) {
                Some(c) => Exit::Child(c as u8),
                None => Exit::Ok,
            }
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
