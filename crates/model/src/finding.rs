use crate::Subject;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The numbers a sentence quotes (a finding's summary, an evidence note),
/// by name, so that a program reads every number a person reads: times in
/// `_us`, sizes in `_bytes`, shares as fractions.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Facts(pub BTreeMap<String, f64>);

impl Facts {
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Each `(name, value)`.
    pub fn of(pairs: &[(&str, f64)]) -> Facts {
        Facts(pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect())
    }

    /// Adds `name` = `value`.
    pub fn with(mut self, name: &str, value: f64) -> Facts {
        self.set(name, value);
        self
    }

    /// Sets `name` = `value`.
    pub fn set(&mut self, name: &str, value: f64) {
        self.0.insert(name.to_string(), value);
    }

    /// `name`'s value, 0 when it was not said.
    pub fn get(&self, name: &str) -> f64 {
        self.0.get(name).copied().unwrap_or(0.0)
    }
}

/// Stable identifiers of what whyslow can diagnose (listed in
/// docs/report-schema.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FindingKind {
    NagleDelayedAck,
    TcpRetransmission,
    ZeroWindow,
    NoKeepalive,
    TlsFullHandshake,
    PoolQueueing,
    StreamQueueing,
    PipelineHol,
    NPlusOne,
    DuplicateCalls,
    SequentialCalls,
    SlowDependency,
    PeriodicStall,
    LargeResponse,
    ServerTime,
    GeneratorSaturated,
    HostSaturated,
    CoordinatedOmission,
    DnsPerCall,
    DnsSearchExpansion,
    DnsTimeout,
    SlowResolver,
}

impl FindingKind {
    /// Whether it is about the measurement (the load generator or the host
    /// could not keep up), not a cause in the target.
    pub fn is_about_measurement(self) -> bool {
        matches!(
            self,
            FindingKind::GeneratorSaturated | FindingKind::HostSaturated
        )
    }

    /// Every kind, in the order they are declared.
    pub const ALL: [FindingKind; 22] = [
        FindingKind::NagleDelayedAck,
        FindingKind::TcpRetransmission,
        FindingKind::ZeroWindow,
        FindingKind::NoKeepalive,
        FindingKind::TlsFullHandshake,
        FindingKind::PoolQueueing,
        FindingKind::StreamQueueing,
        FindingKind::PipelineHol,
        FindingKind::NPlusOne,
        FindingKind::DuplicateCalls,
        FindingKind::SequentialCalls,
        FindingKind::SlowDependency,
        FindingKind::PeriodicStall,
        FindingKind::LargeResponse,
        FindingKind::ServerTime,
        FindingKind::GeneratorSaturated,
        FindingKind::HostSaturated,
        FindingKind::CoordinatedOmission,
        FindingKind::DnsPerCall,
        FindingKind::DnsSearchExpansion,
        FindingKind::DnsTimeout,
        FindingKind::SlowResolver,
    ];

    /// Whether only packets show it (segments, ACKs, windows, handshakes,
    /// bytes on the wire): a source without packets, such as spans, cannot
    /// name it.
    pub fn needs_packets(self) -> bool {
        matches!(
            self,
            FindingKind::NagleDelayedAck
                | FindingKind::TcpRetransmission
                | FindingKind::ZeroWindow
                | FindingKind::NoKeepalive
                | FindingKind::TlsFullHandshake
                | FindingKind::LargeResponse
                | FindingKind::DnsPerCall
                | FindingKind::DnsSearchExpansion
                | FindingKind::DnsTimeout
                | FindingKind::SlowResolver
        )
    }

