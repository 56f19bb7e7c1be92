//! The command line, all of it: the top-level `Cli`, each command's
//! arguments (`commands`), and the groups several commands share, defined
//! once and flattened where used: output (`--json`, `--html`, `--timeline`),
//! request (`-X -d -H` …), capture limits (`--max-events` …), key logs
//! (`--keylog` reads, `--keylog-out` writes). Exit codes are in `exit`.
//! Completions and the man page are generated from this one tree.

pub mod commands;
pub mod exit;
pub mod keylog;
pub mod limits;
pub mod otlp;
pub mod output;
pub mod request;
pub mod target;

use clap::{Parser, Subcommand};
use commands::*;

/// Examples under the top-level help.
pub const EXAMPLES: &str = "Examples:
  whyslow demo
  whyslow probe -n 5 http://127.0.0.1:8080/
  whyslow probe -X POST -d @body.json --nodelay off --write split http://127.0.0.1:8080/search
  whyslow probe --budget 'total<2s,ttfb<500ms' https://example.com/
  whyslow completions bash > /etc/bash_completion.d/whyslow
  whyslow man > /usr/local/share/man/man1/whyslow.1";

/// The top-level help's closing text: examples, then the exit codes.
pub fn after_help() -> String {
    format!("{EXAMPLES}\n\n{}", exit::help())
}

#[derive(Parser, Debug)]
#[command(
    name = "whyslow",
    version,
    about = "Find where the milliseconds of a request go, name the cause, prove the fix.",
    after_help = after_help()
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Time N requests phase by phase (dns, connect, tls, send, wait, receive).
    Probe(ProbeArgs),
    /// Live capture to pcapng: for a duration, while a command runs, or until Ctrl-C.
    Capture(CaptureArgs),
    /// Run until stopped: the node's (or some containers') traffic analyzed in windows, each window's causes said.
    Agent(AgentArgs),
    /// Rebuild connections and exchanges from a pcap/pcapng file (or OTLP traces) and name what went wrong.
    #[command(after_help = whyslow_proto::bounds_help())]
    Analyze(AnalyzeArgs),
    /// Take OTLP spans (HTTP or gRPC) from SDKs or a collector, then name what went wrong as analyze does.
    Receive(ReceiveArgs),
    /// Two results of the same command, percentile by percentile: what changed significantly.
    Compare(CompareArgs),
    /// Every lab scenario, broken and fixed, diagnosed: the before/after table.
    Demo(DemoArgs),
    /// Probe a URL while capturing its traffic: where the time went, and why.
    Diagnose(DiagnoseArgs),
    /// The built-in lab: case studies as runnable scenarios.
    #[command(subcommand)]
    Lab(LabCommand),
    /// Constant-rate (--rate) or closed-loop (-c) load; latency corrected for coordinated omission.
    Load(LoadArgs),
    /// The USE checklist of this host: utilization, saturation and errors per resource.
    Use(UseArgs),
    /// Combine `whyslow load -o` result files (several machines or runs) exactly.
    Merge(MergeArgs),
    /// Shell completions from this command line: bash, zsh, fish, elvish, powershell.
    Completions(CompletionsArgs),
    /// The manual page (roff), every command and flag: `whyslow man | man -l -`.
    Man,
}

/// The clap command tree, for completions and the man page.
pub fn command() -> clap::Command {
    <Cli as clap::CommandFactory>::command()
}

#[cfg(test)]
mod tests {
    #[test]
    fn command_line_is_consistent() {
        super::command().debug_assert();
    }
}
