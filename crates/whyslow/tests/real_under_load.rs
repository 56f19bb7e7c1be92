//! The real apps of the case tests (SQLAlchemy on PostgreSQL, the requests
//! fan-out, redis-py, the tax service) serving 8 clients at once, through
//! `analyze` of a tcpdump capture of `whyslow load` and through `diagnose`
//! with a load phase. Each app records per request, out of band, every
//! call it made and the connection it used (apps/truth.py); whyslow's
//! attribution is held to that record: at most 1 % of the calls it gives
//! to a request may be another request's. The broken variant's top cause
//! is its own; the fixed variant names none, or — where concurrency itself
//! causes it — what the app's own record shows it caused.

mod common;
use common::real::*;
use common::truth::{
    read_app_own_times, read_app_truth, requests_overlapped, score, server_time_confirmed,
    AppOwnTime,
};
use common::*;
use serde_json::Value;
use std::path::{Path, PathBuf};
use whyslow_lab::truth::RequestTruth;

/// Clients at once: the production concurrency, scaled to a test.
const CLIENTS: &str = "8";
/// Share of the calls given to a request that may be given to the wrong one.
const MAX_WRONG_SHARE: f64 = 0.01;
/// diagnose's load phase; each app gives a rate at which its requests overlap.
const DIAGNOSE_DURATION: &str = "2s";

/// A running app: its servers (stopped on drop), its URL, and every port
/// its traffic uses (the front's first).
struct App {
    _servers: Vec<Server>,
    url: String,
    ports: Vec<u16>,
}

/// A recorded run: whyslow's report (with its timeline) and the app's record.
struct Run {
    report: Value,
    truth: Vec<RequestTruth>,
    /// Each request's own time by the app's clock.
    own: Vec<AppOwnTime>,
    /// The capture the report came from: a retransmission it names is real
    /// where tshark reads the same packets as resent.
    capture: PathBuf,
    /// Whether the load was diagnose's, at a set rate (requests overlap
    /// only now and then), or analyze's closed loop of 8 (always).
    paced: bool,
}

/// An app started by `start(truth file)`, loaded by `whyslow load -c 8 -n
/// requests` (no trace context) under tcpdump, the capture analyzed.
fn captured(test: &str, requests: usize, start: impl Fn(&Path) -> App) -> Run {
    let dir = tmpdir(test);
    let truth = dir.join("truth.jsonl");
    let app = start(&truth);
    let cap = dir.join("load.pcap");
    let n = requests.to_string();
    let dropped = tcpdump_while(&cap, &app.ports, || {
        let args = ["load", "-c", CLIENTS, "-n", &n, "--trace-context", "off"];
        let out = whyslow(&[&args[..], &[app.url.as_str()]].concat());
        assert!(out.status.success(), "{test}: {}", stderr(&out));
    });
    assert_eq!(dropped, 0, "{test}: tcpdump dropped packets");
    let report = analyzed_timeline(&cap, &app.ports[0].to_string());
    drop(app);
    held_to_truth(test, report, &truth, cap, false)
}

/// The same app under `diagnose` with a load phase of `rate` requests/s on
/// 8 connections.
fn diagnosed(test: &str, rate: u32, start: impl Fn(&Path) -> App) -> Run {
    let dir = tmpdir(test);
    let truth = dir.join("truth.jsonl");
    let app = start(&truth);
    let cap = dir.join("diagnose.pcapng");
    let save = ["--save", cap.to_str().unwrap()];
    let args = ["diagnose", "--json", "--timeline", "-n", "2", "-c", CLIENTS];
    let rate = rate.to_string();
    let load = ["--rate", &rate, "--duration", DIAGNOSE_DURATION];
    let out = whyslow(&[&args[..], &save[..], &load[..], &[app.url.as_str()]].concat());
    assert!(out.status.success(), "{test}: {}", stderr(&out));
    drop(app);
    let report = json(&out);
    let _ = std::fs::write(dir.join("report.json"), report.to_string());
    held_to_truth(test, report, &truth, cap, true)
}

