//! Case 004 on real software. A product page on redis-py that sends a
//! 16 MiB write and then a read in one pipeline on one connection: whyslow
//! must name pipeline_hol from `diagnose URL` and from `analyze` on a
//! tcpdump capture with no flags; with the write on a connection of its own
//! it must not. The lab's cache-hol scenario against a real redis-server
//! and a real memcached: the same.

mod common;
use common::real::*;
use common::truth::read_app_truth;
use common::*;
use serde_json::Value;
use std::path::Path;
use whyslow_lab::cache::CacheProtocol;
use whyslow_lab::scenarios::cache_hol;
use whyslow_lab::truth::RequestTruth;

/// The case's write: a 16 MB value.
const VALUE_BYTES: usize = 16 << 20;
/// Page requests in the tcpdump capture.
const PAGES: usize = 5;

// One page at a time (`serial()`): each listens on lo and times its cache calls.

/// What the redis-py page's diagnoses need.
const DIAGNOSE_NEEDS: [Need; 3] = [
    Need::Tool("redis-server"),
    Need::Capture,
    Need::Python("redis"),
];

/// A redis-server and the redis-py page in front of it (recording each
/// page's commands in `truth` when given).
fn start_app(variant: &str, truth: Option<&Path>) -> (Server, Server) {
    let redis = redis();
    let port = free_port();
    let args = [
        port.to_string(),
        redis.port.to_string(),
        VALUE_BYTES.to_string(),
        variant.to_string(),
    ];
    let page = match truth {
        Some(truth) => python_app_recording("cache_app.py", port, &args, truth),
        None => python_app("cache_app.py", port, &args),
    };
    (redis, page)
}

fn hol(report: &Value) -> Option<&Value> {
    finding(report, "pipeline_hol")
}

/// pipeline_hol ranks first and names the read, the write and its size.
fn assert_hol_seen(report: &Value, protocol: &str) {
    let kinds = finding_kinds(report);
    assert_eq!(
        kinds.first().map(String::as_str),
        Some("pipeline_hol"),
        "{kinds:?}"
    );
    let f = hol(report).unwrap();
    // memcached's commands are lower case, Redis's upper.
    let summary = f["summary"].as_str().unwrap().to_ascii_lowercase();
    assert!(summary.starts_with("get hot:config waited"), "{summary}");
    let expected =
        format!("behind a 16.0 mib set stash:product:? on the same {protocol} connection");
    assert!(summary.contains(&expected), "{summary}");
    let evidence = f["evidence"].as_array().unwrap();
    let mut reads = 0;
    for e in evidence {
        assert_eq!(e["type"], "queued", "{e}");
        assert!(e["waited_us"].as_u64().unwrap() >= 1_000, "{e}");
        // A read behind the write; now and then, with 16 MiB bursts, a
        // write queued behind a read that waited for the write before it.
        let waiting = e["request"].as_str().unwrap().to_ascii_lowercase();
        if waiting.starts_with("get hot:config") {
            reads += 1;
            assert!(
                e["bytes_ahead"].as_u64().unwrap() >= VALUE_BYTES as u64,
                "{e}"
            );
        } else {
            assert!(waiting.starts_with("set stash:product:?"), "{e}");
        }
    }
    // The evidence kept is the first few occurrences; with 16 MiB bursts the
    // writes queued behind each other can outnumber the reads among them.
    assert!(reads >= 1, "{f}");
}

fn assert_no_hol(report: &Value) {
    assert!(hol(report).is_none(), "{:?}", finding_kinds(report));
}

fn diagnose(url: &str, cache_port: u16) -> Value {
    let port = cache_port.to_string();
    let out = whyslow(&["diagnose", "--json", "-n", "6", "--port", &port, url]);
    assert!(out.status.success(), "{}", stderr(&out));
    let report = json(&out);
    assert!(not_examined(&report).is_empty(), "{}", report["skipped"]);
    report
}

#[test]
fn diagnose_names_the_read_behind_the_write_on_redis_py() {
    let _one = serial();
    if !requirements_met("diagnose_redis_py_hol", &DIAGNOSE_NEEDS) {
        return;
    }
    for variant in ["broken", "fixed"] {
        let (redis, page) = start_app(variant, None);
        let url = format!("http://127.0.0.1:{}/product/42", page.port);
        let report = diagnose(&url, redis.port);
        match variant {
            "broken" => assert_hol_seen(&report, "redis"),
            _ => assert_no_hol(&report),
        }
    }
}

/// Captures taken before one without drops is given up on.
const CAPTURE_TRIES: usize = 3;

#[test]
fn analyze_finds_it_in_a_tcpdump_capture_with_no_flags() {
    let _one = serial();
    let test = "analyze_tcpdump_hol";
    let needs = [
        Need::Tool("redis-server"),
        Need::Tool("tcpdump"),
        Need::Tool("curl"),
        Need::Tool("tshark"),
        Need::Capture,
        Need::Python("redis"),
    ];
    if !requirements_met(test, &needs) {
        return;
    }
    let dir = tmpdir("cache");
    for variant in ["broken", "fixed"] {
        let (redis, page) = start_app(variant, None);
        let file = dir.join(format!("{variant}.pcap"));
        let url = format!("http://127.0.0.1:{}/product/42", page.port);
        // The page's Redis connection opened at start-up, before the capture.
        // A capture tcpdump dropped packets from (16 MiB bursts on a busy
        // machine) is taken again, up to CAPTURE_TRIES times.
        for _ in 0..CAPTURE_TRIES {
            if tcpdump_while(&file, &[page.port, redis.port], || curl_each(&url, PAGES)) == 0 {
                break;
            }
        }
        let out = whyslow(&["analyze", "--json", file.to_str().unwrap()]);
        assert!(out.status.success(), "{}", stderr(&out));
        let report = json(&out);
        assert_eq!(report["time_breakdown"][0]["requests"], PAGES, "{report}");
        if variant == "broken" {
            assert_hol_seen(&report, "redis");
            // tcpdump drops packets of 16 MiB bursts now and then: every read
            // whose bytes it kept must be named, and most must have been kept.
            let redis_port = redis.port;
            let reads = tshark_fields(
                &file,
                &format!("tcp.port=={redis_port},data"),
                &format!("tcp.dstport=={redis_port} && tcp.payload contains \"hot:config\""),
                "frame.number",
            );
            assert!(reads.len() + 1 >= PAGES, "{} reads captured", reads.len());
            assert_eq!(hol(&report).unwrap()["occurrences"], reads.len());
        } else {
            assert_no_hol(&report);
        }
    }
}

