//! What a `dns` phase was spent on: the target's name asked again the way
//! glibc's stub resolver asks it (resolv(5)): a name with fewer dots than
//! `ndots` goes through the search list first, each name's A and AAAA go
//! out together on one socket, an unanswered try is sent again after
//! `timeout:` seconds, up to `attempts:` times. Each name is timed, so the
//! phase splits into search names that failed, tries that went unanswered,
//! and the name that answered — what `dig +search +showsearch` shows, with
//! the resolver's own timing. Written here rather than taken from a
//! resolver crate: those resolve a name, they do not report each try.
//!
//! The first nameserver alone is asked (glibc moves to the next one only
//! after every try of a round failed); names answered from /etc/hosts
//! never reach DNS and are not walked. After a try that got one answer of
//! two, glibc asks both again one after the other (single-request mode);
//! the walk asks again only the one missing.

use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::time::{Duration, Instant};
use tokio::net::UdpSocket;
use whyslow_model::{DnsStep, DnsWalk};
use whyslow_proto::dns::message::{parse, rcode_name, TYPE_A, TYPE_AAAA};

/// glibc's defaults (resolv.h): `RES_DFLRETRY` attempts, `RES_TIMEOUT`
/// seconds, ndots 1; its caps (`RES_MAXNDOTS`, `RES_MAXRETRY`,
/// `RES_MAXRETRANS`).
const DEFAULT_ATTEMPTS: u32 = 2;
const DEFAULT_TIMEOUT_S: u64 = 5;
const MAX_NDOTS: u32 = 15;
const MAX_ATTEMPTS: u32 = 5;
const MAX_TIMEOUT_S: u64 = 30;
/// Search domains read: glibc before 2.26 read 6 (`MAXDNSRCH`), later
/// ones any number; Kubernetes allows 32.
const MAX_SEARCH: usize = 32;
/// A UDP DNS message without EDNS (RFC 1035 §2.3.4).
const MAX_UDP: usize = 512;

/// What resolv.conf says about lookups.
#[derive(Debug, Clone, PartialEq)]
pub struct ResolvConf {
    pub nameserver: Option<IpAddr>,
    pub search: Vec<String>,
    pub ndots: u32,
    pub timeout: Duration,
    pub attempts: u32,
}

impl ResolvConf {
    /// resolv.conf's text read as glibc reads it: the last `search` or
    /// `domain` line wins, options clamp to glibc's caps.
    pub fn parse(text: &str) -> Self {
        let mut c = ResolvConf {
            nameserver: None,
            search: Vec::new(),
            ndots: 1,
            timeout: Duration::from_secs(DEFAULT_TIMEOUT_S),
            attempts: DEFAULT_ATTEMPTS,
        };
        for line in text.lines() {
            let mut words = line.split_whitespace();
            match words.next() {
                Some("nameserver") => {
                    let ip = words.next().and_then(|w| w.parse().ok());
                    c.nameserver = c.nameserver.or(ip);
                }
                Some("search" | "domain") => {
                    c.search = words
                        .map(|w| w.trim_end_matches('.').to_ascii_lowercase())
                        .take(MAX_SEARCH)
                        .collect();
                }
                Some("options") => c.options(words),
                _ => {}
            }
        }
        c
    }

    fn options<'a>(&mut self, words: impl Iterator<Item = &'a str>) {
        for w in words {
            let Some((k, v)) = w.split_once(':') else {
                continue;
            };
            let Ok(n) = v.parse::<u64>() else { continue };
            match k {
                "ndots" => self.ndots = n.min(u64::from(MAX_NDOTS)) as u32,
                "timeout" => self.timeout = Duration::from_secs(n.clamp(1, MAX_TIMEOUT_S)),
                "attempts" => self.attempts = n.clamp(1, u64::from(MAX_ATTEMPTS)) as u32,
                _ => {}
            }
        }
    }

    /// The names glibc asks for `name`, in order (res_nsearch), each with
    /// whether it is the name as given (else a search name).
    pub fn candidates(&self, name: &str) -> Vec<(String, bool)> {
        if let Some(absolute) = name.strip_suffix('.') {
            return vec![(absolute.to_ascii_lowercase(), true)];
        }
        let name = name.to_ascii_lowercase();
        let searched = self.search.iter().map(|d| (format!("{name}.{d}"), false));
        let as_is = std::iter::once((name.clone(), true));
        let dots = name.matches('.').count() as u32;
        if dots >= self.ndots {
            as_is.chain(searched).collect()
        } else {
            searched.chain(as_is).collect()
        }
    }
}

