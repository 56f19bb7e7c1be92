//! Where the bytes of one message were seen: first/last time and packet, size.

/// Times, packets and size of the bytes of one message seen so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Span {
    pub first_at: u64,
    pub last_at: u64,
    pub first_pkt: u64,
    pub last_pkt: u64,
    pub bytes: u64,
}

impl Span {
    /// `n` more bytes of the message, carried by `packet` at `at_us`.
    pub fn add(&mut self, n: usize, at_us: u64, packet: u64) {
        if self.bytes == 0 {
            self.first_at = at_us;
            self.first_pkt = packet;
        }
        self.last_at = at_us;
        self.last_pkt = packet;
        self.bytes = self.bytes.saturating_add(n as u64);
    }

    pub fn is_empty(&self) -> bool {
        self.bytes == 0
    }

    /// When its first byte was seen, if any was.
    pub fn started_at(&self) -> Option<u64> {
        (!self.is_empty()).then_some(self.first_at)
    }

    /// (first, last) packet numbers.
    pub fn packets(&self) -> (u64, u64) {
        (self.first_pkt, self.last_pkt)
    }

    /// Extended by `s`'s bytes (a message's span merged into an exchange's).
    pub fn merge(&mut self, s: &Span) {
        if s.is_empty() {
            return;
        }
        if self.is_empty() {
            *self = *s;
            return;
        }
        self.last_at = s.last_at;
        self.last_pkt = s.last_pkt;
        self.bytes = self.bytes.saturating_add(s.bytes);
    }
}

/// An exchange's times, sizes and packets from its request's and response's
/// spans (an empty response: unanswered).
pub fn fill(e: &mut whyslow_model::Exchange, req: &Span, resp: &Span) {
    let answered = (!resp.is_empty()).then_some(resp);
    e.request_first_at_us = req.first_at;
    e.request_last_at_us = req.last_at;
    e.request_bytes = req.bytes;
    e.request_packets = req.packets();
    e.response_first_at_us = answered.map(|s| s.first_at);
    e.response_last_at_us = answered.map(|s| s.last_at);
    e.response_bytes = resp.bytes;
    e.response_packets = answered.map(|s| s.packets());
}
