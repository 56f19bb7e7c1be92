//! A backing connection that only one inbound connection's requests used:
//! a server that serves each client connection on a thread of its own, and
//! each thread on a backing connection of its own (a client per thread, a
//! framework's per-thread persistent connection). Every call on it lay
//! inside a request of that inbound connection, and such a connection
//! (HTTP/1.1, a database session) carries one request at a time: the one
//! of its requests that encloses a call made it. Behind an API shared by 8
//! fronts' requests in flight, each call of the API's lies inside 8 of its
//! requests, and inside one of them on the connection its thread serves.

use crate::attribution::scene::Scene;
use crate::attribution::table::{Decision, Table};
use crate::attribution::windows::is_lost;
use foldhash::{HashMap, HashMapExt};
use std::net::SocketAddr;
use whyslow_model::{Attribution, ExchangeRole, Rule};

/// Calls a backing connection must have carried, each inside a request of
/// the same inbound connection, before that is taken for its owner: fewer
/// share one by chance when few clients stay connected.
pub const MIN_CALLS: usize = 8;

pub fn place(s: &Scene, table: &mut Table) {
    // A capture that lost requests, or their answers, says too little of
    // which request an inbound connection had in flight: a request whose
    // answer is missing seems in flight to the end, around every later call.
    let lost = s
        .units
        .iter()
        .any(|u| u.cands.iter().any(|w| is_lost(w.id)));
    if lost || answer_missed(s) {
        return;
    }
    let inbound_conn: HashMap<u32, u32> = s
        .exchanges
        .iter()
        .filter(|e| e.role == ExchangeRole::Inbound)
        .map(|e| (e.id, e.connection))
        .collect();
    let mut owners: HashMap<u32, Usage> = HashMap::new();
    for u in s.units.iter().filter(|u| u.complete) {
        let Some(&first) = u.calls.first() else {
            continue;
        };
        if u.cands.is_empty() {
            continue;
        }
        let mut around: Vec<u32> = u
            .cands
            .iter()
            .filter_map(|w| inbound_conn.get(&w.id).copied())
            .collect();
        around.sort_unstable();
        around.dedup();
        let entry = owners
            .entry(s.exchanges[first].connection)
            .or_insert_with(|| Usage {
                only: around.clone(),
                calls: 0,
                from: u.start,
                to: u.end,
                around: Vec::new(),
            });
        entry.only.retain(|c| around.binary_search(c).is_ok());
        entry.calls += u.calls.len();
        entry.from = entry.from.min(u.start);
        entry.to = entry.to.max(u.end);
        entry.around.push(around.len());
    }
    let owned = owned(s, &owners);
    for u in &s.units {
        let Some(&first) = u.calls.first() else {
            continue;
        };
        let Some(owner) = owned.get(&s.exchanges[first].connection) else {
            continue;
        };
        if !table.unit_open(u) {
            continue;
        }
        let mut on_owner = u
            .cands
            .iter()
            .filter(|w| inbound_conn.get(&w.id) == Some(owner));
        if let (Some(w), None) = (on_owner.next(), on_owner.next()) {
            let d = Decision::Given(w.id, Attribution::Inferred, Rule::Affinity);
            table.decide_unit(u, d);
        }
    }
}

/// What a backing connection carried: the inbound connections every one
/// of its calls lay inside a request of, how many calls, the first call's
/// start and the last one's end, and per unit how many inbound connections
/// had a request around it.
struct Usage {
    only: Vec<u32>,
    calls: usize,
    from: u64,
    to: u64,
    around: Vec<usize>,
}

/// How unlikely it must be that every call fell inside the owner's
/// requests by chance, were the calls anyone's: the share of the time the
/// owner had a request in flight, to the power of the calls. A client in
/// a closed loop is in flight nearly always (95 % of the time: 24 calls of
/// a pooled event-loop app's connection all fell inside one client's
/// requests, a third of such connections would); a thread's own connection
/// carries hundreds of calls.
pub const MAX_CHANCE: f64 = 1e-6;

