//! OpenTelemetry traces out of what whyslow saw: each inbound request a
//! server span, each backing call given to it a client span under it, the
//! calls no request could be told apart for as spans of their own traces
//! linked to the requests that could have made them, and findings as span
//! events on the requests they hit. A capture of a service that has no
//! tracing becomes a trace people open in Jaeger or Tempo.
//!
//! And traces in (`import`): the spans a team already has, as the
//! timeline every detector reads.

mod export;
mod export_json;
pub mod import;
pub mod proto;
pub mod proto_signals;

pub use export::{encoded, export, file, frames, span_count, MAX_SPANS_PER_FRAME};
pub use export_json::json_lines;

/// `telemetry.sdk.name` of the spans whyslow writes from the wire: read
/// back, their times are the wire's and their calls keep their connections.
pub const WIRE_SDK: &str = "whyslow";

/// The requests as a file named `path` holds them: OTLP/JSON lines when it
/// ends in `.json` or `.jsonl`, else protobuf frames.
pub fn file_named(
    path: &std::path::Path,
    requests: &[proto::ExportTraceServiceRequest],
) -> Vec<u8> {
    match path
        .extension()
        .is_some_and(|x| x == "json" || x == "jsonl")
    {
        true => json_lines(requests),
        false => frames(requests),
    }
}
