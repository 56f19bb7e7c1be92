//! Holds a text output to its JSON document: every number the text shows
//! must be a numeric field of the document, in the unit the text gives it
//! (ms from a `_us` field, % from a share, KiB from bytes), to the
//! precision shown. Identifiers the document holds as strings (addresses,
//! statement shapes, request names) are taken out of the text first; prose
//! fields (summaries, notes) are not identifiers: a number only they hold
//! was composed into a sentence and is reported.

use serde_json::Value;

/// String fields that hold sentences, not identifiers.
const PROSE: &[&str] = &[
    "summary", "note", "notes", "fix", "errors", "message", "why", "what",
];

/// Units the text puts after a number.
const UNITS: &[&str] = &[
    "ms", "µs", "us", "s", "%", "×", "KiB", "MiB", "GiB", "kB", "MB", "B", "bytes",
];

struct Document {
    /// Every numeric field, with the key it sits under.
    numbers: Vec<(String, f64)>,
    /// Every identifier string, longest first.
    identifiers: Vec<String>,
}

fn walk(key: &str, v: &Value, doc: &mut Document) {
    match v {
        Value::Number(n) => doc.numbers.push((key.to_string(), n.as_f64().unwrap())),
        Value::String(s) if !PROSE.contains(&key) && s.chars().any(|c| c.is_ascii_digit()) => {
            doc.identifiers.push(s.clone())
        }
        // A list's length is a fact of it: text bounds a long list of ids
        // as "#1 #2 #3 … (40 in all)".
        Value::Array(items) => {
            doc.numbers.push((format!("{key}.len"), items.len() as f64));
            items.iter().for_each(|i| walk(key, i, doc))
        }
        Value::Object(map) => map.iter().for_each(|(k, v)| walk(k, v, doc)),
        _ => {}
    }
}

/// The text with every identifier (and every identifier cut short with
/// "…", as table columns do) blanked out.
fn without_identifiers(text: &str, doc: &Document) -> String {
    let mut text = text.to_string();
    for id in &doc.identifiers {
        if text.contains(id.as_str()) {
            text = replace_whole(&text, id);
        }
    }
    let mut out = String::new();
    for line in text.lines() {
        let mut line = line.to_string();
        while let Some(end) = line.find('…') {
            let before = &line[..end];
            // The longest run of words before "…" that starts an identifier.
            let cut = before
                .char_indices()
                .filter(|(i, c)| *i == 0 || c.is_whitespace())
                .map(|(i, _)| i)
                .find(|&i| {
                    let head = before[i..].trim();
                    head.len() >= 3 && doc.identifiers.iter().any(|id| id.starts_with(head))
                })
                .unwrap_or(end);
            line = format!("{} {}", &line[..cut], &line[end + '…'.len_utf8()..]);
        }
        out += &line;
        out.push('\n');
    }
    out
}

/// `text` with each occurrence of `id` replaced by a space, except where
/// it would cut a number apart: an identifier "1" leaves "18 ms" whole.
fn replace_whole(text: &str, id: &str) -> String {
    let numeric = |c: Option<char>| c.is_some_and(|c| c.is_ascii_digit() || c == '.');
    let (first, last) = (id.chars().next(), id.chars().last());
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(id) {
        let before = rest[..at].chars().last().or_else(|| out.chars().last());
        let after = rest[at + id.len()..].chars().next();
        out += &rest[..at];
        let cuts = (numeric(before) && numeric(first)) || (numeric(after) && numeric(last));
        match cuts {
            true => out += id,
            false => out.push(' '),
        }
        rest = &rest[at + id.len()..];
    }
    out + rest
}

/// A number the text shows, its decimals and its unit.
#[derive(Debug)]
pub struct Shown {
    pub text: String,
    value: f64,
    decimals: i32,
    unit: String,
}

