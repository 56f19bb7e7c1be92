//! The app's cache client: one persistent connection shared by every task,
//! as multiplexing clients do (redis-rs's MultiplexedConnection; case 004
//! switched to one). Commands leave in the order they are issued, each
//! written whole before the next, and replies come back in that order: a
//! read issued after a large write waits for all of it. It speaks RESP and
//! memcached's text protocol and queues the same way on both, which is why
//! the lab has its own rather than one crate per protocol.

use crate::line::{crlf_line, decimal};
use crate::truth::{Call, Calls};
use bytes::{Buf, Bytes, BytesMut};
use std::io;
use std::net::SocketAddr;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};

/// Largest value a reply may carry (the lab's values are at most 16 MiB).
const MAX_VALUE: usize = 64 << 20;
/// A reply line longer than this is not the protocol.
const MAX_LINE: usize = 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheProtocol {
    Resp,
    Memcached,
}

/// What a command's reply holds when it is complete.
#[derive(Debug, Clone, Copy)]
enum Expect {
    Value,
    Stored,
}

type Reply = io::Result<Option<Bytes>>;

struct Command {
    parts: Vec<Bytes>,
    expect: Expect,
    reply: oneshot::Sender<Reply>,
}

/// A reply on its way, and the call it is; dropping it leaves the command
/// running (a fire-and-forget write), unrecorded.
pub struct Pending(oneshot::Receiver<Reply>, Call);

impl Pending {
    pub async fn wait(self) -> Reply {
        let reply = self
            .0
            .await
            .unwrap_or_else(|_| Err(io::Error::other("cache connection closed")));
        self.1.done();
        reply
    }
}

/// One connection; clones share it.
#[derive(Clone)]
pub struct SharedConnection {
    protocol: CacheProtocol,
    commands: mpsc::UnboundedSender<Command>,
    /// Local port of the connection.
    port: u16,
    /// Held while a command takes its place: its recorded order is its
    /// order on the wire.
    queueing: std::sync::Arc<std::sync::Mutex<()>>,
}

impl SharedConnection {
    pub async fn connect(addr: SocketAddr, protocol: CacheProtocol) -> io::Result<Self> {
        let stream = TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        let port = stream.local_addr()?.port();
        let (read, write) = stream.into_split();
        let (commands, queue) = mpsc::unbounded_channel();
        let (waiters, waiting) = mpsc::unbounded_channel();
        tokio::spawn(send_in_order(write, queue, waiters));
        tokio::spawn(answer_in_order(read, waiting, protocol));
        Ok(SharedConnection {
            protocol,
            commands,
            port,
            queueing: Default::default(),
        })
    }

    /// Queues `parts` now, a call of `truth`'s request: its place on the
    /// connection is taken at the call.
    fn send(&self, parts: Vec<Bytes>, expect: Expect, truth: &Calls) -> Pending {
        let (reply, rx) = oneshot::channel();
        let _in_order = self.queueing.lock();
        let call = truth.start(self.port);
        let _ = self.commands.send(Command {
            parts,
            expect,
            reply,
        });
        Pending(rx, call)
    }

    pub fn get(&self, key: &str, truth: &Calls) -> Pending {
        let parts = match self.protocol {
            CacheProtocol::Resp => vec![resp_command(&[b"GET", key.as_bytes()])],
            CacheProtocol::Memcached => vec![Bytes::from(format!("get {key}\r\n"))],
        };
        self.send(parts, Expect::Value, truth)
    }

    pub fn set(&self, key: &str, value: Bytes, truth: &Calls) -> Pending {
        let head = match self.protocol {
            CacheProtocol::Resp => format!(
                "*3\r\n$3\r\nSET\r\n${}\r\n{key}\r\n${}\r\n",
                key.len(),
                value.len()
            ),
            CacheProtocol::Memcached => format!("set {key} 0 0 {}\r\n", value.len()),
        };
        let parts = vec![Bytes::from(head), value, Bytes::from_static(b"\r\n")];
        self.send(parts, Expect::Stored, truth)
    }
}

fn resp_command(args: &[&[u8]]) -> Bytes {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
    Bytes::from(out)
}

/// Writes each command whole, in order, after telling the reader what
/// reply to expect next.
async fn send_in_order(
    mut write: OwnedWriteHalf,
    mut queue: mpsc::UnboundedReceiver<Command>,
    waiters: mpsc::UnboundedSender<(Expect, oneshot::Sender<Reply>)>,
) {
    while let Some(c) = queue.recv().await {
        if waiters.send((c.expect, c.reply)).is_err() {
            return;
        }
        for part in &c.parts {
            if write.write_all(part).await.is_err() {
                return;
            }
        }
    }
}

/// Hands each reply to the command that waits for it, in order.
async fn answer_in_order(
    mut read: OwnedReadHalf,
    mut waiting: mpsc::UnboundedReceiver<(Expect, oneshot::Sender<Reply>)>,
    protocol: CacheProtocol,
) {
    let mut buf = BytesMut::with_capacity(64 * 1024);
    while let Some((expect, reply)) = waiting.recv().await {
        let answer = loop {
            match parse_reply(&buf, protocol, expect) {
                Ok(Some((value, used))) => {
                    let value = value.map(|r| Bytes::copy_from_slice(&buf[r]));
                    buf.advance(used);
                    break Ok(value);
                }
                Ok(None) => match read.read_buf(&mut buf).await {
                    Ok(0) => break Err(io::ErrorKind::UnexpectedEof.into()),
                    Ok(_) => {}
                    Err(e) => break Err(e),
                },
                Err(e) => break Err(io::Error::new(io::ErrorKind::InvalidData, e)),
            }
        };
        let failed = answer.is_err();
        let _ = reply.send(answer);
        if failed {
            return;
        }
    }
}

