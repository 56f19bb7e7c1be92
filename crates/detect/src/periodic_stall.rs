//! `periodic_stall`: a backing service whose latency has a rare, huge tail —
//! a few calls at ≥ 10× its median — that hits the requests in flight at
//! that moment (case 003's tax service, blocking for seconds now and then).
//! The median hides it, so the finding quotes p50, p99 and max, the share of
//! inbound requests hit, and the period when the stalls keep one.

use crate::intervals::merged_spans;
use crate::request_calls::{median, Call, RequestCalls};
use crate::request_findings::{self, Hit};
use crate::thresholds::SLOW_PART_US;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use whyslow_model::stats::percentile;
use whyslow_model::{fmt_ms, Facts, Finding, FindingKind, Population, Protocol, Severity, Subject};

/// Calls to a server needed before its tail can be told from its body.
pub const MIN_CALLS: usize = 20;
/// A stalled call takes at least this many times the server's median
/// (the "≥ 10×"; a p99/p50 ratio of 10 is where latency-tail
/// literature — Dean & Barroso, "The Tail at Scale" — starts to worry).
pub const STALL_FACTOR: u64 = 10;
/// …and at least this long: below it a tail is jitter nobody feels.
pub const MIN_STALL_US: u64 = SLOW_PART_US;
/// A tail is rare: at most one stall per 10 calls. A stall counts once
/// however many calls queued behind it (they are its victims, and the
/// median stays low while fewer than half the calls are); more stalls are
/// the service's usual speed, slow_dependency's to name.
pub const RARE_SHARE: f64 = 0.10;
/// Stall intervals (or calls between stalls) within this share of their
/// median make a period.
pub const PERIOD_TOLERANCE: f64 = 0.25;
/// Stalls needed to speak of a period: three make two intervals to compare.
pub const MIN_STALLS_FOR_PERIOD: usize = 3;

/// One server's calls and their tail.
#[derive(Debug, Clone)]
pub(crate) struct Tail<'a> {
    pub server: SocketAddr,
    pub protocol: Protocol,
    pub calls: usize,
    pub p50_us: u64,
    pub p99_us: u64,
    pub max_us: u64,
    /// Stalled calls with the index of their request, by start.
    pub stalled: Vec<(usize, Call<'a>)>,
    /// Requests that called the server.
    pub requests: usize,
    /// Stalls: overlapping stalled calls, merged (start, end).
    pub stalls: Vec<(u64, u64)>,
    /// Median time and calls from one stall's start to the next, when regular.
    pub period: Option<(u64, usize)>,
}

/// Each server called often enough to tell its tail from its body, with
/// the calls its tail holds (none, or too many to be rare, included). DNS
/// is left out: a rare lookup that takes a client's timeout is a query lost
/// (`dns_timeout`).
fn measured<'a>(requests: &[RequestCalls<'a>]) -> Vec<Tail<'a>> {
    let mut per_server: BTreeMap<SocketAddr, Vec<(usize, Call<'a>)>> = BTreeMap::new();
    for (i, r) in requests.iter().enumerate() {
        for c in r.calls.iter().filter(|c| c.protocol() != Protocol::Dns) {
            per_server.entry(c.server).or_default().push((i, *c));
        }
    }
    per_server
        .into_iter()
        .filter_map(|(server, calls)| tail(server, calls))
        .collect()
}

/// `stalls` among `calls`, as a rare tail is judged: at most `RARE_SHARE`
/// of them, among `MIN_CALLS` at least.
fn rare(stalls: usize, calls: usize) -> Population {
    Population {
        min_of: MIN_CALLS as u64,
        at_most: RARE_SHARE,
        ..Population::share_of(stalls, calls, 0.0)
    }
}

fn tail<'a>(server: SocketAddr, mut calls: Vec<(usize, Call<'a>)>) -> Option<Tail<'a>> {
    if calls.len() < MIN_CALLS {
        return None;
    }
    calls.sort_by_key(|(_, c)| c.start);
    let mut d: Vec<u64> = calls.iter().map(|(_, c)| c.duration_us()).collect();
    d.sort_unstable();
    let p50 = percentile(&d, 0.5);
    let floor = (p50 * STALL_FACTOR).max(MIN_STALL_US);
    let stalled: Vec<(usize, Call)> = calls
        .iter()
        .filter(|(_, c)| c.duration_us() >= floor)
        .copied()
        .collect();
    let stalls = merged_spans(stalled.iter().map(|(_, c)| (c.start, c.end)));
    let mut requests: Vec<usize> = calls.iter().map(|(i, _)| *i).collect();
    requests.sort_unstable();
    requests.dedup();
    Some(Tail {
        server,
        protocol: calls[0].1.protocol(),
        calls: calls.len(),
        p50_us: p50,
        p99_us: percentile(&d, 0.99),
        max_us: d[d.len() - 1],
        period: period(&stalls, &calls),
        stalled,
        requests: requests.len(),
        stalls,
    })
}

