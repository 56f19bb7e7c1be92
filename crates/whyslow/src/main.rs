//! whyslow: where did the milliseconds of this request go, and why?

mod cmd_agent;
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
        Command::Receive(args) => cmd_analyze::receive(args),
        Command::Capture(args) => cmd_capture::run(args),
        Command::Agent(args) => cmd_agent::run(args),
        Command::Diagnose(args) => cmd_diagnose::run(args),
        Command::Demo(args) => cmd_demo::run(args),
        Command::Compare(args) => cmd_compare::run(args),
        Command::Use(args) => cmd_use::run(args),
        Command::Completions(args) => cmd_docs::completions(args),
        Command::Man => cmd_docs::man(),
    };
    ExitCode::from(done.unwrap_or_else(stdout::Stop::exit).code())
}

pub use whyslow_investigate::{ctrl_c, interrupt_flag, runtime};
