//! Attribution under concurrent load: the lab's fan-out page at 16 clients,
//! captured and analyzed. Each request makes exactly `CALLS` backing calls
//! (the scenario's declared truth), so a call given to the wrong request
//! shows as a request with more or fewer than its own.

mod common;
use common::*;
use std::collections::HashMap;
use whyslow_lab::scenarios::fanout_pool::CALLS;

/// Clients at once, and requests in all.
const CLIENTS: &str = "16";
const REQUESTS: &str = "160";

/// Captures `whyslow load -c 16` against the broken fan-out page, with
/// `trace` as --trace-context, and analyzes the capture.
fn analyzed(test: &str, trace: &str) -> Option<serde_json::Value> {
    if !capture_allowed(test) {
        return None;
    }
    let s = whyslow_lab::find("fanout-pool").unwrap();
    let running = rt().block_on(s.start(false)).unwrap();
    let dir = tmpdir(test);
    let cap = dir.join("load.pcapng");
    let ports: Vec<String> = running.ports.iter().map(|p| p.to_string()).collect();
    let mut args = vec!["capture", "-i", "lo", "-w", cap.to_str().unwrap()];
    for p in &ports {
        args.extend(["-p", p.as_str()]);
    }
    args.extend(["--", env!("CARGO_BIN_EXE_whyslow"), "load", "-c", CLIENTS]);
    args.extend(["-n", REQUESTS, "--trace-context", trace, &running.url]);
    let out = whyslow(&args);
    assert!(out.status.success(), "{}", stderr(&out));
    Some(analyzed_timeline(&cap, &ports[0]))
}

/// Inbound requests and how many calls each was given, by level.
struct Given {
    requests: usize,
    /// Inbound id → calls given to it.
    calls: HashMap<u64, u64>,
    levels: HashMap<String, u64>,
    overlapped: bool,
}

fn given(report: &serde_json::Value) -> Given {
    let exchanges = report["timeline"]["exchanges"].as_array().unwrap();
    let inbound: Vec<&serde_json::Value> = exchanges
        .iter()
        .filter(|e| e["role"] == "inbound" && e["response_last_at_us"].is_u64())
        .collect();
    let mut calls = HashMap::new();
    let mut levels = HashMap::new();
    for e in exchanges.iter().filter(|e| e["role"] == "outbound") {
        if let Some(p) = e["parent"].as_u64() {
            *calls.entry(p).or_default() += 1;
        }
        let level = e["attribution"].as_str().unwrap_or("none").to_string();
        *levels.entry(level).or_default() += 1;
    }
    // Requests in flight together: some request started before another answered.
    let mut spans: Vec<(u64, u64)> = inbound
        .iter()
        .map(|e| (us(e, "request_first_at_us"), us(e, "response_first_at_us")))
        .collect();
    spans.sort_unstable();
    let overlapped = spans.windows(2).any(|w| w[1].0 < w[0].1);
    Given {
        requests: inbound.len(),
        calls,
        levels,
        overlapped,
    }
}

#[test]
fn trace_context_gives_every_call_exactly_at_16_clients() {
    let _one_at_a_time = serial();
    let Some(report) = analyzed("trace_context_16_clients", "unsampled") else {
        return;
    };
    let g = given(&report);
    assert_eq!(g.requests, REQUESTS.parse::<usize>().unwrap());
    assert!(g.overlapped, "16 clients overlap their requests");
    let total: u64 = g.levels.values().sum();
    assert_eq!(total, CALLS * g.requests as u64, "{:?}", g.levels);
    assert_eq!(
        g.levels.get("trace_context"),
        Some(&total),
        "{:?}",
        g.levels
    );
    let wrong: Vec<_> = g.calls.values().filter(|&&n| n != CALLS).collect();
    assert!(
        wrong.is_empty(),
        "requests not given their own {CALLS} calls: {wrong:?}"
    );
    // The pool of 5 really queues under 16 clients, and requests idle while
    // others hold it waited for it: the queue, not the service's own time.
    let kinds = finding_kinds(&report);
    assert_eq!(
        kinds.first().map(String::as_str),
        Some("pool_queueing"),
        "{kinds:?}"
    );
    assert!(!kinds.iter().any(|k| k == "server_time"), "{kinds:?}");
}

#[test]
fn without_trace_context_no_call_goes_to_the_wrong_request() {
    let _one_at_a_time = serial();
    let Some(report) = analyzed("no_trace_context_16_clients", "off") else {
        return;
    };
    let g = given(&report);
    eprintln!("levels without trace context: {:?}", g.levels);
    assert!(g.overlapped, "16 clients overlap their requests");
    assert_eq!(g.levels.get("trace_context"), None, "{:?}", g.levels);
    // Short calls of requests in flight together fit several alike: those
    // are declared ambiguous, and no request is given more than its own.
    let over: Vec<_> = g.calls.values().filter(|&&n| n > CALLS).collect();
    assert!(over.is_empty(), "requests given others' calls: {over:?}");
    let total: u64 = g.levels.values().sum();
    assert_eq!(total, CALLS * g.requests as u64, "{:?}", g.levels);
    let summary = report["capture"]["groups"].as_array().unwrap();
    let kind = summary
        .iter()
        .find(|g| g["attribution"].is_object())
        .expect("the page's kind has its attribution counts");
    let a = &kind["attribution"];
    let counted: u64 = ["trace_context", "trace_group", "inferred", "ambiguous"]
        .iter()
        .map(|l| a[l].as_u64().unwrap())
        .sum();
    assert_eq!(
        counted, total,
        "every call counted for the page's kind: {a}"
    );
    // Each page fetches each of its 11 parts once: as many calls of each
    // as pages, placed by deduction where only one way fits. Those left
    // ambiguous cover time that is neither a backing service's nor the
    // service's own: no false server_time, and the pool's queue is named.
    let inferred = g.levels.get("inferred").copied().unwrap_or(0);
    assert!(2 * inferred > total, "{:?}", g.levels);
    let kinds = finding_kinds(&report);
    assert!(!kinds.iter().any(|k| k == "server_time"), "{kinds:?}");
    assert_eq!(
        kinds.first().map(String::as_str),
        Some("pool_queueing"),
        "{kinds:?}"
    );
    let ambiguous = report["time_breakdown"][0]["ambiguous_us"]
        .as_u64()
        .unwrap();
    assert!(ambiguous > 0, "some calls were not told apart");
}
