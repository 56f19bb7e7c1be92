//! A service instrumented with OpenTelemetry from PyPI (apps/otel_app.py:
//! psycopg2 with sqlcommenter, requests, threading), serving 16 clients at
//! once, with a database pool that checks a connection out per statement
//! so that the statements of requests in flight share connections. Its
//! calls are held to the app's own record (apps/truth.py) three ways:
//! under `diagnose` (whyslow's own sampled `traceparent`), from a capture
//! of a client that starts its own traces, and — the service starting a
//! trace per request — from a capture of a client that sends none.

mod common;
use common::real::*;
use common::truth::{in_exact_trace_groups, read_app_truth, requests_overlapped, score, Score};
use common::*;
use serde_json::Value;
use std::path::Path;

const CLIENTS: usize = 16;
/// Per request: statements, each on a connection checked out for it alone…
const STATEMENTS: u32 = 4;
/// …from a pool smaller than the clients, so connections pass between requests;
const DB_POOL: u32 = 4;
/// …and calls at once to the backing API, from an executor.
const API_CALLS: u32 = 3;
const API_DELAY_MS: u32 = 2;
/// Requests of each captured run.
const REQUESTS: usize = 160;
/// Share of the calls a client that sends no trace context must find in a
/// group of exactly their request's calls: the service's own traces group
/// them whatever the concurrency. Which inbound request a group answers,
/// the wire tells only by timing: a Python service's 16 threads wait for
/// the interpreter lock and for the pool of 4 between reading a request
/// and its first call (30–60 ms at the median here), so most groups fit
/// several requests alike and are left ambiguous, never guessed.
const UNTRACED_MIN_GROUPED: f64 = 0.99;

struct App {
    _servers: Vec<Server>,
    front: u16,
    ports: Vec<u16>,
}

impl App {
    fn url(&self) -> String {
        format!("http://127.0.0.1:{}/checkout", self.front)
    }
}

fn start(pg_port: u16, truth: &Path) -> App {
    let api = free_port();
    let api_args = ["api".into(), api.to_string(), API_DELAY_MS.to_string()];
    let api_server = python_app("fanout_app.py", api, &api_args);
    let front = free_port();
    let args = [
        front.to_string(),
        api.to_string(),
        pg_port.to_string(),
        STATEMENTS.to_string(),
        API_CALLS.to_string(),
        DB_POOL.to_string(),
    ];
    let front_server = pypi_app_recording("otel_app.py", front, &args, truth);
    App {
        _servers: vec![api_server, front_server],
        front,
        ports: vec![front, api, pg_port],
    }
}

/// The app's record and whyslow's attribution against it: requests
/// overlapped, every recorded call was found, none went to the wrong request.
fn held_to_truth(test: &str, report: &Value, truth_file: &Path) -> Score {
    let truth = read_app_truth(truth_file);
    assert!(
        requests_overlapped(report),
        "{test}: requests never overlapped"
    );
    let recorded: usize = truth.iter().map(|r| r.calls.len()).sum();
    let expected = (STATEMENTS + API_CALLS) as usize;
    assert!(
        truth.iter().all(|r| r.calls.len() == expected),
        "{test}: each request made {expected} calls"
    );
    let s = score(report, &truth);
    eprintln!(
        "{test}: {} requests, {recorded} calls recorded, {s:?}",
        truth.len()
    );
    assert!(s.calls >= recorded, "{test}: {recorded} recorded, {s:?}");
    assert_eq!(
        s.wrong,
        0,
        "{test}: {s:?}, wrong by rule {:?}",
        common::truth::wrong_by_rule(report, &truth)
    );
    s
}

/// Every HTTP and SQL call came with its request's own trace id.
fn all_by_trace_context(test: &str, report: &Value) {
    let calls: Vec<&Value> = report["timeline"]["exchanges"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["role"] == "outbound")
        .collect();
    assert!(!calls.is_empty(), "{test}: no calls");
    for e in calls {
        assert_eq!(e["attribution"], "trace_context", "{test}: {e}");
    }
}

/// `run` under tcpdump of the app's ports, the capture analyzed.
fn captured(test: &str, app: &App, run: impl FnOnce()) -> Value {
    let cap = tmpdir(test).join("load.pcap");
    let dropped = tcpdump_while(&cap, &app.ports, run);
    assert_eq!(dropped, 0, "{test}: tcpdump dropped packets");
    analyzed_timeline(&cap, &app.front.to_string())
}

#[test]
fn otel_app_at_16_clients_is_attributed_by_its_traces() {
    let _one = serial();
    let test = "otel_app_at_16_clients_is_attributed_by_its_traces";
    let needs = [
        Need::Tool("tcpdump"),
        Need::Postgres,
        Need::Python("psycopg2"),
        Need::Python("requests"),
        Need::Capture,
    ];
    if !requirements_met(test, &needs)
        || !pypi_python_has(test, "opentelemetry.instrumentation.psycopg2")
    {
        return;
    }
    let (pg, _dir) = postgres();
    let clients = CLIENTS.to_string();

    // whyslow's own sampled traceparent, probes and a load phase.
    let truth = tmpdir("otel_diagnose").join("truth.jsonl");
    let app = start(pg.port, &truth);
    let args = [
        "diagnose",
        "--json",
        "--timeline",
        "-n",
        "2",
        "-c",
        &clients,
    ];
    let load = ["--rate", "300", "--duration", "2s"];
    let out = whyslow(&[&args[..], &load[..], &[app.url().as_str()]].concat());
    assert!(out.status.success(), "{}", stderr(&out));
    drop(app);
    let report = json(&out);
    all_by_trace_context("diagnose", &report);
    let s = held_to_truth("diagnose", &report, &truth);
    assert_eq!(s.given, s.calls, "diagnose: {s:?}");

    // Another client that starts a sampled trace per request.
    let truth = tmpdir("otel_traced_client").join("truth.jsonl");
    let app = start(pg.port, &truth);
    let report = captured("otel_traced_client", &app, || {
        let args = [
            "127.0.0.1".into(),
            app.front.to_string(),
            "/checkout".into(),
        ];
        let args = [&args[..], &[REQUESTS.to_string(), clients.clone()]].concat();
        let out = python_run("traced_client.py", &args);
        assert!(out.status.success(), "{}", stderr(&out));
    });
    drop(app);
    all_by_trace_context("traced client", &report);
    let s = held_to_truth("traced client", &report, &truth);
    assert_eq!(s.given, s.calls, "traced client: {s:?}");

    // A client that sends none: the service starts a trace per request.
    let truth = tmpdir("otel_untraced_client").join("truth.jsonl");
    let app = start(pg.port, &truth);
    let report = captured("otel_untraced_client", &app, || {
        let n = REQUESTS.to_string();
        let args = ["load", "-c", &clients, "-n", &n, "--trace-context", "off"];
        let out = whyslow(&[&args[..], &[app.url().as_str()]].concat());
        assert!(out.status.success(), "{}", stderr(&out));
    });
    drop(app);
    held_to_truth("untraced client", &report, &truth);
    let (grouped, calls) = in_exact_trace_groups(&report, &read_app_truth(&truth));
    eprintln!("untraced client: {grouped} of {calls} calls in their request's own trace group");
    assert!(
        grouped as f64 >= UNTRACED_MIN_GROUPED * calls as f64,
        "untraced client: {grouped} of {calls} calls grouped"
    );
}
