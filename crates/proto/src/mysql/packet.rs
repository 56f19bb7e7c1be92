//! MySQL packets from one direction of a byte stream: a 3-byte little-endian
//! length, a sequence id, then the payload. A payload of exactly
//! `MAX_PAYLOAD` bytes continues in the next packet (16 MiB packets); the
//! pieces make one logical packet here. Only the first `cap` bytes of a
//! payload are kept, the rest is skipped by its length.

/// A packet of this length continues in the next one (MySQL internals,
/// "Sending More Than 16 MB").
pub const MAX_PAYLOAD: u32 = 0xFF_FFFF;

/// One logical packet: its first sequence id, its whole length, and the
/// first bytes of its payload.
#[derive(Debug, Default)]
pub struct Packet {
    pub seq: u8,
    pub len: u64,
    pub head: Vec<u8>,
    /// A gap took bytes of it: the kept bytes may be wrong past the gap.
    pub damaged: bool,
}

impl Packet {
    /// The first payload byte, if any.
    pub fn first(&self) -> Option<u8> {
        self.head.first().copied()
    }
}

/// Where the framer is in the stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum At {
    /// Reading a header (`have` bytes of it so far).
    Header,
    /// Reading a payload: `left` bytes of this piece to come.
    Body { left: u32, more: bool },
    /// Lost: skipping until the caller finds a boundary (`sync`).
    Lost,
}

#[derive(Debug)]
pub struct Framer {
    at: At,
    header: [u8; 4],
    have: usize,
    packet: Packet,
    /// Bytes of payload kept per packet (set by the caller per packet).
    cap: usize,
    /// The header seen was the first piece of the packet.
    fresh: bool,
}

/// What one step over the input found.
pub enum Step {
    /// Bytes used, nothing complete.
    More,
    /// A header was read: the caller may set the cap for this packet.
    Started { seq: u8 },
    /// A packet is complete (take it with `take`).
    Done,
}

impl Framer {
    pub fn new(lost: bool) -> Self {
        Framer {
            at: if lost { At::Lost } else { At::Header },
            header: [0; 4],
            have: 0,
            packet: Packet::default(),
            cap: 0,
            fresh: true,
        }
    }

    pub fn lost(&self) -> bool {
        self.at == At::Lost
    }

    /// Reads from the next packet boundary: the caller checked one starts here.
    pub fn sync(&mut self) {
        self.at = At::Header;
        self.have = 0;
        self.fresh = true;
    }

    pub fn lose(&mut self) {
        self.at = At::Lost;
        self.have = 0;
        self.fresh = true;
        self.packet.head.clear();
    }

    pub fn set_cap(&mut self, cap: usize) {
        self.cap = cap;
    }

    pub fn take(&mut self) -> Packet {
        let keep = self.packet.head.capacity().min(super::KEEP_BUFFER);
        let p = std::mem::take(&mut self.packet);
        self.packet.head = Vec::with_capacity(keep.min(64));
        p
    }

    pub fn buffered(&self) -> usize {
        self.packet.head.capacity()
    }

    /// `missing` bytes were never captured: true when they fell inside the
    /// payload being read (it is marked damaged and its reading goes on).
    pub fn skip_missing(&mut self, missing: u64) -> bool {
        match self.at {
            // A payload's first byte says what it is: lost, it is not read on.
            At::Body { left, more } if missing < u64::from(left) && self.packet.len > 0 => {
                self.at = At::Body {
                    left: left - missing as u32,
                    more,
                };
                self.packet.damaged = true;
                self.packet.len += missing;
                true
            }
            At::Lost => true,
            _ => false,
        }
    }

    /// One step over `data`: the bytes used and what they completed.
    pub fn step(&mut self, data: &[u8]) -> (usize, Step) {
        match self.at {
            At::Lost => (data.len(), Step::More),
            At::Header => {
                let n = (4 - self.have).min(data.len());
                self.header[self.have..self.have + n].copy_from_slice(&data[..n]);
                self.have += n;
                if self.have < 4 {
                    return (n, Step::More);
                }
                self.have = 0;
                let [a, b, c, seq] = self.header;
                let len = u32::from_le_bytes([a, b, c, 0]);
                let more = len == MAX_PAYLOAD;
                self.at = At::Body { left: len, more };
                if !std::mem::replace(&mut self.fresh, false) {
                    return (n, self.piece_end_check());
                }
                self.packet.seq = seq;
                self.packet.len = 0;
                self.packet.damaged = false;
                self.packet.head.clear();
                (n, Step::Started { seq })
            }
            At::Body { left, more } => {
                let n = (left as usize).min(data.len());
                let head = &mut self.packet.head;
                let room = self.cap.saturating_sub(head.len()).min(n);
                if head.len() + room > head.capacity() {
                    // Doubling, but never past the cap.
                    let want = (head.len() + room).max(head.capacity() * 2).min(self.cap);
                    head.reserve_exact(want - head.len());
                }
                head.extend_from_slice(&data[..room]);
                self.packet.len += n as u64;
                let left = left - n as u32;
                self.at = At::Body { left, more };
                (n, self.piece_end_check())
            }
        }
    }

    /// A piece whose payload is all read ends the packet unless it was a
    /// full one (then the next header continues it).
    fn piece_end_check(&mut self) -> Step {
        match self.at {
            At::Body { left: 0, more } => {
                self.at = At::Header;
                self.fresh = !more;
                if more {
                    Step::More
                } else {
                    Step::Done
                }
            }
            _ => Step::More,
        }
    }
}

/// A length-encoded integer at the front of `b` (value, bytes used).
pub fn lenenc(b: &[u8]) -> Option<(u64, usize)> {
    let (&first, rest) = b.split_first()?;
    let (n, value) = match first {
        0..=0xFA => return Some((u64::from(first), 1)),
        0xFC => (2, rest.get(..2)?),
        0xFD => (3, rest.get(..3)?),
        0xFE => (8, rest.get(..8)?),
        _ => return None,
    };
    let mut bytes = [0u8; 8];
    bytes[..n].copy_from_slice(value);
    Some((u64::from_le_bytes(bytes), n + 1))
}

pub fn le16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

pub fn le32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

/// (payload length, sequence id) of a header at the front of `b`.
pub fn header(b: &[u8]) -> Option<(u32, u8)> {
    let h = b.get(..4)?;
    Some((u32::from_le_bytes([h[0], h[1], h[2], 0]), h[3]))
}
