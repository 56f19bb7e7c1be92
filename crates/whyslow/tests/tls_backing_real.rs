//! Backing services over TLS seen through their clients' key logs: a real
//! PostgreSQL with `ssl=on` (pg8000: SSLRequest answered S, then TLS), a
//! real MariaDB with a certificate (PyMySQL: the SSL request in the
//! handshake, then TLS) and a real redis-server on `--tls-port` (redis-py),
//! captured live with
//! `whyslow capture`. `analyze --keylog` shows every statement and command
//! the clients sent, with its protocol, as on a cleartext connection, and
//! agrees with tshark given the same keys; without the keys each connection
//! says why and nothing is made up.

mod common;
use common::real::*;
use common::*;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

/// Runs tests/apps/tls_clients.py under `whyslow capture` of `port`:
/// what the client says it sent ({request: count}).
fn capture_client(kind: &str, port: u16, keys: &Path, pcap: &Path) -> BTreeMap<String, u64> {
    let app = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/apps/tls_clients.py");
    let (p, f) = (port.to_string(), pcap.to_str().unwrap());
    let out = Command::new(env!("CARGO_BIN_EXE_whyslow"))
        .args(["capture", "-i", "lo", "-p", &p, "-w", f, "--", python()])
        .arg(app)
        .args([kind, &p, keys.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(out.status.success(), "{kind}: {}", stderr(&out));
    let text = stdout(&out);
    let line = text.lines().last().unwrap_or_default();
    serde_json::from_str(line).unwrap_or_else(|e| panic!("{kind}: {e}: {text}"))
}

/// The exchanges of the analyzed capture, by request.
fn seen(report: &Value, protocol: &str) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for e in report["timeline"]["exchanges"].as_array().unwrap() {
        assert_eq!(e["protocol"], protocol, "{e}");
        *out.entry(e["request"].as_str().unwrap().to_string())
            .or_insert(0) += 1;
    }
    out
}

fn analyze(pcap: &Path, keys: Option<&Path>) -> Value {
    let f = pcap.to_str().unwrap();
    let mut args = vec!["analyze", "--json", "--timeline", f];
    if let Some(k) = keys {
        args.extend(["--keylog", k.to_str().unwrap()]);
    }
    let out = whyslow(&args);
    assert!(out.status.success(), "analyze: {}", stderr(&out));
    json(&out)
}

/// Without keys: no exchange, and the connection says why.
fn assert_left_encrypted(pcap: &Path) {
    let report = analyze(pcap, None);
    assert!(report["timeline"]["exchanges"]
        .as_array()
        .unwrap()
        .is_empty());
    let errors = report["errors"].as_array().unwrap();
    assert!(!errors.is_empty());
    assert!(
        errors
            .iter()
            .all(|e| e.as_str().unwrap().contains("no key log")),
        "{errors:?}"
    );
}

#[test]
fn postgres_over_ssl_is_seen_with_the_clients_key_log() {
    let test = "postgres_over_ssl_is_seen_with_the_clients_key_log";
    let needs = [
        Need::Capture,
        Need::Postgres,
        Need::Tool("openssl"),
        Need::Python("pg8000"),
    ];
    if !requirements_met(test, &needs) {
        return;
    }
    let (pg, dir) = postgres_with(true);
    let (keys, pcap) = (dir.join("keys.log"), dir.join("pg.pcapng"));
    let sent = capture_client("postgres", pg.port, &keys, &pcap);
    let report = analyze(&pcap, Some(&keys));
    let ex = seen(&report, "postgres");
    for (request, n) in &sent {
        assert_eq!(ex.get(request), Some(n), "{request}: {ex:?}");
    }
    let text = report.to_string();
    assert!(
        !text.contains("p4ssw0rd"),
        "a SQL literal reached the report"
    );
    assert!(report["timeline"]["connections"][0]["tls"] == true);
    if requirements_met(test, &[Need::Tool("tshark")]) {
        // Every statement the server ran ends in CommandComplete or ErrorResponse.
        let kinds = tshark_pgsql_types(&pcap, &keys, pg.port);
        let done = kinds
            .iter()
            .filter(|t| *t == "Command completion" || *t == "Error")
            .count();
        assert_eq!(ex.values().sum::<u64>() as usize, done, "{kinds:?}");
    }
    assert_left_encrypted(&pcap);
}

#[test]
fn mysql_over_tls_is_seen_with_the_clients_key_log() {
    let test = "mysql_over_tls_is_seen_with_the_clients_key_log";
    let needs = [
        Need::Capture,
        Need::Mariadb,
        Need::Tool("openssl"),
        Need::Python("pymysql"),
    ];
    if !requirements_met(test, &needs) {
        return;
    }
    let dir = tmpdir("mysql-tls");
    let db = mariadb_with(Some(&dir));
    let (keys, pcap) = (dir.join("keys.log"), dir.join("mysql.pcapng"));
    let sent = capture_client("mysql", db.port, &keys, &pcap);
    let report = analyze(&pcap, Some(&keys));
    let ex = seen(&report, "mysql");
    for (request, n) in &sent {
        assert_eq!(ex.get(request), Some(n), "{request}: {ex:?}");
    }
    assert!(
        !report.to_string().contains("p4ssw0rd"),
        "a SQL literal reached the report"
    );
    assert!(report["timeline"]["connections"][0]["tls"] == true);
    if requirements_met(test, &[Need::Tool("tshark")]) {
        // tshark's MySQL dissector follows the SSL request into TLS.
        let decode_as = format!("tcp.port=={},mysql", db.port);
        let commands = tshark_fields_decrypted(
            &pcap,
            Some(&keys),
            &decode_as,
            "mysql.command",
            "mysql.command",
        );
        let answered = commands.iter().filter(|c| *c != "1").count() as u64;
        assert_eq!(ex.values().sum::<u64>(), answered, "{commands:?}");
    }
    assert_left_encrypted(&pcap);
}

#[test]
fn redis_over_tls_is_seen_with_the_clients_key_log() {
    let test = "redis_over_tls_is_seen_with_the_clients_key_log";
    let needs = [
        Need::Capture,
        Need::Tool("redis-server"),
        Need::Tool("openssl"),
        Need::Python("redis"),
    ];
    if !requirements_met(test, &needs) {
        return;
    }
    let dir = tmpdir("redis-tls");
    let redis = redis_tls(&dir);
    let (keys, pcap) = (dir.join("keys.log"), dir.join("redis.pcapng"));
    let sent = capture_client("redis", redis.port, &keys, &pcap);
    let report = analyze(&pcap, Some(&keys));
    let ex = seen(&report, "redis");
    for (request, n) in &sent {
        assert_eq!(ex.get(request), Some(n), "{request}: {ex:?}");
    }
    assert!(
        !report.to_string().contains("s3cr3t"),
        "a value reached the report"
    );
    if requirements_met(test, &[Need::Tool("tshark")]) {
        // tshark 4.0 has no RESP inside TLS: its decrypted stream, read as
        // commands (arrays whose first element names the command).
        let mut theirs = tshark_resp_commands(&pcap, &keys, redis.port);
        let mut ours: Vec<String> = ex
            .iter()
            .flat_map(|(r, n)| vec![r.split(' ').next().unwrap().to_string(); *n as usize])
            .collect();
        theirs.sort();
        ours.sort();
        assert_eq!(ours, theirs);
    }
    assert_left_encrypted(&pcap);
}

/// `pgsql.type` of every message tshark decodes on `port`, decrypting with
/// the key log (its PostgreSQL dissector follows SSLRequest into TLS).
fn tshark_pgsql_types(pcap: &Path, keys: &Path, port: u16) -> Vec<String> {
    let decode_as = format!("tcp.port=={port},pgsql");
    tshark_fields_decrypted(pcap, Some(keys), &decode_as, "pgsql.type", "pgsql.type")
}

/// The command names in tshark's decrypted TLS stream on `port` (`-z
/// follow,tls,raw`): each chunk that is a RESP array, by its first element.
fn tshark_resp_commands(pcap: &Path, keys: &Path, port: u16) -> Vec<String> {
    let out = Command::new("tshark")
        .args(["-r", pcap.to_str().unwrap(), "-q"])
        .args(["-o", &format!("tls.keylog_file:{}", keys.display())])
        .args(["-d", &format!("tcp.port=={port},tls")])
        .args(["-z", "follow,tls,raw,0"])
        .output()
        .expect("tshark");
    let hex = |s: &str| -> Option<Vec<u8>> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
            .collect()
    };
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| hex(l.trim()))
        .filter(|b| b.starts_with(b"*"))
        .filter_map(|b| {
            // *N\r\n$L\r\nNAME\r\n...
            let text = String::from_utf8_lossy(&b).into_owned();
            text.split("\r\n").nth(2).map(str::to_uppercase)
        })
        .collect()
}
