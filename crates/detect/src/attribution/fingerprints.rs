//! Calls of one fingerprint that each request of a kind makes once: a dashboard
//! that fetches each of its 11 parts, a checkout that reads one cache entry.
//! On connections the requests share (a pool that checks a connection out
//! per call, one pipelined connection), a call fits every request in flight
//! alike, and timing cannot say whose it is. But where a capture holds as
//! many calls of a fingerprint (server, request, parameter digest) as requests of
//! one kind, each request of that kind made one of them — the fingerprint is
//! placed like runs on a held connection (`matching`): a call is given where
//! every way of giving each request one call agrees. The earliest answered
//! request can only have had the calls that ended before its answer, and so
//! on down the line; calls that two requests in flight could swap stay
//! ambiguous.
//!
//! The count is the evidence, and it is exact or nothing: one call more or
//! less than requests (a request that made it twice, one that skipped it, a
//! call the capture began after) and the fingerprint's calls are left alone.

use super::units::{Holder, Unit};
use foldhash::{HashMap, HashMapExt};
use std::hash::{BuildHasher, Hash};
use std::net::SocketAddr;
use whyslow_model::Exchange;

/// The identity of a call fingerprint: its server's port, normalized
/// request and parameter digest. The port, not the address: a request that
/// calls one of a service's replicas (endpoints behind one name, load
/// balanced) makes one call of the fingerprint whichever it reached, and
/// the count is over all of them.
fn fingerprint_of(e: &Exchange, server: &HashMap<u32, SocketAddr>) -> Option<u64> {
    if e.params_unknown {
        return None;
    }
    let server = server.get(&e.connection)?.port();
    let state = foldhash::fast::FixedState::with_seed(0);
    let mut h = state.build_hasher();
    (server, e.request.as_str(), e.params_digest).hash(&mut h);
    Some(std::hash::Hasher::finish(&h))
}

/// Marks each single call whose fingerprint's count equals the count of one
/// request kind as that fingerprint's (`Holder::Fingerprint`, with one request of the
/// kind). `kinds`: each inbound request id's kind, any comparable value.
pub fn mark<K: Eq + Hash + Copy>(
    units: &mut [Unit],
    exchanges: &[Exchange],
    server: &HashMap<u32, SocketAddr>,
    kinds: &HashMap<u32, K>,
) {
    // Kind → (requests, one of them).
    let mut requests: HashMap<K, (usize, u32)> = HashMap::new();
    for (&id, &k) in kinds {
        let r = requests.entry(k).or_insert((0, id));
        r.0 += 1;
        r.1 = r.1.min(id);
    }
    // Request count → the one request of the kind with that many (None:
    // several kinds have it, and a fingerprint's count cannot say which).
    let mut by_count: HashMap<usize, Option<u32>> = HashMap::new();
    for &(n, id) in requests.values() {
        by_count
            .entry(n)
            .and_modify(|k| *k = None)
            .or_insert(Some(id));
    }
    // Each single call's fingerprint, and how many calls each fingerprint has.
    let fingerprint: Vec<Option<u64>> = units
        .iter()
        .map(|u| match (u.holder, u.calls.as_slice()) {
            (Holder::Call, &[call]) => fingerprint_of(&exchanges[call], server),
            _ => None,
        })
        .collect();
    let mut count: HashMap<u64, usize> = HashMap::new();
    for &s in fingerprint.iter().flatten() {
        *count.entry(s).or_default() += 1;
    }
    for (u, s) in units.iter_mut().zip(fingerprint) {
        let Some(s) = s else { continue };
        if let Some(&Some(kind)) = by_count.get(&count[&s]) {
            u.holder = Holder::Fingerprint(s, kind);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::attribute;
    use crate::testkit::{all_given_by, conn, exchange, given};
    use whyslow_model::{Attribution, Exchange, Timeline};

    fn call(id: u32, connection: u32, (start, end): (u64, u64), path: &str) -> Exchange {
        let mut e = exchange(id, connection, (start, start + 10), (end - 10, end));
        e.request = format!("GET {path}").into();
        e
    }

    /// Four pages that all arrived at once and answered 10 ms apart, each
    /// fetching `/a` once through a pool of two connections shared by all:
    /// page k's call is short and ends just before page k answers.
    fn pages() -> Timeline {
        let mut t = Timeline {
            connections: (0..4).map(|k| conn(k, 8080)).collect(),
            exchanges: Vec::new(),
        };
        t.connections.extend([conn(10, 9000), conn(11, 9000)]);
        for k in 0..4u32 {
            let answer = u64::from(k + 1) * 10_000;
            t.exchanges.push(exchange(
                k,
                k,
                (u64::from(k) * 100, 50),
                (answer, answer + 10),
            ));
            let pooled = 10 + k % 2;
            t.exchanges
                .push(call(100 + k, pooled, (answer - 2_000, answer - 500), "/a"));
        }
        t
    }

    #[test]
    fn a_call_each_page_made_once_is_placed_down_the_line() {
        let mut t = pages();
        attribute(&mut t, &[8080]);
        all_given_by(&t, whyslow_model::Rule::Fingerprint, |id| id - 100);
    }

    #[test]
    fn one_call_more_than_pages_leaves_the_shape_to_timing() {
        // A fifth `/a` while every page waited: some page made two, and
        // which one no count says. Short calls fit every page alike.
        let mut t = pages();
        t.exchanges.push(call(200, 10, (1_000, 1_500), "/a"));
        attribute(&mut t, &[8080]);
        assert!(given(&t)
            .iter()
            .all(|g| g.2 == Some(Attribution::Ambiguous) || g.1 == Some(3)));
    }

    #[test]
    fn calls_two_pages_could_swap_stay_ambiguous() {
        // Pages 0 and 1 both answered after both their calls ended.
        let mut t = pages();
        for (page, answer) in [(0, 20_500), (2, 20_600)] {
            t.exchanges[page].response_first_at_us = Some(answer);
            t.exchanges[page].response_last_at_us = Some(answer + 10);
        }
        attribute(&mut t, &[8080]);
        let g = given(&t);
        assert_eq!(g[0].2, Some(Attribution::Ambiguous), "{g:?}");
        assert_eq!(g[1].2, Some(Attribution::Ambiguous), "{g:?}");
        assert_eq!((g[2].1, g[3].1), (Some(2), Some(3)), "{g:?}");
    }
}
