//! TLS seen through key logs: curl (OpenSSL) making several HTTPS requests
//! to nginx over TLS 1.2 and TLS 1.3 with each cipher family, captured live
//! with `whyslow capture`, then `analyze --keylog` with curl's SSLKEYLOGFILE.
//! Every request curl sent is an exchange, as tshark counts them with the
//! same keys; without the keys, or with wrong ones, each connection says why.

mod common;
use common::real::{nginx_tls, requirements_met, tshark_fields_decrypted, Need};
use common::*;
use std::path::Path;
use std::process::Command;

/// What the tests on nginx with curl need.
const NGINX_CURL: &[Need] = &[
    Need::Capture,
    Need::Tool("nginx"),
    Need::Tool("curl"),
    Need::Tool("openssl"),
];

/// curl runs: (its TLS options, the paths it asks for on one connection).
const RUNS: &[(&str, &[&str])] = &[
    ("--tlsv1.2 --tls-max 1.2", &["/a", "/b", "/c"]),
    (
        "--tlsv1.2 --tls-max 1.2 --ciphers ECDHE-ECDSA-CHACHA20-POLY1305",
        &["/d"],
    ),
    (
        "--tlsv1.2 --tls-max 1.2 --ciphers ECDHE-ECDSA-AES256-GCM-SHA384",
        &["/e"],
    ),
    ("--tlsv1.3", &["/f", "/g"]),
    (
        "--tlsv1.3 --tls13-ciphers TLS_CHACHA20_POLY1305_SHA256",
        &["/h"],
    ),
    ("--tlsv1.3 --tls13-ciphers TLS_AES_128_GCM_SHA256", &["/i"]),
];

