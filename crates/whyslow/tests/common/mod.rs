//! Shared by the integration tests: run the binary, start lab servers.
#![allow(dead_code)]

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::Duration;

pub fn whyslow(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_whyslow"))
        .args(args)
        .output()
        .expect("run whyslow")
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Runs whyslow with stdout a pipe whose reader has gone: it must end
/// quietly with exit 0, not panic.
pub fn closed_stdout(args: &[&str]) -> std::process::Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_whyslow"))
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let err = stderr(&out);
    assert!(!err.contains("panicked"), "{args:?}: {err}");
    assert!(!err.contains("Broken pipe"), "{args:?}: {err}");
    assert_eq!(out.status.code(), Some(0), "{args:?}: {err}");
    out
}

/// One runtime for every server a test binary starts; it lives as long as the process.
pub fn rt() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap()
    })
}

/// A lab HTTP/1.1 app on an ephemeral loopback port.
pub fn app(cfg: whyslow_lab::http1::AppConfig) -> SocketAddr {
    rt().block_on(async {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let a = l.local_addr().unwrap();
        tokio::spawn(whyslow_lab::http1::serve(l, cfg));
        a
    })
}

pub fn json(o: &Output) -> serde_json::Value {
    serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}\n{}", stdout(o), stderr(o)))
}

/// Requests of the first section of a JSON report.
pub fn requests(report: &serde_json::Value) -> Vec<serde_json::Value> {
    report["sections"][0]["requests"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

pub fn us(v: &serde_json::Value, field: &str) -> u64 {
    v[field]
        .as_u64()
        .unwrap_or_else(|| panic!("no {field} in {v}"))
}

/// Holds the tests of one test binary (each test file is its own) to one at
/// a time while the guard lives: tests that time what they measure, listen
/// on lo or pick free ports must not share the machine with each other. A
/// test that failed while holding it does not stop the others.
pub fn serial() -> MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// A loopback port nothing listens on now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Whether `bin` is on PATH.
pub fn have(bin: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {bin}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// An empty directory of this test process, named by `tag`.
pub fn tmpdir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("whyslow-real-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Waits (up to 10 s) until something accepts connections on loopback `port`.
pub fn wait_listening(port: u16) {
    for _ in 0..200 {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("nothing listening on {port}");
}

/// Whether `what` a test needs is `present`: a skip with a printed reason on
/// a user's machine, a failure in CI (WHYSLOW_REQUIRE_CAPTURE=1), where
/// scripts/test.sh installed everything.
pub fn needed(test: &str, what: &str, present: bool) -> bool {
    let why = format!("{what} is missing (scripts/test.sh installs it)");
    if !present && std::env::var("WHYSLOW_REQUIRE_CAPTURE").as_deref() == Ok("1") {
        panic!("{test}: {why}");
    }
    if !present {
        eprintln!("skipping {test}: {why}");
    }
    present
}

/// Whether this process may open raw packet sockets. When it may not, capture
/// tests skip with a reason, except under WHYSLOW_REQUIRE_CAPTURE=1 (CI) where they fail.
pub fn capture_allowed(test: &str) -> bool {
    // SAFETY: plain socket(2) call; the fd is closed right after.
    let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW, 0) };
    if fd >= 0 {
        unsafe { libc::close(fd) };
        return true;
    }
    if std::env::var("WHYSLOW_REQUIRE_CAPTURE").as_deref() == Ok("1") {
        panic!("{test}: CAP_NET_RAW is missing and WHYSLOW_REQUIRE_CAPTURE=1");
    }
    eprintln!(
        "skipping {test}: packet capture needs CAP_NET_RAW (run as root or setcap cap_net_raw+ep)"
    );
    false
}

/// The `kind` of every finding in a JSON report, in report order.
pub fn finding_kinds(report: &serde_json::Value) -> Vec<String> {
    report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["kind"].as_str().unwrap().to_string())
        .collect()
}

/// The kinds of the findings not marked background, in rank order.
pub fn foreground(report: &serde_json::Value) -> Vec<String> {
    report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["background"] != true)
        .map(|f| f["kind"].as_str().unwrap().to_string())
        .collect()
}

/// The causes a report (or a demo row) names in the foreground: findings
/// about the measurement itself (the generator or host could not keep up)
/// aside, by the model's own rule.
pub fn causes(report: &serde_json::Value) -> Vec<String> {
    let about_measurement = |kind: &str| {
        serde_json::from_value::<whyslow_model::FindingKind>(kind.into())
            .is_ok_and(|k| k.is_about_measurement())
    };
    foreground(report)
        .into_iter()
        .filter(|k| !about_measurement(k))
        .collect()
}

/// The first finding of `kind` in a report (or a demo row).
pub fn finding<'a>(report: &'a serde_json::Value, kind: &str) -> Option<&'a serde_json::Value> {
    report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["kind"] == kind)
}

