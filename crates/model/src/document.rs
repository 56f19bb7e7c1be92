//! The output document of each command that has more than a `Report`: what
//! `--json` prints and every renderer (text, JSON, HTML) reads. Computed in
//! full before anything is rendered.
//!
//! probe and analyze print a `Report`; compare a `Comparison`; use a
//! `HostReport`; load and merge a `LoadDocument`; diagnose a
//! `DiagnoseDocument`; demo a `DemoDocument`.

use crate::{Comparison, Finding, HostReport, Knee, LoadResult, Percentiles, Report};
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
    /// Where the capture was kept (`--save`); None when it was removed.
    pub file: Option<String>,
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
