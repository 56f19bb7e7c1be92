//! Clients' TLS read through OpenSSL's plaintext, held to tshark: curl
//! (its own BIO) and Python's ssl, over TLS 1.2 and 1.3, to nginx, under
//! `capture --ebpf -- COMMAND` with no key log given to whyslow. Every
//! connection's exchanges — method, path, status, in order — equal what
//! tshark decrypts from the same run's packets with the key log the clients
//! wrote.

mod common;
use common::real::{nginx_tls, python, requirements_met, Need};
use common::*;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

const NEEDS: &[Need] = &[
    Need::Capture,
    Need::Ebpf,
    Need::Tool("nginx"),
    Need::Tool("curl"),
    Need::Tool("openssl"),
    Need::Tool("tshark"),
];

/// One connection's exchanges: "METHOD path status", in order.
type Conversation = Vec<String>;

/// Python's http.client on one kept-alive connection: the TLS version
/// pinned by argv[2], then the paths that follow (GET; POST for the forms).
/// Paths are words: the normalizer reports a number in a path as `?`.
const PYTHON_CLIENT: &str = r#"
import http.client, ssl, sys
port, version, paths = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
ctx = ssl.create_default_context()
ctx.check_hostname = False
ctx.verify_mode = ssl.CERT_NONE
v = {"1.2": ssl.TLSVersion.TLSv1_2, "1.3": ssl.TLSVersion.TLSv1_3}[version]
ctx.minimum_version = ctx.maximum_version = v
c = http.client.HTTPSConnection("127.0.0.1", port, context=ctx)
for p in paths:
    method, body = ("POST", b"x" * 300) if p in ("/submit", "/form") else ("GET", None)
    c.request(method, p, body=body)
    c.getresponse().read()
c.close()
"#;

/// Per client port, the exchanges whyslow read.
fn whyslows(report: &Value) -> BTreeMap<String, Conversation> {
    let conns = report["timeline"]["connections"].as_array().unwrap();
    let mut by_conn: BTreeMap<String, Vec<(f64, String)>> = BTreeMap::new();
    for e in report["timeline"]["exchanges"].as_array().unwrap() {
        let conn = conns.iter().find(|c| c["id"] == e["connection"]).unwrap();
        let client = conn["client"].as_str().unwrap();
        let port = client.rsplit(':').next().unwrap().to_string();
        let status = &e["status"]["http"];
        let line = format!("{} {status}", e["request"].as_str().unwrap());
        let at = e["request_first_at_us"].as_f64().unwrap();
        by_conn.entry(port).or_default().push((at, line));
    }
    by_conn
        .into_iter()
        .map(|(port, mut v)| {
            v.sort_by(|a, b| a.0.total_cmp(&b.0));
            (port, v.into_iter().map(|(_, l)| l).collect())
        })
        .collect()
}

/// Per client port, what tshark decrypts with the key log.
fn tsharks(pcap: &Path, keys: &Path, port: u16) -> BTreeMap<String, Conversation> {
    let out = Command::new("tshark")
        .args(["-r", pcap.to_str().unwrap()])
        .args(["-o", &format!("tls.keylog_file:{}", keys.display())])
        .args(["-d", &format!("tcp.port=={port},tls"), "-Y", "http"])
        .args(["-T", "fields", "-E", "occurrence=a", "-E", "aggregator=|"])
        .args(["-e", "tcp.srcport", "-e", "tcp.dstport"])
        .args(["-e", "http.request.method", "-e", "http.request.uri"])
        .args(["-e", "http.response.code"])
        .output()
        .expect("run tshark");
    // Requests and responses each in frame order, paired as HTTP/1.1 pairs
    // them: the capture may put a response's frame a microsecond before
    // its request's when the two ends run on different CPUs.
    let mut requests: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut responses: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let server = port.to_string();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let f: Vec<&str> = line.split('\t').collect();
        let client = if f[0] == server { f[1] } else { f[0] }.to_string();
        let methods = f[2].split('|').filter(|s| !s.is_empty());
        let asked = methods
            .zip(f[3].split('|'))
            .map(|(m, u)| format!("{m} {u}"));
        requests.entry(client.clone()).or_default().extend(asked);
        let codes = f[4]
            .split('|')
            .filter(|s| !s.is_empty())
            .map(str::to_string);
        responses.entry(client).or_default().extend(codes);
    }
    requests
        .into_iter()
        .map(|(client, asked)| {
            let codes = responses.remove(&client).unwrap_or_default();
            assert_eq!(asked.len(), codes.len(), "{client}: {asked:?} {codes:?}");
            let pairs = asked.iter().zip(&codes).map(|(r, c)| format!("{r} {c}"));
            (client, pairs.collect())
        })
        .collect()
}

