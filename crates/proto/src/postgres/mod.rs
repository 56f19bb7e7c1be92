//! PostgreSQL frontend/backend protocol 3.0 exchanges from a byte stream:
//! startup (SSLRequest/GSSENCRequest answers), simple queries (one exchange
//! per statement), the extended protocol (one exchange per Execute, named and
//! unnamed statements remembered), pipelines, COPY and function calls.
//!
//! The parser is hand-written rather than taken from a client library: it
//! must start in the middle of a connection and resynchronize after capture
//! gaps, skip DataRow/CopyData/Bind values by their length without holding
//! them, and never keep passwords, literals or server error texts.
//!
//! Timing: a simple-query statement's request span is the whole Query
//! message (shared by its statements, bytes included); its response runs
//! from its first answer to its CommandComplete/ErrorResponse. An extended-protocol
//! exchange's request span covers its Parse/Bind/Describe/Execute messages
//! (not the Sync: the server may start at a Flush too) and, for COPY FROM
//! STDIN, the CopyData up to CopyDone; its response runs from the first
//! answer to those messages (ParseComplete...) to CommandComplete.
//! ReadyForQuery sets `transaction` on the last exchange before it.
//! After an error the server skips messages up to Sync: Executes it skipped
//! were never run and are dropped, as are the statements of a Query after
//! the failing one.
//!
//! Resync: after a gap or a framing error (and from `Start::MidStream`) the
//! client side restarts at a well-formed message followed by another one (or
//! by the end of the data); the server side at the next ReadyForQuery
//! (`Z\0\0\0\x05` + I/T/E). Requests sent before that ReadyForQuery are
//! flushed unanswered and only later ones are paired, so nothing is
//! mispaired. Statement names seen before a gap stay known.

mod bind;
mod client;
mod frame;
mod queue;
mod server;
pub use queue::MAX_PENDING;
#[cfg(test)]
mod test_wire;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_hostile;
#[cfg(test)]
mod tests_trace;

use crate::normalize::SqlMemo;
use crate::{Sniff, Span, Start, StreamAnalyzer};
use bind::{BindParser, Names};
use frame::{Framer, Side, Step};
use queue::{Before, Pending, Queue, Wait};
use std::collections::HashMap;
use whyslow_model::prepared::{prepared_label, PreparedShape};
use whyslow_model::{Direction, Exchange, Protocol, SmolStr};

/// Query text kept from one Query/Parse message; past it the text is cut (the
/// normalized label keeps only MAX_NORMALIZED = 300 chars anyway, and the
/// rest of a multi-statement script is rarely worth the memory).
pub const MAX_QUERY_TEXT: usize = 1 << 20;
/// Statements remembered per connection (name → normalized text). JDBC's
/// default statement cache is 256 per connection; 1000 leaves room for
/// clients with bigger caches. The oldest is forgotten on overflow.
pub const MAX_STATEMENTS: usize = 1000;
/// Portals remembered (for an Execute resumed after PortalSuspended).
/// Portals live only until their transaction ends, so few are open at once.
pub const MAX_PORTALS: usize = 64;
/// Exchanges made from one Query string; answers past the last go to it.
pub const MAX_QUERY_STATEMENTS: usize = 256;
/// Message buffers bigger than this are released after their message.
const KEEP_BUFFER: usize = 4096;

/// Label of a Bind/Execute whose unnamed statement was parsed before the
/// capture began (a named one keeps its name: `prepared_before`).
pub const UNKNOWN_STATEMENT: &str = "? (statement parsed before the capture)";
/// Bytes of a statement's name shown in its label: generated names are short
/// (pgJDBC's `S_3`, tokio-postgres' `s12`, Rails' `a12`) or a hash
/// (pgx's `stmtcache_` and 40 hex digits).
const SHOWN_NAME: usize = 64;

/// The label of a statement prepared by name before the capture began, whose
/// text the capture never saw. The name is the statement's identity on its
/// connection, as good as its text for counting: executions of one name
/// are one statement with other parameters, two names two statements.
/// What its answers showed (`Learned`) is added once known.
pub fn prepared_before(name: &[u8], params: Option<u16>) -> SmolStr {
    if name.is_empty() {
        return UNKNOWN_STATEMENT.into();
    }
    let shape = PreparedShape {
        params,
        ..Default::default()
    };
    prepared_label(&shown_name(name), shape)
}

