//! One load run against several generators' (`load --segment`) merged:
//! the same count, and percentiles that agree over a handler whose fixed
//! work makes most of each request's time.

use super::*;
use std::time::Duration;

/// The handler's fixed work: latency is mostly this, so two runs of the
/// same schedule must agree closely.
pub const WORK: Duration = Duration::from_millis(20);
/// How far two runs' percentiles may differ: 2 ms of scheduling on a busy
/// 2-core host, on top of the 20 ms each request works.
pub const SAME_WITHIN_US: i64 = 2_000;

/// One process at the total rate: 100 requests/s for 4 s over 8 connections.
pub fn load_args(url: &str, out: &Path) -> Vec<String> {
    [
        "load",
        "-q",
        "--rate",
        "100",
        "--duration",
        "4s",
        "-c",
        "8",
        "-o",
    ]
    .iter()
    .map(|s| s.to_string())
    .chain([out.display().to_string(), url.to_string()])
    .collect()
}

/// `whyslow merge --json FILES`'s result.
pub fn merged(files: &[PathBuf]) -> serde_json::Value {
    let mut args = vec!["merge".to_string(), "--json".to_string()];
    args.extend(files.iter().map(|f| f.display().to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    json(&whyslow(&args))["load"].clone()
}

/// The parts, merged, are the single run: each part took its share of the
/// slots and connections, and the whole has the same count and percentiles.
pub fn same_run(single: &Path, parts: &[PathBuf]) {
    let n = parts.len() as u64;
    for part in parts {
        let one = merged(std::slice::from_ref(part));
        assert_eq!(one["responses"], 400 / n, "each takes every {n}th slot");
        assert_eq!(one["setup"]["connections"], 8 / n);
    }
    let whole = merged(&[single.to_path_buf()]);
    let all = merged(parts);
    assert_eq!(whole["responses"], 400);
    assert_eq!(all["responses"], whole["responses"]);
    assert_eq!(all["setup"]["connections"], 8);
    assert_eq!(all["setup"]["target_rate"], 100.0);
    let (a, b) = (&whole["latency"]["corrected"], &all["latency"]["corrected"]);
    assert_eq!(a["count"], b["count"]);
    for p in ["p50", "p90"] {
        let (x, y) = (a[p].as_i64().unwrap(), b[p].as_i64().unwrap());
        assert!(
            (x - y).abs() <= SAME_WITHIN_US,
            "{p}: one process {x} µs, {n} merged {y} µs"
        );
    }
    assert!(a["p50"].as_i64().unwrap() >= WORK.as_micros() as i64);
}
