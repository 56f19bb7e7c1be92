//! The lab's own RESP server, so that `demo` runs with nothing installed:
//! GET, SET, DEL, PING, in order on each connection. A SET costs a planned
//! time (case 004's cache server held a write to a hot key until the reads
//! on it were done); everything else is answered at once. Requests are
//! hostile input: arguments and values are bounded, and the store refuses
//! writes past its size instead of growing. Written for the lab because the
//! cost of a write must be exact and Redis itself may not be installed.

use crate::line::{crlf_line, decimal};
use crate::scenario::accept_each;
use crate::work::work_until;
use bytes::{Buf, Bytes, BytesMut};
use std::collections::HashMap;
use std::ops::Range;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Arguments per command (GET/SET/DEL need a handful).
const MAX_ARGS: usize = 1024;
/// Largest bulk string: above the lab's 16 MiB values, far below Redis's
/// 512 MiB proto-max-bulk-len, so one hostile length cannot take memory.
const MAX_BULK: usize = 64 << 20;
/// A header line ("*3", "$1048576") longer than this is not RESP.
const MAX_LINE: usize = 64;
/// Bytes the store holds; writes past it get an OOM error, like Redis at maxmemory.
const MAX_STORED: usize = 256 << 20;

/// The keys and values, and their total size.
#[derive(Default)]
pub struct Store {
    values: HashMap<Vec<u8>, Bytes>,
    bytes: usize,
}

/// One command's arguments, as ranges of the buffer it was read from.
type Args = Vec<Range<usize>>;

/// One header line at `at`: its text and the next offset.
fn line(buf: &[u8], at: usize) -> Result<Option<(&[u8], usize)>, &'static str> {
    crlf_line(buf, at, MAX_LINE).map_err(|_| "header line too long")
}

fn number(text: &[u8], max: usize) -> Result<usize, &'static str> {
    decimal(text, max).ok_or("bad length")
}

/// One command (an array of bulk strings) from the front of `buf`: its
/// arguments and its length, or None while bytes are missing. Values are
/// skipped by length, never scanned.
pub fn parse(buf: &[u8]) -> Result<Option<(Args, usize)>, &'static str> {
    if buf.is_empty() {
        return Ok(None);
    }
    if buf[0] != b'*' {
        return Err("expected '*', got something else");
    }
    let Some((head, mut at)) = line(buf, 1)? else {
        return Ok(None);
    };
    let count = number(head, MAX_ARGS)?;
    let mut args = Vec::with_capacity(count);
    for _ in 0..count {
        if at >= buf.len() {
            return Ok(None);
        }
        if buf[at] != b'$' {
            return Err("expected '$', got something else");
        }
        let Some((head, start)) = line(buf, at + 1)? else {
            return Ok(None);
        };
        let len = number(head, MAX_BULK)?;
        if buf.len() < start + len + 2 {
            return Ok(None);
        }
        if &buf[start + len..start + len + 2] != b"\r\n" {
            return Err("bulk string not followed by CRLF");
        }
        args.push(start..start + len);
        at = start + len + 2;
    }
    Ok(Some((args, at)))
}

/// What a command does to the store, and the reply; `true` when it wrote.
fn execute(store: &Mutex<Store>, command: &[u8], args: &[&[u8]]) -> (Vec<u8>, bool) {
    let Ok(mut store) = store.lock() else {
        return (b"-ERR store unavailable\r\n".to_vec(), false);
    };
    let name = command.to_ascii_uppercase();
    match (name.as_slice(), args) {
        (b"PING", []) => (b"+PONG\r\n".to_vec(), false),
        (b"GET", [key]) => (bulk(store.values.get(*key)), false),
        (b"SET", [key, value, ..]) => {
            let old = store.values.get(*key).map_or(0, Bytes::len);
            if store.bytes - old + value.len() > MAX_STORED {
                return (b"-OOM store full\r\n".to_vec(), false);
            }
            store.bytes = store.bytes - old + value.len();
            store
                .values
                .insert(key.to_vec(), Bytes::copy_from_slice(value));
            (b"+OK\r\n".to_vec(), true)
        }
        (b"DEL", keys) if !keys.is_empty() => {
            let mut n = 0;
            for k in keys {
                if let Some(v) = store.values.remove(*k) {
                    store.bytes -= v.len();
                    n += 1;
                }
            }
            (format!(":{n}\r\n").into_bytes(), false)
        }
        _ => (
            b"-ERR unknown command or wrong number of arguments\r\n".to_vec(),
            false,
        ),
    }
}