/// The chance that the calls of `used` all fell inside `owner`'s requests
/// by chance, the likelier of two readings. Over the time: the share of
/// it the owner had a request in flight, to the power of the calls. At
/// each call's moment: the share of the inbound connections then in
/// flight, for each unit, times their number (the owner was picked after
/// looking). Calls bunched where every client waits (a stall behind which
/// all requests queue) make the first reading small and the second near 1:
/// measured on the lab's tax-stall at 16 clients, a pooled connection used
/// only in stalls had its 18 calls inside one client's requests by the
/// first reading's 4e-7 and the second's 4e-4; 16 of them were others'.
fn by_chance(s: &Scene, owner: u32, used: &Usage) -> f64 {
    let (from, to) = (used.from, used.to);
    let inbound = || {
        s.exchanges
            .iter()
            .filter(|e| e.role == ExchangeRole::Inbound)
            .map(|e| (e.connection, e.request_first_at_us, e.response_first_at_us))
    };
    let spans = inbound()
        .filter(|&(c, ..)| c == owner)
        .map(|(_, start, answer)| (start, answer.unwrap_or(u64::MAX)));
    let inside = crate::intervals::covered_us(spans, (from, to));
    let duty = inside as f64 / (to.saturating_sub(from)).max(1) as f64;
    let over_time = duty.min(1.0).powi(used.calls.min(i32::MAX as usize) as i32);
    let mut active: Vec<u32> = inbound()
        .filter(|&(_, start, answer)| start < to && answer.is_none_or(|a| a > from))
        .map(|(c, ..)| c)
        .collect();
    active.sort_unstable();
    active.dedup();
    // With one client there is no other whose request could have made a
    // call: only the first reading (calls only while it waited) says
    // anything.
    if active.len() <= 1 {
        return over_time;
    }
    let clients = active.len() as f64;
    let at_each: f64 = used
        .around
        .iter()
        .map(|&n| (n as f64 / clients).min(1.0))
        .product();
    over_time.max((at_each * clients).min(1.0))
}

/// Whether an inbound request has no answer though its connection carried
/// a later request (one still open when the capture ended is not missed).
fn answer_missed(s: &Scene) -> bool {
    let mut last_start: HashMap<u32, u64> = HashMap::new();
    let inbound = || {
        s.exchanges
            .iter()
            .filter(|e| e.role == ExchangeRole::Inbound)
    };
    for e in inbound() {
        let at = last_start.entry(e.connection).or_insert(0);
        *at = (*at).max(e.request_first_at_us);
    }
    inbound().any(|e| {
        e.response_first_at_us.is_none()
            && last_start
                .get(&e.connection)
                .is_some_and(|&l| l > e.request_first_at_us)
    })
}

/// A backing connection and when it carried its first and last call.
type Used = (u32, u64, u64);

/// Backing connection → the inbound connection that owns it: the one
/// inbound connection every one of its (at least `MIN_CALLS`) calls lay
/// inside a request of, and not by chance (`MAX_CHANCE`),
/// unless another connection to the same server, used at the same time,
/// has that owner too: then the owner was merely always in flight (one
/// client's back-to-back requests beside a pool's connections), not a
/// thread with a connection of its own.
fn owned(s: &Scene, owners: &HashMap<u32, Usage>) -> HashMap<u32, u32> {
    let server: HashMap<u32, SocketAddr> = s.connections.iter().map(|c| (c.id, c.server)).collect();
    // (owner, server) → the backing connections it would own.
    let mut claims: HashMap<(u32, SocketAddr), Vec<Used>> = HashMap::new();
    for (&conn, used) in owners {
        if let ([owner], true) = (used.only.as_slice(), used.calls >= MIN_CALLS) {
            let Some(&srv) = server.get(&conn) else {
                continue;
            };
            claims
                .entry((*owner, srv))
                .or_default()
                .push((conn, used.from, used.to));
        }
    }
    let mut out = HashMap::new();
    // Per server: (backing connection, owner, chance) of each claim whose
    // connections were used one after another.
    let mut per_server: HashMap<SocketAddr, Vec<(u32, u32, f64)>> = HashMap::new();
    for ((owner, srv), mut list) in claims {
        list.sort_unstable_by_key(|c| c.1);
        let apart = list.windows(2).all(|w| w[0].2 <= w[1].1);
        if apart {
            for c in &list {
                let chance = owners
                    .get(&c.0)
                    .map_or(1.0, |used| by_chance(s, owner, used));
                per_server
                    .entry(srv)
                    .or_default()
                    .push((c.0, owner, chance));
            }
        }
    }
    for (srv, claimed) in per_server {
        let all = every_one_owned(owners, &server, srv, &claimed);
        for &(conn, owner, chance) in &claimed {
            if chance <= MAX_CHANCE || all {
                out.insert(conn, owner);
            }
        }
    }
    out
}

/// A claim taken with all its server's others, though not unlikely alone:
/// at most an even chance of being by chance.
pub const MAX_CHANCE_TOGETHER: f64 = 0.5;

