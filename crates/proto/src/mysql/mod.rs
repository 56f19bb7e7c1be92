//! MySQL and MariaDB client/server protocol exchanges from a byte stream:
//! the handshake (capabilities, an SSL request), then one exchange per
//! command: `COM_QUERY` (its text normalized as for PostgreSQL, by MySQL's
//! lexical rules), `COM_STMT_PREPARE` (labelled `PREPARE` and its text: a
//! round trip of its own), `COM_STMT_EXECUTE` (the prepared text, joined by
//! statement id per connection; a statement prepared before the capture
//! keeps its id as its identity, as PostgreSQL's keep their names), and the
//! rest by their command names (`COM_PING`, `COM_RESET_CONNECTION`…).
//! `COM_STMT_CLOSE`, `COM_STMT_SEND_LONG_DATA` and `COM_QUIT` have no answer
//! and make no exchange.
//!
//! Hand-written, as the PostgreSQL analyzer: it must start mid-connection,
//! resynchronize after a gap, and skip rows of any size by their length
//! without holding them; only each packet's first bytes are kept (a query's
//! text up to `MAX_QUERY_TEXT`).
//!
//! Timing: a command's request span covers its packets (and a LOCAL INFILE's
//! data); its response runs from the first answer packet to the one that
//! ends it (the last result of a multi-result answer). Commands are
//! answered in order, pipelined or not (MariaDB Connector/J sends a prepare
//! and its first execution together).
//!
//! Resync: mid-stream or after a gap, the client side restarts at a segment
//! that opens with a plausible command (sequence 0, a known command byte
//! with its length); the server side at a segment that opens with the first
//! packet of an answer (sequence 1) to a command sent after the loss.
//! Commands sent before are flushed unanswered, so nothing is mispaired.
//! A segment boundary is where a command or answer starts: a client writes
//! a command at once and the server answers after it was read.
//!
//! Not read: the compressed protocol (noted; the connection is left
//! unread), and TLS bytes in the same segment as the SSL request.

mod command;
mod packet;
mod response;
#[cfg(test)]
mod tests;

use crate::digest::ParamDigest;
use crate::normalize::SqlMemo;
use crate::{Sniff, Span, Start, StreamAnalyzer};
use command::Answer;
use packet::{Framer, Packet, Step};
use response::{Outcome, Reader};
use std::collections::{HashMap, VecDeque};
use whyslow_model::prepared::{prepared_label, PreparedShape};
use whyslow_model::{Direction, Exchange, Protocol, SmolStr, Status, TxState};

/// Query text kept from one command, as for PostgreSQL.
pub const MAX_QUERY_TEXT: usize = 1 << 20;
/// Statements remembered per connection (id → text), as for PostgreSQL.
pub const MAX_STATEMENTS: usize = 1000;
/// Commands sent and not yet answered; past it the oldest go unanswered.
/// Pipelining clients send a few; 256 is far past any.
pub const MAX_PENDING: usize = 256;
/// Bytes of an answer packet or a non-command client packet kept: an OK,
/// ERR or prepare OK's fields fit in 64, a handshake's capabilities too.
const HEAD_BYTES: usize = 64;
/// Bytes of a server greeting kept: its capabilities follow a version
/// string (MariaDB's packages announce 45-byte ones) and 13 more bytes.
const GREETING_BYTES: usize = 256;
/// Buffers bigger than this are released after their packet.
const KEEP_BUFFER: usize = 4096;

/// Label of a command whose text a capture gap took.
pub const LOST_TEXT: &str = "? (query text lost in a capture gap)";
/// Label of a query sent with MySQL 8's query attributes (their values
/// are not read): the text follows them.
const ATTRIBUTED_QUERY: &str = "? (query with attributes)";

/// Capability flags (MySQL internals, "Capabilities Flags").
const CLIENT_PROTOCOL_41: u32 = 0x0200;
const CLIENT_SSL: u32 = 0x0800;
const CLIENT_COMPRESS: u32 = 0x0020;
const CLIENT_ZSTD_COMPRESSION: u32 = 0x0400_0000;
const CLIENT_DEPRECATE_EOF: u32 = 0x0100_0000;
const CLIENT_QUERY_ATTRIBUTES: u32 = 0x0800_0000;
/// The SSL request: capabilities, max packet, charset, 23 zero bytes.
const SSL_REQUEST_LEN: u64 = 32;
/// Protocol version 10 opens every server greeting since MySQL 3.21.
const PROTOCOL_V10: u8 = 0x0a;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Greeting and authentication: no commands yet.
    Handshake,
    Commands,
    /// Compressed, a binlog stream: nothing more is read.
    Stopped,
}

