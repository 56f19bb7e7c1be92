//! The lab app's MySQL client: a login with an empty password, text queries
//! (the setup script) and prepared statements on the binary protocol, each
//! text prepared once per connection at its first use, as Connector/J's
//! statement cache does. It speaks to the lab's server and to a real MySQL
//! or MariaDB (a user with no password); the tests hold whyslow's analyzer
//! to real clients (PyMySQL, Connector/Python, Connector/J) as well.

use super::wire::{self, Out, Reader};
use crate::pgmini::shop::Value;
use bytes::BytesMut;
use std::collections::HashMap;
use std::io::{Error, ErrorKind};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

/// How a result set's rows are written.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Protocol {
    Text,
    Binary,
}

/// A text-protocol row: a length-encoded string per column (0xFB: NULL),
/// integers by their column's type.
fn text_row(body: &[u8], types: &[u8]) -> std::io::Result<Vec<Value>> {
    let mut r = Reader(body);
    let mut row = Vec::with_capacity(types.len());
    for &t in types {
        if r.0.first() == Some(&0xfb) {
            r.take(1);
            row.push(Value::Text(String::new()));
            continue;
        }
        let text = String::from_utf8_lossy(r.lenenc_str().ok_or_else(malformed)?).into_owned();
        row.push(match t {
            0x01..=0x03 | wire::LONGLONG | 0x09 | 0x0d => {
                Value::Int(text.parse().map_err(|_| malformed())?)
            }
            _ => Value::Text(text),
        });
    }
    Ok(row)
}

/// A statement prepared on this connection: its id and parameter count.
struct Prepared {
    id: u32,
    params: usize,
}

pub struct Client {
    stream: TcpStream,
    buf: BytesMut,
    out: Out,
    prepared: HashMap<String, Prepared>,
}

fn server_error(body: &[u8]) -> Error {
    let text = String::from_utf8_lossy(body.get(3..).unwrap_or_default()).into_owned();
    Error::other(format!("mysql: {text}"))
}

fn malformed() -> Error {
    Error::new(ErrorKind::InvalidData, "mysql: malformed packet")
}

impl Client {
    /// Logs in as `user` (no password) to database `db` over `stream`.
    pub async fn connect_from(stream: TcpStream, user: &str, db: &str) -> std::io::Result<Client> {
        stream.set_nodelay(true)?;
        let mut c = Client {
            stream,
            buf: BytesMut::with_capacity(8192),
            out: Out::default(),
            prepared: HashMap::new(),
        };
        let (seq, _greeting) = c.read().await?;
        c.out.packet(seq.wrapping_add(1), |b| {
            b.extend_from_slice(&super::CAPABILITIES.to_le_bytes());
            b.extend_from_slice(&(1u32 << 24).to_le_bytes());
            b.push(45);
            b.extend_from_slice(&[0; 23]);
            b.extend_from_slice(user.as_bytes());
            b.push(0);
            b.push(0); // an empty password
            b.extend_from_slice(db.as_bytes());
            b.push(0);
            b.extend_from_slice(b"mysql_native_password\0");
        });
        c.send().await?;
        loop {
            let (seq, body) = c.read().await?;
            match body.first() {
                Some(0x00) => return Ok(c),
                // Another plugin asked for: an empty password is empty in all.
                Some(0xfe) => {
                    c.out.packet(seq.wrapping_add(1), |_| {});
                    c.send().await?;
                }
                _ => return Err(server_error(&body)),
            }
        }
    }

    async fn read(&mut self) -> std::io::Result<(u8, BytesMut)> {
        wire::read_packet(&mut self.stream, &mut self.buf).await
    }

    async fn send(&mut self) -> std::io::Result<()> {
        let bytes = self.out.take();
        self.stream.write_all(&bytes).await
    }

    /// A text query whose result, if any, is read and dropped.
    pub async fn query(&mut self, sql: &str) -> std::io::Result<()> {
        self.query_rows(sql).await.map(|_| ())
    }

    /// The rows of a text query (`COM_QUERY`: its values written in it, as
    /// a client that interpolates them sends it).
    pub async fn query_rows(&mut self, sql: &str) -> std::io::Result<Vec<Vec<Value>>> {
        self.out.packet(0, |b| {
            b.push(wire::COM_QUERY);
            b.extend_from_slice(sql.as_bytes());
        });
        self.send().await?;
        self.result(Protocol::Text).await
    }

