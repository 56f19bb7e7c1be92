//! `dns_per_call`: a service that resolves a name on every request (or
//! before every call): its lookups are part of each request's time where a
//! cache — the client's, the process's or a resolver on the host — would
//! answer in microseconds for as long as the answer's TTL. Python's
//! requests without a session, Node's `dns.lookup` on the libuv pool, and
//! glibc with no nscd all do it.
//!
//! Two readings, the first the wire allows: per request, when every lookup
//! made while requests waited was given to one (time lost: what its queries
//! covered, the median request's); else counted over the capture, when
//! concurrent requests leave lookups ambiguous (a stub resolver's socket
//! per query ties it to nothing): queries per request and their mean time,
//! from every query made while a request of the service waited.

use crate::dns_lookups::PARTNER_US;
use crate::intervals::covered_us;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use whyslow_model::{
    fmt_ms, stats, Evidence, Exchange, ExchangeRole, Facts, Finding, FindingKind, Protocol,
    Severity, Status, Subject, Timeline,
};

/// Requests that must have looked names up: a lookup on a few requests is
/// a cache expiring (its TTL), not a missing cache.
const MIN_SHARE: f64 = 0.8;
/// Requests before it is a pattern.
const MIN_REQUESTS: usize = 3;
/// Evidence requests listed.
const EVIDENCE: usize = 5;

const FIX: &str = "cache lookups: keep the answer for its TTL in the client (a connection \
                   pool or session that keeps connections open resolves once per connection), \
                   or run a caching resolver on the host (nscd, systemd-resolved, a node-local \
                   DNS cache in Kubernetes)";

/// An answer with an address ends a lookup.
fn ends_lookup(e: &Exchange) -> bool {
    matches!(&e.status, Some(Status::Dns(s)) if s.starts_with("NOERROR")) && e.rows.unwrap_or(0) > 0
}

fn question_name(e: &Exchange) -> &str {
    question_name_of(&e.request)
}

/// "api.internal" of "A api.internal".
fn question_name_of(request: &str) -> &str {
    request.split_once(' ').map_or("", |(_, n)| n)
}

pub fn detect(t: &Timeline) -> Vec<Finding> {
    // The lookups first: most windows have none, and then no request is
    // gathered.
    let dns: Vec<&Exchange> = t
        .exchanges
        .iter()
        .filter(|e| e.role == ExchangeRole::Outbound && e.protocol == Protocol::Dns)
        .collect();
    if dns.is_empty() {
        return Vec::new();
    }
    let requests: Vec<&Exchange> = t
        .exchanges
        .iter()
        .filter(|e| e.role == ExchangeRole::Inbound && e.response_last_at_us.is_some())
        .collect();
    if requests.len() < MIN_REQUESTS {
        return Vec::new();
    }
    // Queries made while a request of the service waited.
    let mut waits: Vec<(u64, u64)> = requests
        .iter()
        .map(|r| (r.request_first_at_us, r.end_us()))
        .collect();
    waits.sort_unstable();
    // The latest end among the waits begun so far: waits overlap.
    let mut reach = Vec::with_capacity(waits.len());
    for w in &waits {
        reach.push(w.1.max(reach.last().copied().unwrap_or(0)));
    }
    let inside = |at: u64| {
        let i = waits.partition_point(|w| w.0 <= at);
        i > 0 && reach[i - 1] >= at
    };
    let during: Vec<&Exchange> = dns
        .iter()
        .copied()
        .filter(|q| inside(q.request_first_at_us))
        .collect();
    if during.is_empty() {
        return Vec::new();
    }
    let names: BTreeSet<&str> = during
        .iter()
        .filter(|q| ends_lookup(q))
        .map(|q| question_name(q))
        .collect();
    let names = names.into_iter().collect::<Vec<_>>().join(", ");
    let finding = match during.iter().all(|q| q.parent.is_some()) {
        true => per_request(&requests, &during, &names),
        false => counted(&requests, &during, &names),
    };
    finding.into_iter().collect()
}

