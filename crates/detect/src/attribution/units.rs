//! What is attributed as one piece: the calls of one trace the service
//! started, the statements of one PostgreSQL transaction (a connection held
//! by one request's session from BEGIN to COMMIT), a run of calls on a
//! held connection (`runs`), or a single call.

use super::servers::NO_SERVER;
use super::table::Table;
use super::windows::{Window, Windows};
use foldhash::{HashMap, HashMapExt, HashSet, HashSetExt};
use std::net::SocketAddr;
use whyslow_model::{Attribution, Exchange, ExchangeRole, TraceId, TxState};

/// What makes a unit one request's, and so what a request can hold only
/// one of at a time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Holder {
    /// Calls sharing a trace id: one request's, and a request has one trace.
    Trace,
    /// A transaction on a connection to this server: a request's session
    /// holds one connection of a pool at a time.
    Transaction(SocketAddr),
    /// The calls one request made back to back on a connection to this
    /// server that it held for its work: it holds one at a time.
    Run(SocketAddr),
    /// A single call of a fingerprint (hash) every request of one kind (that of
    /// this inbound request) made once (`fingerprints`).
    Fingerprint(u64, u32),
    /// A single call: a request may make several at once (fan-out).
    Call,
}

/// Calls attributed together.
#[derive(Debug, Clone)]
pub struct Unit {
    /// Indices into the timeline's exchanges.
    pub calls: Vec<usize>,
    pub start: u64,
    pub end: u64,
    pub holder: Holder,
    /// On a connection that carries several calls at once (multiplexed or
    /// pipelined): calls of requests in flight together interleave there,
    /// and timing alone cannot say whose a call is.
    pub interleaved: bool,
    /// The requests whose windows enclose the unit, closest bracket first.
    pub cands: Vec<Window>,
    /// Whether `cands` holds every such request (`Windows::enclosing`).
    pub complete: bool,
}

impl Unit {
    pub(super) fn new(holder: Holder) -> Self {
        Unit {
            calls: Vec::new(),
            start: u64::MAX,
            end: 0,
            holder,
            interleaved: false,
            cands: Vec::new(),
            complete: true,
        }
    }

    pub(super) fn add(&mut self, i: usize, e: &Exchange) {
        let (start, end) = call_span(e);
        self.calls.push(i);
        self.start = self.start.min(start);
        self.end = self.end.max(end);
    }

    pub fn len(&self) -> u64 {
        self.end.saturating_sub(self.start)
    }

    /// The level the unit is given at when not by its own id or thread: a
    /// trace group's calls share a trace the service started.
    pub fn level(&self) -> Attribution {
        match self.holder {
            Holder::Trace => Attribution::TraceGroup,
            _ => Attribution::Inferred,
        }
    }

    /// One of the candidates when every one is of its kind.
    pub fn kind_of(&self, same_kind: impl Fn(u32, u32) -> bool) -> Option<u32> {
        let first = self.cands.first()?.id;
        self.cands
            .iter()
            .all(|w| same_kind(first, w.id))
            .then_some(first)
    }
}

/// A call's span: first request byte → last response byte (last request
/// byte when unanswered).
pub fn call_span(e: &Exchange) -> (u64, u64) {
    (e.request_first_at_us, e.end_us())
}

/// The units of the outbound calls no rule decided alone: those of a trace
/// (no inbound request carried it) grouped by trace, PostgreSQL statements
/// by transaction, the rest alone. `server`: each connection's server.
pub fn build(
    exchanges: &[Exchange],
    table: &Table,
    server: &HashMap<u32, SocketAddr>,
) -> Vec<Unit> {
    let mut todo = Vec::new();
    let mut traced: HashMap<TraceId, Vec<usize>> = HashMap::new();
    let open = exchanges
        .iter()
        .enumerate()
        .filter(|(i, e)| e.role == ExchangeRole::Outbound && table.is_open(*i));
    for (i, e) in open {
        match e.trace {
            Some(t) => traced.entry(t).or_default().push(i),
            None => todo.push(i),
        }
    }
    let mut units: Vec<Unit> = Vec::with_capacity(todo.len());
    for calls in traced.values() {
        let mut u = Unit::new(Holder::Trace);
        for &i in calls {
            u.add(i, &exchanges[i]);
        }
        units.push(u);
    }
    // The statements of one simple query ("BEGIN; …; COMMIT", asyncpg's
    // reset of a connection taken back) go out in one message and share
    // its start: one caller's statements, not calls in flight together.
    let mut message: HashSet<(u32, u64)> = HashSet::new();
    let interleaved = interleaved(todo.iter().filter_map(|&i| {
        let e = &exchanges[i];
        let (start, end) = call_span(e);
        let again = e.protocol.is_sql() && !message.insert((e.connection, e.request_first_at_us));
        (!again).then_some((e.connection, start, end))
    }));
    // Per connection: the transaction being read, if any.
    let mut open: HashMap<u32, Unit> = HashMap::new();
    for &i in &todo {
        let e = &exchanges[i];
        debug_assert_eq!(e.role, ExchangeRole::Outbound);
        let in_tx = e.protocol.is_sql()
            && matches!(
                e.transaction,
                Some(TxState::InTransaction | TxState::Failed)
            );
        match open.get_mut(&e.connection) {
            Some(u) => {
                u.add(i, e);
                if !in_tx && e.transaction.is_some() {
                    units.extend(open.remove(&e.connection));
                }
            }
            None if in_tx => {
                let server = server.get(&e.connection).copied().unwrap_or(NO_SERVER);
                let mut u = Unit::new(Holder::Transaction(server));
                u.add(i, e);
                open.insert(e.connection, u);
            }
            None => {
                let mut u = Unit::new(Holder::Call);
                u.add(i, e);
                u.interleaved = interleaved.contains(&e.connection);
                units.push(u);
            }
        }
    }
    // Transactions the capture ended inside.
    units.extend(open.into_values());
    units.sort_unstable_by_key(|u| (u.start, u.end, u.calls.first().copied()));
    units
}

/// Fills each unit's candidates: the requests whose windows enclose it,
/// closest bracket first.
pub fn enclose(units: &mut [Unit], windows: &Windows) {
    for u in units {
        let mut cands = std::mem::take(&mut u.cands);
        u.complete = windows.enclosing(u.start, u.end, &mut cands);
        cands.sort_by_key(|w| (w.slack(u.start, u.end), w.id));
        u.cands = cands;
    }
}

/// Connections on which a call started before an earlier one ended
/// (multiplexed or pipelined), from calls as (connection, start, end) in
/// any order.
pub fn interleaved(calls: impl Iterator<Item = (u32, u64, u64)>) -> HashSet<u32> {
    let mut calls: Vec<(u32, u64, u64)> = calls.collect();
    calls.sort_unstable();
    // Sorted by start per connection, an overlap always shows between
    // neighbours: a call starting inside an earlier one starts inside the
    // one just before it too.
    calls
        .windows(2)
        .filter(|w| w[0].0 == w[1].0 && w[1].1 < w[0].2)
        .map(|w| w[0].0)
        .collect()
}