fn requests_in(report: &serde_json::Value) -> Vec<String> {
    let mut r: Vec<String> = report["timeline"]["exchanges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["request"].as_str().unwrap().to_string())
        .collect();
    r.sort();
    r
}

#[test]
fn https_exchanges_are_seen_with_curls_key_log_and_agree_with_tshark() {
    let test = "https_exchanges_are_seen_with_curls_key_log";
    if !requirements_met(test, NGINX_CURL) {
        return;
    }
    let dir = tmpdir("tls-nginx");
    let port = free_port();
    let _nginx = nginx_tls(&dir, port, "ssl");
    let keys = dir.join("keys.log");
    let script: Vec<String> = RUNS
        .iter()
        .map(|(opts, paths)| {
            let urls: Vec<String> = paths
                .iter()
                .map(|p| format!("https://127.0.0.1:{port}{p}"))
                .collect();
            format!("curl -sfk -o /dev/null {opts} {}", urls.join(" "))
        })
        .collect();
    let pcap = dir.join("https.pcapng");
    let (p, f) = (port.to_string(), pcap.to_str().unwrap().to_string());
    let out = Command::new(env!("CARGO_BIN_EXE_whyslow"))
        .args(["capture", "-i", "lo", "-p", &p, "-w", &f, "--", "sh", "-ec"])
        .arg(script.join("\n"))
        .env("SSLKEYLOGFILE", &keys)
        .output()
        .unwrap();
    assert!(out.status.success(), "capture: {}", stderr(&out));
    let mut sent: Vec<String> = RUNS
        .iter()
        .flat_map(|(_, paths)| paths.iter().map(|p| format!("GET {p}")))
        .collect();
    sent.sort();

    let k = keys.to_str().unwrap();
    let out = whyslow(&["analyze", "--json", "--timeline", "--keylog", k, &f]);
    assert!(out.status.success(), "analyze: {}", stderr(&out));
    let report = json(&out);
    assert_eq!(requests_in(&report), sent, "{}", report["errors"]);
    for e in report["timeline"]["exchanges"].as_array().unwrap() {
        assert_eq!(e["protocol"], "http1", "{e}");
        assert_eq!(e["status"]["http"], 200, "{e}");
    }
    assert_eq!(
        report["errors"].as_array().unwrap().len(),
        0,
        "{}",
        report["errors"]
    );
    let conns = report["timeline"]["connections"].as_array().unwrap();
    assert_eq!(conns.len(), RUNS.len());
    assert!(conns.iter().all(|c| c["tls"] == true));

    if requirements_met(test, &[Need::Tool("tshark")]) {
        let mut theirs: Vec<String> = tshark_tls_requests(&pcap, &keys, port);
        theirs.sort();
        assert_eq!(theirs, sent, "tshark with the same key log");
    }

    // Without the key log: no exchange, and each connection says why.
    assert_left_encrypted(&["analyze", "--json", "--timeline", &f], "no key log given");

    // A key log whose secrets are wrong: named, never garbage exchanges.
    let text = std::fs::read_to_string(&keys).unwrap();
    let wrong: String = text
        .lines()
        .map(|l| {
            let (head, last) = l.split_at(l.len() - 1);
            format!("{head}{}\n", if last == "0" { "1" } else { "0" })
        })
        .collect();
    let bad = dir.join("wrong.log");
    std::fs::write(&bad, wrong).unwrap();
    let bad = bad.to_str().unwrap();
    let args = ["analyze", "--json", "--timeline", "--keylog", bad, &f];
    assert_left_encrypted(&args, "do not authenticate");
}

/// whyslow's own client writes key logs that open its sessions: probe with
/// `--keylog-out` (HTTP/1.1 and HTTP/2 by ALPN) and load with `SSLKEYLOGFILE`,
/// to nginx; `analyze --keylog` sees every request they sent, as tshark does.
#[test]
fn whyslows_own_key_logs_open_its_sessions() {
    let test = "whyslows_own_key_logs_open_its_sessions";
    let needs = [Need::Capture, Need::Tool("nginx"), Need::Tool("openssl")];
    if !requirements_met(test, &needs) {
        return;
    }
    let dir = tmpdir("tls-own");
    let port = free_port();
    let _nginx = nginx_tls(&dir, port, "ssl http2");
    let keys = dir.join("keys.log");
    let load_json = dir.join("load.json");
    let (bin, k) = (env!("CARGO_BIN_EXE_whyslow"), keys.display());
    let url = format!("https://127.0.0.1:{port}");
    let script = format!(
        "{bin} probe -k -n 3 --http1.1 --keylog-out {k} {url}/one >/dev/null
{bin} probe -k -n 2 --http2 --keylog-out {k} {url}/two >/dev/null
SSLKEYLOGFILE={k} {bin} load -k -q -n 20 -c 2 --http1.1 --json {url}/three >{}",
        load_json.display()
    );
    let pcap = dir.join("own.pcapng");
    let (p, f) = (port.to_string(), pcap.to_str().unwrap().to_string());
    let out = whyslow(&[
        "capture", "-i", "lo", "-p", &p, "-w", &f, "--", "sh", "-ec", &script,
    ]);
    assert!(out.status.success(), "capture: {}", stderr(&out));
    let load: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&load_json).unwrap()).unwrap();
    let loaded = load["load"]["responses"].as_u64().unwrap() as usize;
    assert!(loaded >= 20, "{}", load["load"]);
    assert_eq!(load["load"]["unfinished"], 0, "{}", load["load"]);
    assert!(load["load"]["failures"].as_object().unwrap().is_empty());
    let mut sent = vec!["GET /one".to_string(); 3];
    sent.extend(vec!["GET /two".to_string(); 2]);
    sent.extend(vec!["GET /three".to_string(); loaded]);
    sent.sort();

    let out = whyslow(&[
        "analyze",
        "--json",
        "--timeline",
        "--keylog",
        &k.to_string(),
        &f,
    ]);
    assert!(out.status.success(), "analyze: {}", stderr(&out));
    let report = json(&out);
    assert_eq!(requests_in(&report), sent, "{}", report["errors"]);
    for e in report["timeline"]["exchanges"].as_array().unwrap() {
        let h2 = e["request"] == "GET /two";
        assert_eq!(e["protocol"], if h2 { "http2" } else { "http1" }, "{e}");
        assert_eq!(e["status"]["http"], 200, "{e}");
    }
    if requirements_met(test, &[Need::Tool("tshark")]) {
        let mut theirs = tshark_tls_requests(&pcap, &keys, port);
        theirs.extend(tshark_paths(&pcap, &keys, port, "http2.headers.path"));
        theirs.sort();
        assert_eq!(theirs, sent, "tshark with the same key log");
    }
}

