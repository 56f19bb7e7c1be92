//! Where an inbound request's time went: the service's own time, each
//! backing service on the critical path, time queued for a pool's
//! connection, and the network. Computed per request, then as a mean per
//! request kind so that the parts add up to the total.

use crate::intervals::covered_us;
use crate::pool_queueing::pool_wait;
use crate::request_calls::{Call, RequestCalls};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use whyslow_model::{BackingTime, Protocol, TimeBreakdown};

/// One request's parts; they add up to `total_us`.
#[derive(Debug, Clone, PartialEq)]
pub struct Parts {
    pub total_us: u64,
    pub server_us: u64,
    pub queued_us: u64,
    /// Waiting covered by ambiguous calls and by none of its own.
    pub ambiguous_us: u64,
    /// Per backing server: (protocol, calls, critical time).
    pub backing: BTreeMap<SocketAddr, (Protocol, usize, u64)>,
    pub network_us: u64,
    /// Per backing server whose callee end was captured for some calls:
    /// (those calls' time, the network's part of it).
    pub split: BTreeMap<SocketAddr, Split>,
}

/// Calls' time and the network's part of it, summed.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Split {
    pub seen_us: u64,
    pub network_us: u64,
}

impl Split {
    fn add(&mut self, other: Split) {
        self.seen_us += other.seen_us;
        self.network_us += other.network_us;
    }

    /// The network's share of the calls' time.
    pub fn share(&self) -> Option<f64> {
        (self.seen_us > 0).then(|| self.network_us as f64 / self.seen_us as f64)
    }

    /// Of the calls whose callee end was captured.
    pub fn of(calls: &[Call]) -> Split {
        let mut s = Split::default();
        for c in calls {
            if let Some(net) = c.network_us() {
                s.seen_us += c.duration_us();
                s.network_us += net;
            }
        }
        s
    }
}

/// Splits one request's time. While the service waits, each instant goes
/// to the servers whose calls are in flight (shared evenly), to `ambiguous`
/// when only calls that may be another request's are, or to the service
/// itself when none is; a server's pool queue moves from its share to
/// `queued_us`.
pub fn parts(r: &RequestCalls) -> Parts {
    let total = r.total_us();
    let (from, to) = r.waiting();
    let waiting = to - from;
    let own = || r.calls.iter().map(|c| (c.start, c.end));
    let ambiguous = match r.ambiguous.is_empty() {
        true => 0,
        false => {
            let any = own().chain(r.ambiguous.iter().copied());
            covered_us(any, (from, to)) - covered_us(own(), (from, to))
        }
    };
    let mut backing = critical_shares(&r.calls, (from, to));
    let mut queued = 0;
    let mut split = BTreeMap::new();
    for (server, calls) in r.per_server() {
        let s = Split::of(&calls);
        if s.seen_us > 0 {
            split.insert(server, s);
        }
        let entry = backing.entry(server).or_insert((calls[0].protocol(), 0, 0));
        entry.1 = calls.len();
        if let Some(w) = pool_wait(&calls, total) {
            let q = w.time_lost_us.min(entry.2);
            entry.2 -= q;
            queued += q;
        }
    }
    // Idle while a shared pool was full: waiting, not the service's work.
    queued += r.queued.iter().map(|q| q.waited_us).sum::<u64>();
    let on_calls: u64 = backing.values().map(|b| b.2).sum::<u64>() + queued + ambiguous;
    Parts {
        total_us: total,
        server_us: waiting.saturating_sub(on_calls),
        queued_us: queued,
        ambiguous_us: ambiguous,
        backing,
        network_us: total.saturating_sub(waiting),
        split,
    }
}

/// Critical time per server inside `window`: elementary intervals between
/// call edges, each shared by the servers with a call in flight. One sweep
/// over the edges: a checkout of a hundred statements is a hundred calls.
fn critical_shares(
    calls: &[Call],
    window: (u64, u64),
) -> BTreeMap<SocketAddr, (Protocol, usize, u64)> {
    let mut servers: Vec<(SocketAddr, Protocol)> = Vec::new();
    let mut edges: Vec<(u64, i32, usize)> = Vec::with_capacity(calls.len() * 2);
    for c in calls {
        let i = match servers.iter().position(|s| s.0 == c.server) {
            Some(i) => i,
            None => {
                servers.push((c.server, c.protocol()));
                servers.len() - 1
            }
        };
        let clamp = |t: u64| t.clamp(window.0, window.1);
        // Hostile timestamps may put an end before its start: no time then.
        edges.push((clamp(c.start), 1, i));
        edges.push((clamp(c.end.max(c.start)), -1, i));
    }
    edges.sort_unstable_by_key(|e| e.0);
    let mut out: BTreeMap<SocketAddr, (Protocol, usize, u64)> = BTreeMap::new();
    let mut in_flight = vec![0i32; servers.len()];
    let mut k = 0;
    while k < edges.len() {
        let at = edges[k].0;
        while k < edges.len() && edges[k].0 == at {
            in_flight[edges[k].2] += edges[k].1;
            k += 1;
        }
        let Some(&(next, ..)) = edges.get(k) else {
            break;
        };
        let n = in_flight.iter().filter(|&&f| f > 0).count() as u64;
        for (i, _) in in_flight.iter().enumerate().filter(|(_, &f)| f > 0) {
            let (server, protocol) = servers[i];
            out.entry(server).or_insert((protocol, 0, 0)).2 += (next - at) / n;
        }
    }
    out
}

/// Running sums of one request kind's parts.
#[derive(Default)]
struct Sums {
    requests: u64,
    total: u64,
    server: u64,
    queued: u64,
    ambiguous: u64,
    network: u64,
    backing: BTreeMap<SocketAddr, (Protocol, u64, u64)>,
    split: BTreeMap<SocketAddr, Split>,
}

