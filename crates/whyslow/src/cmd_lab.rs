//! `whyslow lab list | run NAME [--fixed]`.

use crate::flags::commands::LabCommand;
use crate::flags::exit::Exit;
use crate::stdout::{usage, Done};
use crate::{outln, runtime};

pub fn run(cmd: LabCommand) -> Done {
    match cmd {
        LabCommand::List => {
            for s in whyslow_lab::SCENARIOS {
                outln!("{:<12} case {:<4} {}", s.name, s.case, s.summary)?;
                outln!("{:<12}   broken: {}", "", s.broken)?;
                outln!("{:<12}   fixed:  {}", "", s.fixed)?;
                if s.tls.is_some() {
                    outln!("{:<12}   also over TLS (--tls)", "")?;
                }
            }
            Ok(Exit::Ok)
        }
        LabCommand::Run { name, fixed, tls } => {
            let Some(s) = whyslow_lab::find(&name) else {
                let names: Vec<&str> = whyslow_lab::SCENARIOS.iter().map(|s| s.name).collect();
                return Ok(usage(&format!(
                    "no scenario {name:?} (one of: {})",
                    names.join(", ")
                )));
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
                outln!("{}", running.url)?;
                if let Some(keys) = &running.keylog {
                    outln!("key log: {} (removed on exit)", keys.display())?;
                }
                outln!(
                    "{} {} ({}); Ctrl-C to stop",
                    s.method,
                    s.path,
                    if fixed { s.fixed } else { s.broken }
                )?;
                let _ = tokio::signal::ctrl_c().await;
                Ok(Exit::Ok)
            })
        }
    }
}
