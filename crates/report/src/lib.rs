//! Rendering: terminal text and JSON for what sources measured and detectors
//! found. Reports never diagnose; they show.

pub mod breakdown;
pub mod findings;
pub mod probe;
pub mod sql_summary;
pub mod stats;
pub mod timeline;
pub mod writeout;

pub use stats::Summary;

pub use whyslow_model::fmt_ms;

/// Pretty JSON for `--json`.
pub fn to_json<T: serde::Serialize>(value: &T) -> String {
    serde_json::to_string_pretty(value).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
}
