//! The label of a PostgreSQL statement prepared by name before the capture
//! began: the capture never saw its text, only its name on one connection,
//! what its Bind carried (the parameters) and what the server answered (the
//! command tag's verb, the columns of its rows). One format, written by the
//! analyzer and read back by the step that tells such statements apart
//! across connections: a client that names statements per connection
//! (tokio-postgres' process-wide `s12`, `s41`) gives one statement a name on
//! each connection.

use smol_str::SmolStr;

const PREFIX: &str = "? (statement ";
const SUFFIX: &str = ", prepared before the capture)";
/// Between the name and the rest, once the statement is known under other
/// names on other connections.
const COPIES: &str = " and its copies on other connections";

/// What the wire showed of a statement prepared before the capture.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PreparedShape<'a> {
    pub params: Option<u16>,
    /// Columns of its rows (a DataRow's count), when it returned any.
    pub columns: Option<u16>,
    /// The command tag's first word: SELECT, UPDATE, COMMIT.
    pub verb: Option<&'a str>,
}

/// The label of statement `name` (already shown printable and bounded).
pub fn prepared_label(name: &str, shape: PreparedShape) -> SmolStr {
    let mut s = String::with_capacity(80);
    s.push_str(PREFIX);
    s.push_str(name);
    match shape.params {
        Some(1) => s.push_str(", 1 parameter"),
        Some(n) => s.push_str(&format!(", {n} parameters")),
        None => {}
    }
    match (shape.columns, shape.params) {
        (Some(c), Some(_)) => s.push_str(&format!(" → {c} column{}", plural(c))),
        (Some(c), None) => s.push_str(&format!(", {c} column{}", plural(c))),
        _ => {}
    }
    if let Some(v) = shape.verb {
        s.push_str(", ");
        s.push_str(v);
    }
    s.push_str(SUFFIX);
    SmolStr::from(s)
}

fn plural(n: u16) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

/// A prepared-before label's name and the rest (its shape, as written),
/// None for any other label. A name holding ", " splits early: its rest
/// then differs from its copies' and nothing is told the same.
pub fn prepared_parts(label: &str) -> Option<(&str, &str)> {
    let body = label.strip_prefix(PREFIX)?.strip_suffix(SUFFIX)?;
    // By bytes: every SQL call asks, and a substring searcher costs more
    // to set up than this scan.
    let at = body
        .as_bytes()
        .windows(2)
        .position(|w| w == b", ")
        .unwrap_or(body.len());
    let name = &body[..at];
    Some((name.strip_suffix(COPIES).unwrap_or(name), &body[at..]))
}

/// The label naming the statement of `label` as one known under other
/// names on other connections; None when `label` is not prepared-before
/// or says so already.
pub fn with_copies(label: &str) -> Option<SmolStr> {
    if label.contains(COPIES) {
        return None;
    }
    let (name, rest) = prepared_parts(label)?;
    Some(SmolStr::from(format!(
        "{PREFIX}{name}{COPIES}{rest}{SUFFIX}"
    )))
}

/// The command verb a prepared-before label carries (SELECT, UPDATE).
pub fn prepared_verb(label: &str) -> Option<&str> {
    let (_, rest) = prepared_parts(label)?;
    rest.rsplit(", ")
        .next()
        .filter(|v| !v.is_empty() && v.bytes().all(|b| b.is_ascii_uppercase()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_label_reads_back() {
        let shape = PreparedShape {
            params: Some(1),
            columns: Some(3),
            verb: Some("SELECT"),
        };
        let l = prepared_label("s17", shape);
        assert_eq!(
            l,
            "? (statement s17, 1 parameter → 3 columns, SELECT, prepared before the capture)"
        );
        assert_eq!(
            prepared_parts(&l),
            Some(("s17", ", 1 parameter → 3 columns, SELECT"))
        );
        assert_eq!(prepared_verb(&l), Some("SELECT"));
        let copies = with_copies(&l).unwrap();
        assert_eq!(
            copies,
            "? (statement s17 and its copies on other connections, 1 parameter → 3 columns, \
             SELECT, prepared before the capture)"
        );
        assert_eq!(prepared_parts(&copies), prepared_parts(&l));
        assert_eq!(with_copies(&copies), None);
    }

    #[test]
    fn partial_shapes_and_other_labels() {
        let bare = prepared_label("S_2", PreparedShape::default());
        assert_eq!(bare, "? (statement S_2, prepared before the capture)");
        assert_eq!(prepared_parts(&bare), Some(("S_2", "")));
        assert_eq!(prepared_verb(&bare), None);
        let commit = prepared_label(
            "S_2",
            PreparedShape {
                params: Some(0),
                verb: Some("COMMIT"),
                ..Default::default()
            },
        );
        assert_eq!(prepared_verb(&commit), Some("COMMIT"));
        assert_eq!(prepared_parts("SELECT 1"), None);
        assert_eq!(
            prepared_parts("? (statement parsed before the capture)"),
            None
        );
    }
}
