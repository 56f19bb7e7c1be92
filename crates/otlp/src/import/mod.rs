//! Traces in: OTLP spans read into the timeline every detector works on.
//! Files as the OpenTelemetry Collector's file exporter writes them
//! (OTLP/JSON, one `ExportTraceServiceRequest` per line; protobuf, each
//! request after its 4-byte big-endian length; either gzip-compressed) and
//! OTLP/HTTP bodies (`receive`). Read frame by frame or line by line:
//! memory is the spans kept (at most `MAX_SPANS`), not the file.

pub mod grpc;
mod json;
pub mod record;
mod timeline;

use crate::proto::{self, ExportTraceServiceRequest};
use crate::WIRE_SDK;
use prost::Message;
use record::{AttrValue, RawSpan};
pub use record::{SpanRecord, MAX_ATTRIBUTE_BYTES};
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;
pub use timeline::{to_timeline, to_timeline_of, SpanTimeline, MAX_ANCESTORS};

/// Spans kept; past it the rest are counted and left out (a note says so).
/// A kept span is ~150 bytes: 10^6 of them, ~150 MB.
pub const MAX_SPANS: usize = 1_000_000;
/// Largest request (a protobuf frame, a JSON line, an HTTP body) read:
/// the Collector's default batch is far smaller. A larger length field is
/// corruption, not a request to allocate.
pub const MAX_REQUEST_BYTES: usize = 64 << 20;
/// Notes kept about bad input; past it they are counted.
const MAX_NOTES: usize = 20;

/// Every span read, and what could not be.
#[derive(Debug, Default)]
pub struct SpanSet {
    pub spans: Vec<SpanRecord>,
    /// Service names, indexed by `SpanRecord::service`.
    pub services: Vec<String>,
    service_index: HashMap<String, u32>,
    /// Export requests read.
    pub requests: u64,
    /// Spans past `MAX_SPANS`, not kept.
    pub dropped: u64,
    /// Bad input that did not stop the reading, each once.
    pub notes: Vec<String>,
    notes_more: u64,
}

/// Encodings an OTLP body or file may be in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    Json,
    Protobuf,
}

impl SpanSet {
    pub fn note(&mut self, what: String) {
        if self.notes.len() < MAX_NOTES {
            self.notes.push(what);
        } else {
            self.notes_more += 1;
        }
    }

    /// The notes, with how many more were left out.
    pub fn all_notes(&self) -> Vec<String> {
        let mut out = self.notes.clone();
        if self.dropped > 0 {
            out.push(format!(
                "{} spans past the first {MAX_SPANS} were not read",
                self.dropped
            ));
        }
        if self.notes_more > 0 {
            out.push(format!("{} more problems like these", self.notes_more));
        }
        out
    }

    fn service(&mut self, name: &str) -> u32 {
        if let Some(&i) = self.service_index.get(name) {
            return i;
        }
        let i = self.services.len() as u32;
        self.services.push(name.to_string());
        self.service_index.insert(name.to_string(), i);
        i
    }

    fn push(&mut self, raw: &RawSpan, source: &Source) {
        if self.spans.len() >= MAX_SPANS {
            self.dropped += 1;
            return;
        }
        if raw.trace_id == 0 || raw.span_id == 0 {
            self.note("a span without a trace or span id: left out".into());
            return;
        }
        let service = self.service(&source.service);
        let mut span = record::record(raw, service);
        span.wire = source.wire;
        self.spans.push(span);
    }

    /// One `ExportTraceServiceRequest` in protobuf.
    pub fn add_protobuf(&mut self, bytes: &[u8]) -> Result<(), String> {
        let req = ExportTraceServiceRequest::decode(bytes)
            .map_err(|e| format!("not an OTLP protobuf request: {e}"))?;
        self.requests += 1;
        for rs in &req.resource_spans {
            let attrs = rs.resource.as_ref().map(|r| r.attributes.as_slice());
            let source = Source::of(attrs.unwrap_or_default().iter().map(proto_kv));
            for span in rs.scope_spans.iter().flat_map(|s| &s.spans) {
                match proto_span(span) {
                    Ok(raw) => self.push(&raw, &source),
                    Err(e) => self.note(e),
                }
            }
        }
        Ok(())
    }

