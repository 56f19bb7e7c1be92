//! The JVM under `capture --ebpf`: JDBC services as production runs them —
//! the JDK's HTTP server reading each request on an executor thread that
//! runs the page's statements and answers, a pool opened at start-up,
//! statements prepared long before the capture — on a real MariaDB
//! (HikariCP, MariaDB Connector/J with server-side prepared statements) and
//! a real PostgreSQL (pgJDBC past its prepare threshold, a transaction a
//! page). A request may wait in its socket while its thread is busy, so a
//! thread holds a request from when it read it, not from its arrival.
//!
//! On MariaDB the driver's commands are counted as tshark's MySQL
//! dissector counts them. Each app records what it served (apps/jvm: client port, statements with
//! their connection's local port); at 8 clients in a closed loop every call
//! is held to that record: 0 given to a wrong request, 99 % given by
//! thread. broken (an N+1) names n_plus_one with the record's count per
//! page; fixed (one IN query, a pool as large as the clients) names
//! nothing; the same fixed code on a pool of 2 names pool_queueing on 2
//! connections, for no more time than the app itself waited for one. The
//! broken app under `diagnose --ebpf` is held to its record too.

mod common;
use common::polyglot::*;
use common::real::*;
use common::truth::{app_pool_waits, held_to_truth_by_thread, read_app_truth};
use common::*;
use serde_json::Value;
use std::path::Path;

/// Orders per page: the items query runs this many times per broken page.
const ORDERS: u64 = 6;
const CLIENTS: u64 = 8;
/// The broken app's pool: smaller than the clients, as pools are.
const POOL: u64 = 4;
/// The pool the `pool` variant checks out from.
const SMALL_POOL: u64 = 2;
/// Pages before the capture (every statement prepared on every connection)
/// at WARM_RATE a second, then pages in the capture, as fast as they go.
const WARM_PAGES: u64 = 80;
const WARM_RATE: u64 = 80;
const PAGES: &str = "400";
/// The page's own work under `diagnose` (ms): diagnose_checkouts paces
/// requests 8.3 ms apart (120/s), and a page answered sooner never overlaps
/// the next (CI on an idle host saw none overlap); longer, they overlap on
/// any host.
const DIAGNOSE_RENDER_MS: u64 = 10;
/// What a page's statements and bookkeeping may add to the wait the app
/// measured around its pool's checkout (ebpf_real.rs: the same margin).
const POOL_WAIT_MARGIN_US: u64 = 1_000;

fn held_to_its_record(test: &str, app: JdbcApp) {
    diagnosed(test, &app);
    let dir = tmpdir(test);
    for (variant, code, pool) in [
        ("broken", "broken", POOL),
        ("fixed", "fixed", CLIENTS),
        ("pool", "fixed", SMALL_POOL),
    ] {
        let run = format!("{test} {variant}");
        let port = free_port();
        let truth = dir.join(format!("{variant}.jsonl"));
        let args = [port, app.db_port, ORDERS as u16, pool as u16].map(|n| n.to_string());
        let mut args = args.to_vec();
        args.push(code.into());
        let server = java_app_recording(app.source, &app.classpath, port, &args, &truth);
        let url = format!("http://127.0.0.1:{port}/orders");
        load_paced(&url, WARM_PAGES, CLIENTS, WARM_RATE);
        // Only the captured pages count.
        let _ = std::fs::remove_file(&truth);
        let cap = dir.join(format!("{variant}.pcapng"));
        let port_s = port.to_string();
        let load = [
            "-c",
            &CLIENTS.to_string(),
            "-n",
            PAGES,
            "--trace-context",
            "off",
            &url,
        ];
        let out = ebpf_captured_under_load(server.pid(), &[port, app.db_port], &cap, &load);
        assert!(out.status.success(), "{run}: {}", stderr(&out));
        assert!(stderr(&out).contains(" 0 lost"), "{run}: {}", stderr(&out));
        drop(server);
        let report = analyzed_timeline(&cap, &port_s);
        held_to_truth_by_thread(&run, &report, &truth);
        if app.mysql {
            commands_as_tshark_counts_them(&run, &report, &cap, app.db_port);
        }
        let kinds = causes_less_real_tcp(&report, &cap);
        match variant {
            "broken" => {
                let per_page = items_statements(&truth, app.other_calls);
                assert_eq!(per_page, ORDERS, "{run}: the app's record");
                let (cause, per_request) = top_cause(&report, &cap);
                assert_eq!(
                    (cause.as_str(), per_request),
                    ("n_plus_one", Some(per_page)),
                    "{run}: {kinds:?}"
                );
            }
            "fixed" => assert!(kinds.is_empty(), "{run}: {kinds:?}"),
            _ => {
                let top = kinds.first().map(String::as_str);
                assert_eq!(top, Some("pool_queueing"), "{run}: {kinds:?}");
                let f = finding(&report, "pool_queueing").unwrap();
                assert_eq!(f["facts"]["connections"], SMALL_POOL as f64, "{f}");
                let waited: u64 = app_pool_waits(&truth).iter().sum();
                let named = f["time_lost_us"].as_u64().unwrap();
                eprintln!("{run}: {named} µs named, the app waited {waited} µs");
                assert!(
                    named <= waited * 3 / 2 + POOL_WAIT_MARGIN_US,
                    "{run}: {named} µs named, {waited} µs waited: {f}"
                );
            }
        }
    }
}

