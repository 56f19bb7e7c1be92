//! Request-level findings share one shape: each affected inbound request
//! contributes what it lost and its evidence; the finding sums the loss,
//! quotes the median per request and keeps the first pieces of evidence.

use crate::request_calls::median;
use crate::sentence::Sentence;
use crate::thresholds::requests_seen;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use whyslow_model::{Evidence, Facts, Finding, FindingKind, Protocol, Severity, Subject};

/// Requests kept as evidence (the JSON report carries them all up to this).
pub const EVIDENCE_KEPT: usize = 20;

/// What one request lost to a cause, the evidence (for the hits a finding
/// keeps it for, see `push`), and the numbers the finding's summary quotes.
#[derive(Debug, Clone)]
pub struct Hit<T> {
    pub lost_us: u64,
    pub evidence: Option<Evidence>,
    pub facts: T,
}

/// Adds a hit to a finding's `hits`, its evidence built (from its facts)
/// only when it is among the first `EVIDENCE_KEPT`, the ones `finding`
/// keeps. A pipelined capture has thousands of hits, and each evidence is a
/// formatted note.
pub fn push<T>(
    hits: &mut Vec<Hit<T>>,
    lost_us: u64,
    facts: T,
    evidence: impl FnOnce(&T) -> Evidence,
) {
    let evidence = (hits.len() < EVIDENCE_KEPT).then(|| evidence(&facts));
    hits.push(Hit {
        lost_us,
        evidence,
        facts,
    });
}

/// The median of one of the hits' facts.
pub fn median_of<T>(hits: &[Hit<T>], fact: impl Fn(&T) -> u64) -> u64 {
    median(hits.iter().map(|h| fact(&h.facts)).collect())
}

/// One finding per server some requests hit (`finding`), each to be judged
/// against the requests that called that server (`callers`, by server in
/// order); a tally for each server called and never hit, whose requests
/// the capture's judgement counts too.
pub fn per_server<T>(
    kind: FindingKind,
    callers: impl IntoIterator<Item = (SocketAddr, usize)>,
    mut hits: BTreeMap<SocketAddr, Vec<Hit<T>>>,
    mut finding: impl FnMut(SocketAddr, Vec<Hit<T>>) -> Finding,
) -> Vec<Finding> {
    callers
        .into_iter()
        .map(|(server, of)| match hits.remove(&server) {
            Some(h) => {
                let seen = requests_seen(h.len(), of);
                let mut f = finding(server, h);
                f.subject = Subject::server(server);
                f.population = Some(seen);
                f
            }
            None => Finding::tally(kind, Subject::server(server), requests_seen(0, of)),
        })
        .collect()
}

/// `median_of`, quoted in the finding's facts as `name`.
pub fn quote_median<T>(
    hits: &[Hit<T>],
    fact: impl Fn(&T) -> u64,
    name: &str,
    facts: &mut Facts,
) -> u64 {
    let m = median_of(hits, fact);
    facts.set(name, m as f64);
    m
}

/// A finding from its hits about `server` (speaking `protocol`, where its
/// words name it): `facts` sets what its sentence quotes, and the sentence
/// is told from them (`Sentence`).
pub fn told<T>(
    kind: FindingKind,
    severity: Severity,
    (server, protocol): (SocketAddr, Option<Protocol>),
    hits: Vec<Hit<T>>,
    facts: impl FnOnce(&[Hit<T>], &mut Facts),
    sentence: &Sentence,
    fix: &str,
) -> Finding {
    let quoted = |hits: &[Hit<T>], _, quoted: &mut Facts| {
        facts(hits, quoted);
        String::new()
    };
    let mut f = finding(kind, severity, hits, quoted, fix);
    f.subject = Subject::server(server);
    f.protocol = protocol;
    sentence.tell(&mut f);
    f
}

/// A finding from its hits. `summary` gets the hits and the median loss.
pub fn finding<T>(
    kind: FindingKind,
    severity: Severity,
    hits: Vec<Hit<T>>,
    summary: impl FnOnce(&[Hit<T>], u64, &mut Facts) -> String,
    fix: &str,
) -> Finding {
    let per = median(hits.iter().map(|h| h.lost_us).collect());
    // What every summary quotes: the loss per occurrence and the requests
    // hit (they stay as said when windows merge); a summary adds its own.
    let mut facts = Facts::default()
        .with("per_occurrence_us", per as f64)
        .with("requests_hit", hits.len() as f64);
    let summary = summary(&hits, per, &mut facts);
    Finding {
        facts,
        time_lost_us: hits.iter().map(|h| h.lost_us).sum(),
        time_lost_per_occurrence_us: per,
        occurrences: hits.len() as u32,
        evidence: hits
            .into_iter()
            .take(EVIDENCE_KEPT)
            .filter_map(|h| h.evidence)
            .collect(),
        ..Finding::new(kind, severity, summary, fix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evidence_is_built_for_the_hits_a_finding_keeps_and_no_others() {
        let mut built = 0;
        let mut hits = Vec::new();
        for i in 0..100u64 {
            push(&mut hits, i, (), |_| {
                built += 1;
                Evidence::Measurement {
                    facts: Default::default(),
                    note: format!("hit {i}"),
                }
            });
        }
        assert_eq!(built, EVIDENCE_KEPT);
        let f = finding(
            FindingKind::ServerTime,
            Severity::Warning,
            hits,
            |_, _, _| String::new(),
            "",
        );
        assert_eq!(f.occurrences, 100);
        assert_eq!(f.time_lost_us, (0..100).sum::<u64>());
        assert_eq!(f.evidence.len(), EVIDENCE_KEPT);
        let last = format!("hit {}", EVIDENCE_KEPT - 1);
        assert!(
            matches!(&f.evidence[EVIDENCE_KEPT - 1], Evidence::Measurement { note, .. } if *note == last)
        );
    }
}
