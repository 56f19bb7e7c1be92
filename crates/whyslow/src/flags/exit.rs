//! Exit codes: one table, one meaning per code. Every command maps its
//! outcome through `Exit`; `whyslow --help`, `whyslow man` and the README
//! show `TABLE`. Network errors keep curl's numbers, so scripts that wrap
//! curl keep working.

use whyslow_client::ErrorKind;

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    Ok,
    Breach,
    Usage,
    BadUrl,
    NotACapture,
    CaptureFailed,
    Dns,
    Refused,
    Protocol,
    PartialCapture,
    Scenario,
    WriteFailed,
    Timeout,
    Tls,
    EmptyReply,
    Reset,
    CannotRun,
    Interrupted,
    /// `capture -- COMMAND`: the command's own exit status, passed on.
    Child(u8),
}

impl Exit {
    /// The process exit status.
    pub const fn code(self) -> u8 {
        match self {
            Exit::Ok => 0,
            Exit::Breach => 1,
            Exit::Usage => 2,
            Exit::BadUrl => 3,
            Exit::NotACapture => 4,
            Exit::CaptureFailed => 5,
            Exit::Dns => 6,
            Exit::Refused => 7,
            Exit::Protocol => 8,
            Exit::PartialCapture => 9,
            Exit::Scenario => 10,
            Exit::WriteFailed => 23,
            Exit::Timeout => 28,
            Exit::Tls => 35,
            Exit::EmptyReply => 52,
            Exit::Reset => 56,
            Exit::CannotRun => 127,
            // 128 + SIGINT, as shells report a process stopped by Ctrl-C.
            Exit::Interrupted => 130,
            Exit::Child(c) => c,
        }
    }
}

impl From<ErrorKind> for Exit {
    /// A failed request's exit: curl's code for the same failure.
    fn from(kind: ErrorKind) -> Exit {
        match kind {
            ErrorKind::BadUrl => Exit::BadUrl,
            ErrorKind::Dns => Exit::Dns,
            ErrorKind::Refused => Exit::Refused,
            ErrorKind::Timeout => Exit::Timeout,
            ErrorKind::Tls => Exit::Tls,
            ErrorKind::EmptyReply => Exit::EmptyReply,
            ErrorKind::Reset | ErrorKind::Io => Exit::Reset,
            ErrorKind::Protocol => Exit::Protocol,
            ErrorKind::Interrupted => Exit::Interrupted,
        }
    }
}

/// Every exit status with its meaning, in the order they are shown.
pub const TABLE: &[(Exit, &str)] = &[
    (
        Exit::Ok,
        "success (also when the reader of stdout went away: `whyslow … | head`)",
    ),
    (
        Exit::Breach,
        "a --budget or --slo rule was broken, or a compare --fail-if gate crossed (the report names it)",
    ),
    (Exit::Usage, "bad arguments"),
    (Exit::BadUrl, "bad URL (curl's 3)"),
    (
        Exit::NotACapture,
        "analyze: the file cannot be read as a pcap/pcapng capture",
    ),
    (
        Exit::CaptureFailed,
        "capture: live capture could not start (no CAP_NET_RAW, no such interface); receive: cannot listen",
    ),
    (Exit::Dns, "name not resolved (curl's 6)"),
    (Exit::Refused, "connection refused (curl's 7)"),
    (Exit::Protocol, "malformed response (curl's 8)"),
    (
        Exit::PartialCapture,
        "analyze: the capture is truncated or corrupt; the result covers what was read",
    ),
    (
        Exit::Scenario,
        "lab run: the scenario could not start; demo: a scenario could not run (the table covers the others)",
    ),
    (
        Exit::WriteFailed,
        "stdout or a merge -o file could not be written (curl's 23)",
    ),
    (Exit::Timeout, "timed out (curl's 28)"),
    (Exit::Tls, "TLS handshake failed (curl's 35)"),
    (
        Exit::EmptyReply,
        "connection closed before a complete response (curl's 52)",
    ),
    (Exit::Reset, "connection reset, or another I/O error (curl's 56)"),
    (
        Exit::CannotRun,
        "capture -- COMMAND: the command could not be started",
    ),
    (
        Exit::Interrupted,
        "stopped by Ctrl-C; what was measured is reported",
    ),
];

/// What `capture -- COMMAND` returns besides the table's codes.
pub const CHILD_NOTE: &str = "capture -- COMMAND otherwise exits with the command's own status.";

/// The network failures (probe, load, diagnose) print the requests that
/// completed before the error.
pub const NETWORK_NOTE: &str =
    "After a network error (3, 6, 7, 8, 28, 35, 52, 56) the requests completed before it are still printed.";

/// The table as `--help` and `whyslow man` show it.
pub fn help() -> String {
    let mut s = String::from("Exit status:\n");
    for (exit, meaning) in TABLE {
        s.push_str(&format!("  {:>3}  {meaning}\n", exit.code()));
    }
    s.push_str(&format!("  {NETWORK_NOTE}\n  {CHILD_NOTE}"));
    s
}
