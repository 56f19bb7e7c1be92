//! `dns_search_expansion`: a name tried with the search list's suffixes
//! first, each answered NXDOMAIN, before the query that answers — the
//! resolver's `ndots` is above the name's dots (Kubernetes sets 5, so
//! `api.internal` is asked as `api.internal.<ns>.svc.cluster.local`,
//! `api.internal.svc.cluster.local`, `api.internal.cluster.local` first).
//! Every lookup pays those round trips. Time lost per lookup: from its
//! first wasted query to the query that answered.

use crate::dns_lookups::{Queries, Query, PARTNER_US};
use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use whyslow_model::{fmt_ms, Evidence, Facts, Finding, FindingKind, Severity, Subject};

/// Lookups with wasted queries before it is a pattern: one or two are a
/// typo or a name that really lives under a suffix.
const MIN_LOOKUPS: usize = 3;
/// How long before the answered query a wasted one may have been sent: a
/// stub resolver walks the list one suffix after another, each a round
/// trip to its resolver (a millisecond or two, tens across a region); a
/// timeout among them (1 s at the least) is `dns_timeout`'s.
const EXPANSION_WINDOW_US: u64 = 1_000_000;
/// Longest pause between a suffix's NXDOMAIN and the next query of the
/// walk: a stub resolver sends it at once; 25 ms covers a scheduler
/// period on a busy host. A query answered longer before was another lookup.
const CHAIN_GAP_US: u64 = 25_000;
/// NXDOMAIN queries looked at per answered one: the latest before it. A
/// walk needs a few (two types of six suffixes at the most, Kubernetes'
/// search list with ndots:5), five concurrent walks of one name 64; a
/// flood of failing names under one (random subdomains of a zone) costs
/// a bounded scan.
const MAX_CANDIDATES: usize = 64;
/// Evidence lookups listed.
const EVIDENCE: usize = 5;

const FIX: &str = "ask for the name as it is first: write it fully qualified with a trailing dot \
                   (`api.internal.`), or lower ndots below its dots + 1 (resolv.conf `options \
                   ndots:1`; in Kubernetes the pod's dnsConfig), or use the search list's own \
                   short name (`api`) when the service lives under it";

/// One lookup that went through the search list.
struct Expanded<'a> {
    answered: Query<'a>,
    wasted: Vec<Query<'a>>,
}

impl Expanded<'_> {
    fn lost_us(&self) -> u64 {
        let first = self.wasted.iter().map(|q| q.sent_us).min().unwrap_or(0);
        self.answered.sent_us.saturating_sub(first)
    }
}

pub fn detect(view: &Queries) -> Vec<Finding> {
    let mut out = Vec::new();
    for (client, qs) in &view.by_client {
        let mut by_name: BTreeMap<&str, Vec<Expanded>> = BTreeMap::new();
        for e in expanded(qs) {
            by_name.entry(e.answered.name).or_default().push(e);
        }
        for (name, lookups) in by_name {
            out.extend(finding(*client, name, &lookups));
        }
    }
    out
}

/// Each answered query with the NXDOMAIN queries for its name under a
/// suffix that led up to it. Walking back, each step of the walk is one
/// name: the query answered last before the walk's next query was sent
/// (and just before: `CHAIN_GAP_US`), with the other types of that name
/// sent with it. Each wasted query counts for one lookup, and a lookup
/// takes one of each name: concurrent lookups of one name share nothing.
fn expanded<'a>(qs: &[Query<'a>]) -> Vec<Expanded<'a>> {
    let under = nxdomain_under(qs);
    let mut used = vec![false; qs.len()];
    let mut out = Vec::new();
    for (i, a) in qs.iter().enumerate() {
        if !a.is("NOERROR") {
            continue;
        }
        let Some(cands) = under.get(a.name) else {
            continue;
        };
        // The candidates sent before `a`, latest first, within the window.
        let before = &cands[..cands.partition_point(|&j| j < i)];
        let near: Vec<usize> = before
            .iter()
            .rev()
            .take_while(|&&j| a.sent_us.saturating_sub(qs[j].sent_us) <= EXPANSION_WINDOW_US)
            .take(MAX_CANDIDATES)
            .copied()
            .collect();
        let mut wasted = Vec::new();
        let mut names: Vec<&str> = Vec::new();
        let mut next_sent = a.sent_us;
        while let Some(j) = previous_step(qs, &near, next_sent, &names, &used) {
            let step = qs[j];
            names.push(step.name);
            next_sent = step.sent_us;
            let mut types = vec![step.qtype];
            used[j] = true;
            wasted.push(step);
            // The other types of the name sent with it, one of each.
            for &k in &near {
                let q = &qs[k];
                let partner = q.name == step.name
                    && !types.contains(&q.qtype)
                    && q.sent_us.abs_diff(step.sent_us) <= PARTNER_US
                    && q.answered_us.is_some_and(|at| at <= a.sent_us);
                if partner && !used[k] {
                    used[k] = true;
                    types.push(q.qtype);
                    wasted.push(*q);
                    next_sent = next_sent.min(q.sent_us);
                }
            }
        }
        if !wasted.is_empty() {
            wasted.sort_by_key(|q| q.sent_us);
            out.push(Expanded {
                answered: *a,
                wasted,
            });
        }
    }
    out
}