/// A statement name shown in a label: generated names carry no literals;
/// a byte that is not printable ASCII is shown as `?`, and only the first
/// `SHOWN_NAME` bytes.
pub fn shown_name(name: &[u8]) -> SmolStr {
    let mut shown: String = name
        .iter()
        .take(SHOWN_NAME)
        .map(|&b| match b {
            b'!'..=b'~' => b as char,
            _ => '?',
        })
        .collect();
    if name.len() > SHOWN_NAME {
        shown.push('…');
    }
    SmolStr::from(shown)
}

/// Per statement prepared before the capture, by shown name, what its
/// answers showed so far on this connection: the columns of its rows (an
/// execution that returned none does not say) and its command verb. Every
/// later execution's label carries them, so one statement keeps one label
/// once known; a label made before (an empty first result) lacks them.
#[derive(Default)]
struct Learned {
    shapes: HashMap<SmolStr, (Option<u16>, Option<SmolStr>)>,
}

impl Learned {
    /// The label of a statement `b` done with `columns` and `verb`.
    fn label(&mut self, b: &Before, columns: Option<u16>, verb: Option<SmolStr>) -> SmolStr {
        let full = self.shapes.len() >= MAX_STATEMENTS;
        let known = match self.shapes.get_mut(&b.name) {
            Some(k) => k,
            None if full => &mut (None, None),
            None => self.shapes.entry(b.name.clone()).or_default(),
        };
        known.0 = known.0.or(columns);
        if known.1.is_none() {
            known.1 = verb;
        }
        let shape = PreparedShape {
            params: b.params,
            columns: known.0,
            verb: known.1.as_deref(),
        };
        prepared_label(&b.name, shape)
    }
}

/// Label of a Query/Parse whose text a capture gap took.
pub const LOST_TEXT: &str = "? (query text lost in a capture gap)";
pub const FUNCTION_CALL: &str = "function call";

/// The message currently read in one direction.
#[derive(Default)]
struct Message {
    kind: u8,
    /// Startup packet code.
    code: u32,
    span: Span,
    buf: Vec<u8>,
    cap: usize,
    /// Longer than `cap`: the tail was not kept.
    cut: bool,
    /// A gap took bytes of it.
    damaged: bool,
    bind: Option<BindParser>,
}

impl Message {
    fn start(&mut self, kind: u8, code: u32, body: u32, cap: usize) {
        if self.buf.capacity() > KEEP_BUFFER {
            self.buf = Vec::new();
        }
        self.buf.clear();
        self.kind = kind;
        self.code = code;
        self.cap = cap;
        self.cut = false;
        self.damaged = false;
        self.bind = None;
        self.buf
            .reserve_exact(cap.min(body as usize).min(KEEP_BUFFER));
    }

    /// Keeps at most `cap` bytes, growing the buffer no further than that.
    fn keep(&mut self, data: &[u8]) {
        let room = self.cap.saturating_sub(self.buf.len());
        if data.len() > room {
            self.cut = true;
        }
        let n = data.len().min(room);
        if self.buf.len() + n > self.buf.capacity() {
            let want = (self.buf.len() + n)
                .max(self.buf.capacity() * 2)
                .min(self.cap);
            self.buf.reserve_exact(want - self.buf.len());
        }
        self.buf.extend_from_slice(&data[..n]);
    }
}

/// Incremental PostgreSQL (frontend/backend protocol 3.0) analyzer for one TCP connection.
pub struct PgAnalyzer {
    connection: u32,
    client: Framer,
    server: Framer,
    cmsg: Message,
    smsg: Message,
    queue: Queue,
    statements: Names,
    portals: Names,
    /// Extended-protocol exchange still collecting Parse/Bind/Describe.
    building: Option<u64>,
    /// Last Execute since the last Sync (ReadyForQuery's state goes to it).
    last_exec: Option<u64>,
    /// Exchange whose COPY FROM STDIN data the client is sending.
    copy_in: Option<u64>,
    /// Startup code awaiting its one-byte answer (SSLRequest/GSSENCRequest).
    negotiating: u32,
    /// SSLRequest was answered `S`: the rest of the stream is TLS.
    tls_follows: bool,
    /// Backend messages are not paired until the next ReadyForQuery: what
    /// was asked before it is flushed unanswered (after a gap, mid-stream).
    server_discard: bool,
    done: Vec<Exchange>,
    error: Option<String>,
    /// Simple-query statements by shape: the same texts with other numbers.
    shapes: SqlMemo,
    /// Statements prepared before the capture: what their answers showed.
    learned: Learned,
    /// Mid-stream, nothing from the server yet and no gap: the server's
    /// first bytes may be trusted as the answer to the first request
    /// (`trust_first_answer`).
    fresh: bool,
    /// Client bytes the framer scanned before its first boundary.
    client_scanned: u64,
    /// The client's first boundary was the stream's first byte.
    client_clean: bool,
}

