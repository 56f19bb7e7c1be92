//! Client command lines: strict validation (sniff and resync trust only a
//! line that memcached itself would accept), labels and parameter digests.

use crate::digest::ParamDigest;
use crate::digest::StreamHash;
use crate::normalize;
use std::hash::Hasher;

/// Longest key: `KEY_MAX_LENGTH` in memcached.h (protocol.txt, "Keys").
pub const MAX_KEY: usize = 250;
/// A base64 (`b` flag) key encodes up to `MAX_KEY` bytes: 4 chars per 3.
const MAX_B64_KEY: usize = MAX_KEY.div_ceil(3) * 4;
/// "Opaque tokens may be up to 32 bytes in length" (protocol.txt, Meta Get).
const MAX_OPAQUE: usize = 32;
/// Longest numeric token: u64::MAX has 20 digits.
const MAX_DIGITS: usize = 20;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// get, gets, gat, gats: VALUE items then END.
    Retrieval,
    Storage,
    Delete,
    Arith,
    Touch,
    /// STAT (or ITEM, PREFIX) lines then END.
    Stats,
    Version,
    Flush,
    Verbosity,
    Quit,
    MetaGet,
    MetaSet,
    MetaDelete,
    MetaArith,
    MetaDebug,
    MetaNoop,
    /// A line memcached will answer with one line (usually ERROR).
    Unknown,
}

/// Command words, case-sensitive as memcached reads them.
pub const WORDS: [(&str, Kind); 25] = [
    ("get", Kind::Retrieval),
    ("gets", Kind::Retrieval),
    ("gat", Kind::Retrieval),
    ("gats", Kind::Retrieval),
    ("set", Kind::Storage),
    ("add", Kind::Storage),
    ("replace", Kind::Storage),
    ("append", Kind::Storage),
    ("prepend", Kind::Storage),
    ("cas", Kind::Storage),
    ("delete", Kind::Delete),
    ("incr", Kind::Arith),
    ("decr", Kind::Arith),
    ("touch", Kind::Touch),
    ("stats", Kind::Stats),
    ("version", Kind::Version),
    ("flush_all", Kind::Flush),
    ("verbosity", Kind::Verbosity),
    ("quit", Kind::Quit),
    ("mg", Kind::MetaGet),
    ("ms", Kind::MetaSet),
    ("md", Kind::MetaDelete),
    ("ma", Kind::MetaArith),
    ("me", Kind::MetaDebug),
    ("mn", Kind::MetaNoop),
];

/// Admin commands outside the list above, kept as labels when seen.
const ADMIN_WORDS: [&str; 8] = [
    "slabs",
    "lru_crawler",
    "lru",
    "watch",
    "shutdown",
    "cache_memlimit",
    "extstore",
    "verbosity",
];

/// One parsed request line.
#[derive(Debug, Clone)]
pub struct Command {
    pub kind: Kind,
    /// Normalized: "get user:?", "get user:? (+2 keys)", "ms ?".
    pub label: String,
    pub digest: Option<u64>,
    /// Keys asked for (retrieval), to tell HIT from PARTIAL.
    pub keys: u64,
    /// Length of the data block that follows the line.
    pub data: Option<u64>,
    /// Text `noreply`: the server sends nothing.
    pub noreply: bool,
    /// Meta `q`: the server omits the nominal reply (EN, HD).
    pub quiet: bool,
    /// Hashes of the meta `O` opaque token and of the key, to pair replies
    /// that echo them (`O...`, `k...`).
    pub opaque: Option<u64>,
    pub key_tag: Option<u64>,
}

impl Command {
    fn new(kind: Kind, label: &str) -> Self {
        Command {
            kind,
            label: label.to_string(),
            digest: None,
            keys: 0,
            data: None,
            noreply: false,
            quiet: false,
            opaque: None,
            key_tag: None,
        }
    }

    /// A line that is no valid command, answered by one line (ERROR).
    /// `None` when it does not even look like a command (binary garbage).
    pub fn unknown(line: &[u8]) -> Option<Self> {
        let word = line.split(|&b| b == b' ').find(|t| !t.is_empty())?;
        let looks = word.len() <= 32
            && word
                .iter()
                .all(|&b| b.is_ascii_lowercase() || b == b'_' || b.is_ascii_digit());
        if !looks || !word[0].is_ascii_lowercase() {
            return None;
        }
        let known = WORDS.iter().map(|(w, _)| *w).chain(ADMIN_WORDS);
        let label = known
            .into_iter()
            .find(|w| w.as_bytes() == word)
            .unwrap_or("unknown");
        Some(Command::new(Kind::Unknown, label))
    }

