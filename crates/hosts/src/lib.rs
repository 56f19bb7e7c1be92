//! Several hosts' captures made one (`analyze A B C`): the connections they
//! share found by the wire (`matching`), each host's clock placed against
//! the first file's through them (`clock`), chained through the hosts in
//! between (front – API – database), and for each shared connection the
//! copy to read: the one captured nearest its client, whose times are the
//! caller's. What comes out is what the merged read needs (`Feed`s) and
//! what the report tells of each host (`HostClock`).

pub mod clock;
pub mod matching;

use clock::Range;
use matching::{FlowRef, Shared};
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use whyslow_model::HostClock;
use whyslow_proto::sniff::sender_is_client;
use whyslow_wire::merged::SharedCopy;
use whyslow_wire::scan::{ends, FlowScan, HostScan};
use whyslow_wire::Feed;

/// One host's capture and its first pass.
#[derive(Debug)]
pub struct Host {
    pub name: String,
    pub path: PathBuf,
    pub scan: HostScan,
}

/// The hosts joined: each host's clock and what the merged read takes
/// (the placed hosts' captures only).
#[derive(Debug)]
pub struct Joined {
    pub clocks: Vec<HostClock>,
    pub feeds: Vec<Feed>,
}

/// Joins `hosts` (the first is the clock reference).
pub fn join(hosts: &[Host]) -> Joined {
    let scans: Vec<&HostScan> = hosts.iter().map(|h| &h.scan).collect();
    let shared = matching::shared(&scans);
    let placed = place_clocks(hosts.len(), &shared);
    let mut clocks: Vec<HostClock> = hosts
        .iter()
        .zip(&placed)
        .map(|(h, p)| HostClock {
            name: h.name.clone(),
            files: vec![h.path.display().to_string()],
            clock_offset_us: p.map(|p| p.offset),
            clock_offset_bound_us: p.map(|p| p.bound),
            placed_by: p.and_then(|p| p.by).map(|b| hosts[b].name.clone()),
            clock_disagrees: p.is_some_and(|p| p.disagrees),
            ..HostClock::default()
        })
        .collect();
    let mut feeds: Vec<Feed> = hosts
        .iter()
        .zip(&placed)
        .zip(0u16..)
        .map(|((h, p), host)| Feed {
            path: h.path.clone(),
            shift_us: p.map_or(0, |p| p.offset),
            host,
            ..Feed::default()
        })
        .collect();
    let offsets: Vec<i64> = placed.iter().map(|p| p.map_or(0, |p| p.offset)).collect();
    // A host whose clock could not be placed is not joined: its copies
    // neither stand for others nor are left out for them. One that shared
    // connections all the same had a clock no one offset fits.
    for s in &shared {
        for h in [s.x.0, s.y.0].into_iter().filter(|&h| placed[h].is_none()) {
            clocks[h].shared_connections += 1;
            clocks[h].clock_disagrees = true;
        }
    }
    let shared: Vec<Shared> = shared
        .into_iter()
        .filter(|s| placed[s.x.0].is_some() && placed[s.y.0].is_some())
        .collect();
    for (group, number) in groups(&shared).into_iter().zip(0u32..) {
        let keep = nearest_client(&group, &shared, &scans, &offsets);
        for &(h, f) in &group.members {
            clocks[h].shared_connections += 1;
            let mirror = (h, f) != keep;
            clocks[h].copies_left_out += u64::from(mirror);
            let flow = &scans[h].flows[f];
            let copy = SharedCopy {
                shared: number,
                mirror,
            };
            feeds[h].copies.insert(ends(flow.a, flow.b), copy);
        }
    }
    // Only the placed hosts are read: one on its own clock would misplace
    // every exchange it holds against the others'.
    let feeds = feeds
        .into_iter()
        .zip(&placed)
        .filter(|(_, p)| p.is_some())
        .map(|(f, _)| f)
        .collect();
    Joined { clocks, feeds }
}

/// A host's clock against the first's.
#[derive(Debug, Clone, Copy)]
struct Placed {
    offset: i64,
    bound: u64,
    by: Option<usize>,
    disagrees: bool,
}

