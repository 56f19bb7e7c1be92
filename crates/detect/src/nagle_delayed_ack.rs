//! `nagle_delayed_ack`: a message left in two segments and the second one
//! waited for the peer's delayed ACK of the first (Nagle's algorithm holds a
//! small segment while data is unacknowledged; the receiver holds its ACK
//! until its delayed-ACK timer fires because it is waiting for the rest).
//!
//! On the wire, per direction: data segment s1; no data back from the peer;
//! the peer's pure ACK for s1 comes ≥ 30 ms later; s2 (contiguous with s1)
//! leaves right after that ACK.

use crate::thresholds::{DELAYED_ACK_MAX_US, DELAYED_ACK_MIN_US};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use whyslow_model::stats::median;
use whyslow_model::{
    AckEvent, Connection, Direction, Evidence, Finding, FindingKind, Segment, Severity, Timeline,
};

/// Nagle releases the held segment as soon as the ACK arrives; on loopback
/// that is tens of µs, across a network ≈ one RTT. 10 ms keeps LAN RTTs in.
const NAGLE_RELEASE_MAX_US: u64 = 10_000;
/// Evidence entries kept per finding (the JSON report carries them all up to this).
const MAX_EVIDENCE: usize = 50;

/// One stall: s1, the delayed ACK, s2.
#[derive(Debug, Clone, PartialEq)]
pub struct Stall {
    pub connection: u32,
    pub direction: Direction,
    pub first: u64,
    pub ack: u64,
    pub second: u64,
    pub at_us: u64,
    pub ack_delay_us: u64,
    pub time_lost_us: u64,
}

/// One finding per (server, direction): each says who split and who delayed.
pub fn detect(timeline: &Timeline) -> Vec<Finding> {
    let mut groups: BTreeMap<(SocketAddr, Direction), Vec<Stall>> = BTreeMap::new();
    for conn in &timeline.connections {
        for stall in stalls_on(conn) {
            groups
                .entry((conn.server, stall.direction))
                .or_default()
                .push(stall);
        }
    }
    groups
        .into_iter()
        .filter_map(|((server, d), stalls)| finding(server, d, stalls.iter().collect()))
        .collect()
}

/// Every Nagle × delayed-ACK stall on one connection, both directions.
pub fn stalls_on(conn: &Connection) -> Vec<Stall> {
    let mut out = Vec::new();
    for d in [Direction::ToServer, Direction::ToClient] {
        let data: Vec<&Segment> = conn
            .segments
            .iter()
            .filter(|s| s.len > 0 && !s.flags.retransmission)
            .collect();
        for pair in data.windows(2).filter(|w| w[0].direction == d) {
            if let Some(stall) = stall(conn, pair[0], pair[1], d) {
                out.push(stall);
            }
        }
    }
    out
}

/// `s2` is the next data segment of the connection; it must go the same way as
/// `s1`: data from the peer in between would have carried the ACK with it.
fn stall(conn: &Connection, s1: &Segment, s2: &Segment, d: Direction) -> Option<Stall> {
    if s2.direction != d {
        return None;
    }
    let s1_end = s1.stream_offset + s1.len as u64;
    if s2.stream_offset != s1_end || s2.at_us.saturating_sub(s1.at_us) < DELAYED_ACK_MIN_US {
        return None;
    }
    let ack: &AckEvent = conn
        .acks
        .iter()
        .find(|a| a.direction == d.reverse() && a.at_us >= s1.at_us && a.acked_offset >= s1_end)?;
    let ack_delay = ack.at_us - s1.at_us;
    // What the path itself takes: an ACK comes back a round trip after
    // the data left, delayed or not (a 210 ms path made every ACK look
    // delayed). Known from the handshake when the capture saw it.
    let path = round_trip(conn);
    let released_after_ack =
        s2.at_us >= ack.at_us && s2.at_us - ack.at_us <= NAGLE_RELEASE_MAX_US + path;
    let held = ack_delay.saturating_sub(path);
    let delayed = (DELAYED_ACK_MIN_US..=DELAYED_ACK_MAX_US).contains(&held);
    (!ack.piggybacked && delayed && released_after_ack).then(|| Stall {
        connection: conn.id,
        direction: d,
        first: s1.packet,
        ack: ack.packet,
        second: s2.packet,
        at_us: s1.at_us,
        ack_delay_us: ack_delay,
        time_lost_us: s2.at_us - s1.at_us,
    })
}

/// The connection's round trip, from its handshake (SYN to the ACK of the
/// SYN/ACK: a full round trip wherever the capture sat); 0 when the capture
/// began after it.
fn round_trip(conn: &Connection) -> u64 {
    match (conn.syn_at_us, conn.established_at_us) {
        (Some(syn), Some(done)) => done.saturating_sub(syn),
        _ => 0,
    }
}

/// What to change, by the direction that split its writes.
fn fix(d: Direction) -> &'static str {
    match d {
        Direction::ToServer => {
            "client: set TCP_NODELAY, or write headers and body in one call (as curl does); \
             server/proxy: set TCP_QUICKACK when a request arrives incomplete (HAProxy ≥ 1.4.19 does)"
        }
        Direction::ToClient => {
            "server: set TCP_NODELAY, or write response headers and body in one call; \
             client: set TCP_QUICKACK while a response is incomplete"
        }
    }
}

