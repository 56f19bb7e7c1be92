//! `whyslow load` against servers on loopback whose latency distribution is
//! known in advance (whyslow_lab::latency): the reported percentiles must
//! match the analytically known ones, within 5 % or 1 ms.

mod common;
use common::*;
use serde_json::Value;
use std::time::{Duration, Instant};
use whyslow_lab::latency::{LatencyPlan, LatencyServer};

/// The accuracy the issue asks for: within 5 % of the known value, or 1 ms.
const REL_TOLERANCE: f64 = 0.05;
const ABS_TOLERANCE_MS: f64 = 1.0;

/// Runs `whyslow load --json -q ARGS`; returns the exit code and the report.
fn load(args: &[&str]) -> (Option<i32>, Value) {
    let mut all = vec!["load", "--json", "-q"];
    all.extend_from_slice(args);
    let out = whyslow(&all);
    (out.status.code(), json(&out))
}

/// A percentile of one distribution in the JSON report, in milliseconds.
fn p(report: &Value, metric: &str, which: &str) -> f64 {
    let v = &report["load"]["latency"][metric][which];
    v.as_u64()
        .unwrap_or_else(|| panic!("no {metric}.{which} in {}", report["load"]["latency"]))
        as f64
        / 1000.0
}

/// A shared 2-core machine can stall any process for tens of milliseconds,
/// so a measurement that misses its tolerance is made again, up to this many
/// times; a wrong measurement misses every time.
const ATTEMPTS: usize = 3;

