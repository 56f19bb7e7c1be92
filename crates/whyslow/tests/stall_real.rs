//! Case 003's tax service on real software: a Python checkout (requests)
//! calls a Python tax service that blocks for over a second on every 20th
//! call. `diagnose URL --rate R --duration D` must name periodic_stall with
//! the service's median still low; a short diagnosis without load must say
//! it cannot rule such a stall out; the fixed checkout (rate read at
//! start-up) must name none.

mod common;
use common::real::*;
use common::*;
use serde_json::Value;

/// The tax service stalls on every EVERY-th call for STALL_MS.
const EVERY: u64 = 20;
const STALL_MS: u64 = 1_200;
/// Load: 5/s for 16 s is 80 checkouts, 4 stalls; a stall holds about 6
/// calls, so most calls stay fast and the median low.
const RATE: &str = "5";
const DURATION: &str = "16s";

// One diagnosis at a time (`serial()`): the stalls are timed.

const NEEDS: &[Need] = &[Need::Python("requests"), Need::Capture];

fn start(variant: &str) -> (Server, Server) {
    stall_apps(variant, EVERY, STALL_MS, None)
}

/// A diagnosis, with a load phase of `duration` at RATE if given.
fn diagnose(url: &str, duration: Option<&str>) -> Value {
    let mut args = vec!["diagnose", "--json", "-n", "4"];
    if let Some(d) = duration {
        args.extend(["--rate", RATE, "--duration", d, "-c", "16"]);
    }
    args.push(url);
    let out = whyslow(&args);
    assert!(out.status.success(), "{}", stderr(&out));
    json(&out)
}

fn stall(report: &Value) -> Option<&Value> {
    finding(report, "periodic_stall")
}

#[test]
fn diagnose_under_load_names_the_stall_the_median_hides() {
    let _one = serial();
    if !requirements_met("diagnose_under_load_names_the_stall", NEEDS) {
        return;
    }
    let (_tax, checkout) = start("broken");
    let url = format!("http://127.0.0.1:{}/checkout", checkout.port);

    let short = diagnose(&url, None);
    let notes: Vec<&Value> = short["skipped"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["what"] == "periodic_stall")
        .collect();
    if stall(&short).is_none() {
        assert_eq!(notes.len(), 1, "{}", short["skipped"]);
        assert!(
            notes[0]["why"].as_str().unwrap().contains("--rate"),
            "{}",
            notes[0]
        );
    }

    let report = diagnose(&url, Some(DURATION));
    let kinds = finding_kinds(&report);
    let f = stall(&report).unwrap_or_else(|| panic!("no periodic_stall: {kinds:?}"));
    let stall_us = STALL_MS as f64 * 1000.0;
    let per = f["time_lost_per_occurrence_us"].as_f64().unwrap();
    assert!(per > 0.8 * stall_us && per < 1.25 * stall_us, "{f}");
    assert!(f["occurrences"].as_u64().unwrap() >= 3, "{f}");
    let users = &report["load"]["latency"]["corrected"];
    assert!(
        users["p50"].as_f64().unwrap() < stall_us / 10.0,
        "median stays low: {users}"
    );
    assert!(
        users["p99"].as_f64().unwrap() > stall_us / 2.0,
        "the tail holds it: {users}"
    );
    assert!(
        !report.to_string().contains("\"slow_dependency\""),
        "the stall is not the service's usual speed: {kinds:?}"
    );
}

#[test]
fn the_fixed_checkout_names_no_stall() {
    let _one = serial();
    if !requirements_met("the_fixed_checkout_names_no_stall", NEEDS) {
        return;
    }
    let (_tax, checkout) = start("fixed");
    let url = format!("http://127.0.0.1:{}/checkout", checkout.port);
    // No tax calls at all: a short load is enough to show nothing stalls.
    let report = diagnose(&url, Some("4s"));
    assert!(stall(&report).is_none(), "{:?}", finding_kinds(&report));
}
