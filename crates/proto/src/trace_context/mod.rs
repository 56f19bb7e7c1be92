//! Trace context as it travels on the wire: the W3C `traceparent` header
//! (HTTP/1, HTTP/2) and sqlcommenter comments appended to SQL
//! (`/*traceparent='00-…-01'*/`). Sans-IO: bytes in, a trace id out.
//!
//! Hand-written rather than taken from an OpenTelemetry crate: those pull a
//! whole SDK for 55 bytes of fixed layout, and a parser fed by captures must
//! refuse hostile input byte by byte without allocating.

use memchr::memmem;
use whyslow_model::TraceId;

/// What one `traceparent` value says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceContext {
    pub trace_id: TraceId,
    /// Bit 0 of the flags: the caller records this trace.
    pub sampled: bool,
}

/// Length of a version-00 `traceparent`: 2 + 1 + 32 + 1 + 16 + 1 + 2.
pub const TRACEPARENT_LEN: usize = 55;

/// Lowercase hex digits only, as the W3C format requires.
fn hex(bytes: &[u8]) -> Option<u128> {
    let mut v: u128 = 0;
    for &b in bytes {
        let d = match b {
            b'0'..=b'9' => b - b'0',
            b'a'..=b'f' => b - b'a' + 10,
            _ => return None,
        };
        v = (v << 4) | u128::from(d);
    }
    Some(v)
}

/// Parses a `traceparent` value (W3C Trace Context §3.2): any version but
/// `ff`; a version above 00 may carry more fields after a `-`. Optional
/// whitespace around the value is allowed, as around any header value.
pub fn traceparent(value: &[u8]) -> Result<TraceContext, &'static str> {
    let v = value.trim_ascii();
    if v.len() < TRACEPARENT_LEN {
        return Err("traceparent shorter than 55 characters");
    }
    let version = hex(&v[0..2]).ok_or("traceparent version is not hex")?;
    if version == 0xff {
        return Err("traceparent version ff is invalid");
    }
    if version == 0 && v.len() != TRACEPARENT_LEN {
        return Err("traceparent version 00 longer than 55 characters");
    }
    if v.len() > TRACEPARENT_LEN && v[TRACEPARENT_LEN] != b'-' {
        return Err("traceparent has a malformed field after the flags");
    }
    if v[2] != b'-' || v[35] != b'-' || v[52] != b'-' {
        return Err("traceparent fields are not separated by '-'");
    }
    let trace = hex(&v[3..35]).ok_or("traceparent trace id is not lowercase hex")?;
    let parent = hex(&v[36..52]).ok_or("traceparent parent id is not lowercase hex")?;
    let flags = hex(&v[53..55]).ok_or("traceparent flags are not hex")?;
    if trace == 0 {
        return Err("traceparent trace id is all zeros");
    }
    if parent == 0 {
        return Err("traceparent parent id is all zeros");
    }
    Ok(TraceContext {
        trace_id: TraceId(trace),
        sampled: flags & 1 == 1,
    })
}

/// A sqlcommenter comment found in a statement's text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SqlComment {
    /// Byte range of the comment, `/*` to `*/` inclusive.
    pub at: std::ops::Range<usize>,
    /// The comment's `traceparent`, or what was wrong with it.
    pub trace: Result<TraceContext, &'static str>,
}

/// The text of a statement without its sqlcommenter comment, and the trace
/// it carried. Statements with no comment (nearly all) cost one substring
/// search and come back borrowed.
pub fn split_sql_comment(text: &str) -> (std::borrow::Cow<'_, str>, Option<SqlComment>) {
    let Some(c) = sql_comment(text) else {
        return (std::borrow::Cow::Borrowed(text), None);
    };
    let rest = if c.at.end == text.len() {
        std::borrow::Cow::Borrowed(text[..c.at.start].trim_end())
    } else {
        std::borrow::Cow::Owned(format!("{}{}", &text[..c.at.start], &text[c.at.end..]))
    };
    (rest, Some(c))
}

/// Finds the comment holding `traceparent=` (the sqlcommenter spec: pairs
/// `key='url-encoded value'`, comma-separated). A comment that only looks
/// like one (no quotes, a key that merely contains the word) yields None.
pub fn sql_comment(text: &str) -> Option<SqlComment> {
    let bytes = text.as_bytes();
    let key = memmem::find(bytes, b"traceparent=")?;
    let open = memmem::rfind(&bytes[..key], b"/*")?;
    let close = key + memmem::find(&bytes[key..], b"*/")?;
    let body = &text[open + 2..close];
    if memmem::find(body.as_bytes(), b"*/").is_some() || body.contains("/*") {
        return None;
    }
    let trace = pairs(body)
        .find(|(k, _)| *k == "traceparent")
        .map(|(_, v)| match v {
            Some(v) => traceparent(&unescape(v)),
            None => Err("sqlcommenter traceparent value is not quoted"),
        })?;
    Some(SqlComment {
        at: open..close + 2,
        trace,
    })
}

/// The `key='value'` pairs of a comment body: (key, value without quotes,
/// None when unquoted). Commas inside quotes do not split.
fn pairs(body: &str) -> impl Iterator<Item = (&str, Option<&str>)> {
    let mut rest = body.trim();
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let eq = rest.find('=')?;
        let key = rest[..eq].trim();
        let after = &rest[eq + 1..];
        let (value, tail) = if let Some(quoted) = after.strip_prefix('\'') {
            let end = closing_quote(quoted)?;
            (Some(&quoted[..end]), &quoted[end + 1..])
        } else {
            let end = after.find(',').unwrap_or(after.len());
            (None, &after[end..])
        };
        rest = tail.trim_start().trim_start_matches(',').trim_start();
        Some((key, value))
    })
}

/// Index of the quote that closes a value (`\'` escapes one).
fn closing_quote(s: &str) -> Option<usize> {
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'\\' => i += 2,
            b'\'' => return Some(i),
            _ => i += 1,
        }
    }
    None
}

/// URL-decodes `%XX` (sqlcommenter encodes every value); other bytes as
/// they are. At most a traceparent's worth is decoded: longer is malformed.
fn unescape(v: &str) -> Vec<u8> {
    let b = v.as_bytes();
    let mut out = Vec::with_capacity(b.len().min(2 * TRACEPARENT_LEN));
    let mut i = 0;
    while i < b.len() && out.len() <= 2 * TRACEPARENT_LEN {
        let decoded = (b[i] == b'%')
            .then(|| b.get(i + 1..i + 3))
            .flatten()
            .and_then(|h| u8::from_str_radix(std::str::from_utf8(h).ok()?, 16).ok());
        match decoded {
            Some(byte) => {
                out.push(byte);
                i += 3;
            }
            None => {
                out.push(b[i]);
                i += 1;
            }
        }
    }
    out
}

/// Fuzz entry: `data` as a `traceparent` value and as SQL text. A trace
/// id that parses is never zero; the statement without its comment is
/// never longer than the statement.
pub fn fuzz(data: &[u8]) {
    if let Ok(c) = traceparent(data) {
        assert_ne!(c.trace_id.0, 0);
    }
    let text = String::from_utf8_lossy(data);
    let (rest, comment) = split_sql_comment(&text);
    assert!(rest.len() <= text.len());
    if let Some(c) = comment {
        assert!(c.at.end <= text.len() && text[c.at.clone()].starts_with("/*"));
    }
}

#[cfg(test)]
mod tests;
