//! Brendan Gregg's USE method for the host whyslow runs on: for each
//! resource, utilization, saturation and errors over one interval.

use serde::{Deserialize, Serialize};

/// One resource over one interval.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResourceUse {
    /// "cpu", "memory", "network", "tcp", "listen_queue", "softnet", "disk", "file_descriptors", "tcp_memory".
    pub resource: String,
    /// Busy share, percent (None where the resource has no such notion).
    pub utilization_pct: Option<f64>,
    /// How much work waited, in `saturation_unit` (run queue, PSI share, ...).
    pub saturation: Option<f64>,
    pub saturation_unit: String,
    /// Errors or drops counted in the interval.
    pub errors: u64,
    /// Past its saturation threshold: work waited on this resource.
    pub saturated: bool,
    /// What the numbers are, for a person.
    pub note: String,
    /// The numbers the note shows, by name ("runnable_tasks", "cpus").
    #[serde(default, skip_serializing_if = "crate::Facts::is_empty")]
    pub counts: crate::Facts,
}

/// Every resource over one interval.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HostSample {
    /// From the start of the sampling to the end of this interval.
    pub at_ms: u64,
    pub interval_ms: u64,
    pub resources: Vec<ResourceUse>,
}

/// `whyslow use --json`: the samples, and the findings drawn from them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HostReport {
    pub schema_version: u32,
    pub command: String,
    pub cpus: u32,
    pub samples: Vec<HostSample>,
    pub findings: Vec<crate::Finding>,
    /// Files that could not be read (no /proc/pressure on old kernels, ...).
    pub unavailable: Vec<String>,
}
