//! HTTP/1.x exchanges from a byte stream: keep-alive, pipelining,
//! Content-Length, chunked, 100-continue, upgrades. Heads are parsed with
//! httparse; bodies are counted, never stored.

mod framing;
mod head;
mod resync;
#[cfg(test)]
mod tests;

use crate::{Sniff, Span, Start, StreamAnalyzer};
use head::RequestHead;
use resync::Hunt;
use std::collections::VecDeque;
use whyslow_model::{Direction, Exchange, Protocol, SmolStr, Status};

pub use framing::{BodyKind, Framer, Gap, Step, MAX_HEAD_BYTES};
pub use head::{parse_response_prefix, request_label, request_label_digest, ResponseHead};

/// Requests sent and not yet answered. Clients that pipeline at all keep a
/// handful outstanding (Redis-style deep pipelines are not HTTP's); with
/// thousands of flows tracked, the bound keeps each flow's queue small.
pub const MAX_OUTSTANDING: usize = 64;

/// While a head is shorter than this, each arrival re-validates it so that
/// non-HTTP bytes fail fast; past it, only the complete head is parsed (keeps
/// the work linear in the input).
const EAGER_CHECK_BYTES: usize = 1024;

/// Heads up to this size are remembered, one per direction: keep-alive
/// clients send the same request head again and again, and servers answer
/// with the same head (nginx's changes with its Date, once a second). A
/// head equal to the last one is not parsed again; parsing was half of the
/// analyzer's time on such traffic. 2 × 512 bytes per connection at most.
pub const HEAD_MEMO_BYTES: usize = 512;

/// The last head seen in one direction, and what it parsed to.
#[derive(Debug)]
struct Memo<H> {
    bytes: Vec<u8>,
    head: Option<H>,
}

impl<H: Clone> Memo<H> {
    fn new() -> Self {
        Memo {
            bytes: Vec::new(),
            head: None,
        }
    }

    /// `parse(bytes)`, or the last result when `bytes` are the last head's.
    fn parse(
        &mut self,
        bytes: &[u8],
        parse: impl FnOnce(&[u8]) -> Result<H, String>,
    ) -> Result<H, String> {
        if let Some(h) = self.head.as_ref().filter(|_| self.bytes == bytes) {
            return Ok(h.clone());
        }
        let h = parse(bytes)?;
        self.head = None;
        if bytes.len() <= HEAD_MEMO_BYTES {
            self.bytes.clear();
            self.bytes.extend_from_slice(bytes);
            self.head = Some(h.clone());
        }
        Ok(h)
    }
}

/// A request whose exchange is not complete yet.
#[derive(Debug)]
struct Pending {
    head: RequestHead,
    request: Span,
    request_done: bool,
    /// Bytes of interim (1xx) responses, counted into the response size.
    interim_bytes: u64,
    /// Final response: head seen.
    response: Option<(ResponseHead, Span)>,
    response_done: bool,
}

/// Incremental HTTP/1.x analyzer for one TCP connection.
#[derive(Debug)]
pub struct Http1Analyzer {
    connection: u32,
    req: Framer,
    resp: Framer,
    /// Bytes of the request / response message currently being read.
    req_span: Span,
    resp_span: Span,
    pending: VecDeque<Pending>,
    done: Vec<Exchange>,
    error: Option<String>,
    /// Protocol switched (101, CONNECT): later bytes are not HTTP/1.
    switched: bool,
    /// Per direction (request, response): skipping to the next message
    /// start after a capture gap or a mid-stream start.
    hunt: [Hunt; 2],
    /// First gap resynchronized over, for the report.
    note: Option<String>,
    h2c: Option<H2cUpgrade>,
    request_memo: Memo<RequestHead>,
    response_memo: Memo<ResponseHead>,
}

/// An HTTP/1.1 request upgraded to h2c: the HTTP/2 analyzer takes over the
/// stream, with this request as stream 1.
#[derive(Debug)]
pub struct H2cUpgrade {
    pub label: SmolStr,
    pub request: Span,
    /// Bytes after the 101 response in the chunk that carried it.
    pub leftover: Vec<(Direction, Vec<u8>, u64, u64)>,
}

impl Http1Analyzer {
    pub fn new(connection_id: u32) -> Self {
        Self::with_start(connection_id, Start::Beginning)
    }

    /// An analyzer that starts at `start`: mid-stream, both directions first
    /// skip to a message start.
    pub fn with_start(connection_id: u32, start: Start) -> Self {
        let hunt = match start {
            Start::Beginning => Hunt::Off,
            Start::MidStream => Hunt::AtLineStart,
        };
        Http1Analyzer {
            connection: connection_id,
            req: Framer::new(),
            resp: Framer::new(),
            req_span: Span::default(),
            resp_span: Span::default(),
            pending: VecDeque::new(),
            done: Vec::new(),
            error: None,
            switched: false,
            hunt: [hunt; 2],
            note: None,
            h2c: None,
            request_memo: Memo::new(),
            response_memo: Memo::new(),
        }
    }

