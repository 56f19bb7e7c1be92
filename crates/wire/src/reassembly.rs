//! In-order byte delivery for one direction of a TCP connection. Segments
//! that arrive ahead of a hole wait in a bounded buffer; when the buffer is
//! full, or the connection ends with the hole still open, the hole is
//! reported as a gap and delivery goes on after it.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// Bookkeeping per held out-of-order segment (B-tree slot, Vec header, times),
/// charged with its bytes so that one-byte segments cannot outgrow the budget.
const HELD_ENTRY_COST: usize = 96;

/// What the reassembler hands on, in stream order.
#[derive(Debug, PartialEq, Eq)]
pub enum Chunk<'a> {
    Data {
        data: &'a [u8],
        at_us: u64,
        packet: u64,
    },
    /// Bytes never captured.
    Gap(u64),
}

#[derive(Debug)]
struct Held {
    data: Vec<u8>,
    at_us: u64,
    packet: u64,
}

/// Shared accounting across all flows: out-of-order bytes held, and the
/// per-segment events kept in connections (see `flow::Bounds`).
#[derive(Debug, Default)]
pub struct Budget {
    pub held: usize,
    pub max_total: usize,
    pub events: usize,
    pub max_events: usize,
    /// Events that left with their connections (a window taken), counted by
    /// whoever took them, maybe on another thread; taken off `events` when
    /// the budget looks spent.
    pub released: Arc<AtomicUsize>,
}

impl Budget {
    /// True when no more events may be kept, after taking back those released.
    pub fn events_full(&mut self) -> bool {
        if self.events >= self.max_events {
            let back = self.released.swap(0, Ordering::Relaxed);
            self.events = self.events.saturating_sub(back);
        }
        self.events >= self.max_events
    }
}

#[derive(Debug, Default)]
pub struct Reassembler {
    /// Offset of the next byte to deliver; `None` before the first byte.
    next: Option<u64>,
    held: BTreeMap<u64, Held>,
    held_bytes: usize,
}

impl Reassembler {
    /// Sets where the stream starts (offset 0 after a SYN) when known.
    pub fn start_at(&mut self, offset: u64) {
        if self.next.is_none() {
            self.next = Some(offset);
        }
    }

    pub fn held_bytes(&self) -> usize {
        self.held_bytes
    }

    /// Adds a segment's captured bytes at `offset`; `wire_len` is its length
    /// on the wire (more when the capture cut it).
    #[allow(clippy::too_many_arguments)]
    pub fn push(
        &mut self,
        offset: u64,
        data: &[u8],
        wire_len: u64,
        at_us: u64,
        packet: u64,
        max_held: usize,
        budget: &mut Budget,
        out: &mut dyn FnMut(Chunk),
    ) {
        let next = *self.next.get_or_insert(offset);
        let end = offset.saturating_add(data.len() as u64);
        if end <= next && wire_len <= data.len() as u64 {
            return; // Already delivered: a retransmission.
        }
        if offset > next {
            let cost = data.len() + HELD_ENTRY_COST;
            let fits = self.held_bytes + cost <= max_held && budget.held + cost <= budget.max_total;
            if fits {
                if !data.is_empty() {
                    self.hold(offset, data, at_us, packet, budget);
                }
                return;
            }
            // No room to wait for the holes before it: give up on them.
            while self.next.is_some_and(|n| n < offset) {
                self.skip_to_held(budget, out, Some(offset));
            }
        }
        self.deliver(offset, data, at_us, packet, out);
        let wire_end = offset.saturating_add(wire_len);
        if self.next == Some(end) && wire_end > end {
            // The capture cut this segment: the rest is a gap.
            out(Chunk::Gap(wire_end - end));
            self.next = Some(wire_end);
        }
        self.drain(budget, out);
    }

    fn hold(&mut self, offset: u64, data: &[u8], at_us: u64, packet: u64, budget: &mut Budget) {
        let entry = self.held.entry(offset);
        if matches!(entry, std::collections::btree_map::Entry::Vacant(_)) {
            // Tiny out-of-order segments cost their bookkeeping, not just their bytes.
            self.held_bytes += HELD_ENTRY_COST;
            budget.held += HELD_ENTRY_COST;
        }
        let e = entry.or_insert(Held {
            data: Vec::new(),
            at_us,
            packet,
        });
        if data.len() > e.data.len() {
            let grow = data.len() - e.data.len();
            e.data = data.to_vec();
            self.held_bytes += grow;
            budget.held += grow;
        }
    }

    /// Delivers the part of `data` at or after the next expected offset.
    fn deliver(&mut self, offset: u64, data: &[u8], at: u64, pkt: u64, out: &mut dyn FnMut(Chunk)) {
        let next = self.next.unwrap_or(offset);
        let skip = next.saturating_sub(offset);
        if offset > next || skip >= data.len() as u64 {
            return;
        }
        let fresh = &data[skip as usize..];
        out(Chunk::Data {
            data: fresh,
            at_us: at,
            packet: pkt,
        });
        self.next = Some(next + fresh.len() as u64);
    }

    /// Delivers held segments that have become contiguous.
    fn drain(&mut self, budget: &mut Budget, out: &mut dyn FnMut(Chunk)) {
        while let Some(entry) = self.held.first_entry() {
            let next = self.next.unwrap_or(0);
            if *entry.key() > next {
                break;
            }
            let offset = *entry.key();
            let h = entry.remove();
            self.release(h.data.len() + HELD_ENTRY_COST, budget);
            self.deliver(offset, &h.data, h.at_us, h.packet, out);
        }
    }

