//! `dns_timeout`: a query never answered, asked again after the client's
//! timeout — the lookup stalled for that long. A stub resolver waits its
//! `options timeout:` (glibc's default 5 s, 1 s at the least) before it
//! sends the question again; the classic cause is a resolver or a
//! conntrack table dropping one of the parallel A/AAAA queries a glibc
//! client sends from one socket. Time lost per occurrence: first try →
//! the try that followed.

use crate::dns_lookups::{Queries, Query, PARTNER_US};
use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, SocketAddr};
use whyslow_model::{fmt_ms, Evidence, Facts, Finding, FindingKind, Severity, Subject};

/// The shortest wait that is a timeout when the question comes again from
/// another socket: glibc's `timeout:` is whole seconds (1 at the least),
/// musl's retry interval 1 s divided by its attempts (0.33 s at the most
/// attempts, 3); sooner, the same question again is a second lookup, not
/// a retry. On the same socket it is a retry whenever it comes.
const MIN_TIMEOUT_US: u64 = 300_000;
/// The longest: glibc caps a try's timeout at 30 s (`RES_MAXRETRANS`).
const MAX_TIMEOUT_US: u64 = 30_000_000;
/// Later queries of one question looked at for a retry: a flood of one
/// question costs a bounded scan.
const MAX_LATER: usize = 256;
/// Questions named in the summary.
const QUESTIONS_LISTED: usize = 3;
/// Evidence occurrences listed.
const EVIDENCE: usize = 5;

const FIX: &str = "find where the query was dropped: a resolver that drops under load, or \
                   the kernel's conntrack race on parallel A and AAAA queries from one \
                   socket (glibc: `options single-request-reopen` or `single-request` in \
                   resolv.conf; a node-local DNS cache); lower `options timeout:` so a lost \
                   query costs less";

/// An unanswered query and the try of the same question after it.
struct Stall<'a> {
    lost: Query<'a>,
    retry: Query<'a>,
    /// The other type of the same name, sent with the lost one and answered.
    partner: Option<Query<'a>>,
}

impl Stall<'_> {
    fn stall_us(&self) -> u64 {
        self.retry.sent_us.saturating_sub(self.lost.sent_us)
    }
}

pub fn detect(view: &Queries) -> Vec<Finding> {
    let mut out = Vec::new();
    for (client, qs) in &view.by_client {
        // A resolver that answered this client nothing at all: the capture
        // holds one direction (or lost the other), not a timeout.
        let answering: std::collections::HashSet<SocketAddr> = qs
            .iter()
            .filter(|q| q.answered_us.is_some())
            .map(|q| q.resolver)
            .collect();
        let mut by_resolver: BTreeMap<SocketAddr, Vec<Stall>> = BTreeMap::new();
        for s in stalls(qs)
            .into_iter()
            .filter(|s| answering.contains(&s.lost.resolver))
        {
            by_resolver.entry(s.lost.resolver).or_default().push(s);
        }
        for (resolver, stalls) in by_resolver {
            out.push(finding(*client, resolver, &stalls));
        }
    }
    out
}

