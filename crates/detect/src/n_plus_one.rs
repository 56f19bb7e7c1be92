//! `n_plus_one`: one statement shape run again and again with different
//! parameters inside one inbound request — an ORM loading rows one at a
//! time (case 003: 137 selects in one payment request).
//!
//! Starts from Sentry's N+1 DB rule (≥ 5 sibling spans of one normalized
//! form, one after another) and departs from it in three ways: calls of the
//! shape need not be consecutive (lazy loads of two relations interleave,
//! which Sentry misses, its issue #49805); any protocol counts (SQL, Redis,
//! HTTP: Sentry has a separate N+1 API rule); and there is no 50 ms floor:
//! the repetition is the smell (on loopback a real PostgreSQL answers such
//! a SELECT in 50 µs, across a network each one costs a round trip), so
//! the finding is a warning from 10 % of the request and informational below.
//! Calls that overlap are not N+1: they ran at once (pool_queueing's case).

use crate::intervals::covered_us;
use crate::request_calls::{by_shape, issued_at_once_max, median, with_calls, Call, RequestCalls};
use crate::request_findings::{self, median_of, Hit};
use crate::sentence::{count, place, Sentence};
use crate::thresholds::WORTH_SHARE;
use std::collections::{BTreeMap, HashSet};
use std::net::SocketAddr;
use whyslow_model::{fmt_ms, Evidence, Facts, Finding, FindingKind, Severity, Subject};

/// Sentry's N+1 DB detector starts at 5 spans.
pub const MIN_REPEATS: usize = 5;
/// One request's calls of one shape to one server.
#[derive(Debug, Clone, PartialEq)]
pub struct Storm {
    pub server: SocketAddr,
    pub shape: String,
    pub calls: usize,
    /// 0 when the source did not see the parameters (spans): then the
    /// repeats may be one call again (duplicates), and the finding says so.
    pub distinct_params: usize,
    pub time_lost_us: u64,
    /// Batching would save at least WORTH_SHARE of the request.
    pub worth: bool,
}

/// The calls of `shape` in one request: an N+1 when there are enough, with
/// different parameters, one at a time.
/// Time lost: the time they covered minus one call (the batched statement).
pub fn storm(calls: &[Call], request_us: u64) -> Option<Storm> {
    let first = calls.first()?;
    let params: HashSet<Option<u64>> = calls.iter().map(|c| c.exchange.params_digest).collect();
    let unknown = calls.iter().all(|c| c.exchange.params_unknown);
    if calls.len() < MIN_REPEATS || (!unknown && params.len() < 2) || issued_at_once_max(calls) > 1
    {
        return None;
    }
    let covered = covered_us(calls.iter().map(|c| (c.start, c.end)), (0, u64::MAX));
    let one = median(calls.iter().map(Call::duration_us).collect());
    let lost = covered.saturating_sub(one);
    // Calls that took no time cost nothing to batch: no cause (an HTTP/2
    // connection whose header table predates the capture gave nameless,
    // timeless calls, and an N+1 of 0 ms was named first).
    if lost == 0 {
        return None;
    }
    Some(Storm {
        server: first.server,
        shape: first.exchange.request.to_string(),
        calls: calls.len(),
        distinct_params: if unknown { 0 } else { params.len() },
        time_lost_us: lost,
        worth: lost as f64 >= WORTH_SHARE * request_us as f64,
    })
}

/// One finding per (server, shape) that stormed in some request.
/// What to change.
const FIX: &str =
    "load them in one call: eager loading (select_related/prefetch_related, includes, \
     JOIN FETCH), one `IN (…)` query or a join, MGET or a pipeline";