/// Every lookup given to its request: each request's own.
fn per_request(requests: &[&Exchange], during: &[&Exchange], names: &str) -> Option<Finding> {
    let mut by_request: HashMap<u32, Vec<&Exchange>> = HashMap::new();
    for q in during {
        by_request
            .entry(q.parent.unwrap_or(u32::MAX))
            .or_default()
            .push(q);
    }
    let mut hits: Vec<(&Exchange, u64, u64, u64)> = Vec::new();
    for r in requests {
        let Some(qs) = by_request.get(&r.id) else {
            continue;
        };
        let window = (r.request_first_at_us, r.end_us());
        let lost = covered_us(lookups(qs).into_iter(), window);
        let lookups = qs.iter().filter(|q| ends_lookup(q)).count() as u64;
        hits.push((r, lost, qs.len() as u64, lookups));
    }
    if hits.len() < MIN_REQUESTS || (hits.len() as f64) < MIN_SHARE * requests.len() as f64 {
        return None;
    }
    let median =
        |f: fn(&(&Exchange, u64, u64, u64)) -> u64| stats::median(hits.iter().map(f).collect());
    let (per, queries, lookups) = (median(|h| h.1), median(|h| h.2), median(|h| h.3));
    let summary = format!(
        "the service resolved {names} on {} of {} requests: {lookups} lookup(s) ({queries} DNS \
         queries) per request, {} per request (median)",
        hits.len(),
        requests.len(),
        fmt_ms(per)
    );
    let evidence = hits
        .iter()
        .take(EVIDENCE)
        .map(|(r, lost, q, l)| Evidence::Exchange {
            id: r.id,
            request: r.request.to_string(),
            note: format!(
                "{q} DNS queries ({l} answered with an address), {} of lookups",
                fmt_ms(*lost)
            ),
            facts: Facts::default()
                .with("queries", *q as f64)
                .with("answered", *l as f64)
                .with("lost_us", *lost as f64),
        })
        .collect();
    Some(Finding {
        facts: Facts::default()
            .with("lookups_per_request", lookups as f64)
            .with("queries_per_request", queries as f64)
            .with("requests_hit", hits.len() as f64)
            .with("requests", requests.len() as f64),
        time_lost_us: hits.iter().map(|h| h.1).sum(),
        time_lost_per_occurrence_us: per,
        occurrences: hits.len() as u32,
        evidence,
        subject: Subject::what(names.to_string()),
        ..Finding::new(FindingKind::DnsPerCall, Severity::Warning, summary, FIX)
    })
}

/// One request's lookups: from each lookup's first query to the answer
/// that ended it (an address), the client's own work between its queries
/// included (the search walk's next name, a retry after a timeout).
fn lookups(qs: &[&Exchange]) -> Vec<(u64, u64)> {
    let mut sorted: Vec<&Exchange> = qs.to_vec();
    sorted.sort_by_key(|q| q.request_first_at_us);
    let mut out: Vec<(u64, u64)> = Vec::new();
    let mut open: Option<(u64, u64)> = None;
    // The question that ended the last lookup.
    let mut ended: Option<&str> = None;
    for q in sorted {
        let (start, end) = (q.request_first_at_us, q.end_us());
        // The other type of the name that ended the last lookup, sent with
        // it or just after its answer (glibc asks A and AAAA together, or
        // one after the other): part of that lookup.
        if let (None, Some(last), Some(question)) = (open, out.last_mut(), ended) {
            let partner = question_name(q) == question_name_of(question) && q.request != question;
            if partner && start <= last.1.saturating_add(PARTNER_US) {
                last.1 = last.1.max(end);
                continue;
            }
        }
        let span = open.get_or_insert((start, end));
        span.1 = span.1.max(end);
        if ends_lookup(q) {
            out.extend(open.take());
            ended = Some(q.request.as_str());
        }
    }
    out.extend(open);
    out
}

/// The time lookups kept their callers waiting, summed: per socket (a
/// stub resolver asks each name of a walk on a socket of its own, A and
/// AAAA together), from its first query to its last answer, a query left
/// unanswered waiting until it was asked again; a socket reused for later
/// lookups (a gap past `PARTNER_US`) counts each stretch apart.
fn socket_time(qs: &[&Exchange]) -> u64 {
    let mut by_socket: HashMap<u32, Vec<&Exchange>> = HashMap::new();
    for q in qs {
        by_socket.entry(q.connection).or_default().push(q);
    }
    let mut total = 0;
    for (_, mut qs) in by_socket {
        qs.sort_by_key(|q| q.request_first_at_us);
        let mut stretch: Option<(u64, u64)> = None;
        for (i, q) in qs.iter().enumerate() {
            let start = q.request_first_at_us;
            // Unanswered: the caller waited until it asked again.
            let end = match (q.response_last_at_us, qs.get(i + 1)) {
                (Some(end), _) => end,
                (None, Some(next)) if next.request == q.request => next.request_first_at_us,
                (None, _) => q.request_last_at_us,
            };
            match &mut stretch {
                Some(s) if start <= s.1.saturating_add(PARTNER_US) => s.1 = s.1.max(end),
                _ => {
                    if let Some((a, b)) = stretch.replace((start, end)) {
                        total += b.saturating_sub(a);
                    }
                }
            }
        }
        if let Some((a, b)) = stretch {
            total += b.saturating_sub(a);
        }
    }
    total
}

