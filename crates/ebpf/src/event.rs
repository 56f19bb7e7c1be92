//! The records `sockio.bpf.c` puts in its ring buffer, decoded. Sans-IO:
//! bytes in, an event or a reason out; the events file (`file`) carries the
//! same records, so a saved capture decodes exactly as a live one.
//!
//! Layout (little-endian, `struct sock_event` in sockio.bpf.c):
//!
//! | offset | size | field                                             |
//! |--------|------|---------------------------------------------------|
//! | 0      | 8    | enter_ns: CLOCK_MONOTONIC at the syscall's entry  |
//! | 8      | 8    | exit_ns                                           |
//! | 16     | 4    | pid (the process, tgid)                           |
//! | 20     | 4    | tid (the thread)                                  |
//! | 24     | 8    | bytes: the syscall's return, whole                |
//! | 32     | 4    | seq: TCP sequence of the first byte (a thread     |
//! |        |      | event: the parent thread's id)                    |
//! | 36     | 4    | captured: payload bytes after the header          |
//! | 40     | 4    | fd                                                |
//! | 44     | 2    | family (1 AF_UNIX, 2 AF_INET, 10 AF_INET6)        |
//! | 46     | 2    | kind (1 send, 2 receive, 3 new thread or process, |
//! |        |      | 4 TLS plaintext sent, 5 TLS plaintext received,   |
//! |        |      | 6 a Unix-domain socket's name: seq 1 if its own,  |
//! |        |      | 7 a thread or process ended)                      |
//! | 48     | 16   | local address (IPv4 in the first 4 bytes; a Unix  |
//! |        |      | socket's inode in the first 8)                    |
//! | 64     | 16   | remote address (a Unix socket's peer's inode)     |
//! | 80     | 2    | local port                                        |
//! | 82     | 2    | remote port                                       |
//! | 84     | 16   | comm, NUL-padded                                  |
//! | 100    | ≤4096| the first bytes of the payload                    |

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use whyslow_model::Thread;

/// Bytes before the payload.
pub const HEADER_SIZE: usize = 100;
/// Payload bytes kept per call (MAX_PAYLOAD in sockio.bpf.c).
pub const MAX_PAYLOAD: usize = 4096;

const AF_UNIX: u16 = 1;
const AF_INET: u16 = 2;
const AF_INET6: u16 = 10;

/// What a socket event is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Bytes written to a TCP socket.
    Send,
    /// Bytes read from one.
    Receive,
    /// A thread or process started by `parent` (a thread id).
    NewThread { parent: u32 },
    /// Plaintext handed to OpenSSL's SSL_write on a TCP socket (seq: 0).
    TlsSend,
    /// Plaintext OpenSSL's SSL_read returned.
    TlsReceive,
    /// The path a Unix-domain socket's connection goes by (the payload),
    /// before the first call on it: `own` when the socket is bound to it
    /// (a server's end), else it is its peer's.
    UnixName { own: bool },
    /// The thread ended.
    ThreadEnd,
}

impl Kind {
    /// Bytes the process wrote (in the clear or to its TLS library).
    pub fn sends(self) -> bool {
        matches!(self, Kind::Send | Kind::TlsSend)
    }
    /// Plaintext of a TLS connection, from its library.
    pub fn is_tls(self) -> bool {
        matches!(self, Kind::TlsSend | Kind::TlsReceive)
    }
}

/// The ends of a Unix-domain stream socket, by inode (as `ss -x` shows).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct UnixEnds {
    pub own: u64,
    /// 0 while the peer is not yet accepted.
    pub peer: u64,
}

/// One socket call of a traced thread, or a new thread.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SockEvent {
    pub enter_ns: u64,
    pub exit_ns: u64,
    pub thread: Thread,
    pub kind: Kind,
    /// Whole byte count the call moved.
    pub bytes: u64,
    /// TCP sequence number of its first byte.
    pub seq: u32,
    pub fd: i32,
    /// None for a thread event and a Unix-domain socket's.
    pub local: Option<SocketAddr>,
    pub remote: Option<SocketAddr>,
    /// A Unix-domain socket's ends (packets never show them).
    pub unix: Option<UnixEnds>,
    pub comm: String,
    /// The first bytes moved, at most `MAX_PAYLOAD`.
    pub payload: Vec<u8>,
}

/// Why a record could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("event record of {0} bytes is shorter than its {HEADER_SIZE}-byte header")]
    Short(usize),
    #[error("event record says it carries {said} payload bytes, has {has}")]
    Payload { said: usize, has: usize },
    #[error("event of unknown kind {0}")]
    Kind(u16),
    #[error("socket event of unknown address family {0}")]
    Family(u16),
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}
fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap_or([0; 4]))
}
fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap_or([0; 8]))
}