/// The lab's page (its own pipelined client) against a real cache.
fn lab_on(protocol: CacheProtocol, cache: &Server, fixed: bool) -> Value {
    let addr = format!("127.0.0.1:{}", cache.port).parse().unwrap();
    let running = rt()
        .block_on(cache_hol::start_with_cache(
            fixed,
            addr,
            protocol,
            VALUE_BYTES,
        ))
        .unwrap();
    diagnose(&running.url, cache.port)
}

#[test]
fn the_lab_scenario_on_real_redis_and_memcached() {
    let _one = serial();
    let test = "lab_cache_hol_real";
    let needs = [
        Need::Tool("redis-server"),
        Need::Tool("memcached"),
        Need::Capture,
    ];
    if !requirements_met(test, &needs) {
        return;
    }
    for (protocol, name) in [
        (CacheProtocol::Resp, "redis"),
        (CacheProtocol::Memcached, "memcached"),
    ] {
        let cache = match protocol {
            CacheProtocol::Resp => redis(),
            CacheProtocol::Memcached => memcached(),
        };
        let broken = lab_on(protocol, &cache, false);
        assert_hol_seen(&broken, name);
        assert_no_hol(&lab_on(protocol, &cache, true));
    }
}

/// The load on the 16 MiB case: 10 pages a second for 10 s, each
/// one 16 MiB SET and one GET (1.6 GB through loopback).
const LOAD_RATE: &str = "10";
const LOAD_DURATION: &str = "10s";

#[test]
fn diagnose_keeps_up_with_16_mib_writes_under_load() {
    let _one = serial();
    let test = "diagnose_16_mib_under_load";
    if !requirements_met(test, &DIAGNOSE_NEEDS) {
        return;
    }
    // A run the kernel dropped packets from (the machine busy with more
    // than this test: a debug build's capture thread shares two cores with
    // Redis, Python and the load) is run again once; the second must drop
    // none.
    for attempt in 1..=LOAD_TRIES {
        let (report, truth, cache) = diagnosed_16_mib(test);
        let capture = &report["live_capture"];
        eprintln!("{test}: try {attempt}: {capture}");
        if capture["kernel_drops"] == 0 || attempt == LOAD_TRIES {
            assert_eq!(capture["kernel_drops"], 0, "{capture}");
            assert!(capture["seconds"].as_u64().unwrap() >= 10, "{capture}");
            every_command_seen_once(test, &report, cache, &read_app_truth(&truth));
            assert_hol_seen(&report, "redis");
            return;
        }
    }
}

/// Runs of the 16 MiB load before one without drops is given up on.
const LOAD_TRIES: usize = 2;

/// The broken page under diagnose's load phase: the report, the app's
/// record and the cache's port.
fn diagnosed_16_mib(test: &str) -> (Value, std::path::PathBuf, u16) {
    let dir = tmpdir(test);
    let truth = dir.join("truth.jsonl");
    let (redis, page) = start_app("broken", Some(&truth));
    let url = format!("http://127.0.0.1:{}/product/42", page.port);
    let cache = redis.port.to_string();
    let load = ["--rate", LOAD_RATE, "--duration", LOAD_DURATION];
    let args = [
        "diagnose",
        "--json",
        "--timeline",
        "-n",
        "5",
        "--port",
        &cache,
    ];
    let out = whyslow(&[&args[..], &load[..], &[url.as_str()]].concat());
    assert!(out.status.success(), "{}", stderr(&out));
    drop(page);
    (json(&out), truth, redis.port)
}

/// Every command the app sent is one exchange on the wire, and every page one inbound.
fn every_command_seen_once(test: &str, report: &Value, cache: u16, truth: &[RequestTruth]) {
    let sent: usize = truth.iter().map(|r| r.calls.len()).sum();
    let timeline = &report["timeline"];
    let to_redis: Vec<u64> = timeline["connections"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| {
            c["server"]
                .as_str()
                .is_some_and(|s| s.ends_with(&format!(":{cache}")))
        })
        .map(|c| c["id"].as_u64().unwrap())
        .collect();
    let exchanges = timeline["exchanges"].as_array().unwrap();
    let commands = exchanges
        .iter()
        .filter(|e| to_redis.contains(&e["connection"].as_u64().unwrap()))
        .count();
    let pages = exchanges.iter().filter(|e| e["role"] == "inbound").count();
    eprintln!(
        "{test}: {} pages, {sent} commands sent; {pages} pages, {commands} commands seen",
        truth.len()
    );
    assert_eq!(pages, truth.len());
    assert_eq!(commands, sent);
    assert!(truth.len() >= 50, "{} pages served", truth.len());
}
