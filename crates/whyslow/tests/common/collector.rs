//! A real OpenTelemetry Collector: built with the Collector builder from
//! the Go module proxy (OTLP receiver, file exporter; core and contrib
//! pinned), once per machine into a cache outside the checkout, so a fresh
//! clone finds it (or rebuilds in seconds from Go's caches).

use super::*;
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;

/// The core and contrib version built: one the module proxy serves.
pub const VERSION: &str = "v0.161.0";

fn cache_dir() -> PathBuf {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(|| PathBuf::from("/var/tmp"));
    base.join(format!("whyslow/otelcol-{VERSION}"))
}

fn build() -> Result<PathBuf, String> {
    let dir = cache_dir();
    let binary = dir.join("dist/otelcol-whyslow");
    if binary.exists() {
        return Ok(binary);
    }
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let run = |c: &mut Command| -> Result<(), String> {
        let out = c.output().map_err(|e| e.to_string())?;
        match out.status.success() {
            true => Ok(()),
            false => Err(format!("{c:?}: {}", String::from_utf8_lossy(&out.stderr))),
        }
    };
    run(Command::new("go")
        .args([
            "install",
            &format!("go.opentelemetry.io/collector/cmd/builder@{VERSION}"),
        ])
        .env("GOBIN", dir.join("bin")))?;
    let config = format!(
        "dist:\n  name: otelcol-whyslow\n  output_path: {}\nreceivers:\n  - gomod: go.opentelemetry.io/collector/receiver/otlpreceiver {VERSION}\nexporters:\n  - gomod: github.com/open-telemetry/opentelemetry-collector-contrib/exporter/fileexporter {VERSION}\n",
        dir.join("dist").display()
    );
    let config_path = dir.join("builder.yaml");
    std::fs::write(&config_path, config).map_err(|e| e.to_string())?;
    run(Command::new(dir.join("bin/builder"))
        .arg("--config")
        .arg(&config_path))?;
    Ok(binary)
}

/// The Collector binary, built on first use; None (a skip, or in CI a
/// failure) without Go.
pub fn collector_binary(test: &str) -> Option<PathBuf> {
    if !needed(test, "go (to build the Collector)", have("go")) {
        return None;
    }
    static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    match BUILT.get_or_init(build) {
        Ok(p) => Some(p.clone()),
        Err(e) => panic!("{test}: building the Collector: {e}"),
    }
}

/// A running Collector: OTLP/HTTP in on loopback, each signal to its own
/// JSON-lines file.
pub struct Collector {
    child: Child,
    pub files: [PathBuf; 3],
}

impl Collector {
    /// OTLP/HTTP on `port`, plain.
    pub fn start(binary: &Path, port: u16, dir: &Path, tag: &str) -> Collector {
        let http = format!("      http:\n        endpoint: 127.0.0.1:{port}\n");
        Collector::with_receiver(binary, &http, port, dir, tag)
    }

    /// OTLP/gRPC on `port`, over TLS with `tls`'s certificate.
    pub fn start_grpc_tls(binary: &Path, port: u16, tls: &Tls, dir: &Path, tag: &str) -> Collector {
        let grpc = format!(
            "      grpc:\n        endpoint: 127.0.0.1:{port}\n        tls:\n          cert_file: {}\n          key_file: {}\n",
            tls.cert.display(),
            tls.key.display()
        );
        Collector::with_receiver(binary, &grpc, port, dir, tag)
    }

    fn with_receiver(binary: &Path, protocol: &str, port: u16, dir: &Path, tag: &str) -> Collector {
        let files = ["traces", "logs", "metrics"].map(|s| dir.join(format!("{s}-{tag}.jsonl")));
        let config = format!(
            "receivers:\n  otlp:\n    protocols:\n{protocol}\
             exporters:\n  file/traces:\n    path: {}\n  file/logs:\n    path: {}\n  file/metrics:\n    path: {}\n\
             service:\n  telemetry:\n    metrics:\n      level: none\n  pipelines:\n\
             \x20   traces:\n      receivers: [otlp]\n      exporters: [file/traces]\n\
             \x20   logs:\n      receivers: [otlp]\n      exporters: [file/logs]\n\
             \x20   metrics:\n      receivers: [otlp]\n      exporters: [file/metrics]\n",
            files[0].display(),
            files[1].display(),
            files[2].display()
        );
        let config_path = dir.join(format!("collector-{tag}.yaml"));
        std::fs::write(&config_path, config).unwrap();
        let child = Command::new(binary)
            .arg(format!("--config={}", config_path.display()))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        wait_listening(port);
        Collector { child, files }
    }

