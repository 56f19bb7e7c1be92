//! HTTP/2 (h2c, RFC 9113) exchanges from a byte stream: one exchange per
//! client-initiated stream, completed in the order streams end.
//!
//! Hand-written rather than built on an endpoint library (h2): a capture
//! may start mid-connection or lose bytes, so the parser must accept frames
//! without the handshake, answer HPACK references to entries it never saw
//! with placeholders (see `hpack`), and skip DATA payloads by their length
//! without buffering them. Only header blocks are buffered, bounded.

mod frame;
mod grpc;
mod hpack;
#[cfg(test)]
mod hpack_tests;
mod huffman;
mod stream;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_grpc;
#[cfg(test)]
mod tests_hostile;

use crate::digest::ParamDigest;
use crate::{Sniff, Span, Start, StreamAnalyzer};
use frame::{FrameHeader, Framer, Gap, Step};
use hpack::{Decoder, Fields};
use std::collections::BTreeMap;
use stream::Stream;
use whyslow_model::{Direction, Exchange};

pub use frame::{MAX_KEPT_PAYLOAD, PREFACE};
pub use hpack::MAX_TABLE_BYTES;

/// Streams tracked at once. SETTINGS_MAX_CONCURRENT_STREAMS is commonly
/// 100 (nginx, Go) to 1000 (Envoy's default is 2^31-1 but deployments cap
/// it); past this, new streams are not tracked until others end.
pub const MAX_OPEN_STREAMS: usize = 1000;
/// Longest header block (HEADERS + CONTINUATIONs) decoded; see
/// `MAX_KEPT_PAYLOAD` for why 64 KiB is far above real header blocks.
pub const MAX_HEADER_BLOCK: usize = 64 * 1024;
/// Most client bytes `sniff` is given (the sniffer's window).
use crate::sniff::SNIFF_BYTES as SNIFF_WINDOW;
/// Frame headers in a row a mid-stream sniff insists on.
const SNIFF_FRAMES: usize = 2;

/// A header block being assembled from HEADERS/PUSH_PROMISE + CONTINUATION.
#[derive(Debug)]
struct Block {
    stream: u32,
    kind: u8,
    end_stream: bool,
    bytes: Vec<u8>,
    /// Part of it was not kept (too long): it cannot be decoded.
    lost: bool,
}

impl Block {
    fn lost(stream: u32) -> Self {
        Block {
            stream,
            kind: frame::HEADERS,
            end_stream: false,
            bytes: Vec::new(),
            lost: true,
        }
    }
}

/// Parsing state of one direction.
#[derive(Debug)]
struct Side {
    framer: Framer,
    hpack: Decoder,
    block: Option<Block>,
    /// Bytes of the frame header being read, before its stream is known.
    header_span: Span,
    /// Stream whose message the current frame's bytes belong to.
    target: Option<u32>,
    /// No frame seen yet (mid-stream starts check the first one).
    first_frame: bool,
    stopped: bool,
}

impl Side {
    fn new(preface: bool, mid_stream: bool) -> Self {
        Side {
            framer: Framer::new(preface, mid_stream),
            hpack: Decoder::new(mid_stream),
            block: None,
            header_span: Span::default(),
            target: None,
            first_frame: true,
            stopped: false,
        }
    }
}

/// Incremental HTTP/2 (h2c) analyzer for one TCP connection.
#[derive(Debug)]
pub struct Http2Analyzer {
    connection: u32,
    mid_stream: bool,
    client: Side,
    server: Side,
    streams: BTreeMap<u32, Stream>,
    /// Highest client stream id opened so far.
    last_stream: u32,
    done: Vec<Exchange>,
    error: Option<String>,
}

impl Http2Analyzer {
    pub fn new(connection: u32, start: Start) -> Self {
        let mid_stream = start == Start::MidStream;
        Http2Analyzer {
            connection,
            mid_stream,
            client: Side::new(true, mid_stream),
            server: Side::new(false, mid_stream),
            streams: BTreeMap::new(),
            last_stream: 0,
            done: Vec::new(),
            error: None,
        }
    }

