//! A small DNS resolver and stub client over UDP, for the lab's DNS
//! scenario, so that `demo` runs with nothing installed.
//!
//! The resolver answers A queries from its own records (one address per
//! name), NXDOMAIN for every other name and NOERROR with no answer for
//! other types of a name it has; it answers each query after `latency`,
//! on its own task (to within microseconds: `work::work_for`), and drops
//! every `drop_every`th query unanswered.
//!
//! The client resolves as glibc's stub resolver does with `search` and
//! `ndots` in resolv.conf: a name with fewer dots than `ndots` is tried
//! under each search suffix first, then as it is; a name ending in a dot
//! only as it is. Each try is a query on a new socket, asked again on the
//! same socket after `timeout` (`attempts` times in all). A and nothing
//! else: the lab's services connect over IPv4.
//!
//! Hand-written and independent of whyslow's DNS analyzer, so that the
//! analyzer is held to a second reading of RFC 1035.

use crate::truth::Calls;
use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::UdpSocket;

/// RFC 1035 §4.1.1: header length, QR bit, response codes.
const HEADER: usize = 12;
const QR: u16 = 0x8000;
/// RD and RA (recursion desired / available), as a recursive resolver sets them.
const RD: u16 = 0x0100;
const RA: u16 = 0x0080;
const NOERROR: u16 = 0;
const NXDOMAIN: u16 = 3;
const TYPE_A: u16 = 1;
const CLASS_IN: u16 = 1;
/// Answers' time to live.
const TTL_S: u32 = 30;
/// Datagrams are read into RFC 1035's 512 bytes (§4.2.1): a longer
/// query is cut there, and answered only if its question is whole.
const MAX_MESSAGE: usize = 512;

/// The resolver's behaviour.
#[derive(Debug, Clone)]
pub struct ResolverConfig {
    /// Name (lower case, no trailing dot) → its address.
    pub records: Vec<(String, Ipv4Addr)>,
    pub latency: Duration,
    /// Every `drop_every`th query goes unanswered; 0: none.
    pub drop_every: u64,
}

/// Serves `cfg` on `socket` for ever.
pub async fn serve(socket: UdpSocket, cfg: ResolverConfig) {
    let socket = Arc::new(socket);
    let cfg = Arc::new(cfg);
    let seen = AtomicU64::new(0);
    let mut buf = vec![0u8; MAX_MESSAGE];
    loop {
        let Ok((n, peer)) = socket.recv_from(&mut buf).await else {
            continue;
        };
        let count = seen.fetch_add(1, Ordering::Relaxed) + 1;
        if cfg.drop_every > 0 && count.is_multiple_of(cfg.drop_every) {
            continue;
        }
        let Some(answer) = answer(&buf[..n], &cfg.records) else {
            continue;
        };
        let (socket, latency) = (socket.clone(), cfg.latency);
        tokio::spawn(async move {
            crate::work::work_for(latency).await;
            let _ = socket.send_to(&answer, peer).await;
        });
    }
}

/// The answer to one query, or None for what is not a query.
pub fn answer(query: &[u8], records: &[(String, Ipv4Addr)]) -> Option<Vec<u8>> {
    let flags = u16::from_be_bytes([*query.get(2)?, *query.get(3)?]);
    let questions = u16::from_be_bytes([*query.get(4)?, *query.get(5)?]);
    if flags & QR != 0 || questions != 1 {
        return None;
    }
    let (name, end) = question_name(query)?;
    let qtype = u16::from_be_bytes([*query.get(end)?, *query.get(end + 1)?]);
    let question = query.get(HEADER..end + 4)?;
    let address = records.iter().find(|(n, _)| *n == name).map(|(_, a)| *a);
    let (rcode, record) = match (address, qtype) {
        (None, _) => (NXDOMAIN, None),
        (Some(a), TYPE_A) => (NOERROR, Some(a)),
        (Some(_), _) => (NOERROR, None),
    };
    let mut out = Vec::with_capacity(question.len() + 32);
    out.extend_from_slice(&query[..2]);
    out.extend_from_slice(&(QR | RD | RA | rcode).to_be_bytes());
    out.extend_from_slice(&1u16.to_be_bytes());
    out.extend_from_slice(&u16::from(record.is_some()).to_be_bytes());
    out.extend_from_slice(&[0, 0, 0, 0]);
    out.extend_from_slice(question);
    if let Some(a) = record {
        // The name by a pointer to the question's (offset 12).
        out.extend_from_slice(&[0xc0, HEADER as u8]);
        out.extend_from_slice(&TYPE_A.to_be_bytes());
        out.extend_from_slice(&CLASS_IN.to_be_bytes());
        out.extend_from_slice(&TTL_S.to_be_bytes());
        out.extend_from_slice(&4u16.to_be_bytes());
        out.extend_from_slice(&a.octets());
    }
    Some(out)
}

