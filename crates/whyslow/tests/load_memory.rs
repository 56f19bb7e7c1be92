//! Memory stays flat in run length: a real closed-model run of 1M requests
//! against a loopback server ends with the same peak RSS (within 10 %) as a
//! run of 100k. Alone in its test binary so that its CPU-heavy runs do not
//! disturb the latency tests, and so that the peak RSS read from wait4(2)
//! belongs to one child run each.

mod common;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use whyslow_lab::latency::{LatencyPlan, LatencyServer};

/// The bound: RSS after 1M requests within 10 % of RSS after 100k.
const RSS_TOLERANCE: f64 = 0.10;

/// Runs `whyslow load` to completion; returns (peak RSS in KiB, responses).
/// The child is reaped with wait4(2), which also reports its peak RSS.
fn run(url: &str, requests: u64, out: &std::path::Path) -> (i64, u64) {
    let n = requests.to_string();
    let child = Command::new(env!("CARGO_BIN_EXE_whyslow"))
        .args([
            "load",
            "-q",
            "-c",
            "8",
            "--threads",
            "2",
            "-n",
            &n,
            "-o",
            out.to_str().unwrap(),
            url,
        ])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let peak = common::peak_rss_of(child);
    let text = std::fs::read_to_string(out).unwrap();
    let r = whyslow_load::LoadResult::parse(&text).unwrap();
    (peak, r.responses)
}

#[test]
fn rss_after_1m_requests_is_within_10_percent_of_100k() {
    let server = LatencyServer::start(LatencyPlan {
        base: Duration::ZERO,
        ..LatencyPlan::default()
    })
    .unwrap();
    let url = server.url("/");
    let dir = std::env::temp_dir().join(format!("whyslow-load-mem-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let t = Instant::now();
    let (small, n_small) = run(&url, 100_000, &dir.join("100k.json"));
    let (large, n_large) = run(&url, 1_000_000, &dir.join("1m.json"));
    eprintln!(
        "peak RSS: {small} KiB after {n_small} requests, {large} KiB after {n_large} ({:.1} s)",
        t.elapsed().as_secs_f64()
    );
    assert_eq!((n_small, n_large), (100_000, 1_000_000));
    let growth = (large - small) as f64 / small as f64;
    assert!(
        growth.abs() <= RSS_TOLERANCE,
        "RSS {small} → {large} KiB ({:+.1} %)",
        growth * 100.0
    );
}
