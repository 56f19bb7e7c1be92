//! A small in-memory server that speaks the PostgreSQL protocol 3.0, so the
//! lab's orm-storm runs with nothing installed: startup with trust auth,
//! the extended protocol (Parse/Bind/Describe/Execute/Close/Sync/Flush) in
//! binary or text formats, and simple queries (answered without running
//! them: a setup script meant for a real PostgreSQL). It knows only the
//! shop's statements (`shop`); any other is an error, as a real server's
//! unknown table would be. Each statement costs `statement_us` on average,
//! spread evenly by `COST_SPREAD` either side, spent off the async workers so
//! that timers do not round it up.
//!
//! Hand-written: the lab needs a server side, which client libraries do
//! not have, and this one fits in a file.

pub mod shop;
mod wire;

use bytes::{Buf, BytesMut};
use shop::{Statement, Value, STATEMENTS};
use std::collections::HashMap;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use wire::{Out, Reader};

/// Startup packets and messages larger than this end the connection: the
/// shop's statements are far smaller.
const MAX_MESSAGE: usize = 1 << 20;
/// Prepared statements and portals kept per connection: JDBC's statement
/// cache holds 256; a client naming more gets an error, not more memory.
const MAX_NAMED: usize = 1000;
const SSL_REQUEST: u32 = 80877103;
const GSSENC_REQUEST: u32 = 80877104;
const PROTOCOL_3: u32 = 196608;
/// How far a statement's cost strays from the mean, either side, as a share
/// of it. A real server's statement times vary (cache hits, locks, the
/// scheduler); a lab whose every statement took exactly the mean kept the
/// runs of checkouts that started together in lockstep under load, ending
/// within microseconds of each other for hundreds of statements — a
/// coincidence production does not have, and one no timing can tell apart.
const COST_SPREAD: f64 = 0.5;

/// Statement costs around a mean: a small generator (SplitMix64) per
/// connection, seeded apart, so runs on different connections drift apart.
pub(crate) struct Costs {
    mean: Duration,
    state: u64,
}

/// SplitMix64's increment.
const GOLDEN: u64 = 0x9e37_79b9_7f4a_7c15;

/// SplitMix64's output mix.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl Costs {
    /// A connection's generator. Its start is the mix of a counter: starts
    /// a plain step apart would give each connection the previous one's
    /// costs shifted by one statement, and runs would keep in step again.
    pub(crate) fn new(mean: Duration) -> Costs {
        static CONNECTIONS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        let n = CONNECTIONS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Costs {
            mean,
            state: mix(n.wrapping_mul(GOLDEN)),
        }
    }

    /// The next statement's cost, uniform in mean × [1 − spread, 1 + spread].
    pub(crate) fn next(&mut self) -> Duration {
        self.state = self.state.wrapping_add(GOLDEN);
        let unit = (mix(self.state) >> 11) as f64 / (1u64 << 53) as f64;
        self.mean
            .mul_f64(1.0 - COST_SPREAD + 2.0 * COST_SPREAD * unit)
    }
}

/// A statement bound to its parameters, with its result formats.
struct Portal {
    statement: &'static Statement,
    params: Vec<Value>,
    binary: Vec<bool>,
}

/// One connection's state.
#[derive(Default)]
struct Session {
    statements: HashMap<String, &'static Statement>,
    portals: HashMap<String, Portal>,
    /// After an error, messages up to Sync are skipped.
    failed: bool,
}

pub async fn serve(listener: TcpListener, statement_us: u64) {
    let cost = Duration::from_micros(statement_us);
    crate::scenario::accept_each(listener, |stream| async move {
        let _ = connection(stream, cost).await;
    })
    .await
}

async fn read_more(stream: &mut TcpStream, buf: &mut BytesMut) -> std::io::Result<()> {
    if stream.read_buf(buf).await? == 0 {
        return Err(std::io::ErrorKind::UnexpectedEof.into());
    }
    Ok(())
}

