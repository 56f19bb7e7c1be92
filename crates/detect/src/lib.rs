//! Detectors: pure functions of what was measured, one file each, no I/O.
//! Each names a cause (a `FindingKind`) with the time it cost and evidence.

pub mod attribution;
pub mod background;
pub mod breakdown;
pub mod critical_path;
pub mod damage;
pub mod dns_lookups;
pub mod dns_per_call;
pub mod dns_search_expansion;
pub mod dns_timeout;
pub mod duplicate_calls;
pub mod exchange_groups;
pub mod host_saturation;
pub mod intervals;
pub mod large_response;
pub mod merge;
pub mod n_plus_one;
pub mod nagle_delayed_ack;
pub mod no_keepalive;
pub mod periodic_stall;
pub mod pipeline;
pub mod pipeline_hol;
pub mod pool_ambiguous;
pub mod pool_queueing;
pub mod pools;
pub mod probe_pattern;
pub mod request_calls;
pub mod request_findings;
pub mod sentence;
pub mod sequential_calls;
pub mod server_time;
pub mod slow_dependency;
pub mod slow_resolver;
pub mod sql_summary;
pub mod stall_coverage;
pub mod statements;
pub mod stream_queueing;
pub mod streams;
pub mod symptoms;
pub mod tcp_retransmission;
#[cfg(test)]
mod testkit;
pub mod thresholds;
pub mod tls_full_handshake;
pub mod windowed;
pub mod zero_window;

use dns_lookups::Queries;
use foldhash::HashMap;
use pools::Pools;
use request_calls::{Call, RequestCalls};
use whyslow_model::{Finding, HostSample, Protocol, Protocols, RequestPhases, Timeline};

/// What every detector reads: one stretch of a capture and what the
/// pipeline built from it once for all of them.
pub struct Measured<'a> {
    pub timeline: &'a Timeline,
    /// Its inbound requests with their calls (`request_calls::by_request`).
    pub requests: &'a [RequestCalls<'a>],
    /// Runs on held connections whose request was not told apart
    /// (`request_calls::ambiguous_runs`).
    pub ambiguous_runs: &'a [Vec<Call<'a>>],
    /// Each server's client pool (`pools::of`).
    pub pools: &'a Pools,
    /// HTTP/2 connections at a stream limit, by connection (`streams::of`).
    pub streams: HashMap<u32, streams::Limit>,
    /// Its DNS queries as the DNS detectors read them.
    pub dns: Queries<'a>,
}

impl<'a> Measured<'a> {
    pub fn of(
        timeline: &'a Timeline,
        requests: &'a [RequestCalls<'a>],
        ambiguous_runs: &'a [Vec<Call<'a>>],
        pools: &'a Pools,
    ) -> Self {
        let speaks = Protocols::of(&timeline.exchanges);
        Measured {
            timeline,
            requests,
            ambiguous_runs,
            pools,
            streams: match speaks.has(Protocol::Http2) {
                true => streams::of(timeline),
                false => HashMap::default(),
            },
            dns: match speaks.has(Protocol::Dns) {
                true => Queries::of(timeline),
                false => Queries::default(),
            },
        }
    }
}

/// The one contract of a detector: a pure function of what was measured
/// to the causes it names.
pub type Detector = fn(&Measured) -> Vec<Finding>;

/// A detector that weighs what the detectors before it named: it adds or
/// marks findings, never reads anything but `Measured` and them.
pub type Weigher = fn(&Measured, &mut Vec<Finding>);

/// Every detector, grouped by the part of `Measured` it reads. Their order
/// is the order of findings that rank the same. Laid out as a table.
#[rustfmt::skip]
pub const DETECTORS: &[Detector] = &[
    // Packets and exchanges on the timeline.
    |m| pipeline_hol::detect(m.timeline), |m| nagle_delayed_ack::detect(m.timeline),
    |m| tcp_retransmission::detect(m.timeline), |m| zero_window::detect(m.timeline),
    |m| no_keepalive::detect(m.timeline), |m| tls_full_handshake::detect(m.timeline),
    |m| dns_per_call::detect(m.timeline),
    // DNS queries paired with their answers.
    |m| dns_search_expansion::detect(&m.dns), |m| dns_timeout::detect(&m.dns), |m| slow_resolver::detect(&m.dns),
    // Each request's calls.
    |m| pool_queueing::detect(m.requests), |m| stream_queueing::detect(m.requests),
    |m| sequential_calls::detect(m.requests), |m| slow_dependency::detect(m.requests),
    |m| server_time::detect(m.requests), |m| large_response::detect(m.requests),
    |m| n_plus_one::detect(m.requests), |m| duplicate_calls::detect(m.requests),
    |m| periodic_stall::detect(m.requests),
    // Pools and stream limits, across calls not told apart.
    |m| pool_ambiguous::detect(m.pools, m.requests),
    |m| pool_ambiguous::detect_streams(&m.streams, m.timeline, m.requests),
];

/// The weighers, in this order: an N+1 named from requests told apart is
/// not named again from runs not told apart; then the service's own time
/// spent in N+1 loops is marked as that N+1's symptom. (A queue named both
/// from requests told apart and across a pool's calls is named once, and a
/// queue behind an N+1 marked, by the capture's judgement, `merge`.)
pub const WEIGHERS: &[Weigher] = &[
    |m, f| {
        let in_runs = n_plus_one::in_ambiguous_runs(m.ambiguous_runs, f);
        f.extend(in_runs);
    },
    |m, f| symptoms::mark(f, m.requests),
];

/// Every detector, then every weigher, over `m`: the findings unranked and
/// not judged (a cause that must be common carries its population, and
/// tallies come with them): `MergedFindings::finish` judges and ranks, as
/// `merge::judge` and `Finding::sort` do for one stretch alone.
pub fn run_all(m: &Measured) -> Vec<Finding> {
    let mut findings: Vec<Finding> = DETECTORS.iter().flat_map(|detect| detect(m)).collect();
    for weigh in WEIGHERS {
        weigh(m, &mut findings);
    }
    findings
}

/// What client timings alone suggest (`probe`): suspects for a capture to
/// confirm. `target`: the URL, without credentials, that a finding's fix names.
pub fn probe_findings(requests: &[RequestPhases], target: &str) -> Vec<Finding> {
    probe_pattern::delayed_ack_finding(requests, target)
        .into_iter()
        .collect()
}

/// What the host's USE samples during a run say (`use`, `load`,
/// `diagnose`): one finding per saturated resource.
pub fn host_findings(samples: &[HostSample]) -> Vec<Finding> {
    host_saturation::detect(samples)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every detector and weigher over `t` and its `requests`, ranked.
    pub fn ranked(t: &Timeline, requests: &[RequestCalls]) -> Vec<Finding> {
        let pools = Pools::default();
        let mut f = run_all(&Measured::of(t, requests, &[], &pools));
        merge::judge(&mut f);
        Finding::sort(&mut f);
        f
    }
}
