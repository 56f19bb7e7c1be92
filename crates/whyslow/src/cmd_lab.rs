//! `whyslow lab list | run NAME [--fixed] | hosts NAME -w DIR | link A B
//! --delay D | tier KIND --listen ADDR`.

use crate::flags::commands::LabCommand;
use crate::flags::exit::Exit;
use crate::out;
use crate::stdout::{self, Done};

pub fn run(cmd: LabCommand) -> Done {
    let (name, fixed, tls) = match cmd {
        LabCommand::List => {
            out!("{}", whyslow_lab::listing())?;
            return Ok(Exit::Ok);
        }
        LabCommand::Run { name, fixed, tls } => (name, fixed, tls),
        LabCommand::Link { a, b, delay } => {
            let said = &mut |line: &str| drop(out!("{line}\n"));
            return finish(whyslow_lab::delay_line::link(&a, &b, delay, said));
        }
        LabCommand::Hosts {
            name,
            fixed,
            clients,
            requests,
            duration,
            dir,
        } => {
            let load = whyslow_lab::hosts::Load {
                clients,
                requests,
                duration,
            };
            let files = whyslow_lab::hosts::run_named(&name, fixed, load, &dir);
            let said = files.map(|f| f.iter().for_each(|f| drop(out!("{}\n", f.display()))));
            return finish(said);
        }
        LabCommand::Tier {
            kind,
            listen,
            to,
            fixed,
        } => {
            let said = &mut |line: &str| drop(out!("{line}\n"));
            return finish(whyslow_lab::hosts::tiers::run(
                &kind, listen, to, fixed, said,
            ));
        }
    };
    let s = match whyslow_lab::named(&name) {
        Ok(s) => s,
        Err(e) => return stdout::fail(false, "lab", None, Exit::Usage, &e),
    };
    let said = &mut |line: &str| drop(out!("{line}\n"));
    finish(s.serve_until_stopped(fixed, tls, said))
}

/// A lab command's end: its error said, if it failed.
fn finish(done: Result<(), String>) -> Done {
    match done {
        Ok(()) => Ok(Exit::Ok),
        Err(e) => stdout::fail(false, "lab", None, Exit::Scenario, &e),
    }
}
