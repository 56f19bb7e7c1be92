//! memcached exchanges (text protocol and meta commands) from a byte stream.
//!
//! Hand-written rather than built on a parser library: after a capture gap
//! or a mid-stream start it must find the next trustworthy line start, and
//! data blocks (up to 1 GiB) are skipped by their announced length with a
//! counter, never buffered. The binary protocol (first byte 0x80) is not
//! handled.
//!
//! Pairing is FIFO, with two exceptions. `noreply` commands (and `quit`)
//! get no reply and become exchanges without a response as soon as they
//! are read. Meta commands with the `q` flag omit their nominal reply (EN
//! for mg, HD otherwise): a reply is given to the first quiet command it
//! can belong to (matched by an echoed `O` opaque or `k` key when present),
//! and the quiet commands it passes are proven done by it. Those become
//! exchanges without response fields but with the omitted word as status.
//! Without `O`/`k`, two quiet `mg` in a row where only the second hits are
//! ambiguous; the hit goes to the first (clients pipelining quiet gets use
//! `O` or `k` for the same reason).

mod command;
mod line;
mod reply;
mod sniff;
#[cfg(test)]
mod tests;

use crate::{Sniff, Span, Start, StreamAnalyzer};
use command::{Command, Kind};
use line::{Event, Gap, Reader};
use reply::{fits, may_answer, Form, Reply};
use std::collections::VecDeque;
use whyslow_model::{Direction, Exchange, Protocol, SmolStr, Status};

pub use command::MAX_KEY;
pub use line::MAX_LINE;

/// Unanswered requests kept per connection. Quiet meta pipelines send one
/// command per key of a page (hundreds); like the Redis bound, 1024 holds
/// deep pipelines while keeping thousands of tracked flows small.
pub const MAX_PENDING: usize = 1024;

/// Largest data block: memcached refuses an item size limit (`-I`) above
/// `ITEM_SIZE_MAX_UPPER_LIMIT` (1 GiB, memcached.h); a longer one is not
/// memcached.
pub const MAX_VALUE_BYTES: u64 = 1 << 30;

/// How far a request's reply has got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Answer {
    Waiting,
    /// Its reply lines or data block are being read.
    Reading,
    Done,
    /// Quiet meta command whose nominal reply was omitted.
    Silent,
}

#[derive(Debug)]
struct Pending {
    cmd: Command,
    request: Span,
    request_done: bool,
    answer: Answer,
    response: Span,
    word: Option<&'static str>,
    /// VALUE / VA items seen.
    values: u64,
}

/// Incremental memcached (text and meta commands) analyzer for one TCP connection.
#[derive(Debug)]
pub struct MemcachedAnalyzer {
    connection: u32,
    client: Reader,
    server: Reader,
    /// Bytes of the request / reply being read.
    cspan: Span,
    sspan: Span,
    /// False while scanning for a trustworthy line start.
    client_synced: bool,
    server_synced: bool,
    /// The data block being skipped ends its reply (VA), or more lines follow (VALUE).
    data_ends_reply: bool,
    pending: VecDeque<Pending>,
    done: Vec<Exchange>,
    error: Option<String>,
}

impl MemcachedAnalyzer {
    pub fn new(connection: u32, start: Start) -> Self {
        let synced = start == Start::Beginning;
        MemcachedAnalyzer {
            connection,
            client: Reader::default(),
            server: Reader::default(),
            cspan: Span::default(),
            sspan: Span::default(),
            client_synced: synced,
            server_synced: synced,
            data_ends_reply: false,
            pending: VecDeque::new(),
            done: Vec::new(),
            error: None,
        }
    }

    /// Do these first client bytes (from `start`) look like memcached (text and meta commands)?
    pub fn sniff(client: &[u8], start: Start) -> Sniff {
        sniff::sniff(client, start)
    }

    fn fail(&mut self, msg: impl Into<String>) {
        if self.error.is_none() {
            self.error = Some(msg.into());
        }
    }

    fn feed_client(&mut self, mut data: &[u8], at: u64, pkt: u64) {
        while !data.is_empty() {
            let (n, ev) = self.client.step(data);
            self.cspan.add(n, at, pkt);
            data = &data[n..];
            match ev {
                None => {}
                Some(Event::Line) => self.client_line(),
                Some(Event::DataDone) => self.request_done(),
                Some(Event::Discarded) => self.cspan = Span::default(),
                Some(Event::TooLong) => {
                    self.fail(format!("command line longer than {MAX_LINE} bytes"));
                    self.client_resync();
                    self.server_resync();
                }
                Some(Event::BadDataEnd) => {
                    // memcached answers CLIENT_ERROR bad data chunk to this
                    // request, then reads what follows as commands.
                    self.fail("data block not followed by CR LF");
                    self.request_done();
                    self.client_resync();
                }
            }
        }
    }