impl std::fmt::Debug for PgAnalyzer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgAnalyzer")
            .field("connection", &self.connection)
            .field("client", &self.client)
            .field("server", &self.server)
            .field("waits", &self.queue.waits.len())
            .field("statements", &self.statements.len())
            .field("error", &self.error)
            .finish_non_exhaustive()
    }
}

impl PgAnalyzer {
    pub fn new(connection: u32, start: Start) -> Self {
        let beginning = start == Start::Beginning;
        PgAnalyzer {
            connection,
            client: Framer::new(Side::Client, beginning),
            server: Framer::new(Side::Server, beginning),
            cmsg: Message::default(),
            smsg: Message::default(),
            queue: Queue::default(),
            statements: Names::new(MAX_STATEMENTS),
            portals: Names::new(MAX_PORTALS),
            building: None,
            last_exec: None,
            copy_in: None,
            negotiating: 0,
            tls_follows: false,
            server_discard: !beginning,
            done: Vec::new(),
            error: None,
            shapes: SqlMemo::default(),
            learned: Learned::default(),
            fresh: !beginning,
            client_scanned: 0,
            client_clean: false,
        }
    }

    /// Do these first client bytes (from `start`) look like PostgreSQL (frontend/backend protocol 3.0)?
    /// From the beginning: a startup packet (length + known code). Mid-stream:
    /// two well-formed frontend messages in a row somewhere in the bytes.
    pub fn sniff(client: &[u8], start: Start) -> Sniff {
        match start {
            Start::Beginning => {
                if client.len() < 8 {
                    return Sniff::NeedMore;
                }
                let ok = frame::startup_ok(frame::be32(client), frame::be32(&client[4..]));
                if ok {
                    Sniff::Yes
                } else {
                    Sniff::No
                }
            }
            Start::MidStream => {
                let mut more = false;
                for i in 0..client.len() {
                    match frame::check_at(client, i, true) {
                        frame::Check::Yes => return Sniff::Yes,
                        frame::Check::More => more = true,
                        frame::Check::No => {}
                    }
                }
                if more && client.len() < frame::RESYNC_WINDOW {
                    Sniff::NeedMore
                } else {
                    Sniff::No
                }
            }
        }
    }

    /// Bytes held in buffers (the bounded-memory tests read it).
    pub fn buffered(&self) -> usize {
        self.cmsg.buf.capacity()
            + self.smsg.buf.capacity()
            + self.client.buffered()
            + self.server.buffered()
    }

    fn note(&mut self, msg: impl Into<String>) {
        if self.error.is_none() {
            self.error = Some(msg.into());
        }
    }

    /// Runs the client framer over `src` until it is used up or a resync
    /// hands back bytes to read again (returned through `replay`).
    fn client_run(&mut self, src: &[u8], at: u64, pkt: u64, replay: &mut Vec<u8>) -> usize {
        let mut used = 0;
        loop {
            let scanning = self.client.scanning();
            let (n, step) = self.client.step(&src[used..]);
            used += n;
            if !scanning && n > 0 {
                self.cmsg.span.add(n, at, pkt);
            }
            if scanning && self.fresh {
                let before = self.client_scanned;
                self.client_scanned += n as u64;
                if let Step::Synced(r) = &step {
                    // The boundary's offset in the stream: none skipped.
                    self.client_clean = before + n as u64 == r.len() as u64;
                    self.fresh = self.client_clean;
                }
            }
            match step {
                Step::Idle => return used,
                Step::Skipped | Step::Byte(_) | Step::Ready(_) => {}
                Step::Start { kind, body, code } => self.client_start(kind, body, code),
                Step::Body(b) => self.client_body(b),
                Step::End => self.client_end(),
                Step::Whole { kind, body } => {
                    self.client_start(kind, body.len() as u32, 0);
                    if !body.is_empty() {
                        self.client_body(body);
                    }
                    self.client_end();
                }
                Step::Synced(r) => {
                    *replay = r;
                    self.cmsg.span = Span::default();
                    return used;
                }
                Step::Bad(why) => {
                    self.note(format!("client: {why}; resynchronizing"));
                    self.client_lost();
                }
            }
        }
    }

