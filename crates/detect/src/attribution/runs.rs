//! Runs: the calls one request made, back to back, on a connection it held
//! for its whole work (an ORM's session, a thread's own connection). Under a
//! saturated pool every connection is busy all the time, and a call's
//! timing alone does not say where one request's run ends and the next one's
//! begins: measured on the lab's orm-storm at 16 clients over 8
//! connections, the connection whose last call ended nearest before a
//! request's answer was that request's own for only half the requests.
//!
//! What does say it is the statement that opens each run. A request holds
//! the connection until its work is done and answers; only then does the
//! next request's first statement go out on that connection. So before
//! each run-opening statement an inbound answer falls in the gap since the
//! connection's previous call ended — and before a statement in the middle
//! of a run, only by chance (there: 152 of 152 run openers; 16 of 3200 at
//! most for any other statement). Statements that follow an answer nearly
//! every time open runs; the connection's calls from one opener to the next
//! are one unit, held by one request.

use super::servers::NO_SERVER;
use super::units::{Holder, Unit};
use foldhash::{HashMap, HashMapExt, HashSet, HashSetExt};
use std::net::SocketAddr;
use whyslow_model::{Exchange, Protocol};

/// Share of a statement's occurrences that must follow an inbound answer
/// for it to open runs: the measured openers followed one every time, other
/// statements at most one time in six. A statement that also runs inside
/// runs now and then splits them where taken for an opener (a request then
/// holds two runs to one server, and deduction leaves both to sole
/// candidates). Scaled by the share of requests whose answer the capture
/// holds (`Answers::captured`): an opener after an answer the capture lost
/// reads as a miss (orm-storm with 1 % of its packets removed: 147 of 150;
/// with 10 %: 85 of 103, 132 answers held of 145 requests seen and 15 hidden
/// by gaps).
pub const RUN_OPENER_SHARE: f64 = 0.9;
/// Below this share of answers held, no statement is taken to open runs: a
/// capture that lost most answers (or saw one direction only) says too
/// little of where one request's work ends, and a false opener splits a
/// request's run in two that deduction could give to two requests.
pub const MIN_ANSWERS_HELD: f64 = 0.5;
/// Fewest occurrences (after another call on the same connection) a
/// statement needs before its share is trusted.
pub const MIN_RUN_OPENERS: usize = 8;

/// Where a connection's stream toward its server has holes the capture
/// never held: a statement that opened a run may be in one.
#[derive(Debug, Default)]
pub struct Holes {
    /// Per connection, when each hole was noticed, sorted.
    pub at: HashMap<u32, Vec<u64>>,
    /// Per connection with more holes than it keeps, from when on any
    /// statement may be missing.
    pub unkept_from: HashMap<u32, u64>,
}

impl Holes {
    /// Whether a hole on `conn` lies between calls that started at `from`
    /// and `to`: the next call's bytes revealed it.
    fn between(&self, conn: u32, from: u64, to: u64) -> bool {
        let noticed = self.at.get(&conn).is_some_and(|at| {
            let i = at.partition_point(|&t| t <= from);
            at.get(i).is_some_and(|&t| t <= to)
        });
        noticed || self.unkept_from.get(&conn).is_some_and(|&t| t <= to)
    }
}