    /// After an HTTP/1.1 `Upgrade: h2c` request answered by 101: the client
    /// sends the preface, and stream 1 carries the response to the request
    /// already sent (RFC 7540 §3.2; half-closed on the client side).
    pub fn after_h2c_upgrade(
        connection: u32,
        upgrade_request_label: String,
        upgrade_request: Span,
    ) -> Self {
        let mut a = Http2Analyzer::new(connection, Start::Beginning);
        let mut s = Stream::new(upgrade_request_label.into());
        s.request = upgrade_request;
        s.request_done = true;
        a.streams.insert(1, s);
        a.last_stream = 1;
        a
    }

    /// Do these first client bytes (from `start`) look like HTTP/2 (h2c)?
    /// Beginning: the preface. Mid-stream: the preface, or frame headers in
    /// a row from offset 0, each as a client sends them.
    pub fn sniff(client: &[u8], start: Start) -> Sniff {
        if start == Start::Beginning || client.first() == Some(&PREFACE[0]) {
            let n = client.len().min(PREFACE.len());
            return match client[..n] == PREFACE[..n] {
                false => Sniff::No,
                true if n < PREFACE.len() => Sniff::NeedMore,
                true => Sniff::Yes,
            };
        }
        let mut at = 0usize;
        for _ in 0..SNIFF_FRAMES {
            let end = at.saturating_add(frame::HEADER_LEN);
            if end > SNIFF_WINDOW {
                return Sniff::No;
            }
            let Some(bytes) = client.get(at..end).and_then(|b| b.try_into().ok()) else {
                return Sniff::NeedMore;
            };
            let h = FrameHeader::parse(bytes);
            if !h.plausible(true) {
                return Sniff::No;
            }
            at = end.saturating_add(h.len as usize);
        }
        Sniff::Yes
    }

    fn fail(&mut self, msg: String) {
        if self.error.is_none() {
            self.error = Some(msg);
        }
    }

    fn side(&mut self, dir: Direction) -> &mut Side {
        match dir {
            Direction::ToServer => &mut self.client,
            Direction::ToClient => &mut self.server,
        }
    }

    fn feed(&mut self, dir: Direction, mut data: &[u8], at: u64, pkt: u64) -> Result<(), String> {
        loop {
            let side = self.side(dir);
            let (preface, header) = (side.framer.in_preface(), side.framer.in_header());
            let frame = side.framer.current();
            let (n, step) = side.framer.step(data)?;
            if n > 0 && !preface {
                if header {
                    side.header_span.add(n, at, pkt);
                } else if let Some(id) = side.target {
                    if let Some(s) = self.streams.get_mut(&id) {
                        s.span(dir).add(n, at, pkt);
                        if let (Some(m), Some(f)) = (s.messages(dir), frame) {
                            match (f.kind, f.has(frame::PADDED)) {
                                // Padding would read as message bytes.
                                (frame::DATA, true) => m.lose(),
                                (frame::DATA, false) => m.feed(&data[..n]),
                                _ => {}
                            }
                        }
                    }
                }
            }
            data = &data[n..];
            match step {
                Step::Need => return Ok(()),
                Step::Preface => {}
                Step::Header(h) => self.frame_start(dir, h)?,
                Step::Done(h) => self.frame_done(dir, h)?,
            }
        }
    }

    /// A frame header is read: which stream's message its bytes belong to.
    fn frame_start(&mut self, dir: Direction, h: FrameHeader) -> Result<(), String> {
        let client = dir == Direction::ToServer;
        let mid_stream = self.mid_stream;
        let side = self.side(dir);
        if std::mem::take(&mut side.first_frame) && mid_stream {
            if !h.plausible(client) {
                return Err(format!(
                    "{}→{} bytes do not start at an HTTP/2 frame",
                    dir.sender(),
                    dir.receiver()
                ));
            }
            if h.kind == frame::CONTINUATION {
                // The block began before the capture: its rest is skipped.
                side.block = Some(Block::lost(h.stream));
            }
        }
        let in_block = side.block.as_ref().map(|b| b.stream);
        if in_block.is_some() != (h.kind == frame::CONTINUATION)
            || in_block.is_some_and(|s| s != h.stream)
        {
            return Err(format!(
                "HTTP/2 frame type {} on stream {} breaks a header block",
                h.kind, h.stream
            ));
        }
        if client && h.kind == frame::HEADERS && h.stream % 2 == 1 && h.stream > self.last_stream {
            self.last_stream = h.stream;
            self.open_stream(h.stream);
        }
        let counted = matches!(
            h.kind,
            frame::DATA | frame::HEADERS | frame::CONTINUATION | frame::RST_STREAM
        );
        let header_span = std::mem::take(&mut self.side(dir).header_span);
        let target = match self.streams.get_mut(&h.stream) {
            Some(s) if counted && h.stream != 0 && !s.done(dir) => {
                stream::absorb(s.span(dir), &header_span);
                Some(h.stream)
            }
            _ => None,
        };
        self.side(dir).target = target;
        Ok(())
    }

