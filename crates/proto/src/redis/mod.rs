//! Redis (RESP2/RESP3) exchanges from a byte stream: pipelines, MULTI/EXEC,
//! pub/sub, RESP3 pushes and attributes, CLIENT REPLY OFF/SKIP.
//!
//! Hand-written rather than built on a RESP library: the parser must start
//! and resynchronize mid-stream, skip bulk payloads by their length without
//! buffering them (a 16 MB SET costs what a 16-byte one does), and keep only
//! the few bytes a label needs.

mod command;
mod frame;
mod request;
mod sync;
pub use frame::MAX_DEPTH;
pub use request::{MAX_ARG_BYTES, MAX_KEPT_ARGS};
#[cfg(test)]
mod tests;

use crate::{Sniff, Span, Start, StreamAnalyzer};
use command::Effect;
use frame::{Outcome, Reply, ReplyReader};
use request::{Command, RequestReader};
use std::collections::VecDeque;
use sync::{ReplyScan, RequestScan};
use whyslow_model::{Direction, Exchange, Protocol, SmolStr, Status};

/// Requests sent and not yet answered. Deep pipelines are Redis's normal
/// (redis-benchmark -P, `redis-cli --pipe`); past this many the oldest is
/// reported unanswered and its reply, when it comes, skipped.
pub const MAX_PENDING: usize = 1024;

/// Pub/sub reply kinds (first element of the array or push).
const CONFIRMATIONS: [&[u8]; 6] = [
    b"subscribe",
    b"psubscribe",
    b"ssubscribe",
    b"unsubscribe",
    b"punsubscribe",
    b"sunsubscribe",
];
const MESSAGES: [&[u8]; 3] = [b"message", b"pmessage", b"smessage"];

/// A command waiting for its reply.
#[derive(Debug)]
struct Pending {
    label: SmolStr,
    digest: Option<u64>,
    span: Span,
    /// Order of completion among the connection's commands.
    seq: u64,
    effect: Effect,
}

/// CLIENT REPLY state.
#[derive(Debug, Clone, Copy, PartialEq)]
enum ReplyMode {
    On,
    Off,
    SkipNext,
}

/// Incremental Redis (RESP2/RESP3) analyzer for one TCP connection.
#[derive(Debug)]
pub struct RespAnalyzer {
    connection: u32,
    req: RequestReader,
    resp: ReplyReader,
    /// Some while skipping bytes to a trustworthy message start.
    req_scan: Option<RequestScan>,
    resp_scan: Option<ReplyScan>,
    req_span: Span,
    resp_span: Span,
    pending: VecDeque<Pending>,
    done: Vec<Exchange>,
    error: Option<String>,
    /// Commands completed so far, and how many had been when the reply
    /// being read began (a reply cannot answer a later command).
    completed: u64,
    reply_after: u64,
    /// Replies still owed to commands evicted from a full queue.
    evicted: u64,
    /// Pub/sub confirmations still due for the last (un)subscribe paired.
    skip_confirmations: u64,
    reply_mode: ReplyMode,
    /// RESP2 subscribed mode: arrays of kind "message" are pushes.
    subscribed: bool,
    resp3: bool,
    /// MONITOR: timestamped simple strings answer nothing.
    monitor: bool,
    /// The description of the reader's last command: clients repeat
    /// commands (a pipeline of SETs to one key, a poll of one GET), and
    /// describing them again was a third of the analyzer's time.
    last: Option<(SmolStr, command::Effect)>,
}

impl RespAnalyzer {
    pub fn new(connection: u32, start: Start) -> Self {
        let mid = start == Start::MidStream;
        RespAnalyzer {
            connection,
            req: RequestReader::new(),
            resp: ReplyReader::new(),
            req_scan: mid.then(|| RequestScan::new(true)),
            resp_scan: mid.then(|| ReplyScan::new(true)),
            req_span: Span::default(),
            resp_span: Span::default(),
            pending: VecDeque::new(),
            done: Vec::new(),
            error: None,
            completed: 0,
            reply_after: 0,
            evicted: 0,
            skip_confirmations: 0,
            reply_mode: ReplyMode::On,
            subscribed: false,
            resp3: false,
            monitor: false,
            last: None,
        }
    }

    /// Do these first client bytes (from `start`) look like Redis (RESP2/RESP3)?
    pub fn sniff(client: &[u8], start: Start) -> Sniff {
        match start {
            Start::Beginning => sync::sniff_beginning(client),
            Start::MidStream => sync::sniff_midstream(client),
        }
    }