    /// The rows of `sql` run with `params`, prepared on first use and kept.
    pub async fn execute(
        &mut self,
        sql: &str,
        params: &[Value],
    ) -> std::io::Result<Vec<Vec<Value>>> {
        if !self.prepared.contains_key(sql) {
            let p = self.prepare(sql).await?;
            self.prepared.insert(sql.to_string(), p);
        }
        let p = &self.prepared[sql];
        let (id, count) = (p.id, p.params);
        self.run(id, count, params).await
    }

    async fn run(
        &mut self,
        id: u32,
        count: usize,
        params: &[Value],
    ) -> std::io::Result<Vec<Vec<Value>>> {
        if count != params.len() {
            return Err(Error::new(ErrorKind::InvalidInput, "parameter count"));
        }
        self.out.packet(0, |b| {
            b.push(wire::COM_STMT_EXECUTE);
            b.extend_from_slice(&id.to_le_bytes());
            b.push(0);
            b.extend_from_slice(&1u32.to_le_bytes());
            if params.is_empty() {
                return;
            }
            b.extend(std::iter::repeat_n(0, params.len().div_ceil(8)));
            b.push(1);
            let mut values = Vec::new();
            for v in params {
                let t = wire::encode_value(&mut values, v);
                b.extend_from_slice(&[t, 0]);
            }
            b.extend_from_slice(&values);
        });
        self.send().await?;
        self.result(Protocol::Binary).await
    }

    async fn prepare(&mut self, sql: &str) -> std::io::Result<Prepared> {
        self.out.packet(0, |b| {
            b.push(wire::COM_STMT_PREPARE);
            b.extend_from_slice(sql.as_bytes());
        });
        self.send().await?;
        let (_, body) = self.read().await?;
        if body.first() != Some(&0) {
            return Err(server_error(&body));
        }
        let mut r = Reader(&body[1..]);
        let id = r.u32().ok_or_else(malformed)?;
        let columns = r.u16().ok_or_else(malformed)?;
        let params = r.u16().ok_or_else(malformed)?;
        for n in [params, columns] {
            if n > 0 {
                self.skip_definitions().await?;
            }
        }
        Ok(Prepared {
            id,
            params: usize::from(params),
        })
    }

    /// Definitions up to their EOF.
    async fn skip_definitions(&mut self) -> std::io::Result<Vec<u8>> {
        let mut types = Vec::new();
        loop {
            let (_, body) = self.read().await?;
            if body.first() == Some(&0xfe) && body.len() < 9 {
                return Ok(types);
            }
            let mut r = Reader(&body);
            for _ in 0..6 {
                r.lenenc_str().ok_or_else(malformed)?;
            }
            r.lenenc().ok_or_else(malformed)?;
            r.take(6).ok_or_else(malformed)?;
            types.push(r.u8().ok_or_else(malformed)?);
        }
    }

    /// An answer: OK, ERR, or a result set and its rows.
    async fn result(&mut self, protocol: Protocol) -> std::io::Result<Vec<Vec<Value>>> {
        let (_, body) = self.read().await?;
        match body.first() {
            Some(0x00) => return Ok(Vec::new()),
            Some(0xff) | None => return Err(server_error(&body)),
            _ => {}
        }
        let types = self.skip_definitions().await?;
        let mut rows = Vec::new();
        loop {
            let (_, body) = self.read().await?;
            match body.first() {
                Some(0xfe) if body.len() < 9 => return Ok(rows),
                Some(0xff) => return Err(server_error(&body)),
                _ if protocol == Protocol::Text => rows.push(text_row(&body, &types)?),
                _ => {
                    let mut r = Reader(&body);
                    r.take(1).ok_or_else(malformed)?;
                    // The NULL bitmap starts at bit 2 in result rows.
                    let nulls = r.take((types.len() + 9) / 8).ok_or_else(malformed)?;
                    let is_null = |i: usize| nulls[(i + 2) / 8] & (1 << ((i + 2) % 8)) != 0;
                    let mut row = Vec::with_capacity(types.len());
                    for (i, &t) in types.iter().enumerate() {
                        let v = match is_null(i) {
                            true => Value::Text(String::new()),
                            false => wire::decode_value(&mut r, t).ok_or_else(malformed)?,
                        };
                        row.push(v);
                    }
                    rows.push(row);
                }
            }
        }
    }
}