/// Requests overlapped, and whyslow's attribution against the app's record.
fn held_to_truth(
    test: &str,
    report: Value,
    truth_file: &Path,
    capture: PathBuf,
    paced: bool,
) -> Run {
    let truth = read_app_truth(truth_file);
    assert!(
        requests_overlapped(&report),
        "{test}: requests never overlapped"
    );
    let recorded: usize = truth.iter().map(|r| r.calls.len()).sum();
    let s = score(&report, &truth);
    eprintln!(
        "{test}: {} requests, {recorded} calls recorded, {s:?}",
        truth.len()
    );
    // Every recorded call was found on the wire and scored (a call of
    // several exchanges, e.g. BEGIN and a statement, counts each).
    assert!(s.calls >= recorded, "{test}: {recorded} recorded, {s:?}");
    assert!(s.wrong_share() <= MAX_WRONG_SHARE, "{test}: {s:?}");
    Run {
        report,
        truth,
        own: read_app_own_times(truth_file),
        capture,
        paced,
    }
}

/// Whether a fixed app's run names no cause but a retransmission its
/// capture shows for real: under load on a busy 2-core host loopback does
/// retransmit now and then, and that is real. What it says of the
/// measurement (a debug build's generator missing 400/s) is no cause.
/// Nothing named that did not happen: a retransmission the capture shows,
/// and coordinated_omission — said of the load, from its own schedule (at
/// diagnose's rate a loaded machine's service may not keep up) — are real.
/// So is server_time where the app's own clock says each request it cites
/// spent that time in itself: eight threaded Python requests at once share
/// one interpreter lock on two cores, and the tail of a fixed app's
/// requests does sit over 100 ms in itself.
fn names_nothing_false(run: &Run) -> bool {
    causes_less_real_retransmissions(&run.report, &run.capture)
        .iter()
        .all(|k| {
            k == "coordinated_omission"
                || (k == "server_time" && server_time_confirmed(&run.report, &run.own))
        })
}

fn top(run: &Run) -> Option<String> {
    causes(&run.report).into_iter().next()
}

// --- SQLAlchemy on PostgreSQL: a session holds a connection per checkout.

/// Orders per checkout: one lazy items query and one tax read each.
const ORDERS: u64 = 20;

/// diagnose's rate on the ORM app. A constant rate spaces requests evenly,
/// so they overlap only when a request outlasts the interval: the broken
/// checkout takes tens of milliseconds, the fixed one a median of 3.7 ms
/// (one CI run), which at 60/s (16.7 ms apart) overlapped only by chance.
/// At 150/s the app (one interpreter lock) fell behind on a busy 2-core
/// host, its median at 60–95 ms of queueing in itself: server_time, truly.
/// At 100/s (10 ms apart) its median was 8–9 ms and its slower tenth (30
/// ms) overlaps the next ones.
fn diagnose_rate(variant: &str) -> u32 {
    if variant == "fixed" {
        100
    } else {
        60
    }
}

#[test]
fn orm_app_at_8_clients() {
    let _one = serial();
    let needs = [
        Need::Tool("tcpdump"),
        Need::Postgres,
        Need::Python("sqlalchemy"),
        Need::Python("psycopg2"),
        Need::Capture,
    ];
    if !requirements_met("orm_app_at_8_clients", &needs) {
        return;
    }
    let (pg, _dir) = postgres();
    for variant in ["broken", "fixed"] {
        let start = |truth: &Path| {
            let port = free_port();
            let args = [port, pg.port].map(|p| p.to_string());
            let args = [&args[..], &[ORDERS.to_string(), variant.into()]].concat();
            App {
                _servers: vec![python_app_recording("orm_app.py", port, &args, truth)],
                url: format!("http://127.0.0.1:{port}/checkout"),
                ports: vec![port, pg.port],
            }
        };
        let runs = [
            captured(&format!("orm_{variant}_analyze"), 48, start),
            diagnosed(
                &format!("orm_{variant}_diagnose"),
                diagnose_rate(variant),
                start,
            ),
        ];
        for run in &runs {
            let kinds = causes(&run.report);
            if variant == "broken" {
                // The app injects both, each one statement per order: which
                // loses more time is a near tie.
                let causes = ["n_plus_one", "duplicate_calls"];
                for cause in causes {
                    assert!(kinds.iter().any(|k| k == cause), "{kinds:?}");
                }
                assert!(
                    causes.contains(&top(run).unwrap_or_default().as_str()),
                    "{kinds:?}"
                );
                let per = run.truth[0].calls.len();
                assert!(per as u64 > 2 * ORDERS, "{per} calls recorded");
            } else {
                assert!(names_nothing_false(run), "fixed: {kinds:?}");
            }
        }
    }
}

