//! Findings and summaries of the windows of one capture, merged into one
//! answer. Sums merge exactly (occurrences, time lost, requests, means
//! weighted by requests); a typical time per occurrence is the median of
//! the windows' typical times weighted by their occurrences (exact: a
//! value per window, as the facts the sentences quote); the evidence kept
//! is bounded, the worst window's first.

use crate::periodic_stall;
use crate::sentence::{self, Sentence};
use crate::symptoms;
use std::collections::{BTreeSet, HashMap, HashSet};
use whyslow_model::{
    Evidence, Facts, Finding, FindingKind, Population, SqlShape, SqlSummary, Subject, TimeBreakdown,
};

/// Evidence items kept per merged finding: enough to look at, bounded
/// whatever the number of windows.
pub const MAX_EVIDENCE: usize = 20;

/// A cause measured on the requests told apart stands for the same cause
/// judged across all calls (a pool's queue estimated over every request)
/// when it covers at least this share of the requests that judgment does;
/// measured on fewer (1 request of 24 at 4 clients sharing one pool), the
/// estimate over all of them is told instead of a few requests' exact wait.
const MEASURED_SHARE: f64 = 0.5;

/// What one finding is about, beyond its kind: its subject, else the server
/// or request its first evidence names. Connection ids and packet numbers
/// differ from window to window and do not name a subject.
fn subject(f: &Finding) -> Subject {
    if !f.subject.is_empty() {
        return f.subject.clone();
    }
    f.evidence
        .iter()
        .find_map(|e| match e {
            Evidence::Calls { server, .. } | Evidence::Connection { server, .. } => {
                Some(Subject::from(server.as_str()))
            }
            Evidence::Queued { request, .. } | Evidence::Exchange { request, .. } => {
                Some(Subject::what(request.as_str()))
            }
            Evidence::Packets { .. } | Evidence::Measurement { .. } => None,
        })
        .unwrap_or_default()
}

/// Kind, background, subject, and whether a population judges it: a
/// finding named on its evidence alone (a pool judged across its calls)
/// merges apart from one that must be common (the same pool's queue seen
/// on the requests told apart).
type Key = (FindingKind, bool, Subject, bool);

/// A judged cause's population, by kind and subject. Never background: its
/// hits are requests (or connections) that waited for it.
type PopulationKey = (FindingKind, Subject);

struct Merging {
    /// The window's finding that lost the most time: its summary and fix.
    worst: Finding,
    time_lost_us: u64,
    occurrences: u64,
    /// Windows' typical time per occurrence, weighted by their occurrences.
    typical: Vec<(f64, u64)>,
    /// The findings merged, the windows they showed in, and the last of them.
    findings: u32,
    windows: u32,
    last_window: u32,
    evidence: Vec<Evidence>,
    /// Where its sentence is told from numbers: each window's facts, with
    /// the window's occurrences as their weight.
    facts: Option<(&'static Sentence, Vec<(Facts, u64)>)>,
}

/// Findings merged across windows.
#[derive(Default)]
pub struct MergedFindings {
    merging: HashMap<Key, Merging>,
    /// Windows added so far.
    windows: u32,
    /// Each judged cause's population over every window, its tallies (the
    /// windows where it did not show) included.
    populations: HashMap<PopulationKey, Population>,
}

impl MergedFindings {
    /// One window's findings.
    pub fn add(&mut self, findings: Vec<Finding>) {
        self.windows += 1;
        let window = self.windows;
        for f in findings {
            // A judged cause's subject is its own, even empty (one for the
            // whole capture): its windows' tallies have no evidence to name one.
            let subject = match f.population {
                Some(_) => f.subject.clone(),
                None => subject(&f),
            };
            if let Some(p) = &f.population {
                self.populations
                    .entry((f.kind, subject.clone()))
                    .and_modify(|q| q.add(p))
                    .or_insert(*p);
                if p.hits == 0 {
                    continue; // a tally: its population alone
                }
            }
            // A cause judged by its population is never background (above).
            let bg = f.background && f.population.is_none();
            let key = (f.kind, bg, subject, f.population.is_some());
            match self.merging.get_mut(&key) {
                Some(m) => m.add(f, window),
                None => {
                    let m = Merging::new(f, window);
                    self.merging.insert(key, m);
                }
            }
        }
    }

