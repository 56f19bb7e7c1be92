//! A DNS lookup is the call's it preceded: a service resolves a name, then
//! connects or sends to an address the answer gave. On the wire the two
//! are tied by that address and by time alone, so a lookup goes with a
//! call only where the pairing is clear: the call came right after the
//! lookup's answer, within a scheduler's delay, and any other answer
//! before it, or other call after the answer, came clearly later than that
//! gap (by the margins `bracket` times with). It
//! is then given to the request its call was given to, if that request
//! was waiting through it. The queries of one lookup go with it: the A
//! and AAAA asked together on one socket, a try asked again on it, and the
//! search-list names that failed (NXDOMAIN) right before the lookup's next
//! name was asked, paired the same way.

use crate::attribution::rules::bracket::clearly_below;
use crate::attribution::scene::Scene;
use crate::attribution::table::{Decision, Table};
use crate::dns_lookups::{queries_of, Query};
use foldhash::{HashMap, HashMapExt};
use std::net::IpAddr;
use whyslow_model::{Attribution, ExchangeRole, Protocol, Rule};

/// A and AAAA sent together: glibc sends both at once on one socket;
/// 1 ms is a thread's wake-up on a loaded host.
pub const PARTNER_GAP_US: u64 = 1_000;
/// From an answer to what the client does with it (the next search name,
/// the call): at once, save for scheduling — 10 ms, a loaded host's
/// scheduler delay, as `pools` allows for a connection handed over.
pub const NEXT_STEP_MAX_US: u64 = 10_000;

/// The queries of one name asked together on one socket (and asked again
/// there): one step of a lookup.
struct Ask<'a> {
    queries: Vec<Query<'a>>,
    start: u64,
    /// The last answer; None: one of its queries was never answered.
    end: Option<u64>,
    /// Every answer was NXDOMAIN.
    failed: bool,
}

impl<'a> Ask<'a> {
    fn of(q: Query<'a>) -> Self {
        let mut a = Ask {
            queries: Vec::new(),
            start: q.sent_us,
            end: Some(0),
            failed: true,
        };
        a.add(q);
        a
    }

    fn add(&mut self, q: Query<'a>) {
        self.end = self.end.zip(q.answered_us).map(|(a, b)| a.max(b));
        self.failed &= q.is("NXDOMAIN");
        self.queries.push(q);
    }

    fn name(&self) -> &'a str {
        self.queries[0].name
    }

    fn client(&self) -> IpAddr {
        self.queries[0].client
    }

    fn joins(&self, q: &Query) -> bool {
        let first = &self.queries[0];
        let retry = self.queries.iter().any(|p| p.answered_us.is_none());
        first.exchange.connection == q.exchange.connection
            && first.name == q.name
            && (q.sent_us <= self.start + PARTNER_GAP_US || retry)
    }
}

pub fn place(s: &Scene, table: &mut Table) {
    let queries = queries_of(s.connections, s.exchanges);
    if queries.is_empty() {
        return;
    }
    // Each query's unit, for the requests that waited through it.
    let mut unit_of: HashMap<usize, usize> =
        queries.iter().map(|q| (q.index, usize::MAX)).collect();
    for (n, u) in s.units.iter().enumerate() {
        for i in &u.calls {
            if let Some(at) = unit_of.get_mut(i) {
                *at = n;
            }
        }
    }
    let waited_through = |i: usize, request: u32| {
        let u = unit_of.get(&i).and_then(|&n| s.units.get(n));
        u.is_some_and(|u| u.cands.iter().any(|w| w.id == request))
    };
    let asks = asks(queries);
    let prev = search_steps(&asks);
    for (ask, call) in calls_after(s, &asks) {
        let Some(Decision::Given(request, ..)) = table.get(call) else {
            continue;
        };
        // The lookup: this ask and the failed names walked back from it.
        let mut chain = vec![ask];
        while let Some(&p) = prev.get(chain.last().expect("one at least")) {
            if chain.contains(&p) {
                break;
            }
            chain.push(p);
        }
        for q in chain.iter().flat_map(|&a| &asks[a].queries) {
            if table.is_open(q.index) && waited_through(q.index, request) {
                let d = Decision::Given(request, Attribution::Inferred, Rule::Lookup);
                table.decide(q.index, d);
            }
        }
    }
}