fn shown_numbers(text: &str) -> Vec<Shown> {
    let chars: Vec<char> = text.chars().collect();
    let mut found = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let starts = chars[i].is_ascii_digit()
            && (i == 0 || !(chars[i - 1].is_alphanumeric() || "_/.:$-'".contains(chars[i - 1])));
        if !starts {
            i += 1;
            continue;
        }
        let mut j = i;
        while j < chars.len() && (chars[j].is_ascii_digit() || chars[j] == '.') {
            j += 1;
        }
        let number: String = chars[i..j].iter().collect::<String>();
        let number = number.trim_end_matches('.').to_string();
        // A number glued to letters (p99, h2, 1st) is a name, not a value.
        let glued = j < chars.len() && (chars[j].is_alphabetic() && !is_unit_start(&chars[j..]));
        if !glued && number.parse::<f64>().is_ok() {
            let rest: String = chars[j..].iter().take(8).collect();
            let rest = rest.trim_start_matches(' ');
            let unit = UNITS
                .iter()
                .find(|u| {
                    rest.starts_with(**u)
                        && !rest[u.len()..]
                            .chars()
                            .next()
                            .is_some_and(|c| c.is_alphanumeric())
                })
                .map_or("", |u| u);
            found.push(Shown {
                text: format!("{number}{unit}"),
                value: number.parse().unwrap(),
                decimals: number.split_once('.').map_or(0, |(_, d)| d.len() as i32),
                unit: unit.to_string(),
            });
        }
        i = j.max(i + 1);
        while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '.') {
            i += 1;
        }
    }
    found
}

fn is_unit_start(rest: &[char]) -> bool {
    let s: String = rest.iter().take(5).collect();
    UNITS.iter().any(|u| {
        s.starts_with(u)
            && !s[u.len()..]
                .chars()
                .next()
                .is_some_and(|c| c.is_alphanumeric())
    })
}

/// Whether a field under `key` holding `v` reads as `shown`.
fn reads_as(key: &str, v: f64, shown: &Shown) -> bool {
    let tolerance = 0.5 * 10f64.powi(-shown.decimals) + 1e-9;
    let near = |x: f64| (x - shown.value).abs() <= tolerance;
    let time = key.ends_with("_us") || key.contains("_us_");
    let bytes = key.contains("bytes");
    match shown.unit.as_str() {
        "ms" => time && near(v / 1e3) || key.ends_with("_ms") && near(v),
        "s" => {
            time && near(v / 1e6)
                || key.ends_with("_ms") && near(v / 1e3)
                || key.ends_with("_s") && near(v)
        }
        "µs" | "us" => time && near(v),
        "%" => {
            !time
                && ((0.0..=1.0).contains(&v) && near(v * 100.0)
                    || key.contains("percent") && near(v))
        }
        "KiB" => bytes && near(v / 1024.0),
        "MiB" => bytes && near(v / 1048576.0),
        "GiB" => bytes && near(v / 1073741824.0),
        "kB" => bytes && near(v / 1e3),
        "MB" => bytes && near(v / 1e6),
        _ => !time && near(v),
    }
}

/// The numbers of `text` that no numeric field of `doc` holds.
pub fn numbers_not_in_json(text: &str, doc: &Value) -> Vec<String> {
    let mut d = Document {
        numbers: Vec::new(),
        identifiers: Vec::new(),
    };
    walk("", doc, &mut d);
    d.identifiers.sort_by_key(|s| std::cmp::Reverse(s.len()));
    d.identifiers.dedup();
    let text = without_identifiers(text, &d);
    let mut missing = Vec::new();
    for line in text.lines() {
        // A list's ordinal ("2. n_plus_one") is a position, not a fact.
        let trimmed = line.trim_start();
        let line = match trimmed.split_once(". ") {
            Some((n, rest)) if n.parse::<u32>().is_ok() => rest,
            _ => line,
        };
        for shown in shown_numbers(line) {
            if !d.numbers.iter().any(|(k, v)| reads_as(k, *v, &shown)) {
                missing.push(format!("{} in: {}", shown.text, line.trim()));
            }
        }
    }
    missing
}