    /// One `ExportTraceServiceRequest` in OTLP/JSON.
    pub fn add_json(&mut self, bytes: &[u8]) -> Result<(), String> {
        let req: json::Request =
            serde_json::from_slice(bytes).map_err(|e| format!("not an OTLP/JSON request: {e}"))?;
        self.requests += 1;
        for rs in &req.resource_spans {
            let attrs = json::attributes(&rs.resource.attributes);
            let source = Source::of(attrs.into_iter());
            for span in rs.scope_spans.iter().flat_map(|s| &s.spans) {
                match span.raw() {
                    Ok(raw) => self.push(&raw, &source),
                    Err(e) => self.note(format!("a span left out: {e}")),
                }
            }
        }
        Ok(())
    }

    /// An OTLP/HTTP body (`receive`), gzip-compressed or not.
    pub fn add_body(&mut self, body: &[u8], encoding: Encoding, gzip: bool) -> Result<(), String> {
        let inflated;
        let body = if gzip {
            let mut out = Vec::new();
            flate2::read::GzDecoder::new(body)
                .take(MAX_REQUEST_BYTES as u64 + 1)
                .read_to_end(&mut out)
                .map_err(|e| format!("a gzip body that does not inflate: {e}"))?;
            if out.len() > MAX_REQUEST_BYTES {
                return Err(format!("a body inflating past {MAX_REQUEST_BYTES} bytes"));
            }
            inflated = out;
            &inflated[..]
        } else {
            body
        };
        match encoding {
            Encoding::Json => self.add_json(body),
            Encoding::Protobuf => self.add_protobuf(body),
        }
    }
}

fn proto_kv(kv: &proto::KeyValue) -> (String, AttrValue) {
    let value = match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
        Some(proto::Value::StringValue(s)) => {
            AttrValue::Str(record::cut_to(s, MAX_ATTRIBUTE_BYTES).to_string())
        }
        Some(proto::Value::IntValue(n)) => AttrValue::Int(*n),
        Some(proto::Value::BoolValue(b)) => AttrValue::Bool(*b),
        Some(proto::Value::DoubleValue(d)) => AttrValue::Double(*d),
        None => AttrValue::Other,
    };
    (kv.key.clone(), value)
}

fn id_bytes(bytes: &[u8], len: usize, what: &str) -> Result<u128, String> {
    match bytes.len() {
        0 => Ok(0),
        n if n == len => Ok(bytes.iter().fold(0u128, |a, b| a << 8 | u128::from(*b))),
        n => Err(format!("a span left out: {what} of {n} bytes, not {len}")),
    }
}

fn proto_span(s: &proto::Span) -> Result<RawSpan, String> {
    Ok(RawSpan {
        trace_id: id_bytes(&s.trace_id, 16, "trace id")?,
        span_id: id_bytes(&s.span_id, 8, "span id")? as u64,
        parent_span_id: id_bytes(&s.parent_span_id, 8, "parent span id")? as u64,
        name: s.name.clone(),
        kind: s.kind,
        start_ns: s.start_time_unix_nano,
        end_ns: s.end_time_unix_nano,
        attributes: s.attributes.iter().map(proto_kv).collect(),
        error: s.status.as_ref().is_some_and(|st| st.code == 2),
    })
}

/// What a resource says of its spans' source.
struct Source {
    /// `service.name`, as the SDKs default it when unset.
    service: String,
    /// whyslow wrote these spans from what it saw on the wire.
    wire: bool,
}

impl Source {
    fn of(attrs: impl Iterator<Item = (String, AttrValue)>) -> Source {
        let mut source = Source {
            service: "unknown_service".into(),
            wire: false,
        };
        for (k, v) in attrs {
            match (k.as_str(), v) {
                ("service.name", AttrValue::Str(s)) => {
                    source.service = s.chars().take(200).collect()
                }
                ("telemetry.sdk.name", AttrValue::Str(s)) => source.wire = s == WIRE_SDK,
                _ => {}
            }
        }
        source
    }
}