/// NXDOMAIN queries by each name they are under: "a.b.svc.local" under
/// "a.b.svc", "a.b" and "a"; indices ascending (the queries' order).
fn nxdomain_under<'a>(qs: &[Query<'a>]) -> HashMap<&'a str, Vec<usize>> {
    let mut out: HashMap<&str, Vec<usize>> = HashMap::new();
    for (j, q) in qs.iter().enumerate() {
        if !q.is("NXDOMAIN") {
            continue;
        }
        for (dot, _) in q.name.match_indices('.') {
            out.entry(&q.name[..dot]).or_default().push(j);
        }
    }
    out
}

/// The query of a walk before one sent at `next_sent`: among `near`
/// (NXDOMAIN under the walk's name), an unused one under a suffix not
/// yet in the walk (`names`), answered last before `next_sent` and just
/// before it.
fn previous_step(
    qs: &[Query],
    near: &[usize],
    next_sent: u64,
    names: &[&str],
    used: &[bool],
) -> Option<usize> {
    near.iter()
        .copied()
        .filter(|&j| {
            let w = &qs[j];
            let led_up = w
                .answered_us
                .is_some_and(|at| at <= next_sent && next_sent - at <= CHAIN_GAP_US);
            !used[j] && led_up && !names.contains(&w.name)
        })
        .max_by_key(|&j| qs[j].answered_us)
}

fn finding(client: IpAddr, name: &str, lookups: &[Expanded]) -> Option<Finding> {
    if lookups.len() < MIN_LOOKUPS {
        return None;
    }
    let mut lost: Vec<u64> = lookups.iter().map(Expanded::lost_us).collect();
    lost.sort_unstable();
    let per = whyslow_model::stats::percentile(&lost, 0.5);
    let mut wasted: Vec<u64> = lookups.iter().map(|l| l.wasted.len() as u64).collect();
    wasted.sort_unstable();
    let wasted_per = whyslow_model::stats::percentile(&wasted, 0.5);
    // In the order the walk tried them.
    let mut suffixes: Vec<&str> = Vec::new();
    for w in lookups.iter().flat_map(|l| &l.wasted) {
        let s = &w.name[name.len() + 1..];
        if !suffixes.contains(&s) {
            suffixes.push(s);
        }
    }
    let dots = name.matches('.').count();
    let summary = format!(
        "{client} looked up {name} through its search list first: {wasted_per} queries answered \
         NXDOMAIN (under {}) before the one that answered, {} per lookup (median), {} lookups. \
         The name has {dots} dot(s): the resolver's ndots is above {dots}",
        suffixes.join(", "),
        fmt_ms(per),
        lookups.len()
    );
    let found = Finding {
        subject: Subject::of_client(client, name),
        facts: Facts::default()
            .with("wasted_queries_per_lookup", wasted_per as f64)
            .with("lookups", lookups.len() as f64)
            .with("suffixes", suffixes.len() as f64)
            .with("name_dots", dots as f64),
        evidence: lookups
            .iter()
            .take(EVIDENCE)
            .map(|l| Evidence::Exchange {
                id: l.answered.exchange.id,
                request: l.answered.exchange.request.to_string(),
                note: format!(
                    "answered after {} wasted queries ({}), {} of search",
                    l.wasted.len(),
                    names_once(&l.wasted).join(", "),
                    fmt_ms(l.lost_us())
                ),
                facts: Facts::default()
                    .with("wasted_queries", l.wasted.len() as f64)
                    .with("lost_us", l.lost_us() as f64),
            })
            .collect(),
        ..Finding::new(
            FindingKind::DnsSearchExpansion,
            Severity::Warning,
            summary,
            FIX,
        )
    };
    Some(found.losing(&lost))
}