    /// Stops it as a service manager does (SIGTERM: it flushes its files).
    pub fn stop(mut self) {
        // SAFETY: kill(2) on this test's own child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        self.child.wait().unwrap();
    }
}

fn lines(file: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(file)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn count_at(doc: &serde_json::Value, path: &[&str]) -> u64 {
    match path.split_first() {
        None => 1,
        Some((key, rest)) => doc[*key]
            .as_array()
            .map_or(0, |items| items.iter().map(|i| count_at(i, rest)).sum()),
    }
}

/// A certificate authority and a server certificate for 127.0.0.1 and
/// localhost, made with the openssl command (PEM files in a directory).
pub struct Tls {
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl Tls {
    pub fn make(dir: &Path) -> Tls {
        let f = |name: &str| dir.join(name);
        let openssl = |args: &[&str]| {
            let out = Command::new("openssl").args(args).output().unwrap();
            assert!(out.status.success(), "openssl {args:?}: {}", stderr(&out));
        };
        let s = |p: PathBuf| p.to_str().unwrap().to_string();
        let ec = [
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
        ];
        let (ca_key, ca) = (s(f("ca.key")), s(f("ca.pem")));
        let (key, csr, cert) = (s(f("server.key")), s(f("server.csr")), s(f("server.pem")));
        let ext = f("san.ext");
        std::fs::write(&ext, "subjectAltName=IP:127.0.0.1,DNS:localhost\n").unwrap();
        openssl(
            &[
                &["req", "-x509"][..],
                &ec,
                &[
                    "-keyout",
                    &ca_key,
                    "-out",
                    &ca,
                    "-subj",
                    "/CN=whyslow test CA",
                    "-days",
                    "1",
                ],
            ]
            .concat(),
        );
        openssl(
            &[
                &["req"][..],
                &ec,
                &["-keyout", &key, "-out", &csr, "-subj", "/CN=localhost"],
            ]
            .concat(),
        );
        openssl(&[
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            &ca,
            "-CAkey",
            &ca_key,
            "-CAcreateserial",
            "-out",
            &cert,
            "-days",
            "1",
            "-extfile",
            &s(ext),
        ]);
        Tls {
            ca: f("ca.pem"),
            cert: f("server.pem"),
            key: f("server.key"),
        }
    }
}

/// Spans, log records and metric data points in the files the Collector wrote.
pub fn received(files: &[PathBuf; 3]) -> (u64, u64, u64) {
    let sum =
        |file: &Path, path: &[&str]| -> u64 { lines(file).iter().map(|d| count_at(d, path)).sum() };
    let spans = sum(&files[0], &["resourceSpans", "scopeSpans", "spans"]);
    let logs = sum(&files[1], &["resourceLogs", "scopeLogs", "logRecords"]);
    let points: u64 = lines(&files[2])
        .iter()
        .flat_map(|d| {
            d["resourceMetrics"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .into_iter()
                .flat_map(|r| {
                    r["scopeMetrics"]
                        .as_array()
                        .cloned()
                        .unwrap_or_default()
                        .into_iter()
                        .flat_map(|s| s["metrics"].as_array().cloned().unwrap_or_default())
                })
        })
        .map(|m| {
            let points = |kind: &str| {
                m[kind]["dataPoints"]
                    .as_array()
                    .map_or(0, |p| p.len() as u64)
            };
            points("gauge") + points("sum")
        })
        .sum();
    (spans, logs, points)
}