/// A command sent and not yet answered.
#[derive(Debug)]
struct Pending {
    label: SmolStr,
    digest: Option<u64>,
    trace: Option<whyslow_model::TraceId>,
    req: Span,
    resp: Span,
    reader: Reader,
    /// An execution of a statement prepared before the capture: its id.
    before: Option<u32>,
    /// Its command byte.
    cmd: u8,
    /// A prepare: the text to remember under the id its answer gives.
    prepares: Option<SmolStr>,
    /// Sent before the server side was lost: never paired.
    stale: bool,
}

/// A statement prepared on this connection.
#[derive(Debug, Clone)]
struct Statement {
    text: SmolStr,
    params: u16,
}

/// Incremental MySQL/MariaDB analyzer for one TCP connection.
pub struct MysqlAnalyzer {
    connection: u32,
    phase: Phase,
    client: Framer,
    server: Framer,
    pending: VecDeque<Pending>,
    statements: HashMap<u32, Statement>,
    /// Columns seen of statements prepared before the capture.
    learned: HashMap<u32, u16>,
    /// The text of the last prepare sent (`LAST_PREPARED` executions).
    last_prepare: Option<Statement>,
    server_caps: Option<u32>,
    client_caps: Option<u32>,
    deprecate_eof: Option<bool>,
    tls_follows: bool,
    shapes: SqlMemo,
    done: Vec<Exchange>,
    error: Option<String>,
    /// The client packet being read is a command (sequence 0 in `Commands`).
    command: bool,
    /// The client is sending a LOCAL INFILE's file: its packets are data
    /// whatever their sequence (it wraps to 0 after 256), until an empty one.
    infile: bool,
    creq: Span,
    sresp: Span,
}

impl std::fmt::Debug for MysqlAnalyzer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MysqlAnalyzer")
            .field("connection", &self.connection)
            .field("phase", &self.phase)
            .field("pending", &self.pending.len())
            .field("statements", &self.statements.len())
            .field("error", &self.error)
            .finish_non_exhaustive()
    }
}

impl MysqlAnalyzer {
    pub fn new(connection: u32, start: Start) -> Self {
        let mid = start == Start::MidStream;
        MysqlAnalyzer {
            connection,
            phase: if mid {
                Phase::Commands
            } else {
                Phase::Handshake
            },
            client: Framer::new(mid),
            server: Framer::new(mid),
            pending: VecDeque::new(),
            statements: HashMap::new(),
            learned: HashMap::new(),
            last_prepare: None,
            server_caps: None,
            client_caps: None,
            deprecate_eof: None,
            tls_follows: false,
            shapes: SqlMemo::mysql(),
            done: Vec::new(),
            error: None,
            command: false,
            infile: false,
            creq: Span::default(),
            sresp: Span::default(),
        }
    }

    /// Do these first client bytes look like MySQL? From the beginning, the
    /// server spoke first (`greeting`); a client's first packet there is a
    /// handshake response inside TLS (sequence 1 or 2, protocol 4.1
    /// capabilities). Mid-stream: a plausible command at the first byte.
    pub fn sniff(client: &[u8], start: Start) -> Sniff {
        let Some((len, seq)) = packet::header(client) else {
            return Sniff::NeedMore;
        };
        let body = &client[4..];
        match start {
            Start::Beginning => {
                if !(1..=2).contains(&seq) || !(SSL_REQUEST_LEN..=4096).contains(&u64::from(len)) {
                    return Sniff::No;
                }
                match packet::le32(body, 0) {
                    None => Sniff::NeedMore,
                    Some(caps) if caps & CLIENT_PROTOCOL_41 != 0 => Sniff::Yes,
                    Some(_) => Sniff::No,
                }
            }
            Start::MidStream => {
                if seq != 0 || body.is_empty() {
                    return if seq == 0 { Sniff::NeedMore } else { Sniff::No };
                }
                let whole = body.len() >= len as usize;
                if !command::plausible(body, len, whole) {
                    return Sniff::No;
                }
                if whole && body.len() > len as usize {
                    // Pipelined: the next packet must be a command too.
                    let next = &body[len as usize..];
                    return match packet::header(next) {
                        Some((l, 0))
                            if command::plausible(&next[4..], l, next.len() - 4 >= l as usize) =>
                        {
                            Sniff::Yes
                        }
                        None => Sniff::NeedMore,
                        _ => Sniff::No,
                    };
                }
                Sniff::Yes
            }
        }
    }

