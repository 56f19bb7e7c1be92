//! The DNS queries of a timeline as the DNS detectors read them: who asked
//! (the client's address: a stub resolver opens a socket per lookup, so
//! its port says nothing), which resolver, the question, when, and how it
//! was answered.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use whyslow_model::{Connection, Exchange, Protocol, Status, Timeline};

/// How close the two types of one lookup (A and AAAA) are sent: glibc
/// sends both at once on one socket, or the second at once after the
/// first's answer (`single-request`); 1 ms is a thread's wake-up on a
/// loaded host. Attribution and every DNS detector pair queries by it.
pub const PARTNER_US: u64 = 1_000;

/// One query and its answer, if any.
#[derive(Debug, Clone, Copy)]
pub struct Query<'a> {
    pub exchange: &'a Exchange,
    /// Its place among the timeline's exchanges.
    pub index: usize,
    pub client: IpAddr,
    pub resolver: SocketAddr,
    /// "A", "AAAA"…
    pub qtype: &'a str,
    /// Lower case, without the root's dot.
    pub name: &'a str,
    pub sent_us: u64,
    /// The last byte of its answer; None: never answered.
    pub answered_us: Option<u64>,
    /// The answer's rcode ("NOERROR", "NXDOMAIN"…), without " TC".
    pub rcode: Option<&'a str>,
}

impl Query<'_> {
    /// Sent → answered.
    pub fn wait_us(&self) -> Option<u64> {
        self.answered_us.map(|a| a.saturating_sub(self.sent_us))
    }

    pub fn is(&self, rcode: &str) -> bool {
        self.rcode == Some(rcode)
    }
}

/// Every DNS query of `t` whose question was read, by send time.
pub fn queries(t: &Timeline) -> Vec<Query<'_>> {
    queries_of(&t.connections, &t.exchanges)
}

/// A timeline's DNS queries as every DNS detector reads them, built once.
#[derive(Default)]
pub struct Queries<'a> {
    /// By send time.
    pub all: Vec<Query<'a>>,
    /// Grouped by the client that sent them (`by_client`).
    pub by_client: Vec<(IpAddr, Vec<Query<'a>>)>,
}

impl<'a> Queries<'a> {
    pub fn of(t: &'a Timeline) -> Self {
        let all = queries(t);
        let by_client = by_client(&all);
        Queries { all, by_client }
    }
}

/// `queries` of a timeline's connections and exchanges.
pub fn queries_of<'a>(connections: &[Connection], exchanges: &'a [Exchange]) -> Vec<Query<'a>> {
    let ends: HashMap<u32, (IpAddr, SocketAddr)> = connections
        .iter()
        .filter(|c| c.protocol == Protocol::Dns)
        .map(|c| (c.id, (c.client.ip(), c.server)))
        .collect();
    let mut out: Vec<Query> = exchanges
        .iter()
        .enumerate()
        .filter(|(_, e)| e.protocol == Protocol::Dns)
        .filter_map(|(index, e)| {
            let (client, resolver) = *ends.get(&e.connection)?;
            let (qtype, name) = e.request.split_once(' ')?;
            if qtype.starts_with('?') {
                return None;
            }
            let rcode = match &e.status {
                Some(Status::Dns(s)) => s.split(' ').next(),
                _ => None,
            };
            Some(Query {
                exchange: e,
                index,
                client,
                resolver,
                qtype,
                name,
                sent_us: e.request_first_at_us,
                answered_us: e.response_last_at_us,
                rcode,
            })
        })
        .collect();
    out.sort_by_key(|q| q.sent_us);
    out
}

/// Queries grouped by the client that sent them, each group by send time.
pub fn by_client<'a>(qs: &[Query<'a>]) -> Vec<(IpAddr, Vec<Query<'a>>)> {
    let mut m: std::collections::BTreeMap<IpAddr, Vec<Query>> = Default::default();
    for q in qs {
        m.entry(q.client).or_default().push(*q);
    }
    m.into_iter().collect()
}