/// Reads the startup packet (answering SSL/GSS requests with 'N').
async fn startup(stream: &mut TcpStream, buf: &mut BytesMut) -> std::io::Result<()> {
    loop {
        while buf.len() < 8 {
            read_more(stream, buf).await?;
        }
        let len = u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize;
        if !(8..=MAX_MESSAGE).contains(&len) {
            return Err(std::io::ErrorKind::InvalidData.into());
        }
        while buf.len() < len {
            read_more(stream, buf).await?;
        }
        let code = u32::from_be_bytes([buf[4], buf[5], buf[6], buf[7]]);
        buf.advance(len);
        match code {
            SSL_REQUEST | GSSENC_REQUEST => stream.write_all(b"N").await?,
            PROTOCOL_3 => return Ok(()),
            _ => return Err(std::io::ErrorKind::InvalidData.into()),
        }
    }
}

async fn connection(mut stream: TcpStream, cost: Duration) -> std::io::Result<()> {
    stream.set_nodelay(true)?;
    let mut costs = Costs::new(cost);
    let mut buf = BytesMut::with_capacity(8192);
    startup(&mut stream, &mut buf).await?;
    let mut out = Out::default();
    out.msg(b'R', |b| b.extend_from_slice(&0u32.to_be_bytes()));
    for (k, v) in [
        ("server_version", "15.0 (whyslow lab)"),
        ("client_encoding", "UTF8"),
        ("DateStyle", "ISO, MDY"),
        ("integer_datetimes", "on"),
    ] {
        out.msg(b'S', |b| {
            wire::cstr(b, k);
            wire::cstr(b, v);
        });
    }
    out.msg(b'K', |b| b.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 1]));
    out.ready();
    stream.write_all(&out.take()).await?;
    let mut session = Session::default();
    loop {
        while buf.len() < 5 {
            read_more(&mut stream, &mut buf).await?;
        }
        let kind = buf[0];
        let len = u32::from_be_bytes([buf[1], buf[2], buf[3], buf[4]]) as usize;
        if !(4..=MAX_MESSAGE).contains(&len) {
            return Err(std::io::ErrorKind::InvalidData.into());
        }
        while buf.len() < 1 + len {
            read_more(&mut stream, &mut buf).await?;
        }
        let body = buf.split_to(1 + len).split_off(5);
        match dispatch(&mut session, kind, &body, &mut out) {
            Action::Terminate => return Ok(()),
            Action::Wait => {}
            Action::Write => stream.write_all(&out.take()).await?,
            Action::Execute(p) => {
                crate::work::work_for(costs.next()).await;
                wire::rows(&mut out, &shop::run(p.statement, &p.params), &p.binary);
            }
        }
    }
}

/// What the connection does after a message.
enum Action {
    Terminate,
    /// Keep the answers until Sync or Flush.
    Wait,
    /// Write what is waiting.
    Write,
    /// Run the portal (after the statement's cost).
    Execute(Portal),
}

/// One frontend message's bookkeeping and answers.
fn dispatch(session: &mut Session, kind: u8, body: &[u8], out: &mut Out) -> Action {
    match kind {
        b'X' => return Action::Terminate,
        b'S' => {
            session.failed = false;
            out.ready();
            return Action::Write;
        }
        b'H' => return Action::Write,
        _ if session.failed => {}
        b'E' => {
            if let Some(p) = portal(session, body, out) {
                return Action::Execute(p);
            }
        }
        _ => {
            if let Err(e) = handle(session, kind, body, out) {
                out.error(e.0, &e.1);
                session.failed = kind != b'Q';
                if kind == b'Q' {
                    out.ready();
                }
            }
            if kind == b'Q' {
                return Action::Write;
            }
        }
    }
    Action::Wait
}

/// Feeds `data` as frontend messages after startup, with no I/O and no
/// statement cost: the fuzz target's entry. Stops at the first malformed frame.
pub fn fuzz(data: &[u8]) {
    let (mut session, mut out) = (Session::default(), Out::default());
    let mut rest = data;
    while rest.len() >= 5 {
        let len = u32::from_be_bytes([rest[1], rest[2], rest[3], rest[4]]) as usize;
        if !(4..=MAX_MESSAGE).contains(&len) || 1 + len > rest.len() {
            return;
        }
        let (kind, body) = (rest[0], &rest[5..1 + len]);
        rest = &rest[1 + len..];
        match dispatch(&mut session, kind, body, &mut out) {
            Action::Terminate => return,
            Action::Execute(p) => {
                wire::rows(&mut out, &shop::run(p.statement, &p.params), &p.binary)
            }
            Action::Wait | Action::Write => {}
        }
        out.take();
    }
}

