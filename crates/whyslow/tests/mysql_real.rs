//! MySQL's protocol on a real MariaDB from Debian's packages, with real
//! clients: PyMySQL (text queries with their literals, a ping, a duplicate
//! key) and MySQL Connector/Python with a prepared cursor (the binary
//! protocol: a prepare, then executions by statement id). Every command is
//! counted as tshark's MySQL dissector counts it, texts are normalized, and
//! executions carry their prepared text. Then a service's N+1 over a pool
//! opened long before the capture: named from the wire alone, for a Python
//! service (PyMySQL, text queries) and a JDBC one (HikariCP and MariaDB
//! Connector/J with server-side prepared statements, 8 clients at once).

mod common;
use common::polyglot::*;
use common::real::*;
use common::*;
use serde_json::Value;
use std::path::Path;

/// Rows inserted and read back one by one; prepared executions.
const ROUNDS: u64 = 25;
/// Orders per page: the items query runs this many times per page.
const ORDERS: u64 = 6;
const POOL: u64 = 2;
/// Pages before the capture (the pool is warm and idle when it begins) and in it.
const WARM_PAGES: usize = 10;
const PAGES: usize = 12;

/// Commands that have no answer and make no exchange: COM_QUIT,
/// COM_STMT_SEND_LONG_DATA, COM_STMT_CLOSE.
const UNANSWERED: [&str; 3] = ["1", "24", "25"];

fn count(ex: &[&Value], request: &str) -> u64 {
    ex.iter().filter(|e| e["request"] == request).count() as u64
}

/// tshark's MySQL commands from client to server, by command number.
fn tshark_commands(file: &Path, port: u16) -> Vec<String> {
    tshark_fields(
        file,
        &format!("tcp.port=={port},mysql"),
        &format!("tcp.dstport=={port} && mysql.command"),
        "mysql.command",
    )
}

#[test]
fn real_mariadb_every_command_as_tshark_counts_it() {
    let _one = serial();
    let test = "mysql_commands";
    let needs = [
        Need::Tool("tcpdump"),
        Need::Tool("tshark"),
        Need::Mariadb,
        Need::Capture,
    ];
    if !requirements_met(test, &needs)
        || !python_has(test, "pymysql")
        || !pypi_python_has(test, "mysql.connector")
    {
        return;
    }
    let db = mariadb();
    let dir = tmpdir(test);
    let file = dir.join("mysql.pcap");
    let mut out = None;
    let dropped = tcpdump_while(&file, &[db.port], || {
        out = Some(pypi_python_run(
            "mysql_clients.py",
            &[db.port.to_string(), ROUNDS.to_string()],
        ));
    });
    assert_eq!(dropped, 0, "tcpdump dropped packets");
    let out = out.unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let sent: Value = serde_json::from_slice(&out.stdout).unwrap();
    let run = whyslow(&["analyze", "--json", "--timeline", file.to_str().unwrap()]);
    assert!(run.status.success(), "{}", stderr(&run));
    let report = json(&run);
    let ex = exchanges_to(&report, db.port);
    assert!(ex.iter().all(|e| e["protocol"] == "mysql"), "{ex:?}");
    assert!(
        ex.iter().all(|e| e["response_first_at_us"].is_u64()),
        "every command answered"
    );

    let tshark = tshark_commands(&file, db.port);
    let of = |n: &str| tshark.iter().filter(|c| *c == n).count() as u64;
    let answered = tshark
        .iter()
        .filter(|c| !UNANSWERED.contains(&c.as_str()))
        .count();
    assert_eq!(
        ex.len(),
        answered,
        "whyslow exchanges vs tshark's answered commands {tshark:?}"
    );

    let requests: Vec<&str> = ex.iter().map(|e| e["request"].as_str().unwrap()).collect();
    let select = "SELECT email FROM users WHERE id = ?";
    assert_eq!(
        count(&ex, select),
        sent["text_select"].as_u64().unwrap(),
        "{requests:?}"
    );
    assert!(ex
        .iter()
        .filter(|e| e["request"] == select)
        .all(|e| e["rows"] == 1));
    let insert = "INSERT INTO users VALUES (?, ?)";
    assert_eq!(
        count(&ex, insert),
        sent["text_insert"].as_u64().unwrap() + 1
    );
    let dup: Vec<&&Value> = ex.iter().filter(|e| e["status"].is_object()).collect();
    assert_eq!(
        dup.len() as u64,
        sent["errors"].as_u64().unwrap(),
        "{dup:?}"
    );
    assert_eq!(dup[0]["request"], insert);
    // The app's ping and any a driver sends on its own.
    assert_eq!(count(&ex, "COM_PING"), of("14"));
    assert!(of("14") >= sent["pings"].as_u64().unwrap());
    // Prepared: the executions carry the text their prepare sent.
    let stmt = "SELECT id, email FROM users WHERE id > ? AND id < ?";
    assert_eq!(count(&ex, &format!("PREPARE {stmt}")), of("22"));
    assert!(of("22") >= 1);
    assert_eq!(count(&ex, stmt), of("23"), "{requests:?}");
    assert_eq!(of("23"), sent["prepared_select"].as_u64().unwrap());
    let text = stdout(&whyslow(&["analyze", "--timeline", file.to_str().unwrap()]));
    assert!(
        !text.contains("secret-"),
        "a literal leaked into the report"
    );
}

