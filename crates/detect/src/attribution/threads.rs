//! Calls given by thread: a server that handles each request on one thread
//! (Python threads, Puma, Java, PHP-FPM) makes that request's calls on the
//! thread that read it, between reading it and answering it. A thread
//! handles one request at a time, so the thread and the time name the
//! request exactly, whatever the concurrency. Work handed to other threads
//! (executors, event loops) carries a thread no request was read on and is
//! left to the other levels.

use foldhash::{HashMap, HashMapExt};
use whyslow_model::{Exchange, ExchangeRole, Thread};

/// An inbound request's time on its thread: first request byte → last
/// response byte (or to the end, while unanswered), and its id.
type Held = (u64, u64, u32);

/// Each thread's inbound requests, sorted by start.
fn requests_by_thread(exchanges: &[Exchange]) -> HashMap<Thread, Vec<Held>> {
    let mut out: HashMap<Thread, Vec<Held>> = HashMap::new();
    for e in exchanges {
        if let (ExchangeRole::Inbound, Some(t)) = (e.role, e.thread) {
            let end = e
                .response_last_at_us
                .or(e.response_first_at_us)
                .unwrap_or(u64::MAX);
            out.entry(t)
                .or_default()
                .push((e.request_first_at_us, end, e.id));
        }
    }
    for held in out.values_mut() {
        held.sort_unstable();
    }
    out
}

/// (index, request) of each call at `todo` its thread gives to a request;
/// `todo` keeps the rest.
pub fn given(exchanges: &[Exchange], todo: &mut Vec<usize>) -> Vec<(usize, u32)> {
    if !todo.iter().any(|&i| exchanges[i].thread.is_some()) {
        return Vec::new();
    }
    let by_thread = requests_by_thread(exchanges);
    let mut out = Vec::new();
    todo.retain(|&i| {
        let e = &exchanges[i];
        let Some(held) = e.thread.and_then(|t| by_thread.get(&t)) else {
            return true;
        };
        let at = e.request_first_at_us;
        // The last request the thread began before the call; the call is
        // its own only while that request was not yet answered.
        let k = held.partition_point(|&(start, _, _)| start <= at);
        match k.checked_sub(1).map(|k| held[k]) {
            Some((_, end, id)) if at <= end => {
                out.push((i, id));
                false
            }
            _ => true,
        }
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use whyslow_model::Protocol;

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

    #[test]
    fn calls_of_overlapping_requests_go_to_the_thread_that_read_each() {
        use ExchangeRole::*;
        // Two requests in flight together on threads 1 and 2; their calls
        // interleave in time, so timing alone could not tell them apart.
        let t = vec![
            on(1, 0, Inbound, (0, 100)),
            on(2, 1, Inbound, (5, 105)),
            on(2, 2, Outbound, (10, 20)),
            on(1, 3, Outbound, (12, 22)),
            on(1, 4, Outbound, (30, 40)),
            on(2, 5, Outbound, (31, 41)),
        ];
        let mut todo = vec![2, 3, 4, 5];
        let got = given(&t, &mut todo);
        assert_eq!(got, vec![(2, 1), (3, 0), (4, 0), (5, 1)]);
        assert!(todo.is_empty());
    }

    #[test]
    fn a_call_after_its_thread_answered_or_on_another_thread_is_left() {
        use ExchangeRole::*;
        let mut t = vec![
            on(1, 0, Inbound, (0, 100)),
            // After request 0 was answered: a background job on that thread.
            on(1, 1, Outbound, (150, 160)),
            // On a thread no request was read on (an executor).
            on(9, 2, Outbound, (10, 20)),
            on(1, 3, Outbound, (10, 20)),
        ];
        t[3].thread = None;
        let mut todo = vec![1, 2, 3];
        assert!(given(&t, &mut todo).is_empty());
        assert_eq!(todo, vec![1, 2, 3]);
    }

    #[test]
    fn a_thread_reused_for_the_next_request_gives_calls_to_that_one() {
        use ExchangeRole::*;
        let t = vec![
            on(1, 0, Inbound, (0, 100)),
            on(1, 1, Inbound, (110, 200)),
            on(1, 2, Outbound, (120, 130)),
        ];
        let mut todo = vec![2];
        assert_eq!(given(&t, &mut todo), vec![(2, 1)]);
    }
}
