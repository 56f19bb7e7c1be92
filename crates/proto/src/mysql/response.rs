//! The server's answer to one command, packet by packet (MySQL internals,
//! "Text Resultset", "Binary Protocol Resultset", "COM_STMT_PREPARE
//! Response"): where it ends, its rows, its error and its status flags.
//! Rows and definitions are skipped; only each packet's first bytes are read.

use super::command::Answer;
use super::packet::{le16, le32, lenenc, Packet};

/// Status flag: a transaction is open (MySQL's `SERVER_STATUS_IN_TRANS`).
pub const IN_TRANS: u16 = 0x0001;
/// Status flag: another result follows (`SERVER_MORE_RESULTS_EXISTS`).
pub const MORE_RESULTS: u16 = 0x0008;
/// Status flag: the execution opened a cursor; rows come by
/// `COM_STMT_FETCH` (`SERVER_STATUS_CURSOR_EXISTS`).
pub const CURSOR_EXISTS: u16 = 0x0040;
/// An EOF packet is 5 bytes (0xFE, warnings, status); an OK packet sent in
/// its place (`CLIENT_DEPRECATE_EOF`) at least 7. A row opening with 0xFE
/// (a column of 2^24 bytes or more) fills a whole 16 MiB packet.
pub const EOF_LEN: u64 = 5;
pub const EOF_MAX: u64 = 9;
/// A prepare OK: 0x00, statement id, columns, parameters, a filler and
/// warnings; MySQL 8 may add a metadata flag after them.
const PREPARE_OK_LEN: u64 = 12;
/// The error number of MariaDB's progress report packets.
const PROGRESS: u16 = 0xFFFF;

/// What comes after definitions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    Rows,
    Done,
    /// A prepare's column definitions, after its parameters'.
    Columns(u64),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reading {
    /// The first packet of an answer, or of the next result of one.
    First,
    /// Definitions to skip.
    Defs {
        left: u64,
        next: Next,
    },
    /// Definitions read: an EOF closes them unless `CLIENT_DEPRECATE_EOF`.
    DefsEnd {
        next: Next,
    },
    Rows,
    Auth,
    /// `COM_FIELD_LIST`: definitions up to an EOF.
    FieldList,
}

/// The answer being read and what it said so far.
#[derive(Debug, Default)]
pub struct Answered {
    pub rows: u64,
    /// SQLSTATE (or error number) of an ERR.
    pub error: Option<String>,
    /// Status flags of the packet that ended it.
    pub status: Option<u16>,
    /// Columns of its (first) result set.
    pub columns: Option<u16>,
    /// A prepare's statement id, parameters and columns.
    pub prepared: Option<(u32, u16, u16)>,
    /// The server asked for a LOCAL INFILE's file.
    pub infile: bool,
}

/// One server packet's effect.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    More,
    Done,
    /// The answer had ended before this packet, which opens the next one
    /// (definitions that no EOF closes: `CLIENT_DEPRECATE_EOF`).
    DoneBefore,
}

/// The answer reader for one command.
#[derive(Debug)]
pub struct Reader {
    pub answer: Answer,
    pub reading: Reading,
    pub got: Answered,
}

impl Reader {
    pub fn new(answer: Answer) -> Self {
        let reading = match answer {
            Answer::Auth => Reading::Auth,
            Answer::Columns => Reading::FieldList,
            Answer::Rows => Reading::Rows,
            _ => Reading::First,
        };
        Reader {
            answer,
            reading,
            got: Answered::default(),
        }
    }

    /// Reads packet `p`. `deprecate_eof`: whether EOFs are replaced by OKs
    /// (None: not known, told by what follows the definitions).
    pub fn packet(&mut self, p: &Packet, deprecate_eof: &mut Option<bool>) -> Outcome {
        let first = p.first();
        // MariaDB's progress reports (CLIENT_PROGRESS) are ERR packets with
        // error number 0xFFFF sent before the answer.
        if first == Some(0xFF) && le16(&p.head, 1) == Some(PROGRESS) {
            return Outcome::More;
        }
        // 0xFF opens no row (not a length prefix), definition or OK.
        if first == Some(0xFF) {
            self.got.error = Some(err_state(&p.head));
            return Outcome::Done;
        }
        match self.reading {
            Reading::First => self.first(p, *deprecate_eof),
            Reading::Defs { left, next } => {
                let left = left.saturating_sub(1);
                self.reading = Reading::Defs { left, next };
                if left > 0 {
                    return Outcome::More;
                }
                match deprecate_eof {
                    Some(true) => self.after_defs(next),
                    _ => {
                        self.reading = Reading::DefsEnd { next };
                        Outcome::More
                    }
                }
            }
            Reading::DefsEnd { next } => {
                let eof = first == Some(0xFE) && p.len == EOF_LEN;
                if eof {
                    deprecate_eof.get_or_insert(false);
                    let status = le16(&p.head, 3);
                    if status.is_some_and(|s| s & CURSOR_EXISTS != 0) && next == Next::Rows {
                        self.got.status = status;
                        return Outcome::Done;
                    }
                    return self.after_defs(next);
                }
                // No EOF where one would be: OKs replace them, and this
                // packet is the next part of the answer, or the next answer.
                *deprecate_eof = Some(true);
                match self.after_defs(next) {
                    Outcome::More => self.packet(p, deprecate_eof),
                    _ => Outcome::DoneBefore,
                }
            }
            Reading::Rows => {
                let end = if *deprecate_eof == Some(true) {
                    super::packet::MAX_PAYLOAD as u64
                } else {
                    EOF_MAX
                };
                if first == Some(0xFE) && p.len < end {
                    return self.ended(&p.head, p.len);
                }
                self.got.rows += 1;
                Outcome::More
            }
            Reading::Auth => match first {
                Some(0x00) => self.ended(&p.head, p.len),
                _ => Outcome::More,
            },
            Reading::FieldList => match first {
                Some(0xFE) if p.len < EOF_MAX => Outcome::Done,
                _ => Outcome::More,
            },
        }
    }

