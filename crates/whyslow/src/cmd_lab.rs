//! `whyslow lab list | run NAME [--fixed]`.

use crate::runtime;
use clap::Subcommand;

#[derive(Subcommand)]
pub enum LabCommand {
    /// List the scenarios
    List,
    /// Start a scenario, print its URL, serve until Ctrl-C
    Run {
        name: String,
        /// Run the fixed variant
        #[arg(long)]
        fixed: bool,
        /// Every hop over TLS (scenarios that have that variant); the lab's
        /// secrets go to a key log for `diagnose --keylog` and `analyze --keylog`
        #[arg(long)]
        tls: bool,
    },
}

pub fn run(cmd: LabCommand) -> u8 {
    match cmd {
        LabCommand::List => {
            for s in whyslow_lab::SCENARIOS {
                println!("{:<12} case {:<4} {}", s.name, s.case, s.summary);
                println!("{:<12}   broken: {}", "", s.broken);
                println!("{:<12}   fixed:  {}", "", s.fixed);
                if s.tls.is_some() {
                    println!("{:<12}   also over TLS (--tls)", "");
                }
            }
            0
        }
        LabCommand::Run { name, fixed, tls } => {
            let Some(s) = whyslow_lab::find(&name) else {
                let names: Vec<&str> = whyslow_lab::SCENARIOS.iter().map(|s| s.name).collect();
                return crate::cmd_probe::usage(&format!(
                    "no scenario {name:?} (one of: {})",
                    names.join(", ")
                ));
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
                        return 1;
                    }
                };
                println!("{}", running.url);
                if let Some(keys) = &running.keylog {
                    println!("key log: {} (removed on exit)", keys.display());
                }
                println!(
                    "{} {} ({}); Ctrl-C to stop",
                    s.method,
                    s.path,
                    if fixed { s.fixed } else { s.broken }
                );
                let _ = tokio::signal::ctrl_c().await;
                0
            })
        }
    }
}
