//! One HTTP/2 stream as an exchange in progress: what its request and
//! response frames carried, counted, with only the label kept of its headers.

use super::grpc::Messages;
use super::hpack::Fields;
use crate::Span;
use whyslow_model::{Direction, Exchange, Protocol, Status, TraceId};

/// Label of a stream whose request headers could not be read.
const UNKNOWN_LABEL: &str = "? ?";

#[derive(Debug, Default)]
pub struct Stream {
    /// "METHOD /path", once the request headers are decoded.
    pub label: Option<String>,
    /// Digest of the query string.
    pub digest: Option<u64>,
    /// Client frames (HEADERS, CONTINUATION, DATA) until END_STREAM.
    pub request: Span,
    pub request_done: bool,
    /// Server frames until END_STREAM or RST_STREAM, interim 1xx included.
    pub response: Span,
    pub response_done: bool,
    /// Final (non-1xx) status.
    pub status: Option<u16>,
    pub encoded: bool,
    /// The request's `traceparent` trace id.
    pub trace: Option<TraceId>,
    /// A field of the request's headers came from a table entry from
    /// before the capture (`:path` among them, perhaps): which call it was,
    /// and with what parameters, is not known.
    pub headers_unknown: bool,
    /// A gRPC call (its request's `content-type`): its messages are read.
    pub grpc: bool,
    /// Its response says gRPC (`content-type`): the answer's messages are
    /// read, where the request's headers predate the capture.
    pub grpc_response: bool,
    pub grpc_status: Option<u8>,
    pub request_messages: Messages,
    pub response_messages: Messages,
}

impl Stream {
    pub fn new(label: Option<String>) -> Self {
        Stream {
            label,
            ..Stream::default()
        }
    }

    /// The message the sender of `dir` sends on this stream.
    pub fn span(&mut self, dir: Direction) -> &mut Span {
        match dir {
            Direction::ToServer => &mut self.request,
            Direction::ToClient => &mut self.response,
        }
    }

    /// The gRPC messages the sender of `dir` sends, for a gRPC call.
    pub fn messages(&mut self, dir: Direction) -> Option<&mut Messages> {
        match dir {
            Direction::ToServer if self.grpc => Some(&mut self.request_messages),
            Direction::ToClient if self.grpc || self.grpc_response => {
                Some(&mut self.response_messages)
            }
            _ => None,
        }
    }

    pub fn done(&self, dir: Direction) -> bool {
        match dir {
            Direction::ToServer => self.request_done,
            Direction::ToClient => self.response_done,
        }
    }

    pub fn done_mut(&mut self, dir: Direction) -> &mut bool {
        match dir {
            Direction::ToServer => &mut self.request_done,
            Direction::ToClient => &mut self.response_done,
        }
    }

    /// The request's header block (the first one; later ones are trailers).
    pub fn request_headers(&mut self, fields: Fields) {
        if self.label.is_none() {
            self.trace = fields.trace.and_then(Result::ok);
            self.headers_unknown = fields.placeholder;
            self.grpc = fields.grpc;
            if self.grpc {
                self.request_messages = Messages::hashed();
            }
            let (label, digest) = super::label(fields);
            self.label = Some(label);
            self.digest = digest;
        }
    }

    /// A response header block: interim (1xx), final, or trailers (a gRPC
    /// call's status; alone, in a trailers-only answer, with the headers).
    pub fn response_headers(&mut self, fields: &Fields) {
        if fields.grpc_status.is_some() {
            self.grpc_status = fields.grpc_status;
        }
        self.grpc_response |= fields.grpc;
        match fields.status {
            Some(code) if code >= 200 && self.status.is_none() => {
                self.status = Some(code);
                self.encoded = fields.encoded;
            }
            _ => {}
        }
    }

    pub fn exchange(self, connection: u32, id: u32) -> Exchange {
        let label = self.label.unwrap_or_else(|| UNKNOWN_LABEL.into());
        let mut e = Exchange::new(connection, Protocol::Http2, label.into());
        let resp = (!self.response.is_empty()).then_some(self.response);
        e.stream = Some(id);
        e.status = self.status.map(Status::Http);
        e.request_first_at_us = self.request.first_at;
        e.request_last_at_us = self.request.last_at;
        e.request_packets = self.request.packets();
        e.request_bytes = self.request.bytes;
        e.response_first_at_us = resp.map(|s| s.first_at);
        e.response_last_at_us = resp.map(|s| s.last_at);
        e.response_packets = resp.map(|s| s.packets());
        e.response_bytes = self.response.bytes;
        e.response_encoded = self.encoded;
        e.params_digest = self.digest;
        e.trace = self.trace;
        // Only gRPC sends grpc-status: taken where a content-type said
        // gRPC, or where the request's could not be read.
        let maybe_grpc = self.grpc || self.grpc_response || self.headers_unknown;
        if let Some(code) = self.grpc_status.filter(|_| maybe_grpc) {
            e.status = Some(Status::Grpc(code));
        }
        if self.grpc {
            // The message is the call's parameters.
            e.params_digest = self.request_messages.digest();
            e.params_unknown = e.params_digest.is_none();
        }
        if self.grpc || self.grpc_response {
            // The answer's messages are its rows.
            let m = &self.response_messages;
            e.rows = (!m.lost).then_some(u64::from(m.count));
        }
        if self.headers_unknown {
            (e.params_digest, e.params_unknown) = (None, true);
        }
        e
    }
}

/// Adds the bytes of `src` (seen before, or as the start of, what `dst`
/// gets next) to `dst`.
pub fn absorb(dst: &mut Span, src: &Span) {
    if src.is_empty() {
        return;
    }
    if dst.is_empty() {
        dst.first_at = src.first_at;
        dst.first_pkt = src.first_pkt;
    }
    dst.last_at = src.last_at;
    dst.last_pkt = src.last_pkt;
    dst.bytes = dst.bytes.saturating_add(src.bytes);
}