/// Whether /etc/hosts' text names `host` (glibc's `files` source, first
/// in a default nsswitch.conf).
fn in_hosts(text: &str, host: &str) -> bool {
    text.lines()
        .map(|l| l.split('#').next().unwrap_or(""))
        .flat_map(|l| l.split_whitespace().skip(1))
        .any(|n| n.eq_ignore_ascii_case(host.trim_end_matches('.')))
}

/// Walks `host` as the system's resolver would, or None when it is an
/// address, a name /etc/hosts gives, or resolv.conf names no nameserver.
pub async fn walk_system(host: &str) -> Option<DnsWalk> {
    if host.parse::<IpAddr>().is_ok() || host.eq_ignore_ascii_case("localhost") {
        return None;
    }
    let hosts = std::fs::read_to_string("/etc/hosts").unwrap_or_default();
    if in_hosts(&hosts, host) {
        return None;
    }
    let conf = ResolvConf::parse(&std::fs::read_to_string(Path::new("/etc/resolv.conf")).ok()?);
    walk(host, &conf).await
}

/// Walks `host` through `conf`'s candidates until one answers with an
/// address (or every one failed).
pub async fn walk(host: &str, conf: &ResolvConf) -> Option<DnsWalk> {
    let server = SocketAddr::new(conf.nameserver?, 53);
    let t0 = Instant::now();
    let mut w = DnsWalk {
        name: host.to_string(),
        resolver: server.to_string(),
        ndots: conf.ndots,
        ..DnsWalk::default()
    };
    let mut search_ended = false;
    for (name, as_is) in conf.candidates(host) {
        if search_ended && !as_is {
            continue;
        }
        let step = ask(server, &name, conf).await;
        let found = step.addresses > 0;
        // res_nsearch goes down the search list past NXDOMAIN, NODATA and
        // SERVFAIL; no answer at all, or another error, ends it (the name
        // as given is still asked).
        search_ended |=
            !as_is && !matches!(step.answer.as_str(), "NXDOMAIN" | "NOERROR" | "SERVFAIL");
        w.push(step);
        if found {
            break;
        }
    }
    w.total_us = micros(t0.elapsed());
    Some(w)
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// One name: A and AAAA together, sent again while unanswered.
async fn ask(server: SocketAddr, name: &str, conf: &ResolvConf) -> DnsStep {
    let mut step = DnsStep {
        name: name.to_string(),
        answer: "no answer".into(),
        ..DnsStep::default()
    };
    let t0 = Instant::now();
    let bind: SocketAddr = match server {
        SocketAddr::V4(_) => "0.0.0.0:0".parse().expect("an address"),
        SocketAddr::V6(_) => "[::]:0".parse().expect("an address"),
    };
    let Ok(socket) = UdpSocket::bind(bind).await else {
        return step;
    };
    if socket.connect(server).await.is_err() {
        return step;
    }
    let ids = [query_id(name, 0), query_id(name, 1)];
    let queries = [query(ids[0], name, TYPE_A), query(ids[1], name, TYPE_AAAA)];
    let mut answers: [Option<(u8, u16)>; 2] = [None, None];
    let mut buf = [0u8; MAX_UDP];
    for _ in 0..conf.attempts {
        step.tries += 1;
        let sent = Instant::now();
        for (q, a) in queries.iter().zip(&answers) {
            if a.is_none() {
                let _ = socket.send(q).await;
            }
        }
        let deadline = tokio::time::Instant::from_std(sent + conf.timeout);
        while answers.iter().any(Option::is_none) {
            let Ok(Ok(n)) = tokio::time::timeout_at(deadline, socket.recv(&mut buf)).await else {
                break;
            };
            let Ok(m) = parse(&buf[..n]) else { continue };
            if let Some(i) = ids.iter().position(|&id| id == m.id && m.response) {
                answers[i] = Some((m.rcode, m.addresses.len() as u16));
            }
        }
        if answers.iter().all(Option::is_some) {
            break;
        }
        step.retry_us += micros(sent.elapsed());
    }
    step.us = micros(t0.elapsed());
    let got: Vec<(u8, u16)> = answers.iter().flatten().copied().collect();
    step.addresses = got.iter().map(|a| u32::from(a.1)).sum();
    // The A answer speaks for the name; else the AAAA one.
    if let Some(&(rcode, _)) = got.first() {
        step.answer = rcode_name(rcode).into_owned();
    }
    step
}

/// A query id from the name and type: distinct per question, no
/// randomness needed (the socket's port is the kernel's choice).
fn query_id(name: &str, n: u16) -> u16 {
    let h = name.bytes().fold(0x811c_9dc5u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    });
    (h as u16) ^ (h >> 16) as u16 ^ n.wrapping_mul(0x9e37)
}

