//! Rendering: terminal text and JSON for what sources measured and detectors
//! found. Reports never diagnose; they show.

pub mod findings;
pub mod probe;
pub mod stats;
pub mod timeline;
pub mod writeout;

pub use stats::Summary;

/// "12.34 ms" with a precision that suits the size.
pub fn fmt_ms(us: u64) -> String {
    let ms = us as f64 / 1000.0;
    if ms >= 100.0 {
        format!("{ms:.0} ms")
    } else if ms >= 10.0 {
        format!("{ms:.1} ms")
    } else {
        format!("{ms:.2} ms")
    }
}

/// Pretty JSON for `--json`.
pub fn to_json<T: serde::Serialize>(value: &T) -> String {
    serde_json::to_string_pretty(value).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
}
