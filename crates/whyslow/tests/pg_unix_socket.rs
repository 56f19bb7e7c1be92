//! PostgreSQL over its Unix-domain socket, which no packet capture sees,
//! read from the eBPF source's socket calls alone: psql's statements in the
//! order it sent them, and case 003's ORM (psycopg2 under SQLAlchemy) at 16
//! clients, each statement given by its thread to the checkout the app says
//! made it, and the N+1 named with the count the app made.

mod common;
use common::real::*;
use common::truth::held_to_truth_by_thread;
use common::*;
use serde_json::Value;
use std::path::Path;

/// Orders per checkout: one lazy items query each.
const ORDERS: u64 = 20;

/// The connections of `report` over the socket `path`.
fn over_socket<'a>(report: &'a Value, path: &Path) -> Vec<&'a Value> {
    let path = path.to_str().unwrap();
    report["timeline"]["connections"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["socket_path"] == path)
        .collect()
}

/// The requests of the exchanges on `conns`, in order.
fn statements_on(report: &Value, conns: &[&Value]) -> Vec<String> {
    let mut on: Vec<(u64, String)> = report["timeline"]["exchanges"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| conns.iter().any(|c| c["id"] == e["connection"]))
        .map(|e| {
            let at = e["request_first_at_us"].as_u64().unwrap();
            (at, e["request"].as_str().unwrap().to_string())
        })
        .collect();
    // Stable: the statements of one message share its time, in id order.
    on.sort_by_key(|(at, _)| *at);
    on.into_iter().map(|(_, r)| r).collect()
}

#[test]
fn psqls_statements_over_the_unix_socket_are_read_in_order() {
    let _one = serial();
    let test = "psql_over_unix_socket";
    let needs = [
        Need::Postgres,
        Need::Tool("psql"),
        Need::Capture,
        Need::Ebpf,
    ];
    if !requirements_met(test, &needs) {
        return;
    }
    let (pg, pg_dir) = postgres();
    let dir = tmpdir("pg_unix_psql");
    let cap = dir.join("psql.pcapng");
    let sql = "CREATE TABLE IF NOT EXISTS seen (id int, name text); \
               INSERT INTO seen VALUES (7, 'secret-name'); \
               SELECT name FROM seen WHERE id = 7; \
               DELETE FROM seen WHERE id = 7";
    let port = pg.port.to_string();
    let out = whyslow(&[
        "capture",
        "--ebpf",
        "-i",
        "lo",
        "-p",
        &port,
        "-w",
        cap.to_str().unwrap(),
        "--",
        "psql",
        "-h",
        pg_dir.to_str().unwrap(),
        "-p",
        &port,
        "-U",
        "postgres",
        "-X",
        "-q",
        "-c",
        sql,
        "-c",
        "SELECT count(*) FROM seen",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = whyslow(&["analyze", "--json", "--timeline", cap.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let report = json(&out);
    let socket = pg_dir.join(format!(".s.PGSQL.{port}"));
    let conns = over_socket(&report, &socket);
    assert_eq!(conns.len(), 1, "psql's one session: {}", report["capture"]);
    assert!(
        conns.iter().all(|c| c["protocol"] == "postgres"),
        "{conns:?}"
    );
    let statements = statements_on(&report, &conns);
    assert_eq!(
        statements,
        [
            "CREATE TABLE IF NOT EXISTS seen (id int, name text)",
            "INSERT INTO seen VALUES (?, ?)",
            "SELECT name FROM seen WHERE id = ?",
            "DELETE FROM seen WHERE id = ?",
            "SELECT count(*) FROM seen",
        ],
        "{}",
        report["timeline"]["exchanges"]
    );
    let text = serde_json::to_string(&report).unwrap();
    assert!(
        !text.contains("secret-name"),
        "a literal reached the report"
    );
    let threads = &report["capture"]["threads"];
    let named = threads["unix_sockets"].as_object().unwrap();
    assert_eq!(named.len(), 1, "{threads}");
    let (addr, path) = named.iter().next().unwrap();
    assert_eq!(path, socket.to_str().unwrap());
    assert_eq!(conns[0]["server"], addr.as_str());
    let calls = report["capture"]["threads"]["unix_socket_calls"].as_u64();
    assert!(calls.is_some_and(|n| n > 0), "{}", report["capture"]);
}

#[test]
fn orm_over_the_unix_socket_named_and_attributed_by_thread() {
    let _one = serial();
    let test = "orm_over_unix_socket";
    let needs = [
        Need::Postgres,
        Need::Python("sqlalchemy"),
        Need::Capture,
        Need::Ebpf,
    ];
    if !requirements_met(test, &needs) {
        return;
    }
    let (pg, pg_dir) = postgres();
    let dir = tmpdir("pg_unix_orm");
    let truth_file = dir.join("truth.jsonl");
    let port = free_port();
    let args = [
        port.to_string(),
        pg.port.to_string(),
        ORDERS.to_string(),
        "broken".into(),
        format!("unix:{}", pg_dir.display()),
    ];
    let app = python_app_recording("orm_app.py", port, &args, &truth_file);
    let url = format!("http://127.0.0.1:{port}/checkout");
    let report = diagnose_checkouts(&url);
    drop(app);
    let socket = pg_dir.join(format!(".s.PGSQL.{}", pg.port));
    let conns = over_socket(&report, &socket);
    assert!(!conns.is_empty(), "{}", report["capture"]);
    assert!(
        conns.iter().all(|c| c["protocol"] == "postgres"),
        "{conns:?}"
    );
    assert_items_n_plus_one(&report, ORDERS);
    held_to_truth_by_thread("orm over the Unix socket", &report, &truth_file);
}