    /// A server greeting (protocol 10, a printable version, sequence 0):
    /// the server speaks first, so it alone tells the protocol.
    pub fn sniff_greeting(server: &[u8]) -> Sniff {
        let Some((len, seq)) = packet::header(server) else {
            return Sniff::NeedMore;
        };
        if seq != 0 || !(20..=1024).contains(&len) {
            return Sniff::No;
        }
        let Some(&version) = server.get(4) else {
            return Sniff::NeedMore;
        };
        if version != PROTOCOL_V10 {
            return Sniff::No;
        }
        let text = &server[5..server.len().min(5 + 64)];
        match text.iter().position(|&b| b == 0) {
            Some(end) if end > 0 && text[..end].iter().all(u8::is_ascii_graphic) => Sniff::Yes,
            Some(_) => Sniff::No,
            None if text.len() < 64 && text.iter().all(u8::is_ascii_graphic) => Sniff::NeedMore,
            None => Sniff::No,
        }
    }

    /// Bytes held in buffers (the bounded-memory tests read it).
    pub fn buffered(&self) -> usize {
        self.client.buffered() + self.server.buffered()
    }

    fn note(&mut self, msg: impl Into<String>) {
        if self.error.is_none() {
            self.error = Some(msg.into());
        }
    }

    fn stop(&mut self, why: &str) {
        self.note(why);
        self.phase = Phase::Stopped;
        self.client.lose();
        self.server.lose();
    }

    fn on_client(&mut self, data: &[u8], at: u64, pkt: u64) {
        if self.client.lost() {
            if !self.client_boundary(data) {
                return;
            }
            self.client.sync();
        }
        let mut used = 0;
        loop {
            let (n, step) = self.client.step(&data[used..]);
            used += n;
            if n > 0 && !self.client.lost() {
                self.creq.add(n, at, pkt);
            }
            match step {
                Step::Started { seq, .. } => {
                    self.command = seq == 0 && self.phase == Phase::Commands && !self.infile;
                    let cap = if self.command {
                        MAX_QUERY_TEXT
                    } else {
                        HEAD_BYTES
                    };
                    self.client.set_cap(cap);
                }
                Step::Done => {
                    let p = self.client.take();
                    let span = std::mem::take(&mut self.creq);
                    self.client_packet(p, span);
                }
                Step::More if n == 0 => return,
                Step::More => {}
            }
        }
    }

    /// Whether `data` opens with a command (the client side restarts there).
    fn client_boundary(&self, data: &[u8]) -> bool {
        if self.phase != Phase::Commands {
            return false;
        }
        match packet::header(data) {
            Some((len, 0)) => command::plausible(&data[4..], len, data.len() - 4 >= len as usize),
            _ => false,
        }
    }

    fn client_packet(&mut self, p: Packet, span: Span) {
        match self.phase {
            Phase::Handshake => self.handshake_response(&p),
            Phase::Commands if self.command => self.command(p, span),
            // Auth data of COM_CHANGE_USER, a LOCAL INFILE's file.
            Phase::Commands => {
                if self.infile && p.len == 0 {
                    self.infile = false;
                }
                if let Some(last) = self.pending.back_mut() {
                    last.req.merge(&span);
                }
            }
            Phase::Stopped => {}
        }
    }

    fn handshake_response(&mut self, p: &Packet) {
        let caps = match packet::le32(&p.head, 0) {
            Some(c) if c & CLIENT_PROTOCOL_41 != 0 => c,
            _ => u32::from(packet::le16(&p.head, 0).unwrap_or(0)),
        };
        if self.client_caps.is_none() {
            self.client_caps = Some(caps);
            let both = caps & self.server_caps.unwrap_or(caps);
            if caps & CLIENT_DEPRECATE_EOF == 0 {
                self.deprecate_eof = Some(false);
            } else if self.server_caps.is_some() {
                self.deprecate_eof = Some(both & CLIENT_DEPRECATE_EOF != 0);
            }
            // A client asks for compression only when the server offers it.
            if caps & (CLIENT_COMPRESS | CLIENT_ZSTD_COMPRESSION) != 0 {
                self.stop("compressed protocol: not read");
                return;
            }
        }
        if caps & CLIENT_SSL != 0 && p.len == SSL_REQUEST_LEN {
            self.tls_follows = true;
        }
    }