    fn release(&mut self, n: usize, budget: &mut Budget) {
        self.held_bytes = self.held_bytes.saturating_sub(n);
        budget.held = budget.held.saturating_sub(n);
    }

    /// Reports the hole before the first held segment (or before `until`,
    /// whichever is first) as a gap and delivers what follows it.
    fn skip_to_held(
        &mut self,
        budget: &mut Budget,
        out: &mut dyn FnMut(Chunk),
        until: Option<u64>,
    ) {
        let first_held = self.held.keys().next().copied();
        let target = match (first_held, until) {
            (Some(a), Some(b)) => a.min(b),
            (Some(a), None) => a,
            (None, Some(b)) => b,
            (None, None) => return,
        };
        let next = self.next.unwrap_or(target);
        if target > next {
            out(Chunk::Gap(target - next));
            self.next = Some(target);
        }
        self.drain(budget, out);
    }

    /// The peer acknowledged every byte before `acked`: holes below it were
    /// received but never captured (Wireshark's "ACKed unseen segment", a
    /// capture that dropped packets) and will not come, so they become gaps
    /// now — before the peer's answer to those bytes is delivered.
    pub fn acked(&mut self, acked: u64, budget: &mut Budget, out: &mut dyn FnMut(Chunk)) {
        while let Some(next) = self.next.filter(|&n| n < acked) {
            self.skip_to_held(budget, out, Some(acked));
            if self.next == Some(next) {
                break;
            }
        }
    }

    /// End of the stream: every remaining hole becomes a gap.
    pub fn flush(&mut self, budget: &mut Budget, out: &mut dyn FnMut(Chunk)) {
        while !self.held.is_empty() {
            self.skip_to_held(budget, out, None);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn acknowledged_holes_become_gaps_at_once() {
        let (mut r, mut b) = fresh();
        let mut out = Vec::new();
        let mut emit = |c: Chunk| out.push(shown(c));
        r.push(0, b"ab", 2, 0, 1, 1 << 20, &mut b, &mut emit);
        r.push(5, b"fg", 2, 0, 2, 1 << 20, &mut b, &mut emit);
        // Nothing acknowledged past what was seen: the hole may still come.
        r.acked(2, &mut b, &mut emit);
        // The peer has 0..9: 2..5 and 7..9 were never captured.
        r.acked(9, &mut b, &mut emit);
        r.acked(9, &mut b, &mut emit);
        assert_eq!(out, vec!["ab", "<gap 3>", "fg", "<gap 2>"]);
        assert_eq!(r.held_bytes(), 0);
    }

    /// A stream starting at offset 0 with a 1 MiB budget.
    fn fresh() -> (Reassembler, Budget) {
        let mut r = Reassembler::default();
        r.start_at(0);
        let b = Budget {
            max_total: 1 << 20,
            ..Budget::default()
        };
        (r, b)
    }

    fn shown(c: Chunk) -> String {
        match c {
            Chunk::Data { data, .. } => String::from_utf8_lossy(data).into_owned(),
            Chunk::Gap(n) => format!("<gap {n}>"),
        }
    }

    fn run(segs: &[(u64, &[u8])], max_held: usize) -> Vec<String> {
        let (mut r, mut b) = fresh();
        let mut out = Vec::new();
        let mut emit = |c: Chunk| out.push(shown(c));
        for (i, (off, d)) in segs.iter().enumerate() {
            r.push(
                *off,
                d,
                d.len() as u64,
                0,
                i as u64,
                max_held,
                &mut b,
                &mut emit,
            );
        }
        r.flush(&mut b, &mut emit);
        assert_eq!(b.held, 0);
        out
    }

    #[test]
    fn in_order_out_of_order_and_overlap() {
        assert_eq!(run(&[(0, b"ab"), (2, b"cd")], 100), ["ab", "cd"]);
        assert_eq!(run(&[(2, b"cd"), (0, b"ab")], 100), ["ab", "cd"]);
        assert_eq!(run(&[(0, b"abc"), (1, b"bcde")], 100), ["abc", "de"]);
        assert_eq!(run(&[(0, b"ab"), (0, b"ab"), (2, b"c")], 100), ["ab", "c"]);
    }

    #[test]
    fn holes_become_gaps() {
        assert_eq!(run(&[(0, b"ab"), (5, b"fg")], 100), ["ab", "<gap 3>", "fg"]);
        // Buffer of 2 bytes: the second held segment does not fit.
        assert_eq!(
            run(&[(0, b"a"), (3, b"de"), (6, b"gh")], 2),
            ["a", "<gap 2>", "de", "<gap 1>", "gh"]
        );
    }

    #[test]
    fn cut_segments_report_the_missing_tail() {
        let mut r = Reassembler::default();
        let mut b = Budget {
            max_total: 100,
            ..Budget::default()
        };
        let mut out = Vec::new();
        r.push(0, b"ab", 10, 0, 1, 100, &mut b, &mut |c| {
            out.push(format!("{c:?}"))
        });
        r.push(10, b"k", 1, 0, 2, 100, &mut b, &mut |c| {
            out.push(format!("{c:?}"))
        });
        assert_eq!(out.len(), 3);
        assert_eq!(out[1], "Gap(8)");
    }
}
