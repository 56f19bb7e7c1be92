//! gRPC on real peers: grpcio's server and client (Python, from PyPI), h2c
//! on loopback (apps/grpc/shop.py). Every call is counted as tshark's gRPC
//! dissector counts its messages, with the same methods and statuses; calls
//! of one method with different messages are told apart, the same message
//! asked again is a repeat. Every method is shown whole, in JSON and text
//! (a server-streaming one with a long PascalCase name among them).

mod common;
use common::real::*;
use common::*;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

const SHOP: &str = "grpc/shop.py";

/// tshark's `field` of the frames `filter` picks, every occurrence.
fn tshark_all(file: &Path, port: u16, filter: &str, field: &str) -> Vec<String> {
    tshark_fields(file, &format!("tcp.port=={port},http2"), filter, field)
        .iter()
        .flat_map(|line| line.split('|').map(str::to_string).collect::<Vec<_>>())
        .filter(|v| !v.is_empty())
        .collect()
}

/// How many of each value.
fn tally<I: IntoIterator<Item = String>>(values: I) -> BTreeMap<String, usize> {
    let mut t = BTreeMap::new();
    for v in values {
        *t.entry(v).or_default() += 1;
    }
    t
}

/// The grpc-status values tshark reads in the server's header blocks.
fn tshark_statuses(file: &Path, port: u16) -> Vec<String> {
    tshark_grpc_statuses(file, None, &format!("tcp.port=={port},http2"), port)
}