fn app(db: u16, variant: &str) -> (Server, String) {
    let port = free_port();
    let args = [port, db, ORDERS as u16, POOL as u16].map(|n| n.to_string());
    let mut args = args.to_vec();
    args.push(variant.into());
    let server = python_app("mysql_app.py", port, &args);
    (server, format!("http://127.0.0.1:{port}/orders"))
}

#[test]
fn n_plus_one_over_a_pool_opened_before_the_capture() {
    let _one = serial();
    let test = "mysql_n_plus_one";
    let needs = [
        Need::Tool("tcpdump"),
        Need::Tool("curl"),
        Need::Mariadb,
        Need::Capture,
    ];
    if !requirements_met(test, &needs) || !python_has(test, "pymysql") {
        return;
    }
    let db = mariadb();
    let dir = tmpdir(test);
    for variant in ["broken", "fixed"] {
        let (server, url) = app(db.port, variant);
        curl_each(&url, WARM_PAGES);
        let file = dir.join(format!("{variant}.pcap"));
        let dropped = tcpdump_while(&file, &[server.port, db.port], || curl_each(&url, PAGES));
        assert_eq!(dropped, 0, "tcpdump dropped packets");
        drop(server);
        let run = whyslow(&["analyze", "--json", file.to_str().unwrap()]);
        assert!(run.status.success(), "{}", stderr(&run));
        let report = json(&run);
        let (cause, per_request) = top_cause(&report, &file);
        if variant == "broken" {
            assert_eq!(
                (cause.as_str(), per_request),
                ("n_plus_one", Some(ORDERS)),
                "{:?}",
                causes(&report)
            );
        } else {
            assert!(
                finding(&report, "n_plus_one").is_none(),
                "{:?}",
                causes(&report)
            );
        }
    }
}

/// Pages per capture of the JDBC service, sent at JDBC_RATE a second over
/// JDBC_CLIENTS connections; JDBC_WARM pages before it (every statement
/// prepared and cached on every pooled connection).
const JDBC_PAGES: u64 = 160;
const JDBC_RATE: u64 = 80;
const JDBC_CLIENTS: u64 = 8;
const JDBC_WARM: u64 = 80;
const JDBC_POOL: u64 = 4;
/// Share of the capture's calls given to a request, at least.
const GIVEN_PERCENT: f64 = 90.0;

