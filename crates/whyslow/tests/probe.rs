//! `whyslow probe` against real servers on loopback.

mod common;
use common::*;
use std::io::{Read, Write};
use whyslow_lab::http1::AppConfig;

#[test]
fn phases_add_up_to_total() {
    let a = app(AppConfig {
        work: std::time::Duration::from_millis(20),
        ..Default::default()
    });
    for extra in [&[][..], &["--fresh"][..]] {
        let url = format!("http://{a}/x");
        let mut args = vec!["probe", "--json", "-n", "4", url.as_str()];
        args.extend_from_slice(extra);
        let out = whyslow(&args);
        assert!(out.status.success(), "{}", stderr(&out));
        let reqs = requests(&json(&out));
        assert_eq!(reqs.len(), 4);
        for r in &reqs {
            let (sum, total) = (phase_sum(r), us(r, "total_us"));
            assert!(
                sum <= total && total - sum <= SUM_TOLERANCE_US,
                "sum {sum} total {total}: {r}"
            );
            // The server works 20 ms: the wait phase must carry it.
            assert!(us(r, "wait_us") >= 19_000, "{r}");
            assert_eq!(r["status"], 200);
        }
    }
}

#[test]
fn num_connects_counts_connections() {
    let a = app(AppConfig::default());
    let url = format!("http://{a}/");
    let count = |extra: &[&str]| -> u32 {
        let mut args = vec!["probe", "-n", "6", "-w", "%{num_connects}\n", url.as_str()];
        args.extend_from_slice(extra);
        let out = whyslow(&args);
        assert!(out.status.success(), "{}", stderr(&out));
        stdout(&out)
            .lines()
            .map(|l| l.trim().parse::<u32>().unwrap())
            .sum()
    };
    assert_eq!(count(&[]), 1, "reused connection");
    assert_eq!(count(&["--fresh"]), 6, "fresh connections");
}

#[test]
fn write_out_speaks_curls_variables() {
    let a = app(AppConfig::default());
    let url = format!("http://{a}/");
    let out = whyslow(&[
        "probe",
        "-n",
        "1",
        "-w",
        "%{http_code} %{remote_ip} %{remote_port} %{http_version} %{size_download}",
        &url,
    ]);
    let body_len = AppConfig::default().body.len();
    assert_eq!(
        stdout(&out),
        format!("200 127.0.0.1 {} 1.1 {body_len}", a.port())
    );
    let out = whyslow(&["probe", "-n", "1", "-w", "%{json}", &url]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let t = |k: &str| v[k].as_f64().unwrap();
    assert!(
        t("time_namelookup") <= t("time_connect") && t("time_connect") <= t("time_starttransfer")
    );
    assert!(t("time_starttransfer") <= t("time_total"));
}

#[test]
fn budget_exit_codes_name_the_phase() {
    let a = app(AppConfig {
        work: std::time::Duration::from_millis(30),
        ..Default::default()
    });
    let url = format!("http://{a}/");
    let ok = whyslow(&["probe", "-n", "2", "--budget", "total<5s,ttfb<4s", &url]);
    assert_eq!(ok.status.code(), Some(0), "{}", stdout(&ok));
    let broken = whyslow(&["probe", "-n", "2", "--budget", "total<5s,wait<10ms", &url]);
    assert_eq!(broken.status.code(), Some(1));
    let text = stdout(&broken);
    assert!(text.contains("budget wait<10ms: BROKEN"), "{text}");
    assert!(text.contains("budget total<5s: ok"), "{text}");
    let bad = whyslow(&["probe", "--budget", "latency<1s", &url]);
    assert_eq!(bad.status.code(), Some(2));
}

/// A server that accepts and then does `f` with the socket.
fn raw_server(f: impl Fn(std::net::TcpStream) + Send + 'static) -> std::net::SocketAddr {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let a = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            f(s);
        }
    });
    a
}

fn reset(s: std::net::TcpStream) {
    socket2::SockRef::from(&s)
        .set_linger(Some(std::time::Duration::ZERO))
        .unwrap();
    drop(s);
}

#[test]
fn errors_name_the_phase_and_keep_completed_requests() {
    let cases: Vec<(String, i32, &str)> = vec![
        ("htp:/nope".into(), 3, "url failed"),
        ("http://nonexistent.invalid/".into(), 6, "dns failed"),
        (
            "http://127.0.0.1:1/".into(),
            7,
            "connect failed: connection refused",
        ),
        (
            format!(
                "http://{}/",
                raw_server(|mut s| {
                    let _ = s.read(&mut [0; 512]);
                    reset(s)
                })
            ),
            56,
            "connection reset",
        ),
        (
            format!(
                "http://{}/",
                raw_server(|s| {
                    std::thread::sleep(std::time::Duration::from_secs(2));
                    drop(s)
                })
            ),
            28,
            "wait failed: timed out",
        ),
        (
            format!(
                "http://{}/",
                raw_server(|mut s| {
                    let _ = s.write_all(b"SSH-2.0-OpenSSH\r\n\r\n");
                })
            ),
            8,
            "malformed response",
        ),
    ];
    for (url, code, text) in cases {
        let out = whyslow(&["probe", "-n", "2", "--timeout", "300ms", &url]);
        assert_eq!(out.status.code(), Some(code), "{url}: {}", stderr(&out));
        assert!(stderr(&out).contains(text), "{url}: {}", stderr(&out));
    }
    // Two good answers, then a reset: both results are printed, then the error.
    let a = raw_server(|mut s| {
        let resp = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
        for _ in 0..2 {
            let _ = s.read(&mut [0; 4096]);
            let _ = s.write_all(resp);
        }
        let _ = s.read(&mut [0; 4096]);
        reset(s);
    });
    let out = whyslow(&["probe", "--json", "-n", "4", &format!("http://{a}/")]);
    assert_eq!(out.status.code(), Some(56));
    let report = json(&out);
    assert_eq!(requests(&report).len(), 2);
    assert!(
        report["errors"][0]
            .as_str()
            .unwrap()
            .starts_with("request 3:"),
        "{report}"
    );
}