type Parsed = Option<(Option<std::ops::Range<usize>>, usize)>;

/// One reply line at `at`: its text and the next offset.
fn line(buf: &[u8], at: usize) -> Result<Option<(&[u8], usize)>, String> {
    crlf_line(buf, at, MAX_LINE).map_err(|_| "reply line too long".to_string())
}

fn length(text: &[u8]) -> Result<usize, String> {
    decimal(text, MAX_VALUE)
        .ok_or_else(|| format!("bad length {:?}", String::from_utf8_lossy(text)))
}

/// A value of `len` bytes at `at` followed by CRLF: its range and the next offset.
fn value_at(buf: &[u8], at: usize, len: usize) -> Option<(std::ops::Range<usize>, usize)> {
    (buf.len() >= at + len + 2).then_some((at..at + len, at + len + 2))
}

/// The complete reply at the front of `buf`: the value it carries and its
/// length; None while bytes are missing; an error reply or garbage as Err.
fn parse_reply(buf: &[u8], protocol: CacheProtocol, expect: Expect) -> Result<Parsed, String> {
    match protocol {
        CacheProtocol::Resp => resp_reply(buf),
        CacheProtocol::Memcached => memcached_reply(buf, expect),
    }
}

fn resp_reply(buf: &[u8]) -> Result<Parsed, String> {
    let Some((head, next)) = line(buf, 0)? else {
        return Ok(None);
    };
    let text = String::from_utf8_lossy(head.get(1..).unwrap_or_default());
    match head.first() {
        Some(b'+' | b':') => Ok(Some((None, next))),
        Some(b'$') if text == "-1" => Ok(Some((None, next))),
        Some(b'$') => Ok(value_at(buf, next, length(&head[1..])?).map(|(r, n)| (Some(r), n))),
        Some(b'-') => Err(format!("server error: {text}")),
        _ => Err(format!(
            "unexpected reply {:?}",
            String::from_utf8_lossy(head)
        )),
    }
}

fn memcached_reply(buf: &[u8], expect: Expect) -> Result<Parsed, String> {
    let Some((head, next)) = line(buf, 0)? else {
        return Ok(None);
    };
    match (expect, head) {
        (Expect::Stored, b"STORED") | (Expect::Value, b"END") => Ok(Some((None, next))),
        (Expect::Value, h) if h.starts_with(b"VALUE ") => {
            // VALUE <key> <flags> <bytes>, then the data, then END.
            let len = length(h.rsplit(|b| *b == b' ').next().unwrap_or_default())?;
            let Some((value, after)) = value_at(buf, next, len) else {
                return Ok(None);
            };
            match line(buf, after)? {
                Some((b"END", end)) => Ok(Some((Some(value), end))),
                Some((other, _)) => Err(format!(
                    "expected END, got {:?}",
                    String::from_utf8_lossy(other)
                )),
                None => Ok(None),
            }
        }
        (_, h) => Err(format!("server said {:?}", String::from_utf8_lossy(h))),
    }
}

/// Reads `data` as a run of replies in each protocol and for each kind of
/// command, with no I/O: the fuzz target's entry. The first byte picks the
/// protocol and kind; reading stops at the first incomplete or bad reply.
pub fn fuzz(data: &[u8]) {
    let Some((&pick, mut rest)) = data.split_first() else {
        return;
    };
    let protocol = if pick & 1 == 0 {
        CacheProtocol::Resp
    } else {
        CacheProtocol::Memcached
    };
    let expect = if pick & 2 == 0 {
        Expect::Value
    } else {
        Expect::Stored
    };
    while let Ok(Some((value, used))) = parse_reply(rest, protocol, expect) {
        if let Some(r) = value {
            assert!(r.end <= used && used <= rest.len());
        }
        rest = &rest[used..];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_are_complete_only_with_all_their_bytes() {
        let r = CacheProtocol::Resp;
        assert_eq!(
            parse_reply(b"+OK\r\n", r, Expect::Stored).unwrap(),
            Some((None, 5))
        );
        assert_eq!(parse_reply(b"$3\r\nab", r, Expect::Value).unwrap(), None);
        assert_eq!(
            parse_reply(b"$3\r\nabc\r\n", r, Expect::Value).unwrap(),
            Some((Some(4..7), 9))
        );
        assert!(parse_reply(b"-ERR no\r\n", r, Expect::Value).is_err());
        assert!(parse_reply(b"$999999999999\r\n", r, Expect::Value).is_err());
        let m = CacheProtocol::Memcached;
        let hit = b"VALUE hot:config 0 2\r\nok\r\nEND\r\n";
        assert_eq!(
            parse_reply(hit, m, Expect::Value).unwrap(),
            Some((Some(22..24), hit.len()))
        );
        assert_eq!(parse_reply(&hit[..27], m, Expect::Value).unwrap(), None);
        assert_eq!(
            parse_reply(b"END\r\n", m, Expect::Value).unwrap(),
            Some((None, 5))
        );
        assert!(parse_reply(b"SERVER_ERROR object too large\r\n", m, Expect::Stored).is_err());
        assert!(parse_reply(&[b'x'; 2000], m, Expect::Stored).is_err());
    }
}
