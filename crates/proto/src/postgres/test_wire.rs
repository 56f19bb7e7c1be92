//! Wire bytes as real clients and servers send them, and the test driver.

use super::*;
use whyslow_model::Direction::{ToClient, ToServer};

pub(super) fn msg(kind: u8, body: &[u8]) -> Vec<u8> {
    let mut m = vec![kind];
    m.extend_from_slice(&(body.len() as u32 + 4).to_be_bytes());
    m.extend_from_slice(body);
    m
}

pub(super) fn cstrs(parts: &[&[u8]]) -> Vec<u8> {
    let mut b = Vec::new();
    for p in parts {
        b.extend_from_slice(p);
        b.push(0);
    }
    b
}

pub(super) fn untyped(code: u32, body: &[u8]) -> Vec<u8> {
    let mut m = (body.len() as u32 + 8).to_be_bytes().to_vec();
    m.extend_from_slice(&code.to_be_bytes());
    m.extend_from_slice(body);
    m
}

pub(super) fn startup() -> Vec<u8> {
    let mut body = cstrs(&[
        b"user",
        b"app",
        b"database",
        b"shop",
        b"application_name",
        b"psql",
    ]);
    body.push(0);
    untyped(196_608, &body)
}

pub(super) fn q(text: &str) -> Vec<u8> {
    msg(b'Q', &cstrs(&[text.as_bytes()]))
}

pub(super) fn parse(name: &str, text: &str) -> Vec<u8> {
    let mut b = cstrs(&[name.as_bytes(), text.as_bytes()]);
    b.extend_from_slice(&0u16.to_be_bytes());
    msg(b'P', &b)
}

pub(super) fn bind(stmt: &str, values: &[Option<&[u8]>]) -> Vec<u8> {
    let mut b = cstrs(&[b"", stmt.as_bytes()]);
    b.extend_from_slice(&1u16.to_be_bytes()); // one format code: text
    b.extend_from_slice(&0u16.to_be_bytes());
    b.extend_from_slice(&(values.len() as u16).to_be_bytes());
    for v in values {
        match v {
            Some(v) => {
                b.extend_from_slice(&(v.len() as u32).to_be_bytes());
                b.extend_from_slice(v);
            }
            None => b.extend_from_slice(&(-1i32).to_be_bytes()),
        }
    }
    b.extend_from_slice(&0u16.to_be_bytes()); // result formats
    msg(b'B', &b)
}

pub(super) fn describe_portal() -> Vec<u8> {
    msg(b'D', b"P\0")
}

pub(super) fn execute(max_rows: u32) -> Vec<u8> {
    let mut b = vec![0];
    b.extend_from_slice(&max_rows.to_be_bytes());
    msg(b'E', &b)
}

pub(super) fn sync() -> Vec<u8> {
    msg(b'S', b"")
}

pub(super) fn ready(status: u8) -> Vec<u8> {
    msg(b'Z', &[status])
}

pub(super) fn complete(tag: &str) -> Vec<u8> {
    msg(b'C', &cstrs(&[tag.as_bytes()]))
}

pub(super) fn row(value: &[u8]) -> Vec<u8> {
    let mut b = 1u16.to_be_bytes().to_vec();
    b.extend_from_slice(&(value.len() as u32).to_be_bytes());
    b.extend_from_slice(value);
    msg(b'D', &b)
}

pub(super) fn row_desc() -> Vec<u8> {
    let mut b = 1u16.to_be_bytes().to_vec();
    b.extend_from_slice(b"id\0");
    b.extend_from_slice(&[0; 18]);
    msg(b'T', &b)
}

pub(super) fn error(code: &str) -> Vec<u8> {
    let mut b = cstrs(&[b"SERROR", b"VERROR", format!("C{code}").as_bytes()]);
    b.extend_from_slice(b"Mrelation \"secret-4111\" does not exist\0Fparse_relation.c\0\0");
    msg(b'E', &b)
}

/// Authentication ok, parameter statuses, backend key, ready.
pub(super) fn server_hello() -> Vec<u8> {
    let mut b = msg(b'R', &0u32.to_be_bytes());
    b.extend(msg(b'S', b"server_version\x0016.2\0"));
    b.extend(msg(b'S', b"client_encoding\0UTF8\0"));
    b.extend(msg(b'K', &[0, 0, 0x30, 0x39, 1, 2, 3, 4]));
    b.extend(ready(b'I'));
    b
}

pub(super) fn cat(parts: &[Vec<u8>]) -> Vec<u8> {
    parts.concat()
}

pub(super) type Chunks = Vec<(Direction, Vec<u8>)>;

/// Feeds chunks in order (packet = index + 1, time = 1000 × packet).
pub(super) fn run_from(start: Start, chunks: &Chunks) -> (Vec<Exchange>, Option<String>) {
    let mut a = PgAnalyzer::new(3, start);
    let (out, note) = crate::testkit::feed(&mut a, chunks.iter().map(|(d, b)| (*d, b.as_slice())));
    assert_no_secrets(&out);
    (out, note)
}

pub(super) fn run(chunks: &Chunks) -> (Vec<Exchange>, Option<String>) {
    run_from(Start::Beginning, chunks)
}

/// The values tests put in literals, bind parameters, passwords and error
/// messages never reach an exchange.
pub(super) fn assert_no_secrets(ex: &[Exchange]) {
    let text = format!("{ex:?}");
    for secret in ["secret-4111", "passw0rd", "4111"] {
        assert!(!text.contains(secret), "{secret} leaked: {text}");
    }
}

/// True once `normalize::sql` replaces literals (it is written elsewhere).
pub(super) fn literals_normalized() -> bool {
    let mut d = crate::digest::ParamDigest::new();
    !crate::normalize::sql("SELECT 'x1'", &mut d).contains("x1")
}

pub(super) fn labels(ex: &[Exchange]) -> Vec<String> {
    ex.iter().map(|e| e.request.to_string()).collect()
}

/// The label `normalize::sql` makes of `text` (expected values in tests).
pub(super) fn norm(text: &str) -> String {
    crate::normalize::sql(text, &mut crate::digest::ParamDigest::new())
}

pub(super) fn norms(texts: &[&str]) -> Vec<String> {
    texts.iter().map(|t| norm(t)).collect()
}

/// `chunks` with the `dir` chunk that holds byte `i` of that direction cut there.
pub(super) fn split_at(chunks: &Chunks, dir: Direction, i: usize) -> Chunks {
    let mut out = Vec::new();
    let mut seen = 0;
    for (d, data) in chunks {
        if *d == dir && seen < i && i < seen + data.len() {
            out.push((dir, data[..i - seen].to_vec()));
            out.push((dir, data[i - seen..].to_vec()));
        } else {
            out.push((*d, data.clone()));
        }
        if *d == dir {
            seen += data.len();
        }
    }
    out
}

/// The answer to Parse, Bind, Execute, Sync of a one-row SELECT.
pub(super) fn extended_one_row() -> Vec<u8> {
    cat(&[
        msg(b'1', b""),
        msg(b'2', b""),
        row(b"1"),
        complete("SELECT 1"),
        ready(b'I'),
    ])
}

pub(super) fn begin() -> Chunks {
    vec![(ToServer, startup()), (ToClient, server_hello())]
}
