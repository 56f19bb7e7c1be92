//! gRPC's messages in one direction of an HTTP/2 stream: each a compressed
//! flag and a 4-byte length before its bytes (gRPC's PROTOCOL-HTTP2,
//! "Length-Prefixed-Message"). Counted and sized as DATA payloads pass,
//! read by length and never buffered; the bytes hashed, when asked, so that
//! calls of one method with different messages are told apart.

use crate::digest::StreamHash;
use std::hash::Hasher;

/// The prefix before each message.
const PREFIX: usize = 5;

#[derive(Debug, Default)]
pub struct Messages {
    pub count: u32,
    /// Message bytes announced by the prefixes (those cut by a gap included).
    pub bytes: u64,
    pub compressed: u32,
    prefix: [u8; PREFIX],
    have: usize,
    /// Bytes of the current message not yet passed.
    left: u32,
    hash: Option<StreamHash>,
    /// The framing was lost (padding, a gap, a flag gRPC does not send): the
    /// counts stop, the hash is not used.
    pub lost: bool,
}

impl Messages {
    /// Messages whose bytes are hashed (`digest`).
    pub fn hashed() -> Self {
        Messages {
            hash: Some(StreamHash::default()),
            ..Messages::default()
        }
    }

    /// DATA payload bytes, in order.
    pub fn feed(&mut self, mut data: &[u8]) {
        while !data.is_empty() && !self.lost {
            if self.left > 0 {
                let n = data.len().min(self.left as usize);
                if let Some(h) = &mut self.hash {
                    h.write(&data[..n]);
                }
                self.left -= n as u32;
                data = &data[n..];
                continue;
            }
            let n = (PREFIX - self.have).min(data.len());
            self.prefix[self.have..self.have + n].copy_from_slice(&data[..n]);
            self.have += n;
            data = &data[n..];
            if self.have == PREFIX {
                self.message_start();
            }
        }
    }

    fn message_start(&mut self) {
        self.have = 0;
        let [flag, len @ ..] = self.prefix;
        if flag > 1 {
            self.lost = true;
            return;
        }
        let len = u32::from_be_bytes(len);
        self.count += 1;
        self.compressed += u32::from(flag);
        self.bytes += u64::from(len);
        self.left = len;
        if let Some(h) = &mut self.hash {
            // The length too: two empty messages are not one.
            h.write(&len.to_be_bytes());
        }
    }

    /// The bytes could not be followed (padding, a gap in the capture).
    pub fn lose(&mut self) {
        self.lost = true;
    }

    /// The digest of every message's bytes, when all were seen whole.
    pub fn digest(&self) -> Option<u64> {
        let whole = !self.lost && self.count > 0 && self.left == 0 && self.have == 0;
        self.hash.as_ref().filter(|_| whole).map(Hasher::finish)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(flag: u8, body: &[u8]) -> Vec<u8> {
        let mut m = vec![flag];
        m.extend_from_slice(&(body.len() as u32).to_be_bytes());
        m.extend_from_slice(body);
        m
    }

    fn fed_in_pieces(bytes: &[u8], piece: usize) -> Messages {
        let mut m = Messages::hashed();
        for chunk in bytes.chunks(piece) {
            m.feed(chunk);
        }
        m
    }

    #[test]
    fn messages_counted_and_hashed_however_split() {
        let bytes = [message(0, b"first"), message(1, b""), message(0, &[7; 300])].concat();
        let whole = fed_in_pieces(&bytes, bytes.len());
        assert_eq!((whole.count, whole.bytes, whole.compressed), (3, 305, 1));
        for piece in [1, 2, 5, 7, 64] {
            let m = fed_in_pieces(&bytes, piece);
            assert_eq!((m.count, m.bytes), (3, 305));
            assert_eq!(m.digest(), whole.digest(), "pieces of {piece}");
        }
    }

    #[test]
    fn different_messages_differ_and_a_cut_one_has_no_digest() {
        let a = fed_in_pieces(&message(0, b"id=1"), 3);
        let b = fed_in_pieces(&message(0, b"id=2"), 3);
        assert!(a.digest().is_some());
        assert_ne!(a.digest(), b.digest());
        let mut cut = Messages::hashed();
        cut.feed(&message(0, b"id=1")[..6]);
        assert_eq!(cut.digest(), None);
        let two_empty = fed_in_pieces(&[message(0, b""), message(0, b"")].concat(), 4);
        let one_empty = fed_in_pieces(&message(0, b""), 4);
        assert_ne!(two_empty.digest(), one_empty.digest());
    }

    #[test]
    fn a_flag_grpc_never_sends_stops_the_count() {
        let mut m = Messages::hashed();
        m.feed(&[message(0, b"ok"), message(9, b"not grpc"), message(0, b"x")].concat());
        assert_eq!(m.count, 1);
        assert!(m.lost);
        assert_eq!(m.digest(), None);
    }

    #[test]
    fn a_huge_length_is_skipped_by_length() {
        let mut m = Messages::default();
        m.feed(&[0, 0xff, 0xff, 0xff, 0xff, 1, 2, 3]);
        assert_eq!((m.count, m.bytes), (1, u64::from(u32::MAX)));
        assert_eq!(m.digest(), None);
    }
}