/// Each unanswered query followed by the same question from the same
/// client: the same query again (its socket and id: glibc and musl ask
/// again so) whenever it came, or else the client's next ask of the
/// question, from another socket, within the timeouts a stub resolver
/// uses. A socket that carries many queries (a load generator, a
/// caching client) asks one question again and again: only its id makes
/// a retry.
fn stalls<'a>(qs: &[Query<'a>]) -> Vec<Stall<'a>> {
    // Each question's queries, and each name's, in send order.
    let mut by_question: HashMap<(&str, &str), Vec<usize>> = HashMap::new();
    let mut by_name: HashMap<&str, Vec<usize>> = HashMap::new();
    for (i, q) in qs.iter().enumerate() {
        by_question.entry((q.qtype, q.name)).or_default().push(i);
        by_name.entry(q.name).or_default().push(i);
    }
    let mut out = Vec::new();
    for (i, lost) in qs.iter().enumerate() {
        if lost.answered_us.is_some() {
            continue;
        }
        let same = &by_question[&(lost.qtype, lost.name)];
        let later = || {
            same[same.partition_point(|&j| j <= i)..]
                .iter()
                .map(|&j| &qs[j])
                .take_while(|q| q.sent_us.saturating_sub(lost.sent_us) <= MAX_TIMEOUT_US)
                .take(MAX_LATER)
        };
        // The same query again: its socket and transaction id (the
        // analyzer gives a try and its retry the id as their digest).
        let again = later().find(|q| {
            q.exchange.connection == lost.exchange.connection
                && lost.exchange.params_digest.is_some()
                && q.exchange.params_digest == lost.exchange.params_digest
        });
        // Or the client's next ask of the question, from another socket,
        // a timeout later (asked sooner, it was not waiting for this one).
        let next_ask = || {
            later()
                .find(|q| q.exchange.connection != lost.exchange.connection)
                .filter(|q| q.sent_us.saturating_sub(lost.sent_us) >= MIN_TIMEOUT_US)
        };
        let retry = again.or_else(next_ask);
        let Some(retry) = retry else {
            continue;
        };
        // Its parallel partner: the other type of the name, sent from its
        // socket within a millisecond of it (glibc sends both at once)
        // and answered.
        let named = &by_name[lost.name];
        let from =
            named.partition_point(|&j| qs[j].sent_us.saturating_add(PARTNER_US) < lost.sent_us);
        let partner = named[from..]
            .iter()
            .map(|&j| qs[j])
            .take_while(|q| q.sent_us <= lost.sent_us.saturating_add(PARTNER_US))
            .take(MAX_LATER)
            .find(|q| {
                q.qtype != lost.qtype
                    && q.answered_us.is_some()
                    && q.exchange.connection == lost.exchange.connection
            });
        out.push(Stall {
            lost: *lost,
            retry: *retry,
            partner,
        });
    }
    out
}