/// The summaries of every finding of `kind` in a report (or a demo row).
pub fn summaries(report: &serde_json::Value, kind: &str) -> Vec<String> {
    report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["kind"] == kind)
        .map(|f| f["summary"].as_str().unwrap().to_string())
        .collect()
}

/// The SQL summary holds the statements a scenario declares per request.
pub fn check_statements(s: &whyslow_lab::Scenario, report: &serde_json::Value, fixed: bool) {
    let fact = if fixed {
        "fixed_statements"
    } else {
        "statements"
    };
    let Some(statements) = s.truth.fact(fact) else {
        return;
    };
    let sql = &report["sql_summary"][0];
    assert_eq!(
        sql["median"]["statements"]["total"], statements,
        "{} {fact}: {sql}",
        s.name
    );
    assert_eq!(sql["median"]["statements"]["select"], statements, "{sql}");
}

/// Each lazy load a scenario declares is an N+1 with its count, the re-read
/// rate a duplicate repeated all but once.
pub fn check_storms(s: &whyslow_lab::Scenario, report: &serde_json::Value) {
    for (fact, table) in [
        ("product_loads", "FROM products"),
        ("item_loads", "FROM order_items"),
    ] {
        let Some(n) = s.truth.fact(fact) else {
            continue;
        };
        let n1 = summaries(report, "n_plus_one");
        assert!(
            n1.iter()
                .any(|f| f.contains(table) && f.contains(&format!("ran {n} times"))),
            "{}: {fact} {n}: {n1:?}",
            s.name
        );
    }
    if let Some(n) = s.truth.fact("tax_reads") {
        let dup = summaries(report, "duplicate_calls");
        assert!(
            dup.iter().any(|f| f.contains("FROM tax_rates")
                && f.contains(&format!("repeated {} times", n - 1))),
            "{}: {dup:?}",
            s.name
        );
    }
}

/// What a diagnosis left unexamined, except the note that too few requests
/// cannot rule out a rare stall (every short run carries it).
pub fn not_examined(report: &serde_json::Value) -> Vec<serde_json::Value> {
    report["skipped"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["what"] != "periodic_stall")
        .cloned()
        .collect()
}

/// The phases are measured back to back, so their sum may fall short of the
/// total only by the bookkeeping between them.
pub const SUM_TOLERANCE_US: u64 = 1_000;

/// dns + connect + tls + send + wait + receive of one request in a JSON report.
pub fn phase_sum(r: &serde_json::Value) -> u64 {
    [
        "dns_us",
        "connect_us",
        "tls_us",
        "send_us",
        "wait_us",
        "receive_us",
    ]
    .iter()
    .map(|f| us(r, f))
    .sum()
}
#[allow(dead_code)]
pub mod collector;
pub mod container;
pub mod netns;
pub mod numbers;
pub mod otlp;
pub mod polyglot;
pub mod real;
pub mod segments;
pub mod tiers;
pub mod truth;

/// `whyslow analyze --json --timeline --service SERVICE CAPTURE`, which must succeed.
pub fn analyzed_timeline(capture: &Path, service: &str) -> serde_json::Value {
    analyzed_timeline_with(capture, service, &[])
}

/// As `analyzed_timeline`, with `extra` flags (`--otlp FILE`).
pub fn analyzed_timeline_with(capture: &Path, service: &str, extra: &[&str]) -> serde_json::Value {
    let mut args = vec!["analyze", "--json", "--timeline", "--service", service];
    args.extend(extra);
    args.push(capture.to_str().unwrap());
    let out = whyslow(&args);
    assert!(out.status.success(), "{}", stderr(&out));
    json(&out)
}

