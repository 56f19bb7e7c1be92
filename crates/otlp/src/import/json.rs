//! OTLP/JSON (the OTLP specification's JSON encoding, as the Collector's
//! file exporter and OTLP/HTTP with `application/json` carry it): field
//! names in lowerCamelCase (snake_case accepted too), trace and span ids
//! in hex — not the base64 of protobuf's generic JSON mapping — 64-bit
//! integers as strings or numbers, enums as integers. Unknown fields are
//! ignored, as the specification requires.

use super::record::{cut_to, AttrValue, RawSpan, MAX_ATTRIBUTE_BYTES};
use serde::Deserialize;
use serde_json::Value;

#[derive(Deserialize, Default)]
#[serde(default)]
pub struct Request {
    #[serde(rename = "resourceSpans", alias = "resource_spans")]
    pub resource_spans: Vec<ResourceSpans>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
pub struct ResourceSpans {
    pub resource: Resource,
    #[serde(rename = "scopeSpans", alias = "scope_spans")]
    pub scope_spans: Vec<ScopeSpans>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
pub struct Resource {
    pub attributes: Vec<KeyValue>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
pub struct ScopeSpans {
    pub spans: Vec<Span>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
pub struct KeyValue {
    pub key: String,
    pub value: Value,
}

#[derive(Deserialize, Default)]
#[serde(default)]
pub struct Span {
    #[serde(rename = "traceId", alias = "trace_id")]
    trace_id: String,
    #[serde(rename = "spanId", alias = "span_id")]
    span_id: String,
    #[serde(rename = "parentSpanId", alias = "parent_span_id")]
    parent_span_id: String,
    name: String,
    kind: Value,
    #[serde(rename = "startTimeUnixNano", alias = "start_time_unix_nano")]
    start: Value,
    #[serde(rename = "endTimeUnixNano", alias = "end_time_unix_nano")]
    end: Value,
    attributes: Vec<KeyValue>,
    status: Status,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Status {
    code: Value,
}

/// A 64-bit integer as OTLP/JSON writes it: a decimal string or a number.
fn integer(v: &Value) -> Option<i64> {
    match v {
        Value::Number(n) => n.as_i64().or_else(|| n.as_u64().map(|u| u as i64)),
        Value::String(s) => s.parse().ok(),
        _ => None,
    }
}

fn unsigned(v: &Value) -> u64 {
    match v {
        Value::Number(n) => n.as_u64().unwrap_or(0),
        Value::String(s) => s.parse().unwrap_or(0),
        _ => 0,
    }
}

fn span_kind(v: &Value) -> i32 {
    if let Some(n) = integer(v) {
        return i32::try_from(n).unwrap_or(0);
    }
    const NAMES: [&str; 6] = [
        "SPAN_KIND_UNSPECIFIED",
        "SPAN_KIND_INTERNAL",
        "SPAN_KIND_SERVER",
        "SPAN_KIND_CLIENT",
        "SPAN_KIND_PRODUCER",
        "SPAN_KIND_CONSUMER",
    ];
    let name = v.as_str().unwrap_or("");
    NAMES.iter().position(|n| *n == name).unwrap_or(0) as i32
}

/// An `AnyValue` object.
pub fn any_value(v: &Value) -> AttrValue {
    let Value::Object(map) = v else {
        return AttrValue::Other;
    };
    if let Some(s) = map.get("stringValue").and_then(Value::as_str) {
        return AttrValue::Str(cut_to(s, MAX_ATTRIBUTE_BYTES).to_string());
    }
    if let Some(n) = map.get("intValue").and_then(integer) {
        return AttrValue::Int(n);
    }
    if let Some(b) = map.get("boolValue").and_then(Value::as_bool) {
        return AttrValue::Bool(b);
    }
    if let Some(d) = map.get("doubleValue").and_then(Value::as_f64) {
        return AttrValue::Double(d);
    }
    AttrValue::Other
}

pub fn attributes(kvs: &[KeyValue]) -> Vec<(String, AttrValue)> {
    kvs.iter()
        .map(|kv| (kv.key.clone(), any_value(&kv.value)))
        .collect()
}

/// Hex ids: Err for anything but an even run of hex digits of the right
/// length (or none).
fn hex_id(s: &str, bytes: usize) -> Result<u128, String> {
    if s.is_empty() {
        return Ok(0);
    }
    if s.len() != bytes * 2 {
        return Err(format!(
            "an id of {} hex digits, not {}",
            bytes * 2,
            s.len()
        ));
    }
    u128::from_str_radix(s, 16).map_err(|_| format!("id {s:?} is not hex"))
}

impl Span {
    pub fn raw(&self) -> Result<RawSpan, String> {
        Ok(RawSpan {
            trace_id: hex_id(&self.trace_id, 16)?,
            span_id: hex_id(&self.span_id, 8)? as u64,
            parent_span_id: hex_id(&self.parent_span_id, 8)? as u64,
            name: self.name.clone(),
            kind: span_kind(&self.kind),
            start_ns: unsigned(&self.start),
            end_ns: unsigned(&self.end),
            attributes: attributes(&self.attributes),
            error: integer(&self.status.code) == Some(2),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_in_hex_and_integers_as_strings() {
        let line = r#"{"resourceSpans":[{"resource":{"attributes":[{"key":"service.name","value":{"stringValue":"front"}}]},
          "scopeSpans":[{"scope":{"name":"x"},"spans":[{"traceId":"5b8efff798038103d269b633813fc60c",
          "spanId":"eee19b7ec3c1b174","parentSpanId":"","name":"GET /","kind":2,
          "startTimeUnixNano":"1544712660000000000","endTimeUnixNano":1544712661000000000,
          "attributes":[{"key":"http.request.method","value":{"stringValue":"GET"}},
                        {"key":"server.port","value":{"intValue":"8080"}}],"status":{"code":2},"unknown":1}]}]}]}"#;
        let r: Request = serde_json::from_str(line).unwrap();
        let span = r.resource_spans[0].scope_spans[0].spans[0].raw().unwrap();
        assert_eq!(span.trace_id, 0x5b8efff798038103d269b633813fc60c);
        assert_eq!(span.span_id, 0xeee19b7ec3c1b174);
        assert_eq!(span.parent_span_id, 0);
        assert_eq!(span.kind, 2);
        assert_eq!(span.end_ns - span.start_ns, 1_000_000_000);
        assert_eq!(span.attributes[1].1, AttrValue::Int(8080));
        assert!(span.error);
        let name = &r.resource_spans[0].resource.attributes[0];
        assert_eq!(any_value(&name.value), AttrValue::Str("front".into()));
    }

    #[test]
    fn base64_ids_are_refused_not_misread() {
        let span: Span = serde_json::from_str(r#"{"traceId":"W47/95gDgQPSabYzgT/GDA=="}"#).unwrap();
        assert!(span.raw().is_err());
    }
}
