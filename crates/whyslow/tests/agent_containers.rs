//! Containers as the kernel sees them (namespaces and a cgroup named as
//! containerd names one), each running a lab scenario on its own loopback:
//! `agent`, `capture --pid` and `diagnose --container` reach their traffic
//! from the host, and name each container's cause and no other's.

mod common;

use common::container::{containers_allowed, LabContainer};
use common::*;
use serde_json::Value;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Longest an agent run of the tests may take before it is killed.
const AGENT_DEADLINE: Duration = Duration::from_secs(120);

fn allowed(test: &str) -> bool {
    capture_allowed(test) && containers_allowed(test)
}

/// The scenario's request kind ("GET /checkout"), from its declared truth.
fn request_kind(s: &whyslow_lab::Scenario) -> String {
    format!("{} {}", s.method, s.path)
}

/// Runs the agent to its end (`--windows`), its JSON records parsed.
fn agent(args: &[&str]) -> Vec<Value> {
    let child = Command::new(env!("CARGO_BIN_EXE_whyslow"))
        .arg("agent")
        .args(args)
        .arg("--json")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = wait_bounded(child);
    assert!(out.status.success(), "agent: {}", stderr(&out));
    stdout(&out)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The child's output, read as it comes (a full pipe would stop it); the
/// child killed, and the test failed, past `AGENT_DEADLINE`.
fn wait_bounded(child: Child) -> std::process::Output {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let pid = child.id() as libc::pid_t;
    let done = Arc::new(AtomicBool::new(false));
    let finished = done.clone();
    let watchdog = std::thread::spawn(move || {
        let start = Instant::now();
        while !finished.load(Ordering::Relaxed) {
            if start.elapsed() > AGENT_DEADLINE {
                // SAFETY: kill(2) on this test's own child, not yet reaped.
                unsafe { libc::kill(pid, libc::SIGKILL) };
                return true;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        false
    });
    let out = child.wait_with_output().unwrap();
    done.store(true, Ordering::Relaxed);
    assert!(
        !watchdog.join().unwrap(),
        "the agent ran past {AGENT_DEADLINE:?}"
    );
    out
}

/// A window's record of the container with `id`.
fn of_container<'a>(window: &'a Value, id: &str) -> &'a Value {
    window["workloads"]
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w["workload"]["container"]["id"] == id)
        .unwrap_or_else(|| panic!("no record of {id} in {window}"))
}

