//! A symptom never outranks its cause. A pool queue on a server where the
//! requests also run an N+1 is that N+1's doing: each request holds its
//! connection for all its statements, so the others wait for it. Fixing
//! the N+1 shortens the hold and the queue with it; a bigger pool would
//! only move the wait into the database. And a service's own time spent
//! mostly inside its N+1 loops — the ORM's work per row between one
//! statement and the next — is that N+1's too: one query removes the loop.

use crate::breakdown::parts;
use crate::intervals::{covered_us, merged_spans};
use crate::n_plus_one;
use crate::request_calls::{by_shape, median, RequestCalls};
use std::net::SocketAddr;
use whyslow_model::{fmt_ms, Finding, FindingKind};

/// Share of a service's own time its N+1 loops must take, in the median
/// request, for that time to be the N+1's symptom: then most of it goes
/// with the loop (an ORM's per-row work measured at 0.3–3 ms a row in a
/// threaded Python app, all of it between the loop's statements).
pub const LOOP_SHARE: f64 = 0.5;

/// An N+1 makes a pool queue only when at least this share of the
/// requests that queued ran it: under a full pool, one page in 32 whose
/// concurrent calls were sent one at a time looks like an N+1 on the
/// wire, and the queue every page waited in is not its doing.
pub const CAUSE_SHARE: f64 = 0.5;

/// Marks a service's own time that its N+1 loops spend, from one window's
/// requests (`clause` says so when the capture's sentences are told).
pub fn mark(findings: &mut [Finding], requests: &[RequestCalls]) {
    own_time_in_n_plus_one_loops(findings, requests);
}

/// Marks pool queues that an N+1 to the same server causes, from the
/// findings alone: once, over the capture's (`MergedFindings::finish`).
pub fn pools_behind_n_plus_one(findings: &mut [Finding]) {
    let n_plus_one: Vec<(Option<SocketAddr>, u32)> = findings
        .iter()
        .filter(|f| f.kind == FindingKind::NPlusOne)
        .map(|f| (f.subject.server_addr(), f.occurrences))
        .collect();
    for f in findings
        .iter_mut()
        .filter(|f| f.kind == FindingKind::PoolQueueing)
    {
        let server = f.subject.server_addr();
        let caused = n_plus_one.iter().any(|(s, n)| {
            s.is_some() && *s == server && *n as f64 >= CAUSE_SHARE * f.occurrences as f64
        });
        if caused && f.symptom_of.is_none() {
            f.symptom_of = Some(FindingKind::NPlusOne);
        }
    }
}

/// Marks a service's own time that its N+1 loops mostly spend.
fn own_time_in_n_plus_one_loops(findings: &mut [Finding], requests: &[RequestCalls]) {
    if !findings.iter().any(|f| f.kind == FindingKind::NPlusOne) {
        return;
    }
    for f in findings
        .iter_mut()
        .filter(|f| f.kind == FindingKind::ServerTime && f.symptom_of.is_none())
        .filter(|f| f.occurrences > 0)
    // not a tally: nothing to mark
    {
        let Some(service) = f.subject.server_addr() else {
            continue;
        };
        let (in_loops, own) = loop_time(requests, service);
        if own > 0 && in_loops as f64 >= LOOP_SHARE * own as f64 {
            f.symptom_of = Some(FindingKind::NPlusOne);
            f.facts.set("in_n_plus_one_loops_us", in_loops as f64);
        }
    }
}

/// What a finding's sentence adds when it is a symptom: which cause, and
/// why fixing that comes first. Empty for a cause.
pub fn clause(f: &Finding) -> String {
    match (f.symptom_of, f.kind) {
        (Some(FindingKind::NPlusOne), FindingKind::PoolQueueing) => {
            "; the N+1 above holds each connection for all its statements: fix it first".into()
        }
        (Some(FindingKind::NPlusOne), FindingKind::ServerTime) => format!(
            "; {} of it is the service's work inside its N+1 loops, between their statements: \
             fix the N+1 first",
            fmt_ms(f.facts.get("in_n_plus_one_loops_us") as u64)
        ),
        _ => String::new(),
    }
}

/// Over the told-apart requests `service` answered: the median time the
/// service spent in itself inside its N+1 loops (from a loop's first
/// statement to its last, less the calls it waited on there), and the
/// median of its own time.
fn loop_time(requests: &[RequestCalls], service: SocketAddr) -> (u64, u64) {
    let (mut in_loops, mut own) = (Vec::new(), Vec::new());
    for r in requests
        .iter()
        .filter(|r| r.told_apart() && r.server == service)
    {
        own.push(parts(r).server_us);
        let mut loops: Vec<(u64, u64)> = by_shape(&r.calls)
            .values()
            .filter(|calls| n_plus_one::storm(calls, r.total_us()).is_some())
            .map(|calls| {
                let first = calls.iter().map(|c| c.start).min().unwrap_or(0);
                let last = calls.iter().map(|c| c.end).max().unwrap_or(0);
                (first, last)
            })
            .collect();
        loops.sort_unstable();
        in_loops.push(
            merged_spans(loops)
                .into_iter()
                .map(|w| {
                    (w.1 - w.0)
                        .saturating_sub(covered_us(r.calls.iter().map(|c| (c.start, c.end)), w))
                })
                .sum(),
        );
    }
    (median(in_loops), median(own))
}

