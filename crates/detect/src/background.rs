//! Findings that no inbound request waited for are background: a stall on a
//! backing connection between requests (a cache refresh, a health check) or
//! on a writer connection whose writes no request waits for is reported, but
//! never ranked as the cause of the requests' time.

use crate::critical_path::WaitedSpans;
use std::collections::HashSet;
use whyslow_model::{Evidence, ExchangeRole, Finding, Timeline};

/// Marks `background` on findings whose evidence lies wholly on connections
/// to other servers than `service_ports`, where no inbound request waited: outside
/// the calls requests waited for (and what queued ahead of them) on
/// connections whose exchanges were seen, outside every inbound request on
/// the others.
pub fn mark(findings: &mut [Finding], t: &Timeline, service_ports: &[u16]) {
    let service_conns: HashSet<u32> = t
        .connections
        .iter()
        .filter(|c| service_ports.contains(&c.server.port()))
        .map(|c| c.id)
        .collect();
    let mut spans: Vec<(u64, u64)> = t
        .exchanges
        .iter()
        .filter(|e| e.role == ExchangeRole::Inbound && service_conns.contains(&e.connection))
        .map(|e| {
            (
                e.request_first_at_us,
                e.response_last_at_us.unwrap_or(u64::MAX),
            )
        })
        .collect();
    spans.sort_unstable();
    // Latest end among spans[..=i]: "is `at` inside any span" in one search.
    let reach: Vec<u64> = spans
        .iter()
        .scan(0, |max, s| {
            *max = s.1.max(*max);
            Some(*max)
        })
        .collect();
    let inside = |at: u64| {
        let i = spans.partition_point(|s| s.0 <= at);
        i > 0 && reach[i - 1] >= at
    };
    let waited = WaitedSpans::new(t);
    let waited_at = |conn: u32, at: u64| {
        if waited.knows(conn) {
            waited.waiting_at(conn, at)
        } else {
            inside(at)
        }
    };
    for f in findings.iter_mut() {
        let waited_for = f.evidence.iter().any(|e| match e {
            Evidence::Packets {
                connection, at_us, ..
            } => service_conns.contains(connection) || waited_at(*connection, *at_us),
            Evidence::Connection { id, .. } => service_conns.contains(id) || waited.any_on(*id),
            _ => true,
        });
        f.background = !f.evidence.is_empty() && !waited_for;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::testkit::{exchange, servers};
    use whyslow_model::{FindingKind, Severity};

    fn stall_at(connection: u32, at_us: u64) -> Finding {
        Finding {
            time_lost_us: 40_000,
            time_lost_per_occurrence_us: 40_000,
            occurrences: 1,
            evidence: vec![Evidence::Packets {
                facts: Default::default(),
                connection,
                packets: vec![1, 2, 3],
                at_us,
                note: String::new(),
            }],
            ..Finding::new(
                FindingKind::NagleDelayedAck,
                Severity::Critical,
                String::new(),
                "",
            )
        }
    }

    #[test]
    fn stalls_outside_every_request_on_backing_connections_are_background() {
        let t = servers(&[8080, 6379]).with(vec![exchange(0, 0, (1_000, 1_100), (5_000, 5_100))]);
        let mut f = vec![stall_at(1, 2_000), stall_at(1, 9_000), stall_at(0, 9_000)];
        mark(&mut f, &t, &[8080]);
        let bg: Vec<bool> = f.iter().map(|f| f.background).collect();
        assert_eq!(bg, vec![false, true, false]);
    }

    #[test]
    fn stalls_on_a_writer_no_request_waits_for_are_background() {
        // Request 0 (1 000 → 3 000) reads on connection 1; an asynchronous
        // write on connection 2 outlives it, so attribution gave it no parent.
        let mut read = exchange(1, 1, (1_200, 1_210), (1_400, 1_500));
        read.role = ExchangeRole::Outbound;
        read.parent = Some(0);
        let mut write = exchange(2, 2, (1_100, 2_900), (4_000, 4_100));
        write.role = ExchangeRole::Outbound;
        let t = servers(&[8080, 6379, 6379]).with(vec![
            exchange(0, 0, (1_000, 1_000), (3_000, 3_100)),
            read,
            write,
        ]);
        let mut f = vec![stall_at(2, 2_000), stall_at(1, 1_300)];
        mark(&mut f, &t, &[8080]);
        let bg: Vec<bool> = f.iter().map(|f| f.background).collect();
        assert_eq!(bg, vec![true, false]);
    }
}
