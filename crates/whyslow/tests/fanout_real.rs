//! Case 002 on a real client library: a Python front whose page makes 11
//! concurrent calls through requests/urllib3 with `pool_maxsize` connections
//! per host (`pool_block=True`). whyslow must name pool_queueing with the
//! pool size the library was given, from `diagnose URL` and from `analyze`
//! on a tcpdump capture with no flags; with a pool as large as the fan-out
//! it must not.

mod common;
use common::real::*;
use common::*;
use serde_json::Value;

/// The case's numbers: 11 calls, 5 connections per host.
const CALLS: u64 = 11;
const SMALL_POOL: u64 = 5;
/// Each call's latency at the backing API.
const DELAY_MS: u64 = 30;
/// Page requests in the tcpdump capture.
const PAGES: usize = 5;

// One front at a time (`serial()`): each listens on lo and times its calls.

const NEEDS: &[Need] = &[
    Need::Tool("tcpdump"),
    Need::Tool("curl"),
    Need::Tool("tshark"),
    Need::Python("requests"),
    Need::Capture,
];

/// The backing API and a front with a pool of `pool` connections.
fn start(pool: u64) -> (Server, Server) {
    let api_port = free_port();
    let api = python_app(
        "fanout_app.py",
        api_port,
        &["api".into(), api_port.to_string(), DELAY_MS.to_string()],
    );
    let port = free_port();
    let args = [
        "front",
        &port.to_string(),
        &api_port.to_string(),
        &CALLS.to_string(),
        &pool.to_string(),
    ];
    let front = python_app("fanout_app.py", port, &args.map(String::from));
    (api, front)
}

/// The pool_queueing finding's evidence, checked against the library's pool.
fn pool_queueing(report: &Value) -> Option<&Value> {
    finding(report, "pool_queueing")
}

fn assert_pool_seen(report: &Value, api: u16) {
    let kinds = finding_kinds(report);
    assert_eq!(
        kinds.first().map(String::as_str),
        Some("pool_queueing"),
        "{kinds:?}"
    );
    let f = pool_queueing(report).unwrap();
    let evidence = f["evidence"].as_array().unwrap();
    assert!(!evidence.is_empty());
    for e in evidence {
        assert_eq!(e["type"], "calls");
        assert!(e["server"].as_str().unwrap().ends_with(&format!(":{api}")));
        // A page's calls as the wire shows them (the diagnose and demo tests hold the exact 11).
        let calls = e["calls"].as_u64().unwrap();
        assert!(calls > SMALL_POOL && calls <= CALLS, "{e}");
        assert_eq!(e["in_flight_max"], SMALL_POOL, "{e}");
        assert_eq!(
            e["lanes"].as_array().unwrap().len() as u64,
            SMALL_POOL,
            "{e}"
        );
    }
    // Rounds of DELAY_MS: ceil(11/5) = 3 where 1 would do.
    let lost = f["time_lost_per_occurrence_us"].as_u64().unwrap();
    let truth = (CALLS.div_ceil(SMALL_POOL) - 1) * DELAY_MS * 1000;
    assert!(
        lost as f64 >= 0.75 * truth as f64 && lost as f64 <= 1.5 * truth as f64,
        "{lost} vs {truth}"
    );
}

#[test]
fn diagnose_names_the_pool_size_the_library_was_given() {
    let _one = serial();
    if !requirements_met("diagnose_names_the_pool_size", NEEDS) {
        return;
    }
    for pool in [SMALL_POOL, CALLS] {
        let (api, front) = start(pool);
        let url = format!("http://127.0.0.1:{}/dashboard", front.port);
        let out = whyslow(&["diagnose", "--json", "-n", "6", &url]);
        assert!(out.status.success(), "{}", stderr(&out));
        let report = json(&out);
        assert!(not_examined(&report).is_empty(), "{}", report["skipped"]);
        if pool == SMALL_POOL {
            assert_pool_seen(&report, api.port);
        } else {
            assert!(
                pool_queueing(&report).is_none(),
                "pool {pool}: {:?}",
                finding_kinds(&report)
            );
        }
    }
}

