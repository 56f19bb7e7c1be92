//! DNS (RFC 1035) exchanges: one per query, paired with its response by
//! transaction id (a resolver answers in any order), labelled with the
//! question's type and name ("A api.internal"). The response gives the
//! status (its rcode, and TC when the answer did not fit) and the answer
//! count. A query never answered is an exchange with no response: the
//! client's timeout and its retry are the detectors' to read. A query sent
//! again with the same id while the first is unanswered (a stub resolver's
//! retry) ends the first one unanswered; the two carry the id as their
//! parameters' digest, so that a retry reads as the same call again.
//!
//! One framing for both transports: DNS over TCP prefixes each message with
//! its length (RFC 1035 §4.2.2), and the flow table gives each UDP datagram
//! the same prefix, so this analyzer reads both. A message cut short (a
//! snapshot length, a gap) is read as far as it goes; a stream that lost its
//! framing resyncs at a segment opening with a plausible message.

pub mod message;
#[cfg(test)]
mod tests;

use crate::{Sniff, Span, Start, StreamAnalyzer};
use message::{
    addresses, header, parse, plausible, question_key, rcode_name, type_name, Message, HEADER,
};
use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use whyslow_model::{Direction, Exchange, Protocol, SmolStr, Status};

/// Queries awaiting an answer per flow; past it the oldest goes unanswered.
/// A load generator keeps ~100 in flight per socket (dnsperf's default
/// `-q`); a stub resolver two (A and AAAA).
pub const MAX_PENDING: usize = 4096;
/// A query unanswered this long is ended unanswered when the flow next
/// carries anything: 30 s is the longest a stub resolver waits for one try
/// (glibc's `RES_MAXRETRANS`), so no answer can still be meant for it.
pub const GIVE_UP_US: u64 = 30_000_000;
/// Queries a stub resolver's socket carries between a try and its retry:
/// the other type's (A beside AAAA), sent and perhaps asked again.
pub const MAX_BETWEEN: u64 = 2;
/// A query left unanswered while this many were sent after it on its
/// flow is ended unanswered: a load generator's socket (dnsperf keeps 100
/// in flight) is answered far sooner, and a stub resolver's never gets
/// near (a lookup is a few queries). Below `MAX_PENDING`, so that a flow
/// whose answers are missing ends its queries here, in order.
pub const GIVE_UP_QUERIES: u64 = 2048;
/// Label of a query whose question could not be read.
pub const NO_QUESTION: &str = "? (question not read)";
/// Length prefix of a message (RFC 1035 §4.2.2).
const PREFIX: usize = 2;

/// One direction's message in progress.
#[derive(Default)]
struct Side {
    /// The length prefix and the bytes of the message read so far.
    buf: Vec<u8>,
    span: Span,
    /// Bytes of a cut message still to come, skipped.
    skip: u64,
    /// The framing was lost: wait for a segment opening with a message.
    lost: bool,
}

struct Pending {
    label: SmolStr,
    id: u16,
    /// The question, as `question_key` keys it: an answer must carry it.
    key: Option<u64>,
    /// Its place among the flow's queries.
    seq: u64,
    /// It asks again a query this flow lost (see `query`).
    retry: bool,
    span: Span,
}

pub struct DnsAnalyzer {
    connection: u32,
    sides: [Side; 2],
    pending: HashMap<u16, Pending>,
    /// Pending queries in the order sent, (seq, id); entries of queries
    /// answered since are skipped when they reach the front.
    order: VecDeque<(u64, u16)>,
    done: Vec<Exchange>,
    error: Option<String>,
    /// Responses to no query seen (its query before the capture, a
    /// duplicate answer, an answer to another question): counted, not paired.
    pub unmatched_responses: u64,
    /// Queries seen on the flow.
    queries: u64,
    /// Bytes each message's framing adds: the length prefix the flow table
    /// gives a UDP datagram is not on the wire.
    framing: u64,
}

impl DnsAnalyzer {
    pub fn new(connection: u32, start: Start) -> Self {
        let lost = start == Start::MidStream;
        DnsAnalyzer {
            connection,
            sides: [
                Side {
                    lost,
                    ..Side::default()
                },
                Side {
                    lost,
                    ..Side::default()
                },
            ],
            pending: HashMap::new(),
            order: VecDeque::new(),
            done: Vec::new(),
            error: None,
            unmatched_responses: 0,
            queries: 0,
            framing: 0,
        }
    }

    /// For a flow of UDP datagrams, each given a length prefix by the flow
    /// table: the prefix is not counted in the messages' sizes.
    pub fn datagrams(connection: u32) -> Self {
        DnsAnalyzer {
            framing: PREFIX as u64,
            ..DnsAnalyzer::new(connection, Start::Beginning)
        }
    }