    fn first(&mut self, p: &Packet, deprecate_eof: Option<bool>) -> Outcome {
        let head = &p.head[..];
        match self.answer {
            Answer::One | Answer::None | Answer::Stream => {
                if matches!(p.first(), Some(0x00 | 0xFE)) {
                    self.got.status = status_of(head, p.len);
                }
                Outcome::Done
            }
            Answer::Prepared => {
                let (Some(0x00), Some(id), Some(cols), Some(params)) =
                    (p.first(), le32(head, 1), le16(head, 5), le16(head, 7))
                else {
                    return Outcome::Done;
                };
                self.got.prepared = Some((id, params, cols));
                // MySQL's optional metadata: a 0 after the header, none follow.
                if p.len > PREPARE_OK_LEN && head.get(PREPARE_OK_LEN as usize) == Some(&0) {
                    return Outcome::Done;
                }
                let cols = u64::from(cols);
                self.defs(u64::from(params), Next::Columns(cols), deprecate_eof)
            }
            _ => match p.first() {
                Some(0x00) => self.ended(head, p.len),
                // LOCAL INFILE: the client sends the file, then the server
                // answers OK or ERR.
                Some(0xFB) => {
                    self.got.infile = true;
                    Outcome::More
                }
                _ => {
                    let Some((n, used)) = lenenc(head) else {
                        return Outcome::Done;
                    };
                    if self.got.columns.is_none() {
                        self.got.columns = Some(u16::try_from(n).unwrap_or(u16::MAX));
                    }
                    // MariaDB's cached metadata: a flag byte says none follow.
                    if p.len > used as u64 && head.get(used) == Some(&0) {
                        return self.defs(0, Next::Rows, deprecate_eof);
                    }
                    self.defs(n, Next::Rows, deprecate_eof)
                }
            },
        }
    }

    /// `n` definitions to skip, then `next`.
    fn defs(&mut self, n: u64, next: Next, deprecate_eof: Option<bool>) -> Outcome {
        if n > 0 {
            self.reading = Reading::Defs { left: n, next };
            return Outcome::More;
        }
        if next == Next::Rows && deprecate_eof != Some(true) {
            // Cached metadata: still an EOF unless they are deprecated.
            self.reading = Reading::DefsEnd { next };
            return Outcome::More;
        }
        self.after_defs(next)
    }

    fn after_defs(&mut self, next: Next) -> Outcome {
        match next {
            Next::Rows => {
                self.reading = Reading::Rows;
                Outcome::More
            }
            Next::Done | Next::Columns(0) => Outcome::Done,
            Next::Columns(n) => {
                self.reading = Reading::Defs {
                    left: n,
                    next: Next::Done,
                };
                Outcome::More
            }
        }
    }

    /// An OK or EOF ends a result: the answer, unless another result follows.
    fn ended(&mut self, head: &[u8], len: u64) -> Outcome {
        let status = status_of(head, len);
        self.got.status = status;
        if status.is_some_and(|s| s & MORE_RESULTS != 0) {
            self.reading = Reading::First;
            return Outcome::More;
        }
        Outcome::Done
    }
}

/// The status flags of an OK packet (0x00 or 0xFE with `len` ≥ 7) or an EOF
/// packet (0xFE, 5 bytes).
pub fn status_of(head: &[u8], len: u64) -> Option<u16> {
    if head.first() == Some(&0xFE) && len == EOF_LEN {
        return le16(head, 3);
    }
    let (_, a) = lenenc(head.get(1..)?)?;
    let (_, b) = lenenc(head.get(1 + a..)?)?;
    le16(head, 1 + a + b)
}

/// An ERR packet's SQLSTATE (`#` and five characters, protocol 4.1), else
/// its error number.
pub fn err_state(head: &[u8]) -> String {
    match head.get(3..9) {
        Some([b'#', state @ ..]) if state.iter().all(u8::is_ascii_alphanumeric) => {
            String::from_utf8_lossy(state).into_owned()
        }
        _ => le16(head, 1).map_or_else(|| "ERR".to_string(), |n| n.to_string()),
    }
}
