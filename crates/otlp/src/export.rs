//! The timeline and findings as OTLP spans, semantic-convention names of
//! today (`http.request.method`, `db.query.text`, `server.address`), and
//! the file framing of the OpenTelemetry Collector's file exporter in
//! `proto` format: each `ExportTraceServiceRequest` preceded by its length
//! as a 32-bit big-endian integer.

use crate::proto::{
    span_kind, status_code, ExportTraceServiceRequest, InstrumentationScope, KeyValue, Link,
    Resource, ResourceSpans, ScopeSpans, Span, Status,
};
use prost::Message;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::SocketAddr;
use whyslow_model::{
    Attribution, Connection, Evidence, Exchange, ExchangeRole, Finding, Protocol, Timeline,
};

/// Spans per `ExportTraceServiceRequest`, at most.
pub const MAX_SPANS_PER_FRAME: usize = 8192;
/// Encoded bytes of spans per request, at most: a collector takes 4 MiB a
/// message by default (gRPC's limit, the Collector's receivers'), and a span
/// with its finding events and candidate links runs past 500 bytes (8 192
/// of an agent's window came to more than 4 MiB, refused whole). Half the
/// limit leaves room for the request's own framing.
pub const MAX_REQUEST_BYTES: usize = 2 << 20;
/// Links from an ambiguous call to the requests that could have made it.
const MAX_LINKS: usize = 16;
/// The W3C trace flag "sampled": these spans are all kept.
const SAMPLED: u32 = 1;

/// Spans of `t` (findings as events), by observed server, as requests of at
/// most `MAX_SPANS_PER_FRAME` spans.
pub fn export(t: &Timeline, findings: &[Finding]) -> Vec<ExportTraceServiceRequest> {
    let conns: HashMap<u32, &Connection> = t.connections.iter().map(|c| (c.id, c)).collect();
    let server_of = |e: &Exchange| conns.get(&e.connection).map(|c| c.server);
    let events = finding_events(t, findings);
    let inbound: HashMap<u32, &Exchange> = t
        .exchanges
        .iter()
        .filter(|e| e.role == ExchangeRole::Inbound)
        .map(|e| (e.id, e))
        .collect();
    let in_flight = InFlight::new(&inbound);
    // Calls no request was given to were still made by the service: under
    // its resource when there is one service.
    let servers: BTreeSet<Option<SocketAddr>> = inbound.values().map(|e| server_of(e)).collect();
    let orphans = match servers.len() {
        1 => servers.into_iter().next().flatten(),
        _ => None,
    };
    let mut by_server: BTreeMap<Option<SocketAddr>, Vec<Span>> = BTreeMap::new();
    for e in &t.exchanges {
        let parent = e.parent.and_then(|p| inbound.get(&p));
        let (resource, span) = match (e.role, parent) {
            (ExchangeRole::Inbound, _) => (server_of(e), server_span(e, &conns)),
            (_, Some(p)) => (server_of(p), client_span(e, Some(p), &conns)),
            _ => {
                let mut span = client_span(e, None, &conns);
                if e.attribution == Some(Attribution::Ambiguous) {
                    link_candidates(&mut span, e, &in_flight);
                }
                (orphans, span)
            }
        };
        let mut span = span;
        if let Some(list) = events.get(&e.id) {
            span.events.extend(list.iter().cloned());
        }
        by_server.entry(resource).or_default().push(span);
    }
    let mut out = Vec::new();
    for (server, spans) in by_server {
        for chunk in batches(&spans) {
            out.push(ExportTraceServiceRequest {
                resource_spans: vec![ResourceSpans {
                    resource: Some(resource(server)),
                    scope_spans: vec![ScopeSpans {
                        scope: Some(InstrumentationScope {
                            name: "whyslow".into(),
                            version: env!("CARGO_PKG_VERSION").into(),
                            ..Default::default()
                        }),
                        spans: chunk.to_vec(),
                        schema_url: String::new(),
                    }],
                    schema_url: String::new(),
                }],
            });
        }
    }
    out
}

/// `spans` cut into runs of at most MAX_SPANS_PER_FRAME spans and
/// MAX_REQUEST_BYTES encoded (a span alone past that is a run of its own).
fn batches(spans: &[Span]) -> Vec<&[Span]> {
    let mut out = Vec::new();
    let (mut start, mut bytes) = (0, 0);
    for (i, span) in spans.iter().enumerate() {
        // A repeated field's element: its length prefix and tag too.
        let len = span.encoded_len() + 8;
        if i > start && (bytes + len > MAX_REQUEST_BYTES || i - start == MAX_SPANS_PER_FRAME) {
            out.push(&spans[start..i]);
            (start, bytes) = (i, 0);
        }
        bytes += len;
    }
    if start < spans.len() {
        out.push(&spans[start..]);
    }
    out
}

