//! whyslow: where did the milliseconds of this request go, and why?

mod cmd_analyze;
mod cmd_capture;
mod cmd_compare;
mod cmd_demo;
mod cmd_diagnose;
mod cmd_docs;
mod cmd_lab;
mod cmd_load;
mod cmd_merge;
mod cmd_probe;
mod cmd_use;
mod flags;
mod stdout;

use clap::Parser;
use flags::{Cli, Command};
use std::process::ExitCode;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let done = match cli.command {
        Command::Probe(args) => cmd_probe::run(args),
        Command::Lab(cmd) => cmd_lab::run(cmd),
        Command::Load(args) => cmd_load::run(args),
        Command::Merge(args) => cmd_merge::run(args),
        Command::Analyze(args) => cmd_analyze::run(args),
        Command::Capture(args) => cmd_capture::run(args),
        Command::Diagnose(args) => cmd_diagnose::run(args),
        Command::Demo(args) => cmd_demo::run(args),
        Command::Compare(args) => cmd_compare::run(args),
        Command::Use(args) => cmd_use::run(args),
        Command::Completions(args) => cmd_docs::completions(args),
        Command::Man => cmd_docs::man(),
    };
    ExitCode::from(done.unwrap_or_else(stdout::Stop::exit).code())
}

/// Completes on Ctrl-C (SIGINT). Commands race it against their work so that
/// what was measured before the interrupt is still reported.
pub async fn ctrl_c() {
    if tokio::signal::ctrl_c().await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// A flag that turns true on Ctrl-C, for commands that run several steps and
/// must stop between (or inside) them. Call inside a runtime.
pub fn interrupt_flag() -> tokio::sync::watch::Receiver<bool> {
    let (tx, rx) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        ctrl_c().await;
        let _ = tx.send(true);
    });
    rx
}

pub use whyslow_investigate::interrupted;

/// A runtime for one command. Probes use a single thread so that timings
/// are not disturbed by work stealing.
pub fn runtime(threads: usize) -> tokio::runtime::Runtime {
    let mut b = if threads <= 1 {
        tokio::runtime::Builder::new_current_thread()
    } else {
        let mut b = tokio::runtime::Builder::new_multi_thread();
        b.worker_threads(threads);
        b
    };
    b.enable_all().build().expect("tokio runtime")
}