/// Whether every connection to `srv` that carried `MIN_CALLS` calls has an
/// owner of its own, each claim no likelier by chance than
/// `MAX_CHANCE_TOGETHER`, and all of them together no likelier than
/// `MAX_CHANCE`: a thread per client connection, each on its backing
/// connection, under a closed loop of clients always in flight (each claim
/// alone 0.9^20), where a pool shared by requests gives an owner to some
/// of its connections by chance (a third of them), never to all.
fn every_one_owned(
    owners: &HashMap<u32, Usage>,
    server: &HashMap<u32, SocketAddr>,
    srv: SocketAddr,
    claimed: &[(u32, u32, f64)],
) -> bool {
    let busy = owners
        .iter()
        .filter(|(c, o)| o.calls >= MIN_CALLS && server.get(c) == Some(&srv))
        .count();
    let mut distinct: Vec<u32> = claimed.iter().map(|c| c.1).collect();
    distinct.sort_unstable();
    distinct.dedup();
    let together: f64 = claimed.iter().map(|c| c.2).product();
    claimed.len() >= 2
        && claimed.len() == busy
        && distinct.len() == claimed.len()
        && claimed.iter().all(|c| c.2 <= MAX_CHANCE_TOGETHER)
        && together <= MAX_CHANCE
}

#[cfg(test)]
mod tests {
    use crate::attribution::attribute;
    use crate::testkit::{conn, exchange};
    use whyslow_model::{Rule, Timeline};

    const MS: u64 = 1_000;

    /// `clients` inbound connections (0..), each sending `pages` requests
    /// one after another, 1 to 3 ms apart, all in flight together, each
    /// lasting 4 to 8 ms (as varied as real ones: which requests overlap
    /// changes). Client c's
    /// requests make 3 calls each, 1 ms apart, on backing connection 100 + c
    /// (a thread per client connection, a backing connection per thread),
    /// unless `pooled`: then on connection 100 + (k + c) % clients.
    fn threads(clients: u32, pages: u32, pooled: bool) -> Timeline {
        let mut t = Timeline::default();
        let mut id = 1_000;
        for c in 0..clients {
            t.connections.push(conn(c, 8080));
            t.connections.push(conn(100 + c, 5432));
        }
        for c in 0..clients {
            let mut at = u64::from(c) * 300;
            for k in 0..pages {
                let long = (4 + (c * 7 + k * 13) % 5) as u64 * MS;
                let request = c * 100 + k;
                t.exchanges.push(exchange(
                    request,
                    c,
                    (at, at + 10),
                    (at + long, at + long + 10),
                ));
                let backing = 100 + if pooled { (k + c) % clients } else { c };
                for n in 0..3u32 {
                    let call = at + 200 + u64::from(n) * MS;
                    t.exchanges.push(exchange(
                        id,
                        backing,
                        (call, call + 10),
                        (call + 500, call + 510),
                    ));
                    id += 1;
                }
                at += long + (1 + (c * 3 + k * 5) % 3) as u64 * MS;
            }
        }
        t.sort();
        t
    }

    #[test]
    fn a_connection_of_ones_own_names_the_request_on_its_owners_connection() {
        let mut t = threads(4, 30, false);
        attribute(&mut t, &[8080]);
        for e in t.exchanges.iter().filter(|e| e.id >= 1_000) {
            let client = e.connection - 100;
            let owner = e.parent.map(|p| p / 100);
            assert_eq!(owner, Some(client), "{e:?}");
            assert_eq!(e.rule, Some(Rule::Affinity), "{e:?}");
        }
    }

    #[test]
    fn one_client_owns_its_backing_connection_though_a_call_came_between_requests() {
        // One client's requests, each with its calls on one backing
        // connection, which also carried a call while no request waited:
        // with no other client, the calls made only while it waited are its
        // own (where sole candidates are not taken, nothing else gives them).
        let mut t = threads(1, 30, false);
        let after = t
            .exchanges
            .iter()
            .map(|e| e.request_first_at_us)
            .max()
            .unwrap()
            + 50 * MS;
        t.exchanges.push(exchange(
            9_999,
            100,
            (after, after + 10),
            (after + 500, after + 510),
        ));
        t.sort();
        attribute(&mut t, &[8080]);
        let calls = t
            .exchanges
            .iter()
            .filter(|e| (1_000..9_999).contains(&e.id));
        for e in calls {
            assert_eq!(e.parent.map(|p| p / 100), Some(0), "{e:?}");
            assert_eq!(e.rule, Some(Rule::Affinity), "{e:?}");
        }
    }

    #[test]
    fn a_pool_shared_by_the_clients_has_no_owner() {
        let mut t = threads(4, 10, true);
        attribute(&mut t, &[8080]);
        let by_affinity = t
            .exchanges
            .iter()
            .filter(|e| e.rule == Some(Rule::Affinity));
        assert_eq!(by_affinity.count(), 0);
    }