/// The spans of `t` as a file of framed requests.
pub fn file(t: &Timeline, findings: &[Finding]) -> Vec<u8> {
    frames(&export(t, findings))
}

/// One request in protobuf, as an OTLP/HTTP body.
pub fn encoded(r: &ExportTraceServiceRequest) -> Vec<u8> {
    r.encode_to_vec()
}

/// The spans one request carries.
pub fn span_count(r: &ExportTraceServiceRequest) -> u64 {
    r.resource_spans
        .iter()
        .flat_map(|rs| &rs.scope_spans)
        .map(|ss| ss.spans.len() as u64)
        .sum()
}

/// The requests framed as the Collector's file exporter frames them.
pub fn frames(requests: &[ExportTraceServiceRequest]) -> Vec<u8> {
    let mut out = Vec::new();
    for r in requests {
        let body = encoded(r);
        out.extend_from_slice(&(body.len() as u32).to_be_bytes());
        out.extend_from_slice(&body);
    }
    out
}

/// The observed server, named as the service; None: calls no request of a
/// service was found for.
fn resource(server: Option<SocketAddr>) -> Resource {
    let mut attributes = vec![
        KeyValue::string("telemetry.sdk.name", crate::WIRE_SDK),
        KeyValue::string("telemetry.sdk.language", "rust"),
        KeyValue::string("telemetry.sdk.version", env!("CARGO_PKG_VERSION")),
        KeyValue::string(
            "whyslow.source",
            "seen on the wire by whyslow, not instrumented",
        ),
    ];
    match server {
        Some(s) => attributes.extend([
            KeyValue::string("service.name", s.to_string()),
            KeyValue::string("server.address", s.ip().to_string()),
            KeyValue::int("server.port", i64::from(s.port())),
        ]),
        None => attributes.push(KeyValue::string("service.name", "calls of no request")),
    }
    Resource {
        attributes,
        dropped_attributes_count: 0,
    }
}

/// splitmix64: ids that look random and are the same on every run.
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// An exchange's span id: never zero (zero means "none" in OTLP).
pub(crate) fn span_id(e: &Exchange) -> Vec<u8> {
    mix(u64::from(e.id) ^ 0x5157_4e5f_1d00_0000)
        .max(1)
        .to_be_bytes()
        .to_vec()
}

/// The trace of a request (its own `traceparent`'s when it carried one) or
/// of a call no request was given.
pub(crate) fn trace_id(e: &Exchange) -> Vec<u8> {
    let id = e.trace.map(|t| t.0).unwrap_or_else(|| {
        let high = mix(e.request_first_at_us ^ u64::from(e.connection) << 32);
        u128::from(high) << 64 | u128::from(mix(u64::from(e.id)))
    });
    id.max(1).to_be_bytes().to_vec()
}

fn base_span(e: &Exchange, kind: i32, conns: &HashMap<u32, &Connection>) -> Span {
    let end = e.end_us();
    let mut attributes = protocol_attributes(e);
    if let Some(c) = conns.get(&e.connection) {
        attributes.extend([
            KeyValue::string("server.address", c.server.ip().to_string()),
            KeyValue::int("server.port", i64::from(c.server.port())),
        ]);
        if kind == span_kind::SERVER {
            attributes.extend([
                KeyValue::string("client.address", c.client.ip().to_string()),
                KeyValue::int("client.port", i64::from(c.client.port())),
            ]);
        } else {
            // The call's connection: read back, calls stay on their own.
            attributes.extend([
                KeyValue::string("network.local.address", c.client.ip().to_string()),
                KeyValue::int("network.local.port", i64::from(c.client.port())),
            ]);
        }
    }
    attributes.push(KeyValue::int("whyslow.exchange.id", i64::from(e.id)));
    // A digest, never the values: read back, it keeps repeats told apart.
    if let Some(d) = e.params_digest {
        attributes.push(KeyValue::string(
            "whyslow.params.digest",
            format!("{d:016x}"),
        ));
    }
    if let Some(th) = e.thread {
        attributes.extend([
            KeyValue::int("process.pid", i64::from(th.pid)),
            KeyValue::int("thread.id", i64::from(th.tid)),
        ]);
    }
    let failed = e.status.as_ref().is_some_and(|s| s.is_error());
    Span {
        trace_id: trace_id(e),
        span_id: span_id(e),
        flags: SAMPLED,
        name: span_name(e),
        kind,
        start_time_unix_nano: e.request_first_at_us.saturating_mul(1000),
        end_time_unix_nano: end.saturating_mul(1000),
        attributes,
        status: Some(Status {
            message: String::new(),
            code: if failed {
                status_code::ERROR
            } else {
                status_code::UNSET
            },
        }),
        ..Default::default()
    }
}