/// The question's name (lower case, dotted) and the offset after it.
/// Queries carry no compression pointers.
fn question_name(msg: &[u8]) -> Option<(String, usize)> {
    let mut at = HEADER;
    let mut labels = Vec::new();
    loop {
        let len = usize::from(*msg.get(at)?);
        if len == 0 {
            return Some((labels.join("."), at + 1));
        }
        if len > 63 {
            return None;
        }
        let label = msg.get(at + 1..at + 1 + len)?;
        labels.push(String::from_utf8_lossy(label).to_ascii_lowercase());
        at += 1 + len;
    }
}

/// An A query for `name` with id `id`, recursion desired.
pub fn query(id: u16, name: &str) -> Vec<u8> {
    let mut q = Vec::with_capacity(HEADER + name.len() + 6);
    q.extend_from_slice(&id.to_be_bytes());
    q.extend_from_slice(&RD.to_be_bytes());
    q.extend_from_slice(&[0, 1, 0, 0, 0, 0, 0, 0]);
    for label in name.split('.').filter(|l| !l.is_empty()) {
        q.push(label.len().min(63) as u8);
        q.extend_from_slice(&label.as_bytes()[..label.len().min(63)]);
    }
    q.push(0);
    q.extend_from_slice(&TYPE_A.to_be_bytes());
    q.extend_from_slice(&CLASS_IN.to_be_bytes());
    q
}

/// What an answer said: the address, none (NXDOMAIN or no record), or
/// not an answer to `id` at all.
fn read_answer(msg: &[u8], id: u16) -> Option<Option<Ipv4Addr>> {
    if msg.len() < HEADER || u16::from_be_bytes([msg[0], msg[1]]) != id {
        return None;
    }
    let flags = u16::from_be_bytes([msg[2], msg[3]]);
    if flags & QR == 0 {
        return None;
    }
    let answers = u16::from_be_bytes([msg[6], msg[7]]);
    if flags & 0xf != NOERROR || answers == 0 {
        return Some(None);
    }
    let (_, end) = question_name(msg)?;
    // One A record after the question, its name a pointer: 2 + 10 + 4 bytes.
    let rdata = msg.get(end + 4 + 12..end + 4 + 16)?;
    Some(Some(Ipv4Addr::new(rdata[0], rdata[1], rdata[2], rdata[3])))
}

/// A stub resolver as resolv.conf configures glibc's.
#[derive(Debug, Clone)]
pub struct Resolver {
    pub server: SocketAddr,
    pub search: Vec<String>,
    pub ndots: usize,
    pub timeout: Duration,
    pub attempts: u32,
}

impl Resolver {
    /// The names tried for `name`, in order.
    pub fn candidates(&self, name: &str) -> Vec<String> {
        if let Some(absolute) = name.strip_suffix('.') {
            return vec![absolute.to_string()];
        }
        let under: Vec<String> = self.search.iter().map(|s| format!("{name}.{s}")).collect();
        match name.matches('.').count() >= self.ndots {
            true => std::iter::once(name.to_string()).chain(under).collect(),
            false => under.into_iter().chain([name.to_string()]).collect(),
        }
    }