// --- requests/urllib3 fan-out: each call checks a connection out of a
// pool all pages share (pool_block=True).

/// The case's numbers: 11 calls a page, 5 connections per host.
const CALLS: u64 = 11;
const SMALL_POOL: u64 = 5;
/// Each call's latency at the backing API.
const DELAY_MS: u64 = 30;
/// A call that took this much longer than the API's delay waited for a
/// connection (the app's own measure of its queue).
const WAITED_US: u64 = DELAY_MS * 1000 / 2;
/// Share of pages with a call that waited above which the pool really
/// queued under this load, and below which it did not.
const QUEUED_PAGES: f64 = 0.10;

/// Pages whose calls waited for a connection, as a share of all, by the
/// app's own timing of each call.
fn queued_share(truth: &[RequestTruth]) -> f64 {
    let waited = truth
        .iter()
        .filter(|r| {
            r.calls
                .iter()
                .any(|c| c.done_us - c.sent_us > DELAY_MS * 1000 + WAITED_US)
        })
        .count();
    waited as f64 / truth.len().max(1) as f64
}

#[test]
fn fanout_app_at_8_clients() {
    let _one = serial();
    let needs = [
        Need::Tool("tcpdump"),
        Need::Python("requests"),
        Need::Capture,
    ];
    if !requirements_met("fanout_app_at_8_clients", &needs) {
        return;
    }
    // A pool of 11 is the fan-out's fix one page at a time; 8 pages at
    // once still queue on it, and the app's timing says how much.
    for (pool, rate) in [(SMALL_POOL, 12), (CALLS, 40)] {
        let start = |truth: &Path| {
            let api_port = free_port();
            let args = ["api".into(), api_port.to_string(), DELAY_MS.to_string()];
            let api = python_app("fanout_app.py", api_port, &args);
            let port = free_port();
            let args = ["front", &port.to_string(), &api_port.to_string()];
            let args = [
                &args.map(String::from)[..],
                &[CALLS, pool].map(|n| n.to_string()),
            ]
            .concat();
            App {
                _servers: vec![
                    api,
                    python_app_recording("fanout_app.py", port, &args, truth),
                ],
                url: format!("http://127.0.0.1:{port}/dashboard"),
                ports: vec![port, api_port],
            }
        };
        let runs = [
            captured(&format!("fanout_{pool}_analyze"), 24, start),
            diagnosed(&format!("fanout_{pool}_diagnose"), rate, start),
        ]
        .map(|run| {
            let told = score(&run.report, &run.truth);
            (run, told)
        });
        for (run, told) in &runs {
            let kinds = causes(&run.report);
            let queued = queued_share(&run.truth);
            let named = finding(&run.report, "pool_queueing");
            eprintln!("pool {pool}: {queued:.2} of pages queued by the app's timing; {kinds:?}");
            // The small pool queues at any coverage: the pool's connections
            // all busy while calls wait is on the wire whoever's calls they
            // are (calls not told apart count as the pool's, ambiguous).
            if pool == SMALL_POOL {
                assert!(queued >= QUEUED_PAGES, "pool {pool}: {queued}");
                assert_eq!(
                    top(run).as_deref(),
                    Some("pool_queueing"),
                    "pool {pool}: {told:?} {kinds:?}"
                );
                // The pool's size: measured on each request told apart, or
                // from the connections busy at once where none was.
                let named = named.unwrap();
                match named["facts"]["connections"].as_f64() {
                    Some(connections) => assert_eq!(connections, pool as f64, "{named}"),
                    None => {
                        for e in named["evidence"].as_array().unwrap() {
                            assert_eq!(e["in_flight_max"], pool, "{e}");
                        }
                    }
                }
            }
            if queued == 0.0 {
                assert!(kinds.is_empty(), "pool {pool}: {kinds:?}");
            }
            // coordinated_omission is said of the load: its 8 connections
            // could not keep the schedule while the pages queued. A
            // retransmission is real where the capture shows it. A front
            // descheduled once on a loaded host is one page's stall, not
            // the service's own time (`thresholds::MIN_REQUEST_SHARE`).
            let real = |k: &String| k == "pool_queueing" || k == "coordinated_omission";
            let kinds = causes_less_real_retransmissions(&run.report, &run.capture);
            assert!(kinds.iter().all(real), "pool {pool}: {kinds:?}");
        }
    }
}