/// The causes named for a workload: neither secondary nor about the
/// measurement itself, by the model's own rule.
fn causes_of(w: &Value) -> Vec<(String, String)> {
    w["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["secondary"] != true)
        .filter(|f| {
            let kind: whyslow_model::FindingKind =
                serde_json::from_value(f["kind"].clone()).unwrap();
            !kind.is_about_measurement()
        })
        .map(|f| {
            let kind = f["kind"].as_str().unwrap().to_string();
            (kind, f["request"].as_str().unwrap().to_string())
        })
        .collect()
}

fn requests_of(w: &Value, kind: &str) -> u64 {
    w["requests"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["kind"] == kind)
        .map(|r| r["count"].as_u64().unwrap())
        .sum()
}

#[test]
fn the_agent_names_the_storm_in_one_container_and_nothing_in_the_other() {
    if !allowed("agent_containers") {
        return;
    }
    let _g = serial();
    let scenario = whyslow_lab::named("orm-storm").unwrap();
    let truth = scenario.truth.kind.expect("orm-storm declares its cause");
    let kind = request_kind(scenario);
    let storm = LabContainer::start("orm-storm", false);
    let healthy = LabContainer::start("orm-storm", true);
    let loads = [storm.load(8, "20s"), healthy.load(8, "20s")];
    std::thread::sleep(Duration::from_millis(500));
    let dir = tmpdir("agent-two");
    let windows = agent(&[
        "--container",
        &storm.id[..12],
        "--container",
        &healthy.id,
        "--window",
        "3s",
        "--windows",
        "3",
        "-w",
        dir.to_str().unwrap(),
    ]);
    for mut l in loads {
        l.wait().unwrap();
    }
    assert_eq!(windows.len(), 3);
    for w in &windows {
        let sick = of_container(w, &storm.id);
        let well = of_container(w, &healthy.id);
        assert!(requests_of(sick, &kind) > 0, "{sick}");
        assert!(requests_of(well, &kind) > 0, "{well}");
        let named = causes_of(sick);
        assert_eq!(
            named.first(),
            Some(&(truth.as_str().to_string(), kind.clone())),
            "window {}: {named:?}",
            w["window"]
        );
        assert_eq!(causes_of(well), vec![], "window {}", w["window"]);
        assert_eq!(sick["kernel_drops"], 0);
    }
}

#[test]
fn capture_and_diagnose_reach_a_containers_loopback() {
    if !allowed("agent_containers") {
        return;
    }
    let _g = serial();
    let scenario = whyslow_lab::named("orm-storm").unwrap();
    let kind = request_kind(scenario);
    let storm = LabContainer::start("orm-storm", false);
    let port = storm.port().to_string();
    let dir = tmpdir("container-capture");
    let mut load = storm.load(8, "6s");
    // From the host's own namespace: none of the container's traffic.
    let host = dir.join("host.pcapng");
    let inside = dir.join("inside.pcapng");
    let host_run = whyslow(&[
        "capture",
        "-i",
        "any",
        "-p",
        &port,
        "--duration",
        "2s",
        "-w",
        host.to_str().unwrap(),
    ]);
    assert!(host_run.status.success(), "{}", stderr(&host_run));
    let pid = storm.pid().to_string();
    let run = whyslow(&[
        "capture",
        "--pid",
        &pid,
        "-i",
        "lo",
        "--duration",
        "3s",
        "-w",
        inside.to_str().unwrap(),
    ]);
    assert!(run.status.success(), "{}", stderr(&run));
    load.wait().unwrap();
    assert!(
        stderr(&run).contains(&format!(
            "listening on :{port}: container containerd {}",
            &storm.id[..12]
        )),
        "{}",
        stderr(&run)
    );
    let seen = |file: &std::path::Path| {
        let a = json(&whyslow(&["analyze", "--json", file.to_str().unwrap()]));
        let n: u64 = a["capture"]["groups"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|g| g["label"] == kind.as_str() && g.get("made_for").is_none())
            .map(|g| g["count"].as_u64().unwrap())
            .sum();
        (n, a)
    };
    assert_eq!(seen(&host).0, 0, "the host's namespace holds none of it");
    let (requests, report) = seen(&inside);
    assert!(requests > 0, "{report}");
    assert_eq!(
        causes(&report).first().map(String::as_str),
        Some("n_plus_one")
    );

    let d = whyslow(&[
        "diagnose",
        "--container",
        &storm.id[..12],
        "-n",
        "3",
        "--json",
        &storm.url,
    ]);
    let report = json(&d);
    assert_eq!(
        causes(&report).first().map(String::as_str),
        Some("n_plus_one"),
        "{report}"
    );
    let capture = &report["live_capture"];
    assert_eq!(capture["workload"]["container"]["id"], storm.id.as_str());
    assert_eq!(capture["workload"]["container"]["runtime"], "containerd");
    let listener = capture["servers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["port"] == storm.port())
        .unwrap_or_else(|| panic!("{capture}"));
    assert_eq!(listener["workload"]["container"]["id"], storm.id.as_str());
}

/// One reading of the agent from outside: its allocations and the ring's files.
struct Sample {
    at_us: u64,
    anon_bytes: u64,
    files: usize,
}

fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_micros() as u64
}

/// The highest allocation sampled within a window's span.
fn peak_in(samples: &[Sample], window: &Value) -> u64 {
    let start = window["start_us"].as_u64().unwrap();
    let end = start + (window["seconds"].as_f64().unwrap() * 1e6) as u64;
    samples
        .iter()
        .filter(|s| (start..=end).contains(&s.at_us))
        .map(|s| s.anon_bytes)
        .max()
        .unwrap_or_else(|| panic!("no sample in window {}", window["window"]))
}

#[test]
fn the_agent_stays_flat_over_thirty_windows_and_its_ring_within_bounds() {
    if !allowed("agent_containers") {
        return;
    }
    let _g = serial();
    let storm = LabContainer::start("orm-storm", false);
    let mut load = storm.load(8, "40s");
    let dir = tmpdir("agent-ring");
    let child = Command::new(env!("CARGO_BIN_EXE_whyslow"))
        .args([
            "agent",
            "--container",
            &storm.id,
            "--window",
            "1s",
            "--windows",
            "30",
        ])
        .args(["--keep", "5s", "--keep-size", "3M", "--json", "-w"])
        .arg(&dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Read from outside, as `ps` would: the agent's own words are not
    // what it is held to.
    let status = format!("/proc/{}/status", child.id());
    let watched = dir.clone();
    let sampler = std::thread::spawn(move || {
        let mut samples = Vec::new();
        while let Ok(text) = std::fs::read_to_string(&status) {
            let Some(anon) = whyslow_agent::status_bytes(&text, "RssAnon") else {
                break;
            };
            let files = std::fs::read_dir(&watched).map_or(0, |d| d.count());
            samples.push(Sample {
                at_us: now_us(),
                anon_bytes: anon,
                files,
            });
            std::thread::sleep(Duration::from_millis(20));
        }
        samples
    });
    let out = wait_bounded(child);
    let samples = sampler.join().unwrap();
    load.wait().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let windows: Vec<Value> = stdout(&out)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(windows.len(), 30);
    let (third, last) = (
        peak_in(&samples, &windows[2]),
        peak_in(&samples, &windows[29]),
    );
    eprintln!("allocations at the peak: window 2 {third} bytes, window 29 {last}");
    assert!(
        last as f64 <= 1.2 * third as f64,
        "allocations grew: {third} bytes at the peak of window 2, {last} at window 29's"
    );
    // 5 s of 1 s windows; past 3 MB the oldest go, the newest always stays.
    for w in &windows {
        let ring = &w["ring"];
        assert_eq!(ring["max_files"], 5);
        assert!(ring["files"].as_u64().unwrap() <= 5, "{ring}");
        let bytes = ring["bytes"].as_u64().unwrap();
        assert!(bytes <= 3 << 20 || ring["files"] == 1, "{ring}");
    }
    // On disk at any moment: the kept files, the window being written and
    // at most one closed but not yet analyzed.
    let most = samples.iter().map(|s| s.files).max().unwrap();
    eprintln!("at most {most} files on disk at once");
    assert!(most <= 5 + 2, "{most} files at once");
    let on_disk = std::fs::read_dir(&dir).unwrap().count();
    assert!(on_disk <= 5, "{on_disk} files left");
}

/// The pids of a container's processes now.
fn pids_of(c: &LabContainer) -> Vec<u64> {
    std::fs::read_to_string(c.cgroup.join("cgroup.procs"))
        .unwrap()
        .lines()
        .filter_map(|l| l.parse().ok())
        .collect()
}

/// With `--ebpf`, each window's socket calls go into an events file
/// beside its pcapng, traced by the container's cgroup: each window, read
/// again from its two files, joins exchanges to threads of that
/// container's processes only (none of the other container's, though both
/// run the same program), and the storm is still named in every window.
#[test]
fn with_ebpf_each_window_has_its_containers_socket_calls_beside_it() {
    if !allowed("agent_containers") || !common::real::ebpf_allowed("agent_containers") {
        return;
    }
    let _g = serial();
    let storm = LabContainer::start("orm-storm", false);
    let healthy = LabContainer::start("orm-storm", true);
    let loads = [storm.load(8, "12s"), healthy.load(8, "12s")];
    std::thread::sleep(Duration::from_millis(500));
    let (mine, theirs) = (pids_of(&storm), pids_of(&healthy));
    let dir = tmpdir("agent-ebpf");
    let windows = agent(&[
        "--container",
        &storm.id,
        "--ebpf",
        "--window",
        "3s",
        "--windows",
        "3",
        "-w",
        dir.to_str().unwrap(),
    ]);
    for mut l in loads {
        l.wait().unwrap();
    }
    assert_eq!(windows.len(), 3);
    for (i, w) in windows.iter().enumerate() {
        let sick = of_container(w, &storm.id);
        let errors = sick["errors"].as_array().cloned().unwrap_or_default();
        assert!(errors.is_empty(), "window {i}: {errors:?}");
        let named = causes_of(sick);
        assert_eq!(
            named.first().map(|n| n.0.as_str()),
            Some("n_plus_one"),
            "window {i}: {named:?}"
        );
        let file = dir.join(format!("{}-{i:06}.pcapng", &storm.id[..12]));
        let out = whyslow(&["analyze", "--json", "--timeline", file.to_str().unwrap()]);
        assert!(out.status.success(), "{}", stderr(&out));
        let report = json(&out);
        let joined = report["capture"]["threads"]["exchanges_joined"].as_u64();
        assert!(joined > Some(0), "window {i}: {}", report["capture"]);
        let traced: Vec<u64> = report["timeline"]["exchanges"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|e| e["thread"]["pid"].as_u64())
            .collect();
        assert!(!traced.is_empty(), "window {i}");
        assert!(
            traced
                .iter()
                .all(|p| mine.contains(p) && !theirs.contains(p)),
            "window {i}: pids {:?}, the container's {mine:?}",
            traced.iter().collect::<std::collections::BTreeSet<_>>()
        );
    }
    // No events file is left without its window.
    let events = std::fs::read_dir(&dir)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .path()
                .to_string_lossy()
                .ends_with(".events")
        })
        .count();
    assert_eq!(events, 3);
}