/// Mean parts per (service, request kind), busiest kind first.
pub fn summarize(requests: &[RequestCalls]) -> Vec<TimeBreakdown> {
    let mut kinds: BTreeMap<(SocketAddr, &str), Sums> = BTreeMap::new();
    for r in requests {
        let p = parts(r);
        let s = kinds
            .entry((r.server, r.inbound.request.as_str()))
            .or_default();
        s.requests += 1;
        s.total += p.total_us;
        s.server += p.server_us;
        s.queued += p.queued_us;
        s.ambiguous += p.ambiguous_us;
        s.network += p.network_us;
        for (server, (protocol, calls, us)) in p.backing {
            let b = s.backing.entry(server).or_insert((protocol, 0, 0));
            b.1 += calls as u64;
            b.2 += us;
        }
        for (server, split) in p.split {
            s.split.entry(server).or_default().add(split);
        }
    }
    let mut out: Vec<TimeBreakdown> = kinds
        .into_iter()
        .map(|((server, request), s)| mean(server, request.to_string(), s))
        .collect();
    out.sort_by_key(|b| std::cmp::Reverse(b.requests));
    out
}

fn mean(server: SocketAddr, request: String, s: Sums) -> TimeBreakdown {
    let n = s.requests.max(1);
    let mut backing: Vec<BackingTime> = s
        .backing
        .into_iter()
        .map(|(server, (protocol, calls, us))| {
            BackingTime {
                server: server.to_string(),
                protocol,
                calls_per_request: calls as f64 / n as f64,
                critical_us: us / n,
                share: 0.0,
                network_us: None,
                server_us: None,
            }
            .with_network_share(s.split.get(&server).and_then(Split::share))
        })
        .collect();
    backing.sort_by_key(|b| std::cmp::Reverse(b.critical_us));
    TimeBreakdown {
        server: server.to_string(),
        request,
        requests: s.requests as u32,
        total_us: s.total / n,
        server_us: s.server / n,
        queued_us: s.queued / n,
        ambiguous_us: s.ambiguous / n,
        backing,
        network_us: s.network / n,
        server_share: 0.0,
        queued_share: 0.0,
        ambiguous_share: 0.0,
        network_share: 0.0,
    }
    .with_shares()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request_calls::by_request;
    use crate::request_calls::tests::{ambiguous_call, call};
    use crate::testkit::{exchange, servers};

    #[test]
    fn parts_add_up_and_overlaps_are_shared() {
        // Waiting 100..900: redis 100..300, pg 200..400 (overlap 200..300), then server alone.
        let t = servers(&[8080, 6379, 5432]).with(vec![
            exchange(0, 0, (0, 100), (900, 1000)),
            call(1, 1, 0, (100, 300)),
            call(2, 2, 0, (200, 400)),
        ]);
        let r = by_request(&t);
        let p = parts(&r[0]);
        let redis: SocketAddr = "127.0.0.1:6379".parse().unwrap();
        let pg: SocketAddr = "127.0.0.1:5432".parse().unwrap();
        assert_eq!(p.backing[&redis].2, 150);
        assert_eq!(p.backing[&pg].2, 150);
        assert_eq!(p.server_us, 500);
        assert_eq!(p.network_us, 200);
        let sum = p.server_us + p.queued_us + p.network_us + 300;
        assert_eq!(sum, p.total_us);
        let b = summarize(&r);
        assert_eq!(b.len(), 1);
        assert_eq!((b[0].requests, b[0].total_us), (1, 1000));
        assert_eq!(b[0].backing.len(), 2);
    }

    #[test]
    fn ambiguous_calls_inside_a_wait_are_ambiguous_time_not_the_services_own() {
        // Waiting 100..900; its own call 100..300; an ambiguous call 200..600.
        let t = servers(&[8080, 6379, 6379]).with(vec![
            exchange(0, 0, (0, 100), (900, 1000)),
            call(1, 1, 0, (100, 300)),
            ambiguous_call(2, 2, (200, 600)),
        ]);
        let r = by_request(&t);
        // And 200..300, when both connections to :6379 were busy.
        assert_eq!(r[0].ambiguous, vec![(200, 600), (200, 300)]);
        let p = parts(&r[0]);
        assert_eq!(
            p.ambiguous_us, 300,
            "300..600 is covered by the ambiguous call alone"
        );
        assert_eq!(p.server_us, 300, "600..900");
        let b = summarize(&r);
        let sum =
            b[0].server_us + b[0].ambiguous_us + b[0].network_us + b[0].backing[0].critical_us;
        assert_eq!(sum, b[0].total_us);
    }

    #[test]
    fn idle_while_the_pool_was_full_is_ambiguous_for_a_request_not_told_apart() {
        // Request 0 waits 100..1000: an ambiguous call 100..150, then idle
        // while request 3's calls hold both connections 150..800, then its
        // own call 800..950. Its own time is 950..1000, not 150..800.
        let t = servers(&[8080, 6379, 6379, 8080]).with(vec![
            exchange(0, 0, (0, 100), (1000, 1010)),
            call(1, 1, 0, (800, 950)),
            ambiguous_call(2, 1, (100, 150)),
            exchange(3, 3, (0, 100), (1200, 1210)),
            call(4, 1, 3, (150, 800)),
            call(5, 2, 3, (150, 800)),
        ]);
        let r = crate::request_calls::by_request_and_pools(&t, &Default::default()).0;
        let p = parts(&r[0]);
        assert_eq!(p.server_us, 50, "950..1000");
        assert_eq!(p.ambiguous_us, 700, "100..800");
    }
}
