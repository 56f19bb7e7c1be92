//! Everything a command prints on stdout goes through `print`: a reader that
//! goes away (`whyslow … | head`) ends the command quietly with exit 0, as
//! ripgrep does, once the files it was asked for (-o, --html, --save) are
//! written. SIGPIPE stays ignored, so a peer's reset on a socket is an error
//! on that socket and never the end of the run.

use crate::flags::exit::Exit;
use std::io::Write;
use whyslow_model::Report;
use whyslow_report::to_json;

/// Why a command stopped printing.
#[derive(Debug)]
pub enum Stop {
    /// The reader of stdout went away: stop quietly, exit 0.
    Closed,
    /// stdout could not be written (disk full): said on stderr.
    Failed,
}

impl Stop {
    pub fn exit(self) -> Exit {
        match self {
            Stop::Closed => Exit::Ok,
            Stop::Failed => Exit::WriteFailed,
        }
    }
}

/// How a command ended: its exit, or stdout gone.
pub type Done = Result<Exit, Stop>;

/// Writes `text` to stdout.
pub fn print(text: &str) -> Result<(), Stop> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Err(Stop::Closed),
        Err(e) => {
            eprintln!("whyslow: stdout: {e}");
            Err(Stop::Failed)
        }
    }
}

/// `print!` to stdout through `print`; evaluates to `Result<(), Stop>`.
#[macro_export]
macro_rules! out {
    ($($arg:tt)*) => { $crate::stdout::print(&format!($($arg)*)) };
}

/// A value as pretty JSON on stdout.
pub fn json<T: serde::Serialize>(value: &T) -> Result<(), Stop> {
    print(&(to_json(value) + "\n"))
}

/// A command that failed before it had a result: the message on stderr and,
/// under `--json`, a report of `command` holding it in `errors`, so a
/// machine reading stdout always gets a document.
pub fn fail(json: bool, command: &str, target: Option<String>, exit: Exit, msg: &str) -> Done {
    eprintln!("whyslow: {msg}");
    if json {
        let mut report = Report::new(command, target);
        report.errors.push(msg.to_string());
        self::json(&report)?;
    }
    Ok(exit)
}