thread_local! {
    static MISSES: std::cell::RefCell<Vec<String>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Records a miss (for `with_retries`) unless `got` is within tolerance of `want`.
fn assert_near(what: &str, got_ms: f64, want_ms: f64) {
    let tol = (want_ms * REL_TOLERANCE).max(ABS_TOLERANCE_MS);
    eprintln!("{what}: measured {got_ms:.2} ms, expected {want_ms:.2} ms");
    check(
        (got_ms - want_ms).abs() <= tol,
        format!("{what}: measured {got_ms:.2} ms, expected {want_ms:.2} ms (± {tol:.2})"),
    );
}

/// A timing-dependent check: a miss is recorded, and `with_retries` decides.
fn check(ok: bool, why: String) {
    if !ok {
        MISSES.with(|m| m.borrow_mut().push(why));
    }
}

/// Runs a measurement until its timing checks all hold, at most ATTEMPTS times.
fn with_retries(measure: impl Fn()) {
    let mut all = Vec::new();
    for attempt in 1..=ATTEMPTS {
        MISSES.with(|m| m.borrow_mut().clear());
        measure();
        let misses = MISSES.with(|m| m.take());
        if misses.is_empty() {
            return;
        }
        eprintln!("attempt {attempt} missed: {misses:?}");
        all.push(format!("attempt {attempt}: {}", misses.join("; ")));
    }
    panic!("every attempt missed:\n{}", all.join("\n"));
}

// The latency tests hold `serial()`: on a 2-core machine, concurrent runs
// would measure each other's CPU contention.

/// 1 ms per request, 2 requests in 100 held 100 ms. At R req/s over R/8
/// connections each connection's next request is due 125 ms later, after any
/// held one has finished: nothing queues, so corrected and uncorrected
/// latency both follow the server's distribution exactly:
/// p50 = 1 ms, p99 = p99.9 = 100 ms. With 3000 requests the p99.9 is the
/// 4th-slowest, not a single sample a busy machine could shift alone.
fn held_plan() -> LatencyPlan {
    LatencyPlan {
        base: Duration::from_millis(1),
        slow_every: 50,
        slow: Duration::from_millis(100),
        ..LatencyPlan::default()
    }
}

#[test]
fn percentiles_match_a_known_distribution_and_slo_names_what_broke() {
    let _serial = serial();
    let server = LatencyServer::start(held_plan()).unwrap();
    let url = server.url("/");
    let slo = "p50<20ms,p99<50ms,errors<0.1%";
    let run = || {
        load(&[
            "--rate", "1000", "-c", "125", "-n", "3000", "--slo", slo, &url,
        ])
    };
    with_retries(|| {
        let (_, r) = run();
        assert_eq!(r["load"]["responses"], 3000, "{}", r["load"]);
        for metric in ["corrected", "uncorrected"] {
            assert_near(&format!("{metric} p50"), p(&r, metric, "p50"), 1.0);
            assert_near(&format!("{metric} p99"), p(&r, metric, "p99"), 100.0);
            assert_near(&format!("{metric} p99.9"), p(&r, metric, "p999"), 100.0);
        }
        // Nothing stalled: no wait hidden from the uncorrected tail.
        let kinds = finding_kinds(&r);
        check(
            !kinds.contains(&"coordinated_omission".to_string()),
            format!("coordinated_omission: {}", r["findings"]),
        );
        let saturated = kinds.contains(&"generator_saturated".to_string());
        check(
            !saturated,
            format!("generator_saturated: {}", r["findings"]),
        );
    });
    let (code, r) = run();
    // The SLO: p99 (100 ms) breaks p99<50ms; the others hold; exit 1.
    assert_eq!(code, Some(1));
    let checks = r["checks"].as_array().unwrap();
    let verdict = |rule: &str| checks.iter().find(|c| c["rule"] == rule).unwrap()["passed"].clone();
    assert_eq!(verdict("p99<50ms"), false);
    assert_eq!(verdict("p50<20ms"), true);
    assert_eq!(verdict("errors<0.1%"), true);
    // The text report names the broken rule.
    let out = whyslow(&[
        "load", "-q", "--rate", "200", "-c", "25", "-n", "100", "--slo", slo, &url,
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stdout(&out).contains("slo p99<50ms: BROKEN"),
        "{}",
        stdout(&out)
    );
    assert!(
        stdout(&out).contains("slo errors<0.1%: ok"),
        "{}",
        stdout(&out)
    );
    assert!(
        stderr(&out).contains("SLO broken: slo p99<50ms"),
        "{}",
        stderr(&out)
    );
}

/// 1 ms per request, and the server freezes once for 500 ms. At 500 req/s a
/// user arriving at t during the freeze waits until it ends: latency
/// uniform in [0, 500 ms] for the 500 ms × 500/s = 250 of 2000 requests
/// (f = 1/8) that fall in it, 1 ms for the rest. So p50 = 1 ms,
/// p99 = 1 + 500·(1 − 0.01/f) = 461 ms, p99.9 = 1 + 500·(1 − 0.001/f) = 497 ms.
/// A closed-loop view (uncorrected) sees one slow request per connection
/// (10 of 2000): its p99 stays near 1 ms and hides the freeze.
#[test]
fn corrected_latency_shows_a_freeze_that_uncorrected_hides() {
    let _serial = serial();
    with_retries(|| {
        // A new server each time: it freezes once, after its first request.
        let server = LatencyServer::start(LatencyPlan {
            freeze: Some((Duration::from_millis(1500), Duration::from_millis(500))),
            ..LatencyPlan::default()
        })
        .unwrap();
        let (code, r) = load(&["--rate", "500", "-c", "10", "-n", "2000", &server.url("/")]);
        assert_eq!(code, Some(0), "{r}");
        eprintln!("{}", r["load"]);
        assert_eq!(r["load"]["responses"], 2000);
        assert_near("corrected p50", p(&r, "corrected", "p50"), 1.0);
        assert_near("corrected p99", p(&r, "corrected", "p99"), 461.0);
        assert_near("corrected p99.9", p(&r, "corrected", "p999"), 497.0);
        let (hidden, shown) = (p(&r, "uncorrected", "p99"), p(&r, "corrected", "p99"));
        check(
            hidden < shown / 10.0,
            format!("uncorrected p99 {hidden} ms should hide the freeze"),
        );
        // Requests waited for their busy connection (queue), not for whyslow (lag).
        let queued = p(&r, "queue", "p99");
        check(queued > 400.0, format!("queue p99 {queued} ms"));
        // The gap is named as a finding, so --json carries it too.
        let kinds = finding_kinds(&r);
        check(
            kinds.contains(&"coordinated_omission".to_string()),
            format!("no coordinated_omission: {}", r["findings"]),
        );
        let saturated = kinds.contains(&"generator_saturated".to_string());
        check(
            !saturated,
            format!("generator_saturated: {}", r["findings"]),
        );
    });
}

fn result_file(dir: &std::path::Path, name: &str) -> (String, whyslow_load::LoadResult) {
    let path = dir.join(name);
    let text = std::fs::read_to_string(&path).unwrap();
    (
        path.to_string_lossy().into_owned(),
        whyslow_load::LoadResult::parse(&text).unwrap(),
    )
}

/// Two half-rate runs at the same time, merged, against one full-rate run
/// on the same server: the same requests and the same distribution; and
/// the merged histograms are exactly the sum of the halves'.
#[test]
fn merge_of_two_half_runs_equals_one_run() {
    let _serial = serial();
    let server = LatencyServer::start(held_plan()).unwrap();
    let url = server.url("/");
    let dir = tmpdir("load-merge");
    let out = |n: &str| dir.join(n).to_string_lossy().into_owned();
    let (full, a, b) = (out("full.json"), out("a.json"), out("b.json"));
    let merged_path = out("merged.json");
    with_retries(|| {
        let (code, _) = load(&["--rate", "400", "-c", "50", "-n", "1000", "-o", &full, &url]);
        assert_eq!(code, Some(0));
        let halves: Vec<_> = [&a, &b]
            .iter()
            .map(|o| {
                let args = [
                    "load", "-q", "--rate", "200", "-c", "25", "-n", "500", "-o", o, &url,
                ];
                std::process::Command::new(env!("CARGO_BIN_EXE_whyslow"))
                    .args(args)
                    .stdout(std::process::Stdio::null())
                    .spawn()
                    .unwrap()
            })
            .collect();
        for mut h in halves {
            assert!(h.wait().unwrap().success());
        }
        let m = whyslow(&["merge", "--json", "-o", &merged_path, &a, &b]);
        assert!(m.status.success(), "{}", stderr(&m));
        let merged = json(&m);
        let (_, one) = result_file(&dir, "full.json");
        let (_, m_file) = result_file(&dir, "merged.json");
        assert_eq!(m_file.responses, one.responses);
        assert_eq!(m_file.statuses, one.statuses);
        assert_eq!(m_file.runs, 2);
        // (Not the p99.9: of 1000 requests that is the 2nd-slowest, one
        // sample. Nor the p90: with one request in 50 held 100 ms, it lies
        // where the corrected latencies of the requests queued behind a slow
        // one climb from 1 to 100 ms, and one run alone put it anywhere from
        // 3.8 to 12 ms on a busy host.)
        for q in ["p50", "p99"] {
            let want = match q {
                "p50" => one.latency["corrected"].p50,
                _ => one.latency["corrected"].p99,
            } as f64
                / 1000.0;
            assert_near(
                &format!("merged {q} vs one run"),
                p(&merged, "corrected", q),
                want,
            );
        }
    });
    let (_, m_file) = result_file(&dir, "merged.json");
    // Exact: bucket for bucket, the merge is the sum of the two files.
    let (_, ra) = result_file(&dir, "a.json");
    let (_, rb) = result_file(&dir, "b.json");
    let mut sum = ra.recorded().unwrap();
    sum.add(&rb.recorded().unwrap());
    let merged_rec = m_file.recorded().unwrap();
    for metric in whyslow_load::Metric::ALL {
        assert_eq!(
            merged_rec.hist(metric),
            sum.hist(metric),
            "{}",
            metric.name()
        );
    }
    assert_eq!(merged_rec.hist(whyslow_load::Metric::Corrected).len(), 1000);
}

/// Ctrl-C mid-run: sending stops, in-flight requests get a bounded grace,
/// and the result file and HDR log hold everything measured so far.
#[test]
fn ctrl_c_stops_and_writes_what_was_measured() {
    let _serial = serial();
    let server = LatencyServer::start(LatencyPlan::default()).unwrap();
    let dir = tmpdir("load-sigint");
    let (res, log) = (dir.join("r.json"), dir.join("r.hlog"));
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_whyslow"))
        .args([
            "load",
            "-q",
            "--rate",
            "200",
            "-c",
            "4",
            "--duration",
            "60s",
            "--interval",
            "200ms",
        ])
        .args([
            "-o",
            res.to_str().unwrap(),
            "--hdr-log",
            log.to_str().unwrap(),
        ])
        .arg(server.url("/"))
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    // SAFETY: signals our own child process.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let asked = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(
            asked.elapsed() < whyslow_load::INTERRUPT_GRACE + Duration::from_secs(3),
            "did not stop"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(130));
    let (_, r) = result_file(&dir, "r.json");
    assert!(r.interrupted);
    assert!(r.responses >= 150 && r.responses <= 400, "{}", r.responses);
    // The log: HdrHistogram's parser reads it, and its intervals add up to the run.
    let intervals = whyslow_load::hdrlog::read(&std::fs::read(&log).unwrap()).unwrap();
    assert!(intervals.len() >= 5, "{} intervals", intervals.len());
    let counted: u64 = intervals
        .iter()
        .filter(|i| i.tag.is_none())
        .map(|i| i.histogram.len())
        .sum();
    assert_eq!(counted, r.responses);
}

/// Closed model: exactly -n requests; HTTP/2 streams share their connection.
#[test]
fn closed_model_counts_and_h2_streams_share_connections() {
    let _serial = serial();
    let server = LatencyServer::start(LatencyPlan {
        base: Duration::ZERO,
        ..LatencyPlan::default()
    })
    .unwrap();
    let (code, r) = load(&["-c", "4", "-n", "3000", &server.url("/")]);
    assert_eq!(code, Some(0));
    assert_eq!(r["load"]["responses"], 3000);
    assert_eq!(r["load"]["setup"]["model"], "closed");
    assert_eq!(r["load"]["latency"]["connect"]["count"], 4);

    let h2c = rt().block_on(async {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let a = l.local_addr().unwrap();
        tokio::spawn(whyslow_lab::tls_h2::serve_h2c(l, Default::default()));
        a
    });
    let url = format!("http://{h2c}/");
    let (code, r) = load(&[
        "--http2",
        "-c",
        "2",
        "--streams",
        "8",
        "--rate",
        "800",
        "-n",
        "800",
        &url,
    ]);
    assert_eq!(code, Some(0), "{r}");
    assert_eq!(r["load"]["responses"], 800);
    // 16 lanes, 2 connections: the streams rode on the connections they share.
    assert_eq!(r["load"]["latency"]["connect"]["count"], 2);
}

/// Over TLS (ALPN picks h2 or http/1.1), a handshake per connection.
#[test]
fn tls_connections_are_timed_once_each() {
    let _serial = serial();
    let cert = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_string()]).unwrap();
    let cfg = whyslow_lab::tls_h2::server_config(
        vec![cert.cert.der().to_vec()],
        cert.key_pair.serialize_der(),
    )
    .unwrap();
    let a = rt().block_on(async {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let a = l.local_addr().unwrap();
        tokio::spawn(whyslow_lab::tls_h2::serve_tls(l, cfg, Default::default()));
        a
    });
    let url = format!("https://127.0.0.1:{}/", a.port());
    for version in ["--http1.1", "--http2"] {
        let (code, r) = load(&["-k", version, "-c", "3", "--rate", "300", "-n", "300", &url]);
        assert_eq!(code, Some(0), "{version}: {r}");
        assert_eq!(r["load"]["responses"], 300, "{version}");
        assert_eq!(r["load"]["latency"]["tls"]["count"], 3, "{version}");
    }
}

