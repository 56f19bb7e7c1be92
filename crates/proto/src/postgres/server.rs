//! Backend messages: each answers the front `Wait` (the server answers in
//! order); ReadyForQuery closes a Query/Sync/FunctionCall and gives the
//! transaction state. Only SQLSTATEs, command tags and status bytes are read.

use super::frame::{GSSENC_REQUEST, SSL_REQUEST};
use super::queue::Wait;
use super::PgAnalyzer;
use crate::Span;
use whyslow_model::{SmolStr, Status, TxState};

/// CommandComplete tags are short ("INSERT 0 1", "SELECT 5"); the server
/// builds them in a 64-byte buffer (COMPLETION_TAG_BUFSIZE).
const MAX_TAG: usize = 64;
/// ErrorResponse bytes read for the SQLSTATE: it comes after the severity
/// fields (S, V), within the first ~30 bytes; the message after is not kept.
const MAX_ERROR_HEAD: usize = 256;
/// SQLSTATE reported when an ErrorResponse's code was not seen.
pub const UNKNOWN_SQLSTATE: &str = "?????";

/// The `C` (SQLSTATE) field of an ErrorResponse; nothing else is read.
fn sqlstate(buf: &[u8]) -> String {
    let mut rest = buf;
    while let Some((&field, tail)) = rest.split_first() {
        if field == 0 {
            break;
        }
        let end = tail.iter().position(|&b| b == 0).unwrap_or(tail.len());
        let value = &tail[..end];
        if field == b'C' && value.len() == 5 && value.iter().all(u8::is_ascii_alphanumeric) {
            return String::from_utf8_lossy(value).into_owned();
        }
        rest = tail.get(end + 1..).unwrap_or(&[]);
    }
    UNKNOWN_SQLSTATE.to_string()
}

/// Rows from a CommandComplete tag: its last number ("INSERT 0 1" → 1).
fn tag_rows(buf: &[u8]) -> Option<u64> {
    let tag = buf.split(|&b| b == 0).next()?;
    let last = tag.split(|&b| b == b' ').next_back()?;
    std::str::from_utf8(last).ok()?.parse().ok()
}

/// A command tag's first word (SELECT, INSERT, COMMIT), when it is one:
/// a short run of capitals.
fn tag_verb(buf: &[u8]) -> Option<SmolStr> {
    let tag = buf.split(|&b| b == 0).next()?;
    let word = tag.split(|&b| b == b' ').next()?;
    if !(1..=MAX_VERB).contains(&word.len()) || !word.iter().all(u8::is_ascii_uppercase) {
        return None;
    }
    std::str::from_utf8(word).ok().map(SmolStr::from)
}

/// Longest command verb kept: PostgreSQL's tags begin with words of at
/// most 8 letters (REFRESH, ROLLBACK); the bound only refuses garbage.
const MAX_VERB: usize = 16;

fn tx_state(status: u8) -> Option<TxState> {
    match status {
        b'I' => Some(TxState::Idle),
        b'T' => Some(TxState::InTransaction),
        b'E' => Some(TxState::Failed),
        _ => None,
    }
}

impl PgAnalyzer {
    pub(super) fn server_start(&mut self, kind: u8, body: u32) {
        let cap = match kind {
            b'C' => MAX_TAG,
            b'E' => MAX_ERROR_HEAD,
            b'Z' => 1,
            // A DataRow's column count.
            b'D' => 2,
            _ => 0,
        };
        self.smsg.start(kind, 0, body, cap);
    }

    /// The one-byte answer to SSLRequest/GSSENCRequest.
    pub(super) fn negotiated(&mut self, b: u8) {
        let what = std::mem::take(&mut self.negotiating);
        let note = match (what, b) {
            (SSL_REQUEST | GSSENC_REQUEST, b'N') => return,
            (SSL_REQUEST, b'S') => {
                self.tls_follows = true;
                "TLS after SSLRequest"
            }
            (GSSENC_REQUEST, b'G') => "GSSAPI encryption after GSSENCRequest",
            _ => "unexpected answer to SSLRequest/GSSENCRequest",
        };
        self.note(note);
        self.client.stop();
        self.server.stop();
    }

    pub(super) fn server_end(&mut self) {
        let span = std::mem::take(&mut self.smsg.span);
        let kind = self.smsg.kind;
        match kind {
            b'Z' => {
                let status = self.smsg.buf.first().copied().unwrap_or(0);
                self.ready(status);
            }
            // Asynchronous or authentication: paired with nothing.
            b'S' | b'K' | b'N' | b'A' | b'R' | b'v' => {}
            _ if self.server_discard => {}
            _ => {
                if let Some(&front) = self.queue.waits.front() {
                    self.answer(front, kind, &span);
                }
            }
        }
    }

    fn error_status(&self) -> Status {
        let code = if self.smsg.damaged {
            UNKNOWN_SQLSTATE.to_string()
        } else {
            sqlstate(&self.smsg.buf)
        };
        Status::Sqlstate(code)
    }

