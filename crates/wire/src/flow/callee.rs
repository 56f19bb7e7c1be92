//! A connection two hosts captured is read as the connection from the copy
//! nearest its client; the other copy (the mirror) is parsed all the same,
//! and each of its exchanges only says how long the callee took: its first
//! request byte → last response byte, on the callee's host. A caller's
//! exchange is paired with the mirror's exchange of the same request that
//! lies inside it (within the placed clocks' slack), the oldest first: the
//! connection carries them in the same order on both hosts.

use super::window::DEFAULT_WINDOW_EXCHANGES;
use foldhash::HashMap;
use std::collections::VecDeque;
use whyslow_model::{Exchange, Timeline};

/// Slack allowed between two hosts' placed clocks when one's exchange must
/// lie inside the other's: the offsets' reported bounds are under a
/// millisecond on a LAN (about half the hop's round trip); two allow for a
/// host a little farther away.
const CLOCK_SLACK_US: u64 = 2_000;
/// Callee times waiting for their caller's exchange, per shared connection
/// at most: the callers' exchanges are paired when their window is cut,
/// and one connection may carry a whole window's (4096 lost the first
/// window's oldest on a database connection, 5 000 of them in its 3 s).
const MAX_WAITING_PER_CONNECTION: usize = DEFAULT_WINDOW_EXCHANGES;
/// Callee times waiting in all, at most (about 50 bytes each): two
/// windows' worth; those of connections whose caller's copy told no
/// exchange stay until pushed out.
const MAX_WAITING: usize = 2 * DEFAULT_WINDOW_EXCHANGES;

/// What the callee saw of one exchange.
#[derive(Debug, Clone)]
struct Seen {
    request: whyslow_model::SmolStr,
    first_us: u64,
    last_us: u64,
}

/// The mirrors' callee times not yet paired, per shared connection.
#[derive(Debug, Default)]
pub(super) struct Callees {
    waiting: HashMap<u32, VecDeque<Seen>>,
    /// Callee times in `waiting`.
    len: usize,
}

impl Callees {
    /// Takes the exchanges of a mirror of shared connection `shared` off
    /// `out` from `from` on: they are not the connection's.
    pub fn take(&mut self, shared: u32, out: &mut Vec<Exchange>, from: usize) {
        if out.len() <= from {
            return;
        }
        let q = self.waiting.entry(shared).or_default();
        for e in out.drain(from..) {
            let Some(last_us) = e.response_last_at_us else {
                continue;
            };
            if q.len() >= MAX_WAITING_PER_CONNECTION || self.len >= MAX_WAITING {
                if q.pop_front().is_none() {
                    continue;
                }
                self.len -= 1;
            }
            self.len += 1;
            q.push_back(Seen {
                request: e.request,
                first_us: e.request_first_at_us,
                last_us,
            });
        }
    }

    /// Gives each exchange of `t` on a shared connection's read copy the
    /// callee time of its mirror's twin, and forgets callee times older
    /// than every exchange paired (their callers' exchanges went by).
    pub fn pair(&mut self, t: &mut Timeline) {
        if self.waiting.is_empty() {
            return;
        }
        let shared: HashMap<u32, u32> = t
            .connections
            .iter()
            .filter(|c| !c.mirror)
            .filter_map(|c| Some((c.id, c.shared?)))
            .collect();
        if shared.is_empty() {
            return;
        }
        let mut on_shared: Vec<(u32, u64, usize)> = t
            .exchanges
            .iter()
            .enumerate()
            .filter_map(|(i, e)| Some((*shared.get(&e.connection)?, e.request_first_at_us, i)))
            .collect();
        on_shared.sort_unstable();
        for (s, _, i) in on_shared {
            let Some(q) = self.waiting.get_mut(&s) else {
                continue;
            };
            pair_one(q, &mut t.exchanges[i]);
        }
        self.waiting.retain(|_, q| !q.is_empty());
        self.len = self.waiting.values().map(VecDeque::len).sum();
    }
}