    #[test]
    fn a_client_always_in_flight_owns_no_pooled_connection() {
        // Client 0 sends requests back to back (always one in flight), client
        // 1 now and then; both call through a pool of two connections used
        // at once. Every pooled call lies inside a request of client 0: both
        // connections seem its own, which a thread holding one connection
        // could not make so; client 1's calls must not go to client 0.
        let mut t = Timeline::default();
        for c in [0, 1, 100, 101] {
            t.connections
                .push(conn(c, if c < 100 { 8080 } else { 5432 }));
        }
        let mut id = 1_000;
        let mut call = |t: &mut Timeline, backing: u32, at: u64| {
            t.exchanges
                .push(exchange(id, backing, (at, at + 10), (at + 300, at + 310)));
            id += 1;
        };
        for k in 0..30u32 {
            let at = u64::from(k) * 5 * MS;
            t.exchanges
                .push(exchange(k, 0, (at, at + 10), (at + 4_900, at + 4_910)));
            call(&mut t, 100 + k % 2, at + MS);
        }
        for k in 0..10u32 {
            let at = u64::from(k) * 15 * MS + 2 * MS;
            t.exchanges.push(exchange(
                100 + k,
                1,
                (at, at + 10),
                (at + 2 * MS, at + 2 * MS + 10),
            ));
            call(&mut t, 100 + (k + 1) % 2, at + 500);
        }
        t.sort();
        attribute(&mut t, &[8080]);
        let by_affinity = t
            .exchanges
            .iter()
            .filter(|e| e.rule == Some(Rule::Affinity));
        assert_eq!(by_affinity.count(), 0);
    }

    #[test]
    fn calls_only_in_stalls_every_client_waits_through_have_no_owner() {
        // 8 clients, idle between stalls; in each of 20 stalls (300 ms of
        // every second) every client but one waits, client 0 in all of
        // them: its requests enclose every call a pooled connection made,
        // one per stall, each another client's. Over the whole time that
        // is unlikely (0.3^20); at each call's moment, nearly every client
        // was in flight.
        let mut t = Timeline::default();
        for c in 0..8u32 {
            t.connections.push(conn(c, 8080));
        }
        t.connections.push(conn(100, 5432));
        for k in 0..20u32 {
            let id = 1_000 + k;
            let stall = u64::from(k) * 1_000 * MS;
            for c in (0..8u32).filter(|&c| c == 0 || k % 8 != c) {
                let at = stall + u64::from(c) * 100;
                t.exchanges.push(exchange(
                    c * 100 + k,
                    c,
                    (at, at + 10),
                    (
                        stall + 300 * MS + u64::from(c) * 100,
                        stall + 300 * MS + 50_000,
                    ),
                ));
            }
            let call = stall + 290 * MS;
            t.exchanges.push(exchange(
                id,
                100,
                (call, call + 10),
                (call + 500, call + 510),
            ));
        }
        t.sort();
        attribute(&mut t, &[8080]);
        let by_affinity = t
            .exchanges
            .iter()
            .filter(|e| e.rule == Some(Rule::Affinity));
        assert_eq!(by_affinity.count(), 0);
    }

    #[test]
    fn clients_always_in_flight_each_own_a_connection_together() {
        // 8 clients back to back, requests of 3–9 ms about 0.6 ms apart, a
        // call somewhere in each: each client is in flight 90 % of the
        // time, so no claim alone is unlikely (0.9^25), but every
        // connection having an owner of its own is (0.9^200).
        let mut t = Timeline::default();
        let mut id = 1_000;
        let mut seed = 7u64;
        let mut random = |below: u64| {
            seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            (seed >> 33) % below
        };
        for c in 0..8u32 {
            t.connections.push(conn(c, 8080));
            t.connections.push(conn(100 + c, 5432));
        }
        for c in 0..8u32 {
            let mut at = u64::from(c) * 300;
            for k in 0..25u32 {
                let long = 3 * MS + random(6 * MS);
                let (start, end) = (at, at + long);
                t.exchanges.push(exchange(
                    c * 100 + k,
                    c,
                    (start, start + 10),
                    (end, end + 10),
                ));
                let call = start + 100 + random(long - 800);
                t.exchanges.push(exchange(
                    id,
                    100 + c,
                    (call, call + 10),
                    (call + 500, call + 510),
                ));
                id += 1;
                at = end + 300 + random(600);
            }
        }
        t.sort();
        attribute(&mut t, &[8080]);
        for e in t.exchanges.iter().filter(|e| e.id >= 1_000) {
            assert_eq!(e.parent.map(|p| p / 100), Some(e.connection - 100), "{e:?}");
        }
    }
}
