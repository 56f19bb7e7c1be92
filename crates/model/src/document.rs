//! The output document of each command that has more than a `Report`: what
//! `--json` prints and every renderer (text, JSON, HTML) reads. Computed in
//! full before anything is rendered.
//!
//! probe and analyze print a `Report`; compare a `Comparison`; use a
//! `HostReport`; load and merge a `LoadDocument`; diagnose a
//! `DiagnoseDocument`; demo a `DemoDocument`.

use crate::{
    Comparison, Finding, HostReport, Knee, LoadResult, Percentiles, Report, RequestPhases,
};
use serde::{Deserialize, Serialize};

/// `load` and `merge`: the report (findings, SLO checks, errors) and the
/// run's result without its histograms (`load -o` keeps those).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LoadDocument {
    #[serde(flatten)]
    pub report: Report,
    pub load: Option<LoadResult>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub find_max: Option<Knee>,
}

/// `diagnose`: the report (one section per client write pattern, the
/// request as given first), the load phase's result when there was one, the
/// capture it ran under, and the host's USE samples during the run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DiagnoseDocument {
    #[serde(flatten)]
    pub report: Report,
    /// "GET", "POST": the method the probes used.
    pub method: String,
    /// How the request as given was written: "one write, TCP_NODELAY on".
    pub client: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load: Option<LoadResult>,
    /// The live capture the run took; what it held is the report's `capture`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub live_capture: Option<CaptureInfo>,
    pub host: HostReport,
    /// What the probes showed from the client's side, worked out before
    /// anything is rendered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_view: Option<ClientView>,
}

/// The typical request of the request as given, what a new connection
/// adds, and what splitting headers and body costs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClientView {
    /// Requests of the request as given.
    pub requests: u32,
    /// The median reused request by total (of every request when none was
    /// reused).
    pub typical: RequestPhases,
    /// The first request that opened a connection.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_new_connection: Option<RequestPhases>,
    /// Median total of the reused requests as given, and of those that
    /// split headers and body with TCP_NODELAY off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub as_given_median_us: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub split_median_us: Option<u64>,
    /// What splitting loses per request here, when it is slower.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub split_loses_us: Option<u64>,
}

impl ClientView {
    /// The view of a diagnosis' sections, when the request as given ran.
    pub fn of(report: &Report) -> Option<ClientView> {
        let requests = report.sections.first().map(|s| s.requests.as_slice())?;
        let as_given = median_reused_total(report, AS_GIVEN);
        let split = median_reused_total(report, SPLIT_NO_NODELAY);
        Some(ClientView {
            requests: requests.len() as u32,
            typical: typical(requests)?.clone(),
            first_new_connection: requests.iter().find(|r| !r.reused).cloned(),
            as_given_median_us: as_given,
            split_median_us: split,
            split_loses_us: as_given
                .zip(split)
                .and_then(|(base, split)| split.checked_sub(base))
                .filter(|lost| *lost > 0),
        })
    }
}

/// The median reused request of a section (by total), as the typical one;
/// every request when none was reused.
pub fn typical(requests: &[RequestPhases]) -> Option<&RequestPhases> {
    let mut pick: Vec<&RequestPhases> = requests.iter().filter(|r| r.reused).collect();
    if pick.is_empty() {
        pick = requests.iter().collect();
    }
    pick.sort_by_key(|r| r.total_us);
    pick.get(crate::stats::nearest_rank(pick.len(), 0.5))
        .copied()
}

/// Median total of the reused requests of a section.
pub fn median_reused_total(report: &Report, label: &str) -> Option<u64> {
    let v: Vec<u64> = report
        .section(label)?
        .iter()
        .filter(|r| r.reused)
        .map(|r| r.total_us)
        .collect();
    (!v.is_empty()).then(|| crate::stats::median(v))
}

/// Labels of diagnose's report sections: the client write patterns probed.
pub const AS_GIVEN: &str = "as given";
pub const FRESH: &str = "fresh connections";
/// How Ruby's Net::HTTP wrote POSTs in case 000.
pub const SPLIT_NO_NODELAY: &str = "split writes, TCP_NODELAY off";

/// The live capture a diagnosis ran under.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CaptureInfo {
    pub iface: String,
    /// Ports filtered in the kernel; empty: all TCP on the interface.
    pub ports: Vec<u16>,
    /// Backing services the target was connected to on this host (read
    /// from /proc while the run went on) and those given with `--port`.
    pub backing_ports: Vec<u16>,
    pub packets: u64,
    pub kernel_drops: u64,
    /// Seconds the capture ran, those of them in which the kernel dropped
    /// packets, and the most it dropped in one.
    #[serde(default)]
    pub seconds: u64,
    #[serde(default)]
    pub seconds_with_drops: u64,
    #[serde(default)]
    pub max_drops_per_second: u64,
    /// Where the capture was kept (`--save`); None when it was removed.
    pub file: Option<String>,
    /// The container or process whose network namespace was captured
    /// (`--container`, `--pid`, `--cgroup`); None: the host's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workload: Option<crate::Workload>,
    /// Who listened on each port there, when the capture ran.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub servers: Vec<crate::ServerWorkload>,
}