#[test]
fn curl_and_python_over_tls_12_and_13_read_as_tshark_decrypts_them() {
    let _one = serial();
    let test = "curl_and_python_over_tls_read_as_tshark";
    if !requirements_met(test, NEEDS) {
        return;
    }
    let dir = tmpdir("tls_ebpf_clients");
    let port = free_port();
    let _nginx = nginx_tls(&dir, port, "ssl");
    let url = |p: &str| format!("https://127.0.0.1:{port}{p}");
    let client = dir.join("client.py");
    std::fs::write(&client, PYTHON_CLIENT).unwrap();
    let py = |v: &str, paths: &str| format!("{} {} {port} {v} {paths}", python(), client.display());
    let script = [
        format!(
            "curl -sk -o /dev/null --tlsv1.2 --tls-max 1.2 {} {} {}",
            url("/a"),
            url("/gone"),
            url("/b")
        ),
        format!(
            "curl -sk -o /dev/null --tlsv1.3 {} {}",
            url("/c"),
            url("/d")
        ),
        format!(
            "curl -sk -o /dev/null --tlsv1.3 -d @/etc/hostname {}",
            url("/e")
        ),
        py("1.2", "/alpha /gone /submit /beta"),
        py("1.3", "/gamma /form /delta /gone"),
    ];
    let keys = dir.join("keys.log");
    let pcap = dir.join("clients.pcapng");
    let (p, f) = (port.to_string(), pcap.to_str().unwrap().to_string());
    let out = Command::new(env!("CARGO_BIN_EXE_whyslow"))
        .args(["capture", "--ebpf", "-i", "lo", "-p", &p, "-w", &f])
        .args(["--", "sh", "-ec", &script.join("\n")])
        .env("SSLKEYLOGFILE", &keys)
        .output()
        .unwrap();
    assert!(out.status.success(), "capture: {}", stderr(&out));

    // whyslow is given no key log: only the events open the sessions.
    let out = whyslow(&["analyze", "--json", "--timeline", &f]);
    assert!(out.status.success(), "analyze: {}", stderr(&out));
    let report = json(&out);
    let ours = whyslows(&report);
    let theirs = tsharks(&pcap, &keys, port);
    assert_eq!(
        theirs.len(),
        script.len(),
        "tshark's connections: {theirs:?}"
    );
    assert_eq!(ours, theirs, "whyslow from eBPF vs tshark with the key log");
    let conns = report["timeline"]["connections"].as_array().unwrap();
    assert!(conns.iter().all(|c| c["tls"] == true), "{conns:?}");
}

/// A client whose TLS is not OpenSSL's (whyslow's own probe, on rustls):
/// nothing to read in the clear, and the report says so, not "use --ebpf".
#[test]
fn a_tls_library_not_hooked_is_said_so() {
    let _one = serial();
    let test = "a_tls_library_not_hooked_is_said_so";
    if !requirements_met(test, &NEEDS[..3]) {
        return;
    }
    let dir = tmpdir("tls_ebpf_not_hooked");
    let port = free_port();
    let _nginx = nginx_tls(&dir, port, "ssl");
    let pcap = dir.join("rustls.pcapng");
    let (p, f) = (port.to_string(), pcap.to_str().unwrap().to_string());
    let url = format!("https://127.0.0.1:{port}/");
    let bin = env!("CARGO_BIN_EXE_whyslow");
    let out = whyslow(&[
        "capture", "--ebpf", "-p", &p, "-w", &f, "--", bin, "probe", "-k", "-n", "2", &url,
    ]);
    assert!(out.status.success(), "capture: {}", stderr(&out));
    let report = json(&whyslow(&["analyze", "--json", &f]));
    let skipped = report["skipped"].to_string();
    assert!(
        skipped.contains("--ebpf saw no OpenSSL call on them"),
        "{skipped}"
    );
    assert!(
        !skipped.contains("or read OpenSSL's plaintext with --ebpf"),
        "{skipped}"
    );
}