/// Case 000 on this kernel: without TCP_NODELAY, a POST written as headers then
/// body waits for the server's delayed ACK before the body leaves. Linux's
/// delayed-ACK minimum is 40 ms (TCP_DELACK_MIN = HZ/25, include/net/tcp.h), and
/// quick-ack mode covers the first request of a connection, so the stall shows
/// on reused requests.
#[test]
fn split_post_without_nodelay_waits_for_the_delayed_ack() {
    let a = app(AppConfig::default());
    let url = format!("http://{a}/search");
    let reused_waits = |extra: &[&str]| -> (Vec<u64>, Vec<String>) {
        let mut args = vec![
            "probe",
            "--json",
            "-n",
            "6",
            "-d",
            "{\"query\":\"x\"}",
            url.as_str(),
        ];
        args.extend_from_slice(extra);
        let out = whyslow(&args);
        assert!(out.status.success(), "{}", stderr(&out));
        let report = json(&out);
        let kinds = report["findings"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["kind"].as_str().unwrap().to_string())
            .collect();
        let waits = requests(&report)
            .iter()
            .filter(|r| r["reused"] == true)
            .map(|r| us(r, "total_us"))
            .collect();
        (waits, kinds)
    };
    let (split, kinds) = reused_waits(&["--nodelay", "off", "--write", "split"]);
    assert_eq!(split.len(), 5);
    assert!(
        split.iter().all(|&t| t >= 30_000),
        "split, no NODELAY: {split:?}"
    );
    // The timing signature is a finding of the probe's own report.
    assert_eq!(kinds, ["nagle_delayed_ack"]);
    for fixed in [
        &["--nodelay", "off", "--write", "coalesced"][..],
        &["--nodelay", "on", "--write", "split"][..],
    ] {
        let (waits, kinds) = reused_waits(fixed);
        assert!(waits.iter().all(|&t| t < 5_000), "{fixed:?}: {waits:?}");
        assert!(kinds.is_empty(), "{fixed:?}: {kinds:?}");
    }
}

/// Bodies framed by chunked encoding and by the connection's close are read to
/// their end and counted as curl's size_download counts them (framing excluded).
#[test]
fn chunked_and_read_to_close_bodies() {
    let chunked = raw_server(|mut s| {
        let resp = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nWiki\r\n5;x=1\r\npedia\r\n0\r\nT: 1\r\n\r\n";
        for _ in 0..2 {
            let _ = s.read(&mut [0; 4096]);
            let _ = s.write_all(resp);
        }
    });
    let out = whyslow(&[
        "probe",
        "-n",
        "2",
        "-w",
        "%{size_download} %{num_connects}\n",
        &format!("http://{chunked}/"),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out), "9 1\n9 0\n", "chunked, kept alive");

    let until_close = raw_server(|mut s| {
        let _ = s.read(&mut [0; 4096]);
        let _ = s.write_all(b"HTTP/1.0 200 OK\r\n\r\nhello");
    });
    let out = whyslow(&[
        "probe",
        "-n",
        "2",
        "-w",
        "%{size_download} %{num_connects}\n",
        &format!("http://{until_close}/"),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        stdout(&out),
        "5 1\n5 1\n",
        "read to close: a new connection each time"
    );

    let garbage = raw_server(|mut s| {
        let _ = s.read(&mut [0; 4096]);
        let _ = s.write_all(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n");
    });
    let out = whyslow(&["probe", "-n", "1", &format!("http://{garbage}/")]);
    assert_eq!(out.status.code(), Some(8), "{}", stderr(&out));
    assert!(stderr(&out).contains("chunked"), "{}", stderr(&out));
}

/// Credentials in the URL go out as Basic authorization (as curl sends them)
/// and never into the report; neither does the query string.
#[test]
fn url_credentials_are_sent_but_never_reported() {
    let a = raw_server(|mut s| {
        let mut buf = [0; 4096];
        let n = s.read(&mut buf).unwrap_or(0);
        let req = String::from_utf8_lossy(&buf[..n]).to_string();
        // base64("user:s3cret") = dXNlcjpzM2NyZXQ=
        let ok = req.contains("\r\nAuthorization: Basic dXNlcjpzM2NyZXQ=\r\n");
        let status = if ok { "200 OK" } else { "401 Unauthorized" };
        let _ = s.write_all(
            format!("HTTP/1.1 {status}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                .as_bytes(),
        );
    });
    let url = format!("http://user:s3cret@{a}/p?token=t0ps3cret");
    let out = whyslow(&["probe", "--json", "-n", "1", &url]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert_eq!(requests(&json(&out))[0]["status"], 200, "{text}");
    assert!(
        !text.contains("s3cret") && !text.contains("t0ps3cret"),
        "{text}"
    );
    let out = whyslow(&["probe", "-n", "1", &url]);
    assert!(!stdout(&out).contains("s3cret") && !stdout(&out).contains("t0ps3cret"));
}
