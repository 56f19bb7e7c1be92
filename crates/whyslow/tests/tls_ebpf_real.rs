//! Backing calls over TLS with no key log anywhere, read through the eBPF
//! source's OpenSSL uprobes: case 002's fan-out calling its API over HTTPS
//! (requests, a pool of 5, Python's ssl on the system libssl) and case 003's
//! ORM on PostgreSQL with `sslmode=require` (psycopg2-binary from PyPI,
//! whose libpq brings its own libssl). `diagnose --ebpf` names the causes
//! with the counts the apps made; without `--ebpf` the calls stay encrypted
//! and the report says why. Under 16 clients, attribution is held to the
//! apps' own per-request record.

mod common;
use common::real::*;
use common::truth::{held_to_truth_by_thread, read_app_truth, requests_overlapped, score};
use common::*;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// Case 002's numbers: 11 calls a page, 5 connections to the API.
const CALLS: u64 = 11;
const POOL: u64 = 5;
const DELAY_MS: u64 = 30;
/// Orders per checkout: one lazy items query and one tax read each.
const ORDERS: u64 = 20;
const CLIENTS: &str = "16";

const FANOUT_NEEDS: &[Need] = &[
    Need::Tool("openssl"),
    Need::Python("requests"),
    Need::Capture,
    Need::Ebpf,
];

/// Where the front's calls run: on one executor all pages share (its
/// threads outlive the page that started them), or on threads each page
/// starts and joins before answering.
#[derive(Clone, Copy, PartialEq)]
enum CallThreads {
    Shared,
    PerPage,
}

/// The HTTPS API and a front with a pool of `POOL` connections to it,
/// trusting the API's certificate only; the front records its calls in
/// `truth` when given.
fn fanout(dir: &Path, truth: Option<&Path>, threads: CallThreads) -> (Server, Server) {
    let (cert, key) = self_signed(dir);
    let (cert, key) = (cert.display().to_string(), key.display().to_string());
    let api_port = free_port();
    let api_args = [
        "api",
        &api_port.to_string(),
        &DELAY_MS.to_string(),
        &cert,
        &key,
    ];
    let api = python_app("fanout_app.py", api_port, &api_args.map(String::from));
    let port = free_port();
    let args = [
        "front",
        &port.to_string(),
        &api_port.to_string(),
        &CALLS.to_string(),
        &POOL.to_string(),
        &cert,
    ]
    .map(String::from);
    let mut args = args.to_vec();
    if threads == CallThreads::PerPage {
        args.push("--threads-per-page".into());
    }
    let front = match truth {
        Some(t) => python_app_recording("fanout_app.py", port, &args, t),
        None => python_app("fanout_app.py", port, &args),
    };
    (api, front)
}

fn diagnose(url: &str, extra: &[&str]) -> Value {
    let mut args = vec!["diagnose", "--json", "--timeline"];
    args.extend(extra);
    args.push(url);
    let out = whyslow(&args);
    assert!(out.status.success(), "{}", stderr(&out));
    json(&out)
}

/// Exchanges of the timeline to `port`, by protocol.
fn protocols_to(report: &Value, port: u16) -> Vec<String> {
    exchanges_to(report, port)
        .iter()
        .map(|e| e["protocol"].as_str().unwrap().to_string())
        .collect()
}

fn plaintext_calls(report: &Value) -> u64 {
    report["capture"]["threads"]["plaintext_calls"]
        .as_u64()
        .unwrap_or(0)
}

/// Without keys and without --ebpf: no call is made up, and the report
/// says the calls are encrypted, why, and what would open them.
fn left_encrypted(report: &Value, port: u16) {
    assert!(protocols_to(report, port).iter().all(|p| p == "tls"));
    let kinds = causes(report);
    assert!(
        !kinds
            .iter()
            .any(|k| k == "pool_queueing" || k == "n_plus_one"),
        "{kinds:?}"
    );
    let skipped = not_examined(report);
    let said = skipped
        .iter()
        .find(|s| s["what"].as_str().unwrap().contains("TLS"))
        .unwrap_or_else(|| panic!("{skipped:?}"));
    let why = said["why"].as_str().unwrap();
    assert!(why.contains("--ebpf"), "{why}");
}

#[test]
fn https_fanout_without_keys_named_through_ebpf() {
    let _one = serial();
    let test = "https_fanout_without_keys";
    if !requirements_met(test, FANOUT_NEEDS) {
        return;
    }
    let dir = tmpdir("tls_ebpf_fanout");
    let (api, front) = fanout(&dir, None, CallThreads::Shared);
    let url = format!("http://127.0.0.1:{}/dashboard", front.port);
    let report = diagnose(&url, &["--ebpf", "-n", "6"]);
    assert!(plaintext_calls(&report) > 0, "{}", report["capture"]);
    assert!(protocols_to(&report, api.port).iter().all(|p| p == "http1"));
    let kinds = causes(&report);
    assert_eq!(
        kinds.first().map(String::as_str),
        Some("pool_queueing"),
        "{kinds:?}"
    );
    let f = finding(&report, "pool_queueing").unwrap();
    for e in f["evidence"].as_array().unwrap() {
        assert_eq!(e["in_flight_max"], POOL, "{e}");
        let calls = e["calls"].as_u64().unwrap();
        assert!(calls > POOL && calls <= CALLS, "{e}");
    }
    // ceil(11/5) = 3 rounds of the API's delay where 1 would do.
    let lost = f["time_lost_per_occurrence_us"].as_u64().unwrap() as f64;
    let truth = ((CALLS.div_ceil(POOL) - 1) * DELAY_MS * 1000) as f64;
    assert!(
        lost >= 0.75 * truth && lost <= 1.5 * truth,
        "{lost} vs {truth}"
    );
    left_encrypted(&diagnose(&url, &["-n", "3"]), api.port);
}

