//! Which connections two hosts' captures share, by the wire: the same data
//! segments (sequence number and length) in both, never the addresses and
//! ports, which NAT, kube-proxy and load balancers rewrite. A segment sent
//! twice in one capture (a retransmission) is left out: which of its copies
//! the other host saw is unknown.

use std::collections::HashMap;
use whyslow_wire::scan::{FlowScan, HostScan};

/// Segments two copies must share to be one connection: one shared by
/// chance needs 32 bits of sequence number and the length to agree; two,
/// in one pair of connections, do not happen by chance.
pub const MIN_SHARED_SEGMENTS: usize = 2;
/// Copies of one segment looked at across all hosts: a key seen more often
/// is sequence numbers reused, not one connection.
const MAX_COPIES: usize = 8;

/// A flow of one host: (host, flow).
pub type FlowRef = (usize, usize);

/// One copy of a segment, by its (seq, len): (host, flow, side, time).
type SegCopy = (usize, usize, usize, u64);

/// A segment two copies share: (side in x, side in y, time at x, time at y).
type Record = (usize, usize, u64, u64);

/// A connection captured by two hosts: `x`'s side `s` is `y`'s side
/// `s ^ flip`. `times[s]`: for each segment both hold that `x`'s side `s`
/// sent, (time at `x`, time at `y`), on their own clocks.
#[derive(Debug, Clone)]
pub struct Shared {
    pub x: FlowRef,
    pub y: FlowRef,
    pub flip: usize,
    pub times: [Vec<(u64, u64)>; 2],
}

/// Every connection two of `hosts` share, each pair of copies once, each
/// copy matched to at most one copy per other host (the one it shares the
/// most segments with).
pub fn shared(hosts: &[&HostScan]) -> Vec<Shared> {
    let mut copies: HashMap<(u32, u32), Vec<SegCopy>> = HashMap::new();
    for (h, scan) in hosts.iter().enumerate() {
        for (f, flow) in scan.flows.iter().enumerate() {
            for (side, segs) in once_sent(flow) {
                for (seq, len, at) in segs {
                    copies.entry((seq, len)).or_default().push((h, f, side, at));
                }
            }
        }
    }
    let mut pairs: HashMap<(FlowRef, FlowRef), Vec<Record>> = HashMap::new();
    for list in copies
        .values()
        .filter(|l| l.len() >= 2 && l.len() <= MAX_COPIES)
    {
        for (i, a) in list.iter().enumerate() {
            for b in list[i + 1..].iter().filter(|b| b.0 != a.0) {
                let (a, b) = if a.0 < b.0 { (a, b) } else { (b, a) };
                let key = ((a.0, a.1), (b.0, b.1));
                pairs.entry(key).or_default().push((a.2, b.2, a.3, b.3));
            }
        }
    }
    let mut found: Vec<Shared> = pairs
        .into_iter()
        .filter_map(|((x, y), records)| one_connection(x, y, &records))
        .collect();
    // Most shared first; then each copy keeps its best match per host.
    found.sort_by_key(|s| {
        let n = s.times[0].len() + s.times[1].len();
        (std::cmp::Reverse(n), s.x, s.y)
    });
    let mut taken: std::collections::HashSet<(FlowRef, usize)> = Default::default();
    found.retain(|s| {
        let free = !taken.contains(&(s.x, s.y.0)) && !taken.contains(&(s.y, s.x.0));
        if free {
            taken.insert((s.x, s.y.0));
            taken.insert((s.y, s.x.0));
        }
        free
    });
    found.sort_by_key(|s| (s.x, s.y));
    found
}

/// Each side's segments sent once: (side, [(seq, len, time)]).
fn once_sent(flow: &FlowScan) -> impl Iterator<Item = (usize, Vec<(u32, u32, u64)>)> + '_ {
    flow.sides.iter().enumerate().map(|(side, s)| {
        let mut seen: HashMap<(u32, u32), usize> = HashMap::new();
        for g in &s.segs {
            *seen.entry((g.seq, g.len)).or_default() += 1;
        }
        let once = s
            .segs
            .iter()
            .filter(|g| seen[&(g.seq, g.len)] == 1)
            .map(|g| (g.seq, g.len, g.at_us))
            .collect();
        (side, once)
    })
}

/// The records of two copies as one connection, if they are one: enough
/// segments, the sides mapped one way (the way most records say).
fn one_connection(x: FlowRef, y: FlowRef, records: &[Record]) -> Option<Shared> {
    let flipped = records.iter().filter(|r| r.0 != r.1).count();
    let flip = usize::from(2 * flipped > records.len());
    let mut times: [Vec<(u64, u64)>; 2] = Default::default();
    for r in records.iter().filter(|r| r.0 ^ r.1 == flip) {
        times[r.0].push((r.2, r.3));
    }
    (times[0].len() + times[1].len() >= MIN_SHARED_SEGMENTS).then_some(Shared { x, y, flip, times })
}
