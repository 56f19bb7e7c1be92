//! Attribution when requests overlap: exact by trace, whole by group or
//! transaction, and ambiguous rather than guessed.

use super::*;
use crate::testkit::{conn, exchange, lose, of_calls, request_0, servers};
use whyslow_model::Direction;
use whyslow_model::{Exchange, Protocol, Rule, TraceId, TxState};

fn traced(mut e: Exchange, trace: u128) -> Exchange {
    e.trace = Some(TraceId(trace));
    e
}

fn levels(t: &Timeline) -> Vec<(Option<u32>, Option<Attribution>)> {
    of_calls(t, |e| (e.parent, e.attribution))
}

/// Two requests in flight together, on connections 0 and 1 to :8080, and
/// short calls on :5432 while both wait.
fn overlapping() -> Timeline {
    servers(&[8080, 8080, 5432, 5432]).with(vec![
        request_0(1000),
        exchange(1, 1, (100, 110), (1100, 1110)),
        exchange(2, 2, (300, 310), (350, 360)),
        exchange(3, 3, (400, 410), (450, 460)),
    ])
}

#[test]
fn trace_context_is_exact_whatever_the_overlap() {
    let mut t = overlapping();
    t.exchanges[0] = traced(t.exchanges[0].clone(), 7);
    t.exchanges[1] = traced(t.exchanges[1].clone(), 9);
    t.exchanges[2] = traced(t.exchanges[2].clone(), 9);
    t.exchanges[3] = traced(t.exchanges[3].clone(), 7);
    attribute(&mut t, &[8080]);
    let exact = Some(Attribution::TraceContext);
    assert_eq!(levels(&t), vec![(Some(1), exact), (Some(0), exact)]);
}

#[test]
fn short_calls_of_overlapping_requests_are_ambiguous_not_guessed() {
    let mut t = overlapping();
    let a = attribute(&mut t, &[8080]);
    let amb = (None, Some(Attribution::Ambiguous));
    assert_eq!(levels(&t), vec![amb, amb]);
    // Both candidates were "GET /" requests on :8080: counted for that kind.
    assert_eq!(a.ambiguous_kind.len(), 2);
    // A call while only request 0 waited is its own.
    t.exchanges.push(exchange(4, 2, (20, 30), (60, 70)));
    attribute(&mut t, &[8080]);
    assert_eq!(levels(&t)[2], (Some(0), Some(Attribution::Inferred)));
}

#[test]
fn a_trace_id_two_requests_carry_gives_nothing() {
    let mut t = overlapping();
    for i in 0..4 {
        t.exchanges[i] = traced(t.exchanges[i].clone(), 5);
    }
    let a = attribute(&mut t, &[8080]);
    assert_eq!(a.repeated_traces, 1);
    assert!(levels(&t)
        .iter()
        .all(|l| *l == (None, Some(Attribution::Ambiguous))));
}

#[test]
fn a_trace_the_service_started_goes_whole_to_the_request_that_brackets_it() {
    // Request 0 [0, 1000] and 1 [100, 1100]; trace 3's calls run 20 → 990,
    // inside request 0 only; trace 4's 300 → 1080, inside 1 only once whole.
    let mut t = overlapping();
    t.exchanges.extend([
        traced(exchange(4, 2, (20, 30), (60, 70)), 3),
        traced(exchange(5, 3, (950, 960), (980, 990)), 3),
        traced(exchange(6, 2, (300, 310), (350, 360)), 4),
        traced(exchange(7, 3, (1020, 1030), (1070, 1080)), 4),
    ]);
    t.exchanges.drain(2..4);
    attribute(&mut t, &[8080]);
    let group = Some(Attribution::TraceGroup);
    assert_eq!(
        levels(&t),
        vec![
            (Some(0), group),
            (Some(0), group),
            (Some(1), group),
            (Some(1), group)
        ]
    );
}

/// A PostgreSQL statement on `connection` that leaves the transaction `tx`.
fn statement(id: u32, connection: u32, (start, end): (u64, u64), tx: TxState) -> Exchange {
    let mut e = exchange(id, connection, (start, start + 5), (end - 5, end));
    e.protocol = Protocol::Postgres;
    e.transaction = Some(tx);
    e
}

