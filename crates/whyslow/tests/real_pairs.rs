//! Nagle × delayed ACK between real programs that are not whyslow's code,
//! captured live with `whyslow capture` and diagnosed with `whyslow analyze`:
//! - a Python socket client writing POST headers and body in two send() calls
//!   without TCP_NODELAY (as Ruby's Net::HTTP did in case 000) → nginx proxying
//!   to an upstream (nginx reads the whole body before proxying): client → server;
//! - Python's http.server, which writes response headers and body separately
//!   and leaves Nagle on, → curl reusing one connection: server → client.
//!
//! The coalesced / TCP_NODELAY variants of each pair must show no such stall.

mod common;
use common::real::Server;
use common::*;
use std::path::Path;
use std::process::Command;

/// Requests per run; all but the first on a reused connection.
const REQUESTS: usize = 5;

// One pair at a time (`serial()`): they measure kernel timers and pick free ports.

/// Captures `client` on `port`, analyzes, returns (report, timeline).
fn capture_and_analyze(dir: &Path, port: u16, client: &[&str]) -> serde_json::Value {
    let file = dir.join(format!("run-{}.pcapng", free_port()));
    let f = file.to_str().unwrap();
    let p = port.to_string();
    let mut args = vec!["capture", "-i", "lo", "-p", p.as_str(), "-w", f, "--"];
    args.extend_from_slice(client);
    let out = whyslow(&args);
    assert!(out.status.success(), "capture {client:?}: {}", stderr(&out));
    let out = whyslow(&["analyze", "--json", "--timeline", f]);
    assert!(out.status.success(), "analyze: {}", stderr(&out));
    let report = json(&out);
    if have("tshark") {
        let conns = report["timeline"]["connections"].as_array().unwrap().len();
        assert_eq!(
            conns,
            tshark_conversations(&file),
            "connections: whyslow vs tshark -z conv,tcp"
        );
    }
    report
}

/// Conversations tshark counts in `tshark -q -z conv,tcp` (lines with "<->").
fn tshark_conversations(file: &Path) -> usize {
    let out = Command::new("tshark")
        .args(["-r", file.to_str().unwrap(), "-q", "-z", "conv,tcp"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains("<->"))
        .count()
}

/// Directions ("to_server"/"to_client") of the first segment of each stall.
fn stall_directions(report: &serde_json::Value) -> Vec<String> {
    let conns = report["timeline"]["connections"].as_array().unwrap();
    let mut dirs = Vec::new();
    for f in report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["kind"] == "nagle_delayed_ack")
    {
        for e in f["evidence"].as_array().unwrap() {
            let conn = conns.iter().find(|c| c["id"] == e["connection"]).unwrap();
            let first = &e["packets"][0];
            let seg = conn["segments"]
                .as_array()
                .unwrap()
                .iter()
                .find(|s| &s["packet"] == first)
                .unwrap();
            dirs.push(seg["direction"].as_str().unwrap().to_string());
        }
    }
    dirs
}

fn stalls(report: &serde_json::Value) -> Vec<u64> {
    report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["kind"] == "nagle_delayed_ack")
        .map(|f| f["time_lost_per_occurrence_us"].as_u64().unwrap())
        .collect()
}

const PY_CLIENT: &str = r#"
import socket, sys
port, split = int(sys.argv[1]), sys.argv[2] == "split"
s = socket.create_connection(("127.0.0.1", port))  # Nagle on: no TCP_NODELAY
body = b'{"query":{"match":{"name":"whyslow"}}}'
head = b"POST /search HTTP/1.1\r\nHost: lab\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body)
for _ in range(int(sys.argv[3])):
    if split:
        s.sendall(head); s.sendall(body)
    else:
        s.sendall(head + body)
    buf = b""
    while b"\r\n\r\n" not in buf:
        buf += s.recv(65536)
    h, _, rest = buf.partition(b"\r\n\r\n")
    n = int([l.split(b":")[1] for l in h.split(b"\r\n") if l.lower().startswith(b"content-length")][0])
    while len(rest) < n:
        rest += s.recv(65536)
"#;