fn server_span(e: &Exchange, conns: &HashMap<u32, &Connection>) -> Span {
    base_span(e, span_kind::SERVER, conns)
}

/// A call: under its request's span when given to one, else the root of a
/// trace of its own, with how it was attributed and what it waited.
fn client_span(e: &Exchange, parent: Option<&Exchange>, conns: &HashMap<u32, &Connection>) -> Span {
    let mut span = base_span(e, span_kind::CLIENT, conns);
    if let Some(p) = parent {
        span.trace_id = trace_id(p);
        span.parent_span_id = span_id(p);
    }
    if let Some(level) = e.attribution {
        span.attributes.push(KeyValue::string(
            "whyslow.attribution",
            level.label().replace(' ', "_"),
        ));
    }
    if let Some(from) = e.pool_wait_from_us {
        let waited = e.request_first_at_us.saturating_sub(from);
        span.attributes
            .push(KeyValue::int("whyslow.pool_wait_us", waited as i64));
    }
    span
}

/// The inbound requests by start, and the longest one's length: the
/// requests in flight around a call are found by a range, not a scan.
struct InFlight<'t> {
    by_start: Vec<&'t Exchange>,
    longest_us: u64,
}

impl<'t> InFlight<'t> {
    fn new(inbound: &HashMap<u32, &'t Exchange>) -> Self {
        let mut by_start: Vec<&Exchange> = inbound.values().copied().collect();
        by_start.sort_by_key(|r| (r.request_first_at_us, r.id));
        // A request never answered is in flight to the end of the capture.
        let longest_us = by_start
            .iter()
            .map(|r| r.response_last_at_us.map_or(u64::MAX, |_| r.duration_us()))
            .max()
            .unwrap_or(0);
        InFlight {
            by_start,
            longest_us,
        }
    }

    /// Requests that arrived before the call and answered after it.
    fn around(&self, e: &Exchange) -> Vec<&'t Exchange> {
        let end = e.end_us();
        let from = self
            .by_start
            .partition_point(|r| r.request_first_at_us < end.saturating_sub(self.longest_us));
        let to = self
            .by_start
            .partition_point(|r| r.request_first_at_us <= e.request_first_at_us);
        let mut out: Vec<&Exchange> = self.by_start[from..to.max(from)]
            .iter()
            .copied()
            .filter(|r| r.response_last_at_us.unwrap_or(u64::MAX) >= end)
            .collect();
        out.sort_by_key(|r| r.id);
        out
    }
}

/// Links an ambiguous call to the requests in flight around it.
fn link_candidates(span: &mut Span, e: &Exchange, in_flight: &InFlight) {
    let candidates = in_flight.around(e);
    span.dropped_links_count = candidates.len().saturating_sub(MAX_LINKS) as u32;
    span.links = candidates
        .into_iter()
        .take(MAX_LINKS)
        .map(|r| Link {
            trace_id: trace_id(r),
            span_id: span_id(r),
            attributes: vec![KeyValue::string(
                "whyslow.link",
                "could have made this call",
            )],
            flags: SAMPLED,
            ..Default::default()
        })
        .collect();
}

/// `http.request.method`/`url.path`, or `db.system.name`/`db.query.text`.
fn protocol_attributes(e: &Exchange) -> Vec<KeyValue> {
    let (first, rest) = e.request.split_once(' ').unwrap_or((&e.request, ""));
    let mut out = Vec::new();
    match e.protocol {
        Protocol::Http1 | Protocol::Http2 => {
            out.push(KeyValue::string("http.request.method", first));
            out.push(KeyValue::string("url.path", rest));
            let version = if e.protocol == Protocol::Http2 {
                "2"
            } else {
                "1.1"
            };
            out.push(KeyValue::string("network.protocol.version", version));
            if let Some(code) = e.status.as_ref().and_then(|s| s.http()) {
                out.push(KeyValue::int("http.response.status_code", i64::from(code)));
            }
        }
        Protocol::Postgres | Protocol::Mysql | Protocol::Redis | Protocol::Memcached => {
            let system = match e.protocol {
                Protocol::Postgres => "postgresql",
                Protocol::Mysql => "mysql",
                Protocol::Redis => "redis",
                _ => "memcached",
            };
            out.push(KeyValue::string("db.system.name", system));
            out.push(KeyValue::string("db.query.text", e.request.as_str()));
            out.push(KeyValue::string("db.operation.name", first.to_uppercase()));
        }
        // OpenTelemetry's DNS conventions: `dns.question.name`.
        Protocol::Dns => {
            out.push(KeyValue::string("dns.question.name", rest));
            out.push(KeyValue::string("dns.question.type", first));
        }
        Protocol::Tls | Protocol::Unknown => {}
    }
    out
}

