use crate::{CaptureSummary, Finding, RequestPhases, SqlSummary, TimeBreakdown, Timeline};
use serde::{Deserialize, Serialize};

/// Bumped on any incompatible change to the JSON report (see docs/report-schema.md).
pub const SCHEMA_VERSION: u32 = 4;

/// Something whyslow could not examine, and why (no capture privilege, TLS, ...).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Skipped {
    pub what: String,
    pub why: String,
    /// The numbers `what` and `why` quote.
    #[serde(default, skip_serializing_if = "crate::Facts::is_empty")]
    pub facts: crate::Facts,
}

/// One labelled group of client-side measurements (e.g. "reused", "split writes").
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReportSection {
    pub label: String,
    pub requests: Vec<RequestPhases>,
    /// The target's name asked again as the system's resolver asks it,
    /// name by name: what the `dns` phase was spent on (absent: an address,
    /// a name from /etc/hosts, or no resolv.conf).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dns: Option<crate::DnsWalk>,
}

/// One limit from `--budget` or `--slo`, checked against what was measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckResult {
    /// As the user wrote it: "total<2s".
    pub rule: String,
    pub observed: f64,
    pub limit: f64,
    /// "us" for times, "percent" for error rates.
    pub unit: String,
    pub passed: bool,
    /// Which request or interval was worst, for a person to look at.
    pub worst: Option<String>,
}

/// The JSON report every command can emit with `--json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    pub schema_version: u32,
    /// "probe", "analyze", "diagnose", ...
    pub command: String,
    pub target: Option<String>,
    pub sections: Vec<ReportSection>,
    pub timeline: Option<Timeline>,
    /// Counts and latency distributions over a whole capture (`analyze`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capture: Option<CaptureSummary>,
    pub findings: Vec<Finding>,
    /// Where each kind of inbound request spent its time.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub time_breakdown: Vec<TimeBreakdown>,
    /// The SQL each kind of inbound request sent.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sql_summary: Vec<SqlSummary>,
    pub skipped: Vec<Skipped>,
    #[serde(default)]
    pub checks: Vec<CheckResult>,
    /// Problems met on the way (truncated capture, failed request) that did not stop the run.
    pub errors: Vec<String>,
}

impl Report {
    /// The requests of the section labelled `label`.
    pub fn section(&self, label: &str) -> Option<&[RequestPhases]> {
        let s = self.sections.iter().find(|s| s.label == label)?;
        Some(&s.requests)
    }

    pub fn new(command: &str, target: Option<String>) -> Self {
        Report {
            schema_version: SCHEMA_VERSION,
            command: command.to_string(),
            target,
            sections: Vec::new(),
            timeline: None,
            capture: None,
            findings: Vec::new(),
            time_breakdown: Vec::new(),
            sql_summary: Vec::new(),
            skipped: Vec::new(),
            checks: Vec::new(),
            errors: Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Evidence, FindingKind, Severity};

    #[test]
    fn report_round_trips_through_json() {
        let mut r = Report::new("analyze", Some("x.pcapng".into()));
        r.findings.push(Finding {
            time_lost_us: 40_000,
            time_lost_per_occurrence_us: 40_000,
            occurrences: 1,
            evidence: vec![Evidence::Measurement {
                note: "n".into(),
                facts: Default::default(),
            }],
            ..Finding::new(
                FindingKind::NagleDelayedAck,
                Severity::Critical,
                "s".into(),
                "f",
            )
        });
        let text = serde_json::to_string(&r).unwrap();
        assert!(text.contains("\"kind\":\"nagle_delayed_ack\""));
        let back: Report = serde_json::from_str(&text).unwrap();
        assert_eq!(back, r);
    }
}
