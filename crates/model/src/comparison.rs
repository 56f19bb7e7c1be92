//! `whyslow compare A B`: two results of the same command, statistic by
//! statistic, with what changed significantly and which gates were crossed.

use crate::{CheckResult, FindingKind};
use serde::{Deserialize, Serialize};

/// One result file as compare read it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ComparedRun {
    pub file: String,
    /// The command that wrote it: "load", "diagnose", "probe", ...
    pub command: String,
    pub target: Option<String>,
    /// Requests measured in the main distribution.
    pub count: u64,
}

/// How a statistic moved from A to B.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Change {
    Slower,
    Faster,
    /// Within the noise: intervals overlap, or the shift is too small to matter.
    NoSignificantChange,
    /// Only percentiles were given (a `--json` summary): no test possible.
    NotTested,
}

impl Change {
    pub fn as_str(self) -> &'static str {
        match self {
            Change::Slower => "slower",
            Change::Faster => "faster",
            Change::NoSignificantChange => "no significant change",
            Change::NotTested => "not tested",
        }
    }
}

/// One statistic of one distribution (phase or latency metric), A against B.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ComparedStat {
    /// "total", "wait", "corrected", ...
    pub metric: String,
    /// "p50", "p90", "p99", "max".
    pub stat: String,
    pub a_us: u64,
    pub b_us: u64,
    /// (B − A) / A, in percent.
    pub change_pct: f64,
    /// 95 % distribution-free confidence intervals (order statistics).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub a_interval_us: Option<(u64, u64)>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub b_interval_us: Option<(u64, u64)>,
    pub change: Change,
}

/// Mann–Whitney U over a whole distribution: did B shift against A?
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ShiftTest {
    pub metric: String,
    pub a_count: u64,
    pub b_count: u64,
    /// P(a sample of B is slower than one of A), 0.5 when they are alike.
    pub b_slower_probability: f64,
    pub p_value: f64,
    pub change: Change,
}

/// A finding kind present in one result and not the other, or whose time changed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FindingChange {
    pub kind: FindingKind,
    pub a_time_lost_us: Option<u64>,
    pub b_time_lost_us: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Comparison {
    pub schema_version: u32,
    pub command: String,
    pub a: ComparedRun,
    pub b: ComparedRun,
    pub stats: Vec<ComparedStat>,
    pub shifts: Vec<ShiftTest>,
    pub findings: Vec<FindingChange>,
    /// `--fail-if` rules, checked.
    pub checks: Vec<CheckResult>,
    /// What a reader must know to trust the table (different targets, no samples).
    pub notes: Vec<String>,
}

impl Comparison {
    /// True when nothing moved beyond the noise.
    pub fn unchanged(&self) -> bool {
        self.stats
            .iter()
            .map(|s| s.change)
            .chain(self.shifts.iter().map(|s| s.change))
            .all(|c| matches!(c, Change::NoSignificantChange | Change::NotTested))
    }
}