    /// Does the server answer at all?
    pub fn expects_reply(&self) -> bool {
        !self.noreply && self.kind != Kind::Quit
    }
}

/// Hash of a token, to compare echoed opaques and keys without keeping them.
pub fn tag(token: &[u8]) -> u64 {
    let mut h = StreamHash::default();
    h.write(token);
    h.finish()
}

pub fn kind_of(word: &[u8]) -> Option<Kind> {
    WORDS
        .iter()
        .find(|(w, _)| w.as_bytes() == word)
        .map(|(_, k)| *k)
}

/// Parses a command line (CR LF removed). `None` when memcached would
/// reject it.
pub fn parse(line: &[u8]) -> Option<Command> {
    let t: Vec<&[u8]> = line
        .split(|&b| b == b' ')
        .filter(|t| !t.is_empty())
        .collect();
    let (&word, args) = t.split_first()?;
    let kind = kind_of(word)?;
    let name = std::str::from_utf8(word).ok()?;
    let mut c = Command::new(kind, name);
    let mut d = ParamDigest::new();
    let ok = match kind {
        Kind::Retrieval => retrieval(&mut c, &mut d, args, name.starts_with("gat")),
        Kind::Storage => storage(&mut c, &mut d, args, name == "cas"),
        Kind::Delete => keyed(&mut c, &mut d, args, 0, true),
        Kind::Arith => keyed(&mut c, &mut d, args, 1, false),
        Kind::Touch => keyed(&mut c, &mut d, args, 1, false),
        Kind::Stats => stats(&mut c, args),
        Kind::Version | Kind::Quit | Kind::MetaNoop => args.is_empty(),
        Kind::Flush => flush(&mut c, args),
        Kind::Verbosity => verbosity(&mut c, args),
        Kind::MetaGet | Kind::MetaDelete | Kind::MetaArith | Kind::MetaDebug => {
            meta(&mut c, &mut d, args, false)
        }
        Kind::MetaSet => meta(&mut c, &mut d, args, true),
        Kind::Unknown => false,
    };
    if !ok {
        return None;
    }
    c.digest = (!d.is_empty()).then(|| d.finish());
    Some(c)
}

fn valid_key(k: &[u8], max: usize) -> bool {
    !k.is_empty() && k.len() <= max && k.iter().all(|&b| b > b' ' && b != 0x7f)
}

fn unsigned(t: &[u8]) -> Option<u64> {
    if t.is_empty() || t.len() > MAX_DIGITS || !t.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(t).ok()?.parse().ok()
}

/// Exptimes and delays may be negative ("-1": expire at once).
fn signed(t: &[u8]) -> Option<i64> {
    match t.split_first() {
        Some((b'-', digits)) => i64::try_from(unsigned(digits)?).ok().map(|v| -v),
        _ => i64::try_from(unsigned(t)?).ok(),
    }
}

/// Strips a trailing `noreply` token.
fn noreply<'a, 'b>(c: &mut Command, args: &'a [&'b [u8]]) -> &'a [&'b [u8]] {
    match args.split_last() {
        Some((&b"noreply", rest)) => {
            c.noreply = true;
            rest
        }
        _ => args,
    }
}

/// `label` + normalized key; the key's variable parts go to `d`.
fn label_key(c: &mut Command, d: &mut ParamDigest, key: &[u8]) {
    let k = normalize::key(key, d);
    c.label = format!("{} {k}", c.label);
    c.keys = 1;
}

fn retrieval(c: &mut Command, d: &mut ParamDigest, args: &[&[u8]], gat: bool) -> bool {
    let keys = if gat {
        let Some((exp, keys)) = args.split_first() else {
            return false;
        };
        if signed(exp).is_none() {
            return false;
        }
        d.add(exp);
        keys
    } else {
        args
    };
    let Some((first, rest)) = keys.split_first() else {
        return false;
    };
    if !keys.iter().all(|k| valid_key(k, MAX_KEY)) {
        return false;
    }
    label_key(c, d, first);
    for k in rest {
        normalize::key(k, d);
    }
    if !rest.is_empty() {
        c.label = format!("{} (+{} keys)", c.label, rest.len());
    }
    c.keys = keys.len() as u64;
    true
}

