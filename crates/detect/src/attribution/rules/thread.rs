//! Calls given by thread: a server that handles each request on one thread
//! (Python threads, Puma, Java, PHP-FPM) makes that request's calls on the
//! thread that read it, between reading it and answering it. A thread
//! handles one request at a time, so the thread and the time name the
//! request exactly, whatever the concurrency. Work handed to other threads
//! (executors, event loops) carries a thread no request was read on and is
//! left to the other levels, unless that thread was started while a
//! request was open on its starter and ended with it (a per-request
//! executor's): then it worked for that request alone. A pool thread first
//! started by one request lives on to serve others, and is not that
//! request's.
//!
//! A thread is evidence only while it serves one request at a time. An
//! event loop (Node.js, asyncio, tokio, Netty) reads the next request
//! before it answers the last, and a call it makes at a moment when one of
//! its requests happens to be open alone may still be another's, answered
//! already (a write after the answer) or not yet read: such a thread
//! (`interleaves`) gives nothing, and its calls go to the other rules
//! exactly as they would without eBPF.

use crate::attribution::table::{Decision, Table};
use foldhash::{HashMap, HashMapExt};
use whyslow_model::{Attribution, Exchange, ExchangeRole, Rule, Thread, ThreadStart};

/// How long after its request was answered a thread started for it may be
/// seen ending. Python's `join` returns once the thread's interpreter state
/// is released, before the kernel thread exits, and on a busy machine that
/// exit waits for a core: milliseconds. A pool's threads live for seconds
/// past any one request (Java's cached pools keep an idle thread 60 s,
/// Python's executors until shut down).
pub const THREAD_END_SLACK_US: u64 = 100_000;

/// An inbound request's time on its thread: from when the thread read it
/// (the request's first byte where the source did not say) to its last
/// response byte (or to the end, while unanswered), its id, and its first
/// response byte (when the thread had answered it).
type Held = (u64, u64, u32, u64);

/// How far a request may seem read before the last one on its thread was
/// answered and the thread still count as serving one at a time: the
/// slack of the two clocks an eBPF read time and a packet are stamped with
/// (`whyslow_ebpf::CLOCK_SLACK_US`).
pub const INTERLEAVE_SLACK_US: u64 = 50;

/// One thread's inbound requests, by start, and for each the latest end
/// of those before it: a thread serves one request at a time, and where
/// its requests overlap (an event loop's) its calls could be any of them.
#[derive(Debug, Default)]
struct ThreadRequests {
    held: Vec<Held>,
    ended_by: Vec<u64>,
    /// The thread read a request before it had begun to answer an
    /// earlier one: an event loop's, no evidence by identity.
    interleaves: bool,
}

impl ThreadRequests {
    /// The request the thread held at `at`, if it held one alone: the last
    /// it began before and had not yet answered, if none before it was
    /// still open. (answered at, id)
    fn open_at(&self, at: u64) -> Option<(u64, u32)> {
        let k = self.held.partition_point(|&(start, ..)| start <= at);
        let i = (k.saturating_sub(MAX_LOOK_BACK)..k)
            .rev()
            .find(|&i| self.held[i].1 >= at || self.ended_by[i] < at)?;
        let (_, end, id, _) = self.held[i];
        (end >= at && (i == 0 || self.ended_by[i] < at)).then_some((end, id))
    }
}

/// Requests looked back over for the one a thread held: more begun on one
/// thread while an earlier one stayed open (an event loop's) leave the call.
const MAX_LOOK_BACK: usize = 64;

