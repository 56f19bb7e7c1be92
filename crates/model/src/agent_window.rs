//! What `whyslow agent` says at the end of each window: per workload
//! watched, its requests and the causes named, and the agent's own cost.

use crate::{FindingKind, Workload};
use serde::{Deserialize, Serialize};

/// One window of the agent, every workload in it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentWindow {
    /// 0 for the first window.
    pub window: u64,
    /// Its start, in microseconds since the Unix epoch.
    pub start_us: u64,
    /// How long it ran (the last one, cut by Ctrl-C, may be short).
    pub seconds: f64,
    /// Cut short: the agent was stopped within it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub partial: bool,
    pub workloads: Vec<WorkloadWindow>,
    /// The agent's own cost over the window.
    pub agent: AgentCost,
    /// The pcapng files kept on disk, after this window's were added.
    pub ring: RingState,
    /// Spans sent to `--otlp-endpoint`, and those that could not be.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub export: Option<ExportCounts>,
}

/// One workload's traffic in one window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkloadWindow {
    /// "container containerd 3f2a9c0d1e4b", or "host" for the node's own
    /// network namespace.
    pub label: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workload: Option<Workload>,
    /// The window's capture, while the ring keeps it.
    pub file: String,
    pub packets: u64,
    pub kernel_drops: u64,
    /// The service's inbound request kinds.
    pub requests: Vec<RequestKind>,
    /// The causes named, most time lost first.
    pub findings: Vec<WindowFinding>,
    /// What the analysis could not read (a corrupt stream, drops).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<String>,
}

/// Requests of one kind in a window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RequestKind {
    /// "GET /checkout".
    pub kind: String,
    pub count: u64,
    pub p50_us: u64,
    pub p99_us: u64,
    pub max_us: u64,
}

/// One finding, as a dashboard keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WindowFinding {
    pub kind: FindingKind,
    /// The request kind its evidence names ("" when none does).
    pub request: String,
    pub subject: String,
    pub time_lost_us: u64,
    pub summary: String,
    /// Made by another cause, or waited on by no request: never the cause.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub secondary: bool,
}

/// The agent process's own use of the machine over a window.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct AgentCost {
    /// CPU time (user and system) the agent used in the window.
    pub cpu_us: u64,
    /// Of one CPU: `cpu_us` over the window's length.
    pub cpu_share: f64,
    /// Most resident memory the agent held in the window (VmHWM, reset at
    /// each window's end): the capture rings' mapped pages included.
    pub peak_rss_bytes: u64,
    /// Its own allocations at the window's end (RssAnon): what would grow
    /// if anything outlived a window.
    pub anon_bytes: u64,
}

/// The pcapng ring on disk (`--keep`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct RingState {
    pub files: u64,
    pub bytes: u64,
    /// Most files kept: windows within `--keep`, for each workload.
    pub max_files: u64,
    /// Most bytes kept (`--keep-size`).
    pub max_bytes: u64,
}

/// What went to the OTLP endpoint in a window: spans, log records (one a
/// finding) and metric data points, sent or given up on (the endpoint
/// refused them, or the queue that keeps them while it is down was full).
/// What is still queued goes out with a later window.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct ExportCounts {
    pub spans_sent: u64,
    pub spans_dropped: u64,
    #[serde(default)]
    pub logs_sent: u64,
    #[serde(default)]
    pub logs_dropped: u64,
    #[serde(default)]
    pub points_sent: u64,
    #[serde(default)]
    pub points_dropped: u64,
    /// Export requests waiting to be sent at the window's end.
    #[serde(default)]
    pub queued: u64,
}