    fn open_stream(&mut self, id: u32) {
        if self.streams.len() >= MAX_OPEN_STREAMS {
            self.fail(format!(
                "more than {MAX_OPEN_STREAMS} open HTTP/2 streams; new ones not tracked"
            ));
            return;
        }
        self.streams.insert(id, Stream::new(None));
    }

    fn frame_done(&mut self, dir: Direction, h: FrameHeader) -> Result<(), String> {
        self.side(dir).target = None;
        match h.kind {
            frame::HEADERS | frame::PUSH_PROMISE | frame::CONTINUATION => {
                self.add_fragment(dir, h)?
            }
            frame::DATA if h.has(frame::END_STREAM) => self.end_message(dir, h.stream),
            frame::RST_STREAM => {
                if let Some(s) = self.streams.remove(&h.stream) {
                    self.emit(h.stream, s);
                }
            }
            frame::SETTINGS if !h.has(frame::ACK) => self.settings(dir),
            _ => {}
        }
        Ok(())
    }

    /// The peer's SETTINGS_HEADER_TABLE_SIZE bounds the other side's encoder.
    fn settings(&mut self, dir: Direction) {
        let Some(payload) = self.side(dir).framer.payload() else {
            return;
        };
        let size = frame::settings(payload)
            .filter(|&(id, _)| id == frame::SETTINGS_HEADER_TABLE_SIZE)
            .last()
            .map(|(_, v)| v);
        if let Some(size) = size {
            self.side(dir.reverse()).hpack.set_allowed(size);
        }
    }

    fn add_fragment(&mut self, dir: Direction, h: FrameHeader) -> Result<(), String> {
        let side = self.side(dir);
        if h.kind != frame::CONTINUATION {
            side.block = Some(Block {
                stream: h.stream,
                kind: h.kind,
                end_stream: h.kind == frame::HEADERS && h.has(frame::END_STREAM),
                bytes: Vec::new(),
                lost: false,
            });
        }
        let Side { framer, block, .. } = side;
        let Some(block) = block.as_mut() else {
            return Ok(());
        };
        let mut note = None;
        match framer.payload() {
            None => note = Some(format!("HTTP/2 header frame of {} bytes skipped", h.len)),
            Some(payload) => {
                let fragment = frame::fragment(&h, payload)?;
                if block.bytes.len().saturating_add(fragment.len()) > MAX_HEADER_BLOCK {
                    note = Some(format!(
                        "HTTP/2 header block over {MAX_HEADER_BLOCK} bytes skipped"
                    ));
                } else if !block.lost {
                    block.bytes.extend_from_slice(fragment);
                }
            }
        }
        if note.is_some() {
            block.lost = true;
            block.bytes = Vec::new();
        }
        if let Some(note) = note {
            self.fail(note);
        }
        if h.has(frame::END_HEADERS) {
            if let Some(block) = self.side(dir).block.take() {
                self.block_done(dir, block);
            }
        }
        Ok(())
    }

    fn block_done(&mut self, dir: Direction, block: Block) {
        let mut fields = Fields::default();
        let hpack = &mut self.side(dir).hpack;
        let decoded = if block.lost {
            hpack.lose_sync();
            Ok(())
        } else {
            hpack.decode(&block.bytes, &mut fields)
        };
        if let Err(e) = decoded {
            self.fail(e);
        }
        if fields.placeholder {
            self.fail("HPACK: a header refers to a table entry from before the capture".into());
        }
        if block.kind != frame::HEADERS {
            return; // pushed streams are not tracked
        }
        let Some(s) = self.streams.get_mut(&block.stream) else {
            return;
        };
        match dir {
            Direction::ToServer => s.request_headers(fields),
            Direction::ToClient => s.response_headers(&fields),
        }
        if block.end_stream {
            self.end_message(dir, block.stream);
        }
    }