fn requests_by_thread(exchanges: &[Exchange]) -> HashMap<Thread, ThreadRequests> {
    let mut out: HashMap<Thread, ThreadRequests> = HashMap::new();
    for e in exchanges {
        if let (ExchangeRole::Inbound, Some(t)) = (e.role, e.thread) {
            let end = e
                .response_last_at_us
                .or(e.response_first_at_us)
                .unwrap_or(u64::MAX);
            let start = e.read_at_us.unwrap_or(e.request_first_at_us);
            let answered = e.response_first_at_us.unwrap_or(end);
            out.entry(t)
                .or_default()
                .held
                .push((start, end, e.id, answered));
        }
    }
    for t in out.values_mut() {
        t.held.sort_unstable();
        // An answer the capture never saw ended, at the latest, when its
        // thread read its next request.
        for i in 1..t.held.len() {
            if t.held[i - 1].1 == u64::MAX {
                t.held[i - 1].1 = t.held[i].0;
                t.held[i - 1].3 = t.held[i - 1].3.min(t.held[i].0);
            }
        }
        let mut answering = 0;
        t.interleaves = t.held.iter().any(|h| {
            let read_early = answering > h.0.saturating_add(INTERLEAVE_SLACK_US);
            answering = answering.max(h.3);
            read_early
        });
        let mut latest = 0;
        t.ended_by = t
            .held
            .iter()
            .map(|h| {
                let before = latest;
                latest = latest.max(h.1);
                before
            })
            .collect();
    }
    out
}

pub fn place(exchanges: &[Exchange], table: &mut Table) {
    let mut todo: Vec<usize> = (0..exchanges.len())
        .filter(|&i| exchanges[i].role == ExchangeRole::Outbound && table.is_open(i))
        .collect();
    for (i, id) in given(exchanges, &mut todo) {
        table.decide(i, Decision::Given(id, Attribution::Thread, Rule::Thread));
    }
}

/// (index, request) of each call at `todo` its thread gives to a request;
/// `todo` keeps the rest.
pub fn given(exchanges: &[Exchange], todo: &mut Vec<usize>) -> Vec<(usize, u32)> {
    if !todo.iter().any(|&i| exchanges[i].thread.is_some()) {
        return Vec::new();
    }
    let mut by_thread = requests_by_thread(exchanges);
    by_thread.retain(|_, held| !held.interleaves);
    let mut out = Vec::new();
    todo.retain(|&i| {
        let e = &exchanges[i];
        let at = e.request_first_at_us;
        let id = e
            .thread
            .and_then(|t| by_thread.get(&t))
            .and_then(|held| held.open_at(at))
            .map(|(_, id)| id)
            .or_else(|| started_for(&by_thread, e.started_by.as_deref()?, at));
        match id {
            Some(id) => {
                out.push((i, id));
                false
            }
            None => true,
        }
    });
    out
}

/// The threads that read a request before answering the last (`interleaves`):
/// event loops, whose calls were left to the other rules.
pub fn event_loops(exchanges: &[Exchange]) -> Vec<Thread> {
    if !exchanges.iter().any(|e| e.thread.is_some()) {
        return Vec::new();
    }
    let mut out: Vec<Thread> = requests_by_thread(exchanges)
        .into_iter()
        .filter(|(_, held)| held.interleaves)
        .map(|(t, _)| t)
        .collect();
    out.sort_unstable();
    out
}

/// The request a call at `at` on a started thread was made for: the one
/// the nearest starter that held a request held when it started the chain,
/// if the chain ended with that request.
fn started_for(
    by_thread: &HashMap<Thread, ThreadRequests>,
    starters: &[ThreadStart],
    at: u64,
) -> Option<u32> {
    let (start, (end, id)) = starters.iter().find_map(|s| {
        let held = by_thread.get(&s.by)?;
        Some((s, held.open_at(s.at_us)?))
    })?;
    let until = end.saturating_add(THREAD_END_SLACK_US);
    (start.ended_us? <= until && at <= until).then_some(id)
}

#[cfg(test)]
mod tests {
    use super::*;
    use whyslow_model::Protocol;
    use ExchangeRole::{Inbound, Outbound};

    /// What `given` gives of the calls at `todo`, and what it leaves.
    fn run(t: &[Exchange], todo: &[usize]) -> (Vec<(usize, u32)>, Vec<usize>) {
        let mut left = todo.to_vec();
        (given(t, &mut left), left)
    }