/// The packets of one stall, as evidence.
fn evidence(s: &Stall, d: Direction) -> Evidence {
    Evidence::Packets {
        facts: whyslow_model::Facts::default().with("ack_delay_us", s.ack_delay_us as f64),
        connection: s.connection,
        packets: vec![s.first, s.ack, s.second],
        at_us: s.at_us,
        note: format!(
            "{} segment {}, {}'s ACK {:.1} ms later (packet {}), then segment {}",
            d.sender(),
            s.first,
            d.receiver(),
            s.ack_delay_us as f64 / 1000.0,
            s.ack,
            s.second
        ),
    }
}

fn finding(server: SocketAddr, d: Direction, stalls: Vec<&Stall>) -> Option<Finding> {
    stalls.first()?;
    let per = median(stalls.iter().map(|s| s.time_lost_us).collect());
    let ack_us = median(stalls.iter().map(|s| s.ack_delay_us).collect());
    let what = if d == Direction::ToServer {
        "requests"
    } else {
        "responses"
    };
    let summary = format!(
        "{n} {what} to/from {server} left in two segments: the {splitter} split them without \
         TCP_NODELAY and the {delayer} delayed its ACK ~{ack:.0} ms, so the second segment \
         waited {per:.1} ms (median)",
        n = stalls.len(),
        splitter = d.sender(),
        delayer = d.receiver(),
        ack = ack_us as f64 / 1000.0,
        per = per as f64 / 1000.0,
    );
    let lost = stalls.iter().map(|s| s.time_lost_us).sum();
    let evidence = stalls.iter().take(MAX_EVIDENCE);
    Some(Finding {
        facts: whyslow_model::Facts::default().with("ack_delay_us", ack_us as f64),
        time_lost_us: lost,
        time_lost_per_occurrence_us: per,
        occurrences: stalls.len() as u32,
        evidence: evidence.map(|s| self::evidence(s, d)).collect(),
        ..Finding::new(
            FindingKind::NagleDelayedAck,
            Severity::Critical,
            summary,
            fix(d),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::ConnBuilder;
    use Direction::{ToClient, ToServer};

    /// Request in two segments; the server's ACK after `ack_after` µs; the body right after.
    fn split_request(b: &mut ConnBuilder, t: u64, ack_after: u64, piggyback: bool) {
        b.data(ToServer, t, 180);
        b.ack(ToClient, t + ack_after, 65535, piggyback);
        b.data(ToServer, t + ack_after + 40, 30);
        b.data(ToClient, t + ack_after + 300, 120);
        b.ack(ToServer, t + ack_after + 340, 65535, false);
    }

    #[test]
    fn finds_client_split_server_delayed() {
        let mut b = ConnBuilder::new(1, 40000);
        split_request(&mut b, 2_000_000, 200, false); // first request: quick ACK
        split_request(&mut b, 2_100_000, 40_100, false);
        split_request(&mut b, 2_200_000, 40_050, false);
        let tl = b.timeline();
        let f = detect(&tl);
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].kind, FindingKind::NagleDelayedAck);
        assert_eq!(f[0].occurrences, 2);
        assert!((40_000..40_300).contains(&f[0].time_lost_per_occurrence_us));
        assert!(
            f[0].summary.contains("the client split")
                && f[0].summary.contains("the server delayed")
        );
        let Evidence::Packets { packets, .. } = &f[0].evidence[0] else {
            panic!()
        };
        assert_eq!(packets.len(), 3);
    }

    #[test]
    fn finds_server_split_client_delayed() {
        let mut b = ConnBuilder::new(1, 40000);
        b.data(ToServer, 1_000_000, 100);
        b.ack(ToClient, 1_000_020, 65535, true);
        b.data(ToClient, 1_000_030, 150);
        b.ack(ToServer, 1_040_030, 65535, false);
        b.data(ToClient, 1_040_060, 2000);
        let f = detect(&b.timeline());
        assert_eq!(f.len(), 1);
        assert!(f[0].summary.contains("responses") && f[0].summary.contains("the server split"));
    }

    #[test]
    fn an_ack_a_long_path_took_is_no_delayed_ack() {
        // A 210 ms round trip (the handshake's): every ACK comes back 208 ms
        // or more after the data, delayed or not. Nagle's hold on the second
        // segment is then the path, not a delayed ACK.
        let mut b = ConnBuilder::new(1, 40000);
        b.conn.established_at_us = Some(1_210_000);
        split_request(&mut b, 2_000_000, 208_000, false);
        split_request(&mut b, 3_000_000, 209_000, false);
        let t = Timeline {
            connections: vec![b.conn.clone()],
            exchanges: vec![],
        };
        assert!(detect(&t).is_empty());
        // The same path with the receiver's 40 ms on top of it is one.
        let mut b = ConnBuilder::new(1, 40000);
        b.conn.established_at_us = Some(1_210_000);
        split_request(&mut b, 2_000_000, 250_000, false);
        let t = b.timeline();
        assert_eq!(detect(&t).len(), 1);
    }

    #[test]
    fn ignores_quick_acks_piggybacked_acks_and_think_time() {
        for (ack_after, piggy) in [(200, false), (40_000, true)] {
            let mut b = ConnBuilder::new(1, 40000);
            split_request(&mut b, 2_000_000, ack_after, piggy);
            assert!(detect(&b.timeline()).is_empty());
        }
        // The client paused a second between segments: the ACK came at 40 ms,
        // but the second segment did not follow it, so it was not held by Nagle.
        let mut b = ConnBuilder::new(1, 40000);
        b.data(ToServer, 1_000_000, 100);
        b.ack(ToClient, 1_040_000, 65535, false);
        b.data(ToServer, 2_000_000, 100);
        assert!(detect(&b.timeline()).is_empty());
    }
}
