//! `whyslow lab list | run NAME [--fixed] | hosts NAME -w DIR | link A B
//! --delay D | tier KIND --listen ADDR`.

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
        LabCommand::Link { a, b, delay } => return link(&a, &b, delay),
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
            return hosts(&name, fixed, load, &dir);
        }
        LabCommand::Tier {
            kind,
            listen,
            to,
            fixed,
        } => return tier(&kind, listen, to, fixed),
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

/// `lab link`: the two devices made, "ready" said, frames carried until
/// the process is stopped.
fn link(a: &str, b: &str, delay: std::time::Duration) -> Done {
    use whyslow_lab::delay_line::{carry, open_tap};
    let opened = open_tap(a).and_then(|ta| Ok((ta, open_tap(b)?)));
    let (ta, tb) = match opened {
        Ok(t) => t,
        Err(e) => {
            let msg = format!("cannot make TAP devices {a} and {b}: {e} (needs CAP_NET_ADMIN)");
            return stdout::fail(false, "lab", None, Exit::Usage, &msg);
        }
    };
    out!(
        "ready: {a} <-> {b}, {} each way\n",
        whyslow_model::fmt_ms(delay.as_micros() as u64)
    )?;
    match carry(ta, tb, delay) {
        Ok(()) => Ok(Exit::Ok),
        Err(e) => stdout::fail(false, "lab", None, Exit::Scenario, &format!("link: {e}")),
    }
}

/// `lab hosts`: the scenario run on its hosts, their captures written.
fn hosts(name: &str, fixed: bool, load: whyslow_lab::hosts::Load, dir: &std::path::Path) -> Done {
    use whyslow_lab::hosts;
    let s = match hosts::named(name) {
        Ok(s) => s,
        Err(e) => return stdout::fail(false, "lab", None, Exit::Usage, &e),
    };
    let exe = match std::env::current_exe() {
        Ok(exe) => exe,
        Err(e) => return stdout::fail(false, "lab", None, Exit::Scenario, &e.to_string()),
    };
    match hosts::run(s, fixed, load, dir, &exe) {
        Ok(files) => {
            for f in files {
                out!("{}\n", f.display())?;
            }
            Ok(Exit::Ok)
        }
        Err(e) => stdout::fail(false, "lab", None, Exit::Scenario, &e),
    }
}

/// `lab tier`: one service of a scenario on several hosts, "ready" said
/// once it listens.
fn tier(
    kind: &str,
    listen: std::net::SocketAddr,
    to: Option<std::net::SocketAddr>,
    fixed: bool,
) -> Done {
    use whyslow_lab::hosts::tiers;
    let tier = match tiers::Tier::parse(kind, to, fixed) {
        Ok(t) => t,
        Err(e) => return stdout::fail(false, "lab", None, Exit::Usage, &e),
    };
    runtime(2).block_on(async {
        let listener = match tokio::net::TcpListener::bind(listen).await {
            Ok(l) => l,
            Err(e) => {
                let msg = format!("cannot listen on {listen}: {e}");
                return stdout::fail(false, "lab", None, Exit::Scenario, &msg);
            }
        };
        out!("ready: {kind} on {listen}\n")?;
        tokio::select! {
            _ = tiers::serve(tier, listener) => {}
            _ = crate::ctrl_c() => {}
        }
        Ok(Exit::Ok)
    })
}