#[test]
fn analyze_finds_it_in_a_tcpdump_capture_with_no_flags() {
    let _one = serial();
    if !requirements_met("analyze_tcpdump_pool", NEEDS) {
        return;
    }
    let dir = tmpdir("fanout");
    for pool in [SMALL_POOL, CALLS] {
        let (api, front) = start(pool);
        let file = dir.join(format!("pool{pool}.pcap"));
        let url = format!("http://127.0.0.1:{}/dashboard", front.port);
        let dropped = tcpdump_while(&file, &[front.port, api.port], || curl_each(&url, PAGES));
        assert_eq!(dropped, 0, "tcpdump dropped packets");
        let out = whyslow(&["analyze", "--json", file.to_str().unwrap()]);
        assert!(out.status.success(), "{}", stderr(&out));
        let report = json(&out);
        let breakdown = &report["time_breakdown"][0];
        assert_eq!(breakdown["requests"], PAGES, "{breakdown}");
        // Every call request tshark sees in the file is a call whyslow attributed.
        let api_port = api.port;
        let requests = tshark_fields(
            &file,
            &format!("tcp.port=={api_port},http"),
            &format!("http.request && tcp.dstport=={api_port}"),
            "frame.number",
        );
        let per_request = breakdown["backing"][0]["calls_per_request"]
            .as_f64()
            .unwrap();
        assert_eq!(
            (per_request * PAGES as f64).round() as usize,
            requests.len(),
            "{breakdown}"
        );
        assert!(
            requests.len() as u64 >= CALLS * PAGES as u64 / 2,
            "{breakdown}"
        );
        if pool == SMALL_POOL {
            assert_pool_seen(&report, api.port);
            assert_eq!(pool_queueing(&report).unwrap()["occurrences"], PAGES);
            assert!(breakdown["queued_us"].as_u64().unwrap() > 0);
        } else {
            assert!(
                pool_queueing(&report).is_none(),
                "pool {pool}: {:?}",
                finding_kinds(&report)
            );
            assert_eq!(breakdown["queued_us"], 0);
        }
    }
}

/// Clients of the shared-pool test, and the pages each capture holds.
const SHARED_CLIENTS: u64 = 4;
const SHARED_PAGES: &str = "24";
const SHARED_RUNS: usize = 5;

/// One pool of 5 shared by 4 pages in flight, packets alone: no page's
/// calls can be told from another's (every page calls the same URLs on
/// the same connections), so the pool is judged from its own timeline.
/// pool_queueing named first in each of 5 captures; a pool as large as
/// every page's calls at once names nothing.
#[test]
fn a_pool_shared_by_4_clients_is_named_every_run() {
    let _one = serial();
    if !requirements_met("shared_pool_4_clients", NEEDS) {
        return;
    }
    let dir = tmpdir("shared_pool");
    for (pool, runs) in [(SMALL_POOL, SHARED_RUNS), (CALLS * SHARED_CLIENTS, 1)] {
        let (api, front) = start(pool);
        let url = format!("http://127.0.0.1:{}/dashboard", front.port);
        curl_each(&url, 2);
        for n in 1..=runs {
            let run = format!("pool {pool} run {n}");
            let cap = dir.join(format!("pool{pool}-{n}.pcapng"));
            let clients = SHARED_CLIENTS.to_string();
            let load = untraced_closed_load(&clients, SHARED_PAGES, &url);
            let out = captured_under_load(&[front.port, api.port], &cap, &load);
            assert!(out.status.success(), "{run}: {}", stderr(&out));
            let report = analyzed_timeline(&cap, &front.port.to_string());
            let kinds = causes_less_real_tcp(&report, &cap);
            eprintln!("{run}: {kinds:?}");
            if pool == SMALL_POOL {
                assert_eq!(
                    kinds.first().map(String::as_str),
                    Some("pool_queueing"),
                    "{run}"
                );
                let f = pool_queueing(&report).unwrap();
                assert_eq!(f["facts"]["connections"], SMALL_POOL as f64, "{run}: {f}");
                // Never more than a page took beyond one call's latency (its
                // calls all at once).
                let page = report["time_breakdown"][0]["total_us"].as_u64().unwrap();
                let lost = f["time_lost_per_occurrence_us"].as_u64().unwrap();
                assert!(
                    lost > 0 && lost <= page - DELAY_MS * 1000,
                    "{run}: {lost} µs of {page}"
                );
            } else {
                assert!(kinds.is_empty(), "{run}: {kinds:?}");
            }
        }
    }
}