    fn on(thread: u32, id: u32, role: ExchangeRole, (start, end): (u64, u64)) -> Exchange {
        let mut e = Exchange::new(id, Protocol::Http1, "GET /".into());
        e.id = id;
        e.role = role;
        e.request_first_at_us = start;
        e.request_last_at_us = start;
        e.response_first_at_us = Some(end);
        e.response_last_at_us = Some(end);
        e.thread = Some(Thread {
            pid: 7,
            tid: thread,
        });
        e
    }

    fn started(mut e: Exchange, by: u32, at_us: u64, ended_us: Option<u64>) -> Exchange {
        // Each handler thread was itself started by the server's main
        // thread (thread 99) when its connection was accepted.
        e.started_by = Some(Box::new([
            ThreadStart {
                by: Thread { pid: 7, tid: by },
                at_us,
                ended_us,
            },
            ThreadStart {
                by: Thread { pid: 7, tid: 99 },
                at_us: 0,
                ended_us: None,
            },
        ]));
        e
    }

    /// Requests 0 and 1 read by threads 1 and 2, 0 → 1 000 and 5 → 1 005,
    /// and calls 2, 3 and 4 on threads 11, 12 and 13, each started as
    /// given: (by thread, at, ended).
    fn two_handlers(starts: [(u32, u64, Option<u64>); 3]) -> Vec<Exchange> {
        let calls = [(11, (100, 200)), (12, (110, 210)), (13, (300, 400))];
        let mut t = vec![on(1, 0, Inbound, (0, 1_000)), on(2, 1, Inbound, (5, 1_005))];
        for ((thread, span), (by, at, ended)) in calls.into_iter().zip(starts) {
            let id = t.len() as u32;
            t.push(started(on(thread, id, Outbound, span), by, at, ended));
        }
        t
    }

    #[test]
    fn a_thread_started_for_a_request_and_ended_with_it_makes_that_requests_calls() {
        let t = two_handlers([
            // Threads 11 and 12 were started by the two handlers and ended
            // with their requests (a per-request executor).
            (1, 50, Some(990)),
            (2, 60, Some(1_010)),
            // Ended as its request was answered, seen a little later.
            (1, 70, Some(1_000 + 5_000)),
        ]);
        assert_eq!(run(&t, &[2, 3, 4]).0, vec![(2, 0), (3, 1), (4, 0)]);
    }

    #[test]
    fn a_pool_thread_first_started_by_one_request_is_not_that_requests() {
        let t = two_handlers([
            // Started by request 0's handler, never ended: a pool's thread,
            // here working for request 1 while request 0 is still open.
            (1, 50, None),
            // Ended long after its starter's request: a pool shrinking.
            (2, 60, Some(500_000)),
            // Started while its starter held no request.
            (1, 2_000, Some(2_100)),
        ]);
        assert_eq!(run(&t, &[2, 3, 4]), (vec![], vec![2, 3, 4]));
    }

    /// Requests read on threads, then calls made on threads, each
    /// (thread, span), numbered in that order from 0.
    fn threads(requests: &[(u32, (u64, u64))], calls: &[(u32, (u64, u64))]) -> Vec<Exchange> {
        let roles = requests.iter().map(|r| (Inbound, r));
        let rows = roles.chain(calls.iter().map(|c| (Outbound, c)));
        rows.zip(0..)
            .map(|((role, &(thread, span)), id)| on(thread, id, role, span))
            .collect()
    }

    #[test]
    fn calls_of_overlapping_requests_go_to_the_thread_that_read_each() {
        // Two requests in flight together on threads 1 and 2; their calls
        // interleave in time, so timing alone could not tell them apart.
        let t = threads(
            &[(1, (0, 100)), (2, (5, 105))],
            &[(2, (10, 20)), (1, (12, 22)), (1, (30, 40)), (2, (31, 41))],
        );
        let all = vec![(2, 1), (3, 0), (4, 0), (5, 1)];
        assert_eq!(run(&t, &[2, 3, 4, 5]), (all, vec![]));
    }