#[cfg(test)]
mod tests {
    use super::*;
    use whyslow_model::Severity;

    fn finding(kind: FindingKind, summary: &str, subject: &str, lost: u64) -> Finding {
        Finding {
            time_lost_us: lost,
            time_lost_per_occurrence_us: lost,
            occurrences: 1,
            evidence: Vec::new(),
            subject: subject.into(),
            ..Finding::new(kind, Severity::Critical, summary.into(), "")
        }
    }

    #[test]
    fn a_pool_queue_behind_an_n_plus_one_ranks_after_it() {
        let pool = "101 calls to 127.0.0.1:5432 waited for one of 8 connections: 148 ms";
        let mut f = vec![
            finding(FindingKind::PoolQueueing, pool, "127.0.0.1:5432", 200),
            finding(
                FindingKind::NPlusOne,
                "…",
                "127.0.0.1:5432 SELECT … $1",
                100,
            ),
            finding(
                FindingKind::PoolQueueing,
                "11 calls …",
                "127.0.0.1:9090",
                50,
            ),
        ];
        pools_behind_n_plus_one(&mut f);
        Finding::sort(&mut f);
        let kinds: Vec<FindingKind> = f.iter().map(|f| f.kind).collect();
        use FindingKind::*;
        assert_eq!(kinds, [NPlusOne, PoolQueueing, PoolQueueing]);
        assert_eq!(f[1].symptom_of, None, "another server's queue is a cause");
        assert_eq!(f[2].symptom_of, Some(NPlusOne));
        assert!(clause(&f[2]).ends_with("fix it first"));
        assert_eq!(clause(&f[1]), "");
    }

    #[test]
    fn an_n_plus_one_few_of_the_queued_requests_ran_is_not_the_queue_s_cause() {
        let pool = |queued| {
            let mut f = finding(FindingKind::PoolQueueing, "…", "127.0.0.1:9090", 200);
            f.occurrences = queued;
            f
        };
        let n_plus_one = finding(FindingKind::NPlusOne, "…", "127.0.0.1:9090 GET /data/?", 10);
        let mut f = vec![pool(32), n_plus_one.clone()];
        pools_behind_n_plus_one(&mut f);
        assert_eq!(f[0].symptom_of, None, "1 request of 32");
        let mut f = vec![pool(2), n_plus_one];
        pools_behind_n_plus_one(&mut f);
        assert_eq!(f[0].symptom_of, Some(FindingKind::NPlusOne), "1 of 2");
    }

    /// One request running an N+1 of 20 statements of 0.2 ms, `gap` µs
    /// apart, answered `after` µs past its last statement.
    fn orm_request(gap: u64, after: u64) -> whyslow_model::Timeline {
        let mut t = crate::n_plus_one::tests::statements(20, gap, |i| i as u64);
        for e in t.exchanges.iter_mut().skip(1) {
            e.response_first_at_us = Some(e.request_first_at_us + 190);
            e.response_last_at_us = Some(e.request_first_at_us + 200);
        }
        let last = t.exchanges.last().unwrap().response_last_at_us.unwrap();
        t.exchanges[0].response_first_at_us = Some(last + after);
        t.exchanges[0].response_last_at_us = Some(last + after + 100);
        t
    }

    fn ranked(t: &whyslow_model::Timeline) -> Vec<Finding> {
        crate::tests::ranked(t, &crate::request_calls::by_request(t))
    }

    #[test]
    fn own_time_spent_between_the_loops_statements_is_the_n_plus_ones() {
        // 10 ms of ORM work per row: 190 ms of the request's 195 ms own time.
        let f = ranked(&orm_request(10_000, 1_000));
        let kinds: Vec<FindingKind> = f.iter().map(|f| f.kind).collect();
        use FindingKind::*;
        assert_eq!(kinds.first(), Some(&NPlusOne), "{kinds:?}");
        let own = f
            .iter()
            .find(|f| f.kind == ServerTime)
            .expect("server_time");
        assert_eq!(own.symptom_of, Some(NPlusOne));
        assert!(
            own.summary.contains("inside its N+1 loops"),
            "{}",
            own.summary
        );
        // The time the text quotes is a fact of the JSON document too.
        let in_loops = own.facts.0["in_n_plus_one_loops_us"];
        assert!(in_loops > 0.0, "{in_loops}");
    }

    #[test]
    fn a_service_slow_in_its_own_code_with_few_calls_keeps_server_time_first() {
        // The same loop run tightly, then 2 s of the service's own work.
        let f = ranked(&orm_request(1_000, 2_000_000));
        let top = &f[0];
        assert_eq!(
            top.kind,
            FindingKind::ServerTime,
            "{:?}",
            f.iter().map(|f| f.kind).collect::<Vec<_>>()
        );
        assert_eq!(top.symptom_of, None);
        assert!(f.iter().any(|f| f.kind == FindingKind::NPlusOne));
    }
}