/// Joins single calls into runs where some statement opens runs on their
/// server, and takes a server's transactions for runs where they open
/// like runs. `units`: in start order; `answers`: the inbound answers;
/// `port`: each connection's server port. A run ends at a hole toward its
/// server (the next run's opener may be in it): the calls after it are
/// left single until the next opener, since a request holds one run per
/// server and the part after the hole may be its own or the next one's.
pub fn join(
    mut units: Vec<Unit>,
    exchanges: &[Exchange],
    answers: &Answers,
    holes: &Holes,
    server: &HashMap<u32, SocketAddr>,
) -> Vec<Unit> {
    transactions_as_runs(&mut units, exchanges, answers);
    let per_conn = joinable(&units, exchanges);
    let openers = openers(&units, &per_conn, exchanges, answers, server);
    if openers.is_empty() {
        return units;
    }
    let mut joined: HashSet<usize> = HashSet::new();
    let mut runs = Vec::new();
    for (conn, list) in &per_conn {
        let server = server.get(conn).copied().unwrap_or(NO_SERVER);
        let mut run: Option<Unit> = None;
        let mut last_start = 0;
        for &n in list {
            let call = units[n].calls[0];
            let start = units[n].start;
            if holes.between(*conn, last_start, start) {
                runs.extend(run.take());
            }
            last_start = start;
            let opens = openers.contains(&(server, exchanges[call].request.as_str()));
            if opens {
                runs.extend(run.take());
                run = Some(Unit::new(Holder::Run(server)));
            }
            if let Some(r) = run.as_mut() {
                r.add(call, &exchanges[call]);
                joined.insert(n);
            }
        }
        runs.extend(run);
    }
    let mut out: Vec<Unit> = units
        .into_iter()
        .enumerate()
        .filter(|(n, _)| !joined.contains(n))
        .map(|(_, u)| u)
        .chain(runs)
        .collect();
    out.sort_unstable_by_key(|u| (u.start, u.end, u.calls.first().copied()));
    out
}

/// A server's transactions are runs when nearly every one follows an
/// inbound answer on its connection, as run openers do: then each is the
/// whole of one request's work on a connection it held (a session per
/// request, SQLAlchemy's), and a request given one holds no other there.
/// Where a request runs several transactions, the second follows no
/// answer and they stay transactions, which say nothing of one another.
fn transactions_as_runs(units: &mut [Unit], exchanges: &[Exchange], answers: &Answers) {
    // Per connection: (start, end, unit) in start order, as `units` are.
    let mut per_conn: HashMap<u32, Vec<(u64, u64, usize)>> = HashMap::new();
    for (n, u) in units.iter().enumerate() {
        if let Some(&first) = u.calls.first() {
            let conn = exchanges[first].connection;
            per_conn.entry(conn).or_default().push((u.start, u.end, n));
        }
    }
    // Server → (after an answer, occurrences after another unit).
    let mut seen: HashMap<SocketAddr, (usize, usize)> = HashMap::new();
    for list in per_conn.values() {
        for pair in list.windows(2) {
            if let Holder::Transaction(server) = units[pair[1].2].holder {
                let s = seen.entry(server).or_default();
                s.0 += usize::from(answers.between(pair[0].1, pair[1].0));
                s.1 += 1;
            }
        }
    }
    for u in units.iter_mut() {
        if let Holder::Transaction(server) = u.holder {
            let (hits, n) = seen.get(&server).copied().unwrap_or_default();
            if answers.opens_runs(hits, n) {
                u.holder = Holder::Run(server);
            }
        }
    }
}

/// Per connection, its units in start order, for connections whose every
/// unit is a single call that interleaves with none (a transaction already
/// is a unit; a multiplexed connection is held by no one).
fn joinable(units: &[Unit], exchanges: &[Exchange]) -> HashMap<u32, Vec<usize>> {
    let mut per_conn: HashMap<u32, Vec<usize>> = HashMap::new();
    let mut excluded = HashSet::new();
    for (n, u) in units.iter().enumerate() {
        let Some(&first) = u.calls.first() else {
            continue;
        };
        let conn = exchanges[first].connection;
        // A DNS flow is a socket's queries, not a connection a request
        // holds: a stub resolver opens one per lookup or per name, and
        // the kernel hands a later one the same port.
        let held = exchanges[first].protocol != Protocol::Dns;
        if held && u.holder == Holder::Call && !u.interleaved && u.calls.len() == 1 {
            per_conn.entry(conn).or_default().push(n);
        } else {
            excluded.insert(conn);
        }
    }
    per_conn.retain(|c, _| !excluded.contains(c));
    per_conn
}

