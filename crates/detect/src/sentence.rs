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
    /// Its fix, where the fix quotes numbers too ("raise it to at least
    /// N"): told with the sentence. None: the fix is words alone.
    pub fix: Option<fn(&Finding) -> String>,
}

impl Sentence {
    /// Told by `tell`, the counts in `summed` added up, any other fact a
    /// median.
    pub const fn summing(summed: &'static [&'static str], tell: fn(&Finding) -> String) -> Self {
        Sentence {
            summed,
            maxed: &[],
            tell,
            fix: None,
        }
    }

    /// `f`'s sentence, and its fix where that quotes numbers, told from its
    /// subject and facts: a window's, or the capture's once merged.
    pub fn tell(&self, f: &mut Finding) {
        f.summary = (self.tell)(f);
        if let Some(fix) = self.fix {
            f.fix = fix(f);
        }
    }
}

/// Every request-level finding's count of the requests it hit.
pub const REQUESTS_HIT: &[&str] = &["requests_hit"];

/// "(median of N requests)": the requests `f` hit.
pub fn median_of_requests(f: &Finding) -> String {
    format!("(median of {} requests)", f.occurrences)
}

/// "X of this request's Y": the median loss and request time.
pub fn of_this_request(f: &Finding) -> String {
    let per = whyslow_model::fmt_ms(f.time_lost_per_occurrence_us);
    format!(
        "{per} of this request's {}",
        whyslow_model::fmt_ms(count(f, "request_us"))
    )
}

/// The sentence of `f`'s kind, where it is told from numbers alone. A
/// pool or a stream limit judged across its calls (`pool_ambiguous`, named
/// on its evidence alone, no population) tells its own, though of a kind
/// told from numbers.
pub fn of(f: &Finding) -> Option<&'static Sentence> {
    let on_requests = f.population.is_some();
    match f.kind {
        FindingKind::PoolQueueing if on_requests => Some(&crate::pool_queueing::SENTENCE),
        FindingKind::StreamQueueing if on_requests => Some(&crate::stream_queueing::SENTENCE),
        FindingKind::ServerTime => Some(&crate::server_time::SENTENCE),
        FindingKind::NoKeepalive => Some(&crate::no_keepalive::SENTENCE),
        FindingKind::NPlusOne => Some(&crate::n_plus_one::SENTENCE),
        FindingKind::DuplicateCalls => Some(&crate::duplicate_calls::SENTENCE),
        FindingKind::SequentialCalls => Some(&crate::sequential_calls::SENTENCE),
        FindingKind::SlowDependency => Some(&crate::slow_dependency::SENTENCE),
        _ => None,
    }
}

/// `f`'s fact `name` as a whole number.
pub fn count(f: &Finding, name: &str) -> u64 {
    f.facts.get(name).round().max(0.0) as u64
}

/// Where `f` is: its subject's server or client, empty for none.
pub fn place(f: &Finding) -> String {
    f.subject.at.map_or(String::new(), |p| p.to_string())
}
