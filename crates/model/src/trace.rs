//! Trace context: which distributed trace an exchange belonged to, and how
//! an outbound call was given to the inbound request it was made for.

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A W3C trace id (16 bytes, never all zero). Travels as 32 hex digits, as
/// in `traceparent` and in every tracing UI, so a person can paste it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TraceId(pub u128);

impl std::fmt::Display for TraceId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:032x}", self.0)
    }
}

impl Serialize for TraceId {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}

impl<'de> Deserialize<'de> for TraceId {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        u128::from_str_radix(&text, 16)
            .map(TraceId)
            .map_err(serde::de::Error::custom)
    }
}

/// How an outbound call was given to its inbound request, strongest first.
/// Sources that know more (thread ids, a span's parent) add their own level.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Attribution {
    /// The call carried the request's own trace id (W3C `traceparent`,
    /// a sqlcommenter comment): exact.
    TraceContext,
    /// The call was made by the thread that was handling the request, between
    /// reading it and answering it (an eBPF source): exact.
    Thread,
    /// The call's span has the request's server span as its nearest SERVER
    /// ancestor of the same service (spans read from OTLP): exact.
    Span,
    /// The call shares a trace id with other calls (the service started the
    /// trace): the group is exact, and it went whole to the one request that
    /// could hold it.
    TraceGroup,
    /// Inferred from the wire: only one request was waiting while the call
    /// (or the transaction it ran in) ran, or one request's arrival and
    /// answer bracket it far better than any other's.
    Inferred,
    /// Several requests could have made it: kept and counted, never used
    /// for per-request evidence.
    Ambiguous,
}

impl Attribution {
    pub const ALL: [Attribution; 6] = [
        Attribution::TraceContext,
        Attribution::Thread,
        Attribution::Span,
        Attribution::TraceGroup,
        Attribution::Inferred,
        Attribution::Ambiguous,
    ];

    /// The level in the words of the report.
    pub fn label(self) -> &'static str {
        match self {
            Attribution::TraceContext => "trace context",
            Attribution::Thread => "thread",
            Attribution::Span => "span parent",
            Attribution::TraceGroup => "trace group",
            Attribution::Inferred => "inferred",
            Attribution::Ambiguous => "ambiguous",
        }
    }
}

/// The attribution rule that gave a call to its request. The rules run in
/// this order, each placing only calls no earlier rule placed; a call none
/// placed is ambiguous (`docs/architecture.md`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Rule {
    /// The source's own word: a span's nearest server ancestor (OTLP input).
    SpanParent,
    /// The call carried the request's trace id.
    TraceContext,
    /// The call was made on the thread handling the request, or on one
    /// started for it and ended with it (eBPF).
    Thread,
    /// A trace the service started, placed whole by deduction: each request
    /// holds one trace.
    TraceGroup,
    /// A transaction on a pooled connection, placed whole by deduction:
    /// each request's session holds one connection at a time.
    Transaction,
    /// A run of calls on a connection a request held for its work (a pool
    /// checkout), placed whole by deduction.
    Checkout,
    /// A call of a fingerprint each request of one kind made once, placed
    /// by deduction among the requests of that kind.
    Fingerprint,
    /// A backing connection only one inbound connection's requests used
    /// (a thread per client connection, a backing connection per thread):
    /// given to the request on that connection that enclosed the call.
    Affinity,
    /// Only one request was waiting while the call ran.
    SoleCandidate,
    /// One request's arrival and answer bracket the call far more tightly
    /// than any other's.
    Bracket,
    /// A DNS lookup, given with the call to the address it returned that
    /// came right after it, with no other lookup or call to that address
    /// between or around them.
    Lookup,
}

impl Rule {
    /// Every rule, in the order attribution runs them.
    pub const ALL: [Rule; 11] = [
        Rule::SpanParent,
        Rule::TraceContext,
        Rule::Thread,
        Rule::TraceGroup,
        Rule::Affinity,
        Rule::Transaction,
        Rule::Checkout,
        Rule::Fingerprint,
        Rule::SoleCandidate,
        Rule::Bracket,
        Rule::Lookup,
    ];