/// Pairs `e` with the first callee time of its request inside it; those
/// that ended before it began are dropped (no caller exchange was read for
/// them: a lost segment, a window's edge).
fn pair_one(q: &mut VecDeque<Seen>, e: &mut Exchange) {
    let Some(end) = e.response_last_at_us else {
        return;
    };
    let begin = e.request_first_at_us;
    while q
        .front()
        .is_some_and(|s| s.last_us + CLOCK_SLACK_US < begin)
    {
        q.pop_front();
    }
    let inside = |s: &Seen| {
        s.request == e.request
            && s.first_us + CLOCK_SLACK_US >= begin
            && s.last_us <= end + CLOCK_SLACK_US
    };
    // They wait in the order they ended: none past the call's end fits.
    let fits = q
        .iter()
        .take_while(|s| s.last_us <= end + CLOCK_SLACK_US)
        .position(inside);
    if let Some(k) = fits {
        let s = q.remove(k).expect("position is in range");
        let own = s.last_us.saturating_sub(s.first_us);
        e.callee_us = Some(own.min(end.saturating_sub(begin)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use whyslow_model::{Connection, Protocol};

    fn ex(connection: u32, request: &str, first: u64, last: u64) -> Exchange {
        let mut e = Exchange::new(connection, Protocol::Http1, request.into());
        e.request_first_at_us = first;
        e.response_last_at_us = Some(last);
        e
    }

    fn conn(id: u32, shared: u32, mirror: bool) -> Connection {
        let a = "10.0.0.1:5000".parse().unwrap();
        let b = "10.0.0.2:80".parse().unwrap();
        let mut c = Connection::new(id, a, b, 0);
        (c.shared, c.mirror) = (Some(shared), mirror);
        c
    }

    #[test]
    fn each_call_gets_its_twins_time_in_order_and_others_none() {
        let mut callees = Callees::default();
        // The callee saw three GETs of 2 ms each, 10 ms after the caller sent.
        let mut mirror = vec![
            ex(9, "GET /a", 10_000, 12_000),
            ex(9, "GET /a", 40_000, 42_000),
            ex(9, "GET /b", 70_000, 72_000),
        ];
        callees.take(7, &mut mirror, 0);
        assert!(
            mirror.is_empty(),
            "a mirror's exchanges are not the connection's"
        );
        let mut t = Timeline {
            connections: vec![conn(1, 7, false), conn(2, 8, false)],
            exchanges: vec![
                ex(1, "GET /b", 60_000, 82_000),
                ex(1, "GET /a", 0, 22_000),
                ex(1, "GET /a", 30_000, 52_000),
                // Another shared connection: no twin.
                ex(2, "GET /a", 0, 22_000),
            ],
        };
        callees.pair(&mut t);
        let got: Vec<Option<u64>> = t.exchanges.iter().map(|e| e.callee_us).collect();
        assert_eq!(got, [Some(2_000), Some(2_000), Some(2_000), None]);
        assert!(callees.waiting.is_empty());
    }

    #[test]
    fn a_twin_of_another_request_or_outside_the_call_is_not_taken() {
        let mut callees = Callees::default();
        let mut mirror = vec![
            ex(9, "GET /other", 10_000, 12_000),
            ex(9, "GET /a", 100_000, 102_000),
        ];
        callees.take(7, &mut mirror, 0);
        let mut t = Timeline {
            connections: vec![conn(1, 7, false)],
            exchanges: vec![ex(1, "GET /a", 0, 22_000)],
        };
        callees.pair(&mut t);
        assert_eq!(t.exchanges[0].callee_us, None);
    }

    #[test]
    fn waiting_times_are_bounded_per_connection() {
        let mut callees = Callees::default();
        let mut mirror: Vec<Exchange> = (0..MAX_WAITING_PER_CONNECTION as u64 + 10)
            .map(|i| ex(9, "GET /a", i * 10, i * 10 + 5))
            .collect();
        callees.take(7, &mut mirror, 0);
        assert_eq!(callees.waiting[&7].len(), MAX_WAITING_PER_CONNECTION);
    }
}
