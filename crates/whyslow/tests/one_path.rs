//! `analyze` and `diagnose` are one analysis path: on the capture a
//! diagnosis saved (`diagnose --save`), `analyze --service PORT` gives the
//! same findings, capture summary, time breakdown and SQL summary as the
//! diagnosis itself, for every lab scenario.

mod common;
use common::*;
use serde_json::Value;
use whyslow_lab::{Scenario, SCENARIOS};

static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Findings that come from the host's samples or the load generator, not
/// from the capture: diagnose adds them beside the capture's.
const NOT_FROM_THE_CAPTURE: [&str; 2] = ["host_saturated", "generator_saturated"];

fn capture_findings(report: &Value) -> Vec<Value> {
    report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| !NOT_FROM_THE_CAPTURE.contains(&f["kind"].as_str().unwrap_or("")))
        .cloned()
        .collect()
}

/// `diagnose --json --save FILE` of a started scenario, as the lab tests run it.
fn diagnose_saving(s: &Scenario, running: &whyslow_lab::Running, file: &str) -> Value {
    let mut args = vec!["diagnose", "--json", "-X", s.method, "--save", file];
    if !s.body.is_empty() {
        args.extend(["-d", s.body]);
    }
    let ports: Vec<String> = running.ports[1..].iter().map(u16::to_string).collect();
    for p in &ports {
        args.extend(["--port", p.as_str()]);
    }
    args.push(&running.url);
    let out = whyslow(&args);
    assert!(out.status.success(), "{args:?}: {}", stderr(&out));
    json(&out)
}

#[test]
fn analyze_of_a_saved_diagnosis_gives_the_diagnosis() {
    let _one_at_a_time = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !capture_allowed("analyze_of_a_saved_diagnosis_gives_the_diagnosis") {
        return;
    }
    let dir = std::env::temp_dir().join(format!("whyslow-one-path-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut missing = Vec::new();
    for s in SCENARIOS {
        for fixed in [false, true] {
            let running = rt().block_on(s.start(fixed)).unwrap();
            let file = dir.join(format!("{}-{fixed}.pcapng", s.name));
            let file = file.to_str().unwrap();
            let diagnosed = diagnose_saving(s, &running, file);
            let front = running.ports[0].to_string();
            let out = whyslow(&["analyze", "--json", "--service", &front, file]);
            assert!(out.status.success(), "{}: {}", s.name, stderr(&out));
            let analyzed = json(&out);
            let what = format!("{} ({})", s.name, if fixed { "fixed" } else { "broken" });
            assert!(
                diagnosed["capture"]["exchanges"].as_u64().unwrap() > 0,
                "{what}: {}",
                diagnosed["capture"]
            );
            assert_eq!(
                capture_findings(&diagnosed),
                capture_findings(&analyzed),
                "{what}: findings"
            );
            // No timeline was asked for: none is said to be cut short.
            assert!(
                !diagnosed["errors"].to_string().contains("timeline"),
                "{what}: {}",
                diagnosed["errors"]
            );
            for field in ["capture", "time_breakdown", "sql_summary"] {
                assert_eq!(diagnosed[field], analyzed[field], "{what}: {field}");
            }
            if !fixed {
                missing.extend(numbers_only_in_text(&what, file, &front, &diagnosed));
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        missing.is_empty(),
        "numbers in the text that no JSON field holds:\n{}",
        missing.join("\n")
    );
}

/// The numbers the text of `analyze` and of `diagnose` shows that their
/// JSON does not hold. analyze's text and JSON come from two runs on one
/// file; diagnose's text is rendered from its JSON document, as the
/// binary renders it from the document it would print.
fn numbers_only_in_text(what: &str, file: &str, front: &str, diagnosed: &Value) -> Vec<String> {
    let out = whyslow(&["analyze", "--service", front, file]);
    let json_out = whyslow(&["analyze", "--json", "--service", front, file]);
    let analyzed = json(&json_out);
    let mut missing: Vec<String> = numbers::numbers_not_in_json(&stdout(&out), &analyzed)
        .into_iter()
        .map(|m| format!("{what} analyze: {m}"))
        .collect();
    let doc: whyslow_model::DiagnoseDocument =
        serde_json::from_value(diagnosed.clone()).expect("diagnose --json reads back");
    let text = whyslow_report::diagnose::text(&doc);
    missing.extend(
        numbers::numbers_not_in_json(&text, diagnosed)
            .into_iter()
            .map(|m| format!("{what} diagnose: {m}")),
    );
    missing
}