/// Request 0 [0, 1000] runs a transaction 20 → 980 on connection 2.
/// Request 1 [100, 3000] waited for the pool and runs its own 1500 → 2900
/// on the same connection.
fn two_transactions() -> Timeline {
    let (i, idle) = (TxState::InTransaction, TxState::Idle);
    servers(&[8080, 8080, 5432]).with(vec![
        request_0(1000),
        exchange(1, 1, (100, 110), (3000, 3010)),
        statement(2, 2, (20, 40), i),
        statement(3, 2, (500, 520), i),
        statement(4, 2, (960, 980), idle),
        statement(5, 2, (1500, 1520), i),
        statement(6, 2, (2880, 2900), idle),
    ])
}

#[test]
fn transactions_are_placed_whole_and_jointly() {
    // The first transaction is inside both windows: request 0 brackets it
    // tightly, and request 1 holds the second.
    let mut t = two_transactions();
    attribute(&mut t, &[8080]);
    let inf = Some(Attribution::Inferred);
    let want = [0, 0, 0, 1, 1].map(|p| (Some(p), inf));
    assert_eq!(levels(&t), want);
    // The same statements one at a time would be ambiguous: 500 → 520
    // fits both requests alike.
    for e in &mut t.exchanges {
        e.transaction = None;
    }
    attribute(&mut t, &[8080]);
    assert_eq!(levels(&t)[1], (None, Some(Attribution::Ambiguous)));
}

#[test]
fn one_hole_may_hide_several_requests_so_deduction_counts_none() {
    // Request 1 waits 1000 → 3000. A hole toward the service on connection 3,
    // noticed at 50, may hide one request or more, waiting from 40 to at
    // most 2050. Transactions 100 → 900 and 1100 → 2000: the first is the
    // lost one's; the second may be request 1's or another lost one's.
    let (i, idle) = (TxState::InTransaction, TxState::Idle);
    let mut t = Timeline {
        connections: vec![conn(1, 8080), conn(2, 5432), conn(3, 8080)],
        exchanges: vec![
            exchange(1, 1, (1000, 1010), (3000, 3010)),
            statement(2, 2, (100, 120), i),
            statement(3, 2, (880, 900), idle),
            statement(4, 2, (1100, 1120), i),
            statement(5, 2, (1980, 2000), idle),
        ],
    };
    t.connections[2].first_at_us = 40;
    lose(&mut t.connections[2], Direction::ToServer, 50, 80);
    attribute(&mut t, &[8080]);
    let amb = (None, Some(Attribution::Ambiguous));
    assert_eq!(levels(&t), vec![amb; 4]);
}

#[test]
fn an_unanswered_request_waits_only_until_its_connection_closed() {
    let mut t = overlapping();
    t.exchanges[0].response_first_at_us = None;
    t.exchanges[0].response_last_at_us = None;
    // Never answered, never closed: it may have made anything after it.
    attribute(&mut t, &[8080]);
    assert_eq!(levels(&t)[0], (None, Some(Attribution::Ambiguous)));
    // Reset at 200: the calls after it are request 1's alone.
    t.connections[0].closed_by = Some((
        whyslow_model::Direction::ToServer,
        whyslow_model::CloseKind::Rst,
    ));
    t.connections[0].last_at_us = 200;
    attribute(&mut t, &[8080]);
    assert_eq!(levels(&t)[0], (Some(1), Some(Attribution::Inferred)));
}

#[test]
fn timing_tells_a_call_apart_only_where_calls_do_not_interleave() {
    // A waits 0..1000, B 50..3000; a call 60..990 fills A and brackets it
    // far more tightly than B.
    let two = |calls: Vec<Exchange>| {
        let mut exchanges = vec![request_0(1000), exchange(1, 1, (50, 60), (3000, 3010))];
        exchanges.extend(calls);
        servers(&[8080, 8080, 5432]).with(exchanges)
    };
    let mut t = two(vec![exchange(2, 2, (60, 70), (980, 990))]);
    attribute(&mut t, &[8080]);
    assert_eq!(levels(&t), vec![(Some(0), Some(Attribution::Inferred))]);
    // The same call beside another in flight on its connection (HTTP/2,
    // pipelining): whose is which, timing cannot say.
    let mut t = two(vec![
        exchange(2, 2, (60, 70), (980, 990)),
        exchange(3, 2, (70, 80), (900, 910)),
    ]);
    attribute(&mut t, &[8080]);
    let amb = (None, Some(Attribution::Ambiguous));
    assert_eq!(levels(&t), vec![amb, amb]);
}