/// `capture --ebpf` of the front under 16 clients, read back with the
/// app's own record of which page made each call.
fn fanout_at_16_clients(name: &str, threads: CallThreads) -> Option<(Value, PathBuf)> {
    let _one = serial();
    if !requirements_met(name, FANOUT_NEEDS) {
        return None;
    }
    let dir = tmpdir(name);
    let truth_file = dir.join("truth.jsonl");
    let (api, front) = fanout(&dir, Some(&truth_file), threads);
    let cap = dir.join("load.pcapng");
    let url = format!("http://127.0.0.1:{}/dashboard", front.port);
    let port = front.port.to_string();
    let load = ["-c", CLIENTS, "-n", "64", "--trace-context", "off", &url];
    let out = ebpf_captured_under_load(front.pid(), &[front.port, api.port], &cap, &load);
    assert!(out.status.success(), "{}", stderr(&out));
    drop(front);
    let report = analyzed_timeline(&cap, &port);
    assert!(requests_overlapped(&report), "requests never overlapped");
    Some((report, truth_file))
}

/// Calls on an executor all pages share: every one read in the clear, and
/// none given to the wrong page.
#[test]
fn https_fanout_at_16_clients_held_to_its_record() {
    let Some((report, truth_file)) =
        fanout_at_16_clients("https_fanout_at_16_clients", CallThreads::Shared)
    else {
        return;
    };
    let truth = read_app_truth(&truth_file);
    let recorded: usize = truth.iter().map(|r| r.calls.len()).sum();
    let s = score(&report, &truth);
    eprintln!("https fan-out at {CLIENTS} clients: {recorded} calls recorded, {s:?}");
    assert_eq!(s.calls, recorded, "every call read in the clear: {s:?}");
    assert_eq!(recorded as u64, 64 * CALLS);
    // The executor's threads were started by the first pages and live on
    // to serve later ones, on one pool all pages share: neither the thread
    // nor the wire tells most calls apart, and none may be given wrongly.
    assert!(s.wrong_share() <= 0.01, "{s:?}");
}

/// Calls on threads each page starts and joins: each thread worked for
/// the page whose handler started it, so every call is given by thread.
#[test]
fn https_fanout_on_threads_per_page_given_by_thread() {
    let name = "https_fanout_threads_per_page";
    let Some((report, truth_file)) = fanout_at_16_clients(name, CallThreads::PerPage) else {
        return;
    };
    held_to_truth_by_thread(name, &report, &truth_file);
    let truth = read_app_truth(&truth_file);
    assert_eq!(
        truth.iter().map(|r| r.calls.len() as u64).sum::<u64>(),
        64 * CALLS
    );
}

#[test]
fn orm_over_sslmode_require_named_and_attributed_by_thread() {
    let _one = serial();
    let test = "orm_over_sslmode_require";
    let needs = [
        Need::Postgres,
        Need::Python("sqlalchemy"),
        Need::Capture,
        Need::Ebpf,
    ];
    if !requirements_met(test, &needs) || !pypi_python_has(test, "psycopg2") {
        return;
    }
    let (pg, _pg_dir) = postgres_with(true);
    let dir = tmpdir("tls_ebpf_orm");
    let truth_file = dir.join("truth.jsonl");
    let port = free_port();
    let args = [
        port.to_string(),
        pg.port.to_string(),
        ORDERS.to_string(),
        "broken".into(),
        "ssl".into(),
    ];
    let app = pypi_app_recording("orm_app.py", port, &args, &truth_file);
    let url = format!("http://127.0.0.1:{port}/checkout");
    let report = diagnose_checkouts(&url);
    let plain = read_as_postgres(&report, pg.port);
    assert!(
        plain,
        "the statements were read in the clear: {}",
        report["capture"]
    );
    assert_items_n_plus_one(&report, ORDERS);
    let kinds = causes(&report);
    assert!(
        matches!(
            kinds.first().map(String::as_str),
            Some("n_plus_one" | "duplicate_calls")
        ),
        "{kinds:?}"
    );
    // Every statement given by the thread that ran it, to the checkout the
    // app says made it.
    held_to_truth_by_thread("orm over TLS", &report, &truth_file);
    drop(app);
    // The same app without --ebpf: the statements stay encrypted.
    let app = pypi_app_recording("orm_app.py", port, &args, &dir.join("truth2.jsonl"));
    left_encrypted(&diagnose(&url, &["-n", "2"]), pg.port);
    drop(app);
}

/// Whether every exchange to `port` was read as PostgreSQL.
fn read_as_postgres(report: &Value, port: u16) -> bool {
    let protocols = protocols_to(report, port);
    plaintext_calls(report) > 0
        && !protocols.is_empty()
        && protocols.iter().all(|p| p == "postgres")
}
