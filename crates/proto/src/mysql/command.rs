//! Client commands (MySQL internals, "Command Phase"; MariaDB's "Client/Server
//! Protocol"): the byte that opens a packet of sequence 0, and what whyslow
//! reads of each.

use super::packet::{le32, lenenc};

pub const COM_QUIT: u8 = 0x01;
pub const COM_INIT_DB: u8 = 0x02;
pub const COM_QUERY: u8 = 0x03;
pub const COM_FIELD_LIST: u8 = 0x04;
pub const COM_STATISTICS: u8 = 0x09;
pub const COM_PROCESS_INFO: u8 = 0x0a;
pub const COM_PROCESS_KILL: u8 = 0x0c;
pub const COM_DEBUG: u8 = 0x0d;
pub const COM_PING: u8 = 0x0e;
pub const COM_CHANGE_USER: u8 = 0x11;
pub const COM_BINLOG_DUMP: u8 = 0x12;
pub const COM_STMT_PREPARE: u8 = 0x16;
pub const COM_STMT_EXECUTE: u8 = 0x17;
pub const COM_STMT_SEND_LONG_DATA: u8 = 0x18;
pub const COM_STMT_CLOSE: u8 = 0x19;
pub const COM_STMT_RESET: u8 = 0x1a;
pub const COM_SET_OPTION: u8 = 0x1b;
pub const COM_STMT_FETCH: u8 = 0x1c;
pub const COM_RESET_CONNECTION: u8 = 0x1f;
pub const COM_BINLOG_DUMP_GTID: u8 = 0x1e;
/// MariaDB's array binding (`COM_STMT_BULK_EXECUTE`).
pub const COM_STMT_BULK_EXECUTE: u8 = 0xfa;

/// MariaDB Connector/J and others pipeline a prepare with its first
/// execution, naming "the statement just prepared" by this id.
pub const LAST_PREPARED: u32 = u32::MAX;

/// What the server answers a command with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// No answer (`COM_QUIT`, `COM_STMT_CLOSE`, `COM_STMT_SEND_LONG_DATA`).
    None,
    /// OK, ERR or a result set (text or binary), maybe several.
    Results,
    /// Prepare OK (statement id, columns, parameters) and their
    /// definitions, or ERR.
    Prepared,
    /// One packet: OK, ERR, EOF or a string (`COM_STATISTICS`).
    One,
    /// Column definitions up to an EOF (`COM_FIELD_LIST`), or ERR.
    Columns,
    /// Authentication packets up to OK or ERR (`COM_CHANGE_USER`).
    Auth,
    /// Rows up to an EOF (`COM_STMT_FETCH`), or ERR.
    Rows,
    /// A stream that never ends (binlog dump): the connection is not read on.
    Stream,
}

/// A known command byte: its name for labels and what answers it.
pub fn known(cmd: u8) -> Option<(&'static str, Answer)> {
    Some(match cmd {
        COM_QUIT => ("COM_QUIT", Answer::None),
        COM_INIT_DB => ("COM_INIT_DB", Answer::One),
        COM_QUERY => ("COM_QUERY", Answer::Results),
        COM_FIELD_LIST => ("COM_FIELD_LIST", Answer::Columns),
        COM_STATISTICS => ("COM_STATISTICS", Answer::One),
        COM_PROCESS_INFO => ("COM_PROCESS_INFO", Answer::Results),
        COM_PROCESS_KILL => ("COM_PROCESS_KILL", Answer::One),
        COM_DEBUG => ("COM_DEBUG", Answer::One),
        COM_PING => ("COM_PING", Answer::One),
        COM_CHANGE_USER => ("COM_CHANGE_USER", Answer::Auth),
        COM_BINLOG_DUMP | COM_BINLOG_DUMP_GTID => ("COM_BINLOG_DUMP", Answer::Stream),
        COM_STMT_PREPARE => ("COM_STMT_PREPARE", Answer::Prepared),
        COM_STMT_EXECUTE => ("COM_STMT_EXECUTE", Answer::Results),
        COM_STMT_SEND_LONG_DATA => ("COM_STMT_SEND_LONG_DATA", Answer::None),
        COM_STMT_CLOSE => ("COM_STMT_CLOSE", Answer::None),
        COM_STMT_RESET => ("COM_STMT_RESET", Answer::One),
        COM_SET_OPTION => ("COM_SET_OPTION", Answer::One),
        COM_STMT_FETCH => ("COM_STMT_FETCH", Answer::Rows),
        COM_RESET_CONNECTION => ("COM_RESET_CONNECTION", Answer::One),
        COM_STMT_BULK_EXECUTE => ("COM_STMT_BULK_EXECUTE", Answer::Results),
        _ => return None,
    })
}

/// Whether `body` (a whole payload, or its first bytes when `whole` is
/// false) is a plausible command: a known byte with the length its
/// command has. Used to find a boundary mid-stream, so strict.
pub fn plausible(body: &[u8], len: u32, whole: bool) -> bool {
    let Some(&cmd) = body.first() else {
        return false;
    };
    match cmd {
        COM_QUIT | COM_PING | COM_STATISTICS | COM_PROCESS_INFO | COM_RESET_CONNECTION => len == 1,
        COM_STMT_CLOSE | COM_STMT_RESET => len == 5,
        COM_SET_OPTION => len == 3,
        COM_STMT_FETCH => len == 9,
        COM_QUERY | COM_STMT_PREPARE | COM_INIT_DB => {
            len >= 2 && text_like(query_text(body, None).unwrap_or(&body[1..]), whole)
        }
        COM_STMT_EXECUTE => {
            // flags: cursor type bits (0, 1, 2, 4) and MariaDB's 8;
            // iteration count: always 1.
            len >= 10 && body.get(5).is_some_and(|f| *f < 0x10) && le32(body, 6) == Some(1)
        }
        _ => false,
    }
}

/// Looks like the start of SQL text: printable ASCII or UTF-8 and
/// whitespace, at least one byte when the whole text is there.
fn text_like(text: &[u8], whole: bool) -> bool {
    let look = &text[..text.len().min(64)];
    (!whole || !look.is_empty())
        && look
            .iter()
            .all(|&b| b.is_ascii_graphic() || b.is_ascii_whitespace() || b >= 0x80)
}

/// The SQL text of a `COM_QUERY`/`COM_STMT_PREPARE` body. MySQL 8.0.23+ with
/// `CLIENT_QUERY_ATTRIBUTES` puts a parameter count and a set count before
/// a query's text; with no attributes those are `0x00 0x01`. `attributes`:
/// whether the capability was negotiated (None: not seen; the prefix is
/// then taken when it is there and text follows). None when attributes
/// are sent (their values are skipped with the text: never shown).
pub fn query_text(body: &[u8], attributes: Option<bool>) -> Option<&[u8]> {
    let rest = body.get(1..)?;
    if body[0] != COM_QUERY {
        return Some(rest);
    }
    let prefixed = match attributes {
        Some(a) => a,
        None => rest.starts_with(&[0, 1]) && rest.get(2).is_some_and(|b| b.is_ascii_graphic()),
    };
    if !prefixed {
        return Some(rest);
    }
    let (count, n) = lenenc(rest)?;
    if count != 0 {
        return None;
    }
    let (_sets, m) = lenenc(&rest[n..])?;
    rest.get(n + m..)
}
