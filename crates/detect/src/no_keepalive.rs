//! `no_keepalive`: a new connection (and handshake) for every request to a server.

use crate::sentence::{count, Sentence};
use foldhash::{HashMap, HashMapExt};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use whyslow_model::{Evidence, Finding, FindingKind, Population, Severity, Subject, Timeline};

/// Fewer connections than this to one server is not a pattern.
const MIN_CONNECTIONS: usize = 5;
/// Share of a server's connections that carried at most one exchange.
const MIN_SHORT_SHARE: f64 = 0.8;

/// What to change.
const FIX: &str =
    "reuse connections: enable keep-alive in the client (a connection pool) and on the server; \
     with TLS this also saves the TLS handshake";

pub fn detect(timeline: &Timeline) -> Vec<Finding> {
    // One pass over the exchanges: a capture holds hundreds of thousands.
    let mut per_connection: HashMap<u32, u64> = HashMap::new();
    for e in &timeline.exchanges {
        *per_connection.entry(e.connection).or_default() += 1;
    }
    let mut by_server: BTreeMap<SocketAddr, Vec<(u32, u64, u64)>> = BTreeMap::new();
    for c in &timeline.connections {
        let Some(handshake) = c
            .established_at_us
            .zip(c.syn_at_us)
            .map(|(e, s)| e.saturating_sub(s))
        else {
            continue; // only connections whose opening was seen
        };
        // A connection ending in this window may have carried many in
        // earlier ones: the capture's count, when the timeline has it.
        let here = per_connection.get(&c.id).copied().unwrap_or(0);
        let exchanges = here.max(c.exchanges);
        by_server
            .entry(c.server)
            .or_default()
            .push((c.id, exchanges, handshake));
    }
    by_server
        .into_iter()
        .filter_map(|(server, conns)| finding(server, conns))
        .collect()
}

/// A server's connections: a finding when some carried a single request,
/// a tally when none did, judged once over the capture: `MIN_SHORT_SHARE`
/// of at least `MIN_CONNECTIONS` connections that carried requests.
fn finding(server: SocketAddr, conns: Vec<(u32, u64, u64)>) -> Option<Finding> {
    let with_requests: Vec<_> = conns.iter().filter(|c| c.1 > 0).collect();
    let short = with_requests.iter().filter(|c| c.1 == 1).count();
    let population = Population {
        min_of: MIN_CONNECTIONS as u64,
        ..Population::share_of(short, with_requests.len(), MIN_SHORT_SHARE)
    };
    if with_requests.is_empty() {
        return None;
    }
    let subject = Subject::server(server);
    if short == 0 {
        let tally = Finding::tally(FindingKind::NoKeepalive, subject, population);
        return Some(tally);
    }
    // The handshakes a pool would have saved: those of single-request connections.
    let mut handshakes: Vec<u64> = with_requests
        .iter()
        .filter(|c| c.1 == 1)
        .map(|c| c.2)
        .collect();
    handshakes.sort_unstable();
    let mut f = Finding {
        facts: whyslow_model::Facts::default().with("connections", with_requests.len() as f64),
        time_lost_us: handshakes.iter().sum(),
        time_lost_per_occurrence_us: whyslow_model::stats::percentile(&handshakes, 0.5),
        occurrences: short as u32,
        evidence: with_requests
            .iter()
            .take(10)
            .map(|c| Evidence::Measurement {
                facts: whyslow_model::Facts::default()
                    .with("connection", c.0 as f64)
                    .with("requests", c.1 as f64)
                    .with("handshake_us", c.2 as f64),
                note: format!(
                    "connection #{}: {} request(s), handshake {:.2} ms",
                    c.0,
                    c.1,
                    c.2 as f64 / 1000.0
                ),
            })
            .collect(),
        subject,
        population: Some(population),
        ..Finding::new(
            FindingKind::NoKeepalive,
            Severity::Warning,
            String::new(),
            FIX,
        )
    };
    f.summary = tell(&f);
    Some(f)
}

/// Told from the numbers alone, a window's or the whole capture's.
pub const SENTENCE: Sentence = Sentence::summing(&["connections"], tell);

fn tell(f: &Finding) -> String {
    format!(
        "{} of {} connections to {} carried a single request: each paid a TCP handshake",
        f.occurrences,
        // Once merged, the connections of the windows where none did too.
        f.population.map_or(count(f, "connections"), |p| p.of),
        f.subject
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::{exchange, ConnBuilder};

    /// What the detector names, judged as a capture's findings are.
    fn detect(t: &Timeline) -> Vec<Finding> {
        let mut f = super::detect(t);
        crate::merge::judge(&mut f);
        f
    }

    #[test]
    fn one_request_per_connection_is_found() {
        let conns: Vec<_> = (0..6)
            .map(|i| ConnBuilder::new(i, 40000 + i as u16).conn)
            .collect();
        let exchanges = (0..6).map(|i| exchange(i, i, (0, 0), (0, 0))).collect();
        let f = detect(&Timeline {
            connections: conns,
            exchanges,
        });
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].occurrences, 6);
        assert_eq!(f[0].time_lost_per_occurrence_us, 100);
    }

    #[test]
    fn connections_that_carried_more_in_earlier_windows_are_reused() {
        // Six pooled connections end in one window, each with its last
        // request there: they carried 40 in all.
        let conns: Vec<_> = (0..6)
            .map(|i| {
                let mut c = ConnBuilder::new(i, 40000 + i as u16).conn;
                c.exchanges = 40;
                c
            })
            .collect();
        let exchanges = (0..6).map(|i| exchange(i, i, (0, 0), (0, 0))).collect();
        assert!(detect(&Timeline {
            connections: conns,
            exchanges
        })
        .is_empty());
    }

    #[test]
    fn reused_connections_are_fine() {
        let conns: Vec<_> = (0..6)
            .map(|i| ConnBuilder::new(i, 40000 + i as u16).conn)
            .collect();
        let exchanges = (0..18)
            .map(|i| exchange(i, i % 6, (0, 0), (0, 0)))
            .collect();
        assert!(detect(&Timeline {
            connections: conns,
            exchanges
        })
        .is_empty());
    }
}