    /// The merged findings, each judged once against its population over
    /// everything added, ranked. A cause its population names is named
    /// once: a finding of the same kind and subject on evidence alone is
    /// dropped, unless it covers more than twice the requests
    /// (`MEASURED_SHARE`): then it stands and the population's is dropped.
    pub fn finish(self) -> Vec<Finding> {
        let populations = self.populations;
        let judged = |k: &PopulationKey| populations.get(k).is_some_and(Population::judged);
        // Requests each cause named on evidence alone covers.
        let alone: HashMap<PopulationKey, u64> = self
            .merging
            .iter()
            .filter(|(k, _)| !k.3)
            .map(|((kind, _, subject, _), m)| ((*kind, subject.clone()), m.occurrences))
            .collect();
        let outnumbered = |k: &PopulationKey, m: &Merging| {
            alone
                .get(k)
                .is_some_and(|&a| (m.occurrences as f64) < MEASURED_SHARE * a as f64)
        };
        let named: HashSet<PopulationKey> = self
            .merging
            .iter()
            .filter(|((kind, _, subject, by_population), m)| {
                let key = (*kind, subject.clone());
                *by_population && judged(&key) && !outnumbered(&key, m)
            })
            .map(|((kind, _, subject, _), _)| (*kind, subject.clone()))
            .collect();
        let mut out: Vec<Finding> = self
            .merging
            .into_iter()
            .filter_map(|((kind, _, subject, by_population), m)| {
                let key = (kind, subject);
                if !by_population {
                    return (!named.contains(&key)).then(|| m.finish());
                }
                if !named.contains(&key) {
                    return None; // not judged, or outnumbered (above)
                }
                let p = populations.get(&key).filter(|p| p.judged())?;
                let mut f = m.finish();
                f.population = Some(*p);
                if let Some(sentence) = sentence::of(&f) {
                    sentence.tell(&mut f);
                }
                f.facts.set("population_hits", p.hits as f64);
                f.facts.set("population_size", p.of as f64);
                Some(f)
            })
            .collect();
        periodic_stall::not_slow_where_stalling(&mut out);
        symptoms::pools_behind_n_plus_one(&mut out);
        for f in &mut out {
            f.summary.push_str(&symptoms::clause(f));
        }
        Finding::sort(&mut out);
        out
    }
}

/// One stretch's findings judged as a capture's are: merged as one window
/// (`MergedFindings`), so what a population holds back, the tallies, and a
/// cause named on evidence alone that its population names too, go.
pub fn judge(findings: &mut Vec<Finding>) {
    let mut m = MergedFindings::default();
    m.add(std::mem::take(findings));
    *findings = m.finish();
}

impl Merging {
    fn new(f: Finding, window: u32) -> Self {
        let typical = vec![(f.time_lost_per_occurrence_us as f64, weight(&f))];
        let mut evidence = f.evidence.clone();
        evidence.truncate(MAX_EVIDENCE);
        let facts = sentence::of(&f).map(|s| (s, vec![(f.facts.clone(), weight(&f))]));
        Merging {
            time_lost_us: f.time_lost_us,
            occurrences: u64::from(f.occurrences),
            typical,
            findings: 1,
            windows: 1,
            last_window: window,
            evidence,
            facts,
            worst: f,
        }
    }