    /// The address of `name`; each query recorded in `calls` as a call on
    /// its socket.
    pub async fn lookup(&self, name: &str, calls: &Calls) -> io::Result<IpAddr> {
        for candidate in self.candidates(name) {
            if let Some(a) = self.ask(&candidate, calls).await? {
                return Ok(IpAddr::V4(a));
            }
        }
        Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!("{name}: NXDOMAIN"),
        ))
    }

    /// One name, asked until answered or out of attempts.
    async fn ask(&self, name: &str, calls: &Calls) -> io::Result<Option<Ipv4Addr>> {
        let socket = UdpSocket::bind("127.0.0.1:0").await?;
        socket.connect(self.server).await?;
        let port = socket.local_addr()?.port();
        let id = next_id();
        let q = query(id, name);
        let mut buf = vec![0u8; MAX_MESSAGE];
        for _ in 0..self.attempts.max(1) {
            let call = calls.start_datagram(port);
            socket.send(&q).await?;
            let answer = tokio::time::timeout(self.timeout, async {
                loop {
                    let n = socket.recv(&mut buf).await?;
                    if let Some(a) = read_answer(&buf[..n], id) {
                        return Ok::<_, io::Error>(a);
                    }
                }
            })
            .await;
            call.done();
            match answer {
                Ok(a) => return a,
                Err(_elapsed) => continue,
            }
        }
        Err(io::Error::new(
            io::ErrorKind::TimedOut,
            format!("{name}: no answer"),
        ))
    }
}

/// Query ids: different for every query of the process.
fn next_id() -> u16 {
    static NEXT: AtomicU64 = AtomicU64::new(0x1d5);
    (NEXT.fetch_add(0x9e37, Ordering::Relaxed) & 0xffff) as u16
}

#[cfg(test)]
mod tests {
    use super::*;

    fn records() -> Vec<(String, Ipv4Addr)> {
        vec![("api.internal".into(), Ipv4Addr::new(127, 0, 0, 9))]
    }

    #[test]
    fn search_list_order_follows_ndots() {
        let r = Resolver {
            server: "127.0.0.1:53".parse().unwrap(),
            search: vec!["svc.cluster.local".into(), "cluster.local".into()],
            ndots: 5,
            timeout: Duration::from_millis(10),
            attempts: 1,
        };
        assert_eq!(
            r.candidates("api.internal"),
            [
                "api.internal.svc.cluster.local",
                "api.internal.cluster.local",
                "api.internal"
            ]
        );
        assert_eq!(r.candidates("api.internal."), ["api.internal"]);
        let r1 = Resolver { ndots: 1, ..r };
        assert_eq!(r1.candidates("api.internal")[0], "api.internal");
    }

    #[test]
    fn answers_read_back_as_the_client_reads_them() {
        let a = answer(&query(7, "API.internal"), &records()).unwrap();
        assert_eq!(read_answer(&a, 7), Some(Some(Ipv4Addr::new(127, 0, 0, 9))));
        assert_eq!(read_answer(&a, 8), None);
        let nx = answer(&query(9, "api.internal.cluster.local"), &records()).unwrap();
        assert_eq!(read_answer(&nx, 9), Some(None));
        assert_eq!(nx[3] & 0xf, NXDOMAIN as u8);
        assert!(answer(&a, &records()).is_none(), "an answer is not a query");
        assert!(answer(&[0; 5], &records()).is_none());
    }

    #[tokio::test]
    async fn a_lookup_walks_the_search_list_and_survives_a_drop() {
        let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let server = socket.local_addr().unwrap();
        let cfg = ResolverConfig {
            records: records(),
            latency: Duration::from_micros(100),
            drop_every: 3,
        };
        let task = tokio::spawn(serve(socket, cfg));
        let r = Resolver {
            server,
            search: vec!["svc.cluster.local".into(), "cluster.local".into()],
            ndots: 5,
            timeout: Duration::from_millis(30),
            attempts: 2,
        };
        let log = crate::truth::CallLog::new();
        let calls = log.request(1);
        let a = r.lookup("api.internal", &calls).await.unwrap();
        calls.served();
        assert_eq!(a, IpAddr::V4(Ipv4Addr::new(127, 0, 0, 9)));
        // Three names, the third query dropped and asked again.
        assert_eq!(log.requests()[0].calls.len(), 4);
        task.abort();
    }
}