/// The statements one page sent, as the app counted them.
fn app_statements(url: &str) -> u64 {
    let out = std::process::Command::new("curl")
        .args(["-sf", url])
        .output()
        .unwrap();
    assert!(out.status.success(), "curl {url}");
    let body: Value = serde_json::from_slice(&out.stdout).unwrap();
    body["statements"].as_u64().unwrap()
}

#[test]
fn jdbc_on_mariadb_held_to_the_apps_own_counts() {
    let _one = serial();
    let test = "mysql_jdbc";
    let needs = [
        Need::Tool("tcpdump"),
        Need::Tool("tshark"),
        Need::Tool("curl"),
        Need::Tool("java"),
        Need::Tool("mvn"),
        Need::Mariadb,
        Need::Capture,
    ];
    if !requirements_met(test, &needs) {
        return;
    }
    let jars = mariadb_jdbc_jars();
    let db = mariadb();
    let dir = tmpdir(test);
    for variant in ["broken", "fixed"] {
        let port = free_port();
        let args = [port, db.port, ORDERS as u16, JDBC_POOL as u16].map(|n| n.to_string());
        let mut args = args.to_vec();
        args.push(variant.into());
        let app = java_app("MyPage.java", &jars, port, &args);
        let url = format!("http://127.0.0.1:{port}/orders");
        let sent = app_statements(&url);
        load_paced(&url, JDBC_WARM, JDBC_CLIENTS, JDBC_RATE);
        let file = dir.join(format!("{variant}.pcap"));
        let dropped = tcpdump_while(&file, &[port, db.port], || {
            load_paced(&url, JDBC_PAGES, JDBC_CLIENTS, JDBC_RATE)
        });
        assert_eq!(dropped, 0, "tcpdump dropped packets");
        drop(app);
        let run = whyslow(&["analyze", "--json", file.to_str().unwrap()]);
        assert!(run.status.success(), "{}", stderr(&run));
        let report = json(&run);
        let sql = &report["sql_summary"][0];
        assert_eq!(
            sql["median"]["statements"]["total"], sent,
            "{variant}: {sql}"
        );
        let groups = report["capture"]["groups"].as_array().unwrap();
        let page = groups.iter().find(|g| g["label"] == "GET /orders").unwrap();
        let given = page["calls_given_percent"].as_f64().unwrap();
        assert!(given >= GIVEN_PERCENT, "{variant}: {given} % given");
        let (cause, per_request) = top_cause(&report, &file);
        if variant == "broken" {
            assert_eq!(sent, 1 + ORDERS);
            assert_eq!(
                (cause.as_str(), per_request),
                ("n_plus_one", Some(ORDERS)),
                "{:?}",
                causes(&report)
            );
        } else {
            assert_eq!(sent, 2);
            assert!(
                finding(&report, "n_plus_one").is_none(),
                "{:?}",
                causes(&report)
            );
        }
        assert!(
            finding(&report, "pool_queueing").is_none(),
            "{:?}",
            causes(&report)
        );
    }
}

/// The lab's orm-storm-mysql checkout (the lab's MySQL client, prepared
/// statements) over a real MariaDB instead of the lab's own server: the
/// same statements, counts and findings as the scenario declares.
#[test]
fn the_lab_orm_storm_on_a_real_mariadb() {
    use whyslow_lab::scenarios::orm_storm;
    let _one = serial();
    if !requirements_met("orm_storm_real_mariadb", &[Need::Mariadb, Need::Capture]) {
        return;
    }
    let db_server = mariadb();
    assert_eq!(orm_storm::MYSQL_USER, "lab", "the user `mariadb` makes");
    let db: std::net::SocketAddr = format!("127.0.0.1:{}", db_server.port).parse().unwrap();
    rt().block_on(orm_storm::create_shop_mysql(db)).unwrap();
    let s = whyslow_lab::find("orm-storm-mysql").unwrap();
    lab_orm_storm_holds(s, |fixed| {
        rt().block_on(orm_storm::start_with_mysql(fixed, db))
            .unwrap()
    });
}
