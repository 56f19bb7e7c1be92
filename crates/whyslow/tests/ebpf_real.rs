//! The eBPF source on a real threaded app: SQLAlchemy on PostgreSQL serving
//! 16 clients at once, a thread per connection, recorded with
//! `whyslow capture --ebpf --pid APP` and read back with `analyze`. From the
//! wire alone, the statements of checkouts in flight together are partly
//! ambiguous (bursts of answers within a millisecond); with the thread that
//! read each request and sent each statement, every call is given, by
//! thread, to the request the app's own record says made it.

mod common;
use common::real::*;
use common::truth::app_pool_waits;
use common::truth::held_to_truth_by_thread as held_to_truth;
use common::*;
use serde_json::Value;

const CLIENTS: &str = "16";
const REQUESTS: &str = "96";
/// Orders per checkout: one lazy items query and one tax read each.
const ORDERS: &str = "20";
#[test]
fn orm_app_at_16_clients_attributed_by_thread() {
    let _one = serial();
    let test = "orm_app_at_16_clients_attributed_by_thread";
    let needs = [
        Need::Postgres,
        Need::Python("sqlalchemy"),
        Need::Python("psycopg2"),
        Need::Capture,
        Need::Ebpf,
    ];
    if !requirements_met(test, &needs) {
        return;
    }
    let (pg, _pg_dir) = postgres();
    for variant in ["broken", "fixed"] {
        let dir = tmpdir(&format!("ebpf_orm_{variant}"));
        let truth_file = dir.join("truth.jsonl");
        let port = free_port();
        let args = [
            port.to_string(),
            pg.port.to_string(),
            ORDERS.into(),
            variant.into(),
        ];
        let app = python_app_recording("orm_app.py", port, &args, &truth_file);
        let cap = dir.join("load.pcapng");
        let url = format!("http://127.0.0.1:{port}/checkout");
        let (port_s, pg_s) = (port.to_string(), pg.port.to_string());
        let load = untraced_closed_load(CLIENTS, REQUESTS, &url);
        let out = ebpf_captured_under_load(app.pid(), &[port, pg.port], &cap, &load);
        assert!(out.status.success(), "{variant}: {}", stderr(&out));
        assert!(
            stderr(&out).contains(" 0 lost"),
            "{variant}: {}",
            stderr(&out)
        );
        drop(app);
        let report = analyzed_timeline(&cap, &port_s);
        held_to_truth(variant, &report, &truth_file);
        if variant == "broken" {
            cut_events_file_is_a_note(&cap, &port_s, &report);
        }
        let kinds = causes(&report);
        if variant == "broken" {
            let top = kinds.first().map(String::as_str);
            assert!(
                matches!(top, Some("n_plus_one" | "duplicate_calls")),
                "{kinds:?}"
            );
            diagnosed_by_thread(&pg_s);
        } else {
            // Sixteen threads of one Python process share one interpreter
            // lock on this machine's cores: the service's own time is real
            // at this load and may be named. What overlap used to fool —
            // causes built on per-request counts — must name nothing.
            let own_time = ["server_time"];
            let pool_named = finding(&report, "pool_queueing");
            let waits = app_pool_waits(&truth_file);
            eprintln!(
                "fixed: the app waited for a pooled connection in {} of {} checkouts, {} µs in all",
                waits.iter().filter(|w| **w > 0).count(),
                waits.len(),
                waits.iter().sum::<u64>()
            );
            // A retransmission named is held to tshark's reading of this
            // run's capture.
            let named = causes_less_real_retransmissions(&report, &cap);
            assert!(
                named
                    .iter()
                    .all(|k| own_time.contains(&k.as_str()) || k == "pool_queueing"),
                "fixed: {kinds:?} {named:?}"
            );
            if let Some(f) = pool_named {
                pool_queueing_measured_by_the_app(f, &truth_file);
            }
        }
    }
}

/// SQLAlchemy's pool holds 15 connections at most: at 16 clients a
/// checkout may wait for one to be returned, a real queue the app times
/// (apps/orm_app.py). A pool_queueing finding on the fixed app must be
/// that queue: no more time lost than the app's requests waited for their
/// connections (a margin for the checkout's own work, which the wire sees
/// as the same idle gap), and on no more than the pool's connections.
fn pool_queueing_measured_by_the_app(f: &Value, truth_file: &std::path::Path) {
    let waits = app_pool_waits(truth_file);
    let app_waited: u64 = waits.iter().sum();
    let named =
        f["occurrences"].as_u64().unwrap() * f["time_lost_per_occurrence_us"].as_u64().unwrap();
    eprintln!("pool_queueing named: {named} µs lost");
    assert!(
        named <= app_waited * 3 / 2 + POOL_WAIT_MARGIN_US,
        "{named} µs named, {app_waited} µs waited: {f}"
    );
    for e in f["evidence"].as_array().unwrap() {
        assert!(e["in_flight_max"].as_u64() <= Some(ORM_POOL_MAX), "{e}");
    }
}

/// SQLAlchemy's QueuePool: 5 kept and 10 overflow.
const ORM_POOL_MAX: u64 = 15;
/// A checkout's own work between two statements (the pool's lock, the
/// session's set-up), which no wire view tells from waiting: 1 ms.
const POOL_WAIT_MARGIN_US: u64 = 1_000;

/// An events file cut short beside the capture: analyze still answers from
/// the packets — every exchange `whole` (the report with the events) read
/// — says what happened to the events, and joins none. (Which causes the
/// packets alone name depends on how many requests inference tells apart
/// at this concurrency, which the machine's load moves.)
fn cut_events_file_is_a_note(cap: &std::path::Path, service: &str, whole_report: &Value) {
    let events = std::path::PathBuf::from(format!("{}.events", cap.display()));
    let whole = std::fs::read(&events).unwrap();
    std::fs::write(&events, &whole[..10]).unwrap();
    let report = analyzed_timeline(cap, service);
    assert!(
        report["capture"]["threads"].is_null(),
        "{}",
        report["capture"]
    );
    let errors = report["errors"].to_string();
    assert!(errors.contains("events"), "{errors}");
    let exchanges = &report["capture"]["exchanges"];
    assert!(exchanges.as_u64() > Some(0), "{}", report["capture"]);
    assert_eq!(
        exchanges, &whole_report["capture"]["exchanges"],
        "the packets alone still give every exchange"
    );
    std::fs::write(&events, whole).unwrap();
}

/// `diagnose --ebpf` with a load phase of 16 connections: it finds the app
/// by its listening port and gives its calls by thread, as `capture --ebpf`.
fn diagnosed_by_thread(pg_port: &str) {
    let dir = tmpdir("ebpf_orm_diagnose");
    let truth_file = dir.join("truth.jsonl");
    let port = free_port();
    let args = [
        port.to_string(),
        pg_port.into(),
        ORDERS.into(),
        "broken".into(),
    ];
    let app = python_app_recording("orm_app.py", port, &args, &truth_file);
    let url = format!("http://127.0.0.1:{port}/checkout");
    let report = diagnose_checkouts(&url);
    drop(app);
    held_to_truth("diagnose", &report, &truth_file);
    let kinds = causes(&report);
    let top = kinds.first().map(String::as_str);
    assert!(
        matches!(top, Some("n_plus_one" | "duplicate_calls")),
        "{kinds:?}"
    );
}