/// Median interval and median calls between stall starts (`calls` by
/// start), when every
/// interval is within PERIOD_TOLERANCE of the median.
fn period(stalls: &[(u64, u64)], calls: &[(usize, Call)]) -> Option<(u64, usize)> {
    if stalls.len() < MIN_STALLS_FOR_PERIOD {
        return None;
    }
    let gaps: Vec<u64> = stalls.windows(2).map(|w| w[1].0 - w[0].0).collect();
    // `calls` are by start: calls before each stall's start, by binary search.
    let before = |at: u64| calls.partition_point(|(_, c)| c.start < at) as u64;
    let between: Vec<u64> = stalls
        .windows(2)
        .map(|w| before(w[1].0) - before(w[0].0))
        .collect();
    let regular = |v: &[u64]| {
        let m = median(v.to_vec()) as f64;
        v.iter()
            .all(|&x| (x as f64 - m).abs() <= PERIOD_TOLERANCE * m)
            .then_some(m as u64)
    };
    Some((regular(&gaps)?, regular(&between)? as usize))
}

/// What to change.
const FIX: &str = "find what the service does every so often (GC pause, lock, cache refresh, \
     log rotation); take it off the request path: load what it answers once and \
     refresh it in the background, or call it with a timeout and a fallback";

/// One finding per server with a huge tail, and a tally per server
/// without: whether the tail is rare is judged once, over the capture's
/// calls (`rare`).
pub fn detect(requests: &[RequestCalls]) -> Vec<Finding> {
    measured(requests)
        .iter()
        .map(|t| match t.stalls.len() {
            0 => Finding::tally(
                FindingKind::PeriodicStall,
                Subject::server(t.server),
                rare(0, t.calls),
            ),
            _ => finding(requests, t),
        })
        .collect()
}

/// A server named for stalling now and then is not also named for its
/// usual speed: the requests a stall held are its victims. Judged over the
/// capture's findings (`MergedFindings::finish`), as the stall is.
pub fn not_slow_where_stalling(findings: &mut Vec<Finding>) {
    let stalling: Vec<Subject> = findings
        .iter()
        .filter(|f| f.kind == FindingKind::PeriodicStall)
        .map(|f| f.subject.clone())
        .collect();
    findings.retain(|f| f.kind != FindingKind::SlowDependency || !stalling.contains(&f.subject));
}

fn finding(requests: &[RequestCalls], t: &Tail) -> Finding {
    let mut lost: BTreeMap<usize, (u64, usize)> = BTreeMap::new();
    for (i, c) in &t.stalled {
        let e = lost.entry(*i).or_default();
        e.0 += c.duration_us() - t.p50_us;
        e.1 += 1;
    }
    let mut hits: Vec<Hit<()>> = Vec::new();
    for (i, (us, n)) in lost {
        let r = &requests[i];
        let us = us.min(r.total_us());
        request_findings::push(&mut hits, us, (), |_| {
            r.inbound_evidence(
                format!(
                    "{n} call(s) to {} stalled: {} over the usual, of {} in all",
                    t.server,
                    fmt_ms(us),
                    fmt_ms(r.total_us())
                ),
                Facts::default()
                    .with("calls", n as f64)
                    .with("over_usual_us", us as f64)
                    .with("request_us", r.total_us() as f64),
            )
        });
    }
    let hit_share = 100.0 * hits.len() as f64 / t.requests as f64;
    let every = match t.period {
        Some((us, calls)) => format!(
            "; stalls come about every {} (every {calls} calls)",
            fmt_ms(us)
        ),
        None => String::new(),
    };
    let per_stall = stall_lengths(t);
    let summary = |hits: &[Hit<()>], per, facts: &mut Facts| {
        let each = median(per_stall.clone());
        for (name, v) in [
            ("stalls", t.stalls.len() as f64),
            ("stall_us", each as f64),
            ("stalled_calls", t.stalled.len() as f64),
            ("calls", t.calls as f64),
            ("stall_factor", STALL_FACTOR as f64),
            ("p50_us", t.p50_us as f64),
            ("p99_us", t.p99_us as f64),
            ("max_us", t.max_us as f64),
            ("requests", t.requests as f64),
            ("hit_share", hit_share / 100.0),
        ] {
            facts.set(name, v);
        }
        if let Some((us, calls)) = t.period {
            facts.set("period_us", us as f64);
            facts.set("period_calls", calls as f64);
        }
        format!(
            "{} ({}) stalls now and then: {} stalls of {} each, {} of {} calls took ≥ \
             {STALL_FACTOR}× its median (p50 {}, p99 {}, max {}); {} of {} requests were hit \
             ({hit_share:.0} %), losing {} each{every}",
            t.server,
            t.protocol.name(),
            t.stalls.len(),
            fmt_ms(each),
            t.stalled.len(),
            t.calls,
            fmt_ms(t.p50_us),
            fmt_ms(t.p99_us),
            fmt_ms(t.max_us),
            hits.len(),
            t.requests,
            fmt_ms(per),
        )
    };
    // An occurrence is one stall, and what it cost is how long the service
    // was blocked; time_lost sums what every request hit lost.
    let mut f = request_findings::finding(
        FindingKind::PeriodicStall,
        Severity::Warning,
        hits,
        summary,
        FIX,
    );
    f.occurrences = t.stalls.len() as u32;
    f.time_lost_per_occurrence_us = median(per_stall);
    f.subject = Subject::server(t.server);
    f.population = Some(rare(t.stalls.len(), t.calls));
    f
}

