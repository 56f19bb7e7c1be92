//! A trace file past the span bound: the first `MAX_SPANS` are analyzed,
//! the rest counted in a note, and the peak RSS of reading twice as many
//! spans stays within 10 % of reading the bound's worth — spans past it are
//! decoded and dropped, not held. Alone in its test binary so that the peak
//! RSS read from wait4(2) belongs to one child run each.

mod common;
use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use whyslow_otlp::import::MAX_SPANS;
use whyslow_otlp::proto::{
    ExportTraceServiceRequest, KeyValue, Resource, ResourceSpans, ScopeSpans, Span,
};

/// Peak RSS with twice the spans, against the bound's worth.
const RSS_TOLERANCE: f64 = 0.10;
/// Calls per request: each page's 20 item lookups, one statement apiece.
const CALLS: u64 = 20;
/// Requests per OTLP request written, as an SDK's batch processor sends.
const REQUESTS_PER_BATCH: u64 = 200;

fn span(trace: u64, id: u64, parent: u64, kind: i32, at_us: u64, attrs: Vec<KeyValue>) -> Span {
    Span {
        trace_id: (u128::from(trace) << 64 | 1).to_be_bytes().to_vec(),
        span_id: id.to_be_bytes().to_vec(),
        parent_span_id: if parent == 0 {
            Vec::new()
        } else {
            parent.to_be_bytes().to_vec()
        },
        name: "span".into(),
        kind,
        start_time_unix_nano: at_us * 1000,
        end_time_unix_nano: (at_us + 400) * 1000,
        attributes: attrs,
        ..Default::default()
    }
}

/// `requests` pages, each a server span and its 20 SQL client spans, as
/// framed OTLP protobuf.
fn write_file(path: &Path, requests: u64) {
    let mut out = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    let mut batch = Vec::new();
    for r in 1..=requests {
        let at = r * 1_000;
        let server = r * 100;
        let http = vec![
            KeyValue::string("http.request.method", "GET"),
            KeyValue::string("url.path", "/checkout"),
            KeyValue::int("http.response.status_code", 200),
        ];
        let mut spans = vec![Span {
            end_time_unix_nano: (at + 900) * 1000,
            ..span(r, server, 0, 2, at, http)
        }];
        for c in 1..=CALLS {
            let sql = vec![
                KeyValue::string("db.system.name", "postgresql"),
                KeyValue::string(
                    "db.query.text",
                    format!("SELECT * FROM items WHERE id = {c}"),
                ),
                KeyValue::string("server.address", "127.0.0.1"),
                KeyValue::int("server.port", 5432),
            ];
            spans.push(Span {
                end_time_unix_nano: (at + 20 + c * 40 + 30) * 1000,
                ..span(r, server + c, server, 3, at + 20 + c * 40, sql)
            });
        }
        batch.extend(spans);
        if r % REQUESTS_PER_BATCH == 0 || r == requests {
            let req = ExportTraceServiceRequest {
                resource_spans: vec![ResourceSpans {
                    resource: Some(Resource {
                        attributes: vec![KeyValue::string("service.name", "shop")],
                        dropped_attributes_count: 0,
                    }),
                    scope_spans: vec![ScopeSpans {
                        scope: None,
                        spans: std::mem::take(&mut batch),
                        schema_url: String::new(),
                    }],
                    schema_url: String::new(),
                }],
            };
            out.write_all(&whyslow_otlp::frames(&[req])).unwrap();
        }
    }
    out.flush().unwrap();
}

/// `whyslow analyze --json FILE`: (peak RSS in KiB, the report).
fn analyze(file: &Path, report: &Path) -> (i64, serde_json::Value) {
    let child = Command::new(env!("CARGO_BIN_EXE_whyslow"))
        .args(["analyze", "--json", file.to_str().unwrap()])
        .stdout(Stdio::from(std::fs::File::create(report).unwrap()))
        .spawn()
        .unwrap();
    let peak = common::peak_rss_of(child);
    let text = std::fs::read_to_string(report).unwrap();
    (peak, serde_json::from_str(&text).unwrap())
}

#[test]
fn spans_past_the_bound_are_counted_not_held() {
    let dir = std::env::temp_dir().join(format!("whyslow-many-spans-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let per_request = CALLS + 1;
    let at_bound = (MAX_SPANS as u64).div_ceil(per_request);
    let (bound_file, twice_file) = (dir.join("bound.otlp"), dir.join("twice.otlp"));
    write_file(&bound_file, at_bound);
    write_file(&twice_file, 2 * at_bound);
    let (rss_bound, _) = analyze(&bound_file, &dir.join("bound.json"));
    std::fs::remove_file(&bound_file).unwrap();
    let (rss_twice, report) = analyze(&twice_file, &dir.join("twice.json"));
    std::fs::remove_file(&twice_file).unwrap();
    let spans = &report["capture"]["spans"];
    let dropped = 2 * at_bound * per_request - MAX_SPANS as u64;
    assert_eq!(spans["dropped"], dropped, "{spans}");
    assert_eq!(spans["spans"], MAX_SPANS as u64, "{spans}");
    let top = &report["findings"][0];
    assert_eq!(top["kind"], "n_plus_one", "{}", report["findings"]);
    eprintln!("peak RSS: {rss_bound} KiB at the bound, {rss_twice} KiB with twice the spans");
    assert!(
        (rss_twice as f64) <= rss_bound as f64 * (1.0 + RSS_TOLERANCE),
        "{rss_twice} KiB vs {rss_bound} KiB"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
