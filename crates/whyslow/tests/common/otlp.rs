//! Spans written with `--otlp`, decoded by the reference protobuf
//! definitions (`opentelemetry-proto` from PyPI, apps/otlp_spans.py), held
//! to the report of the same run and to an app's own record.

use super::real::{pypi_python, pypi_python_has};
use super::truth::{made_for, Score};
use serde_json::Value;
use std::collections::HashMap;
use std::path::Path;
use std::process::Command;

/// The spans of an `--otlp` file, one JSON object each (apps/otlp_spans.py);
/// None when the reference definitions are missing (a skip, said).
pub fn decoded_spans(test: &str, file: &Path) -> Option<Vec<Value>> {
    if !pypi_python_has(test, "opentelemetry.proto") {
        return None;
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/apps/otlp_spans.py");
    let out = Command::new(pypi_python())
        .arg(script)
        .arg(file)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{test}: decoding {}: {}",
        file.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    Some(
        text.lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect(),
    )
}

/// A span's whyslow exchange id.
fn exchange_of(span: &Value) -> u64 {
    span["attributes"]["whyslow.exchange.id"].as_u64().unwrap()
}

/// Checks `spans` against `report` (one span per exchange, a server span
/// per inbound request, each call under the span of the request it was
/// given, in that request's trace, an ambiguous call a root linked to its
/// candidates) and scores their parent links against `truth`.
pub fn held_to_report_and_truth(
    name: &str,
    spans: &[Value],
    report: &Value,
    truth: &[whyslow_lab::truth::RequestTruth],
) -> Score {
    let exchanges = report["timeline"]["exchanges"].as_array().unwrap();
    assert_eq!(spans.len(), exchanges.len(), "{name}: a span per exchange");
    let by_span: HashMap<&str, &Value> = spans
        .iter()
        .map(|s| (s["span"].as_str().unwrap(), s))
        .collect();
    assert_eq!(by_span.len(), spans.len(), "{name}: span ids unique");
    let by_exchange: HashMap<u64, &Value> = spans.iter().map(|s| (exchange_of(s), s)).collect();
    for e in exchanges {
        let span = by_exchange[&e["id"].as_u64().unwrap()];
        assert_eq!(span["sdk"], "whyslow", "{name}: {span}");
        let inbound = e["role"] == "inbound";
        assert_eq!(span["kind"], if inbound { 2 } else { 3 }, "{name}: {span}");
        let parent = match span["parent"].as_str().unwrap() {
            "" => None,
            p => Some(by_span[p]),
        };
        assert_eq!(
            parent.map(exchange_of),
            e["parent"].as_u64(),
            "{name}: the span's parent is the request whyslow gave the call to: {span}"
        );
        if let Some(p) = parent {
            assert_eq!(span["trace"], p["trace"], "{name}: {span}");
            assert_eq!(span["service"], p["service"], "{name}: {span}");
        }
        if e["attribution"] == "ambiguous" {
            assert_eq!(span["attributes"]["whyslow.attribution"], "ambiguous");
            assert!(
                !span["links"].as_array().unwrap().is_empty(),
                "{name}: {span}"
            );
        }
    }
    let mut score = Score::default();
    for (e, request) in made_for(report, truth) {
        let span = by_exchange[&e["id"].as_u64().unwrap()];
        score.calls += 1;
        match span["parent"].as_str().unwrap() {
            "" => score.ambiguous += usize::from(e["attribution"] == "ambiguous"),
            p => {
                score.given += 1;
                score.wrong += usize::from(exchange_of(by_span[p]) != request);
            }
        }
    }
    score
}
