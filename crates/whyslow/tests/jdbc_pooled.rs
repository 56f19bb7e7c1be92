//! A pooled JDBC service under load, from packets alone: the JDK's HTTP
//! server, a HikariCP pool shared by every request, on a real PostgreSQL
//! (pgJDBC, a transaction a page) and a real MariaDB (Connector/J, server
//! prepared statements, a transaction a page as Spring runs one: autocommit
//! switched off and back on around it). At 4 clients in a closed loop requests overlap and
//! take whichever pooled connection is free, so most statements cannot be
//! told to one request by the wire; the N+1 is still a property of each
//! checkout. Captured 5 times per database: the broken app's N+1 is named
//! first every time, with the app's own count per page; the fixed app (one IN
//! query) names nothing.

mod common;
use common::polyglot::*;
use common::real::*;
use common::truth::read_app_truth;
use common::*;

/// Orders per page: the items query runs this many times per broken page.
const ORDERS: u64 = 12;
const CLIENTS: &str = "4";
/// HikariCP's default pool size: larger than the clients, so no page waits
/// for a connection and only the N+1 is wrong with the broken app.
const POOL: u64 = 10;
/// Pages before the captures (every statement prepared on every connection)
/// at WARM_RATE a second.
const WARM_PAGES: u64 = 80;
const WARM_RATE: u64 = 80;
/// Pages a capture holds, and how many captures of the broken app.
const PAGES: &str = "200";
const BROKEN_RUNS: usize = 5;

/// MariaDB's app runs each page in a transaction as Spring does
/// (`-tx`): autocommit switched off, COMMIT, autocommit switched on.
const TX_CALLS: usize = 3;

fn named_every_run(test: &str, app: JdbcApp) {
    let dir = tmpdir(test);
    let other_calls = app.other_calls + if app.mysql { TX_CALLS } else { 0 };
    for (variant, runs) in [("broken", BROKEN_RUNS), ("fixed", 1)] {
        let port = free_port();
        let truth = dir.join(format!("{variant}.jsonl"));
        let mut args: Vec<String> = [port, app.db_port, ORDERS as u16, POOL as u16]
            .map(|n| n.to_string())
            .to_vec();
        args.push(format!("{variant}{}", if app.mysql { "-tx" } else { "" }));
        let server = java_app_recording(app.source, &app.classpath, port, &args, &truth);
        let url = format!("http://127.0.0.1:{port}/orders");
        load_paced(&url, WARM_PAGES, POOL, WARM_RATE);
        for n in 1..=runs {
            let run = format!("{test} {variant} run {n}");
            let _ = std::fs::remove_file(&truth);
            let cap = dir.join(format!("{variant}-{n}.pcapng"));
            let load = untraced_closed_load(CLIENTS, PAGES, &url);
            let out = captured_under_load(&[port, app.db_port], &cap, &load);
            assert!(out.status.success(), "{run}: {}", stderr(&out));
            let report = analyzed_timeline(&cap, &port.to_string());
            let pages = read_app_truth(&truth);
            assert_eq!(pages.len().to_string(), PAGES, "{run}: the app's record");
            let kinds = causes_less_real_tcp(&report, &cap);
            eprintln!("{run}: {kinds:?}");
            if variant == "fixed" {
                assert!(kinds.is_empty(), "{run}: {kinds:?}");
                continue;
            }
            let per_page: std::collections::BTreeSet<usize> =
                pages.iter().map(|p| p.calls.len() - other_calls).collect();
            assert_eq!(per_page.into_iter().collect::<Vec<_>>(), [ORDERS as usize]);
            let (cause, per_request) = top_cause(&report, &cap);
            assert_eq!(
                (cause.as_str(), per_request),
                ("n_plus_one", Some(ORDERS)),
                "{run}: {kinds:?}"
            );
        }
        drop(server);
    }
}

#[test]
fn hikari_on_postgres_at_4_clients_from_packets() {
    let _one = serial();
    let test = "hikari_postgres_packets";
    if !requirements_met(test, &jdbc_needs(Need::Postgres, false)) {
        return;
    }
    let (pg, _data) = postgres();
    named_every_run(test, JdbcApp::postgres(pg.port));
}

#[test]
fn hikari_on_mariadb_at_4_clients_from_packets() {
    let _one = serial();
    let test = "hikari_mariadb_packets";
    if !requirements_met(test, &jdbc_needs(Need::Mariadb, false)) {
        return;
    }
    let db = mariadb();
    named_every_run(test, JdbcApp::mariadb(db.port));
}