pub fn detect(requests: &[RequestCalls]) -> Vec<Finding> {
    let mut hits: BTreeMap<(SocketAddr, String), Vec<Hit<Storm>>> = BTreeMap::new();
    for r in with_calls(requests) {
        for (_, calls) in by_shape(&r.calls) {
            let Some(s) = storm(&calls, r.total_us()) else {
                continue;
            };
            let group = hits.entry((s.server, s.shape.clone())).or_default();
            request_findings::push(group, s.time_lost_us, s, |s| {
                r.inbound_evidence(note(s), facts(s))
            });
        }
    }
    hits.into_iter()
        .map(|(key, hits)| finding(key, hits, false))
        .collect()
}

/// Storms in runs no request was told apart for (`ambiguous_runs`): each run
/// is the calls one request made to its server on a connection it held
/// for its work, so a run's count is that request's, whichever request it
/// was. An N+1 is so named at its true count when concurrency leaves the
/// requests themselves ambiguous. Where told-apart requests named the same
/// (server, shape) already (`named`), the finding with more occurrences
/// stands and the other goes: one statement, one finding.
pub fn in_ambiguous_runs(ambiguous_runs: &[Vec<Call>], named: &mut Vec<Finding>) -> Vec<Finding> {
    let mut hits: BTreeMap<(SocketAddr, String), Vec<Hit<Storm>>> = BTreeMap::new();
    for run in ambiguous_runs {
        // The request lasted at least the run: its share is not above that.
        let span = covered_us(run.iter().map(|c| (c.start, c.end)), (0, u64::MAX));
        for (_, calls) in by_shape(run) {
            let Some(s) = storm(&calls, span) else {
                continue;
            };
            let group = hits.entry((s.server, s.shape.clone())).or_default();
            let first = calls[0].exchange;
            request_findings::push(group, s.time_lost_us, s, |s| Evidence::Exchange {
                facts: facts(s),
                id: first.id,
                request: first.request.to_string(),
                note: format!("{}, in one run on a held connection", note(s)),
            });
        }
    }
    let mut out = Vec::new();
    for ((server, shape), hits) in hits {
        let subject = Subject::on_server(server, shape.as_str());
        let told = |f: &Finding| f.kind == FindingKind::NPlusOne && f.subject == subject;
        if named
            .iter()
            .any(|f| told(f) && f.occurrences as usize >= hits.len())
        {
            continue;
        }
        named.retain(|f| !told(f));
        out.push(finding((server, shape), hits, true));
    }
    out
}

fn note(s: &Storm) -> String {
    let sets = match s.distinct_params {
        0 => "parameters not in the spans: N+1 and repeats of one call look alike".to_string(),
        n => format!("{n} different parameter sets"),
    };
    format!(
        "{} calls of this shape ({sets}); one batch would save {}",
        s.calls,
        fmt_ms(s.time_lost_us)
    )
}

fn facts(s: &Storm) -> Facts {
    Facts::default()
        .with("calls", s.calls as f64)
        .with("parameter_sets", s.distinct_params as f64)
        .with("saving_us", s.time_lost_us as f64)
}

/// The finding of one (server, shape) from its hits, each one request's
/// (`from_runs`: each a run on a held connection, its request not told apart).
fn finding(
    (server, shape): (SocketAddr, String),
    hits: Vec<Hit<Storm>>,
    from_runs: bool,
) -> Finding {
    let severity = if hits.iter().any(|h| h.facts.worth) {
        Severity::Warning
    } else {
        Severity::Info
    };
    let facts = |hits: &[Hit<Storm>], facts: &mut Facts| {
        facts.set(
            "calls_per_request",
            median_of(hits, |s| s.calls as u64) as f64,
        );
        let seen = hits.iter().filter(|h| h.facts.distinct_params > 0).count();
        facts.set("requests_with_parameters", seen as f64);
        facts.set("runs_hit", if from_runs { hits.len() as f64 } else { 0.0 });
    };
    let quoted = |hits: &[Hit<Storm>], _, quoted: &mut Facts| {
        facts(hits, quoted);
        String::new()
    };
    let mut f = request_findings::finding(FindingKind::NPlusOne, severity, hits, quoted, FIX);
    f.subject = Subject::on_server(server, shape);
    f.summary = tell(&f);
    f
}

