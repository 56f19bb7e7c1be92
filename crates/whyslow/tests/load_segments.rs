//! `load --segment`, as a Kubernetes Indexed Job runs it: four processes,
//! each told its index by JOB_COMPLETION_INDEX, merged, make the run one
//! process makes at the total rate.

mod common;

use common::*;
use std::process::{Command, Stdio};
use std::time::Duration;

/// The handler's fixed work: latency is mostly this, so two runs of the
/// same schedule must agree closely.
const WORK: Duration = Duration::from_millis(20);
/// How far two runs' percentiles may differ: 2 ms of scheduling on a busy
/// 2-core host, on top of the 20 ms each request works.
const SAME_WITHIN_US: i64 = 2_000;

fn load_args(url: &str, out: &std::path::Path) -> Vec<String> {
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

fn merged(files: &[std::path::PathBuf]) -> serde_json::Value {
    let mut args = vec!["merge".to_string(), "--json".to_string()];
    args.extend(files.iter().map(|f| f.display().to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    json(&whyslow(&args))["load"].clone()
}

#[test]
fn four_indexed_segments_merged_are_one_run_at_the_total_rate() {
    let _g = serial();
    let addr = app(whyslow_lab::http1::AppConfig {
        work: WORK,
        ..Default::default()
    });
    let url = format!("http://{addr}/");
    let dir = tmpdir("segments");
    let single = dir.join("single.json");
    let args = load_args(&url, &single);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = whyslow(&args);
    assert!(out.status.success(), "{}", stderr(&out));

    let parts: Vec<_> = (0..4).map(|i| dir.join(format!("part-{i}.json"))).collect();
    let children: Vec<_> = parts
        .iter()
        .enumerate()
        .map(|(i, part)| {
            Command::new(env!("CARGO_BIN_EXE_whyslow"))
                .args(load_args(&url, part))
                .args(["--segment", "4"])
                .env("JOB_COMPLETION_INDEX", i.to_string())
                .stdout(Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    for mut c in children {
        assert!(c.wait().unwrap().success());
    }
    for part in &parts {
        let one = merged(std::slice::from_ref(part));
        assert_eq!(one["responses"], 100, "each takes every 4th slot");
        assert_eq!(one["setup"]["connections"], 2);
    }
    let whole = merged(&[single]);
    let four = merged(&parts);
    assert_eq!(whole["responses"], 400);
    assert_eq!(four["responses"], whole["responses"]);
    assert_eq!(four["setup"]["connections"], 8);
    assert_eq!(four["setup"]["target_rate"], 100.0);
    let (a, b) = (
        &whole["latency"]["corrected"],
        &four["latency"]["corrected"],
    );
    assert_eq!(a["count"], b["count"]);
    for p in ["p50", "p90"] {
        let (x, y) = (a[p].as_i64().unwrap(), b[p].as_i64().unwrap());
        assert!(
            (x - y).abs() <= SAME_WITHIN_US,
            "{p}: one process {x} µs, four {y} µs"
        );
    }
    assert!(whole["latency"]["corrected"]["p50"].as_i64().unwrap() >= WORK.as_micros() as i64);
}

#[test]
fn a_segment_past_its_count_or_without_an_index_is_refused() {
    for (segment, env) in [("4/4", None), ("4", None), ("0/0", None), ("4", Some("x"))] {
        let mut c = Command::new(env!("CARGO_BIN_EXE_whyslow"));
        c.args([
            "load",
            "--segment",
            segment,
            "-n",
            "1",
            "http://127.0.0.1:9/",
        ]);
        c.env_remove("JOB_COMPLETION_INDEX");
        if let Some(v) = env {
            c.env("JOB_COMPLETION_INDEX", v);
        }
        let out = c.output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{segment}: {}", stderr(&out));
        assert!(stderr(&out).contains("--segment"), "{}", stderr(&out));
    }
}
