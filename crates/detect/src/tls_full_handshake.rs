//! `tls_full_handshake`: a client opens connection after connection to one
//! server and makes a full TLS handshake each time instead of resuming the
//! session (a ticket or PSK) it was given on the first: certificate
//! signing and checking, and in TLS 1.2 a second round trip, on every one.
//! Read from the cleartext hellos, so it holds with or without keys.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use whyslow_model::{stats, Connection, Evidence, Finding, FindingKind, Severity, Timeline};

/// Full handshakes on repeated connections from one client before it is a
/// pattern: one or two are a cache miss or an expired ticket.
const MIN_FULL: usize = 3;
/// Share of the repeated connections that must be full: a client that
/// resumes most of the time is working as it should.
const MIN_FULL_SHARE: f64 = 0.5;

/// One TLS connection whose handshake was timed.
struct Handshake {
    id: u32,
    at_us: u64,
    resumed: bool,
    handshake_us: u64,
    /// SYN → SYN/ACK, the round trip every handshake pays.
    rtt_us: Option<u64>,
    label: String,
}

fn handshake(c: &Connection) -> Option<Handshake> {
    let f = c.tls_facts.as_ref()?;
    let label = [
        f.version.as_deref().map(|v| format!("TLS {v}")),
        f.cipher.clone(),
    ]
    .into_iter()
    .flatten()
    .collect::<Vec<_>>()
    .join(" ");
    Some(Handshake {
        id: c.id,
        at_us: c.first_at_us,
        resumed: f.resumed,
        handshake_us: f.handshake_us?,
        rtt_us: c
            .syn_ack_at_us
            .zip(c.syn_at_us)
            .map(|(a, s)| a.saturating_sub(s)),
        label,
    })
}

/// What to change.
const FIX: &str =
    "resume TLS sessions: keep one TLS client context (its session cache) for the life \
     of the process and reuse it for every connection; on the server keep session tickets \
     or a session cache on (nginx: ssl_session_tickets, ssl_session_cache); better still, \
     keep connections open (keep-alive)";

pub fn detect(timeline: &Timeline) -> Vec<Finding> {
    let mut groups: BTreeMap<(IpAddr, SocketAddr), Vec<Handshake>> = BTreeMap::new();
    for c in &timeline.connections {
        if let Some(h) = handshake(c) {
            groups.entry((c.client.ip(), c.server)).or_default().push(h);
        }
    }
    groups
        .into_iter()
        .filter_map(|((client, server), mut hs)| {
            hs.sort_by_key(|h| h.at_us);
            finding(client, server, &hs)
        })
        .collect()
}

/// The connections that could have resumed: opened after an earlier one to
/// the same server had finished its handshake (a pool opening five at once
/// has no session to resume yet). `hs` is in opening order.
fn could_resume(hs: &[Handshake]) -> Vec<&Handshake> {
    let mut first_done = u64::MAX;
    let mut out = Vec::new();
    for h in hs {
        if h.at_us >= first_done {
            out.push(h);
        }
        first_done = first_done.min(h.at_us + h.handshake_us);
    }
    out
}

fn finding(client: IpAddr, server: SocketAddr, hs: &[Handshake]) -> Option<Finding> {
    let repeated = could_resume(hs);
    let full: Vec<&Handshake> = repeated.iter().copied().filter(|h| !h.resumed).collect();
    if full.len() < MIN_FULL || (full.len() as f64) < MIN_FULL_SHARE * repeated.len() as f64 {
        return None;
    }
    // What resumption costs here when some were seen; otherwise the one
    // round trip any handshake needs (so the figure is an upper bound).
    let mut resumed: Vec<u64> = hs
        .iter()
        .filter(|h| h.resumed)
        .map(|h| h.handshake_us)
        .collect();
    resumed.sort_unstable();
    let floor = |h: &Handshake| match resumed.is_empty() {
        false => stats::percentile(&resumed, 0.5),
        true => h.rtt_us.unwrap_or(0),
    };
    let mut lost: Vec<u64> = full
        .iter()
        .map(|h| h.handshake_us.saturating_sub(floor(h)))
        .collect();
    lost.sort_unstable();
    let per = stats::percentile(&lost, 0.5);
    let bound = if resumed.is_empty() { "up to " } else { "" };
    let summary = format!(
            "{} of {} repeated TLS connections from {client} to {server} made a full handshake \
             instead of resuming the session: {bound}{:.2} ms each that resumption would save (median)",
            full.len(),
            repeated.len(),
            per as f64 / 1000.0
        );
    let found = Finding {
        facts: whyslow_model::Facts::default()
            .with("repeated_connections", repeated.len() as f64)
            .with("saving_us", per as f64),
        evidence: full
            .iter()
            .take(10)
            .map(|h| Evidence::Measurement {
                facts: whyslow_model::Facts::default()
                    .with("connection", h.id as f64)
                    .with("handshake_us", h.handshake_us as f64),
                note: format!(
                    "connection #{}: {}, full handshake {:.2} ms",
                    h.id,
                    h.label,
                    h.handshake_us as f64 / 1000.0
                ),
            })
            .collect(),
        ..Finding::new(
            FindingKind::TlsFullHandshake,
            Severity::Warning,
            summary,
            FIX,
        )
    };
    Some(found.losing(&lost))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::ConnBuilder;
    use whyslow_model::TlsFacts;

    fn timeline(resumed: &[bool], handshake_us: u64) -> Timeline {
        let connections = resumed
            .iter()
            .enumerate()
            .map(|(i, r)| {
                let mut c = ConnBuilder::new(i as u32, 40000 + i as u16).conn;
                c.first_at_us += i as u64 * 10_000;
                c.tls = true;
                c.tls_facts = Some(TlsFacts {
                    version: Some("1.3".into()),
                    cipher: Some("TLS_AES_128_GCM_SHA256".into()),
                    resumed: *r,
                    handshake_us: Some(if *r { handshake_us / 4 } else { handshake_us }),
                    ..TlsFacts::default()
                });
                c
            })
            .collect();
        Timeline {
            connections,
            exchanges: Vec::new(),
        }
    }

    #[test]
    fn full_handshakes_on_every_connection_are_found() {
        let f = detect(&timeline(&[false; 5], 2_000));
        assert_eq!(f.len(), 1);
        assert_eq!(
            f[0].occurrences, 4,
            "the first connection has nothing to resume"
        );
        // No resumption seen: the bound is the handshake less its round trip.
        assert_eq!(f[0].time_lost_per_occurrence_us, 2_000 - 50);
        assert!(f[0].summary.contains("up to"), "{}", f[0].summary);
    }

    #[test]
    fn the_cost_is_measured_against_resumed_handshakes_when_seen() {
        let f = detect(&timeline(&[false, true, false, false, false, true], 2_000));
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].occurrences, 3);
        assert_eq!(f[0].time_lost_per_occurrence_us, 1_500);
    }

    #[test]
    fn connections_opened_together_have_nothing_to_resume() {
        let mut t = timeline(&[false; 6], 2_000);
        for c in &mut t.connections {
            c.first_at_us = 1_000_000;
        }
        assert!(detect(&t).is_empty());
    }

    #[test]
    fn resuming_clients_and_a_few_misses_are_fine() {
        assert!(detect(&timeline(&[false, true, true, true, true], 2_000)).is_empty());
        assert!(detect(&timeline(&[false, false, false], 2_000)).is_empty());
        let mostly = [
            false, true, true, false, true, true, false, true, true, false,
        ];
        assert!(detect(&timeline(&mostly, 2_000)).is_empty());
    }
}