    /// Whether MySQL 8's query attributes precede query texts.
    fn attributes(&self) -> Option<bool> {
        let client = self.client_caps?;
        let both = client & self.server_caps.unwrap_or(client);
        Some(both & CLIENT_QUERY_ATTRIBUTES != 0)
    }

    fn command(&mut self, p: Packet, span: Span) {
        let Some(&cmd) = p.head.first() else {
            return;
        };
        // The server answers an unknown command too (ERR at least).
        let (name, answer) = command::known(cmd).unwrap_or(("COM_UNKNOWN", Answer::One));
        let mut pending = Pending {
            label: SmolStr::new_static(name),
            digest: None,
            trace: None,
            req: span,
            resp: Span::default(),
            reader: Reader::new(answer),
            before: None,
            cmd,
            prepares: None,
            stale: false,
        };
        match cmd {
            command::COM_QUERY | command::COM_STMT_PREPARE => self.text_command(&p, &mut pending),
            command::COM_STMT_EXECUTE | command::COM_STMT_BULK_EXECUTE => {
                self.execution(&p, &mut pending)
            }
            command::COM_STMT_CLOSE => {
                if let Some(id) = packet::le32(&p.head, 1) {
                    self.statements.remove(&id);
                    self.learned.remove(&id);
                }
            }
            command::COM_BINLOG_DUMP | command::COM_BINLOG_DUMP_GTID => {
                self.stop("binlog stream: not read");
                return;
            }
            _ => {}
        }
        if answer == Answer::None {
            return;
        }
        if self.pending.len() >= MAX_PENDING {
            self.note(format!("more than {MAX_PENDING} commands unanswered"));
            if let Some(old) = self.pending.pop_front() {
                self.push_exchange(old);
            }
        }
        self.pending.push_back(pending);
    }

    fn text_command(&mut self, p: &Packet, pending: &mut Pending) {
        if p.damaged {
            pending.label = LOST_TEXT.into();
            return;
        }
        if p.len > MAX_QUERY_TEXT as u64 {
            self.note(format!(
                "query text longer than {MAX_QUERY_TEXT} bytes: cut"
            ));
        }
        let Some(text) = command::query_text(&p.head, self.attributes()) else {
            pending.label = ATTRIBUTED_QUERY.into();
            return;
        };
        // mysqlslap and some C clients count the string's NUL in the length.
        let text = crate::lossy_text(text.strip_suffix(&[0]).unwrap_or(text));
        let (text, comment) = crate::trace_context::split_sql_comment(&text);
        pending.trace = comment.and_then(|c| c.trace.ok()).map(|t| t.trace_id);
        let mut d = ParamDigest::new();
        let label = self.shapes.sql(&text, &mut d);
        if p.head[0] == command::COM_STMT_PREPARE {
            self.last_prepare = Some(Statement {
                text: label.clone(),
                params: 0,
            });
            pending.label = SmolStr::from(format!("PREPARE {label}"));
            pending.prepares = Some(label);
        } else {
            pending.label = label;
            pending.digest = Some(d.finish());
        }
    }

    /// An execution: the statement's text by id, and a digest of its
    /// parameters: the null bitmap and the values, without the types a
    /// client sends with the first execution only (or with every one).
    /// For a statement whose parameter count is unknown (prepared before
    /// the capture, or pipelined), all that follows the header.
    fn execution(&mut self, p: &Packet, pending: &mut Pending) {
        let Some(id) = packet::le32(&p.head, 1) else {
            return;
        };
        let known = match id {
            command::LAST_PREPARED => self.last_prepare.clone(),
            _ => self.statements.get(&id).cloned(),
        };
        let params = known.as_ref().map(|s| usize::from(s.params));
        match known {
            Some(s) => pending.label = s.text,
            None => pending.before = Some(id),
        }
        if p.damaged || p.len > MAX_QUERY_TEXT as u64 || p.head[0] != command::COM_STMT_EXECUTE {
            return;
        }
        let rest = p.head.get(10..).unwrap_or_default();
        let mut d = ParamDigest::new();
        match params {
            Some(n) if n > 0 && id != command::LAST_PREPARED => {
                let nulls = n.div_ceil(8);
                let types = if rest.get(nulls) == Some(&1) {
                    2 * n
                } else {
                    0
                };
                d.add(rest.get(..nulls).unwrap_or_default());
                d.add(rest.get(nulls + 1 + types..).unwrap_or_default());
            }
            _ => d.add(rest),
        }
        pending.digest = Some(d.finish());
    }