    /// First client bytes: a request line at the start, or (mid-stream) at
    /// the start of any line of them.
    pub fn sniff(client: &[u8], start: Start) -> Sniff {
        match start {
            Start::Beginning => match Self::looks_like_request(client) {
                Some(true) => Sniff::Yes,
                Some(false) => Sniff::No,
                None => Sniff::NeedMore,
            },
            Start::MidStream => resync::sniff_mid_stream(client),
        }
    }

    /// The h2c upgrade that just happened, if any (taken once).
    pub fn take_h2c_upgrade(&mut self) -> Option<H2cUpgrade> {
        self.h2c.take()
    }

    /// True when the first bytes of a client stream look like an HTTP/1
    /// request line: a common method followed by a space, or any other
    /// method token (RFC 9110 §9: WebDAV's, `QUERY`, a custom one) whose
    /// line names an HTTP/1 version. `None` when too few bytes are there to
    /// tell.
    pub fn looks_like_request(data: &[u8]) -> Option<bool> {
        const METHODS: [&[u8]; 9] = [
            b"GET ",
            b"POST ",
            b"PUT ",
            b"HEAD ",
            b"DELETE ",
            b"OPTIONS ",
            b"PATCH ",
            b"CONNECT ",
            b"TRACE ",
        ];
        let mut undecided = false;
        for m in METHODS {
            let n = m.len().min(data.len());
            if data[..n] == m[..n] {
                if n == m.len() {
                    return Some(true);
                }
                undecided = true;
            }
        }
        match (undecided, other_method_line(data)) {
            (_, Some(true)) => Some(true),
            (true, _) | (_, None) => None,
            (false, Some(false)) => Some(false),
        }
    }

    fn fail(&mut self, msg: String) {
        if self.error.is_none() {
            self.error = Some(msg);
        }
    }

    fn feed_request(&mut self, mut data: &[u8], at: u64, pkt: u64) -> Result<(), String> {
        while !data.is_empty() {
            let (n, step) = self.req.step(data)?;
            self.req_span.add(n, at, pkt);
            let consumed = &data[..n];
            data = &data[n..];
            match step {
                Step::Progress => {
                    if self.req.in_head() && self.req.head().len() <= EAGER_CHECK_BYTES {
                        head::check_partial_request(self.req.head())?;
                    }
                }
                Step::HeadDone => self.request_head_done(consumed)?,
                Step::MessageDone => self.request_done(),
            }
        }
        Ok(())
    }

    fn request_head_done(&mut self, consumed: &[u8]) -> Result<(), String> {
        let head = self
            .request_memo
            .parse(self.req.complete_head(consumed), head::parse_request)?;
        if self.pending.len() >= MAX_OUTSTANDING {
            return Err(format!("more than {MAX_OUTSTANDING} unanswered requests"));
        }
        if let Some(Err(why)) = head.trace {
            self.note
                .get_or_insert_with(|| format!("{why}: its calls are attributed without it"));
        }
        let body = head.body;
        let connect = head.is_connect;
        self.pending.push_back(Pending {
            head,
            request: Span::default(),
            request_done: false,
            interim_bytes: 0,
            response: None,
            response_done: false,
        });
        if self.req.start_body(body) {
            self.request_done();
        }
        if connect {
            // Whatever the client sends next goes through the tunnel.
            self.req.make_opaque();
        }
        Ok(())
    }

    fn request_done(&mut self) {
        let span = std::mem::take(&mut self.req_span);
        if let Some(p) = self.pending.iter_mut().rev().find(|p| !p.request_done) {
            p.request = span;
            p.request_done = true;
        }
        self.emit_completed();
    }

    fn feed_response(&mut self, mut data: &[u8], at: u64, pkt: u64) -> Result<(), String> {
        while !data.is_empty() {
            let (n, step) = self.resp.step(data)?;
            self.resp_span.add(n, at, pkt);
            let consumed = &data[..n];
            data = &data[n..];
            match step {
                Step::Progress => {
                    if self.resp.in_head() && self.resp.head().len() <= EAGER_CHECK_BYTES {
                        head::check_partial_response(self.resp.head())?;
                    }
                }
                Step::HeadDone => self.response_head_done(consumed)?,
                Step::MessageDone => self.response_done(),
            }
            if self.switched {
                if let Some(up) = &mut self.h2c {
                    up.leftover
                        .push((Direction::ToClient, data.to_vec(), at, pkt));
                }
                break;
            }
        }
        Ok(())
    }

