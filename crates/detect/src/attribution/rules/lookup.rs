//! A DNS lookup is the call's it preceded: a service resolves a name, then
//! connects or sends to an address the answer gave. On the wire the two
//! are tied by that address and by time alone, so a lookup goes with a
//! call only where the pairing is clear: the call came right after the
//! lookup's answer, within a scheduler's delay, and no other answer came
//! within that delay before the call, nor another call within it after the
//! answer. It
//! is then given to the request its call was given to, if that request
//! was waiting through it. The queries of one lookup go with it: the A
//! and AAAA asked together on one socket, a try asked again on it, and the
//! search-list names that failed (NXDOMAIN) right before the lookup's next
//! name was asked, paired the same way.

use crate::attribution::fit::clearly_below;
use crate::attribution::scene::Scene;
use crate::attribution::table::{Decision, Table};
use crate::dns_lookups::{queries_of, Query, PARTNER_US};
use foldhash::{HashMap, HashMapExt};
use std::net::IpAddr;
use whyslow_model::{Attribution, ExchangeRole, Protocol, Rule};

/// From an answer to what the client does with it (the next search name,
/// the call): at once, save for scheduling — 10 ms, a loaded host's
/// scheduler delay, as `pools` allows for a connection handed over.
pub const NEXT_STEP_MAX_US: u64 = 10_000;
/// A try asked again within this of the last one is the same ask: glibc
/// waits at most 30 s for one try (`RES_MAXRETRANS`).
const RETRY_MAX_US: u64 = 30_000_000;
/// Names one lookup asks at the most: the name and Kubernetes' limit of
/// 32 search domains (glibc since 2.26 sets none).
const MAX_CHAIN: usize = 33;

/// The queries of one name asked together on one socket (and asked again
/// there): one step of a lookup.
struct Ask<'a> {
    queries: Vec<Query<'a>>,
    start: u64,
    /// When its latest try began (its first query).
    try_start: u64,
    /// When its last query was sent.
    last_sent: u64,
    /// The last answer received; None: none came.
    end: Option<u64>,
    answered: bool,
    /// Every answer received was NXDOMAIN.
    nx_only: bool,
    /// A query of its latest try went unanswered: the client may ask again.
    lost: bool,
}

impl<'a> Ask<'a> {
    fn of(q: Query<'a>) -> Self {
        let mut a = Ask {
            queries: Vec::new(),
            start: q.sent_us,
            try_start: q.sent_us,
            last_sent: q.sent_us,
            end: None,
            answered: false,
            nx_only: true,
            lost: false,
        };
        a.add(q);
        a
    }

    fn add(&mut self, q: Query<'a>) {
        // A new try (A and AAAA asked again, together or one after the
        // other): what the earlier ones lost, it asks again.
        if !self.partner(&q) {
            self.try_start = q.sent_us;
            self.lost = false;
        }
        self.last_sent = self.last_sent.max(q.sent_us);
        match q.answered_us {
            Some(at) => {
                self.end = Some(self.end.map_or(at, |e| e.max(at)));
                self.answered = true;
                self.nx_only &= q.is("NXDOMAIN");
            }
            None => self.lost = true,
        }
        self.queries.push(q);
    }

    /// Sent with the latest try (A beside AAAA).
    fn partner(&self, q: &Query) -> bool {
        q.sent_us <= self.try_start.saturating_add(PARTNER_US)
    }

    /// Answered, every answer NXDOMAIN: a search name that does not exist.
    fn failed(&self) -> bool {
        self.answered && self.nx_only
    }

    fn name(&self) -> &'a str {
        self.queries[0].name
    }

    fn client(&self) -> IpAddr {
        self.queries[0].client
    }

    fn joins(&self, q: &Query) -> bool {
        let first = &self.queries[0];
        let retry = self.lost && q.sent_us <= self.last_sent.saturating_add(RETRY_MAX_US);
        first.exchange.connection == q.exchange.connection
            && first.name == q.name
            && (self.partner(q) || retry)
    }
}