    pub fn as_str(self) -> &'static str {
        match self {
            FindingKind::NagleDelayedAck => "nagle_delayed_ack",
            FindingKind::TcpRetransmission => "tcp_retransmission",
            FindingKind::ZeroWindow => "zero_window",
            FindingKind::NoKeepalive => "no_keepalive",
            FindingKind::TlsFullHandshake => "tls_full_handshake",
            FindingKind::PoolQueueing => "pool_queueing",
            FindingKind::StreamQueueing => "stream_queueing",
            FindingKind::PipelineHol => "pipeline_hol",
            FindingKind::NPlusOne => "n_plus_one",
            FindingKind::DuplicateCalls => "duplicate_calls",
            FindingKind::SequentialCalls => "sequential_calls",
            FindingKind::SlowDependency => "slow_dependency",
            FindingKind::PeriodicStall => "periodic_stall",
            FindingKind::LargeResponse => "large_response",
            FindingKind::ServerTime => "server_time",
            FindingKind::GeneratorSaturated => "generator_saturated",
            FindingKind::HostSaturated => "host_saturated",
            FindingKind::CoordinatedOmission => "coordinated_omission",
            FindingKind::DnsPerCall => "dns_per_call",
            FindingKind::DnsSearchExpansion => "dns_search_expansion",
            FindingKind::DnsTimeout => "dns_timeout",
            FindingKind::SlowResolver => "slow_resolver",
        }
    }
}

impl std::fmt::Display for FindingKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    Info,
    Warning,
    Critical,
}

/// What a person needs to believe a finding: where to look in the capture or run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Evidence {
    Connection {
        id: u32,
        client: String,
        server: String,
    },
    Packets {
        connection: u32,
        /// Packet numbers as Wireshark shows them (1-based).
        packets: Vec<u64>,
        at_us: u64,
        note: String,
        /// The numbers `note` quotes.
        #[serde(default, skip_serializing_if = "Facts::is_empty")]
        facts: Facts,
    },
    Exchange {
        id: u32,
        request: String,
        note: String,
        /// The numbers `note` quotes.
        #[serde(default, skip_serializing_if = "Facts::is_empty")]
        facts: Facts,
    },
    Measurement {
        note: String,
        /// The numbers `note` quotes.
        #[serde(default, skip_serializing_if = "Facts::is_empty")]
        facts: Facts,
    },
    /// Backing calls one inbound request made to one server, on the
    /// connections (lanes) they ran on.
    Calls {
        /// The inbound exchange the calls were made for.
        inbound: u32,
        server: String,
        calls: u32,
        /// Most calls in flight at once: the pool size seen on the wire.
        in_flight_max: u32,
        /// Exchange ids per connection, in start order.
        lanes: Vec<Vec<u32>>,
        note: String,
        /// The numbers `note` quotes.
        #[serde(default, skip_serializing_if = "Facts::is_empty")]
        facts: Facts,
    },
    /// A request that waited behind earlier ones on the same connection.
    Queued {
        connection: u32,
        /// The exchange that waited, and its normalized request.
        exchange: u32,
        request: String,
        /// The exchanges still in its way when it was sent, oldest first
        /// (the first few).
        ahead: Vec<u32>,
        /// Request and response bytes of the exchanges in its way.
        bytes_ahead: u64,
        waited_us: u64,
        note: String,
        /// The numbers `note` quotes.
        #[serde(default, skip_serializing_if = "Facts::is_empty")]
        facts: Facts,
    },
}

/// A named cause, with the time it cost and the evidence for it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Finding {
    pub kind: FindingKind,
    pub severity: Severity,
    /// One line a person reads first.
    pub summary: String,
    /// Time lost summed over every occurrence.
    pub time_lost_us: u64,
    /// Typical (median) time lost per affected request or occurrence.
    pub time_lost_per_occurrence_us: u64,
    pub occurrences: u32,
    pub evidence: Vec<Evidence>,
    /// What to change, in one or two sentences.
    pub fix: String,
    /// No inbound request waited for it: reported, never ranked as the cause.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub background: bool,
    /// Produced by another finding's cause (a pool queue that an N+1's
    /// statements make, holding each connection longer): ranked after
    /// every cause, however much time it shows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub symptom_of: Option<FindingKind>,
    /// What the finding is about beyond its kind, where its evidence does
    /// not say it alone: "127.0.0.1:5432 SELECT … WHERE id = $1" for one
    /// statement fingerprint of a server. Findings of one kind and subject
    /// from several windows of a capture merge into one; empty: the server
    /// or request its first evidence names.
    #[serde(default, skip_serializing_if = "Subject::is_empty")]
    pub subject: Subject,
    /// The numbers `summary` quotes beyond the fields above.
    #[serde(default, skip_serializing_if = "Facts::is_empty")]
    pub facts: Facts,
    /// The population a cause must be common in to be named (the requests
    /// that called a server, …): judged once, over everything analyzed
    /// (`Population::judged`). None: the evidence names it alone.
    #[serde(skip)]
    pub population: Option<Population>,
    /// The protocol of the server it is about, where its fix's words depend
    /// on it (an HTTP client's connection limit, a database pool's size):
    /// so that the fix is told again from the capture's numbers.
    #[serde(skip)]
    pub protocol: Option<crate::Protocol>,
}