    fn add(&mut self, mut f: Finding, window: u32) {
        self.time_lost_us = self.time_lost_us.saturating_add(f.time_lost_us);
        self.occurrences += u64::from(f.occurrences);
        self.findings += 1;
        if window != self.last_window {
            self.windows += 1;
            self.last_window = window;
        }
        self.typical
            .push((f.time_lost_per_occurrence_us as f64, weight(&f)));
        if let Some((_, facts)) = &mut self.facts {
            facts.push((f.facts.clone(), weight(&f)));
        }
        let severity = self.worst.severity.max(f.severity);
        if f.time_lost_us > self.worst.time_lost_us {
            // The worst window's evidence first, then what was kept before.
            let mut evidence = std::mem::take(&mut f.evidence);
            evidence.append(&mut self.evidence);
            self.evidence = evidence;
            self.worst = f;
        } else {
            self.evidence.append(&mut f.evidence);
        }
        self.evidence.truncate(MAX_EVIDENCE);
        self.worst.severity = severity;
    }

    /// The merged finding. Its sentence, where told from numbers, is told
    /// again by the caller once its population is known; any other is the
    /// worst window's, and says so when there were several.
    fn finish(mut self) -> Finding {
        let mut f = self.worst;
        f.time_lost_us = self.time_lost_us;
        f.occurrences = u32::try_from(self.occurrences).unwrap_or(u32::MAX);
        f.evidence = self.evidence;
        if self.findings == 1 {
            return f;
        }
        f.time_lost_per_occurrence_us = weighted_median(&mut self.typical) as u64;
        match self.facts {
            Some((sentence, facts)) => {
                f.facts = merged_facts(sentence, facts);
                sentence.tell(&mut f);
            }
            None if self.windows > 1 => {
                let w = self.windows;
                f.summary = format!("{} (the worst of the {w} windows it showed in)", f.summary);
            }
            None => {
                let n = self.findings;
                f.summary = format!("{} (the worst of {n} alike)", f.summary);
            }
        }
        if self.windows > 1 {
            f.facts.set("windows", self.windows as f64);
        }
        f
    }
}

/// What a window's facts weigh in a median: its occurrences, one at least.
fn weight(f: &Finding) -> u64 {
    u64::from(f.occurrences.max(1))
}

/// Windows' facts merged as `sentence` says: summed, the largest, or the
/// median of the windows' values weighted by their occurrences.
fn merged_facts(sentence: &Sentence, mut windows: Vec<(Facts, u64)>) -> Facts {
    let names: BTreeSet<String> = windows
        .iter()
        .flat_map(|(f, _)| f.0.keys().cloned())
        .collect();
    let mut merged = Facts::default();
    for name in names {
        let mut said: Vec<(f64, u64)> = windows
            .iter_mut()
            .filter_map(|(f, w)| f.0.get(&name).map(|&v| (v, *w)))
            .collect();
        let value = if sentence.summed.contains(&name.as_str()) {
            said.iter().map(|(v, _)| v).sum()
        } else if sentence.maxed.contains(&name.as_str()) {
            said.iter().map(|(v, _)| *v).fold(f64::MIN, f64::max)
        } else {
            weighted_median(&mut said)
        };
        merged.set(&name, value);
    }
    merged
}

/// The value at half the total weight, `said` sorted by value.
fn weighted_median(said: &mut [(f64, u64)]) -> f64 {
    said.sort_by(|a, b| a.0.total_cmp(&b.0));
    let total: u64 = said.iter().map(|(_, w)| w).sum();
    let mut seen = 0;
    for &(v, w) in said.iter() {
        seen += w;
        if 2 * seen >= total {
            return v;
        }
    }
    0.0
}

/// What each window says per (service, request kind), kept until the
/// capture ends and then merged into one per kind, most requests first.
pub struct PerKind<T> {
    kinds: HashMap<(String, String), Vec<T>>,
}

impl<T> Default for PerKind<T> {
    fn default() -> Self {
        PerKind {
            kinds: HashMap::new(),
        }
    }
}

/// A summary of one request kind of one service.
pub trait OfKind {
    fn server(&self) -> &str;
    fn request(&self) -> &str;
    fn requests(&self) -> u32;
}

impl<T: OfKind> PerKind<T> {
    pub fn add(&mut self, items: Vec<T>) {
        for t in items {
            let key = (t.server().to_string(), t.request().to_string());
            self.kinds.entry(key).or_default().push(t);
        }
    }

