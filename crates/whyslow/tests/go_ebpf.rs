//! A Go service under `capture --ebpf`, as production runs one: net/http,
//! a pgx pool opened at start-up over TLS (sslmode=require, no key log
//! anywhere), statements prepared long before the capture. Go's TLS is Go
//! code, not libssl: the plaintext comes from uprobes on crypto/tls in the
//! binary. The runtime moves goroutines between threads, so calls are told
//! by goroutine, and a goroutine started while its starter served a
//! request (errgroup's) is that request's.
//!
//! The app records what it served (apps/go/gopage: client port, each
//! statement with its connection's local port); at 16 clients in a closed
//! loop every call is held to that record: 0 given to a wrong request, and
//! every call given by goroutine, the errgroup fan-out's too. broken (an
//! N+1, one statement after another) names n_plus_one with the record's
//! count per page, and fixed (one `= ANY($1)` query) nothing, under
//! `capture --ebpf` and under `diagnose --ebpf`.

mod common;
use common::polyglot::*;
use common::real::*;
use common::truth::{attribution_levels, held_to_truth_by_thread, read_app_truth};
use common::*;
use std::collections::BTreeSet;
use std::path::Path;

/// Orders per page: the items statement runs this many times per broken page.
const ORDERS: u64 = 6;
const CLIENTS: u64 = 16;
/// The pool: as large as the clients, so that what is named is the N+1,
/// not a queue for connections (the fan-out queues on it, as it would).
const POOL: u64 = 16;
/// Pages before the capture (every statement prepared on every connection)
/// at WARM_RATE a second, then pages in the capture, as fast as they go.
const WARM_PAGES: u64 = 160;
const WARM_RATE: u64 = 160;
const PAGES: &str = "800";

fn needs() -> [Need<'static>; 5] {
    [
        Need::Tool("go"),
        Need::Tool("tshark"),
        Need::Postgres,
        Need::Capture,
        Need::Ebpf,
    ]
}

/// The page's own work under `diagnose` (ms): diagnose_checkouts paces
/// requests 8.3 ms apart (120/s), and a page answered sooner never overlaps
/// the next; longer, they overlap on any host.
const DIAGNOSE_RENDER_MS: u64 = 10;

/// Starts the app's `variant` on `pg` (rendering for `render_ms`), warmed
/// up, recording into `truth` from now on; returns it with its page's URL.
fn started(variant: &str, render_ms: u64, pg: u16, truth: &Path) -> (Server, String) {
    let port = free_port();
    let mut args: Vec<String> = [port, pg, ORDERS as u16, POOL as u16]
        .map(|n| n.to_string())
        .to_vec();
    args.extend([variant.to_string(), render_ms.to_string()]);
    let server = go_app_recording("gopage", port, &args, truth);
    let url = format!("http://127.0.0.1:{port}/orders");
    load_paced(&url, WARM_PAGES, CLIENTS, WARM_RATE);
    // Only the captured pages count.
    let _ = std::fs::remove_file(truth);
    (server, url)
}

/// The items statements of a broken page by the app's own record: its
/// calls less the orders query (the same count on every page).
fn items_statements(truth: &Path) -> u64 {
    let counts: BTreeSet<usize> = read_app_truth(truth)
        .iter()
        .map(|r| r.calls.len() - 1)
        .collect();
    assert_eq!(counts.len(), 1, "{counts:?}");
    *counts.first().unwrap() as u64
}

#[test]
fn pgx_over_tls_at_16_clients_given_by_goroutine() {
    let _one = serial();
    let test = "go_pgx_tls_ebpf";
    if !requirements_met(test, &needs()) {
        return;
    }
    let (pg, _data) = postgres_with(true);
    let dir = tmpdir(test);
    for variant in ["broken", "fanout", "fixed"] {
        let run = format!("{test} {variant}");
        let truth = dir.join(format!("{variant}.jsonl"));
        let (server, url) = started(variant, 0, pg.port, &truth);
        let port = url.split(':').nth(2).unwrap().split('/').next().unwrap();
        let cap = dir.join(format!("{variant}.pcapng"));
        let load = [
            "-c",
            &CLIENTS.to_string(),
            "-n",
            PAGES,
            "--trace-context",
            "off",
            &url,
        ];
        let ports = [port.parse().unwrap(), pg.port];
        let out = ebpf_captured_under_load(server.pid(), &ports, &cap, &load);
        assert!(out.status.success(), "{run}: {}", stderr(&out));
        assert!(stderr(&out).contains(" 0 lost"), "{run}: {}", stderr(&out));
        assert!(
            stderr(&out).contains("(Go: crypto/tls, goroutines, entry probes on PUSH RBP)"),
            "{run}: {}",
            stderr(&out)
        );
        drop(server);
        let report = analyzed_timeline(&cap, port);
        let threads = &report["capture"]["threads"];
        assert!(
            threads["plaintext_calls"].as_u64() > Some(0),
            "{run}: {threads}"
        );
        assert!(threads["goroutines"].as_u64() > Some(0), "{run}: {threads}");
        held_to_truth_by_thread(&run, &report, &truth);
        let levels = attribution_levels(&report);
        let by_goroutine = levels.iter().filter(|l| *l == "thread").count();
        assert_eq!(by_goroutine, levels.len(), "{run}: {levels:?}");
        let kinds = causes_less_real_tcp(&report, &cap);
        match variant {
            "broken" => {
                let per_page = items_statements(&truth);
                assert_eq!(per_page, ORDERS, "{run}: the app's record");
                let (cause, per_request) = top_cause(&report, &cap);
                assert_eq!(
                    (cause.as_str(), per_request),
                    ("n_plus_one", Some(per_page)),
                    "{run}: {kinds:?}"
                );
            }
            "fixed" => assert!(kinds.is_empty(), "{run}: {kinds:?}"),
            // The fan-out: attribution only; its queue for connections is real.
            _ => {}
        }
    }
}

/// The app under `diagnose --ebpf` (its probes, then a paced load phase at
/// 16 clients), held to its record: broken names n_plus_one first with the
/// record's count, fixed names nothing.
#[test]
fn pgx_over_tls_diagnosed_with_ebpf() {
    let _one = serial();
    let test = "go_pgx_tls_diagnose";
    if !requirements_met(test, &needs()) {
        return;
    }
    let (pg, _data) = postgres_with(true);
    for variant in ["broken", "fixed"] {
        let run = format!("{test} {variant}");
        let truth = tmpdir(test).join(format!("{variant}.jsonl"));
        let cap = tmpdir(test).join(format!("{variant}.pcapng"));
        let (server, url) = started(variant, DIAGNOSE_RENDER_MS, pg.port, &truth);
        let report = diagnose_checkouts_saved(&url, Some(&cap));
        drop(server);
        held_to_truth_by_thread(&run, &report, &truth);
        // A retransmission named is held to the capture (loopback drops
        // now and then on a busy host).
        let kinds = causes_less_real_tcp(&report, &cap);
        if variant == "fixed" {
            assert!(kinds.is_empty(), "{run}: {kinds:?}");
            continue;
        }
        assert_eq!(
            kinds.first().map(String::as_str),
            Some("n_plus_one"),
            "{run}: {kinds:?}"
        );
        let f = finding(&report, "n_plus_one").unwrap();
        let s = f["summary"].as_str().unwrap();
        assert!(s.contains(&format!("ran {ORDERS} times")), "{run}: {s}");
    }
}