/// A recursive query for `name`'s `qtype` (RFC 1035 §4.1).
fn query(id: u16, name: &str, qtype: u16) -> Vec<u8> {
    let mut q = Vec::with_capacity(18 + name.len());
    for x in [id, 0x0100, 1, 0, 0, 0] {
        q.extend_from_slice(&x.to_be_bytes());
    }
    for label in name.split('.').filter(|l| !l.is_empty()) {
        let label = &label.as_bytes()[..label.len().min(63)];
        q.push(label.len() as u8);
        q.extend_from_slice(label);
    }
    q.push(0);
    q.extend_from_slice(&qtype.to_be_bytes());
    q.extend_from_slice(&1u16.to_be_bytes());
    q
}

#[cfg(test)]
mod tests {
    use super::*;

    const POD: &str = "nameserver 10.96.0.10\nsearch svc.cluster.local cluster.local\n\
                       options ndots:5 timeout:1 attempts:3\n";

    #[test]
    fn resolv_conf_is_read_as_glibc_reads_it() {
        let c = ResolvConf::parse(POD);
        assert_eq!(c.nameserver, Some("10.96.0.10".parse().unwrap()));
        assert_eq!(c.search, ["svc.cluster.local", "cluster.local"]);
        assert_eq!(
            (c.ndots, c.timeout, c.attempts),
            (5, Duration::from_secs(1), 3)
        );
        let d = ResolvConf::parse("options ndots:99 attempts:0 timeout:x\n");
        assert_eq!((d.ndots, d.attempts), (MAX_NDOTS, 1));
        assert_eq!(d.timeout, Duration::from_secs(DEFAULT_TIMEOUT_S));
    }

    #[test]
    fn names_are_asked_in_glibcs_order() {
        let c = ResolvConf::parse(POD);
        let names = |c: &ResolvConf, n: &str| -> Vec<String> {
            c.candidates(n).into_iter().map(|(name, _)| name).collect()
        };
        assert_eq!(
            names(&c, "api.internal"),
            [
                "api.internal.svc.cluster.local",
                "api.internal.cluster.local",
                "api.internal"
            ]
        );
        assert_eq!(
            c.candidates("Api.Internal."),
            [("api.internal".to_string(), true)]
        );
        let few = ResolvConf::parse("search corp\noptions ndots:1\n");
        assert_eq!(few.candidates("db.prod")[0], ("db.prod".to_string(), true));
        assert_eq!(names(&few, "db.prod"), ["db.prod", "db.prod.corp"]);
    }

    #[test]
    fn a_query_reads_back_as_its_question() {
        let q = query(7, "api.internal", TYPE_AAAA);
        let m = parse(&q).unwrap();
        assert_eq!((m.id, m.response), (7, false));
        let question = m.question.unwrap();
        assert_eq!(
            (question.name.as_str(), question.qtype),
            ("api.internal", TYPE_AAAA)
        );
        assert_ne!(query_id("a", 0), query_id("a", 1));
    }

    #[test]
    fn hosts_names_are_not_walked() {
        let hosts = "127.0.0.1 localhost\n10.0.0.5 db.internal db # the database\n";
        assert!(in_hosts(hosts, "db.internal") && in_hosts(hosts, "DB."));
        assert!(!in_hosts(hosts, "database") && !in_hosts(hosts, "10.0.0.5"));
    }
}
