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
}
