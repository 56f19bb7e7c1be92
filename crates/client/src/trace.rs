//! A fresh W3C `traceparent` on each request the client makes, so that an
//! instrumented service's calls (its own outgoing `traceparent`, its
//! sqlcommenter comments) name the request they were made for.

use std::cell::Cell;

/// Whether requests carry a fresh `traceparent`, and how it is flagged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TraceContext {
    /// Sampled (flags 01): an instrumented service records the trace and
    /// comments its SQL with it. For a few requests (probe, diagnose).
    Sampled,
    /// Not sampled (flags 00): the service propagates it but records
    /// nothing, so a load run does not flood its tracing.
    Unsampled,
    Off,
}

impl TraceContext {
    /// The command line's names, in order.
    pub const NAMES: [&'static str; 3] = ["sampled", "unsampled", "off"];

    /// The mode a name in NAMES stands for (anything else: off).
    pub fn named(name: &str) -> TraceContext {
        match name {
            "sampled" => TraceContext::Sampled,
            "unsampled" => TraceContext::Unsampled,
            _ => TraceContext::Off,
        }
    }

    fn flags(self) -> &'static str {
        match self {
            TraceContext::Sampled => "01",
            _ => "00",
        }
    }
}

/// Length of a version-00 `traceparent` value.
pub const VALUE_LEN: usize = 55;

thread_local! {
    /// splitmix64 state, seeded per thread from the standard library's
    /// random hash keys: ids need to be unique, not secret.
    static STATE: Cell<u64> = Cell::new(seed());
}

fn seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish()
}

fn next() -> u64 {
    STATE.with(|s| {
        let x = s.get().wrapping_add(0x9e3779b97f4a7c15);
        s.set(x);
        let mut z = x;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58476d1ce4e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d049bb133111eb);
        z ^ (z >> 31)
    })
}

/// A fresh `traceparent` value: random trace and parent ids (never zero).
pub fn fresh(mode: TraceContext) -> String {
    let trace = (u128::from(next()) << 64 | u128::from(next())).max(1);
    let parent = next().max(1);
    format!("00-{trace:032x}-{parent:016x}-{}", mode.flags())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fresh_values_parse_and_differ() {
        let a = fresh(TraceContext::Sampled);
        let b = fresh(TraceContext::Unsampled);
        assert_eq!(a.len(), VALUE_LEN);
        let pa = whyslow_proto::trace_context::traceparent(a.as_bytes()).unwrap();
        let pb = whyslow_proto::trace_context::traceparent(b.as_bytes()).unwrap();
        assert!(pa.sampled && !pb.sampled);
        assert_ne!(pa.trace_id, pb.trace_id);
        let many: std::collections::HashSet<String> =
            (0..10_000).map(|_| fresh(TraceContext::Off)).collect();
        assert_eq!(many.len(), 10_000);
    }
}