    /// The first request still waiting for its final response (FIFO pairing).
    fn answering(&mut self) -> Option<&mut Pending> {
        self.pending.iter_mut().find(|p| !p.response_done)
    }

    fn response_head_done(&mut self, consumed: &[u8]) -> Result<(), String> {
        let head = self
            .response_memo
            .parse(self.resp.complete_head(consumed), head::parse_response)?;
        let Some(p) = self.answering() else {
            // A response no request waits for (a server that answers one
            // request twice, a request lost before the capture): its body
            // is framed and skipped, and the pairs after it are kept.
            self.note.get_or_insert_with(|| {
                "an HTTP response without a request (skipped; later pairs kept)".into()
            });
            if self.resp.start_body(head.body(false)) {
                self.response_done();
            }
            return Ok(());
        };
        let is_head = p.head.is_head;
        let is_connect = p.head.is_connect;
        let switching = head.status == 101 || (is_connect && (200..300).contains(&head.status));
        let h2c = switching && head.status == 101 && p.head.upgrade_h2c;
        let body = head.body(is_head);
        if !head.is_interim() {
            p.response = Some((head, Span::default()));
        }
        if h2c {
            // Stream 1 of the HTTP/2 connection answers this request: the
            // HTTP/2 analyzer reports it, not this one.
            if let Some(p) = self.pending.pop_front() {
                self.h2c = Some(H2cUpgrade {
                    label: p.head.label,
                    request: p.request,
                    leftover: Vec::new(),
                });
            }
            self.switched = true;
            return Ok(());
        }
        if switching {
            self.response_done();
            self.switched = true;
            self.req.make_opaque();
            self.resp.make_opaque();
            return Ok(());
        }
        if self.resp.start_body(body) {
            self.response_done();
        }
        Ok(())
    }

    /// End of a response message: interim ones only add their bytes.
    fn response_done(&mut self) {
        let span = std::mem::take(&mut self.resp_span);
        let Some(p) = self.answering() else { return };
        match &mut p.response {
            Some((_, s)) => {
                *s = span;
                p.response_done = true;
            }
            None => p.interim_bytes = p.interim_bytes.saturating_add(span.bytes),
        }
        self.emit_completed();
    }

    fn emit_completed(&mut self) {
        while self
            .pending
            .front()
            .is_some_and(|p| p.request_done && p.response_done)
        {
            if let Some(p) = self.pending.pop_front() {
                let e = self.exchange(p);
                self.done.push(e);
            }
        }
    }

    fn exchange(&self, p: Pending) -> Exchange {
        let (status, resp, encoded) = match p.response {
            Some((h, s)) if s.bytes > 0 => (Some(h.status), Some(s), h.encoded),
            Some((h, _)) => (Some(h.status), None, h.encoded),
            None => (None, None, false),
        };
        let resp_bytes = resp.map_or(0, |s| s.bytes).saturating_add(p.interim_bytes);
        let mut e = Exchange::new(self.connection, Protocol::Http1, p.head.label);
        e.status = status.map(Status::Http);
        e.request_first_at_us = p.request.first_at;
        e.request_last_at_us = p.request.last_at;
        e.response_first_at_us = resp.map(|s| s.first_at);
        e.response_last_at_us = resp.map(|s| s.last_at);
        e.request_bytes = p.request.bytes;
        e.response_bytes = resp_bytes;
        e.request_packets = p.request.packets();
        e.response_packets = resp.map(|s| s.packets());
        e.response_encoded = encoded;
        e.params_digest = p.head.digest;
        e.trace = p.head.trace.and_then(Result::ok);
        e
    }
}

impl StreamAnalyzer for Http1Analyzer {
    fn on_data(&mut self, direction: Direction, data: &[u8], at_us: u64, packet: u64) {
        if self.error.is_some() || self.switched {
            return;
        }
        let Some(data) = self.skip_to_message(direction, data) else {
            return;
        };
        let r = match direction {
            Direction::ToServer => self.feed_request(data, at_us, packet),
            Direction::ToClient => self.feed_response(data, at_us, packet),
        };
        if let Err(e) = r {
            self.fail(e);
        }
    }