/// (server, statement) pairs that open runs.
fn openers<'e>(
    units: &[Unit],
    per_conn: &HashMap<u32, Vec<usize>>,
    exchanges: &'e [Exchange],
    answers: &Answers,
    server_of: &HashMap<u32, SocketAddr>,
) -> HashSet<(SocketAddr, &'e str)> {
    // (server, statement) → (after an answer, occurrences).
    let mut seen: HashMap<(SocketAddr, &str), (usize, usize)> = HashMap::new();
    for (conn, list) in per_conn {
        let server = server_of.get(conn).copied().unwrap_or(NO_SERVER);
        for pair in list.windows(2) {
            let (before, after) = (&units[pair[0]], &units[pair[1]]);
            let answered = answers.between(before.end, after.start);
            let key = (server, exchanges[after.calls[0]].request.as_str());
            let s = seen.entry(key).or_default();
            s.0 += usize::from(answered);
            s.1 += 1;
        }
    }
    seen.into_iter()
        .filter(|&(_, (hits, n))| answers.opens_runs(hits, n))
        .map(|(key, _)| key)
        .collect()
}

/// When the service answered its requests, as far as the capture holds,
/// and when it took them up.
#[derive(Debug, Default)]
pub struct Answers {
    /// First response bytes, sorted.
    pub at: Vec<u64>,
    /// When the service read a request, where an eBPF source saw the read,
    /// sorted. A pool that lends the connection a request gave back to the
    /// next checkout at once (node-postgres's pool takes its most recently
    /// released connection) puts the next request's first statement on it
    /// before the first request answers; the next request was read in the
    /// gap, though: an event loop reads it, then sends its first statement
    /// in the same turn. The request's arrival on the wire says less: a busy
    /// loop reads it milliseconds later, after other calls.
    pub taken_up: Vec<u64>,
    /// Share of the inbound requests seen whose answer the capture holds.
    pub captured: f64,
}

impl Answers {
    /// Whether what followed an answer `hits` times of `n` opens runs.
    fn opens_runs(&self, hits: usize, n: usize) -> bool {
        self.captured >= MIN_ANSWERS_HELD
            && n >= MIN_RUN_OPENERS
            && hits as f64 >= RUN_OPENER_SHARE * self.captured * n as f64
    }

    /// Whether some request was answered, or taken up, in [from, to]: where
    /// one request's work ends and the next one's may begin.
    fn between(&self, from: u64, to: u64) -> bool {
        let within = |times: &[u64]| {
            let i = times.partition_point(|&a| a < from);
            times.get(i).is_some_and(|&a| a <= to)
        };
        within(&self.at) || within(&self.taken_up)
    }
}

#[cfg(test)]
mod tests {
    use super::super::attribute;
    use crate::testkit::{all_given_by, conn, exchange, given, lose};
    use foldhash::HashSet;
    use whyslow_model::{Attribution, CloseKind, Direction, Exchange, Protocol, Timeline, TxState};

    fn statement(id: u32, connection: u32, start: u64, sql: &str) -> Exchange {
        let mut e = exchange(
            id,
            connection,
            (start, start + 10),
            (start + 900, start + 1000),
        );
        e.protocol = Protocol::Postgres;
        e.request = sql.into();
        e
    }

    /// `n` requests that all arrived at once and queued for one held
    /// connection: request k's run of a head statement and three rows runs
    /// from k × 10 ms, and it answers `answer_after` µs after its run ends.
    fn queued(n: u32, head: &str, answer_after: u64) -> Timeline {
        let mut t = Timeline {
            connections: (0..n).map(|k| conn(k, 8080)).collect(),
            exchanges: Vec::new(),
        };
        t.connections.push(conn(n, 5432));
        for k in 0..n {
            let at = u64::from(k) * 10_000;
            let answer = at + 4_000 + answer_after;
            t.exchanges
                .push(exchange(k, k, (0, 10), (answer, answer + 10)));
            t.exchanges.push(statement(100 + 4 * k, n, at, head));
            for row in 1..4 {
                let start = at + u64::from(row) * 1_000;
                t.exchanges
                    .push(statement(100 + 4 * k + row, n, start, "SELECT row"));
            }
        }
        t
    }

