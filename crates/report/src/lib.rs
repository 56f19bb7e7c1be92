//! Rendering: terminal text and JSON for what sources measured and detectors
//! found. Reports never diagnose; they show.

pub mod agent;
pub mod analyze;
pub mod breakdown;
pub mod compare;
pub mod demo;
pub mod diagnose;
pub mod findings;
pub mod host;
pub mod html;
pub mod load;
pub mod man;
pub mod probe;
pub mod sql_summary;
pub mod stats;
pub mod timeline;
pub mod writeout;

pub use stats::Summary;

pub use whyslow_model::fmt_ms;

/// Request kinds a per-kind text section shows; JSON has them all.
pub(crate) const KINDS_SHOWN: usize = 5;

/// The line that says how many kinds a text section left to JSON.
pub(crate) fn kinds_left(out: &mut String, kinds: usize) {
    if kinds > KINDS_SHOWN {
        out.push_str(&format!(
            "  … {} more kinds in --json\n",
            kinds - KINDS_SHOWN
        ));
    }
}

/// Pretty JSON for `--json`.
pub fn to_json<T: serde::Serialize>(value: &T) -> String {
    serde_json::to_string_pretty(value).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
}
