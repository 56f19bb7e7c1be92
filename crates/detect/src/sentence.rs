//! A finding's sentence told from its kind, subject and facts alone, for
//! the kinds whose sentence is all numbers. A window tells it from its own
//! numbers; the capture tells it again from the merged ones (`merge`), so
//! the sentence a person reads is about the same stretch as the fields
//! beside it. Other kinds keep their worst window's sentence, said so.

use whyslow_model::{Finding, FindingKind};

/// How a kind's sentence is told, and how the facts it quotes merge.
pub struct Sentence {
    /// Facts that add up across windows (counts of requests, connections).
    pub summed: &'static [&'static str],
    /// Facts that take their largest window's value (peaks).
    pub maxed: &'static [&'static str],
    /// Any other fact is a median: the windows' values, weighted by their
    /// occurrences, as the time per occurrence merges.
    pub tell: fn(&Finding) -> String,
}

/// The sentence of `kind`, where it is told from numbers alone.
pub fn of(kind: FindingKind) -> Option<&'static Sentence> {
    match kind {
        FindingKind::PoolQueueing => Some(&crate::pool_queueing::SENTENCE),
        FindingKind::StreamQueueing => Some(&crate::stream_queueing::SENTENCE),
        FindingKind::ServerTime => Some(&crate::server_time::SENTENCE),
        FindingKind::NoKeepalive => Some(&crate::no_keepalive::SENTENCE),
        _ => None,
    }
}

/// `f`'s fact `name` as a whole number.
pub fn count(f: &Finding, name: &str) -> u64 {
    f.facts.get(name).round().max(0.0) as u64
}
