//! Statements prepared long before the capture, on real drivers over a real
//! PostgreSQL: a JDBC service (pgJDBC, which switches a statement to a named
//! server-side one from its fifth execution on a connection and sends BEGIN
//! in the same write as the first query) and a Go service (pgx, which
//! prepares each statement by name at its first use on a connection). Each
//! page reads a customer's orders, then each order's items one query at a
//! time: an N+1 of ORDERS in one transaction, on a pool of POOL connections
//! opened at start-up, under a closed loop of CLIENTS.
//!
//! One capture runs from before the service starts (every statement's text
//! on the wire), one from long after (names only). `analyze` must name the
//! same top cause with the same count per request on both, and give at
//! least 90 % of the later capture's calls to their requests.

mod common;
use common::polyglot::*;
use common::real::*;
use common::*;
use serde_json::Value;
use std::path::Path;

/// Orders per page: the items query runs this many times per page.
const ORDERS: u64 = 8;
/// Connections in the service's pool.
const POOL: u64 = 4;
/// Pages per capture, sent at RATE a second over CLIENTS connections: a
/// page takes 2–5 ms, so pages overlap now and then. In a closed loop of 4
/// every page overlaps three others that hold a connection for as long,
/// and which of two such transactions served which page the wire cannot
/// tell: there whyslow gives the calls to none (the lab's long-capture
/// bench measures that case).
const PAGES: u64 = 200;
const RATE: u64 = 100;
const CLIENTS: u64 = 4;
/// Pages between the two captures: every statement on every connection of
/// the pool runs at least pgJDBC's prepare threshold (5) times.
const WARM_PAGES: u64 = 100;
/// Share of the later capture's calls given to a request, at least.
const GIVEN_PERCENT: f64 = 90.0;

#[derive(Clone, Copy)]
enum Driver {
    PgJdbc,
    Pgx,
}

fn start(driver: Driver, port: u16, pg: u16) -> Server {
    let args = [port, pg, ORDERS as u16, POOL as u16].map(|n| n.to_string());
    match driver {
        Driver::PgJdbc => java_app("PgPage.java", &pgjdbc_jars(), port, &args),
        Driver::Pgx => go_app("pgpage", port, &args),
    }
}

fn analyze(file: &Path) -> Value {
    let out = whyslow(&["analyze", "--json", file.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    json(&out)
}

/// The service's request kind: its share of calls given.
fn given_percent(report: &Value) -> f64 {
    let groups = report["capture"]["groups"].as_array().unwrap();
    let page = groups
        .iter()
        .find(|g| g["label"] == "GET /orders")
        .unwrap_or_else(|| panic!("{groups:?}"));
    page["calls_given_percent"].as_f64().unwrap()
}

fn captured_midlife(driver: Driver, test: &str, tools: &[&'static str]) {
    let _one = serial();
    let mut needs = vec![
        Need::Tool("tcpdump"),
        Need::Tool("tshark"),
        Need::Postgres,
        Need::Capture,
    ];
    needs.extend(tools.iter().map(|t| Need::Tool(t)));
    if !requirements_met(test, &needs) {
        return;
    }
    if let Driver::PgJdbc = driver {
        pgjdbc_jars();
    } else {
        go_binary("pgpage");
    }
    let (pg, _data) = postgres();
    let dir = tmpdir(test);
    let port = free_port();
    let url = format!("http://127.0.0.1:{port}/orders");
    let ports = [port, pg.port];
    let from_start = dir.join("from_start.pcap");
    let mut app = None;
    let dropped = tcpdump_while(&from_start, &ports, || {
        app = Some(start(driver, port, pg.port));
        load_paced(&url, PAGES, CLIENTS, RATE);
    });
    assert_eq!(dropped, 0, "tcpdump dropped packets");
    load_paced(&url, WARM_PAGES, CLIENTS, RATE);
    let midlife = dir.join("midlife.pcap");
    let dropped = tcpdump_while(&midlife, &ports, || load_paced(&url, PAGES, CLIENTS, RATE));
    assert_eq!(dropped, 0, "tcpdump dropped packets");
    drop(app);

    let early = analyze(&from_start);
    let late = analyze(&midlife);
    let (cause, per_request) = top_cause(&early, &from_start);
    assert_eq!(
        (cause.as_str(), per_request),
        ("n_plus_one", Some(ORDERS)),
        "from the start: {:?}",
        causes(&early)
    );
    assert_eq!(
        top_cause(&late, &midlife),
        (cause, per_request),
        "mid-life: {:?}",
        causes(&late)
    );
    let given = given_percent(&late);
    assert!(given >= GIVEN_PERCENT, "{given} % given");
    // Nothing queued for a connection: a page holds one for all its statements.
    assert!(
        finding(&late, "pool_queueing").is_none(),
        "{:?}",
        causes(&late)
    );
}

#[test]
fn pgjdbc_past_its_prepare_threshold() {
    captured_midlife(Driver::PgJdbc, "pgjdbc_midlife", &["java", "mvn"]);
}

#[test]
fn pgx_with_its_statement_cache() {
    captured_midlife(Driver::Pgx, "pgx_midlife", &["go"]);
}
