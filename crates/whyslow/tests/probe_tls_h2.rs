//! TLS and HTTP/2 facts reported by `whyslow probe`, against lab servers with a
//! certificate authority generated at test time.

mod common;
use common::*;
use std::net::SocketAddr;
use whyslow_lab::http1::AppConfig;

struct Pki {
    ca_pem_path: std::path::PathBuf,
    server: std::sync::Arc<rustls::ServerConfig>,
}

fn pki(tag: &str) -> Pki {
    let pki = whyslow_lab::pki::Pki::generate().unwrap();
    let path =
        std::env::temp_dir().join(format!("whyslow-test-ca-{}-{tag}.pem", std::process::id()));
    std::fs::write(&path, &pki.ca_pem).unwrap();
    let server = whyslow_lab::tls_h2::server_config(pki.chain, pki.key_pkcs8).unwrap();
    Pki {
        ca_pem_path: path,
        server,
    }
}

fn tls_server(cfg: std::sync::Arc<rustls::ServerConfig>) -> SocketAddr {
    rt().block_on(async {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let a = l.local_addr().unwrap();
        tokio::spawn(whyslow_lab::tls_h2::serve_tls(l, cfg, AppConfig::default()));
        a
    })
}

fn probe_json(args: &[&str]) -> serde_json::Value {
    let out = whyslow(args);
    assert!(out.status.success(), "{args:?}: {}", stderr(&out));
    json(&out)
}

#[test]
fn tls_version_alpn_and_resumption_are_reported() {
    let p = pki("facts");
    let a = tls_server(p.server.clone());
    let url = format!("https://127.0.0.1:{}/", a.port());
    let ca = p.ca_pem_path.to_str().unwrap();

    let report = probe_json(&[
        "probe", "--json", "--fresh", "-n", "3", "--cacert", ca, &url,
    ]);
    let reqs = requests(&report);
    assert_eq!(reqs.len(), 3);
    for (i, r) in reqs.iter().enumerate() {
        let tls = &r["tls"];
        assert_eq!(tls["version"], "TLSv1.3", "{r}");
        assert_eq!(tls["alpn"], "h2", "default offers h2 first: {r}");
        assert_eq!(r["http_version"], "2");
        assert!(us(r, "tls_us") > 0);
        // Later fresh connections resume the session of an earlier one.
        assert_eq!(tls["resumed"], i > 0, "request {i}: {r}");
    }

    let report = probe_json(&[
        "probe",
        "--json",
        "--http1.1",
        "-n",
        "2",
        "--cacert",
        ca,
        &url,
    ]);
    let reqs = requests(&report);
    assert_eq!(reqs[0]["tls"]["alpn"], "http/1.1");
    assert_eq!(reqs[0]["http_version"], "1.1");
    assert_eq!(reqs[1]["reused"], true);
    assert_eq!(
        us(&reqs[1], "tls_us"),
        0,
        "no handshake on a reused connection"
    );
}

#[test]
fn untrusted_certificate_is_a_tls_failure_unless_insecure() {
    let p = pki("untrusted");
    let a = tls_server(p.server.clone());
    let url = format!("https://127.0.0.1:{}/", a.port());
    let out = whyslow(&["probe", "-n", "1", &url]);
    assert_eq!(out.status.code(), Some(35), "{}", stderr(&out));
    assert!(stderr(&out).contains("tls failed"), "{}", stderr(&out));
    let out = whyslow(&["probe", "-n", "1", "-k", &url]);
    assert!(out.status.success(), "{}", stderr(&out));
    // Plain HTTP to a TLS port: the server's TLS alert is not an HTTP response.
    let out = whyslow(&[
        "probe",
        "-n",
        "1",
        "--timeout",
        "2s",
        &format!("http://127.0.0.1:{}/", a.port()),
    ]);
    assert!(!out.status.success());
}

#[test]
fn h2c_with_prior_knowledge_multiplexes_on_one_connection() {
    let a = rt().block_on(async {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let a = l.local_addr().unwrap();
        tokio::spawn(whyslow_lab::tls_h2::serve_h2c(l, AppConfig::default()));
        a
    });
    let report = probe_json(&[
        "probe",
        "--json",
        "--http2",
        "-n",
        "4",
        "-d",
        "a=1",
        &format!("http://{a}/"),
    ]);
    let reqs = requests(&report);
    assert_eq!(reqs.len(), 4);
    assert!(reqs
        .iter()
        .all(|r| r["http_version"] == "2" && r["status"] == 200));
    assert_eq!(reqs.iter().filter(|r| r["reused"] == false).count(), 1);
    let body = AppConfig::default().body.len() as u64;
    assert!(reqs.iter().all(|r| us(r, "response_body_bytes") == body));
    // The phases add up over HTTP/2 too (the preface counts as send).
    for r in &reqs {
        let (sum, total) = (phase_sum(r), us(r, "total_us"));
        assert!(
            sum <= total && total - sum <= SUM_TOLERANCE_US,
            "sum {sum} total {total}: {r}"
        );
    }
}
