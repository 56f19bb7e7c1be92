//! Ctrl-C mid-run: every command stops, reports what it measured, and exits
//! 130 (128 + SIGINT) — never a lost result. A reader of stdout that goes
//! away (`| head`) ends a report command quietly, never with a panic.

mod common;
use common::*;
use std::process::{Command, Stdio};
use std::time::Duration;
use whyslow_lab::http1::AppConfig;

fn sigint_after(mut cmd: Command, after: Duration) -> std::process::Output {
    let child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(after);
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    child.wait_with_output().unwrap()
}

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_whyslow"))
}

#[test]
fn probe_keeps_completed_requests() {
    let a = app(AppConfig {
        work: Duration::from_millis(50),
        ..Default::default()
    });
    let mut cmd = bin();
    cmd.args(["probe", "--json", "-n", "1000", &format!("http://{a}/")]);
    let out = sigint_after(cmd, Duration::from_millis(600));
    assert_eq!(out.status.code(), Some(130), "{}", stderr(&out));
    let report = json(&out);
    let n = requests(&report).len();
    assert!((2..1000).contains(&n), "{n} requests");
    assert!(
        report["errors"][0]
            .as_str()
            .unwrap()
            .contains("interrupted"),
        "{report}"
    );
}

#[test]
fn capture_finishes_its_file() {
    if !capture_allowed("capture_finishes_its_file") {
        return;
    }
    let a = app(AppConfig::default());
    let file = std::env::temp_dir().join(format!("whyslow-int-{}.pcapng", std::process::id()));
    let _ = std::fs::remove_file(&file);
    let mut cmd = bin();
    cmd.args([
        "capture",
        "-i",
        "lo",
        "-p",
        &a.port().to_string(),
        "-w",
        file.to_str().unwrap(),
    ]);
    let child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The file is created once the capture socket is open: then probe. (A
    // fixed wait lost the race on a loaded machine.)
    for _ in 0..200 {
        if file.exists() {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(file.exists(), "capture never started");
    let probe = whyslow(&["probe", "-n", "3", &format!("http://{a}/")]);
    assert!(probe.status.success());
    std::thread::sleep(Duration::from_millis(300));
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let analyzed = whyslow(&["analyze", "--json", "--timeline", file.to_str().unwrap()]);
    assert!(analyzed.status.success(), "{}", stderr(&analyzed));
    let report = json(&analyzed);
    assert_eq!(report["timeline"]["exchanges"].as_array().unwrap().len(), 3);
    // `whyslow analyze FILE | head -0`: the reader is gone before the first
    // line is written; whyslow stops quietly with exit 0, as ripgrep does.
    closed_stdout(&["analyze", file.to_str().unwrap()]);
    let _ = std::fs::remove_file(&file);
}

#[test]
fn diagnose_analyzes_what_it_captured() {
    let s = whyslow_lab::find("post-stall").unwrap();
    let running = rt().block_on(s.start(false)).unwrap();
    let mut cmd = bin();
    // The split pattern's 60 requests take ~2.6 s: the interrupt lands in it.
    cmd.args(["diagnose", "--json", "-n", "60", "-d", "x", &running.url]);
    let out = sigint_after(cmd, Duration::from_millis(1500));
    assert_eq!(out.status.code(), Some(130), "{}", stderr(&out));
    let report = json(&out);
    assert!(!report["sections"].as_array().unwrap().is_empty());
    if capture_allowed("diagnose_analyzes_what_it_captured") {
        assert_eq!(
            report["findings"][0]["kind"], "nagle_delayed_ack",
            "{}",
            report["findings"]
        );
    }
}