/// Each host placed, nearest (smallest bound) first, through the host pairs
/// whose shared connections bound their clocks; None for a host sharing no
/// connection with a placed one.
fn place_clocks(n: usize, shared: &[Shared]) -> Vec<Option<Placed>> {
    let mut per_pair: BTreeMap<(usize, usize), Vec<Range>> = BTreeMap::new();
    for s in shared {
        if let Some((r, _)) = clock::of(s) {
            per_pair.entry((s.x.0, s.y.0)).or_default().push(r);
        }
    }
    let pairs: Vec<((usize, usize), Range, bool)> = per_pair
        .iter()
        .filter_map(|(&k, ranges)| clock::combined(ranges).map(|(r, d)| (k, r, d)))
        .collect();
    let mut placed: Vec<Option<Placed>> = vec![None; n];
    if n == 0 {
        return placed;
    }
    placed[0] = Some(Placed {
        offset: 0,
        bound: 0,
        by: None,
        disagrees: false,
    });
    loop {
        // The unplaced host reached with the smallest bound.
        let next = pairs
            .iter()
            .flat_map(|&((x, y), r, d)| {
                let from_x = placed[x]
                    .filter(|_| placed[y].is_none())
                    .map(|p| (y, x, r.mid(), p, d, r));
                let from_y = placed[y]
                    .filter(|_| placed[x].is_none())
                    .map(|p| (x, y, -r.mid(), p, d, r));
                from_x.into_iter().chain(from_y)
            })
            .min_by_key(|&(to, _, _, p, _, r)| (p.bound + r.bound(), to));
        let Some((to, from, theta, p, disagrees, r)) = next else {
            break;
        };
        placed[to] = Some(Placed {
            offset: p.offset + theta,
            bound: p.bound + r.bound(),
            by: Some(from),
            disagrees,
        });
    }
    placed
}

/// Copies of one connection on several hosts.
struct Group {
    members: Vec<FlowRef>,
}

/// The shared connections' copies grouped (a connection seen on three
/// hosts is one group of three).
fn groups(shared: &[Shared]) -> Vec<Group> {
    let mut parent: HashMap<FlowRef, FlowRef> = HashMap::new();
    fn root(parent: &mut HashMap<FlowRef, FlowRef>, x: FlowRef) -> FlowRef {
        let p = *parent.entry(x).or_insert(x);
        if p == x {
            return x;
        }
        let r = root(parent, p);
        parent.insert(x, r);
        r
    }
    for s in shared {
        let (a, b) = (root(&mut parent, s.x), root(&mut parent, s.y));
        if a != b {
            parent.insert(a.max(b), a.min(b));
        }
    }
    let mut by_root: BTreeMap<FlowRef, Vec<FlowRef>> = BTreeMap::new();
    let keys: Vec<FlowRef> = parent.keys().copied().collect();
    for k in keys {
        let r = root(&mut parent, k);
        by_root.entry(r).or_default().push(k);
    }
    by_root
        .into_values()
        .map(|mut members| {
            members.sort_unstable();
            Group { members }
        })
        .collect()
}

/// Of a group's copies, the one captured nearest the connection's client:
/// it sees the client's segments first, on the placed clocks. The client's
/// direction is the SYN's, else the one whose first bytes read as a
/// request, else the one that spoke first. Ties and the unknown keep the
/// first host's copy.
fn nearest_client(
    group: &Group,
    shared: &[Shared],
    scans: &[&HostScan],
    offsets: &[i64],
) -> FlowRef {
    let flow = |r: FlowRef| &scans[r.0].flows[r.1];
    // Wins of x over y in the client's direction, per member.
    let mut earlier: HashMap<FlowRef, (usize, usize)> = HashMap::new();
    for s in shared.iter().filter(|s| group.members.contains(&s.x)) {
        let Some(side) =
            client_side(flow(s.x)).or_else(|| client_side(flow(s.y)).map(|d| d ^ s.flip))
        else {
            continue;
        };
        for &(tx, ty) in &s.times[side] {
            let (cx, cy) = (tx as i64 - offsets[s.x.0], ty as i64 - offsets[s.y.0]);
            let won = if cx <= cy { s.x } else { s.y };
            let lost = if cx <= cy { s.y } else { s.x };
            earlier.entry(won).or_default().0 += 1;
            earlier.entry(lost).or_default().1 += 1;
        }
    }
    group
        .members
        .iter()
        .copied()
        .max_by_key(|m| {
            let (won, lost) = earlier.get(m).copied().unwrap_or_default();
            (won as i64 - lost as i64, std::cmp::Reverse(*m))
        })
        .unwrap_or(group.members[0])
}