fn nginx_proxy(dir: &Path) -> (Server, u16) {
    let (front, upstream) = (free_port(), free_port());
    let d = dir.display();
    let conf = format!(
        "worker_processes 1; daemon off; error_log {d}/error.log; pid {d}/nginx.pid;
events {{ worker_connections 64; }}
http {{ access_log off; client_body_temp_path {d}/body; proxy_temp_path {d}/proxy;
  fastcgi_temp_path {d}/fcgi; uwsgi_temp_path {d}/uwsgi; scgi_temp_path {d}/scgi;
  server {{ listen 127.0.0.1:{front}; location / {{ proxy_pass http://127.0.0.1:{upstream};
    proxy_http_version 1.1; proxy_set_header Connection \"\"; }} }}
  server {{ listen 127.0.0.1:{upstream}; location / {{ return 200 \"ok\\n\"; }} }} }}"
    );
    let path = dir.join("nginx.conf");
    std::fs::write(&path, conf).unwrap();
    let child = Command::new("nginx")
        .args(["-p", &d.to_string(), "-c", path.to_str().unwrap()])
        .spawn()
        .unwrap();
    // Stopped with SIGTERM, not SIGKILL: nginx's master then stops its workers too.
    (Server::started(child, front), front)
}

#[test]
fn python_client_split_post_to_nginx_stalls_client_to_server() {
    let _one_at_a_time = serial();
    if !capture_allowed("python_client_split_post_to_nginx") || !have("nginx") || !have("python3") {
        assert!(
            std::env::var("WHYSLOW_REQUIRE_CAPTURE").is_err() || (have("nginx") && have("python3"))
        );
        return;
    }
    let dir = tmpdir("nginx");
    let (_nginx, port) = nginx_proxy(&dir);
    let (p, n) = (port.to_string(), REQUESTS.to_string());
    let split = capture_and_analyze(&dir, port, &["python3", "-c", PY_CLIENT, &p, "split", &n]);
    let dirs = stall_directions(&split);
    assert!(
        dirs.len() >= REQUESTS - 2,
        "expected a stall per reused request: {:?}",
        split["findings"]
    );
    assert!(dirs.iter().all(|d| d == "to_server"), "{dirs:?}");
    assert!(stalls(&split).iter().all(|&us| us >= 30_000));
    let coalesced = capture_and_analyze(
        &dir,
        port,
        &["python3", "-c", PY_CLIENT, &p, "coalesced", &n],
    );
    assert!(stalls(&coalesced).is_empty(), "{:?}", coalesced["findings"]);
    assert_eq!(
        coalesced["timeline"]["exchanges"].as_array().unwrap().len(),
        REQUESTS
    );
}

const PY_SERVER: &str = r#"
import http.server, sys
class H(http.server.SimpleHTTPRequestHandler):
    protocol_version = "HTTP/1.1"            # keep-alive
    disable_nagle_algorithm = sys.argv[2] == "nodelay"
    def log_message(self, *a): pass
http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"#;

#[test]
fn python_http_server_split_response_to_curl_stalls_server_to_client() {
    let _one_at_a_time = serial();
    if !capture_allowed("python_http_server_to_curl") || !have("curl") || !have("python3") {
        assert!(
            std::env::var("WHYSLOW_REQUIRE_CAPTURE").is_err() || (have("curl") && have("python3"))
        );
        return;
    }
    let dir = tmpdir("pyserver");
    std::fs::write(dir.join("data.json"), "x".repeat(2000)).unwrap();
    for (mode, expect_stall) in [("nagle", true), ("nodelay", false)] {
        let port = free_port();
        let child = Command::new("python3")
            .current_dir(&dir)
            .args(["-c", PY_SERVER, &port.to_string(), mode])
            .spawn()
            .unwrap();
        let _server = Server::started(child, port);
        let url = format!("http://127.0.0.1:{port}/data.json");
        // curl reuses one connection for the URLs; each gets its own -o.
        let mut client = vec!["curl", "-s"];
        for _ in 0..REQUESTS {
            client.extend(["-o", "/dev/null", url.as_str()]);
        }
        let report = capture_and_analyze(&dir, port, &client);
        let dirs = stall_directions(&report);
        if expect_stall {
            assert!(
                dirs.len() >= REQUESTS - 2,
                "{mode}: {:?}",
                report["findings"]
            );
            assert!(dirs.iter().all(|d| d == "to_client"), "{dirs:?}");
        } else {
            assert!(dirs.is_empty(), "{mode}: {:?}", report["findings"]);
        }
    }
}