fn bulk(value: Option<&Bytes>) -> Vec<u8> {
    match value {
        None => b"$-1\r\n".to_vec(),
        Some(v) => {
            let mut out = format!("${}\r\n", v.len()).into_bytes();
            out.extend_from_slice(v);
            out.extend_from_slice(b"\r\n");
            out
        }
    }
}

/// One command run: the reply, whether it wrote, and the bytes it took.
struct Step {
    reply: Vec<u8>,
    wrote: bool,
    used: usize,
}

/// Runs the command at the front of `buf`, if whole.
fn step(store: &Mutex<Store>, buf: &[u8]) -> Result<Option<Step>, &'static str> {
    let Some((args, used)) = parse(buf)? else {
        return Ok(None);
    };
    let parts: Vec<&[u8]> = args.iter().map(|r| &buf[r.clone()]).collect();
    let (reply, wrote) = match parts.split_first() {
        Some((command, rest)) => execute(store, command, rest),
        None => (b"-ERR empty command\r\n".to_vec(), false),
    };
    Ok(Some(Step { reply, wrote, used }))
}

/// A write is done `write_cost` after its first byte arrived (or after the
/// command before it was answered, if it was already waiting): the wait a
/// read queued behind it sees is then the planned cost, however long a large
/// value takes to cross a busy host, as long as that is shorter.
async fn connection(mut stream: TcpStream, store: Arc<Mutex<Store>>, write_cost: Duration) {
    let _ = stream.set_nodelay(true);
    let mut buf = BytesMut::with_capacity(64 * 1024);
    let mut began = Instant::now();
    loop {
        match step(&store, &buf) {
            Ok(Some(done)) => {
                buf.advance(done.used);
                if done.wrote {
                    work_until(began + write_cost).await;
                }
                if stream.write_all(&done.reply).await.is_err() {
                    return;
                }
                began = Instant::now();
            }
            Ok(None) => {
                let idle = buf.is_empty();
                match stream.read_buf(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(_) if idle => began = Instant::now(),
                    Ok(_) => {}
                }
            }
            Err(e) => {
                let _ = stream
                    .write_all(format!("-ERR Protocol error: {e}\r\n").as_bytes())
                    .await;
                return;
            }
        }
    }
}

/// Serves RESP on `listener`; each SET costs `write_cost`.
pub async fn serve(listener: TcpListener, write_cost: Duration) {
    let store = Arc::new(Mutex::new(Store::default()));
    accept_each(listener, |stream| {
        connection(stream, store.clone(), write_cost)
    })
    .await;
}

/// Runs `data` as one connection's requests, with no I/O and no write cost:
/// the fuzz target's entry. Stops at the first malformed command.
pub fn fuzz(data: &[u8]) {
    let store = Mutex::new(Store::default());
    let mut rest = data;
    while let Ok(Some(done)) = step(&store, rest) {
        rest = &rest[done.used..];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_are_split_by_length_and_bounded() {
        let buf = b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$5\r\nv\r\nxx\r\n*1\r\n$4\r\nPING\r\n";
        let (args, used) = parse(buf).unwrap().unwrap();
        assert_eq!(&buf[args[2].clone()], b"v\r\nxx");
        let (args, _) = parse(&buf[used..]).unwrap().unwrap();
        assert_eq!(args.len(), 1);
        assert_eq!(parse(b"*2\r\n$3\r\nGET\r\n").unwrap(), None);
        assert!(parse(b"*1\r\n$99999999999\r\n").is_err());
        assert!(parse(b"*1\r\n$3\r\nGETxx").is_err());
        assert!(parse(&[b'*'; 100]).is_err());
        assert!(parse(b"GET k\r\n").is_err());
    }

    #[test]
    fn the_store_answers_like_redis_and_refuses_to_grow_past_its_size() {
        let store = Mutex::new(Store::default());
        let run = |args: &[&[u8]]| execute(&store, args[0], &args[1..]).0;
        assert_eq!(run(&[b"GET", b"k"]), b"$-1\r\n");
        assert_eq!(run(&[b"set", b"k", b"v"]), b"+OK\r\n");
        assert_eq!(run(&[b"GET", b"k"]), b"$1\r\nv\r\n");
        assert_eq!(run(&[b"DEL", b"k", b"x"]), b":1\r\n");
        let big = vec![0u8; MAX_STORED / 2 + 1];
        assert_eq!(run(&[b"SET", b"a", &big]), b"+OK\r\n");
        assert_eq!(
            run(&[b"SET", b"a", &big]),
            b"+OK\r\n",
            "overwriting does not grow"
        );
        assert!(run(&[b"SET", b"b", &big]).starts_with(b"-OOM"));
        assert!(run(&[b"FLUSHALL"]).starts_with(b"-ERR"));
    }
}