/// The side of `f` its client sent from, as this copy shows it.
fn client_side(f: &FlowScan) -> Option<usize> {
    if let Some(syn) = f.syn_from {
        return Some(f.side_of(syn));
    }
    for (side, s) in f.sides.iter().enumerate() {
        match sender_is_client(&s.head) {
            Some(true) => return Some(side),
            Some(false) => return Some(side ^ 1),
            None => {}
        }
    }
    let first = |side: usize| f.sides[side].segs.first().map(|g| g.at_us);
    match (first(0), first(1)) {
        (Some(a), Some(b)) => Some(usize::from(b < a)),
        (Some(_), None) => Some(0),
        (None, Some(_)) => Some(1),
        (None, None) => None,
    }
}

/// Entry point of the cargo-fuzz target (fuzz/) and of the in-tree test
/// that runs it on pseudo-random input: no bytes may make it panic or
/// allocate without bound.
pub mod fuzz {
    use super::{join, Host};
    use whyslow_wire::flow::{Copies, FlowOptions, FlowTable};
    use whyslow_wire::read::read_packets;
    use whyslow_wire::scan::scan_reader;

    /// Bytes as two hosts' captures (the first two bytes, little-endian,
    /// the first one's length): each scanned, the two joined, then both read
    /// through one flow table with the joined copies (a mirror's exchanges
    /// taken for its callee times), each host's timestamps shifted as the
    /// join placed them.
    pub fn join_two(data: &[u8]) {
        let Some((len, rest)) = data.split_first_chunk::<2>() else {
            return;
        };
        let at = usize::from(u16::from_le_bytes(*len)).min(rest.len());
        let parts = [&rest[..at], &rest[at..]];
        let mut hosts = Vec::new();
        for (i, part) in parts.iter().enumerate() {
            let Ok(scan) = scan_reader(*part) else {
                return;
            };
            hosts.push(Host {
                name: format!("h{i}"),
                path: format!("h{i}").into(),
                scan,
            });
        }
        let joined = join(&hosts);
        let copies: Copies = joined
            .feeds
            .iter()
            .flat_map(|f| {
                f.copies
                    .iter()
                    .map(move |(&(a, b), &c)| ((a, b, f.host), c))
            })
            .collect();
        let mut table = FlowTable::new(FlowOptions::default());
        table.set_copies(copies);
        for feed in &joined.feeds {
            let part = parts[usize::from(feed.host)];
            let _ = read_packets(part, |p| {
                let mut p = p.clone();
                p.host = feed.host;
                p.at_us = (p.at_us as i64).saturating_sub(feed.shift_us).max(0) as u64;
                table.push(&p);
            });
        }
        let _ = table.finish();
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn the_seed_is_one_connection_on_two_hosts_placed_300_us_apart() {
            let seed = concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../../fuzz/seeds/hosts_join/two_hosts"
            );
            let data = std::fs::read(seed).unwrap();
            let len = usize::from(u16::from_le_bytes([data[0], data[1]]));
            let (a, b) = data[2..].split_at(len);
            let hosts: Vec<Host> = [a, b]
                .iter()
                .enumerate()
                .map(|(i, part)| Host {
                    name: format!("h{i}"),
                    path: format!("h{i}").into(),
                    scan: scan_reader(*part).unwrap(),
                })
                .collect();
            let joined = join(&hosts);
            assert_eq!(joined.clocks[1].shared_connections, 1);
            let offset = joined.clocks[1].clock_offset_us.unwrap();
            let bound = joined.clocks[1].clock_offset_bound_us.unwrap();
            assert!(offset.abs_diff(300) <= bound, "{:?}", joined.clocks[1]);
            join_two(&data);
        }

        #[test]
        fn pseudo_random_bytes_never_panic() {
            let mut seed = 1u64;
            for n in 0..200 {
                let bytes: Vec<u8> = (0..n * 7)
                    .map(|_| {
                        seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
                        (seed >> 56) as u8
                    })
                    .collect();
                super::join_two(&bytes);
            }
        }
    }
}
