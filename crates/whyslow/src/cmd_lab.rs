//! `whyslow lab list | run NAME [--fixed]`.

use crate::flags::commands::LabCommand;
use crate::flags::exit::Exit;
use crate::stdout::{self, Done};
use crate::{out, runtime};

pub fn run(cmd: LabCommand) -> Done {
    let (name, fixed, tls) = match cmd {
        LabCommand::List => {
            out!("{}", whyslow_lab::listing())?;
            return Ok(Exit::Ok);
        }
        LabCommand::Run { name, fixed, tls } => (name, fixed, tls),
    };
    let s = match whyslow_lab::named(&name) {
        Ok(s) => s,
        Err(e) => return stdout::fail(false, "lab", None, Exit::Usage, &e),
    };
    runtime(2).block_on(async {
        let started = match tls {
            true => s.start_tls(fixed).await,
            false => s.start(fixed).await,
        };
        let running = match started {
            Ok(r) => r,
            Err(e) => {
                eprintln!("whyslow: cannot start {name}: {e}");
                return Ok(Exit::Scenario);
            }
        };
        let keys = running.keylog.as_ref().map(|k| k.display());
        let keys = keys.map_or(String::new(), |k| {
            format!("key log: {k} (removed on exit)\n")
        });
        let variant = if fixed { s.fixed } else { s.broken };
        let (method, path, url) = (s.method, s.path, &running.url);
        out!("{url}\n{keys}{method} {path} ({variant}); Ctrl-C to stop\n")?;
        crate::ctrl_c().await;
        Ok(Exit::Ok)
    })
}