/// tls_full_handshake from the cleartext hellos, no keys needed: five curl
/// processes to nginx each make a full handshake (nothing to resume across
/// processes); one curl fetching five URLs on new connections resumes its
/// session after the first, and is not named.
#[test]
fn full_handshakes_on_repeated_connections_are_named() {
    let test = "full_handshakes_on_repeated_connections_are_named";
    if !requirements_met(test, NGINX_CURL) {
        return;
    }
    let dir = tmpdir("tls-resume");
    let port = free_port();
    let _nginx = nginx_tls(&dir, port, "ssl");
    let url = format!("https://127.0.0.1:{port}/");
    let urls = [url.as_str(); 5].join(" ");
    let runs = [
        (
            "processes",
            format!("for i in 1 2 3 4 5; do curl -sfk -o /dev/null {url}; done"),
            true,
        ),
        (
            "one-client",
            format!("curl -sfk -H 'Connection: close' -o /dev/null -o /dev/null -o /dev/null -o /dev/null -o /dev/null {urls}"),
            false,
        ),
    ];
    for (name, script, named) in runs {
        let pcap = dir.join(format!("{name}.pcapng"));
        let (p, f) = (port.to_string(), pcap.to_str().unwrap().to_string());
        let out = whyslow(&[
            "capture", "-i", "lo", "-p", &p, "-w", &f, "--", "sh", "-ec", &script,
        ]);
        assert!(out.status.success(), "capture: {}", stderr(&out));
        let report = json(&whyslow(&["analyze", "--json", "--timeline", &f]));
        let conns = report["timeline"]["connections"].as_array().unwrap();
        assert_eq!(conns.len(), 5, "{name}");
        let resumed = conns
            .iter()
            .filter(|c| c["tls_facts"]["resumed"] == true)
            .count();
        assert!(conns
            .iter()
            .all(|c| c["tls_facts"]["handshake_us"].is_u64()));
        let finding = finding(&report, "tls_full_handshake");
        if named {
            assert_eq!(resumed, 0, "{name}");
            let f = finding.unwrap_or_else(|| panic!("{name}: {}", report["findings"]));
            assert_eq!(f["occurrences"], 4, "{f}");
        } else {
            assert_eq!(resumed, 4, "{name}: {conns:?}");
            assert!(finding.is_none(), "{name}: {}", report["findings"]);
        }
    }
}

/// `analyze` with `args` finds no exchange, and every connection says `why`.
fn assert_left_encrypted(args: &[&str], why: &str) {
    let report = json(&whyslow(args));
    assert!(requests_in(&report).is_empty());
    let errors = report["errors"].as_array().unwrap();
    assert_eq!(errors.len(), RUNS.len(), "{errors:?}");
    assert!(
        errors.iter().all(|e| e.as_str().unwrap().contains(why)),
        "{errors:?}"
    );
}

/// HTTP request URIs tshark decrypts with the key log.
fn tshark_tls_requests(pcap: &Path, keys: &Path, port: u16) -> Vec<String> {
    tshark_paths(pcap, keys, port, "http.request.uri")
}

/// Every value of a request path `field` tshark decrypts with the key log,
/// as "GET path".
fn tshark_paths(pcap: &Path, keys: &Path, port: u16, field: &str) -> Vec<String> {
    let decode_as = format!("tcp.port=={port},tls");
    tshark_fields_decrypted(pcap, Some(keys), &decode_as, field, field)
        .into_iter()
        .map(|path| format!("GET {path}"))
        .collect()
}
