//! The agent's spans, logs and metrics through a real OpenTelemetry
//! Collector (built from the Go module proxy), read back from its file
//! exporter: every item the agent says it sent arrived, and a Collector
//! stopped for 20 s mid-run loses nothing the agent does not count.

mod common;

use common::collector::{collector_binary, received, Collector};
use common::container::{containers_allowed, LabContainer};
use common::*;
use serde_json::Value;
use std::process::{Command, Stdio};
use std::time::Duration;

fn allowed(test: &str) -> Option<std::path::PathBuf> {
    if !capture_allowed(test) || !containers_allowed(test) {
        return None;
    }
    collector_binary(test)
}

/// The agent on the container for `windows` windows of 2 s, sending to the
/// Collector on `port` over OTLP/HTTP; its records.
fn agent(
    storm: &LabContainer,
    port: u16,
    windows: u32,
    dir: &std::path::Path,
) -> std::process::Child {
    let to = format!("--otlp-endpoint=http://127.0.0.1:{port}");
    agent_to(storm, &[&to], windows, dir)
}

/// The same, exporting as `export` says.
fn agent_to(
    storm: &LabContainer,
    export: &[&str],
    windows: u32,
    dir: &std::path::Path,
) -> std::process::Child {
    Command::new(env!("CARGO_BIN_EXE_whyslow"))
        .args([
            "agent",
            "--container",
            &storm.id,
            "--window",
            "2s",
            "--json",
        ])
        .arg(format!("--windows={windows}"))
        .args(export)
        .arg("-w")
        .arg(dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn records(out: &std::process::Output) -> Vec<Value> {
    assert!(out.status.success(), "{}", stderr(out));
    stdout(out)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Sent and given up, over every window: (spans, logs, points) each.
fn exported(windows: &[Value]) -> ((u64, u64, u64), (u64, u64, u64)) {
    let sum = |field: &str| -> u64 {
        windows
            .iter()
            .map(|w| w["export"][field].as_u64().unwrap())
            .sum()
    };
    (
        (sum("spans_sent"), sum("logs_sent"), sum("points_sent")),
        (
            sum("spans_dropped"),
            sum("logs_dropped"),
            sum("points_dropped"),
        ),
    )
}

#[test]
fn what_the_agent_sent_is_what_the_collector_wrote() {
    let Some(binary) = allowed("collector_real") else {
        return;
    };
    let _g = serial();
    let dir = tmpdir("collector-counts");
    let port = free_port();
    let collector = Collector::start(&binary, port, &dir, "only");
    let storm = LabContainer::start("orm-storm", false);
    let mut load = storm.load(8, "12s");
    let out = agent(&storm, port, 4, &dir).wait_with_output().unwrap();
    load.wait().unwrap();
    all_arrived(&records(&out), collector, &dir, "only");
    // Each finding a log record: the storm's n_plus_one among them.
    let logs = std::fs::read_to_string(dir.join("logs-only.jsonl")).unwrap();
    assert!(
        logs.contains("n_plus_one") && logs.contains(&storm.id),
        "{logs:.400}"
    );
}

/// The same over OTLP/gRPC and TLS, the Collector's certificate trusted
/// by a CA file: every item said sent arrived.
#[test]
fn over_grpc_and_tls_what_the_agent_sent_is_what_the_collector_wrote() {
    let Some(binary) = allowed("collector_real") else {
        return;
    };
    let _g = serial();
    let dir = tmpdir("collector-grpc-tls");
    let tls = common::collector::Tls::make(&dir);
    let port = free_port();
    let collector = Collector::start_grpc_tls(&binary, port, &tls, &dir, "grpc");
    let storm = LabContainer::start("orm-storm", false);
    let mut load = storm.load(8, "9s");
    let to = format!("--otlp-endpoint=https://127.0.0.1:{port}");
    let ca = format!("--otlp-ca={}", tls.ca.display());
    let export = [to.as_str(), "--otlp-protocol=grpc", &ca];
    let out = agent_to(&storm, &export, 3, &dir)
        .wait_with_output()
        .unwrap();
    load.wait().unwrap();
    eprintln!("{}", stderr(&out));
    all_arrived(&records(&out), collector, &dir, "grpc");
}

/// The Collector stopped (its files flushed): nothing given up, and each
/// signal's items in its files as many as the windows say were sent.
fn all_arrived(windows: &[Value], collector: Collector, dir: &std::path::Path, tag: &str) {
    collector.stop();
    let (sent, dropped) = exported(windows);
    eprintln!("sent {sent:?}, given up {dropped:?}");
    assert_eq!(dropped, (0, 0, 0));
    assert!(sent.0 > 0 && sent.1 > 0 && sent.2 > 0, "{sent:?}");
    assert_eq!(received(&collector_files(dir, tag)), sent);
}

fn collector_files(dir: &std::path::Path, tag: &str) -> [std::path::PathBuf; 3] {
    ["traces", "logs", "metrics"].map(|s| dir.join(format!("{s}-{tag}.jsonl")))
}

#[test]
fn a_collector_stopped_for_twenty_seconds_loses_nothing_unsaid() {
    let Some(binary) = allowed("collector_real") else {
        return;
    };
    let _g = serial();
    let dir = tmpdir("collector-outage");
    let port = free_port();
    let first = Collector::start(&binary, port, &dir, "before");
    let storm = LabContainer::start("orm-storm", false);
    let mut load = storm.load(8, "40s");
    let agent = agent(&storm, port, 16, &dir);
    std::thread::sleep(Duration::from_secs(5));
    first.stop();
    std::thread::sleep(Duration::from_secs(20));
    let second = Collector::start(&binary, port, &dir, "after");
    let out = agent.wait_with_output().unwrap();
    load.wait().unwrap();
    second.stop();
    let windows = records(&out);
    assert_eq!(windows.len(), 16);
    let (sent, dropped) = exported(&windows);
    eprintln!("sent {sent:?}, given up {dropped:?}");
    // The outage was seen: requests waited in the queue.
    assert!(windows
        .iter()
        .any(|w| w["export"]["queued"].as_u64() > Some(0)));
    let (a, b) = (
        received(&collector_files(&dir, "before")),
        received(&collector_files(&dir, "after")),
    );
    assert_eq!(
        (a.0 + b.0, a.1 + b.1, a.2 + b.2),
        sent,
        "what arrived is what was said sent"
    );
    assert_eq!(dropped, (0, 0, 0), "the queue held 20 s of windows");
}
