//! Traces in, from real instrumented apps: the fan-out (requests through a
//! pool of 5 to an API that is traced too) and the ORM (SQLAlchemy on a
//! real PostgreSQL), OpenTelemetry from PyPI (apps/otel_export.py), 8
//! clients at once. From their spans alone — a file as the Collector's
//! file exporter writes it (protobuf, and OTLP/JSON), and OTLP/HTTP into
//! `whyslow receive` — the broken variants name `pool_queueing` and
//! `n_plus_one`, the fixed neither, and the counts are the apps' own.

mod common;
use common::real::*;
use common::truth::read_app_truth;
use common::*;
use serde_json::Value;
use std::path::Path;
use std::process::{Command, Stdio};

const CLIENTS: &str = "8";
const REQUESTS: &str = "32";
/// The fan-out's calls per page, the API's delay, and its pools: case
/// 002's 5, and one no 8 pages at once can fill (the app's executor size).
const CALLS: usize = 11;
const DELAY_MS: &str = "30";
const POOLS: [(&str, usize); 2] = [("broken", 5), ("fixed", 176)];
/// Orders per ORM checkout: one lazy items query and one tax read each.
const ORDERS: usize = 20;

/// Where spans go: a file (by extension: `.json` OTLP/JSON, else
/// protobuf frames) or `whyslow receive`, stopped by this signal (Ctrl-C's
/// SIGINT, or a service manager's SIGTERM).
#[derive(Clone, Copy, Debug)]
enum Sink {
    File(&'static str),
    Receive(i32),
    /// `receive --otlp-grpc`, the apps exporting over OTLP/gRPC.
    ReceiveGrpc(i32),
}

/// Runs `apps` (given the sink for their spans), the load against `url`,
/// stops the apps (which flushes their spans) and analyzes the spans.
fn analyzed_spans(
    test: &str,
    sink: Sink,
    url: impl Fn(&[Server]) -> String,
    apps: impl FnOnce(&str) -> Vec<Server>,
) -> Value {
    let dir = tmpdir(test);
    let receiver = match sink {
        Sink::File(_) => None,
        Sink::Receive(_) => Some(Receiver::start("--otlp")),
        Sink::ReceiveGrpc(_) => Some(Receiver::start("--otlp-grpc")),
    };
    let target = match (sink, &receiver) {
        (Sink::File(ext), _) => dir.join(format!("spans.{ext}")).display().to_string(),
        (Sink::Receive(_), Some(r)) => format!("http://127.0.0.1:{}", r.port),
        (Sink::ReceiveGrpc(_), Some(r)) => format!("grpc://127.0.0.1:{}", r.port),
        _ => unreachable!(),
    };
    let servers = apps(&target);
    let url = url(&servers);
    let mut load = vec!["load"];
    load.extend(untraced_closed_load(CLIENTS, REQUESTS, &url));
    let out = whyslow(&load);
    assert!(out.status.success(), "{test}: {}", stderr(&out));
    drop(servers);
    match (receiver, sink) {
        (Some(r), Sink::Receive(signal) | Sink::ReceiveGrpc(signal)) => r.stop(test, signal),
        _ => {
            let out = whyslow(&["analyze", "--json", "--timeline", &target]);
            assert!(out.status.success(), "{test}: {}", stderr(&out));
            json(&out)
        }
    }
}

/// `whyslow receive --otlp` (or `--otlp-grpc`) on a free port, until interrupted.
struct Receiver {
    child: std::process::Child,
    port: u16,
}

impl Receiver {
    fn start(flag: &str) -> Receiver {
        let port = free_port();
        let child = Command::new(env!("CARGO_BIN_EXE_whyslow"))
            .args([
                "receive",
                flag,
                &format!("127.0.0.1:{port}"),
                "--json",
                "--timeline",
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        wait_listening(port);
        Receiver { child, port }
    }

    /// `signal`, then its report.
    fn stop(self, test: &str, signal: i32) -> Value {
        // SAFETY: plain kill(2) on our own child's pid.
        unsafe { libc::kill(self.child.id() as i32, signal) };
        let out = self.child.wait_with_output().unwrap();
        assert!(out.status.success(), "{test}: {}", stderr(&out));
        json(&out)
    }
}

/// The inbound requests of a report's timeline.
fn inbound_requests(report: &Value) -> usize {
    let exchanges = report["timeline"]["exchanges"].as_array().unwrap();
    exchanges.iter().filter(|e| e["role"] == "inbound").count()
}

/// Spans were the source, every call given by its span's parent, and the
/// requests as many as the app served.
fn read_from_spans(test: &str, report: &Value, truth: &Path) {
    let spans = &report["capture"]["spans"];
    assert!(spans.is_object(), "{test}: {}", report["capture"]);
    let served = read_app_truth(truth).len();
    let inbound = inbound_requests(report);
    assert_eq!(inbound, served, "{test}: requests");
    assert_eq!(spans["calls_without_request"], 0, "{test}: {spans}");
    let levels = common::truth::attribution_levels(report);
    assert!(
        !levels.is_empty() && levels.iter().all(|l| l == "span"),
        "{test}: {levels:?}"
    );
}

/// The same file with `--service-name api`: the traced callee's own
/// requests, one per call the front's pages made; a name no service has is
/// an error that lists the services there.
fn the_callee_by_name(run: &str, report: &Value, front_truth: &Path) {
    let file = report["capture"]["spans"]["from"].as_str().unwrap();
    let out = whyslow(&[
        "analyze",
        "--json",
        "--timeline",
        "--service-name",
        "api",
        file,
    ]);
    assert!(out.status.success(), "{run}: {}", stderr(&out));
    let api = json(&out);
    assert_eq!(api["capture"]["spans"]["service"], "api", "{run}");
    let inbound = inbound_requests(&api);
    let calls = read_app_truth(front_truth).len() * CALLS;
    assert_eq!(inbound, calls, "{run}: api's requests");
    let out = whyslow(&["analyze", "--service-name", "nope", file]);
    assert!(!out.status.success(), "{run}: a service not there");
    let said = stderr(&out);
    assert!(
        said.contains("front") && said.contains("api"),
        "{run}: {said}"
    );
}

#[test]
fn fanout_pool_is_named_from_spans_alone() {
    let _one = serial();
    let test = "fanout_pool_is_named_from_spans_alone";
    if !requirements_met(test, &[Need::Python("requests")])
        || !pypi_python_has(test, "opentelemetry.exporter.otlp.proto.http")
    {
        return;
    }
    for sink in [
        Sink::File("otlp"),
        Sink::File("json"),
        Sink::Receive(libc::SIGINT),
    ] {
        for (variant, pool) in POOLS {
            let run = format!("fanout {variant} via {sink:?}");
            let truth = tmpdir(&format!("otlp_fanout_{variant}")).join("truth.jsonl");
            let _ = std::fs::remove_file(&truth);
            let front = free_port();
            let report = analyzed_spans(
                &run,
                sink,
                |_| format!("http://127.0.0.1:{front}/dashboard"),
                |spans| {
                    let api_port = free_port();
                    let api_args = ["api".into(), api_port.to_string(), DELAY_MS.into()];
                    let api_truth = truth.with_extension("api");
                    let api = pypi_app_tracing(
                        "fanout_app.py",
                        api_port,
                        &api_args,
                        &api_truth,
                        ("api", spans),
                    );
                    let args = [
                        "front",
                        &front.to_string(),
                        &api_port.to_string(),
                        &CALLS.to_string(),
                        &pool.to_string(),
                    ]
                    .map(String::from);
                    let app =
                        pypi_app_tracing("fanout_app.py", front, &args, &truth, ("front", spans));
                    vec![api, app]
                },
            );
            read_from_spans(&run, &report, &truth);
            if let (Sink::File("otlp"), "broken") = (sink, variant) {
                the_callee_by_name(&run, &report, &truth);
            }
            let kinds = causes(&report);
            eprintln!("{run}: {kinds:?}");
            for f in report["findings"].as_array().into_iter().flatten().take(2) {
                eprintln!(
                    "  {} {} lost, {}",
                    f["kind"], f["time_lost_us"], f["summary"]
                );
            }
            assert!(
                !kinds.contains(&"n_plus_one".to_string()),
                "{run}: {kinds:?}"
            );
            if variant == "broken" {
                assert_eq!(
                    kinds.first().map(String::as_str),
                    Some("pool_queueing"),
                    "{run}: {kinds:?}"
                );
                let f = finding(&report, "pool_queueing").unwrap();
                let summary = f["summary"].as_str().unwrap();
                assert!(
                    summary.contains(&format!("one of {pool} connections")),
                    "{run}: {summary}"
                );
                for e in f["evidence"].as_array().unwrap() {
                    assert!(
                        e["in_flight_max"].as_u64() <= Some(pool as u64),
                        "{run}: {e}"
                    );
                    // Each page's calls, counted from spans, are the app's own.
                    assert_eq!(e["calls"], CALLS, "{run}: {e}");
                }
            } else {
                assert!(
                    !kinds.contains(&"pool_queueing".to_string()),
                    "{run}: {kinds:?}"
                );
            }
        }
    }
}

/// The ORM app (`variant`) on PostgreSQL at `pg_port`, its spans sent to
/// `sink` under load: the report, and the app's own record.
fn orm_spans(run: &str, sink: Sink, pg_port: u16, variant: &str) -> (Value, std::path::PathBuf) {
    let truth = tmpdir(&format!("otlp_orm_{variant}")).join("truth.jsonl");
    let _ = std::fs::remove_file(&truth);
    let port = free_port();
    let report = analyzed_spans(
        run,
        sink,
        |_| format!("http://127.0.0.1:{port}/checkout"),
        |spans| {
            let args = [
                port.to_string(),
                pg_port.to_string(),
                ORDERS.to_string(),
                variant.into(),
            ];
            vec![pypi_app_tracing(
                "orm_app.py",
                port,
                &args,
                &truth,
                ("shop", spans),
            )]
        },
    );
    (report, truth)
}

/// What a report names, without its timings: each finding's kind, subject,
/// occurrences and calls per request. Sorted: the rank follows time lost,
/// which differs from run to run where two findings lose about as much.
fn named(report: &Value) -> Vec<String> {
    let mut named: Vec<String> = report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            let per_request = &f["facts"]["calls_per_request"];
            format!(
                "{} {} {} {per_request}",
                f["kind"], f["subject"], f["occurrences"]
            )
        })
        .collect();
    named.sort();
    named
}

#[test]
fn spans_over_grpc_name_what_spans_over_http_name() {
    let _one = serial();
    let test = "spans_over_grpc_name_what_spans_over_http_name";
    let needs = [Need::Postgres, Need::Python("sqlalchemy")];
    if !requirements_met(test, &needs)
        || !pypi_python_has(test, "opentelemetry.exporter.otlp.proto.grpc")
    {
        return;
    }
    let (pg, _pg_dir) = postgres();
    let (http, _) = orm_spans(
        "orm over HTTP",
        Sink::Receive(libc::SIGTERM),
        pg.port,
        "broken",
    );
    let run = "orm over gRPC";
    let (grpc, truth) = orm_spans(run, Sink::ReceiveGrpc(libc::SIGTERM), pg.port, "broken");
    read_from_spans(run, &grpc, &truth);
    assert_eq!(
        causes(&grpc).first().map(String::as_str),
        Some("n_plus_one")
    );
    assert_eq!(named(&grpc), named(&http));
    assert_eq!(inbound_requests(&grpc), inbound_requests(&http));
}

#[test]
fn orm_n_plus_one_is_named_from_spans_alone() {
    let _one = serial();
    let test = "orm_n_plus_one_is_named_from_spans_alone";
    let needs = [Need::Postgres, Need::Python("sqlalchemy")];
    if !requirements_met(test, &needs)
        || !pypi_python_has(test, "opentelemetry.instrumentation.sqlalchemy")
    {
        return;
    }
    let (pg, _pg_dir) = postgres();
    for sink in [Sink::File("otlp"), Sink::Receive(libc::SIGTERM)] {
        for variant in ["broken", "fixed"] {
            let run = format!("orm {variant} via {sink:?}");
            let (report, truth) = orm_spans(&run, sink, pg.port, variant);
            read_from_spans(&run, &report, &truth);
            let kinds = causes(&report);
            eprintln!("{run}: {kinds:?}");
            assert!(
                !kinds.contains(&"pool_queueing".to_string()),
                "{run}: {kinds:?}"
            );
            if variant == "broken" {
                assert_eq!(
                    kinds.first().map(String::as_str),
                    Some("n_plus_one"),
                    "{run}: {kinds:?}"
                );
                // The lazy loads: one per order, in every checkout.
                let storms: Vec<&Value> = report["findings"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .filter(|f| f["kind"] == "n_plus_one")
                    .collect();
                let items = storms
                    .iter()
                    .find(|f| f["subject"].as_str().unwrap().contains("FROM items"))
                    .unwrap_or_else(|| panic!("{run}: {storms:?}"));
                assert_eq!(items["facts"]["calls_per_request"], ORDERS as f64, "{run}");
                assert_eq!(items["occurrences"], read_app_truth(&truth).len(), "{run}");
                // Parameters are not in SQLAlchemy's spans: said, not guessed.
                assert!(
                    items["summary"].as_str().unwrap().contains("unseen"),
                    "{run}"
                );
                assert!(
                    !kinds.contains(&"duplicate_calls".to_string()),
                    "{run}: {kinds:?}"
                );
            } else {
                assert!(
                    !kinds.contains(&"n_plus_one".to_string()),
                    "{run}: {kinds:?}"
                );
            }
        }
    }
}