    fn end_message(&mut self, dir: Direction, id: u32) {
        let Some(s) = self.streams.get_mut(&id) else {
            return;
        };
        *s.done_mut(dir) = true;
        if s.request_done && s.response_done {
            if let Some(s) = self.streams.remove(&id) {
                self.emit(id, s);
            }
        }
    }

    fn emit(&mut self, id: u32, s: Stream) {
        let e = s.exchange(self.connection, id);
        self.done.push(e);
    }
}

/// "METHOD /path" of a request's pseudo-headers and the digest of its query
/// string: `:path` lives only as long as this call.
fn label(fields: Fields) -> (String, Option<u64>) {
    let method = fields.method.filter(|m| {
        !m.is_empty()
            && m.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
    });
    let method = method.as_deref().unwrap_or(hpack::PLACEHOLDER);
    let Some(path) = fields.path.filter(|p| p != hpack::PLACEHOLDER) else {
        return (format!("{method} {}", hpack::PLACEHOLDER), None);
    };
    let mut d = ParamDigest::new();
    let label = match grpc_method(&path).filter(|_| fields.grpc) {
        // A gRPC method names code, not data (its parameters travel in
        // the messages): shown whole, as tshark shows it.
        Some(method_path) => format!("{method} {method_path}"),
        None => crate::http1::request_label_digest(method, &path, &mut d),
    };
    (label, (!d.is_empty()).then(|| d.finish()))
}

/// Longest gRPC method path kept whole: the protobuf names of a package,
/// service and method, far shorter in every real API; longer is data.
const MAX_GRPC_METHOD: usize = 200;

/// `path` if it is a gRPC method, "/package.Service/Method" (the gRPC over
/// HTTP/2 spec's `Path`): two non-empty segments of identifier characters,
/// no query. Anything else is templated as any path is.
fn grpc_method(path: &str) -> Option<&str> {
    let rest = path.strip_prefix('/')?;
    let (service, method) = rest.split_once('/')?;
    let name = |s: &str| {
        !s.is_empty()
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'.')
    };
    (path.len() <= MAX_GRPC_METHOD && name(service) && name(method)).then_some(path)
}

impl StreamAnalyzer for Http2Analyzer {
    fn on_data(&mut self, direction: Direction, data: &[u8], at_us: u64, packet: u64) {
        if self.side(direction).stopped {
            return;
        }
        if let Err(e) = self.feed(direction, data, at_us, packet) {
            self.fail(e);
            self.side(direction).stopped = true;
        }
    }

    fn on_gap(&mut self, direction: Direction, missing: u64) {
        let side = self.side(direction);
        if side.stopped || missing == 0 {
            return;
        }
        if side.framer.skip_missing(missing) == Gap::Absorbed {
            // Inside a DATA payload of known length: the bytes only go
            // uncounted, and a gRPC call's messages cannot be followed.
            let target = side.target;
            if let Some(s) = target.and_then(|id| self.streams.get_mut(&id)) {
                let span = s.span(direction);
                span.bytes = span.bytes.saturating_add(missing);
                if let Some(m) = s.messages(direction) {
                    m.lose();
                }
            }
            // The payload may have ended with the gap.
            self.on_data(direction, &[], 0, 0);
            return;
        }
        self.side(direction).stopped = true;
        // Open streams' messages that way are no longer followed.
        for s in self.streams.values_mut() {
            if let Some(m) = s.messages(direction) {
                m.lose();
            }
        }
        self.fail(format!(
            "{missing} bytes missing from the capture ({}→{}); HTTP/2 frame boundaries lost, that direction not parsed further",
            direction.sender(),
            direction.receiver()
        ));
    }

    fn drain_exchanges(&mut self, out: &mut Vec<Exchange>) {
        crate::hand_over(&mut self.done, out);
    }

    fn finish(&mut self) -> Vec<Exchange> {
        for (id, s) in std::mem::take(&mut self.streams) {
            self.emit(id, s);
        }
        std::mem::take(&mut self.done)
    }

    fn open_since(&self) -> Option<u64> {
        self.streams
            .values()
            .filter_map(|s| s.request.started_at())
            .min()
    }

    fn error(&self) -> Option<&str> {
        self.error.as_deref()
    }
}