    fn client_line(&mut self) {
        let line = self.client.line();
        let cmd = match command::parse(line) {
            Some(c) => c,
            None if !self.client_synced => {
                self.cspan = Span::default();
                return;
            }
            None => match Command::unknown(line) {
                Some(c) => {
                    self.fail(format!("malformed or unknown command ({})", c.label));
                    c
                }
                None => {
                    self.fail("client bytes that are no memcached command");
                    self.client_resync();
                    self.server_resync();
                    return;
                }
            },
        };
        self.client_synced = true;
        if cmd.data.is_some_and(|n| n > MAX_VALUE_BYTES) {
            self.fail(format!("data block longer than {MAX_VALUE_BYTES} bytes"));
            self.client_resync();
            return;
        }
        if self.pending.len() >= MAX_PENDING {
            self.fail(format!("more than {MAX_PENDING} unanswered requests"));
            self.server_resync();
        }
        let data = cmd.data;
        self.pending.push_back(Pending {
            cmd,
            request: Span::default(),
            request_done: false,
            answer: Answer::Waiting,
            response: Span::default(),
            word: None,
            values: 0,
        });
        match data {
            Some(n) => self.client.expect_data(n),
            None => self.request_done(),
        }
    }

    /// The request being read (the newest one) is complete.
    fn request_done(&mut self) {
        let span = std::mem::take(&mut self.cspan);
        let Some(p) = self.pending.back_mut().filter(|p| !p.request_done) else {
            return;
        };
        p.request = span;
        p.request_done = true;
        if !p.cmd.expects_reply() {
            if let Some(p) = self.pending.pop_back() {
                let e = self.exchange(p);
                self.done.push(e);
            }
        }
        self.emit_completed();
    }

    fn feed_server(&mut self, mut data: &[u8], at: u64, pkt: u64) {
        while !data.is_empty() {
            let (n, ev) = self.server.step(data);
            self.sspan.add(n, at, pkt);
            data = &data[n..];
            match ev {
                None => {}
                Some(Event::Line) => self.server_line(),
                Some(Event::DataDone) => self.data_done(),
                Some(Event::Discarded) => self.sspan = Span::default(),
                Some(Event::TooLong) => {
                    self.fail(format!("reply line longer than {MAX_LINE} bytes"));
                    self.server_resync();
                }
                Some(Event::BadDataEnd) => {
                    self.fail("value not followed by CR LF");
                    self.server_resync();
                }
            }
        }
    }

    fn reading(&self) -> Option<usize> {
        self.pending
            .iter()
            .position(|p| p.answer == Answer::Reading)
    }

    fn server_line(&mut self) {
        let r = reply::parse(self.server.line());
        if let Some(i) = self.reading() {
            return self.reply_line(i, r);
        }
        if !self.server_synced && !self.trusted(&r) {
            self.sspan = Span::default();
            return;
        }
        let Some(i) = self.pick(&r) else {
            if self.server_synced {
                self.fail(format!("reply {} without a request", r.word));
                self.server_resync();
            }
            self.sspan = Span::default();
            return;
        };
        self.server_synced = true;
        if let Some(p) = self.pending.get_mut(i) {
            p.answer = Answer::Reading;
        }
        self.reply_line(i, r);
    }

    /// While resynchronizing: is `r` a reply the next request can get?
    fn trusted(&self, r: &Reply) -> bool {
        let next = self
            .pending
            .iter()
            .find(|p| p.answer == Answer::Waiting && p.cmd.expects_reply());
        r.known && next.is_some_and(|p| fits(p.cmd.kind, r))
    }

    /// The request `r` answers: the first one waiting, past quiet ones it
    /// cannot belong to (they are proven done: `Silent`).
    fn pick(&mut self, r: &Reply) -> Option<usize> {
        let waiting = |p: &Pending| p.answer == Answer::Waiting && p.cmd.expects_reply();
        // Candidates: quiet commands up to and including the first other one.
        let mut end = 0;
        for (i, p) in self.pending.iter().enumerate() {
            if waiting(p) {
                end = i + 1;
                if !p.cmd.quiet {
                    break;
                }
            }
        }
        let tagged = |p: &Pending| {
            (r.opaque.is_some() && r.opaque == p.cmd.opaque)
                || (r.key_tag.is_some() && r.key_tag == p.cmd.key_tag)
        };
        let candidates = || self.pending.iter().take(end).enumerate();
        let target = candidates()
            .find(|(_, p)| waiting(p) && tagged(p))
            .or_else(|| {
                candidates()
                    .find(|(_, p)| waiting(p) && (!p.cmd.quiet || may_answer(p.cmd.kind, r)))
            })
            .map(|(i, _)| i)?;
        for p in self.pending.iter_mut().take(target) {
            if p.answer == Answer::Waiting && p.cmd.quiet {
                p.answer = Answer::Silent;
            }
        }
        Some(target)
    }