/// Whether a file starts like an OTLP trace file this module reads: a JSON
/// object, a gzip stream, or a protobuf frame whose message starts with
/// field 1 (`resource_spans`) — never a pcap or pcapng magic.
pub fn looks_like_otlp(head: &[u8]) -> bool {
    match head {
        [b'{', ..] | [0x1f, 0x8b, ..] => true,
        [a, b, c, d, 0x0a, ..] => {
            let len = u32::from_be_bytes([*a, *b, *c, *d]) as usize;
            len > 0 && len <= MAX_REQUEST_BYTES
        }
        _ => head.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{'),
    }
}

/// Reads an OTLP trace file. Err: nothing in it could be read as OTLP.
/// Bad requests after good ones are notes; a cut file ends the reading
/// with a note and what came before.
pub fn read_file(path: &Path) -> Result<SpanSet, String> {
    let file = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut set = SpanSet::default();
    let outcome = read_any(BufReader::new(file), &mut set);
    match outcome {
        Err(e) if set.requests == 0 => Err(format!("{}: {e}", path.display())),
        Err(e) => {
            set.note(e);
            Ok(set)
        }
        Ok(()) if set.requests == 0 => {
            Err(format!("{}: no OTLP trace request in it", path.display()))
        }
        Ok(()) => Ok(set),
    }
}

/// JSON lines or protobuf frames, told apart by the first byte.
fn read_stream(mut r: impl BufRead, set: &mut SpanSet) -> Result<(), String> {
    let first = r
        .fill_buf()
        .map_err(|e| e.to_string())?
        .iter()
        .find(|b| !b.is_ascii_whitespace())
        .copied();
    match first {
        None => Ok(()),
        Some(b'{') => read_json_lines(r, set),
        Some(_) => read_frames(r, set),
    }
}

fn read_json_lines(r: impl BufRead, set: &mut SpanSet) -> Result<(), String> {
    let mut line = Vec::new();
    let mut r = r.take(u64::MAX);
    for n in 1.. {
        line.clear();
        r.set_limit(MAX_REQUEST_BYTES as u64 + 1);
        let got = r.read_until(b'\n', &mut line).map_err(|e| e.to_string())?;
        if got == 0 {
            return Ok(());
        }
        if line.len() > MAX_REQUEST_BYTES {
            return Err(format!("line {n} is longer than {MAX_REQUEST_BYTES} bytes"));
        }
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        if let Err(e) = set.add_json(&line) {
            set.note(format!("line {n}: {e}"));
        }
    }
    Ok(())
}

fn read_frames(mut r: impl Read, set: &mut SpanSet) -> Result<(), String> {
    let mut frame = Vec::new();
    for n in 1.. {
        let mut len = [0u8; 4];
        match read_full(&mut r, &mut len)? {
            0 => return Ok(()),
            4 => {}
            _ => return Err(format!("frame {n}: cut in its length")),
        }
        let len = u32::from_be_bytes(len) as usize;
        if len > MAX_REQUEST_BYTES {
            return Err(format!(
                "frame {n}: a length of {len} bytes, past {MAX_REQUEST_BYTES}: not a trace file, or corrupt"
            ));
        }
        frame.resize(len, 0);
        if read_full(&mut r, &mut frame)? < len {
            return Err(format!("frame {n}: cut short"));
        }
        if let Err(e) = set.add_protobuf(&frame) {
            set.note(format!("frame {n}: {e}"));
        }
    }
    Ok(())
}

/// Reads until `buf` is full or the input ends: the bytes read.
fn read_full(r: &mut impl Read, buf: &mut [u8]) -> Result<usize, String> {
    let mut got = 0;
    while got < buf.len() {
        match r.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.to_string()),
        }
    }
    Ok(got)
}

/// Reads OTLP from bytes (a fuzz target's input, a test's): file rules.
pub fn read_bytes(bytes: &[u8]) -> SpanSet {
    let mut set = SpanSet::default();
    if let Err(e) = read_any(bytes, &mut set) {
        set.note(e);
    }
    set
}

/// A file's bytes, inflated first when they start as gzip.
fn read_any(mut r: impl BufRead, set: &mut SpanSet) -> Result<(), String> {
    let gzip = r
        .fill_buf()
        .map_err(|e| e.to_string())?
        .starts_with(&[0x1f, 0x8b]);
    if gzip {
        let inflated = BufReader::new(flate2::read::MultiGzDecoder::new(r));
        read_stream(inflated, set)
    } else {
        read_stream(r, set)
    }
}

/// Every decoder on one input, for the fuzz targets: as a file (JSON
/// lines, frames, gzip) and into a timeline, or as HTTP bodies.
pub fn fuzz_file(data: &[u8]) {
    let set = read_bytes(data);
    let _ = to_timeline(&set);
}

pub fn fuzz_body(data: &[u8]) {
    let mut set = SpanSet::default();
    // As a gRPC body too: its messages, each as the protobuf it carries.
    for m in grpc::messages(data).unwrap_or_default() {
        let _ = set.add_body(m.bytes, Encoding::Protobuf, m.compressed);
    }
    for (encoding, gzip) in [
        (Encoding::Json, false),
        (Encoding::Protobuf, false),
        (Encoding::Protobuf, true),
    ] {
        let _ = set.add_body(data, encoding, gzip);
    }
    let _ = to_timeline(&set);
}

#[cfg(test)]
mod tests;