/// Lookups not told apart: counted over the capture. Each request's
/// lookups run one after another, so their summed time over the requests
/// is the mean request's lookup time.
fn counted(requests: &[&Exchange], during: &[&Exchange], names: &str) -> Option<Finding> {
    let n = requests.len() as f64;
    let lookups = during.iter().filter(|q| ends_lookup(q)).count() as f64;
    if lookups < MIN_SHARE * n || requests.len() < MIN_REQUESTS {
        return None;
    }
    let total = socket_time(during);
    let mean = (total as f64 / n) as u64;
    let given = during.iter().filter(|q| q.parent.is_some()).count();
    let summary = format!(
        "the service resolved {names} {:.1} time(s) per request ({:.1} DNS queries per request), \
         {} per request (mean), counted over {} requests: {} of {} queries were not told apart \
         by request",
        lookups / n,
        during.len() as f64 / n,
        fmt_ms(mean),
        requests.len(),
        during.len() - given,
        during.len()
    );
    let mut by_resolver: BTreeMap<&str, usize> = BTreeMap::new();
    for q in during {
        *by_resolver.entry(q.request.as_str()).or_default() += 1;
    }
    let evidence = by_resolver
        .iter()
        .take(EVIDENCE)
        .map(|(question, count)| Evidence::Measurement {
            note: format!("{question}: {count} queries while requests waited"),
            facts: Facts::default().with("queries", *count as f64),
        })
        .collect();
    Some(Finding {
        facts: Facts::default()
            .with("lookups_per_request", lookups / n)
            .with("queries_per_request", during.len() as f64 / n)
            .with("queries", during.len() as f64)
            .with("not_told_apart", (during.len() - given) as f64),
        time_lost_us: total,
        time_lost_per_occurrence_us: mean,
        occurrences: requests.len() as u32,
        evidence,
        subject: Subject::what(names.to_string()),
        ..Finding::new(FindingKind::DnsPerCall, Severity::Warning, summary, FIX)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request_calls::tests::call;
    use crate::testkit::{exchange, servers};

    /// `requests` requests a second apart (or all at once when
    /// `concurrent`), each making `calls` HTTP calls, each after a lookup
    /// (one query of 2 ms) when `lookup(request)`; lookups given to their
    /// request unless `concurrent`.
    fn service(
        requests: u32,
        calls: u32,
        concurrent: bool,
        lookup: impl Fn(u32) -> bool,
    ) -> Timeline {
        let mut t = servers(&[8080, 9090, 53]).with(Vec::new());
        let mut id = 0;
        for r in 0..requests {
            let at = if concurrent {
                1_000_000
            } else {
                1_000_000 * u64::from(r + 1)
            };
            let inbound = id;
            let mut cursor = at + 100;
            let mut ex: Vec<Exchange> = Vec::new();
            for _ in 0..calls {
                if lookup(r) {
                    id += 1;
                    let mut q = call(id, 2, inbound, (cursor, cursor + 2_000));
                    q.protocol = Protocol::Dns;
                    q.request = "A api.internal".into();
                    q.status = Some(Status::Dns("NOERROR".into()));
                    q.rows = Some(1);
                    if concurrent {
                        // A socket per query, as a stub resolver opens.
                        q.connection = 1_000 + id;
                        q.parent = None;
                        q.attribution = Some(whyslow_model::Attribution::Ambiguous);
                    }
                    ex.push(q);
                    cursor += 2_000;
                }
                id += 1;
                ex.push(call(id, 1, inbound, (cursor, cursor + 1_000)));
                cursor += 1_000;
            }
            t.exchanges.push(exchange(
                inbound,
                0,
                (at, at + 50),
                (cursor + 100, cursor + 200),
            ));
            t.exchanges.extend(ex);
            id += 1;
        }
        t
    }

    #[test]
    fn a_lookup_before_every_call_is_named_with_its_time() {
        let f = detect(&service(5, 3, false, |_| true));
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(f[0].kind, FindingKind::DnsPerCall);
        assert_eq!(f[0].occurrences, 5);
        assert_eq!(f[0].time_lost_per_occurrence_us, 6_000);
        assert_eq!(f[0].facts.0["lookups_per_request"], 3.0);
        assert!(f[0].summary.contains("api.internal"), "{}", f[0].summary);
    }

    #[test]
    fn lookups_not_told_apart_are_counted_over_the_capture() {
        let f = detect(&service(8, 3, true, |_| true));
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(f[0].time_lost_per_occurrence_us, 6_000);
        assert_eq!(f[0].facts.0["lookups_per_request"], 3.0);
        assert!(f[0].summary.contains("not told apart"), "{}", f[0].summary);
    }

    #[test]
    fn lookups_on_a_few_requests_are_a_cache_expiring() {
        assert!(detect(&service(10, 3, false, |r| r % 5 == 0)).is_empty());
        assert!(detect(&service(10, 1, true, |r| r % 5 == 0)).is_empty());
        assert!(detect(&service(10, 3, false, |_| false)).is_empty());
    }
}
