//! whyslow: where did the milliseconds of this request go, and why?

mod cmd_analyze;
mod cmd_capture;
mod cmd_compare;
mod cmd_demo;
mod cmd_diagnose;
mod cmd_lab;
mod cmd_load;
mod cmd_merge;
mod cmd_probe;
mod cmd_use;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// Exit code when a --budget or --slo rule was broken.
pub const EXIT_BREACH: u8 = 1;
/// Exit code for bad arguments (clap uses it too).
pub const EXIT_USAGE: u8 = 2;

#[derive(Parser)]
#[command(
    name = "whyslow",
    version,
    about = "Find where the milliseconds of a request go, name the cause, prove the fix.",
    after_help = "Examples:\n  whyslow demo\n  whyslow probe -n 5 http://127.0.0.1:8080/\n  whyslow probe -X POST -d @body.json --nodelay off --write split http://127.0.0.1:8080/search\n  whyslow probe --budget 'total<2s,ttfb<500ms' https://example.com/"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Time N requests phase by phase (dns, connect, tls, send, wait, receive).
    Probe(cmd_probe::ProbeArgs),
    /// Live capture to pcapng: for a duration, while a command runs, or until Ctrl-C.
    Capture(cmd_capture::CaptureArgs),
    /// Rebuild connections and exchanges from a pcap/pcapng file and name what went wrong.
    #[command(after_help = whyslow_proto::bounds_help())]
    Analyze(cmd_analyze::AnalyzeArgs),
    /// Two results of the same command, percentile by percentile: what changed significantly.
    Compare(cmd_compare::CompareArgs),
    /// Every lab scenario, broken and fixed, diagnosed: the before/after table.
    Demo(cmd_demo::DemoArgs),
    /// Probe a URL while capturing its traffic: where the time went, and why.
    Diagnose(cmd_diagnose::DiagnoseArgs),
    /// The built-in lab: case studies as runnable scenarios.
    #[command(subcommand)]
    Lab(cmd_lab::LabCommand),
    /// Constant-rate (--rate) or closed-loop (-c) load; latency corrected for coordinated omission.
    Load(cmd_load::LoadArgs),
    /// The USE checklist of this host: utilization, saturation and errors per resource.
    Use(cmd_use::UseArgs),
    /// Combine `whyslow load -o` result files (several machines or runs) exactly.
    Merge(cmd_merge::MergeArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if matches!(
        cli.command,
        Command::Analyze(_) | Command::Compare(_) | Command::Merge(_)
    ) {
        stop_quietly_when_stdout_closes();
    }
    let code = match cli.command {
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
    };
    ExitCode::from(code)
}

/// Commands that only read files and print (`analyze … | head`) stop as
/// cat and grep do when their reader goes away, instead of panicking on the
/// failed write. Commands with sockets keep SIGPIPE ignored: a peer's reset
/// must be an error on that socket, not the end of the run.
fn stop_quietly_when_stdout_closes() {
    // SAFETY: called before any thread starts; SIG_DFL is a valid handler.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
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

#[cfg(test)]
mod tests {
    #[test]
    fn command_line_is_consistent() {
        use clap::CommandFactory;
        super::Cli::command().debug_assert();
    }
}