fn finding(client: IpAddr, resolver: SocketAddr, stalls: &[Stall]) -> Finding {
    let mut lost: Vec<u64> = stalls.iter().map(Stall::stall_us).collect();
    lost.sort_unstable();
    let per = whyslow_model::stats::percentile(&lost, 0.5);
    let raced = stalls.iter().filter(|s| s.partner.is_some()).count();
    let race = match raced {
        0 => String::new(),
        n => format!(
            "; {n} of {} while the other type of the name, sent with it, was answered \
             (parallel A/AAAA queries on one socket)",
            stalls.len()
        ),
    };
    // Which questions, the most often lost first.
    let mut questions: BTreeMap<&str, usize> = BTreeMap::new();
    for s in stalls {
        *questions
            .entry(s.lost.exchange.request.as_str())
            .or_default() += 1;
    }
    let mut questions: Vec<(&str, usize)> = questions.into_iter().collect();
    questions.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    let listed: Vec<String> = questions
        .iter()
        .take(QUESTIONS_LISTED)
        .map(|(q, n)| format!("{q} ×{n}"))
        .collect();
    let queries = match stalls.len() {
        1 => "1 query".to_string(),
        n => format!("{n} queries"),
    };
    let summary = format!(
        "{queries} from {client} to {resolver} went unanswered, each asked again after {} \
         (median; the client's timeout): {}{race}",
        fmt_ms(per),
        listed.join(", ")
    );
    let mut facts = Facts::default()
        .with("timeout_us", per as f64)
        .with("raced_with_other_type", raced as f64);
    for (q, n) in questions.iter().take(QUESTIONS_LISTED) {
        facts.set(&format!("lost {q}"), *n as f64);
    }
    let found = Finding {
        subject: Subject::of_client(client, resolver.to_string()),
        facts,
        evidence: stalls
            .iter()
            .take(EVIDENCE)
            .map(|s| Evidence::Exchange {
                id: s.lost.exchange.id,
                request: s.lost.exchange.request.to_string(),
                note: format!(
                    "never answered; asked again {} later (exchange #{})",
                    fmt_ms(s.stall_us()),
                    s.retry.exchange.id
                ),
                facts: Facts::default()
                    .with("stall_us", s.stall_us() as f64)
                    .with("retry_exchange", f64::from(s.retry.exchange.id)),
            })
            .collect(),
        ..Finding::new(FindingKind::DnsTimeout, Severity::Critical, summary, FIX)
    };
    found.losing(&lost)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::dns_timeline;
    use whyslow_model::Timeline;

    fn detect(t: &Timeline) -> Vec<Finding> {
        super::detect(&Queries::of(t))
    }

    /// An A query lost and asked again after glibc's 1 s timeout, its AAAA
    /// answered on the same socket meanwhile.
    fn dropped() -> Timeline {
        let mut t = dns_timeline(&[
            ("A api.internal", 1_000_000, None),
            ("AAAA api.internal", 1_000_010, Some((150, "NOERROR"))),
            ("A api.internal", 2_000_300, Some((200, "NOERROR"))),
            ("AAAA api.internal", 2_000_310, Some((150, "NOERROR"))),
        ]);
        // The AAAA went from the lost A's socket.
        t.exchanges[1].connection = 0;
        t
    }

    #[test]
    fn every_detector_run_on_a_window_that_speaks_dns_reads_its_queries() {
        let t = dropped();
        let f = crate::tests::ranked(&t, &crate::request_calls::by_request(&t));
        assert!(f.iter().any(|f| f.kind == FindingKind::DnsTimeout), "{f:?}");
    }

    #[test]
    fn a_dropped_query_asked_again_after_the_timeout_is_the_stall() {
        let f = detect(&dropped());
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(f[0].kind, FindingKind::DnsTimeout);
        assert_eq!(f[0].time_lost_per_occurrence_us, 1_000_300);
        assert_eq!(f[0].subject.to_string(), "10.0.0.1 10.0.0.53:53");
        assert!(
            f[0].summary.contains("A api.internal ×1"),
            "{}",
            f[0].summary
        );
        assert_eq!(f[0].facts.0["raced_with_other_type"], 1.0);
    }

    #[test]
    fn a_capture_of_the_queries_alone_is_no_timeout() {
        // One direction captured: nothing answered, every question asked
        // again now and then.
        let t = dns_timeline(&[
            ("A api.internal", 1_000_000, None),
            ("A api.internal", 2_000_000, None),
            ("A api.internal", 3_000_000, None),
        ]);
        assert!(detect(&t).is_empty());
    }

    #[test]
    fn unanswered_alone_or_asked_again_at_once_is_no_timeout() {
        // Never asked again (the capture ended, or the client gave up).
        assert!(detect(&dns_timeline(&[("A a.internal", 1_000_000, None)])).is_empty());
        // The same question again 50 ms later from another socket: a second lookup.
        let t = dns_timeline(&[
            ("A a.internal", 1_000_000, None),
            ("A a.internal", 1_050_000, Some((100, "NOERROR"))),
        ]);
        assert!(detect(&t).is_empty());
        // From the same socket with the same id it is the client's retry,
        // after its own timeout; with another id, another query.
        let mut t = t;
        t.exchanges[1].connection = 0;
        t.exchanges[0].params_digest = Some(7);
        t.exchanges[1].params_digest = Some(8);
        assert!(detect(&t).is_empty());
        t.exchanges[1].params_digest = Some(7);
        let f = detect(&t);
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].time_lost_per_occurrence_us, 50_000);
        // Another socket asking the question in between: not waiting.
        let t = dns_timeline(&[
            ("A a.internal", 1_000_000, None),
            ("A a.internal", 1_000_100, Some((100, "NOERROR"))),
            ("A a.internal", 2_000_000, Some((100, "NOERROR"))),
        ]);
        assert!(detect(&t).is_empty());
        // Another name after the wait.
        let t = dns_timeline(&[
            ("A a.internal", 1_000_000, None),
            ("A b.internal", 2_000_000, Some((100, "NOERROR"))),
        ]);
        assert!(detect(&t).is_empty());
    }
}