/// Queries grouped into asks, by start.
fn asks(mut queries: Vec<Query>) -> Vec<Ask> {
    queries.sort_by_key(|q| (q.exchange.connection, q.sent_us));
    let mut out: Vec<Ask> = Vec::new();
    let mut open: HashMap<(u32, &str), usize> = HashMap::new();
    for q in queries {
        let key = (q.exchange.connection, q.name);
        match open.get(&key) {
            Some(&i) if out[i].joins(&q) => out[i].add(q),
            _ => {
                open.insert(key, out.len());
                out.push(Ask::of(q));
            }
        }
    }
    out.sort_by_key(|a| a.start);
    out
}

/// Each ask → the failed search name asked right before it in the same
/// lookup. A lookup's names all start with the name that answered; the
/// failed ones carry a search suffix after it, tried in the order of the
/// client's search list. That order is learnt first, from every pairing
/// by time alone (the next name most often asked right after a failed
/// one); then only a failed name and the name its list puts next are
/// paired, so that lookups of one name in flight together do not
/// cross-pair when the client is slower to act than they are apart.
fn search_steps(asks: &[Ask]) -> HashMap<usize, usize> {
    let answered: std::collections::HashSet<(IpAddr, &str)> = asks
        .iter()
        .filter(|a| resolved(a).next().is_some())
        .map(|a| (a.client(), a.name()))
        .collect();

    // (client, answered name) → failed asks' ends, and asks' starts.
    let mut by_lookup: HashMap<(IpAddr, &str), Events> = HashMap::new();
    for (i, a) in asks.iter().enumerate() {
        for base in bases(a.name()) {
            if !answered.contains(&(a.client(), base)) {
                continue;
            }
            let events = by_lookup.entry((a.client(), base)).or_default();
            events.after.push((a.start, i));
            if let (true, Some(end), true) = (a.failed, a.end, base != a.name()) {
                events.before.push((end, i));
            }
        }
    }
    let votes: Vec<(usize, usize)> = by_lookup.into_values().flat_map(Events::nearest).collect();
    let next = next_names(asks, &votes);
    // (client, failed name) → its asks' ends, and the next name's starts.
    let mut by_name: HashMap<(IpAddr, &str), Events> = HashMap::new();
    for (i, a) in asks.iter().enumerate() {
        if let (true, Some(end)) = (a.failed, a.end) {
            if next.contains_key(&(a.client(), a.name())) {
                let events = by_name.entry((a.client(), a.name())).or_default();
                events.before.push((end, i));
            }
        }
    }
    // (client, next name) → the failed names it follows.
    let mut follows: HashMap<(IpAddr, &str), Vec<(IpAddr, &str)>> = HashMap::new();
    for (&key, &name) in &next {
        follows.entry((key.0, name)).or_default().push(key);
    }
    for (i, a) in asks.iter().enumerate() {
        for key in follows.get(&(a.client(), a.name())).into_iter().flatten() {
            if let Some(events) = by_name.get_mut(key) {
                events.after.push((a.start, i));
            }
        }
    }
    by_name
        .into_values()
        .flat_map(Events::isolated)
        .map(|(b, a)| (a, b))
        .collect()
}