// --- redis-py: a page's pipeline holds a pooled connection for a write
// and a read.

/// What a redis-py app's capture needs.
fn redis_py_needs() -> [Need<'static>; 4] {
    [
        Need::Tool("tcpdump"),
        Need::Tool("redis-server"),
        Need::Python("redis"),
        Need::Capture,
    ]
}

/// A large stash, smaller than the case's 16 MiB: 8 pages at once write it.
const STASH_BYTES: usize = 2 << 20;

#[test]
fn cache_app_at_8_clients() {
    let _one = serial();
    let needs = redis_py_needs();
    if !requirements_met("cache_app_at_8_clients", &needs) {
        return;
    }
    // Pages take a few milliseconds, the fixed one less than one: only
    // closed-loop clients overlap them. (An open load at a rate that does,
    // 400/s of 2 MiB writes, overflows the capture ring: see the 16 MiB
    // case in cache_real.)
    for variant in ["broken", "fixed"] {
        let start = |truth: &Path| {
            let redis = redis();
            let port = free_port();
            let args = [
                port.to_string(),
                redis.port.to_string(),
                STASH_BYTES.to_string(),
                variant.into(),
            ];
            let redis_port = redis.port;
            App {
                _servers: vec![
                    redis,
                    python_app_recording("cache_app.py", port, &args, truth),
                ],
                url: format!("http://127.0.0.1:{port}/product/42"),
                ports: vec![port, redis_port],
            }
        };
        let runs = [captured(&format!("cache_{variant}_analyze"), 48, start)];
        for run in &runs {
            let kinds = causes(&run.report);
            if variant == "broken" {
                assert_eq!(top(run).as_deref(), Some("pipeline_hol"), "{kinds:?}");
            } else {
                // The writer's back-to-back 2 MiB stashes fill Redis's
                // window on its own connection: real, and no page waits.
                // A retransmission or zero window named is held to tshark's
                // reading of this run's capture.
                let beyond_tcp = causes_less_real_tcp(&run.report, &run.capture);
                assert!(beyond_tcp.is_empty(), "fixed: {kinds:?} {beyond_tcp:?}");
            }
        }
    }
}

/// A stash whose transfer outlasts a page: one client's pages come and go
/// while a write is still being sent (whyslow once took Redis for the
/// service there, its writes enclosing the pages).
const ASYNC_STASH_BYTES: usize = 1 << 20;