    fn note(&mut self, msg: impl Into<String>) {
        if self.error.is_none() {
            self.error = Some(msg.into());
        }
    }

    fn feed_requests(&mut self, mut data: &[u8], at: u64, pkt: u64) {
        while !data.is_empty() {
            if let Some(scan) = &mut self.req_scan {
                let (used, found) = scan.scan(data);
                data = &data[used..];
                if !found {
                    return;
                }
                let cand = std::mem::take(&mut scan.cand);
                self.req_scan = None;
                self.req = RequestReader::new();
                self.req_span = Span::default();
                self.request_bytes(&cand, at, pkt);
                continue;
            }
            let used = self.request_bytes(data, at, pkt);
            data = &data[used..];
        }
    }

    /// Feeds `data` to the command reader until one command ends; returns
    /// the bytes used (all of them after an error: the scanner takes over).
    fn request_bytes(&mut self, data: &[u8], at: u64, pkt: u64) -> usize {
        let (used, outcome) = self.req.feed(data);
        self.req_span.add(used, at, pkt);
        match outcome {
            Outcome::More => {}
            Outcome::Done(cmd) => self.on_command(cmd),
            Outcome::Skipped => self.req_span = Span::default(),
            Outcome::Error(e) => {
                self.note(format!("{e}; resynchronizing on the next command"));
                let line_start = used > 0 && data.get(used - 1) == Some(&b'\n');
                self.start_request_resync(line_start);
            }
        }
        used
    }

    fn start_request_resync(&mut self, line_start: bool) {
        self.req = RequestReader::new();
        self.req_span = Span::default();
        self.req_scan = Some(RequestScan::new(line_start));
    }

    fn on_command(&mut self, cmd: Command) {
        let (label, effect) = match &self.last {
            // describe() reads only the kept arguments and the count.
            Some((label, effect)) if cmd.repeat => (label.clone(), *effect),
            _ => {
                let (label, effect) = command::describe(self.req.kept());
                let label = SmolStr::from(label);
                self.last = Some((label.clone(), effect));
                (label, effect)
            }
        };
        let span = std::mem::take(&mut self.req_span);
        let seq = self.completed;
        self.completed += 1;
        let p = Pending {
            label,
            digest: cmd.digest,
            span,
            seq,
            effect,
        };
        if !self.expects_reply(effect) {
            self.push_exchange(p, None);
            return;
        }
        if self.pending.len() >= MAX_PENDING {
            if let Some(old) = self.pending.pop_front() {
                self.push_exchange(old, None);
                self.evicted += 1;
                self.note(format!("more than {MAX_PENDING} unanswered commands"));
            }
        }
        self.pending.push_back(p);
    }

    /// Applies CLIENT REPLY: OFF and SKIP themselves get no reply; ON does.
    fn expects_reply(&mut self, effect: Effect) -> bool {
        match (effect, self.reply_mode) {
            (Effect::ReplyOn, _) => {
                self.reply_mode = ReplyMode::On;
                true
            }
            (Effect::ReplyOff, _) => {
                self.reply_mode = ReplyMode::Off;
                false
            }
            (Effect::ReplySkip, ReplyMode::Off) => false,
            (Effect::ReplySkip, _) => {
                self.reply_mode = ReplyMode::SkipNext;
                false
            }
            (_, ReplyMode::Off) => false,
            (_, ReplyMode::SkipNext) => {
                self.reply_mode = ReplyMode::On;
                false
            }
            (_, ReplyMode::On) => true,
        }
    }

    fn feed_replies(&mut self, mut data: &[u8], at: u64, pkt: u64) {
        while !data.is_empty() {
            if let Some(scan) = &mut self.resp_scan {
                // Only a command sent after the resynchronization can be answered.
                let (skip, found) = scan.scan(data, !self.pending.is_empty());
                data = &data[skip..];
                if !found {
                    return;
                }
                self.resp_scan = None;
                self.resp = ReplyReader::new();
                self.resp_span = Span::default();
            }
            if self.resp_span.is_empty() {
                self.reply_after = self.completed;
            }
            let (used, outcome) = self.resp.feed(data);
            self.resp_span.add(used, at, pkt);
            match outcome {
                Outcome::More | Outcome::Skipped => {}
                Outcome::Done(reply) => {
                    let span = std::mem::take(&mut self.resp_span);
                    self.on_reply(reply, span);
                }
                Outcome::Error(e) => {
                    self.note(format!("{e}; resynchronizing on the next reply"));
                    let line_start = used > 0 && data.get(used - 1) == Some(&b'\n');
                    self.start_reply_resync(line_start);
                }
            }
            data = &data[used..];
        }
    }