#[test]
fn overlapping_calls_timing_would_all_give_one_request_go_one_each_as_well() {
    // Three requests arrive together; A is answered first. Three calls run
    // 60..5000 on three connections: each brackets A most tightly, and
    // one call per request fits the wire as well.
    let mut t = Timeline {
        connections: (0..3)
            .map(|c| conn(c, 8080))
            .chain((3..6).map(|c| conn(c, 5432)))
            .collect(),
        exchanges: vec![
            request_0(6000),
            exchange(1, 1, (20, 30), (12000, 12010)),
            exchange(2, 2, (40, 50), (12100, 12110)),
        ],
    };
    for c in 3..6 {
        t.exchanges.push(exchange(c, c, (60, 70), (4990, 5000)));
    }
    attribute(&mut t, &[8080]);
    let amb = (None, Some(Attribution::Ambiguous));
    assert_eq!(levels(&t), vec![amb; 3]);
    // Alone, the first call is A's by timing.
    t.exchanges.truncate(4);
    attribute(&mut t, &[8080]);
    assert_eq!(levels(&t), vec![(Some(0), Some(Attribution::Inferred))]);
}

#[test]
fn a_call_a_request_the_capture_lost_may_have_made_is_not_timed_to_another() {
    // A waits 0..1000, B 50..3000; a call 60..990 brackets A. Then a hole
    // toward the service on a third connection, noticed at 50: a request
    // lost there could have made the call as well.
    let mut t = servers(&[8080, 8080, 5432, 8080]).with(vec![
        request_0(1000),
        exchange(1, 1, (50, 60), (3000, 3010)),
        exchange(2, 2, (60, 70), (980, 990)),
    ]);
    attribute(&mut t, &[8080]);
    assert_eq!(levels(&t), vec![(Some(0), Some(Attribution::Inferred))]);
    t.connections[3].first_at_us = 40;
    lose(&mut t.connections[3], Direction::ToServer, 50, 80);
    attribute(&mut t, &[8080]);
    assert_eq!(levels(&t), vec![(None, Some(Attribution::Ambiguous))]);
}

#[test]
fn a_request_that_checks_a_connection_out_per_call_keeps_its_calls() {
    // Requests one at a time, each making two calls on two pooled
    // connections (a client that checks out per call): each call follows an
    // answer on its connection and so opens a run, and a request holds two
    // runs. Each has one candidate: none may be made ambiguous.
    const REQUESTS: u32 = 10;
    let mut t = servers(&[8080, 5432, 5432]).with(Vec::new());
    for k in 0..REQUESTS {
        let at = u64::from(k) * 1000;
        let id = k * 3;
        t.exchanges
            .push(exchange(id, 0, (at, at + 10), (at + 900, at + 910)));
        t.exchanges.push(exchange(
            id + 1,
            1,
            (at + 20, at + 30),
            (at + 100, at + 110),
        ));
        t.exchanges.push(exchange(
            id + 2,
            2,
            (at + 200, at + 210),
            (at + 300, at + 310),
        ));
    }
    attribute(&mut t, &[8080]);
    let inf = Some(Attribution::Inferred);
    let want: Vec<_> = (0..REQUESTS)
        .flat_map(|k| [(Some(k * 3), inf), (Some(k * 3), inf)])
        .collect();
    assert_eq!(levels(&t), want);
}

/// Each given call's rule, in the timeline's order.
fn rules(t: &Timeline) -> Vec<Option<Rule>> {
    of_calls(t, |e| e.rule)
}

#[test]
fn each_call_names_the_rule_that_gave_it() {
    let mut t = overlapping();
    t.exchanges[0] = traced(t.exchanges[0].clone(), 7);
    t.exchanges[2] = traced(t.exchanges[2].clone(), 7);
    // Two untraced calls of one fingerprint, one each for the two requests
    // of one kind: call 4 ran while request 0 alone waited, so call 3 is 1's.
    t.exchanges.push(exchange(4, 2, (20, 30), (60, 70)));
    attribute(&mut t, &[8080]);
    let fingerprint = Some(Rule::Fingerprint);
    assert_eq!(
        rules(&t),
        vec![Some(Rule::TraceContext), fingerprint, fingerprint]
    );
    assert_eq!(
        (t.exchanges[3].parent, t.exchanges[4].parent),
        (Some(1), Some(0))
    );
    // A third call of it: which request made two, no count says. Call 3
    // fits both requests alike; call 4 ran while request 0 alone waited.
    t.exchanges.push(exchange(5, 3, (420, 430), (440, 450)));
    attribute(&mut t, &[8080]);
    assert_eq!(
        rules(&t),
        vec![
            Some(Rule::TraceContext),
            None,
            Some(Rule::SoleCandidate),
            None
        ]
    );
    t.exchanges.pop();
    // A span's parent, as an OTLP source gave it, is kept and named.
    t.exchanges[3].span_parent = Some(1);
    attribute(&mut t, &[8080]);
    assert_eq!(rules(&t)[1], Some(Rule::SpanParent));
    assert_eq!(t.exchanges[3].attribution, Some(Attribution::Span));
    assert_eq!(t.exchanges[3].parent, Some(1));
    // Threads: the call on the thread that read request 1.
    let mut t = overlapping();
    let thread = whyslow_model::Thread { pid: 1, tid: 2 };
    t.exchanges[1].thread = Some(thread);
    t.exchanges[3].thread = Some(thread);
    attribute(&mut t, &[8080]);
    assert_eq!(rules(&t), vec![None, Some(Rule::Thread)]);
    assert_eq!(t.exchanges[3].parent, Some(1));
}