/// Writes no request waits for: each page queues one and answers; a writer
/// thread pipelines what is queued on a connection of its own, after the
/// pages answered. No request waited for Redis, so nothing is named — one
/// client at a time and eight at once, through `analyze` of a tcpdump
/// capture with the service left for whyslow to find.
#[test]
fn fire_and_forget_writes_name_nothing() {
    let _one = serial();
    let needs = redis_py_needs();
    if !requirements_met("fire_and_forget_writes_name_nothing", &needs) {
        return;
    }
    for (clients, requests) in [("1", "40"), (CLIENTS, "160")] {
        let dir = tmpdir(&format!("fire_and_forget_{clients}"));
        let redis = redis();
        let port = free_port();
        let args = [port, redis.port]
            .map(|p| p.to_string())
            .into_iter()
            .chain([ASYNC_STASH_BYTES.to_string(), "async".into()])
            .collect::<Vec<_>>();
        let app = python_app("cache_app.py", port, &args);
        let cap = dir.join("load.pcap");
        let url = format!("http://127.0.0.1:{port}/product/42");
        let dropped = tcpdump_while(&cap, &[port, redis.port], || {
            let args = [
                "load",
                "-c",
                clients,
                "-n",
                requests,
                "--trace-context",
                "off",
            ];
            let out = whyslow(&[&args[..], &[url.as_str()]].concat());
            assert!(out.status.success(), "{}", stderr(&out));
        });
        assert_eq!(dropped, 0, "tcpdump dropped packets");
        drop(app);
        let out = whyslow(&["analyze", "--json", cap.to_str().unwrap()]);
        assert!(out.status.success(), "{}", stderr(&out));
        let report = json(&out);
        // Redis's window may close under a 1 MiB write: real where tshark
        // reads the same, and a fact of TCP, not a request's wait.
        let kinds = causes_less_real_tcp(&report, &cap);
        assert!(kinds.is_empty(), "{clients} client(s): {kinds:?}");
    }
}

/// The backing server of a run: the one port the service called.
fn run_tax_port(report: &Value) -> u64 {
    report["capture"]["backing_ports"][0].as_u64().unwrap()
}

// --- The tax service: a checkout's call waits on a service that blocks
// every EVERY-th call while holding one lock.

const EVERY: u64 = 20;
const STALL_MS: u64 = 300;
/// Share of the tax calls diagnose's paced run must give: 90–100 % in
/// four runs, the rest made while requests overlapped around a stall; a
/// busy host slows the app and overlaps more of them.
const PACED_CALLS_TOLD: f64 = 0.6;

#[test]
fn stall_app_at_8_clients() {
    let _one = serial();
    let needs = [
        Need::Tool("tcpdump"),
        Need::Python("requests"),
        Need::Capture,
    ];
    if !requirements_met("stall_app_at_8_clients", &needs) {
        return;
    }
    // The fixed checkout answers at once: only a high rate overlaps it.
    for (variant, rate) in [("broken", 40), ("fixed", 400)] {
        let start = |truth: &Path| {
            let (tax, checkout) = stall_apps(variant, EVERY, STALL_MS, Some(truth));
            App {
                url: format!("http://127.0.0.1:{}/checkout", checkout.port),
                ports: vec![checkout.port, tax.port],
                _servers: vec![tax, checkout],
            }
        };
        let runs = [
            captured(&format!("stall_{variant}_analyze"), 160, start),
            diagnosed(&format!("stall_{variant}_diagnose"), rate, start),
        ];
        for run in &runs {
            let kinds = causes(&run.report);
            if variant == "broken" {
                // At diagnose's rate requests overlap only around a stall:
                // the stall is named and nearly every call given. In a
                // closed loop of 8 (analyze) a stall holds its call while
                // the others come and go, and how many calls the wire
                // tells apart varied from 39 % to 86 % between runs: no
                // floor holds there, but the cause is named on the tax
                // service whatever the coverage.
                let told = score(&run.report, &run.truth);
                let top = top(run).unwrap_or_default();
                if run.paced {
                    assert!(told.coverage() >= PACED_CALLS_TOLD, "{told:?}");
                    assert_eq!(top, "periodic_stall", "{kinds:?}");
                } else {
                    let on_tax = ["periodic_stall", "slow_dependency"];
                    assert!(on_tax.contains(&top.as_str()), "{told:?} {kinds:?}");
                }
                let named = finding(&run.report, &top).unwrap();
                let tax = format!(":{}", run_tax_port(&run.report));
                let said = [&named["subject"], &named["summary"]];
                assert!(
                    said.iter().any(|v| v.as_str().unwrap_or("").contains(&tax)),
                    "{named}"
                );
            } else {
                assert!(names_nothing_false(run), "fixed: {kinds:?}");
            }
        }
    }
}