/// Reaps `child` with wait4(2), which also reports its peak RSS: asserts
/// it exited 0 and returns that peak in KiB.
#[allow(clippy::zombie_processes)]
pub fn peak_rss_of(child: std::process::Child) -> i64 {
    let mut status = 0;
    // SAFETY: zeroed rusage is a valid value; wait4 fills it for our own child.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let pid = child.id() as libc::pid_t;
    let rc = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    assert_eq!(rc, pid, "wait4");
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "status {status}"
    );
    usage.ru_maxrss
}

/// Retransmitted frames of `capture` as tshark reads it: frame number →
/// seconds since the original transmission (`tcp.analysis.rto`), when
/// tshark knows the original.
/// tshark's `fields` of the frames of `capture` that match `filter`, one
/// line a frame.
fn tshark_fields(capture: &Path, filter: &str, fields: &[&str]) -> Result<String, String> {
    let mut args = vec!["-Y", filter, "-T", "fields"];
    for f in fields {
        args.extend(["-e", f]);
    }
    let out = Command::new("tshark")
        .arg("-r")
        .arg(capture)
        .args(args)
        .output()
        .map_err(|e| format!("tshark: {e}"))?;
    if !out.status.success() {
        let why = String::from_utf8_lossy(&out.stderr);
        return Err(format!("tshark -r {}: {why}", capture.display()));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn tshark_retransmissions(capture: &Path) -> Result<HashMap<u64, Option<f64>>, String> {
    let resent = "tcp.analysis.retransmission || tcp.analysis.fast_retransmission";
    let text = tshark_fields(capture, resent, &["frame.number", "tcp.analysis.rto"])?;
    Ok(text
        .lines()
        .filter_map(|l| {
            let mut f = l.split('\t');
            let frame = f.next()?.trim().parse().ok()?;
            Some((frame, f.next().and_then(|r| r.trim().parse().ok())))
        })
        .collect())
}

/// Slack on a retransmission's wait against tshark's: both time the same
/// two packets' timestamps, printed by tshark to the nanosecond.
const WAIT_SLACK_US: f64 = 1.0;

/// Whether a `tcp_retransmission` finding is real in `capture`, by a peer's
/// reading of the same packets: every packet it cites is a retransmission
/// to tshark (the kernel resent those bytes on that connection), and the
/// wait it gives each is no longer than tshark's time since the original
/// transmission (the cost is no larger than the wire shows). Never a
/// host-wide counter: a retransmission elsewhere excuses nothing.
pub fn retransmission_on_the_wire(
    finding: &serde_json::Value,
    capture: &Path,
) -> Result<(), String> {
    let resent = tshark_retransmissions(capture)?;
    let evidence = finding["evidence"].as_array().cloned().unwrap_or_default();
    let cited: Vec<&serde_json::Value> = evidence
        .iter()
        .filter(|e| e["packets"].is_array())
        .collect();
    if cited.is_empty() {
        return Err(format!("no packet cited: {finding}"));
    }
    for e in cited {
        for frame in e["packets"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|p| p.as_u64())
        {
            let Some(rto) = resent.get(&frame) else {
                return Err(format!("frame {frame} is no retransmission to tshark: {e}"));
            };
            let waited = e["facts"]["after_us"].as_f64().unwrap_or(0.0);
            if let Some(rto) = rto {
                if waited > rto * 1e6 + WAIT_SLACK_US {
                    return Err(format!(
                        "frame {frame}: {waited} µs claimed, tshark {rto} s: {e}"
                    ));
                }
            }
        }
    }
    Ok(())
}

/// The causes a report names, less a `tcp_retransmission` the capture it
/// came from confirms (`retransmission_on_the_wire`); one it does not
/// confirm stays named, with why.
/// Frames tshark reads as advertising a zero window in `capture`.
pub fn tshark_zero_windows(capture: &Path) -> Result<u64, String> {
    let text = tshark_fields(capture, "tcp.analysis.zero_window", &["frame.number"])?;
    Ok(text.lines().count() as u64)
}

/// `causes_less_real_retransmissions`, also less a `zero_window` whose
/// closures tshark reads in the same capture (at least as many frames
/// advertising a zero window as closures named).
pub fn causes_less_real_tcp(report: &serde_json::Value, capture: &Path) -> Vec<String> {
    causes_less_real_retransmissions(report, capture)
        .into_iter()
        .filter(|kind| {
            if kind != "zero_window" {
                return true;
            }
            let named = finding(report, kind).map_or(0, |f| f["occurrences"].as_u64().unwrap_or(0));
            tshark_zero_windows(capture).map_or(true, |seen| seen < named.max(1))
        })
        .collect()
}

pub fn causes_less_real_retransmissions(report: &serde_json::Value, capture: &Path) -> Vec<String> {
    causes(report)
        .into_iter()
        .filter_map(|kind| {
            if kind != "tcp_retransmission" {
                return Some(kind);
            }
            let f = finding(report, &kind)?;
            match retransmission_on_the_wire(f, capture) {
                Ok(()) => None,
                Err(why) => Some(format!("{kind} ({why})")),
            }
        })
        .collect()
}

/// Exchanges on connections to `port`, in a report with a timeline.
pub fn exchanges_to(report: &serde_json::Value, port: u16) -> Vec<&serde_json::Value> {
    let t = &report["timeline"];
    let conns: Vec<u64> = t["connections"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["server"].as_str().unwrap().ends_with(&format!(":{port}")))
        .map(|c| c["id"].as_u64().unwrap())
        .collect();
    t["exchanges"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| conns.contains(&e["connection"].as_u64().unwrap()))
        .collect()
}

/// The top cause, and for an N+1 how many times its statement ran per
/// request. Retransmissions tshark sees in `capture` too are real, not the
/// cause under test (a busy host's loopback resends now and then).
pub fn top_cause(report: &serde_json::Value, capture: &Path) -> (String, Option<u64>) {
    let kinds = causes_less_real_tcp(report, capture);
    let first = kinds.first().cloned().unwrap_or_default();
    let per_request = (first == "n_plus_one").then(|| {
        let f = finding(report, "n_plus_one").unwrap();
        let s = f["summary"].as_str().unwrap();
        let ran = s.split("ran ").nth(1).and_then(|r| r.split(' ').next());
        ran.and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{s}"))
    });
    (first, per_request)
}

/// `whyslow load` arguments for a closed load of `requests` from `clients`
/// connections, with no trace context (attribution from the wire alone).
pub fn untraced_closed_load<'a>(clients: &'a str, requests: &'a str, url: &'a str) -> [&'a str; 7] {
    ["-c", clients, "-n", requests, "--trace-context", "off", url]
}

/// `pages` requests of `url` through `whyslow load`, `rate` a second over
/// `clients` connections, bounded in time.
pub fn load_paced(url: &str, pages: u64, clients: u64, rate: u64) {
    let (n, c, r) = (pages.to_string(), clients.to_string(), rate.to_string());
    let secs = format!("{}s", pages / rate + 10);
    let out = whyslow(&[
        "load",
        "-c",
        &c,
        "--rate",
        &r,
        "-n",
        &n,
        "--duration",
        &secs,
        url,
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
}

/// The lab's orm-storm checkout (`s`) started by `start` (broken, then
/// fixed) over a real database: `diagnose` finds the statements, counts and
/// findings the scenario declares, and the fixed checkout names neither.
pub fn lab_orm_storm_holds(
    s: &whyslow_lab::Scenario,
    start: impl Fn(bool) -> whyslow_lab::Running,
) {
    for fixed in [false, true] {
        let running = start(fixed);
        let out = whyslow(&["diagnose", "--json", "-n", "4", &running.url]);
        assert!(out.status.success(), "{}", stderr(&out));
        let report = json(&out);
        check_statements(s, &report, fixed);
        if fixed {
            let (n1, dup) = (
                summaries(&report, "n_plus_one"),
                summaries(&report, "duplicate_calls"),
            );
            assert!(n1.is_empty() && dup.is_empty(), "{n1:?} {dup:?}");
        } else {
            check_storms(s, &report);
        }
    }
}
