//! Detectors: pure functions of what was measured, one file each, no I/O.
//! Each names a cause from DESIGN's vocabulary with the time it cost and evidence.

pub mod attribution;
pub mod background;
pub mod breakdown;
pub mod critical_path;
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
pub mod pool_queueing;
pub mod pool_untold;
pub mod pools;
pub mod probe_pattern;
pub mod request_calls;
pub mod request_findings;
pub mod sequential_calls;
pub mod server_time;
pub mod slow_dependency;
pub mod slow_resolver;
pub mod sql_summary;
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

use request_calls::RequestCalls;
use whyslow_model::{Finding, HostSample, RequestPhases, Timeline};

/// Runs every detector and ranks the findings by time lost. `requests`:
/// the timeline's inbound requests with their calls (`request_calls::by_request`);
/// `untold_runs`: runs on held connections whose request was not told
/// apart (`request_calls::untold_runs`).
pub fn run_all(
    timeline: &Timeline,
    requests: &[RequestCalls],
    untold_runs: &[Vec<request_calls::Call>],
    pools: &pools::Pools,
) -> Vec<Finding> {
    let mut findings = Vec::new();
    for detect in DETECTORS {
        findings.extend(detect(timeline));
    }
    let dns = dns_lookups::Queries::of(timeline);
    if !dns.all.is_empty() {
        for detect in DNS_DETECTORS {
            findings.extend(detect(&dns));
        }
    }
    for detect in REQUEST_DETECTORS {
        findings.extend(detect(requests));
    }
    let in_runs = n_plus_one::in_untold_runs(untold_runs, &mut findings);
    findings.extend(in_runs);
    let untold_pools = pool_untold::detect(pools, requests, &findings);
    findings.extend(untold_pools);
    let limits = streams::of(timeline);
    let untold_streams = pool_untold::detect_streams(&limits, timeline, requests, &findings);
    findings.extend(untold_streams);
    symptoms::mark(&mut findings, requests);
    Finding::sort(&mut findings);
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

/// Every detector over a timeline (after attribution set roles and
/// parents), in no particular order.
pub const DETECTORS: &[fn(&Timeline) -> Vec<Finding>] = &[
    pipeline_hol::detect,
    nagle_delayed_ack::detect,
    tcp_retransmission::detect,
    zero_window::detect,
    no_keepalive::detect,
    tls_full_handshake::detect,
    dns_per_call::detect,
];

/// Every detector over a timeline's DNS queries, in no particular order.
pub const DNS_DETECTORS: &[fn(&dns_lookups::Queries) -> Vec<Finding>] = &[
    dns_search_expansion::detect,
    dns_timeout::detect,
    slow_resolver::detect,
];

/// A detector over inbound requests and the calls made for them.
pub type RequestDetector = fn(&[RequestCalls]) -> Vec<Finding>;

/// Every request detector, in no particular order.
pub const REQUEST_DETECTORS: &[RequestDetector] = &[
    pool_queueing::detect,
    stream_queueing::detect,
    sequential_calls::detect,
    slow_dependency::detect,
    server_time::detect,
    large_response::detect,
    n_plus_one::detect,
    duplicate_calls::detect,
    periodic_stall::detect,
];
