//! Request-level findings share one shape: each affected inbound request
//! contributes what it lost and its evidence; the finding sums the loss,
//! quotes the median per request and keeps the first pieces of evidence.

use crate::calls::median;
use whyslow_model::{Evidence, Finding, FindingKind, Severity};

/// Requests kept as evidence (the JSON report carries them all up to this).
/// A detector whose hits are many writes evidence (notes, lists) for the
/// first this many only: `finding` drops the rest's.
pub const EVIDENCE_KEPT: usize = 20;

/// What one request lost to a cause, the evidence, and the numbers the
/// finding's summary quotes.
#[derive(Debug, Clone)]
pub struct Hit<T> {
    pub lost_us: u64,
    pub evidence: Evidence,
    pub facts: T,
}

/// The median of one of the hits' facts.
pub fn median_of<T>(hits: &[Hit<T>], fact: impl Fn(&T) -> u64) -> u64 {
    median(hits.iter().map(|h| fact(&h.facts)).collect())
}

/// A finding from its hits. `summary` gets the hits and the median loss.
pub fn finding<T>(
    kind: FindingKind,
    severity: Severity,
    hits: Vec<Hit<T>>,
    summary: impl FnOnce(&[Hit<T>], u64) -> String,
    fix: String,
) -> Finding {
    let per = median(hits.iter().map(|h| h.lost_us).collect());
    Finding {
        kind,
        severity,
        summary: summary(&hits, per),
        time_lost_us: hits.iter().map(|h| h.lost_us).sum(),
        time_lost_per_occurrence_us: per,
        occurrences: hits.len() as u32,
        evidence: hits
            .into_iter()
            .take(EVIDENCE_KEPT)
            .map(|h| h.evidence)
            .collect(),
        fix,
        background: false,
    }
}