    /// Whether `client` opens with a DNS query in TCP framing.
    pub fn sniff(client: &[u8], _start: Start) -> Sniff {
        if client.len() < PREFIX + HEADER {
            // A length prefix that cannot frame a header says no at once.
            return match client {
                [a, b, ..] if usize::from(u16::from_be_bytes([*a, *b])) < HEADER => Sniff::No,
                _ => Sniff::NeedMore,
            };
        }
        match opens_message(client) {
            Some(false) => Sniff::Yes,
            _ => Sniff::No,
        }
    }

    fn note(&mut self, text: impl FnOnce() -> String) {
        if self.error.is_none() {
            self.error = Some(text());
        }
    }

    fn message(&mut self, direction: Direction, cut: bool) {
        let side = &mut self.sides[idx(direction)];
        let mut span = std::mem::take(&mut side.span);
        span.bytes = span.bytes.saturating_sub(self.framing);
        let body = side.buf.get(PREFIX..).unwrap_or(&[]);
        // A response is paired by id and question: its header and the
        // question's key are all it needs.
        let parsed = match header(body) {
            Ok(h) if h.response => Ok(h),
            _ => parse(body),
        };
        let key = question_key(body);
        // The addresses, read only from an answer that has records.
        let resolved = match &parsed {
            Ok(h) if h.response && h.answers > 0 => Some(addresses(body)),
            _ => None,
        };
        side.buf.clear();
        let m = match parsed {
            Ok(m) => m,
            Err(_) if cut => return,
            Err(_) => {
                let n = body_len_note(direction);
                return self.note(|| n);
            }
        };
        self.sweep(span.last_at);
        if m.response {
            self.response(&m, key, &span, resolved);
        } else {
            self.query(&m, key, span);
        }
    }

    fn query(&mut self, m: &Message, key: Option<u64>, span: Span) {
        let label = match &m.question {
            Some(q) => {
                let ty = type_name(q.qtype);
                let mut label = String::with_capacity(ty.len() + 1 + q.name.len());
                label.push_str(&ty);
                label.push(' ');
                label.push_str(&q.name);
                SmolStr::from(label)
            }
            None => SmolStr::new_static(NO_QUESTION),
        };
        let seq = self.queries;
        self.queries += 1;
        // The same id again before an answer: a stub resolver's retry when
        // it asks the same question right after (its socket carries a
        // lookup, no more); else an id reused (a busy socket's ids wrap).
        let mut retry = false;
        if let Some(old) = self.pending.remove(&m.id) {
            retry = old.label == label && seq - old.seq <= MAX_BETWEEN + 1;
            self.unanswered(old, retry);
        }
        if self.pending.len() >= MAX_PENDING {
            if let Some(old) = self.pop_oldest() {
                self.unanswered(old, false);
            }
        }
        let pending = Pending {
            label,
            id: m.id,
            key,
            seq,
            retry,
            span,
        };
        self.pending.insert(m.id, pending);
        self.order.push_back((seq, m.id));
    }

    fn response(
        &mut self,
        m: &Message,
        key: Option<u64>,
        span: &Span,
        resolved: Option<Vec<IpAddr>>,
    ) {
        // An answer carries its query's question (RFC 5452 §9.1); one that
        // does not answers another query with the same id.
        let matches = |p: &Pending| m.questions == 0 || key.is_none() || p.key == key;
        if !self.pending.get(&m.id).is_some_and(matches) {
            self.unmatched_responses += 1;
            return;
        }
        let q = self.pending.remove(&m.id).expect("just found");
        let e = crate::push_exchange(&mut self.done, self.connection, Protocol::Dns, q.label);
        crate::span::fill(e, &q.span, span);
        e.params_digest = q.retry.then(|| transaction(q.id));
        let mut status = rcode_name(m.rcode).into_owned();
        if m.truncated {
            status.push_str(" TC");
        }
        e.status = Some(Status::Dns(status));
        e.rows = Some(u64::from(m.answers));
        e.resolved_to = resolved
            .filter(|a| !a.is_empty())
            .map(Vec::into_boxed_slice);
    }

    /// `q` was never answered; `retried`: the client asked it again.
    fn unanswered(&mut self, q: Pending, retried: bool) {
        let e = crate::push_exchange(&mut self.done, self.connection, Protocol::Dns, q.label);
        crate::span::fill(e, &q.span, &Span::default());
        e.params_digest = (retried || q.retry).then(|| transaction(q.id));
    }

    /// The oldest query still pending, taken out.
    fn pop_oldest(&mut self) -> Option<Pending> {
        while let Some((seq, id)) = self.order.pop_front() {
            if self.pending.get(&id).is_some_and(|p| p.seq == seq) {
                return self.pending.remove(&id);
            }
        }
        None
    }