/// --find-max: a server that answers one request at a time per connection
/// in 5 ms can take at most 2 × 200 = 400 req/s over 2 connections; past
/// that, requests queue without bound and the p99 explodes.
#[test]
fn find_max_brackets_the_capacity() {
    let _serial = serial();
    let server = LatencyServer::start(LatencyPlan {
        base: Duration::from_millis(5),
        ..LatencyPlan::default()
    })
    .unwrap();
    let args = [
        "--find-max",
        "--slo",
        "p99<50ms",
        "--rate",
        "100",
        "-c",
        "2",
        "--duration",
        "1s",
    ];
    let url = server.url("/");
    with_retries(|| {
        let (code, r) = load(&[&args[..], &[url.as_str()]].concat());
        let k = &r["find_max"];
        let (ok, bad) = (k["max_rate"].as_f64(), k["first_broken"].as_f64());
        let (Some(ok), Some(bad), Some(0)) = (ok, bad, code) else {
            return check(false, format!("no knee (exit {code:?}): {k}"));
        };
        assert!(ok < bad, "{k}");
        // The capacity is ~390/s on a quiet machine, less on a busy one.
        check((150.0..=400.0).contains(&ok), format!("max rate {ok}: {k}"));
        check(bad <= 800.0, format!("first broken {bad}: {k}"));
    });
}

/// Ramps and steps send exactly the requests their rate integrates to:
/// ∫ of 0 → 400/s over 2 s is 400; 100/s for 1 s then 300/s for 1 s is 400.
#[test]
fn ramp_and_steps_send_what_their_rate_integrates_to() {
    let _serial = serial();
    let server = LatencyServer::start(LatencyPlan::default()).unwrap();
    let url = server.url("/");
    for schedule in [["--ramp", "0:400:2s"], ["--steps", "100:1s,300:1s"]] {
        let (code, r) = load(&[schedule[0], schedule[1], "-c", "8", &url]);
        assert_eq!(code, Some(0), "{r}");
        assert_eq!(r["load"]["responses"], 400, "{schedule:?}");
        let rate = r["load"]["setup"]["target_rate"].as_f64().unwrap();
        assert!(
            (rate - 200.0).abs() < 1e-6,
            "{schedule:?}: mean rate {rate}"
        );
    }
}
