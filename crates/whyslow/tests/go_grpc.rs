//! gRPC between Go peers (google.golang.org/grpc, apps/go/grpcpage): a
//! front whose page makes 11 calls at once (errgroup) over one connection
//! to a server that allows 2 streams (broken) or grpc's default (fixed);
//! over h2c, and over Go's own TLS read by eBPF with no keys (the front
//! writes a key log for tshark alone). Every call is counted as tshark
//! counts it — its `:path`, its `grpc-status` — and the 2-stream server is
//! named `stream_queueing` first with its limit, one page at a time and at
//! 8 clients; the fixed one nothing of the kind.

mod common;
use common::polyglot::*;
use common::real::*;
use common::*;
use std::path::Path;

/// Calls a page makes; the server's per-call latency (ms).
const CALLS: u64 = 11;
const LATENCY_MS: u64 = 5;
const PAGES_PER_CLIENT: u64 = 12;

/// tshark's `field`, every occurrence, of the frames `filter` picks on the
/// connections to `port` (decrypted with `keys` when given).
fn tshark_all(
    file: &Path,
    keys: Option<&Path>,
    port: u16,
    filter: &str,
    field: &str,
) -> Vec<String> {
    let proto = if keys.is_some() { "tls" } else { "http2" };
    let decode = format!("tcp.port=={port},{proto}");
    tshark_fields_decrypted(file, keys, &decode, filter, field)
        .iter()
        .flat_map(|line| line.split('|').map(str::to_string).collect::<Vec<_>>())
        .filter(|v| !v.is_empty())
        .collect()
}

/// One case: the two Go peers started, a load of `clients` captured (by
/// eBPF on the front when `tls`), held to tshark and to what it names.
fn case(dir: &Path, tls: bool, streams: u64, clients: u64) {
    let case = format!("tls {tls}, {streams} streams, {clients} client(s)");
    let tail: Vec<String> = if tls { vec!["tls".into()] } else { Vec::new() };
    let grpc = free_port();
    let mut args: Vec<String> =
        ["server".to_string(), grpc.to_string(), streams.to_string()].to_vec();
    args.push(LATENCY_MS.to_string());
    args.extend(tail.clone());
    let _server = go_app("grpcpage", grpc, &args);
    let front = free_port();
    let mut args: Vec<String> = ["front".to_string(), front.to_string(), grpc.to_string()].to_vec();
    args.push(CALLS.to_string());
    args.extend(tail);
    let keys = dir.join(format!("keys-{streams}-{clients}.log"));
    let front_app = spawn(
        std::process::Command::new(go_binary("grpcpage"))
            .args(&args)
            .env("SSLKEYLOGFILE", &keys),
        front,
    );
    let file = dir.join(format!("{tls}-{streams}-{clients}.pcapng"));
    let url = format!("http://127.0.0.1:{front}/page");
    let (c, n) = (
        clients.to_string(),
        (PAGES_PER_CLIENT * clients).to_string(),
    );
    let load = ["-c", &c, "-n", &n, "--trace-context", "off", &url];
    let out = if tls {
        ebpf_captured_under_load(front_app.pid(), &[front, grpc], &file, &load)
    } else {
        let mut a = vec!["capture", "-i", "lo"];
        let (f, g) = (front.to_string(), grpc.to_string());
        a.extend(["-p", &f, "-p", &g, "-w", file.to_str().unwrap(), "--"]);
        a.extend([env!("CARGO_BIN_EXE_whyslow"), "load"]);
        a.extend(load);
        whyslow(&a)
    };
    assert!(out.status.success(), "{case}: {}", stderr(&out));
    drop(front_app);
    if tls {
        assert!(
            stderr(&out).contains("(Go: crypto/tls, goroutines, entry probes on PUSH RBP)"),
            "{case}: {}",
            stderr(&out)
        );
    }
    let report = analyzed_timeline(&file, &front.to_string());
    let keys = tls.then_some(keys.as_path());
    let paths = tshark_all(
        &file,
        keys,
        grpc,
        &format!("tcp.dstport=={grpc} && http2.headers.path"),
        "http2.headers.path",
    );
    let decode = format!("tcp.port=={grpc},{}", if tls { "tls" } else { "http2" });
    let statuses = tshark_grpc_statuses(&file, keys, &decode, grpc);

    let calls = exchanges_to(&report, grpc);
    assert_eq!(
        calls.len() as u64,
        CALLS * PAGES_PER_CLIENT * clients,
        "{case}"
    );
    assert_eq!(calls.len(), paths.len(), "{case}: tshark's :path");
    assert!(
        paths.iter().all(|p| p == "/shop.Items/Get"),
        "{case}: {paths:?}"
    );
    assert!(
        calls.iter().all(|e| e["request"] == "POST /shop.Items/Get"),
        "{case}"
    );
    assert_eq!(statuses.len(), calls.len(), "{case}: tshark's grpc-status");
    assert!(statuses.iter().all(|v| v == "0"), "{case}: {statuses:?}");
    assert!(calls.iter().all(|e| e["status"]["grpc"] == 0), "{case}");

    let named = causes_less_real_tcp(&report, &file);
    assert!(
        !named.contains(&"duplicate_calls".to_string()),
        "{case}: {named:?}"
    );
    let limit = (streams > 0).then_some(streams);
    stream_limit_held(&case, &report, &named, limit);
}

#[test]
fn go_grpc_over_h2c_and_go_tls_counted_as_tshark_counts_it() {
    let _one = serial();
    let test = "go_grpc";
    let needs = [
        Need::Tool("go"),
        Need::Tool("tshark"),
        Need::Capture,
        Need::Ebpf,
    ];
    if !requirements_met(test, &needs) {
        return;
    }
    let dir = tmpdir(test);
    for (tls, streams, clients) in [
        (false, 2, 1),
        (false, 2, 8),
        (false, 0, 8),
        (true, 2, 8),
        (true, 0, 8),
    ] {
        case(&dir, tls, streams, clients);
    }
}
