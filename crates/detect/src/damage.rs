//! A capture too damaged to judge: where the capture lost most of a
//! connection's bytes (tcpdump behind large writes, a ring buffer that
//! overran), the requests that crossed those gaps are not seen whole. Their
//! missing calls read as the service's own time, their missing answers as
//! waits, and the nesting that shows which server is the service may be
//! gone. Causes about a request's whole duration are then withheld and the
//! report says what the loss prevented, rather than naming what the loss
//! made up: 72 % of one cache connection's bytes lost, whyslow once named
//! `server_time` for requests whose calls it could no longer see.

use whyslow_model::{CaptureGaps, Facts, Finding, FindingKind, Skipped};

/// Share of one connection's bytes lost past which the capture is judged
/// too damaged for causes about whole requests: past half, what is missing
/// outweighs what is there, and every request that used the connection lost
/// part of itself (orm-storm with 70 % of its database packets removed: 216
/// of each request's 239 ms read as the service's own).
pub const DAMAGED_SHARE: f64 = 0.5;

/// Causes that rest on seeing a request whole: its own time, its slow or
/// stalling dependencies, its answer's size.
pub const WHOLE_REQUEST_KINDS: [FindingKind; 4] = [
    FindingKind::ServerTime,
    FindingKind::SlowDependency,
    FindingKind::PeriodicStall,
    FindingKind::LargeResponse,
];

/// The connection that lost the most of its bytes, past `DAMAGED_SHARE`:
/// (client → server, share lost, bytes lost).
pub fn worst(gaps: &CaptureGaps) -> Option<(String, f64, u64)> {
    gaps.worst
        .iter()
        .filter(|c| c.lost_share() >= DAMAGED_SHARE)
        .max_by(|a, b| a.lost_share().total_cmp(&b.lost_share()))
        .map(|c| {
            (
                format!("{} → {}", c.client, c.server),
                c.lost_share(),
                c.bytes(),
            )
        })
}

/// Withholds from `findings` the causes about whole requests when the
/// capture lost most of a connection's bytes, and says so: one entry for
/// what was withheld (or could not be judged), one more when no service
/// was found, since the calls that would show it may be in the gaps.
pub fn withhold(
    gaps: &CaptureGaps,
    service_found: bool,
    findings: &mut Vec<Finding>,
) -> Vec<Skipped> {
    let Some((connection, share, bytes)) = worst(gaps) else {
        return Vec::new();
    };
    let facts = Facts::default()
        .with("lost_share", share)
        .with("lost_bytes", bytes as f64);
    let lost = format!(
        "the capture lost {:.0} % of the bytes of {connection} ({bytes} bytes)",
        share * 100.0
    );
    let before = findings.len();
    findings.retain(|f| !WHOLE_REQUEST_KINDS.contains(&f.kind));
    let mut out = vec![Skipped {
        what: WHOLE_REQUEST_KINDS.map(FindingKind::as_str).join(", "),
        why: format!(
            "{lost}: the requests across its gaps are not seen whole, so their own time, \
             waits and answers are not known{}; the time breakdown's share \"in the service \
             itself\" holds the calls that were lost; capture again with a larger buffer \
             (tcpdump -B, a snapshot length that keeps headers only)",
            if findings.len() < before {
                " (a finding about them withheld)"
            } else {
                ""
            }
        ),
        facts: facts.clone(),
    }];
    if !service_found {
        out.push(Skipped {
            what: "service".into(),
            why: format!(
                "{lost}: no server's requests were seen to enclose another's calls, and the \
                 calls that would show it may be in the gaps; give it with --service PORT"
            ),
            facts,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use whyslow_model::{ConnectionGaps, Severity};

    fn gaps(lost: u64, seen: u64) -> CaptureGaps {
        let mut g = CaptureGaps {
            gaps: 10,
            bytes: lost,
            connections: 1,
            ..CaptureGaps::default()
        };
        g.add(ConnectionGaps {
            client: "127.0.0.1:5000".into(),
            server: "127.0.0.1:5432".into(),
            gaps: 10,
            to_server_bytes: lost / 4,
            to_client_bytes: lost - lost / 4,
            seen_bytes: seen,
        });
        g
    }

    fn finding(kind: FindingKind) -> Finding {
        Finding::new(kind, Severity::Warning, "s".into(), "fix")
    }

    #[test]
    fn most_of_a_connection_lost_withholds_causes_about_whole_requests() {
        let mut found = vec![
            finding(FindingKind::ServerTime),
            finding(FindingKind::NPlusOne),
            finding(FindingKind::SlowDependency),
        ];
        let said = withhold(&gaps(7_000, 3_000), true, &mut found);
        let kinds: Vec<_> = found.iter().map(|f| f.kind).collect();
        assert_eq!(kinds, vec![FindingKind::NPlusOne]);
        assert_eq!(said.len(), 1);
        assert!(said[0].why.contains("lost 70 %"), "{}", said[0].why);
        assert!(said[0].why.contains("withheld"), "{}", said[0].why);
        assert_eq!(said[0].facts.get("lost_share"), 0.7);
        // No service found: the loss may have hidden it, and it is said.
        let said = withhold(&gaps(7_000, 3_000), false, &mut Vec::new());
        assert_eq!(said.len(), 2);
        assert_eq!(said[1].what, "service");
    }

    #[test]
    fn a_connection_that_lost_less_than_half_keeps_every_finding() {
        let mut found = vec![finding(FindingKind::ServerTime)];
        assert!(withhold(&gaps(4_000, 6_000), false, &mut found).is_empty());
        assert_eq!(found.len(), 1);
        assert!(withhold(&CaptureGaps::default(), true, &mut found).is_empty());
    }
}