/// `demo`: one row per scenario run, and broken against fixed for each
/// scenario that was run both ways.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DemoDocument {
    pub schema_version: u32,
    pub command: String,
    pub rows: Vec<DemoRow>,
    #[serde(default)]
    pub comparisons: Vec<Comparison>,
    /// Each scenario run again with many clients at once.
    #[serde(default)]
    pub under_load: Vec<ConcurrentRow>,
    /// The scenarios on several hosts, each host captured apart and the
    /// captures analyzed together.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hosts: Vec<HostsRow>,
    /// Why the scenarios on several hosts did not run, if they did not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hosts_not_run: Option<String>,
}

/// One scenario on several hosts, broken or fixed: the hosts' clocks as
/// placed, and what the analysis of their captures named.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HostsRow {
    pub scenario: String,
    pub variant: String,
    pub clients: u32,
    pub hosts: Vec<crate::HostClock>,
    pub findings: Vec<crate::Finding>,
    /// What the scenario injects (broken), or nothing (fixed).
    pub declared: Vec<String>,
    /// The captures, one per host, when kept (`--save`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub capture_files: Vec<String>,
}

/// One scenario, broken or fixed, diagnosed while `clients` connections
/// send requests at once.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConcurrentRow {
    pub scenario: String,
    pub variant: String,
    pub clients: u32,
    /// Requests per second on a schedule, for a cause that shows only in
    /// many requests; none: each client sent its next request once the last
    /// was answered.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rate: Option<f64>,
    /// Latency of the load phase's requests.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub latency: Option<Percentiles>,
    pub findings: Vec<Finding>,
    /// What the scenario declares this variant shows under load: its
    /// injected cause, or what concurrency itself causes (none: nothing).
    pub declared: Vec<String>,
    /// How the backing calls were given to the requests that made them.
    pub attribution: crate::AttributionCounts,
    /// The capture it was diagnosed from, where `demo --save DIR` kept it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capture_file: Option<String>,
}

impl ConcurrentRow {
    /// The causes named in the foreground: background ones and those about
    /// the measurement aside.
    pub fn named(&self) -> impl Iterator<Item = &Finding> {
        named(&self.findings)
    }

    /// What it says about the measurement itself (a saturated generator).
    pub fn about_measurement(&self) -> impl Iterator<Item = &Finding> {
        self.findings
            .iter()
            .filter(|f| f.kind.is_about_measurement())
    }
}

impl HostsRow {
    /// The causes named in the foreground.
    pub fn named(&self) -> impl Iterator<Item = &crate::Finding> {
        named(&self.findings)
    }
}

/// The causes of `findings` named in the foreground: background ones and
/// those about the measurement aside.
fn named(findings: &[crate::Finding]) -> impl Iterator<Item = &crate::Finding> {
    findings
        .iter()
        .filter(|f| !f.background && !f.kind.is_about_measurement())
}

/// One scenario, broken or fixed, diagnosed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DemoRow {
    pub scenario: String,
    pub fixed: bool,
    /// "as is" for scenarios with nothing injected, else "broken" or "fixed".
    pub variant: String,
    pub request: String,
    /// The client pattern the scenario hurts, and its mean total per request.
    pub client: String,
    pub mean_total_us: u64,
    /// The load phase's latency (as users saw it, coordinated omission
    /// corrected), when the scenario has one: the tail the mean hides.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub load_latency: Option<Percentiles>,
    pub findings: Vec<Finding>,
    pub skipped: Vec<String>,
    pub injected: Option<String>,
    /// The capture it was diagnosed from, where `demo --save DIR` kept it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capture_file: Option<String>,
    /// The whole diagnosis, for the HTML page; `--json` keeps the rows short.
    #[serde(skip)]
    pub report: Option<Report>,
}

impl DemoRow {
    /// The finding ranked first, background ones aside: what the row names as the cause.
    pub fn top(&self) -> Option<&Finding> {
        self.findings.iter().find(|f| !f.background)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(index: u32, reused: bool, total_us: u64) -> RequestPhases {
        RequestPhases {
            index,
            reused,
            total_us,
            ..RequestPhases::default()
        }
    }

    #[test]
    fn the_typical_request_is_the_median_reused_one() {
        let rs = [
            req(0, false, 900),
            req(1, true, 30),
            req(2, true, 10),
            req(3, true, 20),
        ];
        assert_eq!(typical(&rs).unwrap().index, 3);
        assert_eq!(typical(&rs[..1]).unwrap().index, 0);
        assert!(typical(&[]).is_none());
    }
}