fn address(family: u16, raw: &[u8], port: u16) -> Result<SocketAddr, DecodeError> {
    let ip = match family {
        AF_INET => IpAddr::V4(Ipv4Addr::new(raw[0], raw[1], raw[2], raw[3])),
        AF_INET6 => {
            let octets: [u8; 16] = raw[..16].try_into().unwrap_or([0; 16]);
            IpAddr::V6(Ipv6Addr::from(octets))
        }
        other => return Err(DecodeError::Family(other)),
    };
    Ok(SocketAddr::new(ip, port))
}

/// Decodes one record. Bytes past the declared payload are ignored (the
/// ring buffer pads records to 8 bytes).
pub fn decode(record: &[u8]) -> Result<SockEvent, DecodeError> {
    if record.len() < HEADER_SIZE {
        return Err(DecodeError::Short(record.len()));
    }
    let captured = u32_at(record, 36) as usize;
    let has = record.len() - HEADER_SIZE;
    if captured > has || captured > MAX_PAYLOAD {
        return Err(DecodeError::Payload {
            said: captured,
            has,
        });
    }
    let family = u16_at(record, 44);
    let seq = u32_at(record, 32);
    let kind = match u16_at(record, 46) {
        1 => Kind::Send,
        2 => Kind::Receive,
        3 => Kind::NewThread { parent: seq },
        4 => Kind::TlsSend,
        5 => Kind::TlsReceive,
        6 => Kind::UnixName { own: seq == 1 },
        7 => Kind::ThreadEnd,
        other => return Err(DecodeError::Kind(other)),
    };
    let (mut local, mut remote, mut unix) = (None, None, None);
    match (kind, family) {
        (Kind::NewThread { .. } | Kind::ThreadEnd, _) => {}
        (_, AF_UNIX) => {
            unix = Some(UnixEnds {
                own: u64_at(record, 48),
                peer: u64_at(record, 64),
            })
        }
        (Kind::UnixName { .. }, other) => return Err(DecodeError::Family(other)),
        _ => {
            local = Some(address(family, &record[48..64], u16_at(record, 80))?);
            remote = Some(address(family, &record[64..80], u16_at(record, 82))?);
        }
    }
    let comm = &record[84..100];
    let comm_len = comm.iter().position(|&b| b == 0).unwrap_or(comm.len());
    Ok(SockEvent {
        enter_ns: u64_at(record, 0),
        exit_ns: u64_at(record, 8),
        thread: Thread {
            pid: u32_at(record, 16),
            tid: u32_at(record, 20),
        },
        kind,
        // A negative return never reaches the ring buffer; read it as none.
        bytes: (u64_at(record, 24) as i64).max(0) as u64,
        seq,
        fd: u32_at(record, 40) as i32,
        local,
        remote,
        unix,
        comm: String::from_utf8_lossy(&comm[..comm_len]).into_owned(),
        payload: record[HEADER_SIZE..HEADER_SIZE + captured].to_vec(),
    })
}

/// The process a record says was started (a new-thread record whose thread
/// is a process), from the header alone: the reader looks at every record,
/// and decoding each would copy its payload.
pub fn new_process(record: &[u8]) -> Option<u32> {
    if record.len() < HEADER_SIZE || u16_at(record, 46) != 3 {
        return None;
    }
    let (pid, tid) = (u32_at(record, 16), u32_at(record, 20));
    (pid == tid).then_some(pid)
}