    /// One line of the reply to request `i`.
    fn reply_line(&mut self, i: usize, r: Reply) {
        let Some(kind) = self.pending.get(i).map(|p| p.cmd.kind) else {
            return;
        };
        let multi = matches!(kind, Kind::Retrieval | Kind::Stats);
        let ends = match r.form {
            Form::Value(n) | Form::Va(n) if n > MAX_VALUE_BYTES => {
                self.fail(format!("{} of {n} bytes (over {MAX_VALUE_BYTES})", r.word));
                return self.server_resync();
            }
            Form::Value(n) | Form::Va(n) => {
                self.data_ends_reply = matches!(r.form, Form::Va(_)) || !multi;
                self.server.expect_data(n);
                false
            }
            Form::End | Form::Error => true,
            Form::Line | Form::Number if kind == Kind::Retrieval => {
                self.fail(format!("reply {} inside a VALUE listing", r.word));
                return self.server_resync();
            }
            // STAT, ITEM, PREFIX lines of a listing; OK/RESET answer alone.
            Form::Line | Form::Number if kind == Kind::Stats => matches!(r.word, "OK" | "RESET"),
            Form::Line | Form::Number => true,
        };
        if let Some(p) = self.pending.get_mut(i) {
            if matches!(r.form, Form::Value(_) | Form::Va(_)) {
                p.values = p.values.saturating_add(1);
            }
            p.word = Some(r.word);
        }
        if ends {
            self.reply_done(i);
        }
    }

    fn data_done(&mut self) {
        if self.data_ends_reply {
            if let Some(i) = self.reading() {
                self.reply_done(i);
            }
        }
    }

    fn reply_done(&mut self, i: usize) {
        let span = std::mem::take(&mut self.sspan);
        if let Some(p) = self.pending.get_mut(i) {
            p.response = span;
            p.answer = Answer::Done;
        }
        self.emit_completed();
    }

    fn emit_completed(&mut self) {
        while self
            .pending
            .front()
            .is_some_and(|p| p.request_done && matches!(p.answer, Answer::Done | Answer::Silent))
        {
            if let Some(p) = self.pending.pop_front() {
                let e = self.exchange(p);
                self.done.push(e);
            }
        }
    }

    /// Scan client bytes for the next valid command line; the request
    /// being read, if any, is emitted as it is.
    fn client_resync(&mut self) {
        self.client_synced = false;
        self.client.resync();
        let span = std::mem::take(&mut self.cspan);
        if self.pending.back().is_some_and(|p| !p.request_done) {
            if let Some(mut p) = self.pending.pop_back() {
                p.request = span;
                let e = self.exchange(p);
                self.done.push(e);
            }
        }
    }

    /// Replies in flight may belong to anything: flush what is pending as
    /// unanswered (keeping a request still being sent, whose reply cannot
    /// have been sent yet) and accept replies only for later requests.
    fn server_resync(&mut self) {
        self.server_synced = false;
        self.server.resync();
        let span = std::mem::take(&mut self.sspan);
        let keep = match self.pending.back() {
            Some(p) if !p.request_done && p.answer == Answer::Waiting => self.pending.pop_back(),
            _ => None,
        };
        while let Some(mut p) = self.pending.pop_front() {
            if p.answer == Answer::Reading {
                p.response = span;
                p.word = None;
            }
            let e = self.exchange(p);
            self.done.push(e);
        }
        self.pending.extend(keep);
    }

    fn exchange(&self, p: Pending) -> Exchange {
        let mut e = Exchange::new(
            self.connection,
            Protocol::Memcached,
            SmolStr::new(&p.cmd.label),
        );
        e.request_first_at_us = p.request.first_at;
        e.request_last_at_us = p.request.last_at;
        e.request_bytes = p.request.bytes;
        e.request_packets = p.request.packets();
        if !p.response.is_empty() {
            e.response_first_at_us = Some(p.response.first_at);
            e.response_last_at_us = Some(p.response.last_at);
            e.response_bytes = p.response.bytes;
            e.response_packets = Some(p.response.packets());
        }
        e.status = status(&p).map(|w| Status::Memcached(w.to_string()));
        let counted = matches!(p.cmd.kind, Kind::Retrieval | Kind::MetaGet);
        if counted && matches!(p.answer, Answer::Done | Answer::Silent) && e.status.is_some() {
            e.rows = Some(p.values);
        }
        e.params_digest = p.cmd.digest;
        e
    }