/// Told from the subject and numbers alone, a window's or the capture's.
pub const SENTENCE: Sentence = Sentence::summing(
    &["requests_hit", "requests_with_parameters", "runs_hit"],
    tell,
);

fn tell(f: &Finding) -> String {
    let params = match count(f, "requests_with_parameters") {
        0 => "(parameters unseen)",
        _ => "with different parameters",
    };
    let whose = match (count(f, "runs_hit"), f.occurrences as u64) {
        (0, _) => "requests",
        (runs, all) if runs == all => "runs on held connections, their requests not told apart",
        _ => "requests and runs on held connections",
    };
    format!(
        "`{}` to {} ran {} times per request {params}, one after another: {} per request \
         (median of {} {whose})",
        f.subject.what,
        place(f),
        count(f, "calls_per_request"),
        fmt_ms(f.time_lost_per_occurrence_us),
        f.occurrences
    )
}

#[cfg(test)]
pub mod tests {
    use super::*;
    use whyslow_model::Timeline;

    crate::testkit::detect_on_requests!();
    use crate::request_calls::tests::call;
    use crate::testkit::{exchange, servers};
    use whyslow_model::{Exchange, Protocol};

    /// One request making `n` calls of one SQL shape, `each` µs apart, parameters from `param`.
    pub fn statements(n: u32, each: u64, param: impl Fn(u32) -> u64) -> Timeline {
        let mut exchanges: Vec<Exchange> = vec![exchange(0, 0, (0, 100), (5_000_000, 5_000_100))];
        for i in 0..n {
            let at = 1_000 + i as u64 * each;
            let mut e = call(i + 1, 1, 0, (at, at + each - 20));
            e.protocol = Protocol::Postgres;
            e.request = "SELECT * FROM items WHERE order_id = $1".into();
            e.params_digest = Some(param(i));
            exchanges.push(e);
        }
        exchanges[0].response_first_at_us = Some(1_000 + n as u64 * each + 500);
        exchanges[0].response_last_at_us = Some(1_000 + n as u64 * each + 600);
        servers(&[8080, 5432]).with(exchanges)
    }

