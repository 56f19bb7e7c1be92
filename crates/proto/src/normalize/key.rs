//! Cache key normalization: split on separators, replace the parts that look
//! like ids, hashes or user data. The rules are those of URL path
//! parameterizers (Sentry's transaction-name scrubbing, Datadog's
//! "path segments with digits"), with version tags kept for readability:
//! `v2` has a handful of values, not one per user.

use super::Capped;
use crate::digest::ParamDigest;

/// Parts longer than this are taken for data (serialized arguments, URLs,
/// encoded blobs): key words in real schemas are far shorter.
const MAX_KEY_WORD: usize = 48;

/// Hex-only parts at least this long are hashes or ids ("deadbeef"); shorter
/// ones may be words ("cafe", "bad").
const MIN_HEX_ID: usize = 8;

/// Mixed-case tokens at least this long are checked for base64-like case
/// changes (`AbCdEfGhIjKlMnOp`); 16 chars = 96 bits, a typical token size.
const MIN_TOKEN: usize = 16;

fn is_separator(b: u8) -> bool {
    matches!(b, b':' | b'/' | b'|' | b'#' | b'.' | b',' | b'=')
}

/// See `normalize::key`.
pub(super) fn normalize(key: &[u8], digest: &mut ParamDigest) -> String {
    let Ok(text) = std::str::from_utf8(key) else {
        digest.add(key);
        return "?".into();
    };
    if text.chars().any(char::is_control) {
        digest.add(key);
        return "?".into();
    }
    let mut out = Capped::default();
    let mut start = 0;
    for (i, &b) in key.iter().enumerate() {
        if is_separator(b) {
            part(text.get(start..i).unwrap_or_default(), &mut out, digest);
            out.push(text.get(i..=i).unwrap_or_default());
            start = i + 1;
        }
    }
    part(text.get(start..).unwrap_or_default(), &mut out, digest);
    out.finish()
}

fn part(p: &str, out: &mut Capped, digest: &mut ParamDigest) {
    if is_variable(p.as_bytes()) {
        digest.add(p.as_bytes());
        out.push("?");
    } else {
        out.push(p);
    }
}

/// `v1`..`v99`: a schema version, kept.
fn is_version_tag(p: &[u8]) -> bool {
    match p {
        [b'v' | b'V', rest @ ..] => {
            (1..=2).contains(&rest.len()) && rest.iter().all(u8::is_ascii_digit)
        }
        _ => false,
    }
}

fn is_variable(p: &[u8]) -> bool {
    if p.is_empty() || is_version_tag(p) {
        return false;
    }
    if p.len() > MAX_KEY_WORD {
        return true;
    }
    let (mut upper, mut lower, mut hex, mut token) = (false, false, true, true);
    let mut case_changes = 0usize;
    let mut prev_upper = None;
    for &b in p {
        if b.is_ascii_digit() || b == b'@' || b == b' ' {
            return true;
        }
        hex &= b.is_ascii_hexdigit();
        token &= b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'_');
        if b.is_ascii_alphabetic() {
            let is_upper = b.is_ascii_uppercase();
            upper |= is_upper;
            lower |= !is_upper;
            if prev_upper.is_some_and(|u| u != is_upper) {
                case_changes += 1;
            }
            prev_upper = Some(is_upper);
        }
    }
    if hex && p.len() >= MIN_HEX_ID {
        return true;
    }
    // Random base64 changes case about every other letter; camelCase words
    // (`userPreferencesCache`: 4 in 20) far less. Short PascalCase words
    // change as often (`TimeSeriesQueryService`: 7 in 22) but never hold a
    // one-letter lower-case word between capitals, which random letters
    // do within 16 letters six times in seven.
    token
        && upper
        && lower
        && p.len() >= MIN_TOKEN
        && case_changes * 4 >= p.len()
        && has_lone_lower(p)
}

/// A lower-case letter between two capitals (`AbC`).
fn has_lone_lower(p: &[u8]) -> bool {
    p.windows(3).any(|w| {
        w[0].is_ascii_uppercase() && w[1].is_ascii_lowercase() && w[2].is_ascii_uppercase()
    })
}
