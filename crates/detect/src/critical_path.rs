//! Which backing traffic an inbound request waited for. Attribution gives a
//! call a parent only when it ended before that request began answering; a
//! call without one (an asynchronous write still running when the page was
//! sent) was waited for by no one — unless a call that was waited for sat
//! behind it on the same connection. Time lost is time lost by inbound
//! requests, so only these spans can make a backing stall a cause.

use foldhash::HashMap;
use foldhash::HashMapExt;
use whyslow_model::{Attribution, Exchange, ExchangeRole, Protocol, Timeline};

/// The exchanges of one connection in request order, and for each the
/// first of the earlier ones still unanswered when its request began.
pub struct Lane<'a> {
    pub exchanges: Vec<&'a Exchange>,
    /// `ahead_from[j]..j`: the exchanges ahead of `exchanges[j]`.
    pub ahead_from: Vec<usize>,
}

impl<'a> Lane<'a> {
    fn new(mut exchanges: Vec<&'a Exchange>) -> Self {
        exchanges.sort_by_key(|e| (e.request_first_at_us, e.id));
        // One request at a time is answered in order on these protocols, so
        // the unanswered ones ahead are a suffix and `head` only moves on.
        // An exchange is done at the latest when a later one was answered:
        // one whose answer the capture missed (a gap, a capture that began
        // mid-response) no longer stands ahead of every exchange after it,
        // which made a long-lived connection's lane quadratic.
        let mut done_by = vec![u64::MAX; exchanges.len()];
        let mut earliest = u64::MAX;
        for (k, e) in exchanges.iter().enumerate().rev() {
            earliest = earliest.min(e.response_last_at_us.unwrap_or(u64::MAX));
            done_by[k] = earliest;
        }
        let mut head = 0;
        let mut ahead_from = Vec::with_capacity(exchanges.len());
        for (j, b) in exchanges.iter().enumerate() {
            while head < j && done_by[head] <= b.request_first_at_us {
                head += 1;
            }
            ahead_from.push(head);
        }
        Lane {
            exchanges,
            ahead_from,
        }
    }

    /// The exchanges still in the way when `exchanges[j]` was sent.
    pub fn ahead(&self, j: usize) -> &[&'a Exchange] {
        &self.exchanges[self.ahead_from[j]..j]
    }
}

/// The connections on which one request at a time is answered, in order:
/// every protocol but HTTP/2, whose streams share a connection by design,
/// and DNS, answered by id in any order (RFC 7766 §6.2.1.1).
pub fn lanes(t: &Timeline) -> HashMap<u32, Lane<'_>> {
    let mut by_conn: HashMap<u32, Vec<&Exchange>> = HashMap::new();
    let in_order = |e: &&Exchange| e.stream.is_none() && e.protocol != Protocol::Dns;
    for e in t.exchanges.iter().filter(in_order) {
        by_conn.entry(e.connection).or_default().push(e);
    }
    by_conn
        .into_iter()
        .map(|(c, list)| (c, Lane::new(list)))
        .collect()
}

/// An inbound request waited for this exchange: it is inbound itself, or
/// a backing call that ended before its request began answering — known,
/// or one of several requests in flight (ambiguous: which one is unknown,
/// that one did is not).
pub fn waited_for(e: &Exchange) -> bool {
    e.role == ExchangeRole::Inbound
        || e.parent.is_some()
        || e.attribution == Some(Attribution::Ambiguous)
}

/// Per connection, the stretches of time some inbound request waited on it.
pub struct WaitedSpans {
    spans: HashMap<u32, Vec<(u64, u64)>>,
}

impl WaitedSpans {
    /// From each waited-for exchange's first request byte (or that of the
    /// first exchange ahead of it on its connection) to its last response byte.
    pub fn new(t: &Timeline) -> Self {
        let mut spans: HashMap<u32, Vec<(u64, u64)>> = HashMap::new();
        for (conn, lane) in lanes(t) {
            let list = spans.entry(conn).or_default();
            for (j, b) in lane.exchanges.iter().enumerate() {
                if !waited_for(b) {
                    continue;
                }
                let from = lane
                    .ahead(j)
                    .first()
                    .map_or(b.request_first_at_us, |a| a.request_first_at_us);
                let to = b.response_last_at_us.unwrap_or(u64::MAX);
                list.push((from.min(b.request_first_at_us), to));
            }
            list.sort_unstable();
        }
        WaitedSpans { spans }
    }