/// HTTP: "GET /path"; a statement or command: its normalized text, cut.
fn span_name(e: &Exchange) -> String {
    const MAX_NAME: usize = 120;
    let mut name = e.request.to_string();
    if name.len() > MAX_NAME {
        let cut = (0..=MAX_NAME)
            .rev()
            .find(|&i| name.is_char_boundary(i))
            .unwrap_or(0);
        name.truncate(cut);
        name.push('…');
    }
    name
}

/// Each finding as an event on the exchanges its evidence names.
fn finding_events(t: &Timeline, findings: &[Finding]) -> HashMap<u32, Vec<crate::proto::Event>> {
    let start: HashMap<u32, u64> = t
        .exchanges
        .iter()
        .map(|e| (e.id, e.request_first_at_us))
        .collect();
    let mut out: HashMap<u32, Vec<crate::proto::Event>> = HashMap::new();
    for f in findings {
        for ev in &f.evidence {
            let (id, note) = match ev {
                Evidence::Calls { inbound, note, .. } => (*inbound, note),
                Evidence::Exchange { id, note, .. } => (*id, note),
                Evidence::Queued { exchange, note, .. } => (*exchange, note),
                _ => continue,
            };
            let Some(&at) = start.get(&id) else { continue };
            out.entry(id).or_default().push(crate::proto::Event {
                time_unix_nano: at.saturating_mul(1000),
                name: f.kind.to_string(),
                attributes: vec![
                    KeyValue::string("whyslow.finding.summary", f.summary.as_str()),
                    KeyValue::string("whyslow.evidence", note.as_str()),
                    KeyValue::int(
                        "whyslow.time_lost_per_occurrence_us",
                        f.time_lost_per_occurrence_us as i64,
                    ),
                ],
                dropped_attributes_count: 0,
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::Value;
    use whyslow_model::{Connection, Status as ExchangeStatus};

    fn conn(id: u32, client: &str, server: &str) -> Connection {
        Connection::new(id, client.parse().unwrap(), server.parse().unwrap(), 0)
    }

    fn exchange(id: u32, connection: u32, request: &str, span: (u64, u64)) -> Exchange {
        let mut e = Exchange::new(connection, Protocol::Http1, request.into());
        e.id = id;
        e.request_first_at_us = span.0;
        e.request_last_at_us = span.0;
        e.response_first_at_us = Some(span.1);
        e.response_last_at_us = Some(span.1);
        e
    }

    #[test]
    fn requests_stay_under_a_collectors_message_limit() {
        // 20 000 requests whose names run long: past 4 MiB in 8 192 spans.
        let mut t = Timeline::default();
        t.connections
            .push(conn(1, "127.0.0.1:40000", "127.0.0.1:8080"));
        let name = format!("GET /{}", "x".repeat(400));
        for id in 0..20_000u32 {
            let at = u64::from(id) * 10;
            t.exchanges.push(exchange(id, 1, &name, (at, at + 5)));
        }
        let requests = export(&t, &[]);
        let spans: u64 = requests.iter().map(span_count).sum();
        assert_eq!(spans, 20_000);
        assert!(requests.len() > 3, "{} requests", requests.len());
        for r in &requests {
            assert!(
                r.encoded_len() <= MAX_REQUEST_BYTES + 1024,
                "{}",
                r.encoded_len()
            );
        }
    }

    /// A request (#1) with a call given to it (#2), an ambiguous call (#3)
    /// while it and another request (#4) waited.
    fn timeline() -> Timeline {
        let mut req = exchange(1, 1, "GET /checkout", (1_000, 9_000));
        req.status = Some(ExchangeStatus::Http(200));
        let mut call = exchange(2, 2, "SELECT * FROM items WHERE id = ?", (2_000, 3_000));
        call.protocol = Protocol::Postgres;
        call.role = ExchangeRole::Outbound;
        call.parent = Some(1);
        call.attribution = Some(Attribution::Inferred);
        call.pool_wait_from_us = Some(1_500);
        let mut lost = exchange(3, 2, "SELECT 1", (4_000, 5_000));
        lost.protocol = Protocol::Postgres;
        lost.role = ExchangeRole::Outbound;
        lost.attribution = Some(Attribution::Ambiguous);
        let other = exchange(4, 3, "GET /checkout", (3_500, 8_000));
        Timeline {
            connections: vec![
                conn(1, "127.0.0.1:40000", "127.0.0.1:8080"),
                conn(2, "127.0.0.1:40001", "127.0.0.1:5432"),
                conn(3, "127.0.0.1:40002", "127.0.0.1:8080"),
            ],
            exchanges: vec![req, call, lost, other],
        }
    }

    fn attr<'a>(span: &'a Span, key: &str) -> Option<&'a Value> {
        let kv = span.attributes.iter().find(|kv| kv.key == key)?;
        kv.value.as_ref()?.value.as_ref()
    }

    fn decoded(t: &Timeline) -> Vec<Span> {
        let bytes = file(t, &[]);
        let mut rest = &bytes[..];
        let mut spans = Vec::new();
        while !rest.is_empty() {
            let n = u32::from_be_bytes(rest[..4].try_into().unwrap()) as usize;
            let r = ExportTraceServiceRequest::decode(&rest[4..4 + n]).unwrap();
            spans.extend(
                r.resource_spans
                    .into_iter()
                    .flat_map(|rs| rs.scope_spans.into_iter().flat_map(|ss| ss.spans)),
            );
            rest = &rest[4 + n..];
        }
        spans.sort_by_key(|s| s.start_time_unix_nano);
        spans
    }

    #[test]
    fn a_call_is_a_client_span_under_its_request_in_its_trace() {
        let spans = decoded(&timeline());
        assert_eq!(spans.len(), 4);
        let (req, call) = (&spans[0], &spans[1]);
        assert_eq!(req.kind, span_kind::SERVER);
        assert!(req.parent_span_id.is_empty());
        assert_eq!(req.start_time_unix_nano, 1_000_000);
        assert_eq!(call.kind, span_kind::CLIENT);
        assert_eq!(call.parent_span_id, req.span_id);
        assert_eq!(call.trace_id, req.trace_id);
        assert_eq!(
            attr(call, "db.system.name"),
            Some(&Value::StringValue("postgresql".into()))
        );
        assert_eq!(
            attr(call, "whyslow.pool_wait_us"),
            Some(&Value::IntValue(500))
        );
        assert_eq!(
            attr(req, "http.response.status_code"),
            Some(&Value::IntValue(200))
        );
        assert!(spans.iter().all(|s| s.span_id.iter().any(|&b| b != 0)));
        assert!(spans
            .iter()
            .all(|s| s.trace_id.len() == 16 && s.span_id.len() == 8));
    }

    #[test]
    fn an_ambiguous_call_is_a_root_linked_to_the_requests_that_waited() {
        let spans = decoded(&timeline());
        let lost = &spans[3];
        assert_eq!(attr(lost, "whyslow.exchange.id"), Some(&Value::IntValue(3)));
        assert!(lost.parent_span_id.is_empty());
        let linked: Vec<&[u8]> = lost.links.iter().map(|l| &l.span_id[..]).collect();
        assert_eq!(linked, vec![&spans[0].span_id[..], &spans[2].span_id[..]]);
        assert_ne!(lost.trace_id, spans[0].trace_id);
    }

    #[test]
    fn a_request_keeps_the_trace_it_carried() {
        let mut t = timeline();
        t.exchanges[0].trace = Some(whyslow_model::TraceId(0xabc));
        let spans = decoded(&t);
        assert_eq!(
            u128::from_be_bytes(spans[0].trace_id[..].try_into().unwrap()),
            0xabc
        );
        assert_eq!(spans[1].trace_id, spans[0].trace_id);
    }

    #[test]
    fn many_spans_go_in_several_bounded_requests() {
        let mut t = timeline();
        t.exchanges = (0..(MAX_SPANS_PER_FRAME as u32 * 2 + 5))
            .map(|i| {
                exchange(
                    i + 10,
                    1,
                    "GET /",
                    (u64::from(i) * 10, u64::from(i) * 10 + 5),
                )
            })
            .collect();
        let requests = export(&t, &[]);
        assert_eq!(requests.len(), 3);
        assert_eq!(decoded(&t).len(), t.exchanges.len());
        assert!(file(&Timeline::default(), &[]).is_empty());
    }
}