    fn gap(&mut self, direction: Direction, missing: u64) {
        let (reader, span) = match direction {
            Direction::ToServer => (&mut self.client, &mut self.cspan),
            Direction::ToClient => (&mut self.server, &mut self.sspan),
        };
        let g = reader.skip_gap(missing);
        if g != Gap::Lost {
            span.bytes = span.bytes.saturating_add(missing);
        }
        match (g, direction) {
            (Gap::Absorbed, _) => {}
            (Gap::DataDone, Direction::ToServer) => self.request_done(),
            (Gap::DataDone, Direction::ToClient) => self.data_done(),
            (Gap::Lost, _) => {
                self.fail(format!(
                    "{missing} bytes missing from the capture ({}→{}); resynchronized",
                    direction.sender(),
                    direction.receiver()
                ));
                // Replies to requests lost in a client gap still come back:
                // the reply side cannot be trusted either.
                if direction == Direction::ToServer {
                    self.client_resync();
                }
                self.server_resync();
            }
        }
    }
}

/// Status word of a finished (or flushed) request.
fn status(p: &Pending) -> Option<&'static str> {
    if p.answer == Answer::Silent {
        return Some(if p.cmd.kind == Kind::MetaGet {
            "EN"
        } else {
            "HD"
        });
    }
    if p.answer != Answer::Done {
        return None;
    }
    let word = p.word?;
    Some(match (p.cmd.kind, word) {
        (Kind::Retrieval, "END") if p.values == 0 => "MISS",
        (Kind::Retrieval, "END") if p.values >= p.cmd.keys => "HIT",
        (Kind::Retrieval, "END") => "PARTIAL",
        (Kind::Stats, "END" | "STAT") => "OK",
        _ => word,
    })
}

impl StreamAnalyzer for MemcachedAnalyzer {
    fn on_data(&mut self, direction: Direction, data: &[u8], at_us: u64, packet: u64) {
        match direction {
            Direction::ToServer => self.feed_client(data, at_us, packet),
            Direction::ToClient => self.feed_server(data, at_us, packet),
        }
    }

    fn on_gap(&mut self, direction: Direction, missing: u64) {
        self.gap(direction, missing);
    }

    fn drain_exchanges(&mut self, out: &mut Vec<Exchange>) {
        crate::hand_over(&mut self.done, out);
    }

    fn finish(&mut self) -> Vec<Exchange> {
        let cspan = std::mem::take(&mut self.cspan);
        if let Some(p) = self.pending.back_mut().filter(|p| !p.request_done) {
            p.request = cspan;
        }
        let sspan = std::mem::take(&mut self.sspan);
        while let Some(mut p) = self.pending.pop_front() {
            if p.answer == Answer::Reading {
                // Cut short: the bytes seen count, the status is unknown.
                p.response = sspan;
                p.word = None;
            }
            let e = self.exchange(p);
            self.done.push(e);
        }
        std::mem::take(&mut self.done)
    }

    fn open_since(&self) -> Option<u64> {
        let oldest = self.pending.front().and_then(|p| p.request.started_at());
        crate::earliest(oldest, self.cspan.started_at())
    }

    fn error(&self) -> Option<&str> {
        self.error.as_deref()
    }
}

/// Fuzz entry: see `crate::fuzz::analyzer` (an odd first byte starts mid-stream).
pub fn fuzz(data: &[u8]) {
    crate::fuzz::analyzer(data, MemcachedAnalyzer::sniff, MemcachedAnalyzer::new);
}

/// For a connection first seen mid-stream: Some(true) when `payload` opens
/// with a command line, Some(false) with a reply line memcached sends
/// (a bare number could be anything), None when it does not tell.
pub fn sender_is_client(payload: &[u8]) -> Option<bool> {
    if sniff::sniff(payload, Start::Beginning) == Sniff::Yes {
        return Some(true);
    }
    let end = payload
        .windows(2)
        .take(MAX_LINE)
        .position(|w| w == b"\r\n")?;
    let r = reply::parse(&payload[..end]);
    (r.known && r.form != Form::Number).then_some(false)
}