/// An error to send: SQLSTATE and message.
type PgError = (&'static str, String);

/// The portal an Execute names, or None (and an error) when there is none.
fn portal(session: &mut Session, body: &[u8], out: &mut Out) -> Option<Portal> {
    let name = Reader::new(body).cstr().unwrap_or_default();
    match session.portals.get(&name) {
        Some(p) => Some(Portal {
            statement: p.statement,
            params: p.params.clone(),
            binary: p.binary.clone(),
        }),
        None => {
            out.error("34000", &format!("portal \"{name}\" does not exist"));
            session.failed = true;
            None
        }
    }
}

fn too_many() -> PgError {
    (
        "53400",
        format!("more than {MAX_NAMED} prepared statements or portals"),
    )
}

/// The statement without a trailing comment (sqlcommenter's), as
/// PostgreSQL reads it.
fn without_comment(sql: &str) -> &str {
    let sql = sql.trim();
    match (sql.ends_with("*/"), sql.rfind("/*")) {
        (true, Some(at)) => sql[..at].trim_end(),
        _ => sql,
    }
}

fn handle(session: &mut Session, kind: u8, body: &[u8], out: &mut Out) -> Result<(), PgError> {
    let bad = || ("08P01", "malformed message".to_string());
    let mut r = Reader::new(body);
    match kind {
        b'P' => {
            let name = r.cstr().ok_or_else(bad)?;
            let sql = r.cstr().ok_or_else(bad)?;
            let statement = STATEMENTS
                .iter()
                .find(|s| s.sql == without_comment(&sql))
                .ok_or_else(|| {
                    (
                        "42P01",
                        "the lab's database knows only the shop's statements".to_string(),
                    )
                })?;
            if session.statements.len() >= MAX_NAMED && !session.statements.contains_key(&name) {
                return Err(too_many());
            }
            session.statements.insert(name, statement);
            out.msg(b'1', |_| {});
        }
        b'B' => {
            let portal = r.cstr().ok_or_else(bad)?;
            let name = r.cstr().ok_or_else(bad)?;
            let statement = *session.statements.get(&name).ok_or_else(|| {
                (
                    "26000",
                    format!("prepared statement \"{name}\" does not exist"),
                )
            })?;
            let formats = r.formats().ok_or_else(bad)?;
            let n = r.i16().ok_or_else(bad)? as usize;
            let mut params = Vec::with_capacity(n.min(16));
            for i in 0..n {
                let raw = r.value().ok_or_else(bad)?;
                let binary = wire::format(&formats, i);
                let oid = statement.params.get(i).copied().unwrap_or(shop::TEXT);
                params.push(
                    wire::decode(raw, oid, binary)
                        .ok_or_else(|| ("22P02", "invalid parameter".to_string()))?,
                );
            }
            let results = r.formats().ok_or_else(bad)?;
            let binary = (0..statement.columns.len())
                .map(|i| wire::format(&results, i))
                .collect();
            if session.portals.len() >= MAX_NAMED && !session.portals.contains_key(&portal) {
                return Err(too_many());
            }
            session.portals.insert(
                portal,
                Portal {
                    statement,
                    params,
                    binary,
                },
            );
            out.msg(b'2', |_| {});
        }
        b'D' => {
            let what = r.u8().ok_or_else(bad)?;
            let name = r.cstr().ok_or_else(bad)?;
            if what == b'S' {
                let s = *session.statements.get(&name).ok_or_else(|| {
                    (
                        "26000",
                        format!("prepared statement \"{name}\" does not exist"),
                    )
                })?;
                out.msg(b't', |b| {
                    b.extend_from_slice(&(s.params.len() as i16).to_be_bytes());
                    for oid in s.params {
                        b.extend_from_slice(&oid.to_be_bytes());
                    }
                });
                wire::row_description(out, s, &[]);
            } else {
                let p = session
                    .portals
                    .get(&name)
                    .ok_or_else(|| ("34000", format!("portal \"{name}\" does not exist")))?;
                wire::row_description(out, p.statement, &p.binary);
            }
        }
        b'C' => {
            let what = r.u8().ok_or_else(bad)?;
            let name = r.cstr().ok_or_else(bad)?;
            if what == b'S' {
                session.statements.remove(&name);
            } else {
                session.portals.remove(&name);
            }
            out.msg(b'3', |_| {});
        }
        b'Q' => {
            // A setup script meant for a real server: acknowledged, not run.
            out.msg(b'C', |b| wire::cstr(b, "SELECT 0"));
            out.ready();
        }
        _ => return Err(("08P01", format!("unexpected message '{}'", kind as char))),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(kind: u8, body: &[u8]) -> Vec<u8> {
        let mut m = vec![kind];
        m.extend_from_slice(&(body.len() as u32 + 4).to_be_bytes());
        m.extend_from_slice(body);
        m
    }

    #[test]
    fn statement_costs_keep_their_mean_and_differ_per_connection() {
        let mean = Duration::from_micros(2_000);
        let mut a = Costs::new(mean);
        let n = 10_000;
        let draws: Vec<Duration> = (0..n).map(|_| a.next()).collect();
        let (lo, hi) = (
            mean.mul_f64(1.0 - COST_SPREAD),
            mean.mul_f64(1.0 + COST_SPREAD),
        );
        assert!(draws.iter().all(|d| (lo..=hi).contains(d)));
        let avg = draws.iter().sum::<Duration>() / n;
        assert!(avg.abs_diff(mean) < mean / 50, "{avg:?}");
        // Two connections' sums over a run's 100 statements differ as
        // independent draws do (not the same costs shifted by one).
        let sum = |c: &mut Costs| (0..100).map(|_| c.next()).sum::<Duration>();
        let (mut a, mut b) = (Costs::new(mean), Costs::new(mean));
        let gaps: Vec<Duration> = (0..50).map(|_| sum(&mut a).abs_diff(sum(&mut b))).collect();
        let wide = gaps.iter().filter(|g| **g > mean * 2).count();
        assert!(
            wide >= 10,
            "{wide} of 50 pairs of runs more than 2 means apart"
        );
    }

    #[test]
    fn an_unknown_statement_is_an_error_until_sync() {
        let (mut session, mut out) = (Session::default(), Out::default());
        let parse = b"s0\0DROP TABLE orders\0\0\0";
        assert!(matches!(
            dispatch(&mut session, b'P', parse, &mut out),
            Action::Wait
        ));
        assert!(session.failed);
        assert_eq!(out.take()[0], b'E', "ErrorResponse");
        let bind = &msg(b'B', b"\0s0\0\0\0\0\0\0\0")[5..];
        assert!(matches!(
            dispatch(&mut session, b'B', bind, &mut out),
            Action::Wait
        ));
        assert!(out.take().is_empty(), "skipped until Sync");
        assert!(matches!(
            dispatch(&mut session, b'S', &[], &mut out),
            Action::Write
        ));
        assert_eq!(out.take(), [b'Z', 0, 0, 0, 5, b'I']);
    }

    #[test]
    fn names_past_the_bound_are_refused() {
        let (mut session, mut out) = (Session::default(), Out::default());
        let sql = b"SELECT rate FROM tax_rates WHERE region = $1\0\0\0";
        for i in 0..=MAX_NAMED {
            let mut parse = format!("s{i}\0").into_bytes();
            parse.extend_from_slice(sql);
            dispatch(&mut session, b'P', &parse, &mut out);
            dispatch(&mut session, b'S', &[], &mut out);
        }
        assert_eq!(session.statements.len(), MAX_NAMED);
        assert!(String::from_utf8_lossy(&out.take()).contains("53400"));
    }

    #[test]
    fn hostile_frames_end_quietly() {
        fuzz(&[b'B', 0xff, 0xff, 0xff, 0xff, 0]);
        fuzz(&msg(b'B', b"\0s0"));
        fuzz(&msg(b'B', &[0, 0, 0x7f, 0xff]));
        let mut huge_array = b"\0s\0\0\0\0\x01".to_vec();
        huge_array.extend_from_slice(&[0, 0, 0, 20, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 20]);
        huge_array.extend_from_slice(&[0x7f, 0xff, 0xff, 0xff, 0, 0, 0, 1]);
        let mut all = msg(
            b'P',
            b"s\0SELECT id, name, price FROM products WHERE id = ANY($1) ORDER BY id\0\0\0",
        );
        all.extend(msg(b'B', &huge_array));
        all.extend(msg(b'E', b"\0\0\0\0\0"));
        fuzz(&all);
    }
}