#[test]
fn deduction_and_timing_name_their_rules() {
    // Timing: a call that fills request 0's window and brackets it.
    let mut t = servers(&[8080, 8080, 5432]).with(vec![
        request_0(1000),
        exchange(1, 1, (50, 60), (3000, 3010)),
        exchange(2, 2, (60, 70), (980, 990)),
    ]);
    attribute(&mut t, &[8080]);
    assert_eq!(rules(&t), vec![Some(Rule::Bracket)]);
    // Transactions placed whole, jointly.
    let mut t = two_transactions();
    attribute(&mut t, &[8080]);
    assert_eq!(rules(&t), vec![Some(Rule::Transaction); 5]);
    // A trace the service started, placed whole.
    let mut t = overlapping();
    t.exchanges.extend([
        traced(exchange(4, 2, (20, 30), (60, 70)), 3),
        traced(exchange(5, 3, (950, 960), (980, 990)), 3),
    ]);
    t.exchanges.drain(2..4);
    attribute(&mut t, &[8080]);
    assert_eq!(rules(&t), vec![Some(Rule::TraceGroup); 2]);
}

#[test]
fn near_a_forced_cut_only_exact_evidence_gives_a_call() {
    // Request 0 waits 0..1000 and is this window's only one; the window
    // before ended with a request answered at 500, so the call at 300 may
    // be that one's, and the call at 800 is request 0's alone.
    let t = || {
        servers(&[8080, 5432]).with(vec![
            request_0(1000),
            exchange(1, 1, (300, 310), (350, 360)),
            exchange(2, 1, (800, 810), (850, 860)),
        ])
    };
    let edges = CutEdges {
        open_from: None,
        carried_until: Some(500),
    };
    let mut plain = t();
    attribute(&mut plain, &[8080]);
    assert_eq!(rules(&plain), vec![Some(Rule::SoleCandidate); 2]);
    let mut cut = t();
    attribute_within(&mut cut, &[8080], edges);
    let amb = (None, Some(Attribution::Ambiguous));
    assert_eq!(
        levels(&cut),
        vec![amb, (Some(0), Some(Attribution::Inferred))]
    );
    // Requests still open at the window's end began at 700: the call at
    // 800 may be theirs too.
    let edges = CutEdges {
        open_from: Some(700),
        carried_until: None,
    };
    let mut cut = t();
    attribute_within(&mut cut, &[8080], edges);
    assert_eq!(
        levels(&cut),
        vec![(Some(0), Some(Attribution::Inferred)), amb]
    );
    // Its trace id gives it all the same.
    let mut cut = t();
    cut.exchanges[0] = traced(cut.exchanges[0].clone(), 4);
    cut.exchanges[2] = traced(cut.exchanges[2].clone(), 4);
    attribute_within(&mut cut, &[8080], edges);
    assert_eq!(rules(&cut)[1], Some(Rule::TraceContext));
}

#[test]
fn a_request_whose_answer_the_capture_lost_waited_until_the_next_one_on_its_connection() {
    // Request 0's response was lost (a capture gap); request 2 on the same
    // connection began at 1200, so 0 was answered before then. The call at
    // 1500..1600 is request 2's alone, not one request 0 may have made.
    let mut t = servers(&[8080, 5432]).with(vec![
        request_0(1000),
        exchange(1, 1, (300, 310), (350, 360)),
        exchange(2, 0, (1200, 1210), (2000, 2010)),
        exchange(3, 1, (1500, 1510), (1590, 1600)),
    ]);
    t.exchanges[0].response_first_at_us = None;
    t.exchanges[0].response_last_at_us = None;
    attribute(&mut t, &[8080]);
    let inf = Some(Attribution::Inferred);
    assert_eq!(levels(&t), vec![(Some(0), inf), (Some(2), inf)]);
}