/// The broken app under `diagnose --ebpf` (its probes, then a paced load
/// phase at 16 clients): held to its record, n_plus_one named first.
fn diagnosed(test: &str, app: &JdbcApp) {
    let run = format!("{test} diagnose");
    let truth = tmpdir(test).join("diagnose.jsonl");
    let port = free_port();
    let args = [port, app.db_port, ORDERS as u16, POOL as u16].map(|n| n.to_string());
    let mut args = args.to_vec();
    args.extend(["broken".into(), DIAGNOSE_RENDER_MS.to_string()]);
    let server = java_app_recording(app.source, &app.classpath, port, &args, &truth);
    let url = format!("http://127.0.0.1:{port}/orders");
    load_paced(&url, WARM_PAGES, CLIENTS, WARM_RATE);
    let _ = std::fs::remove_file(&truth);
    let report = diagnose_checkouts(&url);
    drop(server);
    held_to_truth_by_thread(&run, &report, &truth);
    let kinds = causes(&report);
    assert_eq!(
        kinds.first().map(String::as_str),
        Some("n_plus_one"),
        "{run}: {kinds:?}"
    );
}

/// The driver's commands in a capture begun long after its connections
/// opened (statements executed by id): one exchange per command tshark
/// reads, less those that have no answer (COM_STMT_CLOSE and the like).
fn commands_as_tshark_counts_them(run: &str, report: &Value, cap: &Path, db: u16) {
    let commands = tshark_fields(
        cap,
        &format!("tcp.port=={db},mysql"),
        &format!("tcp.dstport=={db} && mysql.command"),
        "mysql.command",
    );
    let answered = commands
        .iter()
        .filter(|c| !["1", "24", "25"].contains(&c.as_str()))
        .count();
    assert!(answered > 0, "{run}: tshark read no command");
    assert_eq!(exchanges_to(report, db).len(), answered, "{run}");
}

/// The items statements of a page by the app's own record: its calls less
/// the `other` every page makes (the same count on every page, or the
/// record is not one page's).
fn items_statements(truth: &Path, other: usize) -> u64 {
    let counts: std::collections::BTreeSet<usize> = read_app_truth(truth)
        .iter()
        .map(|r| r.calls.len() - other)
        .collect();
    assert_eq!(counts.len(), 1, "{counts:?}");
    *counts.first().unwrap() as u64
}

#[test]
fn jdbc_on_mariadb_at_8_clients_given_by_thread() {
    let _one = serial();
    let test = "jvm_mariadb_ebpf";
    if !requirements_met(test, &jdbc_needs(Need::Mariadb, true)) {
        return;
    }
    let db = mariadb();
    held_to_its_record(test, JdbcApp::mariadb(db.port));
}

#[test]
fn pgjdbc_on_postgres_at_8_clients_given_by_thread() {
    let _one = serial();
    let test = "jvm_postgres_ebpf";
    if !requirements_met(test, &jdbc_needs(Need::Postgres, true)) {
        return;
    }
    let (pg, _data) = postgres();
    held_to_its_record(test, JdbcApp::postgres(pg.port));
}