/// A record as the kernel side writes it: for tests and the fuzz corpus.
pub fn encode(e: &SockEvent) -> Vec<u8> {
    let mut b = vec![0u8; HEADER_SIZE];
    b[0..8].copy_from_slice(&e.enter_ns.to_le_bytes());
    b[8..16].copy_from_slice(&e.exit_ns.to_le_bytes());
    b[16..20].copy_from_slice(&e.thread.pid.to_le_bytes());
    b[20..24].copy_from_slice(&e.thread.tid.to_le_bytes());
    b[24..32].copy_from_slice(&e.bytes.to_le_bytes());
    let (kind, seq) = match e.kind {
        Kind::Send => (1u16, e.seq),
        Kind::Receive => (2, e.seq),
        Kind::NewThread { parent } => (3, parent),
        Kind::TlsSend => (4, e.seq),
        Kind::TlsReceive => (5, e.seq),
        Kind::UnixName { own } => (6, u32::from(own)),
        Kind::ThreadEnd => (7, 0),
    };
    b[32..36].copy_from_slice(&seq.to_le_bytes());
    let payload = &e.payload[..e.payload.len().min(MAX_PAYLOAD)];
    b[36..40].copy_from_slice(&(payload.len() as u32).to_le_bytes());
    b[40..44].copy_from_slice(&e.fd.to_le_bytes());
    b[46..48].copy_from_slice(&kind.to_le_bytes());
    if let Some(u) = e.unix {
        b[44..46].copy_from_slice(&AF_UNIX.to_le_bytes());
        b[48..56].copy_from_slice(&u.own.to_le_bytes());
        b[64..72].copy_from_slice(&u.peer.to_le_bytes());
    }
    let mut put = |at: usize, a: &SocketAddr| match a.ip() {
        IpAddr::V4(ip) => {
            b[44..46].copy_from_slice(&AF_INET.to_le_bytes());
            b[at..at + 4].copy_from_slice(&ip.octets());
        }
        IpAddr::V6(ip) => {
            b[44..46].copy_from_slice(&AF_INET6.to_le_bytes());
            b[at..at + 16].copy_from_slice(&ip.octets());
        }
    };
    if let (Some(l), Some(r)) = (e.local, e.remote) {
        put(48, &l);
        put(64, &r);
        b[80..82].copy_from_slice(&l.port().to_le_bytes());
        b[82..84].copy_from_slice(&r.port().to_le_bytes());
    }
    let comm = e.comm.as_bytes();
    let n = comm.len().min(15);
    b[84..84 + n].copy_from_slice(&comm[..n]);
    b.extend_from_slice(payload);
    b
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn send(
        tid: u32,
        local: &str,
        remote: &str,
        at_ns: u64,
        payload: &[u8],
    ) -> SockEvent {
        SockEvent {
            enter_ns: at_ns,
            exit_ns: at_ns + 5_000,
            thread: Thread { pid: 40, tid },
            kind: Kind::Send,
            bytes: payload.len() as u64,
            seq: 1000,
            fd: 5,
            local: Some(local.parse().unwrap()),
            remote: Some(remote.parse().unwrap()),
            unix: None,
            comm: "python3".into(),
            payload: payload.to_vec(),
        }
    }

    #[test]
    fn a_record_decodes_to_what_was_encoded() {
        for e in [
            send(
                41,
                "127.0.0.1:40000",
                "127.0.0.1:5432",
                9,
                b"Q\0\0\0\x0bSELECT 1\0",
            ),
            send(41, "[::1]:40000", "[::1]:6379", 9, b""),
            SockEvent {
                kind: Kind::TlsReceive,
                ..send(
                    43,
                    "127.0.0.1:40001",
                    "127.0.0.1:443",
                    9,
                    b"HTTP/1.1 200 OK\r\n",
                )
            },
            SockEvent {
                kind: Kind::NewThread { parent: 40 },
                seq: 40,
                local: None,
                remote: None,
                ..send(42, "127.0.0.1:1", "127.0.0.1:2", 7, b"")
            },
            SockEvent {
                kind: Kind::ThreadEnd,
                seq: 0,
                local: None,
                remote: None,
                ..send(42, "127.0.0.1:1", "127.0.0.1:2", 7, b"")
            },
            SockEvent {
                kind: Kind::UnixName { own: false },
                seq: 0,
                local: None,
                remote: None,
                unix: Some(UnixEnds { own: 7, peer: 8 }),
                ..send(
                    43,
                    "127.0.0.1:1",
                    "127.0.0.1:2",
                    7,
                    b"/run/postgresql/.s.PGSQL.5432",
                )
            },
            SockEvent {
                kind: Kind::Receive,
                seq: 0,
                local: None,
                remote: None,
                unix: Some(UnixEnds { own: 7, peer: 8 }),
                ..send(43, "127.0.0.1:1", "127.0.0.1:2", 7, b"Z\0\0\0\x05I")
            },
        ] {
            assert_eq!(decode(&encode(&e)), Ok(e));
        }
    }

    #[test]
    fn a_record_that_lies_about_its_payload_or_kind_is_refused() {
        let mut b = encode(&send(1, "127.0.0.1:1", "127.0.0.1:2", 0, b"abc"));
        assert_eq!(decode(&b[..50]), Err(DecodeError::Short(50)));
        b[36..40].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(decode(&b), Err(DecodeError::Payload { .. })));
        b[36..40].copy_from_slice(&3u32.to_le_bytes());
        b[46] = 9;
        assert_eq!(decode(&b), Err(DecodeError::Kind(9)));
        b[46] = 1;
        b[44] = 3;
        assert_eq!(decode(&b), Err(DecodeError::Family(3)));
    }

    #[test]
    fn a_new_process_is_read_from_the_header() {
        let started = |tid, parent| {
            encode(&SockEvent {
                kind: Kind::NewThread { parent },
                local: None,
                remote: None,
                thread: Thread { pid: 50, tid },
                ..send(tid, "127.0.0.1:1", "127.0.0.1:2", 7, b"")
            })
        };
        assert_eq!(new_process(&started(50, 40)), Some(50));
        assert_eq!(new_process(&started(51, 50)), None, "a thread");
        let call = encode(&send(50, "127.0.0.1:1", "127.0.0.1:2", 0, b"x"));
        assert_eq!(new_process(&call), None);
        assert_eq!(new_process(&call[..20]), None);
    }

    #[test]
    fn a_huge_byte_count_stays_whole_beside_a_cut_payload() {
        let mut e = send(1, "127.0.0.1:1", "127.0.0.1:2", 0, &[7; MAX_PAYLOAD]);
        e.bytes = 16 << 20;
        let d = decode(&encode(&e)).unwrap();
        assert_eq!((d.bytes, d.payload.len()), (16 << 20, MAX_PAYLOAD));
    }
}