/// The queries' names, each once, in the order sent (A and AAAA of one
/// name are one step of the walk).
fn names_once<'a>(qs: &[Query<'a>]) -> Vec<&'a str> {
    let mut out: Vec<&str> = Vec::new();
    for q in qs {
        if !out.contains(&q.name) {
            out.push(q.name);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::{dns_timeline, DnsQuery};
    use whyslow_model::Timeline;

    fn detect(t: &Timeline) -> Vec<Finding> {
        super::detect(&Queries::of(t))
    }

    /// `lookups` lookups of api.internal `apart` µs apart, each after two
    /// NXDOMAIN suffixes; every answer 300 µs after its query.
    fn walks(lookups: u64, apart: u64) -> Vec<DnsQuery<'static>> {
        let mut qs = Vec::new();
        for i in 0..lookups {
            let t = 1_000_000 + i * apart;
            let nx = Some((300, "NXDOMAIN"));
            qs.push(("A api.internal.svc.cluster.local", t, nx));
            qs.push(("A api.internal.cluster.local", t + 400, nx));
            qs.push(("A api.internal", t + 800, Some((300, "NOERROR"))));
        }
        qs.sort_by_key(|q| q.1);
        qs
    }

    fn searched(lookups: u64) -> Timeline {
        dns_timeline(&walks(lookups, 100_000))
    }

    #[test]
    fn suffixes_tried_before_the_name_are_found_with_their_time() {
        let f = detect(&searched(5));
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(f[0].kind, FindingKind::DnsSearchExpansion);
        assert_eq!(f[0].occurrences, 5);
        assert_eq!(f[0].time_lost_per_occurrence_us, 800);
        assert_eq!(f[0].facts.0["wasted_queries_per_lookup"], 2.0);
        assert!(
            f[0].summary.contains("svc.cluster.local"),
            "{}",
            f[0].summary
        );
        assert!(f[0].summary.contains("1 dot(s)"), "{}", f[0].summary);
    }

    #[test]
    fn parallel_types_are_one_lookup_and_a_rare_miss_is_not_a_pattern() {
        assert!(detect(&searched(2)).is_empty());
        // A and AAAA in parallel, as glibc sends them: one lookup.
        let mut pairs = Vec::new();
        for i in 0..4 {
            let t = 1_000_000 + i * 100_000;
            for (ty, dt) in [("A", 0), ("AAAA", 5)] {
                pairs.push((
                    format!("{ty} api.internal.svc.cluster.local"),
                    t + dt,
                    "NXDOMAIN",
                ));
                pairs.push((
                    format!("{ty} api.internal.cluster.local"),
                    t + 400 + dt,
                    "NXDOMAIN",
                ));
                pairs.push((format!("{ty} api.internal"), t + 800 + dt, "NOERROR"));
            }
        }
        pairs.sort_by_key(|p| p.1);
        let qs: Vec<_> = pairs
            .iter()
            .map(|(r, t, c)| (r.as_str(), *t, Some((300, *c))))
            .collect();
        let f = detect(&dns_timeline(&qs));
        assert_eq!(f.len(), 1);
        assert_eq!(
            (f[0].occurrences, f[0].facts.0["wasted_queries_per_lookup"]),
            (4, 4.0)
        );
        assert_eq!(f[0].time_lost_per_occurrence_us, 800);
        let plain: Vec<_> = (0..10)
            .map(|i| {
                (
                    "A api.internal",
                    1_000_000 + i * 1000,
                    Some((300, "NOERROR")),
                )
            })
            .collect();
        assert!(detect(&dns_timeline(&plain)).is_empty());
        // NXDOMAIN for another name, or one answered after the lookup began: not wasted.
        let mut qs = Vec::new();
        for i in 0..5 {
            let t = 1_000_000 + i * 100_000;
            qs.push(("A other.internal.cluster.local", t, Some((300, "NXDOMAIN"))));
            qs.push((
                "A api.internal.cluster.local",
                t + 400,
                Some((900, "NXDOMAIN")),
            ));
            qs.push(("A api.internal", t + 800, Some((300, "NOERROR"))));
        }
        assert!(detect(&dns_timeline(&qs)).is_empty());
    }

    #[test]
    fn concurrent_lookups_of_one_name_each_take_their_own_walk() {
        // Four lookups at once, their queries interleaved.
        let qs = walks(4, 50);
        let f = detect(&dns_timeline(&qs));
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].occurrences, 4);
        assert_eq!(f[0].facts.0["wasted_queries_per_lookup"], 2.0);
        let lost = f[0].time_lost_per_occurrence_us;
        assert!((750..=850).contains(&lost), "{lost}");
    }
}