    /// Records one answer on exchange `ex`: its bytes, and status or rows.
    fn record(&mut self, ex: Option<u64>, kind: u8, span: &Span) {
        let status = (kind == b'E').then(|| self.error_status());
        let rows = if kind == b'C' && !self.smsg.damaged && !self.smsg.cut {
            tag_rows(&self.smsg.buf)
        } else {
            None
        };
        if matches!(kind, b'G' | b'W') {
            self.copy_in = ex;
        }
        let clean = !self.smsg.damaged;
        let columns = match (kind, self.smsg.buf.get(..2)) {
            (b'D', Some(&[a, b])) if clean => Some(u16::from_be_bytes([a, b])),
            _ => None,
        };
        let verb = (kind == b'C' && clean)
            .then(|| tag_verb(&self.smsg.buf))
            .flatten();
        if let Some(p) = ex.and_then(|id| self.queue.get(id)) {
            p.resp.merge(span);
            if status.is_some() {
                p.status = status;
            }
            if kind == b'C' {
                p.rows = rows;
                p.verb = verb;
            }
            if p.columns.is_none() {
                p.columns = columns;
            }
        }
    }

    fn answer(&mut self, front: Wait, kind: u8, span: &Span) {
        match front {
            Wait::Startup => {}
            Wait::Query {
                first, count, at, ..
            } => {
                if count == 0 {
                    return;
                }
                let id = first + u64::from(at);
                self.record(Some(id), kind, span);
                self.query_step(id, kind);
            }
            // An error at Sync: the implicit transaction failed to commit.
            Wait::Sync(ex) if kind == b'E' => self.record(ex, kind, span),
            Wait::Sync(_) => {}
            Wait::Function(ex) => self.record(Some(ex), kind, span),
            Wait::Parse(ex) | Wait::Bind(ex) | Wait::Describe(ex) => {
                self.step_answer(front, ex, kind, span)
            }
            Wait::Execute(ex) => self.step_answer(front, Some(ex), kind, span),
            Wait::Close => self.step_answer(front, None, kind, span),
        }
    }

    /// Within a Query: CommandComplete moves on to the next statement.
    fn query_step(&mut self, id: u64, kind: u8) {
        let Some(Wait::Query {
            count, at, failed, ..
        }) = self.queue.waits.front_mut()
        else {
            return;
        };
        match kind {
            b'E' => *failed = true,
            b'C' | b'I' if !*failed && *at + 1 < *count => {
                *at += 1;
                self.queue.release(id);
            }
            _ => {}
        }
    }

    fn step_answer(&mut self, front: Wait, ex: Option<u64>, kind: u8, span: &Span) {
        self.record(ex, kind, span);
        if kind == b'E' {
            self.queue.pop_wait();
            self.skip_to_sync(ex);
            return;
        }
        let done = matches!(
            (front, kind),
            (Wait::Parse(_), b'1')
                | (Wait::Bind(_), b'2')
                | (Wait::Close, b'3')
                | (Wait::Describe(_), b'T' | b'n')
                | (Wait::Execute(_), b'C' | b'I' | b's')
        );
        if done {
            self.queue.pop_wait();
        }
    }

    /// After an error the server ignores messages up to Sync: the Executes
    /// among them never ran.
    fn skip_to_sync(&mut self, failed: Option<u64>) {
        while let Some(&w) = self.queue.waits.front() {
            if w.ends_at_ready() {
                break;
            }
            if let Wait::Execute(id) = w {
                if Some(id) != failed {
                    if let Some(p) = self.queue.get(id) {
                        p.skipped = true;
                    }
                }
            }
            self.queue.pop_wait();
        }
    }

    /// ReadyForQuery: the end of a Query, Sync, FunctionCall or the startup,
    /// or, after a resync, the first boundary to trust again.
    pub(super) fn ready(&mut self, status: u8) {
        if self.server_discard {
            // Whatever was asked before now cannot be paired safely.
            self.server_discard = false;
            self.close_building();
            self.last_exec = None;
            self.copy_in = None;
            self.queue.forget_waits();
            self.emit(true);
            return;
        }
        if !self.queue.waits.iter().any(|w| w.ends_at_ready()) {
            return;
        }
        let tx = tx_state(status);
        while let Some(w) = self.queue.pop_wait() {
            match w {
                Wait::Query {
                    first, count, at, ..
                } => {
                    let last = first + u64::from(at);
                    if let Some(p) = self.queue.get(last).filter(|_| count > 0) {
                        p.tx = tx;
                    }
                    // Statements after the last one answered were not run.
                    for id in last..first + u64::from(count) {
                        if let Some(p) = self.queue.get(id).filter(|_| id > last) {
                            p.skipped = true;
                        }
                        self.queue.release(id);
                    }
                }
                Wait::Sync(Some(ex)) | Wait::Function(ex) => {
                    if let Some(p) = self.queue.get(ex) {
                        p.tx = tx;
                    }
                }
                _ => {}
            }
            if w.ends_at_ready() {
                break;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sqlstate_and_tags() {
        assert_eq!(
            sqlstate(b"SERROR\0VERROR\0C42P01\0Mrelation \"x\" does not exist\0\0"),
            "42P01"
        );
        assert_eq!(sqlstate(b"SERROR\0Mno code\0\0"), UNKNOWN_SQLSTATE);
        assert_eq!(sqlstate(b"C4"), UNKNOWN_SQLSTATE);
        assert_eq!(tag_rows(b"SELECT 5\0"), Some(5));
        assert_eq!(tag_rows(b"INSERT 0 1\0"), Some(1));
        assert_eq!(tag_rows(b"COPY 10\0"), Some(10));
        assert_eq!(tag_rows(b"BEGIN\0"), None);
        assert_eq!(tag_rows(b""), None);
    }
}
