//! `whyslow completions SHELL` and `whyslow man`: generated from the one flag tree.

use crate::flags::{self, commands::CompletionsArgs, exit};
use crate::stdout::{self, Done};
use whyslow_report::man::{page, Closing};

pub fn completions(args: CompletionsArgs) -> Done {
    let mut cmd = flags::command();
    let mut script = Vec::new();
    clap_complete::generate(args.shell, &mut cmd, "whyslow", &mut script);
    stdout::print(&String::from_utf8_lossy(&script))?;
    Ok(exit::Exit::Ok)
}

/// One page, closing with the examples and exit codes `--help` shows.
pub fn man() -> Done {
    let closing = Closing {
        examples: flags::EXAMPLES,
        exits: exit::TABLE.iter().map(|(e, m)| (e.code(), *m)).collect(),
        notes: &[exit::NETWORK_NOTE, exit::CHILD_NOTE],
    };
    match page(&flags::command(), &closing) {
        Ok(text) => stdout::print(&text).map(|()| exit::Exit::Ok),
        Err(e) => {
            eprintln!("whyslow: man: {e}");
            Ok(exit::Exit::WriteFailed)
        }
    }
}