/// How common a cause is: in `hits` of `of` (requests, connections,
/// calls); named when at least `min_hits` and a `share` of at least
/// `min_of`, and no more than `at_most` of them (a cause that must be rare:
/// a stall among a service's calls).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Population {
    pub hits: u64,
    pub of: u64,
    pub share: f64,
    pub min_hits: u64,
    pub min_of: u64,
    pub at_most: f64,
}

impl Population {
    /// `hits` of `of`, named from `share` of them (and one hit at least).
    pub fn share_of(hits: usize, of: usize, share: f64) -> Self {
        Population {
            hits: hits as u64,
            of: of as u64,
            share,
            min_hits: 1,
            min_of: 0,
            at_most: 1.0,
        }
    }

    pub fn judged(&self) -> bool {
        self.hits >= self.min_hits
            && self.of >= self.min_of
            && self.hits as f64 >= self.share * self.of as f64
            && self.hits as f64 <= self.at_most * self.of as f64
    }

    /// The population of two stretches of one capture.
    pub fn add(&mut self, other: &Population) {
        self.hits += other.hits;
        self.of += other.of;
    }
}

impl Finding {
    /// A cause of `kind`: no occurrence, no evidence and no subject yet (a
    /// detector fills those in).
    pub fn new(kind: FindingKind, severity: Severity, summary: String, fix: &str) -> Self {
        Finding {
            kind,
            severity,
            summary,
            time_lost_us: 0,
            time_lost_per_occurrence_us: 0,
            occurrences: 0,
            evidence: Vec::new(),
            fix: fix.into(),
            background: false,
            symptom_of: None,
            subject: Subject::default(),
            facts: Facts::default(),
            population: None,
            protocol: None,
        }
    }

    /// What a detector judging a population saw of `subject` where the
    /// cause did not show: its population alone (`hits` 0), which the
    /// capture's judgement adds up. Never a finding itself.
    pub fn tally(kind: FindingKind, subject: Subject, population: Population) -> Self {
        let mut f = Finding::new(kind, Severity::Info, String::new(), "");
        f.subject = subject;
        f.population = Some(population);
        f
    }

    /// Whether nothing seen so far holds this finding back: no population,
    /// or one that names it. A tally never is.
    pub fn judged(&self) -> bool {
        self.population.as_ref().is_none_or(Population::judged)
    }

    /// What the finding cost, from each occurrence's loss: their sum, their
    /// median (nearest rank) and their count.
    pub fn losing(mut self, each_us: &[u64]) -> Self {
        self.time_lost_us = each_us.iter().sum();
        self.time_lost_per_occurrence_us = crate::stats::median(each_us.to_vec());
        self.occurrences = u32::try_from(each_us.len()).unwrap_or(u32::MAX);
        self
    }
}

impl Finding {
    /// Ranks findings: what inbound requests waited for first, causes
    /// before their symptoms, then most time lost.
    pub fn sort(findings: &mut [Finding]) {
        findings.sort_by(|a, b| {
            a.background
                .cmp(&b.background)
                .then(a.symptom_of.is_some().cmp(&b.symptom_of.is_some()))
                .then(b.time_lost_us.cmp(&a.time_lost_us))
                .then(b.severity.cmp(&a.severity))
        });
    }
}