    fn on_server(&mut self, data: &[u8], at: u64, pkt: u64) {
        if self.server.lost() {
            if !self.server_boundary(data) {
                return;
            }
            self.server.sync();
        }
        let mut used = 0;
        loop {
            let (n, step) = self.server.step(&data[used..]);
            used += n;
            if n > 0 && !self.server.lost() {
                self.sresp.add(n, at, pkt);
            }
            match step {
                Step::Started { .. } => self.server.set_cap(match self.phase {
                    Phase::Handshake => GREETING_BYTES,
                    _ => HEAD_BYTES,
                }),
                Step::Done => {
                    let p = self.server.take();
                    let span = std::mem::take(&mut self.sresp);
                    self.server_packet(p, span);
                }
                Step::More if n == 0 => return,
                Step::More => {}
            }
        }
    }

    /// Whether `data` opens with the first packet of an answer to the
    /// oldest command sent after the server side was lost. Older commands
    /// go unanswered.
    fn server_boundary(&mut self, data: &[u8]) -> bool {
        if self.phase != Phase::Commands {
            return false;
        }
        while self.pending.front().is_some_and(|p| p.stale) {
            let old = self.pending.pop_front().expect("front checked");
            self.push_exchange(old);
        }
        let (Some(front), Some((len, 1)), Some(&first)) =
            (self.pending.front(), packet::header(data), data.get(4))
        else {
            return false;
        };
        let fits = match front.reader.answer {
            Answer::Results => first != 0xFE && (first != 0x00 || len >= 7),
            Answer::Prepared => (first == 0x00 && len >= 12) || first == 0xFF,
            Answer::Auth => matches!(first, 0x00 | 0x01 | 0xFE | 0xFF),
            _ => true,
        };
        fits && len > 0
    }

    fn server_packet(&mut self, p: Packet, span: Span) {
        match self.phase {
            Phase::Handshake => self.handshake_answer(&p),
            Phase::Commands => self.answer(p, span),
            Phase::Stopped => {}
        }
    }

    fn handshake_answer(&mut self, p: &Packet) {
        match p.first() {
            Some(PROTOCOL_V10) if p.seq == 0 => self.greeting(&p.head),
            Some(0x00) => self.phase = Phase::Commands,
            Some(0xFF) => self.note("server refused the connection"),
            _ => {}
        }
    }

    /// Server capabilities: after the version string, the connection id (4),
    /// 8 bytes of scramble and a filler come the lower 2 bytes; after the
    /// charset (1) and status (2), the upper 2.
    fn greeting(&mut self, head: &[u8]) {
        let Some(end) = head.iter().skip(1).position(|&b| b == 0) else {
            return;
        };
        let at = 1 + end + 1 + 4 + 8 + 1;
        let lower = packet::le16(head, at);
        let upper = packet::le16(head, at + 5);
        if let Some(lower) = lower {
            let caps = u32::from(lower) | u32::from(upper.unwrap_or(0)) << 16;
            self.server_caps = Some(caps);
        }
    }

    fn answer(&mut self, p: Packet, span: Span) {
        let Some(front) = self.pending.front_mut() else {
            self.note("server: a packet no command asked for; resynchronizing");
            self.server.lose();
            return;
        };
        let outcome = front.reader.packet(&p, &mut self.deprecate_eof);
        if outcome != Outcome::DoneBefore {
            front.resp.merge(&span);
        }
        // Known from the prepare OK on: an execution may follow before the
        // answer's definitions end.
        let prepared = front.reader.got.prepared;
        let text = prepared.and(front.prepares.take());
        self.infile = front.reader.got.infile && outcome == Outcome::More;
        if let (Some((id, params, _)), Some(text)) = (prepared, text) {
            self.remember(id, Statement { text, params });
        }
        if p.damaged && self.error.is_none() {
            self.note("bytes missing from an answer's rows");
        }
        if outcome == Outcome::More {
            return;
        }
        let done = self.pending.pop_front().expect("front checked");
        self.push_exchange(done);
        if outcome == Outcome::DoneBefore {
            self.answer(p, span);
        }
    }