    fn merged(self, merge: fn(Vec<T>) -> T) -> Vec<T> {
        let mut out: Vec<T> = self.kinds.into_values().map(merge).collect();
        out.sort_by(|a, b| {
            let by_requests = b.requests().cmp(&a.requests());
            by_requests.then_with(|| a.request().cmp(b.request()))
        });
        out
    }
}

macro_rules! of_kind {
    ($t:ty) => {
        impl OfKind for $t {
            fn server(&self) -> &str {
                &self.server
            }
            fn request(&self) -> &str {
                &self.request
            }
            fn requests(&self) -> u32 {
                self.requests
            }
        }
    };
}
of_kind!(TimeBreakdown);
of_kind!(SqlSummary);

/// Time breakdowns merged: the means of every part, weighted by the
/// windows' requests.
pub type MergedBreakdowns = PerKind<TimeBreakdown>;

impl MergedBreakdowns {
    pub fn finish(self) -> Vec<TimeBreakdown> {
        self.merged(weighted)
    }
}

/// One breakdown from several of the same kind.
fn weighted(parts: Vec<TimeBreakdown>) -> TimeBreakdown {
    let requests: u64 = parts.iter().map(|b| u64::from(b.requests)).sum();
    let mean = |f: &dyn Fn(&TimeBreakdown) -> u64| -> u64 {
        let sum: u128 = parts
            .iter()
            .map(|b| u128::from(f(b)) * u128::from(b.requests))
            .sum();
        u64::try_from(sum / u128::from(requests.max(1))).unwrap_or(u64::MAX)
    };
    let mut backing: Vec<whyslow_model::BackingTime> = Vec::new();
    for b in &parts {
        for s in &b.backing {
            if !backing.iter().any(|x| x.server == s.server) {
                let share = |f: &dyn Fn(&whyslow_model::BackingTime) -> f64| -> f64 {
                    let sum: f64 = parts
                        .iter()
                        .flat_map(|p| {
                            p.backing
                                .iter()
                                .filter(|x| x.server == s.server)
                                .map(move |x| f(x) * f64::from(p.requests))
                        })
                        .sum();
                    sum / requests.max(1) as f64
                };
                let network_share = split_share(&parts, &s.server);
                backing.push(
                    whyslow_model::BackingTime {
                        server: s.server.clone(),
                        protocol: s.protocol,
                        calls_per_request: share(&|x| x.calls_per_request),
                        critical_us: share(&|x| x.critical_us as f64) as u64,
                        share: 0.0,
                        network_us: None,
                        server_us: None,
                    }
                    .with_network_share(network_share),
                );
            }
        }
    }
    backing.sort_by_key(|b| std::cmp::Reverse(b.critical_us));
    TimeBreakdown {
        server: parts[0].server.clone(),
        request: parts[0].request.clone(),
        requests: u32::try_from(requests).unwrap_or(u32::MAX),
        total_us: mean(&|b| b.total_us),
        server_us: mean(&|b| b.server_us),
        queued_us: mean(&|b| b.queued_us),
        ambiguous_us: mean(&|b| b.ambiguous_us),
        backing,
        network_us: mean(&|b| b.network_us),
        server_share: 0.0,
        queued_share: 0.0,
        ambiguous_share: 0.0,
        network_share: 0.0,
    }
    .with_shares()
}

/// The network's share of `server`'s critical time over the windows that
/// split it, weighted by their requests.
fn split_share(parts: &[TimeBreakdown], server: &str) -> Option<f64> {
    let (mut network, mut critical) = (0f64, 0f64);
    for p in parts {
        for b in p.backing.iter().filter(|b| b.server == server) {
            if let Some(n) = b.network_us {
                network += n as f64 * f64::from(p.requests);
                critical += b.critical_us as f64 * f64::from(p.requests);
            }
        }
    }
    (critical > 0.0).then(|| network / critical)
}

/// SQL summaries merged: requests summed, the slowest request of all,
/// shapes' statements and time per request weighted by the windows'
/// requests (a shape past a window's top list counts as absent there), the
/// median request from the window with the most requests.
pub type MergedSql = PerKind<SqlSummary>;

impl MergedSql {
    pub fn finish(self) -> Vec<SqlSummary> {
        self.merged(sql_weighted)
    }
}

fn sql_weighted(mut parts: Vec<SqlSummary>) -> SqlSummary {
    let requests: u64 = parts.iter().map(|s| u64::from(s.requests)).sum();
    let shapes = |pick: fn(&SqlSummary) -> &Vec<SqlShape>| -> Vec<SqlShape> {
        let mut merged: Vec<SqlShape> = Vec::new();
        for p in &parts {
            let w = f64::from(p.requests) / requests.max(1) as f64;
            for s in pick(p) {
                let at = merged.iter().position(|m| m.statement == s.statement);
                let m = match at {
                    Some(i) => &mut merged[i],
                    None => {
                        merged.push(SqlShape {
                            statement: s.statement.clone(),
                            per_request: 0.0,
                            time_us_per_request: 0,
                        });
                        merged.last_mut().expect("just pushed")
                    }
                };
                m.per_request += s.per_request * w;
                m.time_us_per_request += (s.time_us_per_request as f64 * w) as u64;
            }
        }
        merged
    };
    let mut by_count = shapes(|s| &s.top_by_count);
    let mut by_time = shapes(|s| &s.top_by_time);
    let shown = parts
        .iter()
        .map(|p| p.top_by_count.len())
        .max()
        .unwrap_or(0);
    by_count.sort_by(|a, b| b.per_request.total_cmp(&a.per_request));
    by_time.sort_by_key(|b| std::cmp::Reverse(b.time_us_per_request));
    by_count.truncate(shown);
    by_time.truncate(shown);
    let worst = parts
        .iter()
        .map(|p| p.worst.clone())
        .max_by_key(|w| w.total_us)
        .unwrap_or_default();
    parts.sort_by_key(|p| std::cmp::Reverse(p.requests));
    let mut out = parts.swap_remove(0);
    out.requests = u32::try_from(requests).unwrap_or(u32::MAX);
    out.worst = worst;
    out.top_by_count = by_count;
    out.top_by_time = by_time;
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use whyslow_model::Severity;

    fn finding(lost: u64, occurrences: u32, server: &str) -> Finding {
        Finding {
            time_lost_us: lost,
            time_lost_per_occurrence_us: lost / u64::from(occurrences),
            occurrences,
            evidence: vec![Evidence::Connection {
                id: occurrences,
                client: "c".into(),
                server: server.into(),
            }],
            ..Finding::new(
                FindingKind::TcpRetransmission,
                Severity::Warning,
                format!("{occurrences} waited"),
                "",
            )
        }
    }

    /// A pool queue seen on `hits` of `of` requests of one window.
    fn seen(hits: u32, of: usize) -> Finding {
        let population = crate::thresholds::requests_seen(hits as usize, of);
        let subject = Subject::from("127.0.0.1:5432");
        match hits {
            0 => Finding::tally(FindingKind::PoolQueueing, subject, population),
            _ => Finding {
                kind: FindingKind::PoolQueueing,
                subject,
                population: Some(population),
                ..finding(u64::from(hits) * 1_000, hits, "127.0.0.1:5432")
            },
        }
    }

    #[test]
    fn a_cause_is_judged_once_against_its_population_over_every_window() {
        // One window named it on its own (1 of 5 requests), but over the
        // capture it showed on 1 of 50: not the service's.
        let mut m = MergedFindings::default();
        m.add(vec![seen(1, 5)]);
        m.add(vec![seen(0, 45)]);
        assert!(m.finish().is_empty());
        // Below the share in one window (1 of 11), above it in the other
        // (1 of 9): over the capture 2 of 20, named with both occurrences.
        let mut m = MergedFindings::default();
        m.add(vec![seen(1, 11)]);
        m.add(vec![seen(1, 9)]);
        let f = m.finish();
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].occurrences, 2);
        let p = f[0].population.unwrap();
        assert_eq!((p.hits, p.of), (2, 20));
        // One stretch judged alone sums its populations too: 2 of 11 alone
        // would be named, 2 of 51 is not.
        let mut one = vec![seen(2, 11), seen(0, 40)];
        judge(&mut one);
        assert!(one.is_empty());
    }

    #[test]
    fn two_statement_shapes_of_one_server_stay_apart() {
        let shape = |lost, subject: &str| Finding {
            facts: Default::default(),
            kind: FindingKind::NPlusOne,
            subject: subject.into(),
            ..finding(lost, 8, "db:5432")
        };
        let mut m = MergedFindings::default();
        m.add(vec![shape(8_000, "db:5432 A"), shape(4_000, "db:5432 B")]);
        m.add(vec![shape(8_000, "db:5432 A")]);
        let out = m.finish();
        assert_eq!(out.len(), 2, "{out:?}");
        assert_eq!((out[0].time_lost_us, out[0].occurrences), (16_000, 16));
        assert_eq!((out[1].time_lost_us, out[1].occurrences), (4_000, 8));
    }

    #[test]
    fn windows_of_one_cause_add_up_and_others_stay_apart() {
        let mut m = MergedFindings::default();
        m.add(vec![finding(1_000, 2, "a:1"), finding(50, 1, "b:2")]);
        m.add(vec![finding(9_000, 3, "a:1")]);
        let out = m.finish();
        assert_eq!(out.len(), 2);
        assert_eq!((out[0].time_lost_us, out[0].occurrences), (10_000, 5));
        // The worst window speaks, and its evidence comes first.
        let worst = "3 waited (the worst of the 2 windows it showed in)";
        assert_eq!(out[0].summary, worst);
        assert!(matches!(
            out[0].evidence[0],
            Evidence::Connection { id: 3, .. }
        ));
        // Typical: 3 occurrences of 3 ms outweigh 2 of 0.5 ms, exactly.
        assert_eq!(out[0].time_lost_per_occurrence_us, 3_000);
        assert_eq!(
            (out[1].time_lost_us, out[1].summary.as_str()),
            (50, "1 waited")
        );
    }

    #[test]
    fn two_alike_in_one_window_are_one_window() {
        let mut m = MergedFindings::default();
        m.add(vec![finding(1_000, 2, "a:1"), finding(9_000, 3, "a:1")]);
        let out = m.finish();
        assert_eq!(out[0].summary, "3 waited (the worst of 2 alike)");
        assert!(
            !out[0].facts.0.contains_key("windows"),
            "{:?}",
            out[0].facts
        );
    }

    /// A pool queue of one window, with the facts its sentence quotes.
    fn queued(hits: u32, calls: f64, pool: f64, request_us: f64) -> Finding {
        let mut f = seen(hits, 10 * hits as usize);
        f.facts = Facts::of(&[
            ("calls", calls),
            ("connections", pool),
            ("request_us", request_us),
            ("requests_hit", hits as f64),
        ]);
        f
    }

    #[test]
    fn a_sentence_told_from_numbers_is_told_again_from_the_captures() {
        let mut m = MergedFindings::default();
        m.add(vec![queued(3, 11.0, 5.0, 40_000.0)]);
        let mut peak = queued(5, 12.0, 5.0, 60_000.0);
        peak.facts.set("peak_demand", 20.0);
        m.add(vec![peak]);
        m.add(vec![queued(1, 11.0, 4.0, 40_000.0)]);
        let f = &m.finish()[0];
        // Medians weighted by requests hit (5 of 9 said 12 calls, 60 ms),
        // counts summed, peaks the largest.
        assert_eq!(
            f.summary,
            "12 calls to 127.0.0.1:5432 waited for one of 5 connections (at least 20 calls \
             wanted one at once): 1.00 ms of this request's 60.0 ms (median of 9 requests)"
        );
        assert_eq!(f.facts.get("requests_hit"), 9.0);
        assert_eq!(
            (f.facts.get("population_hits"), f.facts.get("windows")),
            (9.0, 3.0)
        );
    }

    #[test]
    fn a_fix_that_quotes_numbers_is_told_again_from_the_captures() {
        let pool = |hits, peak: Option<f64>| {
            let mut f = queued(hits, 11.0, 5.0, 40_000.0);
            f.protocol = Some(whyslow_model::Protocol::Postgres);
            if let Some(peak) = peak {
                f.facts.set("peak_demand", peak);
            }
            f.fix = "the window's own".into();
            f
        };
        // The worst window (5 requests) saw 12 calls wanted at once; a
        // lesser one saw 30.
        let mut m = MergedFindings::default();
        m.add(vec![pool(5, Some(12.0))]);
        m.add(vec![pool(1, Some(30.0))]);
        let f = &m.finish()[0];
        assert!(
            f.summary.contains("at least 30 calls wanted"),
            "{}",
            f.summary
        );
        assert!(
            f.fix
                .starts_with("raise the pool's size for 127.0.0.1:5432 toward 30 connections"),
            "{}",
            f.fix
        );
    }

    #[test]
    fn a_sentence_counts_the_connections_of_windows_it_did_not_show_in() {
        let server = Subject::from("127.0.0.1:80");
        let population = |hits, of| Population {
            min_of: 5,
            ..Population::share_of(hits, of, 0.8)
        };
        let short = Finding {
            kind: FindingKind::NoKeepalive,
            subject: server.clone(),
            occurrences: 8,
            facts: Facts::of(&[("connections", 8.0)]),
            population: Some(population(8, 8)),
            ..finding(8_000, 8, "127.0.0.1:80")
        };
        let mut m = MergedFindings::default();
        m.add(vec![short]);
        m.add(vec![Finding::tally(
            FindingKind::NoKeepalive,
            server,
            population(0, 1),
        )]);
        let f = m.finish();
        assert!(
            f[0].summary
                .starts_with("8 of 9 connections to 127.0.0.1:80"),
            "{f:?}"
        );
    }

    #[test]
    fn evidence_stays_bounded_over_many_windows() {
        let mut m = MergedFindings::default();
        for _ in 0..100 {
            m.add(vec![finding(10, 1, "a:1")]);
        }
        let out = m.finish();
        assert_eq!(out[0].evidence.len(), MAX_EVIDENCE);
        assert_eq!(out[0].occurrences, 100);
    }

    #[test]
    fn breakdowns_are_weighted_by_requests() {
        let b = |requests, total_us| TimeBreakdown {
            server: "s".into(),
            request: "GET /".into(),
            requests,
            total_us,
            server_us: total_us,
            queued_us: 0,
            ambiguous_us: 0,
            backing: Vec::new(),
            network_us: 0,
            server_share: 1.0,
            queued_share: 0.0,
            ambiguous_share: 0.0,
            network_share: 0.0,
        };
        let mut m = MergedBreakdowns::default();
        m.add(vec![b(1, 1_000)]);
        m.add(vec![b(3, 5_000)]);
        let out = m.finish();
        assert_eq!((out[0].requests, out[0].total_us), (4, 4_000));
    }
}