    fn on_client(&mut self, data: &[u8], at: u64, pkt: u64) {
        let mut replay = Vec::new();
        let mut rest = data;
        loop {
            if !replay.is_empty() {
                let src = std::mem::take(&mut replay);
                let used = self.client_run(&src, at, pkt, &mut replay);
                replay.extend_from_slice(&src[used..]);
            } else if !rest.is_empty() {
                let used = self.client_run(rest, at, pkt, &mut replay);
                rest = &rest[used..];
            } else {
                // A message with an empty body ends without more input.
                self.client_run(&[], at, pkt, &mut replay);
                return;
            }
        }
    }

    fn on_server(&mut self, data: &[u8], at: u64, pkt: u64) {
        if std::mem::take(&mut self.fresh) {
            self.trust_first_answer(data);
        }
        let mut used = 0;
        loop {
            let scanning = self.server.scanning();
            let (n, step) = self.server.step(&data[used..]);
            used += n;
            if !scanning && n > 0 {
                self.smsg.span.add(n, at, pkt);
            }
            match step {
                Step::Idle => return,
                Step::Skipped | Step::Synced(_) => {}
                Step::Start { kind, body, .. } => self.server_start(kind, body),
                Step::Body(b) => self.smsg.keep(b),
                Step::End => self.server_end(),
                Step::Whole { kind, body } => {
                    self.server_start(kind, body.len() as u32);
                    if !body.is_empty() {
                        self.smsg.keep(body);
                    }
                    self.server_end();
                }
                Step::Byte(b) => self.negotiated(b),
                Step::Ready(status) => {
                    self.smsg.span = Span::default();
                    self.ready(status);
                }
                Step::Bad(why) => {
                    self.note(format!("server: {why}; resynchronizing"));
                    self.smsg.span = Span::default();
                    self.server_discard = true;
                }
            }
        }
    }

    /// Mid-stream, the server's first bytes came after the client's first
    /// request, which began at the stream's first byte: a pooled
    /// connection idle when the capture began, whose next request is the
    /// first thing seen. Its answer is what the server sends first, when
    /// that opens with a message the front request is answered with; the
    /// server side is read from there instead of from the next
    /// ReadyForQuery. (A client that had sent a request before the capture
    /// and pipelined this one without waiting would be answered out of
    /// turn: drivers do that only in pipeline mode, and its first answer
    /// would most often not fit.)
    fn trust_first_answer(&mut self, data: &[u8]) {
        let Some((&kind, rest)) = data.split_first() else {
            return;
        };
        if !rest
            .get(..4)
            .is_some_and(|l| frame::server_len_ok(kind, frame::be32(l)))
        {
            return;
        }
        let fits = match self.queue.waits.front() {
            Some(Wait::Query { .. }) => b"CTIEN".contains(&kind),
            Some(Wait::Parse(_)) => b"1EN".contains(&kind),
            Some(Wait::Bind(_)) => b"2EN".contains(&kind),
            Some(Wait::Describe(_)) => b"tTnEN".contains(&kind),
            Some(Wait::Execute(_)) => b"DCIsEN".contains(&kind),
            Some(Wait::Close) => b"3EN".contains(&kind),
            Some(Wait::Function(_)) => b"VEN".contains(&kind),
            _ => false,
        };
        if fits && self.client_clean && self.server.scanning() && self.server_discard {
            self.server.trust_boundary();
            self.server_discard = false;
        }
    }

    /// Client framing lost: what was asked so far cannot be paired safely.
    fn client_lost(&mut self) {
        self.cmsg.span = Span::default();
        self.cmsg.bind = None;
        self.close_building();
        self.last_exec = None;
        self.copy_in = None;
        self.server_discard = true;
    }