/// (client, failed name) → the name asked next most of the times it was
/// paired by time, when that is most of them.
fn next_names<'a>(
    asks: &[Ask<'a>],
    pairs: &[(usize, usize)],
) -> HashMap<(IpAddr, &'a str), &'a str> {
    let mut counts: HashMap<(IpAddr, &str), HashMap<&str, usize>> = HashMap::new();
    for &(b, a) in pairs {
        let key = (asks[b].client(), asks[b].name());
        *counts
            .entry(key)
            .or_default()
            .entry(asks[a].name())
            .or_default() += 1;
    }
    counts
        .into_iter()
        .filter_map(|(key, next)| {
            let all: usize = next.values().sum();
            let (name, n) = next
                .into_iter()
                .max_by_key(|&(name, n)| (n, std::cmp::Reverse(name)))?;
            (2 * n > all && name != key.1).then_some((key, name))
        })
        .collect()
}

/// `name` and each of its leading parts: "api.internal.cluster.local" →
/// itself, "api.internal.cluster", "api.internal", "api".
fn bases(name: &str) -> impl Iterator<Item = &str> {
    std::iter::once(name).chain(name.rmatch_indices('.').map(move |(at, _)| &name[..at]))
}

fn resolved<'a>(a: &'a Ask) -> impl Iterator<Item = IpAddr> + 'a {
    a.queries
        .iter()
        .filter_map(|q| q.exchange.resolved_to.as_deref())
        .flatten()
        .copied()
}

/// (ask, call) where the call right after the ask went to an address its
/// answer gave, one to one.
fn calls_after(s: &Scene, asks: &[Ask]) -> Vec<(usize, usize)> {
    let ends: HashMap<u32, (IpAddr, IpAddr, Option<u64>)> = s
        .connections
        .iter()
        .filter(|c| c.protocol != Protocol::Dns)
        .map(|c| (c.id, (c.client.ip(), c.server.ip(), c.syn_at_us)))
        .collect();
    let mut by_address: HashMap<(IpAddr, IpAddr), Events> = HashMap::new();
    for (i, a) in asks.iter().enumerate() {
        let Some(end) = a.end else { continue };
        let mut ips: Vec<IpAddr> = resolved(a).collect();
        ips.sort_unstable();
        ips.dedup();
        for ip in ips {
            let events = by_address.entry((a.client(), ip)).or_default();
            events.before.push((end, i));
        }
    }
    if by_address.is_empty() {
        return Vec::new();
    }
    // A call's connection's first exchange started with its handshake.
    let mut first: HashMap<u32, u64> = HashMap::new();
    for e in s
        .exchanges
        .iter()
        .filter(|e| ends.contains_key(&e.connection))
    {
        let at = first.entry(e.connection).or_insert(u64::MAX);
        *at = (*at).min(e.request_first_at_us);
    }
    for (i, e) in s.exchanges.iter().enumerate() {
        if e.role != ExchangeRole::Outbound {
            continue;
        }
        let Some(&(client, server, syn)) = ends.get(&e.connection) else {
            continue;
        };
        if let Some(events) = by_address.get_mut(&(client, server)) {
            let opened = first.get(&e.connection) == Some(&e.request_first_at_us);
            let start = syn.filter(|_| opened).unwrap_or(e.request_first_at_us);
            events.after.push((start, i));
        }
    }
    let mut out: Vec<(usize, usize)> = by_address
        .into_values()
        .flat_map(Events::isolated)
        .collect();
    // An ask paired under two of its addresses is no one's.
    out.sort_unstable();
    let twice: std::collections::HashSet<usize> = out
        .windows(2)
        .filter(|w| w[0].0 == w[1].0)
        .map(|w| w[0].0)
        .collect();
    out.retain(|p| !twice.contains(&p.0));
    out
}

/// What comes before (an answer) and after (the next step), by time.
#[derive(Default)]
struct Events {
    before: Vec<(u64, usize)>,
    after: Vec<(u64, usize)>,
}

impl Events {
    /// (before, after) where `after` came right after `before` within
    /// NEXT_STEP_MAX_US, and the answer before `before` (if the event
    /// before it is one) and the step after `after` (likewise) are clearly
    /// further from them than they are from each other. A vote, not a
    /// decision: on a busy host a client may act on an answer a
    /// millisecond or more after the next one came (measured on the lab's
    /// dns-lookups at 16 clients: 3 % of such pairings were wrong).
    fn nearest(mut self) -> Vec<(usize, usize)> {
        // (time, is a next step, index); at one instant answers first.
        let mut ev: Vec<(u64, bool, usize)> = Vec::new();
        ev.extend(self.before.drain(..).map(|(t, i)| (t, false, i)));
        ev.extend(self.after.drain(..).map(|(t, i)| (t, true, i)));
        ev.sort_unstable();
        let mut out = Vec::new();
        for k in 0..ev.len().saturating_sub(1) {
            let ((t0, step0, b), (t1, step1, a)) = (ev[k], ev[k + 1]);
            let gap = t1 - t0;
            let alone_before = k == 0 || ev[k - 1].1 || clearly_below(gap, t1 - ev[k - 1].0);
            let alone_after = ev
                .get(k + 2)
                .is_none_or(|e| !e.1 || clearly_below(gap, e.0 - t0));
            if !step0 && step1 && alone_before && alone_after && gap <= NEXT_STEP_MAX_US {
                out.push((b, a));
            }
        }
        out
    }