pub fn place(s: &Scene, table: &mut Table) {
    // No request waited through any call (a resolver's own capture, a
    // load generator's): nothing to give, and the pairing is not built.
    if s.units.iter().all(|u| u.cands.is_empty()) {
        return;
    }
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
            // Steps go back in time, so a chain cannot loop; bounded all
            // the same.
            if chain.len() == MAX_CHAIN || asks[p].start >= asks[ask].start {
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
            if let (true, Some(end), true) = (a.failed(), a.end, base != a.name()) {
                events.before.push((end, i));
            }
        }
    }
    let votes: Vec<(usize, usize)> = by_lookup.into_values().flat_map(Events::nearest).collect();
    let next = next_names(asks, &votes);
    // (client, failed name) → its asks' ends, and the next name's starts.
    let mut by_name: HashMap<(IpAddr, &str), Events> = HashMap::new();
    for (i, a) in asks.iter().enumerate() {
        if let (true, Some(end)) = (a.failed(), a.end) {
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
    // An ask two failed names claim as their next is neither's.
    let mut prev: HashMap<usize, Option<usize>> = HashMap::new();
    for (b, a) in by_name.into_values().flat_map(Events::isolated) {
        prev.entry(a).and_modify(|p| *p = None).or_insert(Some(b));
    }
    prev.into_iter()
        .filter_map(|(a, b)| Some((a, b?)))
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
            let window_end = t0.saturating_add(NEXT_STEP_MAX_US);
            let next_step_free = self.after.get(k + 1).is_none_or(|e| e.0 > window_end);
            let answers = at(&self.before, t1.saturating_add(1))
                - at(&self.before, t1.saturating_sub(NEXT_STEP_MAX_US));
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
    use crate::testkit::{conn, exchange, request_0, servers};
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
        let mut t = servers(&[8080, 8080, 8080]).with(vec![
            request_0(30_000),
            exchange(1, 1, (lag, lag + 10), (30_000 + lag, 30_010 + lag)),
            exchange(2, 2, (0, 10), (40_000, 40_010)),
        ]);
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
        let dns = t.exchanges.iter().filter(|e| e.protocol == Protocol::Dns);
        dns.map(|e| (e.parent, e.rule)).collect()
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
    fn a_lookup_asked_again_after_a_lost_try_goes_with_its_call() {
        let mut t = two_lookups(20_000);
        // Request 0's answer came only for a second try on its socket,
        // 50 ms after the first went unanswered.
        let answered = 2;
        let lost = t.exchanges[3 + answered].clone();
        let e = &mut t.exchanges[3 + answered];
        (e.request_first_at_us, e.request_last_at_us) = (50_000, 50_000);
        (e.response_first_at_us, e.response_last_at_us) = (Some(55_000), Some(55_000));
        // The analyzer marks a retry and its first try with the query id.
        e.params_digest = Some(0x51);
        let mut lost = lost;
        lost.id = 99;
        lost.params_digest = Some(0x51);
        (
            lost.response_first_at_us,
            lost.response_last_at_us,
            lost.status,
        ) = (None, None, None);
        lost.resolved_to = None;
        // The retry asked AAAA too, right after A, on the same socket.
        let mut aaaa = t.exchanges[3 + answered].clone();
        (aaaa.id, aaaa.request) = (98, "AAAA api.internal".into());
        (aaaa.request_first_at_us, aaaa.request_last_at_us) = (50_020, 50_020);
        aaaa.resolved_to = None;
        t.exchanges.extend([lost, aaaa]);
        // Request 2 waits through the retry too: no sole candidate.
        t.exchanges[2].response_first_at_us = Some(70_000);
        t.exchanges[2].response_last_at_us = Some(70_010);
        let call = &mut t.exchanges[3 + 3];
        (call.request_first_at_us, call.request_last_at_us) = (55_050, 55_060);
        (call.response_first_at_us, call.response_last_at_us) = (Some(56_000), Some(56_010));
        t.exchanges[0].response_first_at_us = Some(60_000);
        t.exchanges[0].response_last_at_us = Some(60_010);
        attribute(&mut t, &[8080]);
        let mine: Vec<_> = t
            .exchanges
            .iter()
            .filter(|e| e.protocol == Protocol::Dns && e.parent == Some(0))
            .map(|e| (e.id, e.rule))
            .collect();
        for id in [99, 5, 98] {
            assert!(mine.contains(&(id, Some(Rule::Lookup))), "#{id}: {mine:?}");
        }
        assert_eq!(
            mine.len(),
            5,
            "both tries and the two failed names: {mine:?}"
        );
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