#[test]
fn grpc_calls_are_counted_as_tshark_counts_them() {
    let _one = serial();
    let test = "grpc_calls";
    let needs = [Need::Tool("tcpdump"), Need::Tool("tshark"), Need::Capture];
    if !requirements_met(test, &needs) || !pypi_python_has(test, "grpc") {
        return;
    }
    let dir = tmpdir(test);
    let port = free_port();
    let _server = spawn(
        &mut python_command_of(
            &pypi_python(),
            SHOP,
            &["server".into(), port.to_string(), "0".into()],
        ),
        port,
    );
    let file = dir.join("calls.pcap");
    let mut sent = Vec::new();
    let dropped = tcpdump_while(&file, &[port], || {
        let out = pypi_python_run(SHOP, &["calls".into(), port.to_string()]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        sent = serde_json::from_slice::<Vec<Value>>(&out.stdout).unwrap();
    });
    assert_eq!(dropped, 0, "tcpdump dropped packets");

    let run = whyslow(&["analyze", "--json", "--timeline", file.to_str().unwrap()]);
    assert!(run.status.success(), "{}", stderr(&run));
    let report = json(&run);
    let calls = exchanges_to(&report, port);

    // Methods: as the client sent them, and as tshark reads the :path.
    let paths = tshark_all(
        &file,
        port,
        &format!("tcp.dstport=={port} && http2.headers.path"),
        "http2.headers.path",
    );
    let methods = tally(calls.iter().map(|e| {
        let r = e["request"].as_str().unwrap();
        r.strip_prefix("POST ").unwrap_or(r).to_string()
    }));
    assert_eq!(methods, tally(paths.clone()));
    // And whole in the text: a method is a name, never a template.
    let text = whyslow(&["analyze", file.to_str().unwrap()]);
    let shown = stdout(&text);
    for path in &paths {
        assert!(shown.contains(&format!("POST {path}")), "{path}: {shown}");
    }
    assert_eq!(
        methods,
        tally(
            sent.iter()
                .map(|s| s["method"].as_str().unwrap().to_string())
        )
    );

    // Statuses from the trailers: as tshark reads them, as the client got them.
    let statuses = tally(calls.iter().map(|e| e["status"]["grpc"].to_string()));
    assert_eq!(statuses, tally(tshark_statuses(&file, port)));
    assert_eq!(
        statuses,
        tally(sent.iter().map(|s| s["status"].to_string()))
    );

    // Messages: one request message per call, a response message per answer.
    let message = |dir: &str| {
        tshark_all(
            &file,
            port,
            &format!("tcp.{dir}port=={port} && grpc"),
            "grpc.message_length",
        )
        .len()
    };
    assert_eq!(calls.len(), message("dst"));
    let rows: u64 = calls.iter().map(|e| e["rows"].as_u64().unwrap()).sum();
    assert_eq!(rows as usize, message("src"));

    // Ten different items and one asked four times: three repeats of one
    // message; the missing ones differ. Digests say so, values never show.
    let digests = tally(
        calls
            .iter()
            .filter(|e| e["request"] == "POST /shop.Items/Get")
            .map(|e| e["params_digest"].as_str().unwrap().to_string()),
    );
    assert_eq!(digests.len(), 10, "{digests:?}");
    assert_eq!(digests.values().max(), Some(&4));
    assert!(!run.stdout.windows(6).any(|w| w == b"item-3"));
}

/// Calls each page makes on the front's one gRPC channel.
const FANOUT: u64 = 11;

/// grpcio's server and the front (`shop.py front`: `fanout` calls a page,
/// through a pool of `at_once` workers, 0 for all at once), loaded after
/// the channel opened; `clients` at once, captured in `dir`. The capture and
/// its analysis.
fn front_captured(dir: &Path, fanout: u64, at_once: u64, clients: u64) -> (PathBuf, Value) {
    let grpc = free_port();
    let args = |what: &str, a: &[u64]| {
        let mut v = vec![what.to_string()];
        v.extend(a.iter().map(u64::to_string));
        v
    };
    let server = args("server", &[grpc.into(), 0]);
    let _server = spawn(&mut python_command_of(&pypi_python(), SHOP, &server), grpc);
    // Picked once the server holds its port, or both may get the same one.
    let front = free_port();
    let app = args("front", &[front.into(), grpc.into(), fanout, at_once]);
    let _front = spawn(&mut python_command_of(&pypi_python(), SHOP, &app), front);
    let url = format!("http://127.0.0.1:{front}/page");
    load_paced(&url, 4, 1, 20);
    let file = dir.join(format!("front-{fanout}-{at_once}-{clients}.pcap"));
    // Paced below what the slowest variant serves at 8 clients (~14 pages a second).
    let pages = 12 * clients;
    let dropped = tcpdump_while(&file, &[front, grpc], || {
        load_paced(&url, pages, clients, 10)
    });
    assert_eq!(dropped, 0, "tcpdump dropped packets");
    let run = whyslow(&["analyze", "--json", file.to_str().unwrap()]);
    assert!(run.status.success(), "{}", stderr(&run));
    (file, json(&run))
}

/// Case 002 over gRPC: a front whose pages make 11 calls on one HTTP/2
/// connection through a pool of 2 workers (broken) or all at once (fixed);
/// captured after the channel opened, one page at a time and at 8 clients.
#[test]
fn a_stream_limit_is_named_with_its_limit() {
    let _one = serial();
    let test = "grpc_stream_limit";
    let needs = [Need::Tool("tcpdump"), Need::Tool("tshark"), Need::Capture];
    if !requirements_met(test, &needs) || !pypi_python_has(test, "grpc") {
        return;
    }
    let dir = tmpdir(test);
    for (limit, clients) in [(2u64, 1u64), (2, 8), (0, 1), (0, 8)] {
        let (_, report) = front_captured(&dir, FANOUT, limit, clients);
        let named = causes(&report);
        let case = format!("limit {limit}, {clients} client(s): {named:?}");
        assert!(!named.contains(&"duplicate_calls".to_string()), "{case}");
        assert!(!named.contains(&"pool_queueing".to_string()), "{case}");
        if limit == 2 {
            assert_eq!(
                named.first().map(String::as_str),
                Some("stream_queueing"),
                "{case}"
            );
            let f = finding(&report, "stream_queueing").unwrap();
            assert_eq!(f["facts"]["streams"], 2.0, "{case}");
            assert_eq!(f["facts"]["connections"], 1.0, "{case}");
        } else {
            assert!(!named.contains(&"stream_queueing".to_string()), "{case}");
        }
    }
}

/// Case 003 over gRPC: the front's 11 calls one after another (a pool of
/// one worker: an N+1 of Get), or one call a page (fixed), one page at a
/// time. Captured after the channel opened, the method reads `POST ?` and
/// its messages are unseen: the N+1 is named with its count, not told from
/// repeats. (At 8 clients the one worker serves every page in turn: the
/// calls of pages in flight interleave on one connection and, without trace
/// context, are not told apart.)
#[test]
fn an_n_plus_one_over_grpc_is_named_with_its_count() {
    let _one = serial();
    let test = "grpc_n_plus_one";
    let needs = [Need::Tool("tcpdump"), Need::Tool("tshark"), Need::Capture];
    if !requirements_met(test, &needs) || !pypi_python_has(test, "grpc") {
        return;
    }
    let dir = tmpdir(test);
    for (fanout, clients) in [(FANOUT, 1u64), (1, 1)] {
        let (file, report) = front_captured(&dir, fanout, 1, clients);
        let named = causes(&report);
        let case = format!("{fanout} call(s) a page, {clients} client(s): {named:?}");
        assert!(!named.contains(&"stream_queueing".to_string()), "{case}");
        assert!(!named.contains(&"duplicate_calls".to_string()), "{case}");
        if fanout == FANOUT {
            assert_eq!(
                top_cause(&report, &file),
                ("n_plus_one".to_string(), Some(FANOUT)),
                "{case}"
            );
        } else {
            assert!(!named.contains(&"n_plus_one".to_string()), "{case}");
        }
    }
}