    /// Replies can no longer be told apart: the commands waiting are
    /// reported unanswered and pairing starts again with the next command.
    fn start_reply_resync(&mut self, line_start: bool) {
        self.flush_pending();
        self.resp = ReplyReader::new();
        self.resp_span = Span::default();
        self.resp_scan = Some(ReplyScan::new(line_start));
        self.evicted = 0;
        self.skip_confirmations = 0;
    }

    fn flush_pending(&mut self) {
        while let Some(p) = self.pending.pop_front() {
            self.push_exchange(p, None);
        }
    }

    fn on_reply(&mut self, reply: Reply, span: Span) {
        let kind = reply.kind;
        let first = reply.first.as_slice();
        let confirmation = CONFIRMATIONS.contains(&first);
        if kind == b'>' && !confirmation {
            return; // RESP3 push: out of band.
        }
        let resp2_pubsub = kind == b'*' && !self.resp3;
        // A PING waiting means nothing but +PONG or a subscriber's array can
        // come: a message-looking array is then a message even when the
        // subscription was not seen (capture begun mid-stream).
        let front = self.pending.front().map(|p| p.effect);
        let front_subscribes = matches!(front, Some(Effect::Subscribe { .. }));
        let subscriber = self.subscribed || front_subscribes || front == Some(Effect::Ping);
        if resp2_pubsub && subscriber && MESSAGES.contains(&first) {
            return; // RESP2 published message.
        }
        if kind == b'+' && self.monitor && reply.digit_line {
            return; // MONITOR feed line.
        }
        if self.evicted > 0 {
            self.evicted -= 1;
            return;
        }
        let expected = subscriber || self.skip_confirmations > 0;
        if confirmation && (kind == b'>' || (resp2_pubsub && expected)) {
            return self.on_confirmation(reply, span);
        }
        self.pair(reply, span);
    }

    /// A (un)subscribe confirmation: the first answers the command, the
    /// others (one per further channel) are skipped.
    fn on_confirmation(&mut self, reply: Reply, span: Span) {
        if let Some(n) = reply.third {
            self.subscribed = n > 0;
        }
        if self.skip_confirmations > 0 {
            self.skip_confirmations -= 1;
            return;
        }
        let answers = self.pending.front().is_some_and(|p| {
            matches!(p.effect, Effect::Subscribe { .. }) && p.seq < self.reply_after
        });
        if !answers {
            return; // e.g. UNSUBSCRIBE from all: one per channel, count unknown.
        }
        if let Some(p) = self.pending.pop_front() {
            if let Effect::Subscribe { channels } = p.effect {
                self.skip_confirmations = channels.saturating_sub(1);
            }
            self.push_exchange(p, Some((&reply, span))).rows = None;
        }
    }

    fn pair(&mut self, reply: Reply, span: Span) {
        let answers = self
            .pending
            .front()
            .is_some_and(|p| p.seq < self.reply_after);
        let Some(p) = answers.then(|| self.pending.pop_front()).flatten() else {
            self.note("RESP reply without a pending command");
            return;
        };
        if reply.error.is_none() {
            self.apply(p.effect);
        }
        self.push_exchange(p, Some((&reply, span)));
    }

    /// Connection state changed by a command that succeeded.
    fn apply(&mut self, effect: Effect) {
        match effect {
            Effect::Hello(Some(v)) => self.resp3 = v == 3,
            Effect::Monitor => self.monitor = true,
            Effect::Reset => {
                self.resp3 = false;
                self.subscribed = false;
                self.monitor = false;
                self.reply_mode = ReplyMode::On;
            }
            _ => {}
        }
    }

    /// The exchange of `p` (and its reply), filled in where it is kept.
    fn push_exchange(&mut self, p: Pending, reply: Option<(&Reply, Span)>) -> &mut Exchange {
        let e = crate::push_exchange(&mut self.done, self.connection, Protocol::Redis, p.label);
        e.request_first_at_us = p.span.first_at;
        e.request_last_at_us = p.span.last_at;
        e.request_bytes = p.span.bytes;
        e.request_packets = p.span.packets();
        e.params_digest = p.digest;
        if let Some((r, s)) = reply {
            e.response_first_at_us = Some(s.first_at);
            e.response_last_at_us = Some(s.last_at);
            e.response_bytes = s.bytes;
            e.response_packets = Some(s.packets());
            e.status = r.error.clone().map(Status::RedisError);
            if b"*~%".contains(&r.kind) {
                e.rows = r.count;
            }
        }
        e
    }
}