    fn on_gap(&mut self, direction: Direction, missing: u64) {
        if self.error.is_some() || self.switched {
            return;
        }
        let framer = match direction {
            Direction::ToServer => &mut self.req,
            Direction::ToClient => &mut self.resp,
        };
        // Inside a body of known length the gap is only uncounted bytes; the
        // next message starts where the length says, so parsing goes on.
        match framer.skip_missing(missing) {
            Gap::Absorbed => return,
            Gap::MessageDone => {
                match direction {
                    Direction::ToServer => self.request_done(),
                    Direction::ToClient => self.response_done(),
                }
                return;
            }
            Gap::Lost => {}
        }
        let side = match direction {
            Direction::ToServer => "client→server",
            Direction::ToClient => "server→client",
        };
        self.note.get_or_insert_with(|| {
            format!(
                "{missing} bytes missing from the capture ({side}); resumed at the next message"
            )
        });
        self.resync();
        let i = usize::from(direction == Direction::ToClient);
        self.hunt[i] = Hunt::AfterGap;
    }

    fn drain_exchanges(&mut self, out: &mut Vec<Exchange>) {
        crate::hand_over(&mut self.done, out);
    }

    fn finish(&mut self) -> Vec<Exchange> {
        // A body read until close ends here; so does anything cut short.
        if self.resp.reading_until_close() && self.error.is_none() {
            self.response_done();
        }
        self.flush_pending();
        std::mem::take(&mut self.done)
    }

    fn open_since(&self) -> Option<u64> {
        let oldest = self.pending.front().and_then(|p| p.request.started_at());
        crate::earliest(oldest, self.req_span.started_at())
    }

    fn error(&self) -> Option<&str> {
        self.error.as_deref().or(self.note.as_deref())
    }
}

impl Http1Analyzer {
    /// Every pending request becomes an exchange with what was seen of it.
    fn flush_pending(&mut self) {
        let req_span = std::mem::take(&mut self.req_span);
        let resp_span = std::mem::take(&mut self.resp_span);
        if let Some(p) = self.pending.iter_mut().rev().find(|p| !p.request_done) {
            p.request = req_span;
        }
        if let Some(p) = self.pending.iter_mut().find(|p| !p.response_done) {
            if let Some((_, s)) = &mut p.response {
                *s = resp_span;
            }
        }
        while let Some(p) = self.pending.pop_front() {
            let e = self.exchange(p);
            self.done.push(e);
        }
    }

    /// After bytes were lost: what is pending is reported as seen, and both
    /// directions skip to their next message start, so later responses are
    /// not paired with requests whose answers were lost.
    fn resync(&mut self) {
        // A direction between two messages resumes at its next byte.
        let between = |f: &Framer| {
            if f.in_head() && f.head().is_empty() {
                Hunt::AtLineStart
            } else {
                Hunt::InLine
            }
        };
        self.hunt = [between(&self.req), between(&self.resp)];
        self.flush_pending();
        self.req = Framer::new();
        self.resp = Framer::new();
    }

    /// While hunting in `direction`: the part of `data` from the next message
    /// start on, or None when it holds none.
    fn skip_to_message<'d>(&mut self, direction: Direction, data: &'d [u8]) -> Option<&'d [u8]> {
        let i = match direction {
            Direction::ToServer => 0,
            Direction::ToClient => 1,
        };
        let mut data = data;
        while self.hunt[i] != Hunt::Off {
            let (found, next) = resync::find_start(self.hunt[i], data, i == 0);
            let Some(at) = found else {
                self.hunt[i] = next;
                return None;
            };
            // A response counts only once a request after the resync waits for it.
            if i == 0 || self.pending.iter().any(|p| !p.response_done) {
                self.hunt[i] = Hunt::Off;
                return Some(&data[at..]);
            }
            data = &data[at + 1..];
            self.hunt[i] = Hunt::InLine;
        }
        Some(data)
    }
}

/// Bytes of a request line searched for its HTTP version when the method is
/// not a common one: request targets are rarely longer (servers refuse
/// lines past 8 KiB; most stay far below).
const OTHER_METHOD_LINE: usize = 2048;

/// Whether `data` starts with a request line of a method token (RFC 9110
/// §5.6.2 tchar) other than the common ones: `TOKEN SP … SP HTTP/1.x`. A
/// memcached or Redis inline command (`get key`, `set k v`) has a token and
/// a space too, but no HTTP version on its line. None: no line end yet.
fn other_method_line(data: &[u8]) -> Option<bool> {
    let is_tchar = |b: &u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(b);
    let token = data.iter().take_while(|b| is_tchar(b)).count();
    if token == data.len() {
        return (token >= OTHER_METHOD_LINE).then_some(false);
    }
    if token == 0 || data[token] != b' ' {
        return Some(false);
    }
    let line = &data[..data.len().min(OTHER_METHOD_LINE)];
    match line.iter().position(|&b| b == b'\n') {
        Some(end) => Some(line[..end].windows(8).any(|w| w == b" HTTP/1.")),
        None if line.len() < OTHER_METHOD_LINE => None,
        None => Some(false),
    }
}