/// `<key> <flags> <exptime> <bytes> [<cas>] [noreply]`
fn storage(c: &mut Command, d: &mut ParamDigest, args: &[&[u8]], cas: bool) -> bool {
    let args = noreply(c, args);
    let want = if cas { 5 } else { 4 };
    if args.len() != want || !valid_key(args[0], MAX_KEY) {
        return false;
    }
    let flags_ok = unsigned(args[1]).is_some_and(|f| u32::try_from(f).is_ok());
    if !flags_ok || signed(args[2]).is_none() || (cas && unsigned(args[4]).is_none()) {
        return false;
    }
    let Some(bytes) = unsigned(args[3]) else {
        return false;
    };
    c.data = Some(bytes);
    label_key(c, d, args[0]);
    true
}

/// delete `<key> [0] [noreply]`; incr/decr `<key> <delta>`, touch `<key>
/// <exptime>` (`[noreply]`): `numbers` numeric arguments, digested.
fn keyed(c: &mut Command, d: &mut ParamDigest, args: &[&[u8]], numbers: usize, del: bool) -> bool {
    let mut args = noreply(c, args);
    if del && args.len() == 2 && args[1] == b"0" {
        args = &args[..1]; // legacy "delete <key> 0"
    }
    if args.len() != 1 + numbers || !valid_key(args[0], MAX_KEY) {
        return false;
    }
    label_key(c, d, args[0]);
    for n in &args[1..] {
        if signed(n).is_none() {
            return false;
        }
        d.add(n);
    }
    true
}

/// `stats [group [args]]`: the group word is kept in the label.
fn stats(c: &mut Command, args: &[&[u8]]) -> bool {
    if args.len() > 4 || !args.iter().all(|a| valid_key(a, MAX_KEY)) {
        return false;
    }
    if let Some(group) = args.first() {
        let word = group.len() <= 16 && group.iter().all(|&b| b.is_ascii_lowercase() || b == b'_');
        if word {
            c.label = format!("stats {}", String::from_utf8_lossy(group));
        }
    }
    true
}

fn flush(c: &mut Command, args: &[&[u8]]) -> bool {
    let args = noreply(c, args);
    args.len() <= 1 && args.iter().all(|a| signed(a).is_some())
}

fn verbosity(c: &mut Command, args: &[&[u8]]) -> bool {
    let args = noreply(c, args);
    args.len() == 1 && unsigned(args[0]).is_some()
}

/// `<key> [<datalen>] <flags>*`; a flag is a letter with an optional token.
fn meta(c: &mut Command, d: &mut ParamDigest, args: &[&[u8]], set: bool) -> bool {
    let Some((key, mut flags)) = args.split_first() else {
        return false;
    };
    if set {
        // Old 1.6 form: "ms <key> S<len> <flags>*"; current: "ms <key> <len> ...".
        match flags
            .split_first()
            .and_then(|(n, rest)| Some((unsigned(n)?, rest)))
        {
            Some((n, rest)) => {
                c.data = Some(n);
                flags = rest;
            }
            None => {
                c.data = flags
                    .iter()
                    .find_map(|f| f.strip_prefix(b"S").and_then(unsigned))
            }
        }
        if c.data.is_none() {
            return false;
        }
    }
    let mut base64 = false;
    for f in flags {
        if !f[0].is_ascii_alphabetic() || !valid_key(f, MAX_KEY) {
            return false;
        }
        match f[0] {
            b'q' => c.quiet = true,
            b'b' => base64 = true,
            b'O' if f.len() - 1 > MAX_OPAQUE => return false,
            b'O' => c.opaque = Some(tag(&f[1..])),
            b'D' if c.kind == Kind::MetaArith => d.add(&f[1..]),
            _ => {}
        }
    }
    if !valid_key(key, if base64 { MAX_B64_KEY } else { MAX_KEY }) {
        return false;
    }
    c.key_tag = Some(tag(key));
    if base64 {
        // A binary key (usually a hash): all of it is the variable part.
        d.add(key);
        c.label = format!("{} ?", c.label);
        c.keys = 1;
    } else {
        label_key(c, d, key);
    }
    true
}