    #[test]
    fn a_primary_and_a_replica_on_one_port_are_two_servers() {
        // Each request also ran the same statements on a replica at
        // 127.0.0.2:5432, over a connection it held beside the primary's: a
        // request holds one run per server, two here, each its own.
        let mut t = queued(10, "SELECT head", 100);
        t.connections.push(conn(11, 5432));
        t.connections[11].server = "127.0.0.2:5432".parse().unwrap();
        for k in 0..10 {
            let at = u64::from(k) * 10_000 + 50;
            t.exchanges
                .push(statement(200 + 4 * k, 11, at, "SELECT head"));
            for row in 1..4 {
                let start = at + u64::from(row) * 1_000;
                t.exchanges
                    .push(statement(200 + 4 * k + row, 11, start, "SELECT row"));
            }
        }
        t.sort();
        attribute(&mut t, &[8080]);
        all_given_by(&t, whyslow_model::Rule::Checkout, |id| (id % 100) / 4);
    }

    #[test]
    fn a_held_connection_is_cut_into_runs_at_the_statement_that_opens_them() {
        let mut t = queued(10, "SELECT head", 100);
        attribute(&mut t, &[8080]);
        all_given_by(&t, whyslow_model::Rule::Checkout, |id| (id - 100) / 4);
    }

    #[test]
    fn an_opener_after_an_answer_the_capture_lost_still_opens_runs() {
        // Two of ten answers lost: 7 of the 9 runs after another follow an
        // answer the capture holds (0.78, under RUN_OPENER_SHARE), and 8 of
        // 10 answers are held: the share is judged against 0.8 of it. (The
        // connections of the two closed after their lost answers.)
        let mut t = queued(10, "SELECT head", 100);
        for e in t.exchanges.iter_mut().filter(|e| [2, 6].contains(&e.id)) {
            let c = &mut t.connections[e.connection as usize];
            c.closed_by = Some((Direction::ToServer, CloseKind::Fin));
            c.last_at_us = e.response_last_at_us.unwrap() + 10;
            e.response_first_at_us = None;
            e.response_last_at_us = None;
        }
        attribute(&mut t, &[8080]);
        let run_of_3 = t.exchanges.iter().filter(|e| (112..116).contains(&e.id));
        assert!(run_of_3.into_iter().all(|e| e.parent == Some(3)));
    }

    #[test]
    fn an_opener_after_a_request_the_capture_lost_whole_still_opens_runs() {
        // The last two requests lost with their answers (a gap toward the
        // service on each one's connection, opened at 60 ms): 8 of 9 runs
        // after another follow an answer held, and 8 of 10 requests'
        // answers are held.
        let mut t = queued(10, "SELECT head", 100);
        t.exchanges.retain(|e| ![8, 9].contains(&e.id));
        for c in [8, 9] {
            t.connections[c].first_at_us = 60_000;
            lose(&mut t.connections[c], Direction::ToServer, 60_000, 89);
        }
        // Run 3 is one unit: whole, or left whole among the requests that
        // were waiting (the runs a lost request may hold are not deduced).
        let held = attribute(&mut t, &[8080]).held_runs;
        let run_of_3: Vec<&Exchange> = t
            .exchanges
            .iter()
            .filter(|e| (112..116).contains(&e.id))
            .collect();
        let unit = |e: &Exchange| held.ambiguous.get(&e.id).copied();
        let whole = run_of_3.iter().all(|e| e.parent == Some(3))
            || (unit(run_of_3[0]).is_some()
                && run_of_3.iter().all(|e| unit(e) == unit(run_of_3[0])));
        assert!(
            whole,
            "{:?}",
            run_of_3.iter().map(|e| e.parent).collect::<Vec<_>>()
        );
    }

