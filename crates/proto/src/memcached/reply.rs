//! Server reply lines: the reply word (never the error message), the
//! length of a data block that follows, and echoed meta opaque/key tokens.

use super::command::{tag, Kind};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Form {
    /// `VALUE <key> <flags> <bytes> [<cas>]`: a data block, more lines follow.
    Value(u64),
    /// `VA <size> <flags>*`: a data block ends this reply.
    Va(u64),
    /// END of a VALUE or STAT listing.
    End,
    /// ERROR, CLIENT_ERROR, SERVER_ERROR: end any reply.
    Error,
    /// incr/decr result: the new value.
    Number,
    /// Any other line.
    Line,
}

#[derive(Debug, Clone)]
pub struct Reply {
    pub form: Form,
    /// The status word recorded for the exchange.
    pub word: &'static str,
    /// A reply word memcached sends (or a number).
    pub known: bool,
    pub opaque: Option<u64>,
    pub key_tag: Option<u64>,
}

/// Reply words of protocol.txt (text, meta, stats and admin replies).
const WORDS: [&str; 30] = [
    "VALUE",
    "END",
    "STORED",
    "NOT_STORED",
    "EXISTS",
    "NOT_FOUND",
    "DELETED",
    "TOUCHED",
    "OK",
    "STAT",
    "ITEM",
    "PREFIX",
    "VERSION",
    "RESET",
    "ERROR",
    "CLIENT_ERROR",
    "SERVER_ERROR",
    "BUSY",
    "BADCLASS",
    "NOSPARE",
    "NOTFULL",
    "UNSAFE",
    "VA",
    "HD",
    "EN",
    "NF",
    "NS",
    "EX",
    "MN",
    "ME",
];

/// Word recorded for an incr/decr reply (the new value, a number): the
/// number itself is data, not a status.
const NUMBER_WORD: &str = "OK";
/// Word recorded for a line that is none of `WORDS`.
const OTHER_WORD: &str = "OTHER";

pub fn parse(line: &[u8]) -> Reply {
    let mut t = line.split(|&b| b == b' ').filter(|t| !t.is_empty());
    let first = t.next().unwrap_or_default();
    let word = WORDS.iter().copied().find(|w| w.as_bytes() == first);
    let mut r = Reply {
        form: Form::Line,
        word: word.unwrap_or(OTHER_WORD),
        known: word.is_some() || number(first).is_some(),
        opaque: None,
        key_tag: None,
    };
    match word {
        Some("VALUE") => {
            let args: Vec<&[u8]> = t.take(5).collect();
            match (args.len(), args.get(2).and_then(|b| number(b))) {
                (3 | 4, Some(n)) => r.form = Form::Value(n),
                _ => r.known = false,
            }
        }
        Some("VA") => match t.next().and_then(number) {
            Some(n) => {
                r.form = Form::Va(n);
                meta_flags(&mut r, t);
            }
            None => r.known = false,
        },
        Some("END") => r.form = Form::End,
        Some("ERROR" | "CLIENT_ERROR" | "SERVER_ERROR") => r.form = Form::Error,
        Some("HD" | "EN" | "NF" | "NS" | "EX") => meta_flags(&mut r, t),
        Some(_) => {}
        None if number(first).is_some() => {
            r.word = NUMBER_WORD;
            r.form = Form::Number;
        }
        None => {}
    }
    r
}

fn number(t: &[u8]) -> Option<u64> {
    if t.is_empty() || t.len() > 20 || !t.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(t).ok()?.parse().ok()
}

/// Meta return flags: `O<opaque>` and `k<key>` pair the reply.
fn meta_flags<'a>(r: &mut Reply, flags: impl Iterator<Item = &'a [u8]>) {
    for f in flags {
        match f.split_first() {
            Some((b'O', v)) => r.opaque = Some(tag(v)),
            Some((b'k', v)) => r.key_tag = Some(tag(v)),
            _ => {}
        }
    }
}

/// Could `r` be the reply of a quiet command of `kind` (whose nominal reply
/// is omitted)? Errors are always sent.
pub fn may_answer(kind: Kind, r: &Reply) -> bool {
    if r.form == Form::Error {
        return true;
    }
    match kind {
        Kind::MetaGet => matches!(r.word, "VA" | "HD"),
        Kind::MetaSet => matches!(r.word, "NS" | "EX" | "NF"),
        Kind::MetaDelete => matches!(r.word, "NF" | "EX"),
        Kind::MetaArith => matches!(r.word, "VA" | "NF" | "NS" | "EX"),
        _ => true,
    }
}

/// Can `r` start the reply to a command of `kind`?
pub fn fits(kind: Kind, r: &Reply) -> bool {
    if r.form == Form::Error {
        return true;
    }
    let w = r.word;
    match kind {
        Kind::Retrieval => matches!(r.form, Form::Value(_) | Form::End),
        Kind::Stats => matches!(w, "STAT" | "ITEM" | "PREFIX" | "END" | "OK" | "RESET"),
        Kind::Storage => matches!(w, "STORED" | "NOT_STORED" | "EXISTS" | "NOT_FOUND"),
        Kind::Delete => matches!(w, "DELETED" | "NOT_FOUND"),
        Kind::Arith => r.form == Form::Number || w == "NOT_FOUND",
        Kind::Touch => matches!(w, "TOUCHED" | "NOT_FOUND"),
        Kind::Version => w == "VERSION",
        Kind::Flush | Kind::Verbosity => w == "OK",
        Kind::MetaGet | Kind::MetaSet | Kind::MetaDelete | Kind::MetaArith => {
            matches!(w, "VA" | "HD" | "EN" | "NF" | "NS" | "EX")
        }
        Kind::MetaDebug => matches!(w, "ME" | "EN"),
        Kind::MetaNoop => w == "MN",
        Kind::Quit | Kind::Unknown => r.form != Form::Number,
    }
}