    /// The rule's name as the JSON writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Rule::SpanParent => "span_parent",
            Rule::TraceContext => "trace_context",
            Rule::Thread => "thread",
            Rule::TraceGroup => "trace_group",
            Rule::Transaction => "transaction",
            Rule::Checkout => "checkout",
            Rule::Fingerprint => "fingerprint",
            Rule::Affinity => "affinity",
            Rule::SoleCandidate => "sole_candidate",
            Rule::Bracket => "bracket",
            Rule::Lookup => "lookup",
        }
    }
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// A thread of a process, as the kernel numbers them (`tid` equals `pid`
/// for a process's first thread).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Thread {
    pub pid: u32,
    pub tid: u32,
}

/// The bit of a task id that says it is a goroutine, not a kernel thread
/// (no thread id reaches it: the kernel's pid_max is at most 2^22). In a
/// Go process the eBPF source tells calls by goroutine, since the runtime
/// moves goroutines between threads.
pub const GOROUTINE_BIT: u32 = 1 << 31;

impl Thread {
    pub fn is_goroutine(&self) -> bool {
        self.tid & GOROUTINE_BIT != 0
    }
}

/// How a thread came to be, as an eBPF source saw it: a thread started for
/// one request and ended with it (a per-request executor's) made that
/// request's calls; a pool thread outlives the request that started it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ThreadStart {
    /// The thread that started the chain below it (the call's thread, or
    /// a thread that started it).
    pub by: Thread,
    /// When `by` started it (µs).
    pub at_us: u64,
    /// When the last thread of the chain below `by` ended; None while one
    /// outlived the capture.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_us: Option<u64>,
}

/// How the calls made for one request kind were attributed, per level.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttributionCounts {
    pub trace_context: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub thread: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub span: u64,
    pub trace_group: u64,
    pub inferred: u64,
    /// Made while several requests of this kind (and no other) waited.
    pub ambiguous: u64,
}

impl AttributionCounts {
    pub fn add(&mut self, level: Attribution) {
        *match level {
            Attribution::TraceContext => &mut self.trace_context,
            Attribution::Thread => &mut self.thread,
            Attribution::Span => &mut self.span,
            Attribution::TraceGroup => &mut self.trace_group,
            Attribution::Inferred => &mut self.inferred,
            Attribution::Ambiguous => &mut self.ambiguous,
        } += 1;
    }

    pub fn of(&self, level: Attribution) -> u64 {
        match level {
            Attribution::TraceContext => self.trace_context,
            Attribution::Thread => self.thread,
            Attribution::Span => self.span,
            Attribution::TraceGroup => self.trace_group,
            Attribution::Inferred => self.inferred,
            Attribution::Ambiguous => self.ambiguous,
        }
    }

    pub fn total(&self) -> u64 {
        self.trace_context
            + self.thread
            + self.span
            + self.trace_group
            + self.inferred
            + self.ambiguous
    }

    /// Share of the calls given to a request (not ambiguous), 0 without calls.
    pub fn coverage(&self) -> f64 {
        let total = self.total();
        if total == 0 {
            return 0.0;
        }
        (total - self.ambiguous) as f64 / total as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trace_ids_travel_as_32_hex_digits() {
        let id = TraceId(0x0af7651916cd43dd8448eb211c80319c);
        let json = serde_json::to_string(&id).unwrap();
        assert_eq!(json, "\"0af7651916cd43dd8448eb211c80319c\"");
        assert_eq!(serde_json::from_str::<TraceId>(&json).unwrap(), id);
        assert!(serde_json::from_str::<TraceId>("\"xyz\"").is_err());
    }
}

/// Where a window was cut while the service was never idle (a forced cut):
/// calls near the cut may have been made for a request on the other side
/// of it, which this window does not hold. Attribution declares them
/// ambiguous unless exact evidence (trace context, thread, span) gives them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CutEdges {
    /// Requests of the service still open at this window's end began from
    /// here: calls begun from then on may be theirs.
    pub open_from: Option<u64>,
    /// The window before ended with requests of the service answered up to
    /// here: calls begun before then may be theirs.
    pub carried_until: Option<u64>,
}

impl CutEdges {
    /// Whether a call begun at `at` may have been made for a request the
    /// window does not hold.
    pub fn near(&self, at: u64) -> bool {
        self.open_from.is_some_and(|from| at >= from)
            || self.carried_until.is_some_and(|until| at < until)
    }
}
