//! A small in-memory server that speaks MySQL's client/server protocol, so
//! the lab's orm-storm runs on MySQL with nothing installed: a greeting, any
//! login accepted, text queries acknowledged without running them (a setup
//! script meant for a real server), and prepared statements on the binary
//! protocol (`COM_STMT_PREPARE`, `COM_STMT_EXECUTE`, `COM_STMT_CLOSE`) for
//! the shop's statements in MySQL's dialect (`shop::mysql_text`); any other
//! statement is an error, as a real server's unknown table would be. EOF
//! packets are sent (no `CLIENT_DEPRECATE_EOF`). Each statement costs what
//! one costs in the PostgreSQL lab server (`pgmini::Costs`).
//!
//! Hand-written for the reason `pgmini` is: the lab needs a server side.

pub mod client;
mod wire;

use crate::pgmini::shop::{self, Statement, Value, INT8};
use crate::pgmini::Costs;
use bytes::BytesMut;
use std::collections::HashMap;
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use wire::{Out, Reader};

/// Statements kept per connection, as `pgmini` keeps.
const MAX_STATEMENTS: usize = 1000;
/// Capabilities offered: protocol 4.1, 4.1 authentication, plugin names,
/// a database at connect, transactions, several results.
pub const CAPABILITIES: u32 = 0x0001 | 0x0008 | 0x0200 | 0x2000 | 0x8000 | 0x2_0000 | 0x8_0000;
/// Status flags: autocommit.
const AUTOCOMMIT: u16 = 0x0002;

/// A prepared statement: the shop's, its list's length, and the parameter
/// types its first execution sent.
struct Prepared {
    statement: &'static Statement,
    list: usize,
    types: Vec<u8>,
}

#[derive(Default)]
struct Session {
    statements: HashMap<u32, Prepared>,
    next_id: u32,
}