/// Frames `sender_is_client` looks through for a header block.
const ORIENT_FRAMES: usize = 4;
/// HPACK static-table indices (RFC 7541 Appendix A) of the pseudo-header
/// fields only a request carries (`:authority`, `:method`, `:path`,
/// `:scheme`) and only a response carries (`:status`).
const REQUEST_FIELDS: std::ops::RangeInclusive<u8> = 1..=7;
const RESPONSE_FIELDS: std::ops::RangeInclusive<u8> = 8..=14;

/// For a connection first seen mid-stream: whether `payload`, read from a
/// frame boundary, was sent by the client. A header block opens with its
/// pseudo-header fields (RFC 9113 §8.3), and most of these are in HPACK's
/// static table whatever the dynamic table holds: `:method` or `:scheme`
/// says a request, `:status` a response (a gRPC client's `:path` and
/// `:authority` come from the dynamic table, its `POST` from the static
/// one); a PUSH_PROMISE is the server's. None when the first frames do not
/// tell (no header block; only fields from the dynamic table).
pub fn sender_is_client(payload: &[u8]) -> Option<bool> {
    let mut at = 0usize;
    for _ in 0..ORIENT_FRAMES {
        let bytes: &[u8; frame::HEADER_LEN] =
            payload.get(at..at + frame::HEADER_LEN)?.try_into().ok()?;
        let h = FrameHeader::parse(bytes);
        if h.check().is_err() || h.len > frame::DEFAULT_MAX_FRAME || h.reserved {
            return None;
        }
        let body = payload.get(at + frame::HEADER_LEN..)?;
        match h.kind {
            frame::PUSH_PROMISE => return Some(false),
            frame::HEADERS => {
                let body = &body[..body.len().min(h.len as usize)];
                return static_fields(frame::fragment(&h, body).ok()?).find_map(|i| {
                    if REQUEST_FIELDS.contains(&i) {
                        Some(true)
                    } else if RESPONSE_FIELDS.contains(&i) {
                        Some(false)
                    } else {
                        None
                    }
                });
            }
            frame::DATA
            | frame::SETTINGS
            | frame::PING
            | frame::WINDOW_UPDATE
            | frame::PRIORITY
            | frame::RST_STREAM => {
                at = at.checked_add(frame::HEADER_LEN + h.len as usize)?;
            }
            _ => return None,
        }
    }
    None
}

/// The static-table indices (1..=61) of a header block's fields, indexed
/// or literal with an indexed name, in order, as far as the block (or a
/// field's end) was captured; size updates and other fields skipped by
/// their lengths (RFC 7541 §6).
fn static_fields(block: &[u8]) -> impl Iterator<Item = u8> + '_ {
    let mut at = 0usize;
    std::iter::from_fn(move || loop {
        let b = *block.get(at)?;
        let (prefix, literal) = match b {
            b if b & 0x80 != 0 => (7, false),
            b if b & 0xc0 == 0x40 => (6, true),
            b if b & 0xe0 == 0x20 => {
                hpack_int(block, &mut at, 5)?;
                continue;
            }
            _ => (4, true),
        };
        let index = hpack_int(block, &mut at, prefix)?;
        if literal {
            if index == 0 {
                skip_string(block, &mut at)?;
            }
            skip_string(block, &mut at)?;
        }
        if (1..=61).contains(&index) {
            return u8::try_from(index).ok();
        }
    })
}

/// An HPACK integer with an N-bit prefix at `at` (RFC 7541 §5.1), moving
/// past it; None when cut or past 2^28.
fn hpack_int(block: &[u8], at: &mut usize, prefix: u8) -> Option<u64> {
    let max = (1u64 << prefix) - 1;
    let mut value = u64::from(*block.get(*at)?) & max;
    *at += 1;
    if value < max {
        return Some(value);
    }
    for shift in (0..28).step_by(7) {
        let b = *block.get(*at)?;
        *at += 1;
        value += u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Some(value);
        }
    }
    None
}

/// Moves past a string literal (its Huffman bit and length, then its bytes).
fn skip_string(block: &[u8], at: &mut usize) -> Option<()> {
    let len = usize::try_from(hpack_int(block, at, 7)?).ok()?;
    *at = at.checked_add(len)?;
    (*at <= block.len()).then_some(())
}

/// Fuzz entry: see `crate::fuzz::analyzer` (an odd first byte starts mid-stream).
pub fn fuzz(data: &[u8]) {
    crate::fuzz::analyzer(data, Http2Analyzer::sniff, Http2Analyzer::new);
}