    /// Moves finished exchanges to `done` (all of them with `all`).
    fn emit(&mut self, all: bool) {
        while let Some(p) = self.queue.pop_done(all) {
            self.push_exchange(p);
        }
    }

    /// The exchange of `p`, filled in where it is kept; none for a
    /// statement never run, or only prepared (Parse/Describe without
    /// Execute) and fine.
    fn push_exchange(&mut self, p: Pending) {
        if p.skipped || (!p.executed && p.status.is_none()) {
            return;
        }
        let label = match &p.before {
            Some(b) => self.learned.label(b, p.columns, p.verb.clone()),
            None => p.label.unwrap_or_else(|| UNKNOWN_STATEMENT.into()),
        };
        let e = crate::push_exchange(&mut self.done, self.connection, Protocol::Postgres, label);
        e.status = p.status;
        e.rows = p.rows;
        e.transaction = p.tx;
        e.trace = p.trace;
        e.params_digest = p.digest.filter(|d| !d.is_empty()).map(|d| d.finish());
        crate::span::fill(e, &p.req, &p.resp);
    }
}

impl StreamAnalyzer for PgAnalyzer {
    fn on_data(&mut self, direction: Direction, data: &[u8], at_us: u64, packet: u64) {
        match direction {
            Direction::ToServer => self.on_client(data, at_us, packet),
            Direction::ToClient => self.on_server(data, at_us, packet),
        }
        self.emit(false);
    }

    fn on_gap(&mut self, direction: Direction, missing: u64) {
        self.fresh = false;
        let (framer, msg) = match direction {
            Direction::ToServer => (&mut self.client, &mut self.cmsg),
            Direction::ToClient => (&mut self.server, &mut self.smsg),
        };
        if framer.stopped() {
            return;
        }
        // Inside a message of known length: only its content is incomplete.
        if framer.skip_missing(missing) {
            msg.damaged = true;
            return;
        }
        let side = direction.sender();
        self.note(format!(
            "{missing} bytes missing from the capture ({side}); resynchronized"
        ));
        match direction {
            Direction::ToServer => self.client_lost(),
            Direction::ToClient => {
                self.smsg.span = Span::default();
                self.server_discard = true;
            }
        }
    }

    fn built_in(&mut self) -> Option<&mut Vec<Exchange>> {
        Some(&mut self.done)
    }

    fn drain_exchanges(&mut self, out: &mut Vec<Exchange>) {
        crate::hand_over(&mut self.done, out);
    }

    fn finish(&mut self) -> Vec<Exchange> {
        self.queue.forget_waits();
        self.emit(true);
        std::mem::take(&mut self.done)
    }

    fn open_since(&self) -> Option<u64> {
        crate::earliest(self.queue.oldest_start(), self.cmsg.span.started_at())
    }

    fn error(&self) -> Option<&str> {
        self.error.as_deref()
    }

    fn tls_follows(&self) -> bool {
        self.tls_follows
    }
}

/// Fuzz entry: see `crate::fuzz::analyzer` (an odd first byte starts mid-stream).
pub fn fuzz(data: &[u8]) {
    crate::fuzz::analyzer(data, PgAnalyzer::sniff, PgAnalyzer::new);
    crate::fuzz::sql_memo(data);
    // Labels are read back (`whyslow_model::prepared`); names come off the wire.
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = whyslow_model::prepared::prepared_parts(text);
        let _ = whyslow_model::prepared::prepared_verb(text);
        let _ = whyslow_model::prepared::with_copies(text);
    }
}

/// For a connection first seen mid-stream: Some(true) when `payload` opens
/// with a query, parse or bind message (types only a client sends), Some(false)
/// with ReadyForQuery, ParseComplete or BindComplete (only a server sends
/// these, with their fixed lengths), None when it does not tell.
pub fn sender_is_client(payload: &[u8]) -> Option<bool> {
    let (&kind, rest) = payload.split_first()?;
    let len = frame::be32(rest.get(..4)?);
    match kind {
        b'Q' | b'P' | b'B' => {
            matches!(frame::check_at(payload, 0, false), frame::Check::Yes).then_some(true)
        }
        b'Z' => (len == 5 && rest.get(4).is_some_and(|s| b"ITE".contains(s))).then_some(false),
        b'1' | b'2' => (len == 4).then_some(false),
        _ => None,
    }
}