    #[test]
    fn one_shape_with_different_parameters_is_an_n_plus_one() {
        let f = detect(&statements(20, 1_000, |i| i as u64));
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].kind, FindingKind::NPlusOne);
        // 20 statements of 0.98 ms: 19.6 ms covered, one batch ~1 ms.
        let lost = f[0].time_lost_per_occurrence_us;
        assert!((18_500..=18_700).contains(&lost), "{lost}");
        assert!(f[0].summary.contains("ran 20 times"));
    }

    #[test]
    fn a_storm_that_costs_little_of_its_request_is_informational() {
        let mut t = statements(20, 1_000, |i| i as u64);
        assert_eq!(detect(&t)[0].severity, Severity::Warning);
        t.exchanges[0].response_first_at_us = Some(5_000_000);
        t.exchanges[0].response_last_at_us = Some(5_000_100);
        assert_eq!(detect(&t)[0].severity, Severity::Info);
    }

    #[test]
    fn unseen_parameters_name_the_storm_and_say_what_is_unknown() {
        let mut t = statements(20, 1_000, |_| 0);
        for e in t.exchanges.iter_mut().skip(1) {
            (e.params_digest, e.params_unknown) = (None, true);
        }
        let f = detect(&t);
        assert_eq!(f.len(), 1);
        assert!(
            f[0].summary.contains("parameters unseen"),
            "{}",
            f[0].summary
        );
        let dups = crate::duplicate_calls::detect(&crate::request_calls::by_request(&t));
        assert!(dups.is_empty(), "not known to repeat: {dups:?}");
    }

    #[test]
    fn few_identical_or_concurrent_calls_are_not() {
        assert!(
            detect(&statements(4, 1_000, |i| i as u64)).is_empty(),
            "4 calls"
        );
        assert!(
            detect(&statements(20, 1_000, |_| 7)).is_empty(),
            "duplicates"
        );
        let mut t = statements(20, 1_000, |i| i as u64);
        for e in t.exchanges.iter_mut().skip(1) {
            e.request_first_at_us = 1_000; // all at once
        }
        assert!(detect(&t).is_empty(), "concurrent");
    }

    #[test]
    fn calls_issued_at_once_that_a_pool_sent_one_at_a_time_are_not() {
        // Spans: each call was due at 1 ms (its client span began) and
        // reached the server one after another, as a full pool hands
        // connections on. The app made them at once: pool_queueing's case.
        let mut t = statements(20, 1_000, |i| i as u64);
        assert_eq!(detect(&t).len(), 1, "sent one after another");
        for e in t.exchanges.iter_mut().skip(1) {
            e.due_at_us = Some(1_000);
        }
        assert!(detect(&t).is_empty(), "due at once");
        // Each due as the one before was answered: made one after another.
        for e in t.exchanges.iter_mut().skip(1) {
            e.due_at_us = Some(e.request_first_at_us - 10);
        }
        assert_eq!(detect(&t).len(), 1, "due in turn");
    }

    /// The calls of `t` (one request's) as one run no request was told
    /// apart for.
    fn as_ambiguous_run(t: &Timeline) -> Vec<Call<'_>> {
        let server: SocketAddr = "127.0.0.1:5432".parse().unwrap();
        t.exchanges[1..]
            .iter()
            .map(|e| Call::of(e, server))
            .collect()
    }

    #[test]
    fn a_run_no_request_was_told_apart_for_names_its_storm_at_its_count() {
        let (a, b) = (
            statements(20, 1_000, |i| i as u64),
            statements(22, 1_000, |i| i as u64),
        );
        let runs = [as_ambiguous_run(&a), as_ambiguous_run(&b)];
        let f = in_ambiguous_runs(&runs, &mut Vec::new());
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].occurrences, 2);
        assert!(
            f[0].summary.contains("ran 20 times per request")
                && f[0].summary.contains("2 runs on held connections"),
            "{}",
            f[0].summary
        );
        assert!(matches!(
            &f[0].evidence[0],
            Evidence::Exchange { id: 1, note, .. } if note.contains("20 calls")
        ));
        // Where told-apart requests named it as often already, that
        // finding stands; where less often, the runs' finding replaces it.
        let mut named = f.clone();
        assert!(in_ambiguous_runs(&runs, &mut named).is_empty());
        assert_eq!(named, f);
        named[0].occurrences = 1;
        let replaced = in_ambiguous_runs(&runs, &mut named);
        assert!(named.is_empty(), "{named:?}");
        assert_eq!(replaced, f);
        // Repeats of one statement, or a few, are no storm in a run either.
        let dup = statements(20, 1_000, |_| 7);
        assert!(in_ambiguous_runs(&[as_ambiguous_run(&dup)], &mut Vec::new()).is_empty());
    }

    #[test]
    fn a_request_with_calls_not_told_apart_gives_no_per_request_evidence() {
        let mut t = statements(20, 1_000, |i| i as u64);
        let mut other = t.exchanges[5].clone();
        (other.id, other.parent) = (99, None);
        other.attribution = Some(whyslow_model::Attribution::Ambiguous);
        t.exchanges.push(other);
        let requests = crate::request_calls::by_request(&t);
        assert!(!requests[0].told_apart());
        assert!(
            super::detect(&requests).is_empty(),
            "its count may be short"
        );
        assert!(crate::sql_summary::summarize(&requests).is_empty());
    }

    #[test]
    fn calls_that_took_no_time_are_no_storm() {
        let mut exchanges = vec![exchange(0, 0, (0, 100), (9_900, 10_000))];
        for i in 0..10u32 {
            let mut c = call(i + 1, 1, 0, (1_000, 1_000));
            c.params_unknown = true;
            exchanges.push(c);
        }
        let t = servers(&[8080, 5432]).with(exchanges);
        assert!(detect(&t).is_empty());
    }
}
