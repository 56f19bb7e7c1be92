//! The manual page (roff) of a command tree: one page, the top-level
//! command first, then a section per command with its synopsis, options
//! and examples, closing with EXAMPLES and EXIT STATUS.

use std::io::Write;

/// What closes the page besides the commands.
pub struct Closing<'a> {
    pub examples: &'a str,
    /// Each exit status and its meaning.
    pub exits: Vec<(u8, &'a str)>,
    pub notes: &'a [&'a str],
}

pub fn page(cmd: &clap::Command, closing: &Closing) -> std::io::Result<String> {
    let mut page = Vec::new();
    let top = clap_mangen::Man::new(cmd.clone());
    top.render_title(&mut page)?;
    top.render_name_section(&mut page)?;
    top.render_synopsis_section(&mut page)?;
    top.render_description_section(&mut page)?;
    top.render_options_section(&mut page)?;
    commands(cmd, &mut page)?;
    let examples = closing.examples.trim_start_matches("Examples:\n");
    writeln!(page, ".SH EXAMPLES\n.nf\n{}\n.fi", roff_text(examples))?;
    writeln!(page, ".SH \"EXIT STATUS\"")?;
    for (code, meaning) in &closing.exits {
        writeln!(page, ".TP\n{code}\n{}", roff_text(meaning))?;
    }
    for note in closing.notes {
        writeln!(page, ".PP\n{}", roff_text(note))?;
    }
    top.render_version_section(&mut page)?;
    Ok(String::from_utf8_lossy(&page).into_owned())
}

/// A section per command (`lab run` and `lab list` included): what it does,
/// its synopsis, its options and its examples.
fn commands(cmd: &clap::Command, page: &mut Vec<u8>) -> std::io::Result<()> {
    let bin = cmd.get_name();
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
            let leaf = leaf.name(format!("{bin} {name}"));
            writeln!(
                page,
                ".SH \"{} {}\"",
                bin.to_uppercase(),
                name.to_uppercase()
            )?;
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

#[cfg(test)]
mod tests {
    use super::roff_text;

    #[test]
    fn lines_starting_with_a_control_character_are_escaped() {
        assert_eq!(
            roff_text(".hidden\n'quote\nplain \\n"),
            "\\&.hidden\n\\&'quote\nplain \\\\n"
        );
    }
}
