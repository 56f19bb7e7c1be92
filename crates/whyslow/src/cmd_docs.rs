//! `whyslow completions SHELL` and `whyslow man`: generated from the one flag tree.

use crate::flags::{self, commands::CompletionsArgs, exit::Exit};
use crate::stdout::{self, Done};

pub fn completions(args: CompletionsArgs) -> Done {
    let mut cmd = flags::command();
    let mut script = Vec::new();
    clap_complete::generate(args.shell, &mut cmd, "whyslow", &mut script);
    stdout::print(&String::from_utf8_lossy(&script))?;
    Ok(Exit::Ok)
}

/// One page: the top-level command (its help closes with the exit codes),
/// then a section per command with its description and options.
pub fn man() -> Done {
    let cmd = flags::command();
    let mut page = Vec::new();
    let top = clap_mangen::Man::new(cmd.clone());
    let rendered = top
        .render_title(&mut page)
        .and_then(|()| top.render_name_section(&mut page))
        .and_then(|()| top.render_synopsis_section(&mut page))
        .and_then(|()| top.render_description_section(&mut page))
        .and_then(|()| top.render_options_section(&mut page))
        .and_then(|()| commands(&cmd, &mut page))
        .and_then(|()| closing(&mut page))
        .and_then(|()| top.render_version_section(&mut page));
    if let Err(e) = rendered {
        eprintln!("whyslow: man: {e}");
        return Ok(Exit::WriteFailed);
    }
    stdout::print(&String::from_utf8_lossy(&page))?;
    Ok(Exit::Ok)
}

/// EXAMPLES and EXIT STATUS, from the same texts `whyslow --help` shows.
fn closing(page: &mut Vec<u8>) -> std::io::Result<()> {
    use std::io::Write;
    let examples = flags::EXAMPLES.trim_start_matches("Examples:\n");
    writeln!(page, ".SH EXAMPLES\n.nf\n{}\n.fi", roff_text(examples))?;
    writeln!(page, ".SH \"EXIT STATUS\"")?;
    for (exit, meaning) in flags::exit::TABLE {
        writeln!(page, ".TP\n{}\n{}", exit.code(), roff_text(meaning))?;
    }
    for note in [flags::exit::NETWORK_NOTE, flags::exit::CHILD_NOTE] {
        writeln!(page, ".PP\n{}", roff_text(note))?;
    }
    Ok(())
}

/// A section per command (`lab run` and `lab list` included): what it does,
/// its synopsis, its options and its examples.
fn commands(cmd: &clap::Command, page: &mut Vec<u8>) -> std::io::Result<()> {
    use std::io::Write;
    for sub in cmd.get_subcommands().filter(|s| s.get_name() != "help") {
        let mut leaves = vec![(sub.get_name().to_string(), sub.clone())];
        if sub.has_subcommands() {
            leaves = sub
                .get_subcommands()
                .filter(|s| s.get_name() != "help")
                .map(|s| (format!("{} {}", sub.get_name(), s.get_name()), s.clone()))
                .collect();
        }
        for (name, leaf) in leaves {
            let leaf = leaf.name(format!("whyslow {name}"));
            writeln!(page, ".SH \"WHYSLOW {}\"", name.to_uppercase())?;
            let man = clap_mangen::Man::new(leaf.clone());
            if let Some(about) = leaf.get_about() {
                writeln!(page, "{}", roff_text(&about.to_string()))?;
            }
            man.render_synopsis_section(page)?;
            if leaf.get_arguments().any(|a| !a.is_hide_set()) {
                man.render_options_section(page)?;
            }
            if let Some(after) = leaf.get_after_help() {
                writeln!(page, ".PP\n.nf\n{}\n.fi", roff_text(&after.to_string()))?;
            }
        }
    }
    Ok(())
}

/// Text safe inside a roff page: no line may start with a control character.
fn roff_text(s: &str) -> String {
    s.replace('\\', "\\\\")
        .lines()
        .map(|l| match l.starts_with(['.', '\'']) {
            true => format!("\\&{l}"),
            false => l.to_string(),
        })
        .collect::<Vec<_>>()
        .join("\n")
}
