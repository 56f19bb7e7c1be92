//! gRPC inside TLS, read through a key log: the lab's `grpc-streams` over
//! TLS (rustls, ALPN h2 to the price service; every endpoint writes its
//! secrets to one key log), captured one page at a time and at 8 clients.
//! Every call is counted as tshark counts it with the same key log — its
//! `:path`, its `grpc-status` trailer, its request and answer messages —
//! and the server that allows 2 streams is named `stream_queueing` first
//! with that limit, the fixed one nothing of the kind.

mod common;
use common::real::*;
use common::*;
use std::path::Path;

/// Pages per client in each capture.
const PAGES_PER_CLIENT: u32 = 12;

/// tshark's `field`, every occurrence, of the frames `filter` picks on the
/// TLS connections to `port`, decrypted with `keys`.
fn tshark_tls(file: &Path, keys: &Path, port: u16, filter: &str, field: &str) -> Vec<String> {
    let decode = format!("tcp.port=={port},tls");
    tshark_fields_decrypted(file, Some(keys), &decode, filter, field)
        .iter()
        .flat_map(|line| line.split('|').map(str::to_string).collect::<Vec<_>>())
        .filter(|v| !v.is_empty())
        .collect()
}

#[test]
fn grpc_inside_tls_is_counted_as_tshark_counts_it() {
    let _one = serial();
    let test = "grpc_tls";
    if !requirements_met(test, &[Need::Tool("tshark"), Need::Capture]) {
        return;
    }
    let s = whyslow_lab::find("grpc-streams").unwrap();
    let per_page = s.truth.fact("calls").unwrap();
    let streams = s.truth.fact("streams").unwrap();
    let dir = tmpdir(test);
    for fixed in [false, true] {
        for clients in [1u32, 8] {
            let case = format!("fixed {fixed}, {clients} client(s)");
            let running = rt().block_on(s.start_tls(fixed)).unwrap();
            let (front, prices) = (running.ports[0], running.ports[1]);
            let keys = running.keylog.clone().unwrap();
            let file = dir.join(format!("{fixed}-{clients}.pcapng"));
            let pages = PAGES_PER_CLIENT * clients;
            let (front_s, prices_s) = (front.to_string(), prices.to_string());
            let (c, n) = (clients.to_string(), pages.to_string());
            let out = whyslow(&[
                "capture",
                "-i",
                "lo",
                "-p",
                &front_s,
                "-p",
                &prices_s,
                "-w",
                file.to_str().unwrap(),
                "--",
                env!("CARGO_BIN_EXE_whyslow"),
                "load",
                "-k",
                "-c",
                &c,
                "-n",
                &n,
                &running.url,
            ]);
            assert!(out.status.success(), "{case}: {}", stderr(&out));
            let keys_s = keys.display().to_string();
            let report = analyzed_timeline_with(&file, &front_s, &["--keylog", &keys_s]);
            let tshark =
                |filter: &str, field: &str| tshark_tls(&file, &keys, prices, filter, field);
            let paths = tshark(
                &format!("tcp.dstport=={prices} && http2.headers.path"),
                "http2.headers.path",
            );
            let decode = format!("tcp.port=={prices},tls");
            let statuses = tshark_grpc_statuses(&file, Some(&keys), &decode, prices);
            let sent = tshark(
                &format!("tcp.dstport=={prices} && grpc"),
                "grpc.message_length",
            );
            let answered = tshark(
                &format!("tcp.srcport=={prices} && grpc"),
                "grpc.message_length",
            );
            drop(running);

            let calls = exchanges_to(&report, prices);
            assert_eq!(calls.len() as u64, per_page * u64::from(pages), "{case}");
            assert_eq!(calls.len(), paths.len(), "{case}: tshark's :path");
            assert!(paths.iter().all(|p| p == "/lab.Prices/Quote"), "{case}");
            assert!(
                calls
                    .iter()
                    .all(|e| e["request"] == "POST /lab.Prices/Quote"),
                "{case}"
            );
            assert_eq!(statuses.len(), calls.len(), "{case}: tshark's grpc-status");
            assert!(statuses.iter().all(|v| v == "0"), "{case}: {statuses:?}");
            assert!(calls.iter().all(|e| e["status"]["grpc"] == 0), "{case}");
            assert_eq!(calls.len(), sent.len(), "{case}: request messages");
            let rows: u64 = calls.iter().map(|e| e["rows"].as_u64().unwrap()).sum();
            assert_eq!(rows as usize, answered.len(), "{case}: answer messages");

            let named = causes_less_real_tcp(&report, &file);
            let limit = (!fixed).then_some(streams);
            stream_limit_held(&case, &report, &named, limit);
        }
    }
}