    /// `queued`, each request's statements in transactions of `each`.
    fn in_transactions(n: u32, each: u32) -> Timeline {
        let mut t = queued(n, "BEGIN", 100);
        for e in t.exchanges.iter_mut().filter(|e| e.id >= 100) {
            let last = (e.id - 100) % 4 % each == each - 1;
            e.transaction = Some(if last {
                TxState::Idle
            } else {
                TxState::InTransaction
            });
        }
        t
    }

    #[test]
    fn transactions_that_follow_an_answer_are_held_runs() {
        let mut t = in_transactions(10, 4);
        let held = attribute(&mut t, &[8080]).held_runs;
        assert_eq!(held.given.len(), 10, "each request's one transaction");
        assert!(given(&t).iter().all(|g| g.1 == Some((g.0 - 100) / 4)));
        // Two transactions a request: the second follows no answer, and a
        // request given one may have the other still open.
        let mut t = in_transactions(10, 2);
        let held = attribute(&mut t, &[8080]).held_runs;
        assert!(held.given.is_empty(), "{:?}", held.given);
    }

    #[test]
    fn without_an_opener_the_same_calls_are_ambiguous() {
        // Every statement the same: one follows an answer a quarter of the
        // time, and no run is cut; each call fits every waiting request.
        let mut t = queued(10, "SELECT row", 100);
        attribute(&mut t, &[8080]);
        let amb = given(&t)
            .iter()
            .filter(|g| g.2 == Some(Attribution::Ambiguous))
            .count();
        assert!(amb > 30, "{amb} of 40 ambiguous");
        assert!(given(&t)
            .iter()
            .all(|g| g.1.is_none_or(|p| p == (g.0 - 100) / 4)));
    }

    #[test]
    fn an_answer_after_the_next_run_began_cuts_nothing() {
        // Every answer comes 7 ms after its run ended, when the next
        // request's run has begun (a pool given back before the response
        // was written): no statement follows an answer, no run is cut, and
        // nothing is given wrongly.
        let mut t = queued(10, "SELECT head", 7_000);
        attribute(&mut t, &[8080]);
        let given = given(&t);
        assert!(given
            .iter()
            .all(|g| g.1.is_none_or(|p| p == (g.0 - 100) / 4)));
        assert!(given.iter().any(|g| g.2 == Some(Attribution::Ambiguous)));
    }

    #[test]
    fn a_request_taken_up_before_the_run_opens_it_though_the_last_answer_comes_later() {
        // As above, but an eBPF source saw the service read each request
        // 100 µs before its run began (an event loop taking the next one up
        // on the connection the last gave back): the head opens runs, one
        // per request, and nothing is given wrongly.
        let mut t = queued(10, "SELECT head", 7_000);
        let ambiguous_before = given(&attributed(&t))
            .iter()
            .filter(|g| g.2 == Some(Attribution::Ambiguous))
            .count();
        for e in t.exchanges.iter_mut().filter(|e| e.id < 10) {
            e.read_at_us = Some((u64::from(e.id) * 10_000).saturating_sub(100));
        }
        let held = attribute(&mut t, &[8080]).held_runs;
        let runs: HashSet<u32> = held.ambiguous.values().map(|r| r.1).collect();
        let given = given(&t);
        assert!(given
            .iter()
            .all(|g| g.1.is_none_or(|p| p == (g.0 - 100) / 4)));
        let ambiguous = given
            .iter()
            .filter(|g| g.2 == Some(Attribution::Ambiguous))
            .count();
        assert!(
            runs.len() + held.given.len() >= 9 && ambiguous <= ambiguous_before,
            "{runs:?} {:?}: {ambiguous} ambiguous, {ambiguous_before} before",
            held.given
        );
    }

    fn attributed(t: &Timeline) -> Timeline {
        let mut t = t.clone();
        attribute(&mut t, &[8080]);
        t
    }
}