    /// (before, after) where `after` is the only step within
    /// NEXT_STEP_MAX_US after `before`, and `before` the only answer within
    /// NEXT_STEP_MAX_US before `after`: within the longest a client takes
    /// to act on an answer, nothing else could have been either's partner.
    fn isolated(mut self) -> Vec<(usize, usize)> {
        self.before.sort_unstable();
        self.after.sort_unstable();
        let at = |v: &[(u64, usize)], t: u64| v.partition_point(|e| e.0 < t);
        let mut out = Vec::new();
        for &(t0, b) in &self.before {
            let k = at(&self.after, t0);
            let Some(&(t1, a)) = self.after.get(k) else {
                continue;
            };
            let window_end = t0 + NEXT_STEP_MAX_US;
            let next_step_free = self.after.get(k + 1).is_none_or(|e| e.0 > window_end);
            let answers =
                at(&self.before, t1 + 1) - at(&self.before, t1.saturating_sub(NEXT_STEP_MAX_US));
            if t1 <= window_end && next_step_free && answers == 1 {
                out.push((b, a));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attribution::attribute;
    use crate::testkit::{conn, exchange};
    use whyslow_model::{Connection, Exchange, Status, Timeline, TraceId};

    /// One query on its own UDP socket (the lab's stub resolver's way):
    /// (name, sent, answered, rcode, resolved).
    fn ask(t: &mut Timeline, name: &str, (sent, answered): (u64, u64), resolved: bool) {
        let id = t.exchanges.len() as u32;
        let client = format!("127.0.0.1:{}", 50_000 + id).parse().unwrap();
        let mut c = Connection::new(id + 100, client, "127.0.0.1:53".parse().unwrap(), sent);
        (c.udp, c.protocol) = (true, Protocol::Dns);
        t.connections.push(c);
        let mut e = Exchange::new(id + 100, Protocol::Dns, format!("A {name}").into());
        e.id = id;
        (e.request_first_at_us, e.request_last_at_us) = (sent, sent);
        (e.response_first_at_us, e.response_last_at_us) = (Some(answered), Some(answered));
        let rcode = if resolved { "NOERROR" } else { "NXDOMAIN" };
        e.status = Some(Status::Dns(rcode.into()));
        if resolved {
            e.resolved_to = Some(Box::new(["127.0.0.1".parse().unwrap()]));
        }
        t.exchanges.push(e);
    }

    /// Two requests in flight together (traces 7 and 9), each looking up
    /// api.internal through two search names, then calling :9090 with its
    /// trace; request 1 starts `lag` µs after request 0. A third request
    /// of their kind, in flight through both, looks nothing up: no request
    /// of the kind makes each query once, so none is placed by deduction.
    fn two_lookups(lag: u64) -> Timeline {
        let mut t = Timeline {
            connections: vec![conn(0, 8080), conn(1, 8080), conn(2, 8080)],
            exchanges: vec![
                exchange(0, 0, (0, 10), (30_000, 30_010)),
                exchange(1, 1, (lag, lag + 10), (30_000 + lag, 30_010 + lag)),
                exchange(2, 2, (0, 10), (40_000, 40_010)),
            ],
        };
        t.connections.extend([conn(20, 9090), conn(21, 9090)]);
        for (n, at) in [(0u64, 100), (1, 100 + lag)] {
            ask(
                &mut t,
                "api.internal.svc.cluster.local",
                (at, at + 5_000),
                false,
            );
            ask(
                &mut t,
                "api.internal.cluster.local",
                (at + 5_050, at + 10_050),
                false,
            );
            ask(&mut t, "api.internal", (at + 10_100, at + 15_100), true);
            let id = t.exchanges.len() as u32;
            let mut call = exchange(
                id,
                20 + n as u32,
                (at + 15_150, at + 15_160),
                (at + 16_000, at + 16_010),
            );
            call.trace = Some(TraceId(7 + 2 * u128::from(n)));
            t.exchanges.push(call);
        }
        t.exchanges[0].trace = Some(TraceId(7));
        t.exchanges[1].trace = Some(TraceId(9));
        t
    }

    fn lookups(t: &Timeline) -> Vec<(Option<u32>, Option<Rule>)> {
        t.exchanges
            .iter()
            .filter(|e| e.protocol == Protocol::Dns)
            .map(|e| (e.parent, e.rule))
            .collect()
    }

    #[test]
    fn a_lookup_and_its_search_names_go_with_the_call_after_it() {
        let mut t = two_lookups(20_000);
        attribute(&mut t, &[8080]);
        let mut by = vec![(Some(0), Some(Rule::Lookup)); 3];
        by.extend([(Some(1), Some(Rule::Lookup)); 3]);
        assert_eq!(lookups(&t), by);
    }

    #[test]
    fn lookups_answered_together_stay_ambiguous() {
        // Each step of request 1 comes 7 ms after request 0's: within the
        // time a client may take to act, either answer could be either's.
        let mut t = two_lookups(7_000);
        attribute(&mut t, &[8080]);
        assert!(
            lookups(&t).iter().all(|l| l.0.is_none()),
            "{:?}",
            lookups(&t)
        );
    }

    fn events(before: &[u64], after: &[u64]) -> Events {
        Events {
            before: before.iter().enumerate().map(|(i, &t)| (t, i)).collect(),
            after: after.iter().enumerate().map(|(i, &t)| (t, i)).collect(),
        }
    }

    #[test]
    fn a_vote_pairs_an_answer_with_the_clearly_nearest_step() {
        // L0 C0 · L1 C1: both pair.
        assert_eq!(
            events(&[100, 5_000], &[150, 5_020]).nearest(),
            vec![(0, 0), (1, 1)]
        );
        // L0 L1 C0: either answer could be the call's.
        assert!(events(&[100, 120], &[150]).nearest().is_empty());
        // L0 C0 C1: either call could be the lookup's.
        assert!(events(&[100], &[150, 160]).nearest().is_empty());
        // ... unless the other is clearly further: 50 µs against 2 ms.
        assert_eq!(events(&[100], &[150, 2_100]).nearest(), vec![(0, 0)]);
        assert_eq!(events(&[100, 2_100], &[2_150]).nearest(), vec![(1, 0)]);
        // A call long after the answer is not its next step.
        let late = 100 + NEXT_STEP_MAX_US + 1;
        assert!(events(&[100], &[late]).nearest().is_empty());
    }

    #[test]
    fn a_decision_wants_nothing_else_within_the_time_a_client_acts() {
        let max = NEXT_STEP_MAX_US;
        assert_eq!(
            events(&[100, 30_000], &[150, 30_050]).isolated(),
            vec![(0, 0), (1, 1)]
        );
        // A second step 2 ms on: the client may have acted that late.
        assert!(events(&[100], &[150, 2_100]).isolated().is_empty());
        // A second answer within the bound before the step.
        assert!(events(&[100, 2_100], &[2_150]).isolated().is_empty());
        // Past the bound both ways, each pairs alone.
        assert_eq!(
            events(&[100, max + 200], &[150, max + 250]).isolated(),
            vec![(0, 0), (1, 1)]
        );
        assert!(events(&[100], &[100 + max + 1]).isolated().is_empty());
    }

    #[test]
    fn a_names_leading_parts_are_its_bases() {
        let b: Vec<&str> = bases("api.internal.cluster.local").collect();
        assert_eq!(
            b,
            [
                "api.internal.cluster.local",
                "api.internal.cluster",
                "api.internal",
                "api"
            ]
        );
    }
}
