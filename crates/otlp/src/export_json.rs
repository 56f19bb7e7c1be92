//! The same requests as OTLP/JSON, one `ExportTraceServiceRequest` per
//! line, as the Collector's file exporter writes `json`: lowerCamelCase
//! keys, trace and span ids in hex (not the base64 of protobuf's generic
//! JSON mapping), 64-bit integers as decimal strings, enums as numbers.

use crate::proto::{
    AnyValue, Event, ExportTraceServiceRequest, KeyValue, Link, ResourceSpans, Span, Status, Value,
};
use serde_json::{json, Map, Value as Json};

/// The requests as JSON lines.
pub fn json_lines(requests: &[ExportTraceServiceRequest]) -> Vec<u8> {
    let mut out = Vec::new();
    for r in requests {
        let resource_spans: Vec<Json> = r.resource_spans.iter().map(resource_spans).collect();
        let line = json!({ "resourceSpans": resource_spans });
        // A Value of strings and numbers always serializes.
        out.extend(serde_json::to_vec(&line).unwrap_or_default());
        out.push(b'\n');
    }
    out
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn resource_spans(rs: &ResourceSpans) -> Json {
    let resource = rs
        .resource
        .as_ref()
        .map_or(Vec::new(), |r| attributes(&r.attributes));
    let scopes: Vec<Json> = rs
        .scope_spans
        .iter()
        .map(|ss| {
            let scope = ss.scope.as_ref().map_or(
                json!({}),
                |s| json!({ "name": s.name, "version": s.version }),
            );
            json!({ "scope": scope, "spans": ss.spans.iter().map(span).collect::<Vec<_>>() })
        })
        .collect();
    json!({ "resource": { "attributes": resource }, "scopeSpans": scopes })
}

fn span(s: &Span) -> Json {
    let mut out = Map::new();
    out.insert("traceId".into(), hex(&s.trace_id).into());
    out.insert("spanId".into(), hex(&s.span_id).into());
    if !s.parent_span_id.is_empty() {
        out.insert("parentSpanId".into(), hex(&s.parent_span_id).into());
    }
    out.insert("flags".into(), s.flags.into());
    out.insert("name".into(), s.name.clone().into());
    out.insert("kind".into(), s.kind.into());
    out.insert(
        "startTimeUnixNano".into(),
        s.start_time_unix_nano.to_string().into(),
    );
    out.insert(
        "endTimeUnixNano".into(),
        s.end_time_unix_nano.to_string().into(),
    );
    out.insert("attributes".into(), attributes(&s.attributes).into());
    if !s.events.is_empty() {
        out.insert("events".into(), s.events.iter().map(event).collect());
    }
    if !s.links.is_empty() {
        out.insert("links".into(), s.links.iter().map(link).collect());
    }
    if let Some(st) = &s.status {
        out.insert("status".into(), status(st));
    }
    out.into()
}

fn event(e: &Event) -> Json {
    json!({
        "timeUnixNano": e.time_unix_nano.to_string(),
        "name": e.name,
        "attributes": attributes(&e.attributes),
    })
}

fn link(l: &Link) -> Json {
    json!({
        "traceId": hex(&l.trace_id),
        "spanId": hex(&l.span_id),
        "attributes": attributes(&l.attributes),
    })
}

fn status(s: &Status) -> Json {
    let mut out = Map::new();
    if !s.message.is_empty() {
        out.insert("message".into(), s.message.clone().into());
    }
    out.insert("code".into(), s.code.into());
    out.into()
}

fn attributes(kvs: &[KeyValue]) -> Vec<Json> {
    kvs.iter()
        .map(|kv| json!({ "key": kv.key, "value": any_value(kv.value.as_ref()) }))
        .collect()
}

fn any_value(v: Option<&AnyValue>) -> Json {
    match v.and_then(|v| v.value.as_ref()) {
        Some(Value::StringValue(s)) => json!({ "stringValue": s }),
        Some(Value::BoolValue(b)) => json!({ "boolValue": b }),
        Some(Value::IntValue(n)) => json!({ "intValue": n.to_string() }),
        // JSON has no NaN or infinity: protobuf's JSON mapping spells them.
        Some(Value::DoubleValue(d)) if d.is_finite() => json!({ "doubleValue": d }),
        Some(Value::DoubleValue(d)) => {
            let spelled = match (d.is_nan(), *d > 0.0) {
                (true, _) => "NaN",
                (false, true) => "Infinity",
                (false, false) => "-Infinity",
            };
            json!({ "doubleValue": spelled })
        }
        None => json!({}),
    }
}

#[cfg(test)]
mod tests {
    use crate::import::read_bytes;
    use crate::proto::{
        ExportTraceServiceRequest, KeyValue, Resource, ResourceSpans, ScopeSpans, Span,
    };

    fn request() -> ExportTraceServiceRequest {
        let span = Span {
            trace_id: vec![0xab; 16],
            span_id: vec![0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08],
            name: "GET /".into(),
            kind: 2,
            start_time_unix_nano: 1_700_000_000_000_000_123,
            end_time_unix_nano: 1_700_000_000_001_000_123,
            attributes: vec![
                KeyValue::string("http.request.method", "GET"),
                KeyValue::int("http.response.status_code", 200),
            ],
            ..Default::default()
        };
        ExportTraceServiceRequest {
            resource_spans: vec![ResourceSpans {
                resource: Some(Resource {
                    attributes: vec![KeyValue::string("service.name", "front")],
                    dropped_attributes_count: 0,
                }),
                scope_spans: vec![ScopeSpans {
                    scope: None,
                    spans: vec![span],
                    schema_url: String::new(),
                }],
                schema_url: String::new(),
            }],
        }
    }

    #[test]
    fn ids_are_hex_and_big_integers_strings() {
        let text = String::from_utf8(super::json_lines(&[request()])).unwrap();
        assert_eq!(text.lines().count(), 1);
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        let span = &v["resourceSpans"][0]["scopeSpans"][0]["spans"][0];
        assert_eq!(span["traceId"], "ab".repeat(16));
        assert_eq!(span["spanId"], "0102030405060708");
        assert_eq!(span["startTimeUnixNano"], "1700000000000000123");
        assert_eq!(span["attributes"][1]["value"]["intValue"], "200");
        assert!(span.get("parentSpanId").is_none());
    }

    #[test]
    fn json_lines_read_back_as_the_protobuf_frames_do() {
        let reqs = [request(), request()];
        let from_json = read_bytes(&super::json_lines(&reqs));
        let from_proto = read_bytes(&crate::frames(&reqs));
        assert_eq!(from_json.spans.len(), 2, "{:?}", from_json.notes);
        assert_eq!(from_json.spans, from_proto.spans);
    }
}