/// Each stall's length over the usual: its longest call (the one that
/// blocked; the others queued behind it) minus the median.
fn stall_lengths(t: &Tail) -> Vec<u64> {
    t.stalls
        .iter()
        .map(|&(from, to)| {
            let longest = t
                .stalled
                .iter()
                .filter(|(_, c)| c.start >= from && c.start < to)
                .map(|(_, c)| c.duration_us())
                .max()
                .unwrap_or(0);
            longest.saturating_sub(t.p50_us)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    crate::testkit::detect_on_requests!();
    use crate::request_calls::by_request;
    use crate::request_calls::tests::call;
    use crate::testkit::{exchange, servers};
    use whyslow_model::Timeline;

    /// `n` requests 100 ms apart, each with one 1 ms call; every `every`th
    /// call takes `stall_us` instead.
    fn stalling(n: u32, every: u32, stall_us: u64) -> Timeline {
        let mut exchanges = Vec::new();
        for i in 0..n {
            let at = i as u64 * 100_000;
            let d = if i % every == every - 1 {
                stall_us
            } else {
                1_000
            };
            exchanges.push(exchange(
                2 * i,
                0,
                (at, at + 10),
                (at + d + 500, at + d + 600),
            ));
            exchanges.push(call(2 * i + 1, 1, 2 * i, (at + 200, at + 200 + d)));
        }
        servers(&[8080, 9100]).with(exchanges)
    }

    #[test]
    fn a_rare_huge_tail_is_named_with_its_percentiles_share_and_period() {
        let t = stalling(40, 10, 300_000);
        let f = detect(&t);
        assert_eq!(f.len(), 1, "{f:?}");
        let s = &f[0].summary;
        assert!(s.contains("4 stalls of 299 ms each, 4 of 40 calls"), "{s}");
        assert!(s.contains("p50 1.00 ms") && s.contains("max 300 ms"), "{s}");
        assert!(s.contains("4 of 40 requests were hit (10 %)"), "{s}");
        assert!(
            s.contains("about every 1.00 s") || s.contains("about every 1000 ms"),
            "{s}"
        );
        assert!(s.contains("every 10 calls"), "{s}");
        assert_eq!(f[0].occurrences, 4);
        assert_eq!(f[0].time_lost_per_occurrence_us, 300_000 - 1_000);
    }

    #[test]
    fn calls_queued_behind_a_stall_count_as_its_victims_not_as_more_stalls() {
        // A call every 50 ms; every 20th blocks the service for 300 ms and
        // the calls arriving meanwhile finish when it does.
        let mut exchanges = Vec::new();
        let mut stall_end = 0;
        for i in 0..100u32 {
            let at = i as u64 * 50_000 + 200;
            let end = if i % 20 == 19 {
                stall_end = at + 300_000;
                stall_end
            } else if at < stall_end {
                stall_end
            } else {
                at + 1_000
            };
            exchanges.push(exchange(
                2 * i,
                0,
                (at - 200, at - 190),
                (end + 500, end + 600),
            ));
            exchanges.push(call(2 * i + 1, 1, 2 * i, (at, end)));
        }
        let t = servers(&[8080, 9100]).with(exchanges);
        let f = detect(&t);
        assert_eq!(f.len(), 1, "{f:?}");
        let s = &f[0].summary;
        // Per stall: the blocking call and the 4 waiting ≥ 100 ms behind
        // it (none behind the last one).
        assert!(
            s.contains("21 of 100 calls") && s.contains("every 20 calls"),
            "{s}"
        );
        assert_eq!(f[0].occurrences, 5, "one per stall");
        assert_eq!(
            f[0].time_lost_per_occurrence_us, 299_000,
            "the blocking call's"
        );
        let victims = 250 + 200 + 150 + 100;
        assert_eq!(f[0].time_lost_us, 5 * 299_000 + 4 * (victims - 4) * 1000);
    }

    #[test]
    fn irregular_stalls_have_no_period() {
        let mut t = stalling(40, 10, 300_000);
        // Move the third stall's request 3 s later.
        for e in t
            .exchanges
            .iter_mut()
            .filter(|e| e.id == 2 * 29 || e.id == 2 * 29 + 1)
        {
            e.request_first_at_us += 3_000_000;
            e.request_last_at_us += 3_000_000;
            e.response_first_at_us = e.response_first_at_us.map(|x| x + 3_000_000);
            e.response_last_at_us = e.response_last_at_us.map(|x| x + 3_000_000);
        }
        let f = detect(&t);
        assert_eq!(f.len(), 1);
        assert!(!f[0].summary.contains("every"), "{}", f[0].summary);
    }

    #[test]
    fn whether_a_tail_is_rare_is_judged_over_the_capture() {
        let window = |t: &Timeline| super::detect(&by_request(t));
        let named = |m: crate::merge::MergedFindings| {
            let f = m.finish();
            let stall = f.iter().find(|f| f.kind == FindingKind::PeriodicStall);
            stall.map(|f| f.occurrences)
        };
        // 4 stalls of 20 calls are no rare tail alone; with 60 quick calls
        // after them, 4 of 80 are.
        let mut m = crate::merge::MergedFindings::default();
        m.add(window(&stalling(20, 5, 300_000)));
        m.add(window(&stalling(60, 1_000, 300_000)));
        assert_eq!(named(m), Some(4));
        // 4 of 40 are rare alone; with 4 more of 20 after them, 8 of 60 are not.
        let mut m = crate::merge::MergedFindings::default();
        m.add(window(&stalling(40, 10, 300_000)));
        m.add(window(&stalling(20, 5, 300_000)));
        assert_eq!(named(m), None);
    }

    #[test]
    fn a_tail_rare_in_one_window_but_not_over_the_capture_is_the_service_speed() {
        let window = |t: &Timeline| {
            let requests = by_request(t);
            let mut f = super::detect(&requests);
            f.extend(crate::slow_dependency::detect(&requests));
            f
        };
        // 4 stalls of 40 calls look rare alone; 5 of 20 after them make 9
        // of 60, the server's usual speed: every stalled request counts.
        let mut m = crate::merge::MergedFindings::default();
        m.add(window(&stalling(40, 10, 300_000)));
        m.add(window(&stalling(20, 4, 300_000)));
        let kinds = |m: crate::merge::MergedFindings| -> Vec<_> {
            m.finish().iter().map(|f| (f.kind, f.occurrences)).collect()
        };
        assert_eq!(kinds(m), vec![(FindingKind::SlowDependency, 9)]);
        // 4 of 40 alone are rare: the stall is named, and not the requests
        // it held (4 of 40 would name slow_dependency on their own).
        let mut m = crate::merge::MergedFindings::default();
        m.add(window(&stalling(40, 10, 300_000)));
        assert_eq!(kinds(m), vec![(FindingKind::PeriodicStall, 4)]);
    }

    #[test]
    fn a_common_tail_is_the_service_speed_not_a_stall() {
        assert!(detect(&stalling(40, 5, 300_000)).is_empty());
    }

    #[test]
    fn too_few_calls_or_a_short_tail_say_nothing() {
        assert!(detect(&stalling(19, 10, 300_000)).is_empty());
        // 50× the median but under 100 ms: jitter.
        assert!(detect(&stalling(40, 10, 50_000)).is_empty());
    }
}