    /// Ends the oldest queries while they are older than `GIVE_UP_US` or
    /// have `GIVE_UP_QUERIES` sent after them; answered ones at the front
    /// of the order are dropped from it.
    fn sweep(&mut self, now: u64) {
        while let Some(&(seq, id)) = self.order.front() {
            let stale = match self.pending.get(&id) {
                Some(p) if p.seq == seq => {
                    now.saturating_sub(p.span.first_at) > GIVE_UP_US
                        || self.queries - seq > GIVE_UP_QUERIES
                }
                _ => {
                    self.order.pop_front();
                    continue;
                }
            };
            if !stale {
                return;
            }
            if let Some(old) = self.pop_oldest() {
                self.unanswered(old, false);
            }
        }
    }
}

/// A query's transaction id as its parameters' digest, for a try and its
/// retry only (the same query again on its socket): the retry repeats the
/// very call. Other queries have none.
fn transaction(id: u16) -> u64 {
    u64::from(id)
}

fn idx(d: Direction) -> usize {
    match d {
        Direction::ToServer => 0,
        Direction::ToClient => 1,
    }
}

fn body_len_note(direction: Direction) -> String {
    let who = match direction {
        Direction::ToServer => "client",
        Direction::ToClient => "server",
    };
    format!("DNS: a {who} message shorter than its header; skipped")
}

/// Some(is a response) when `bytes` open with a length prefix and a
/// plausible message.
fn opens_message(bytes: &[u8]) -> Option<bool> {
    let len = usize::from(u16::from_be_bytes([*bytes.first()?, *bytes.get(1)?]));
    if len < HEADER {
        return None;
    }
    plausible(bytes.get(PREFIX..)?)
}

impl StreamAnalyzer for DnsAnalyzer {
    fn on_data(&mut self, direction: Direction, data: &[u8], at_us: u64, packet: u64) {
        let i = idx(direction);
        let mut input = data;
        if self.sides[i].lost {
            if opens_message(input).is_none() {
                return;
            }
            self.sides[i].lost = false;
        }
        while !input.is_empty() {
            let side = &mut self.sides[i];
            if side.skip > 0 {
                let n = side.skip.min(input.len() as u64);
                side.skip -= n;
                input = &input[n as usize..];
                continue;
            }
            let need = match side.buf.len() {
                n if n < PREFIX => PREFIX,
                _ => PREFIX + usize::from(u16::from_be_bytes([side.buf[0], side.buf[1]])),
            };
            let take = (need - side.buf.len()).min(input.len());
            side.buf.extend_from_slice(&input[..take]);
            side.span.add(take, at_us, packet);
            input = &input[take..];
            if side.buf.len() == need && need > PREFIX {
                self.message(direction, false);
            } else if side.buf.len() == PREFIX && need == PREFIX && side.buf == [0, 0] {
                side.buf.clear();
                side.span = Span::default();
            }
        }
    }

    fn on_gap(&mut self, direction: Direction, missing: u64) {
        let side = &mut self.sides[idx(direction)];
        if side.lost {
            return;
        }
        if side.skip > 0 {
            // Inside a cut message's tail already: the gap eats into it.
            if missing <= side.skip {
                side.skip -= missing;
                return;
            }
        } else if side.buf.len() >= PREFIX {
            let need = PREFIX + usize::from(u16::from_be_bytes([side.buf[0], side.buf[1]]));
            let remaining = (need - side.buf.len()) as u64;
            if missing <= remaining {
                // A message cut short (a datagram past the snapshot length):
                // read what is there, skip the rest of it.
                side.skip = remaining - missing;
                self.message(direction, true);
                return;
            }
        } else if side.buf.is_empty() && missing == 0 {
            return;
        }
        let side = &mut self.sides[idx(direction)];
        side.buf.clear();
        side.span = Span::default();
        side.skip = 0;
        side.lost = true;
    }

    fn drain_exchanges(&mut self, out: &mut Vec<Exchange>) {
        crate::hand_over(&mut self.done, out);
    }

    fn finish(&mut self) -> Vec<Exchange> {
        while let Some(p) = self.pop_oldest() {
            self.unanswered(p, false);
        }
        std::mem::take(&mut self.done)
    }

    fn error(&self) -> Option<&str> {
        self.error.as_deref()
    }

    fn open_since(&self) -> Option<u64> {
        // The oldest query still pending: the first live entry of the order.
        let queued = self
            .order
            .iter()
            .find_map(|&(seq, id)| self.pending.get(&id).filter(|p| p.seq == seq))
            .map(|p| p.span.first_at);
        let reading = self.sides[0].span.started_at();
        crate::earliest(queued, reading)
    }
}

/// Fuzz entry: the message parser on the bytes, then `crate::fuzz::analyzer`
/// (an odd first byte starts mid-stream).
pub fn fuzz(data: &[u8]) {
    let _ = parse(data);
    let _ = plausible(data);
    crate::fuzz::analyzer(data, DnsAnalyzer::sniff, DnsAnalyzer::new);
}