    #[test]
    fn a_call_after_its_thread_answered_or_on_another_thread_is_left() {
        // Call 1 came after request 0 was answered: a background job on its
        // thread. Call 2 is on a thread no request was read on (an
        // executor); call 3 on no thread known.
        let mut t = threads(
            &[(1, (0, 100))],
            &[(1, (150, 160)), (9, (10, 20)), (1, (10, 20))],
        );
        t[3].thread = None;
        assert_eq!(run(&t, &[1, 2, 3]), (vec![], vec![1, 2, 3]));
    }

    #[test]
    fn a_thread_reused_for_the_next_request_gives_calls_to_that_one() {
        let t = threads(&[(1, (0, 100)), (1, (110, 200))], &[(1, (120, 130))]);
        assert_eq!(run(&t, &[2]), (vec![(2, 1)], vec![]));
    }

    #[test]
    fn a_request_waiting_for_its_busy_thread_starts_when_the_thread_reads_it() {
        // Request 1 arrived at 50 while thread 1 still served request 0 (a
        // Java executor's thread): its thread read it at 100, once free. The
        // call at 60 is request 0's, the one at 120 request 1's.
        let mut t = threads(
            &[(1, (0, 100)), (1, (50, 200))],
            &[(1, (60, 70)), (1, (120, 130))],
        );
        t[1].read_at_us = Some(100);
        assert_eq!(run(&t, &[2, 3]), (vec![(2, 0), (3, 1)], vec![]));
        // Unread, the two overlap: the call at 60 could be either's.
        t[1].read_at_us = None;
        assert_eq!(run(&t, &[2, 3]), (vec![(3, 1)], vec![2]));
    }

    #[test]
    fn an_event_loop_gives_no_call_even_where_one_request_is_open() {
        // One thread reads both requests and serves them together; after
        // request 1 is answered, request 0 alone is open again, but the
        // call at 150 may still be request 1's (written after its answer):
        // the thread says nothing. Thread 2 serves one request at a time
        // in the same window and still gives its call.
        let t = threads(
            &[(1, (0, 300)), (1, (10, 100)), (2, (0, 400))],
            &[(1, (20, 30)), (1, (150, 160)), (2, (150, 160))],
        );
        assert_eq!(run(&t, &[3, 4, 5]), (vec![(5, 2)], vec![3, 4]));
        assert_eq!(event_loops(&t), vec![Thread { pid: 7, tid: 1 }]);
    }

    #[test]
    fn a_thread_that_reads_the_next_request_as_it_answers_is_no_event_loop() {
        // Thread 1 answers request 0 at 100 and reads request 1 at 120,
        // while request 0's last bytes still drain on the wire (to 150);
        // request 1 read within the clocks' slack of the answer too.
        let mut t = threads(
            &[(1, (0, 150)), (1, (120, 300)), (1, (340, 400))],
            &[(1, (200, 210)), (1, (360, 370))],
        );
        t[0].response_first_at_us = Some(100);
        t[1].response_first_at_us = Some(330 + INTERLEAVE_SLACK_US);
        assert_eq!(run(&t, &[3, 4]), (vec![(3, 1), (4, 2)], vec![]));
        assert!(event_loops(&t).is_empty());
    }

    #[test]
    fn a_thread_started_by_an_event_loop_is_no_requests() {
        // Thread 11 was started by the loop while request 0 was open
        // alone, and ended with it: the loop says nothing of whose it was.
        let mut t = threads(&[(1, (0, 300)), (1, (10, 100))], &[(11, (20, 30))]);
        t[2] = started(t[2].clone(), 1, 5, Some(290));
        assert_eq!(run(&t, &[2]), (vec![], vec![2]));
    }

    #[test]
    fn an_unanswered_request_ends_when_its_thread_reads_the_next() {
        let mut t = vec![
            on(1, 0, Inbound, (0, 100)),
            on(1, 1, Inbound, (200, 300)),
            on(1, 2, Outbound, (250, 260)),
        ];
        t[0].response_first_at_us = None;
        t[0].response_last_at_us = None;
        assert_eq!(run(&t, &[2]), (vec![(2, 1)], vec![]));
    }
}