    /// Whether exchanges were seen on the connection at all: without them
    /// the wire cannot say who waited on it.
    pub fn knows(&self, connection: u32) -> bool {
        self.spans.contains_key(&connection)
    }

    /// Some inbound request was waiting on `connection` at `at`.
    pub fn waiting_at(&self, connection: u32, at: u64) -> bool {
        let Some(list) = self.spans.get(&connection) else {
            return false;
        };
        let i = list.partition_point(|s| s.0 <= at);
        list[..i].iter().any(|s| s.1 >= at)
    }

    /// Some inbound request waited on `connection` at some time.
    pub fn any_on(&self, connection: u32) -> bool {
        self.spans.get(&connection).is_some_and(|l| !l.is_empty())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request_calls::tests::conn;
    use crate::testkit::{exchange, servers};

    fn outbound(
        id: u32,
        c: u32,
        req: (u64, u64),
        resp: (u64, u64),
        parent: Option<u32>,
    ) -> Exchange {
        let mut e = exchange(id, c, req, resp);
        e.role = ExchangeRole::Outbound;
        e.parent = parent;
        e
    }

    #[test]
    fn an_exchange_whose_answer_was_missed_is_done_once_a_later_one_was_answered() {
        // The first exchange's answer is not in the capture; the second was
        // answered at 300, so by then both were done: nothing stands ahead
        // of the third, nor of any after it.
        let mut first = exchange(0, 1, (0, 10), (0, 0));
        first.response_first_at_us = None;
        first.response_last_at_us = None;
        let mut list = vec![first];
        for k in 1..6u64 {
            list.push(exchange(
                k as u32,
                1,
                (100 * k, 100 * k + 10),
                (100 * k + 50, 100 * k + 60),
            ));
        }
        let lane = Lane::new(list.iter().collect());
        assert_eq!(lane.ahead(1).len(), 1, "the first may still be in the way");
        for j in 2..6 {
            assert!(
                lane.ahead(j).is_empty(),
                "exchange {j}: {:?}",
                lane.ahead(j)
            );
        }
        // Never answered, and nothing after it answered: it stays ahead.
        let mut last = exchange(9, 1, (900, 910), (0, 0));
        last.response_first_at_us = None;
        last.response_last_at_us = None;
        list.push(last);
        list.push(exchange(10, 1, (1_000, 1_010), (0, 0)));
        list[7].response_last_at_us = None;
        let lane = Lane::new(list.iter().collect());
        assert_eq!(lane.ahead(7).len(), 1);
    }

    #[test]
    fn a_read_queued_behind_an_unwaited_write_makes_the_write_waited_for() {
        let t = servers(&[8080, 6379, 6379]).with(vec![
            // Connection 1: a write nobody waits for, then a read that queued behind it.
            outbound(1, 1, (1_000, 9_000), (9_100, 9_200), None),
            outbound(2, 1, (9_000, 9_010), (9_200, 9_300), Some(0)),
            // Connection 2: a write alone, nobody waiting.
            outbound(3, 2, (20_000, 29_000), (29_100, 29_200), None),
        ]);
        let w = WaitedSpans::new(&t);
        assert!(w.waiting_at(1, 5_000), "the read waited through the write");
        assert!(!w.waiting_at(1, 500));
        assert!(w.knows(2) && !w.any_on(2));
        assert!(!w.waiting_at(2, 25_000));
    }

    #[test]
    fn answered_exchanges_are_not_ahead() {
        let t = Timeline {
            connections: vec![conn(1, 6379)],
            exchanges: vec![
                outbound(1, 1, (1_000, 1_010), (1_100, 1_200), Some(0)),
                outbound(2, 1, (2_000, 2_010), (2_100, 2_200), Some(0)),
                outbound(3, 1, (2_050, 2_060), (2_200, 2_300), Some(0)),
            ],
        };
        let lanes = lanes(&t);
        let lane = &lanes[&1];
        assert!(lane.ahead(1).is_empty());
        let ids: Vec<u32> = lane.ahead(2).iter().map(|e| e.id).collect();
        assert_eq!(ids, vec![2]);
    }
}
