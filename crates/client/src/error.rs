use std::fmt;

/// What went wrong, in the terms a person debugging the request uses.
/// The binary's exit codes for each kind (curl's, where curl has one) are
/// in its one exit-code table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    BadUrl,
    Dns,
    Refused,
    Timeout,
    Tls,
    Reset,
    /// The peer closed before a complete response.
    EmptyReply,
    Protocol,
    Io,
    /// Ctrl-C: the run was stopped, what completed is kept.
    Interrupted,
}

impl ErrorKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::BadUrl => "bad URL",
            ErrorKind::Dns => "name not resolved",
            ErrorKind::Refused => "connection refused",
            ErrorKind::Timeout => "timed out",
            ErrorKind::Tls => "TLS failure",
            ErrorKind::Reset => "connection reset",
            ErrorKind::EmptyReply => "connection closed before a complete response",
            ErrorKind::Protocol => "malformed response",
            ErrorKind::Io => "I/O error",
            ErrorKind::Interrupted => "interrupted",
        }
    }
}

/// A failed request: which phase it died in, and why.
#[derive(Debug, Clone)]
pub struct ProbeError {
    /// "url", "dns", "connect", "tls", "send", "wait", "receive".
    pub phase: &'static str,
    pub kind: ErrorKind,
    pub detail: String,
}

impl ProbeError {
    pub fn new(phase: &'static str, kind: ErrorKind, detail: impl Into<String>) -> Self {
        ProbeError {
            phase,
            kind,
            detail: detail.into(),
        }
    }

    /// Classifies an I/O error met during `phase`.
    pub fn io(phase: &'static str, e: &std::io::Error) -> Self {
        use std::io::ErrorKind as K;
        let kind = match e.kind() {
            K::ConnectionRefused => ErrorKind::Refused,
            K::ConnectionReset | K::ConnectionAborted | K::BrokenPipe => ErrorKind::Reset,
            K::TimedOut => ErrorKind::Timeout,
            K::UnexpectedEof => ErrorKind::EmptyReply,
            K::InvalidData => ErrorKind::Protocol,
            _ => ErrorKind::Io,
        };
        ProbeError::new(phase, kind, e.to_string())
    }

    pub fn timeout(phase: &'static str, after: std::time::Duration) -> Self {
        ProbeError::new(
            phase,
            ErrorKind::Timeout,
            format!("no progress within {:.1} s", after.as_secs_f64()),
        )
    }
}

impl fmt::Display for ProbeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} failed: {}: {}",
            self.phase,
            self.kind.as_str(),
            self.detail
        )
    }
}

impl std::error::Error for ProbeError {}