/// What the connection does after a command.
enum Action {
    Quit,
    /// Nothing to write (`COM_STMT_CLOSE`).
    None,
    Write,
    /// Run the statement (after its cost), then write its rows.
    Execute(&'static Statement, Vec<Value>),
    /// As `Execute`, the rows in the text protocol.
    Query(&'static Statement, Vec<Value>),
}

pub async fn serve(listener: TcpListener, statement_us: u64) {
    let cost = Duration::from_micros(statement_us);
    crate::scenario::accept_each(listener, |stream| async move {
        let _ = connection(stream, cost).await;
    })
    .await
}

fn greeting(out: &mut Out) {
    out.packet(0, |b| {
        b.push(10);
        b.extend_from_slice(b"10.11.0-whyslow-lab\0");
        b.extend_from_slice(&1u32.to_le_bytes());
        b.extend_from_slice(b"labsalt1\0");
        b.extend_from_slice(&(CAPABILITIES as u16).to_le_bytes());
        b.push(45);
        b.extend_from_slice(&AUTOCOMMIT.to_le_bytes());
        b.extend_from_slice(&((CAPABILITIES >> 16) as u16).to_le_bytes());
        b.push(21);
        b.extend_from_slice(&[0; 10]);
        b.extend_from_slice(b"labsalt2abcd\0mysql_native_password\0");
    });
}

fn ok(out: &mut Out, seq: u8) {
    out.packet(seq, |b| {
        b.extend_from_slice(&[0, 0, 0]);
        b.extend_from_slice(&AUTOCOMMIT.to_le_bytes());
        b.extend_from_slice(&[0, 0]);
    });
}

fn eof(out: &mut Out, seq: u8) {
    out.packet(seq, |b| {
        b.extend_from_slice(&[0xfe, 0, 0]);
        b.extend_from_slice(&AUTOCOMMIT.to_le_bytes());
    });
}

fn error(out: &mut Out, seq: u8, code: u16, state: &str, message: &str) {
    out.packet(seq, |b| {
        b.push(0xff);
        b.extend_from_slice(&code.to_le_bytes());
        b.push(b'#');
        b.extend_from_slice(state.as_bytes());
        b.extend_from_slice(message.as_bytes());
    });
}

fn column(out: &mut Out, seq: u8, name: &str, oid: u32) {
    out.packet(seq, |b| {
        for s in ["def", "shop", "t", "t", name, name] {
            wire::lenenc_str(b, s.as_bytes());
        }
        b.push(0x0c);
        let (charset, t) = if oid == INT8 {
            (63u16, wire::LONGLONG)
        } else {
            (45, wire::VAR_STRING)
        };
        b.extend_from_slice(&charset.to_le_bytes());
        b.extend_from_slice(&255u32.to_le_bytes());
        b.push(t);
        b.extend_from_slice(&[0, 0, 0, 0, 0]);
    });
}

async fn connection(mut stream: TcpStream, cost: Duration) -> std::io::Result<()> {
    stream.set_nodelay(true)?;
    let mut costs = Costs::new(cost);
    let mut buf = BytesMut::with_capacity(8192);
    let mut out = Out::default();
    greeting(&mut out);
    stream.write_all(&out.take()).await?;
    let (seq, _login) = wire::read_packet(&mut stream, &mut buf).await?;
    ok(&mut out, seq.wrapping_add(1));
    stream.write_all(&out.take()).await?;
    let mut session = Session::default();
    loop {
        let (_, body) = wire::read_packet(&mut stream, &mut buf).await?;
        match dispatch(&mut session, &body, &mut out) {
            Action::Quit => return Ok(()),
            Action::None => {}
            Action::Write => stream.write_all(&out.take()).await?,
            Action::Execute(statement, params) => {
                crate::work::work_for(costs.next()).await;
                rows(&mut out, statement, &shop::run(statement, &params), true);
                stream.write_all(&out.take()).await?;
            }
            Action::Query(statement, params) => {
                crate::work::work_for(costs.next()).await;
                rows(&mut out, statement, &shop::run(statement, &params), false);
                stream.write_all(&out.take()).await?;
            }
        }
    }
}

/// One command's bookkeeping and answers.
fn dispatch(session: &mut Session, body: &[u8], out: &mut Out) -> Action {
    let mut r = Reader(body);
    match r.u8() {
        Some(wire::COM_QUIT) => return Action::Quit,
        Some(wire::COM_STMT_CLOSE) => {
            if let Some(id) = r.u32() {
                session.statements.remove(&id);
            }
            return Action::None;
        }
        Some(wire::COM_QUERY) => {
            // A shop statement with its values in it runs; anything else
            // (a setup script meant for a real server) is acknowledged.
            let text = String::from_utf8_lossy(r.0);
            match with_placeholders(without_comment(&text)) {
                Some((statement, params)) => return Action::Query(statement, params),
                None => ok(out, 1),
            }
        }
        Some(wire::COM_PING | wire::COM_STMT_RESET) => ok(out, 1),
        Some(wire::COM_STMT_PREPARE) => prepare(session, r.0, out),
        Some(wire::COM_STMT_EXECUTE) => match execute(session, &mut r) {
            Ok((statement, params)) => return Action::Execute(statement, params),
            Err(e) => error(out, 1, e.0, e.1, &e.2),
        },
        _ => error(out, 1, 1047, "08S01", "unknown command"),
    }
    Action::Write
}

/// The statement without a trailing comment (sqlcommenter's).
fn without_comment(sql: &str) -> &str {
    let sql = sql.trim();
    match (sql.ends_with("*/"), sql.rfind("/*")) {
        (true, Some(at)) => sql[..at].trim_end(),
        _ => sql,
    }
}

fn prepare(session: &mut Session, text: &[u8], out: &mut Out) {
    let text = String::from_utf8_lossy(text);
    let Some((statement, list)) = shop::from_mysql(without_comment(&text)) else {
        let why = "the lab's database knows only the shop's statements";
        return error(out, 1, 1146, "42S02", why);
    };
    if session.statements.len() >= MAX_STATEMENTS {
        return error(out, 1, 1461, "42000", "too many prepared statements");
    }
    session.next_id = session.next_id.wrapping_add(1);
    let id = session.next_id;
    let params = if list > 0 {
        list
    } else {
        statement.params.len()
    };
    session.statements.insert(
        id,
        Prepared {
            statement,
            list,
            types: Vec::new(),
        },
    );
    out.packet(1, |b| {
        b.push(0);
        b.extend_from_slice(&id.to_le_bytes());
        b.extend_from_slice(&(statement.columns.len() as u16).to_le_bytes());
        b.extend_from_slice(&(params as u16).to_le_bytes());
        b.extend_from_slice(&[0, 0, 0]);
    });
    let mut seq = 2;
    for _ in 0..params {
        column(out, seq, "?", INT8);
        seq += 1;
    }
    if params > 0 {
        eof(out, seq);
        seq += 1;
    }
    for &(name, oid) in statement.columns {
        column(out, seq, name, oid);
        seq += 1;
    }
    eof(out, seq);
}

/// A shop statement whose values are written in its text: the statement
/// and those values (numbers, and strings in single quotes), a list's as
/// one `Value::Ints`.
fn with_placeholders(text: &str) -> Option<(&'static Statement, Vec<Value>)> {
    let (mut shape, mut params) = (String::with_capacity(text.len()), Vec::new());
    let b = text.as_bytes();
    let mut i = 0;
    while i < b.len() {
        let starts = i == 0 || matches!(b[i - 1], b' ' | b'(' | b',' | b'=');
        if b[i] == b'\'' {
            let end = i + 1 + b[i + 1..].iter().position(|&c| c == b'\'')?;
            params.push(Value::Text(text[i + 1..end].to_string()));
            shape.push('?');
            i = end + 1;
        } else if starts && b[i].is_ascii_digit() {
            let end = i + b[i..].iter().take_while(|c| c.is_ascii_digit()).count();
            params.push(Value::Int(text[i..end].parse().ok()?));
            shape.push('?');
            i = end;
        } else {
            shape.push(b[i] as char);
            i += 1;
        }
    }
    let (statement, list) = shop::from_mysql(&shape)?;
    if list > 0 {
        let ints = params.iter().filter_map(|v| match v {
            Value::Int(i) => Some(*i),
            _ => None,
        });
        params = vec![Value::Ints(ints.collect())];
    }
    Some((statement, params))
}

/// An error to send: code, SQLSTATE, message.
type MyError = (u16, &'static str, String);

/// The statement and parameters of an execution (its list's values as one
/// `Value::Ints`).
fn execute(
    session: &mut Session,
    r: &mut Reader,
) -> Result<(&'static Statement, Vec<Value>), MyError> {
    let bad = || (1835, "08S01", "malformed packet".to_string());
    let id = r.u32().ok_or_else(bad)?;
    let p = session
        .statements
        .get_mut(&id)
        .ok_or_else(|| (1243, "HY000", format!("unknown prepared statement {id}")))?;
    r.take(5).ok_or_else(bad)?;
    let n = if p.list > 0 {
        p.list
    } else {
        p.statement.params.len()
    };
    let mut params = Vec::with_capacity(n.min(64));
    if n > 0 {
        let nulls = r.take(n.div_ceil(8)).ok_or_else(bad)?.to_vec();
        if r.u8().ok_or_else(bad)? == 1 {
            p.types = (0..n)
                .map(|_| r.u16().map(|t| t as u8))
                .collect::<Option<_>>()
                .ok_or_else(bad)?;
        }
        for i in 0..n {
            if nulls[i / 8] & (1 << (i % 8)) != 0 {
                params.push(Value::Text(String::new()));
                continue;
            }
            let t = p.types.get(i).copied().unwrap_or(wire::VAR_STRING);
            params.push(wire::decode_value(r, t).ok_or_else(bad)?);
        }
    }
    if p.list > 0 {
        let ints = params.iter().filter_map(|v| match v {
            Value::Int(i) => Some(*i),
            _ => None,
        });
        params = vec![Value::Ints(ints.collect())];
    }
    Ok((p.statement, params))
}

/// A result set: its columns, then each row (`binary`: the binary
/// protocol's, else text).
fn rows(out: &mut Out, statement: &Statement, rows: &[Vec<Value>], binary: bool) {
    out.packet(1, |b| wire::lenenc_int(b, statement.columns.len() as u64));
    let mut seq = 2u8;
    for &(name, oid) in statement.columns {
        column(out, seq, name, oid);
        seq = seq.wrapping_add(1);
    }
    eof(out, seq);
    for row in rows {
        seq = seq.wrapping_add(1);
        out.packet(seq, |b| {
            if !binary {
                for v in row {
                    wire::text_value(b, v);
                }
                return;
            }
            b.push(0);
            b.extend(std::iter::repeat_n(0, (row.len() + 7 + 2) / 8));
            for v in row {
                wire::encode_value(b, v);
            }
        });
    }
    eof(out, seq.wrapping_add(1));
}

/// Feeds `data` as command packets after the login, with no I/O and no
/// statement cost: the fuzz target's entry. Stops at the first short packet.
pub fn fuzz(data: &[u8]) {
    let (mut session, mut out) = (Session::default(), Out::default());
    let mut rest = data;
    while rest.len() >= 4 {
        let len = u32::from_le_bytes([rest[0], rest[1], rest[2], 0]) as usize;
        if 4 + len > rest.len() {
            return;
        }
        let body = &rest[4..4 + len];
        rest = &rest[4 + len..];
        match dispatch(&mut session, body, &mut out) {
            Action::Quit => return,
            Action::Execute(s, p) => rows(&mut out, s, &shop::run(s, &p), true),
            Action::Query(s, p) => rows(&mut out, s, &shop::run(s, &p), false),
            Action::None | Action::Write => {}
        }
        out.take();
    }
}

#[cfg(test)]
mod tests;