impl StreamAnalyzer for RespAnalyzer {
    fn on_data(&mut self, direction: Direction, data: &[u8], at_us: u64, packet: u64) {
        match direction {
            Direction::ToServer => self.feed_requests(data, at_us, packet),
            Direction::ToClient => self.feed_replies(data, at_us, packet),
        }
    }

    fn on_gap(&mut self, direction: Direction, missing: u64) {
        if missing == 0 {
            return;
        }
        // Inside a payload of known length the gap is only uncounted bytes.
        let (absorbed, side) = match direction {
            Direction::ToServer => (
                self.req_scan.is_none() && self.req.skip_missing(missing),
                "client→server",
            ),
            Direction::ToClient => (
                self.resp_scan.is_none() && self.resp.skip_missing(missing),
                "server→client",
            ),
        };
        let span = match direction {
            Direction::ToServer => &mut self.req_span,
            Direction::ToClient => &mut self.resp_span,
        };
        if absorbed {
            span.bytes = span.bytes.saturating_add(missing);
            return;
        }
        let mut missing = missing;
        if direction == Direction::ToServer && self.req_scan.is_none() {
            // A large value's tail and what followed it: the command is whole.
            if let Some((cmd, after)) = self.req.end_in_gap(missing) {
                let tail = missing - after;
                self.req_span.bytes = self.req_span.bytes.saturating_add(tail);
                self.on_command(cmd);
                if after == 0 {
                    return;
                }
                missing = after;
            }
        }
        self.note(format!(
            "{missing} bytes missing from the capture ({side}); RESP resynchronized"
        ));
        match direction {
            Direction::ToServer => self.start_request_resync(true),
            Direction::ToClient => self.start_reply_resync(true),
        }
    }

    fn built_in(&mut self) -> Option<&mut Vec<Exchange>> {
        Some(&mut self.done)
    }

    fn drain_exchanges(&mut self, out: &mut Vec<Exchange>) {
        crate::hand_over(&mut self.done, out);
    }

    fn finish(&mut self) -> Vec<Exchange> {
        // A reply cut short still shows when the server began answering.
        let partial = std::mem::take(&mut self.resp_span);
        let answers = self.resp_scan.is_none()
            && self.evicted == 0
            && self
                .pending
                .front()
                .is_some_and(|p| p.seq < self.reply_after);
        if !partial.is_empty() && answers {
            if let Some(p) = self.pending.pop_front() {
                self.push_exchange(p, Some((&Reply::default(), partial)));
            }
        }
        self.flush_pending();
        std::mem::take(&mut self.done)
    }

    fn open_since(&self) -> Option<u64> {
        let oldest = self.pending.front().and_then(|p| p.span.started_at());
        crate::earliest(oldest, self.req_span.started_at())
    }

    fn error(&self) -> Option<&str> {
        self.error.as_deref()
    }
}

/// Fuzz entry: see `crate::fuzz::analyzer` (an odd first byte starts mid-stream).
pub fn fuzz(data: &[u8]) {
    crate::fuzz::analyzer(data, RespAnalyzer::sniff, RespAnalyzer::new);
}

/// For a connection first seen mid-stream: Some(true) when `payload` opens
/// with a command, Some(false) with a reply line (simple string, error,
/// integer, bulk length), None when it does not tell.
pub fn sender_is_client(payload: &[u8]) -> Option<bool> {
    if sync::sniff_beginning(payload) == Sniff::Yes {
        return Some(true);
    }
    let end = payload
        .windows(2)
        .take(MAX_ORIENT_LINE)
        .position(|w| w == b"\r\n")?;
    let (kind, text) = payload[..end].split_first()?;
    let integer = |t: &[u8]| frame::parse_int(t).is_some();
    let reply = match kind {
        b'+' | b'-' => text.iter().all(|b| !b.is_ascii_control()),
        b':' => integer(text),
        b'$' => text == b"-1" || integer(text),
        _ => false,
    };
    reply.then_some(false)
}

/// A reply line longer than this is not taken for one when orienting.
const MAX_ORIENT_LINE: usize = 512;