    /// The exchange of `p`, filled in where it is kept.
    fn push_exchange(&mut self, p: Pending) {
        let got = &p.reader.got;
        // The server frees a session's statements on these.
        let resets = matches!(
            p.cmd,
            command::COM_CHANGE_USER | command::COM_RESET_CONNECTION
        );
        if resets && got.error.is_none() && got.status.is_some() {
            self.statements.clear();
            self.learned.clear();
            self.last_prepare = None;
        }
        let label = match p.before {
            Some(id) => self.before_label(id, got.columns),
            None => p.label,
        };
        let e = crate::push_exchange(&mut self.done, self.connection, Protocol::Mysql, label);
        e.status = got.error.clone().map(Status::Sqlstate);
        e.rows = (got.columns.is_some() || got.rows > 0).then_some(got.rows);
        e.transaction = got.status.map(|s| match s & response::IN_TRANS {
            0 => TxState::Idle,
            _ => TxState::InTransaction,
        });
        e.trace = p.trace;
        e.params_digest = p.digest;
        crate::span::fill(e, &p.req, &p.resp);
    }

    fn remember(&mut self, id: u32, s: Statement) {
        if self.statements.len() < MAX_STATEMENTS || self.statements.contains_key(&id) {
            self.statements.insert(id, s);
        }
    }

    /// The label of statement `id` prepared before the capture; the
    /// columns its answers showed are remembered for later executions.
    fn before_label(&mut self, id: u32, columns: Option<u16>) -> SmolStr {
        if let Some(c) = columns {
            if self.learned.len() < MAX_STATEMENTS || self.learned.contains_key(&id) {
                self.learned.insert(id, c);
            }
        }
        let shape = PreparedShape {
            params: None,
            columns: self.learned.get(&id).copied().or(columns),
            verb: None,
        };
        prepared_label(&format!("#{id}"), shape)
    }
}

impl StreamAnalyzer for MysqlAnalyzer {
    fn on_data(&mut self, direction: Direction, data: &[u8], at_us: u64, packet: u64) {
        match direction {
            Direction::ToServer => self.on_client(data, at_us, packet),
            Direction::ToClient => self.on_server(data, at_us, packet),
        }
    }

    fn on_gap(&mut self, direction: Direction, missing: u64) {
        let framer = match direction {
            Direction::ToServer => &mut self.client,
            Direction::ToClient => &mut self.server,
        };
        if self.phase == Phase::Stopped || framer.skip_missing(missing) {
            return;
        }
        let side = direction.sender();
        self.note(format!(
            "{missing} bytes missing from the capture ({side}); resynchronized"
        ));
        match direction {
            Direction::ToServer => {
                self.client.lose();
                self.creq = Span::default();
            }
            Direction::ToClient => {
                self.server.lose();
                self.sresp = Span::default();
                for p in self.pending.iter_mut() {
                    p.stale = true;
                }
            }
        }
        if self.phase == Phase::Handshake {
            // Capabilities unknown from here: what follows is read as commands.
            self.phase = Phase::Commands;
        }
    }

    fn built_in(&mut self) -> Option<&mut Vec<Exchange>> {
        Some(&mut self.done)
    }

    fn drain_exchanges(&mut self, out: &mut Vec<Exchange>) {
        crate::hand_over(&mut self.done, out);
    }

    fn finish(&mut self) -> Vec<Exchange> {
        while let Some(p) = self.pending.pop_front() {
            self.push_exchange(p);
        }
        std::mem::take(&mut self.done)
    }

    fn open_since(&self) -> Option<u64> {
        let front = self.pending.front().map(|p| p.req.first_at);
        crate::earliest(front, self.creq.started_at())
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
    crate::fuzz::analyzer(data, MysqlAnalyzer::sniff, MysqlAnalyzer::new);
    let _ = MysqlAnalyzer::sniff_greeting(data);
    let _ = sender_is_client(data);
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = crate::normalize::mysql(text, &mut ParamDigest::new());
    }
}

/// For a connection first seen mid-stream: Some(true) when `payload` is one
/// whole plausible command (sequence 0), Some(false) for a greeting or a
/// whole OK or ERR packet of sequence 1 (an answer), None otherwise.
pub fn sender_is_client(payload: &[u8]) -> Option<bool> {
    let (len, seq) = packet::header(payload)?;
    let body = &payload[4..];
    if body.len() != len as usize {
        return None;
    }
    match seq {
        0 if command::plausible(body, len, true) => Some(true),
        0 if MysqlAnalyzer::sniff_greeting(payload) == Sniff::Yes => Some(false),
        1 => {
            let status = response::status_of(body, u64::from(len));
            let ok = body.first() == Some(&0x00) && (7..=64).contains(&len) && status.is_some();
            let err = body.first() == Some(&0xFF) && body.get(3) == Some(&b'#');
            (ok || err).then_some(false)
        }
        _ => None,
    }
}
