//! What the unit rules read: the timeline's exchanges and connections, the
//! units of calls left after the call rules, and each inbound request's
//! kind.

use super::table::Decision;
use super::units::Unit;
use foldhash::{HashMap, HashSet, HashSetExt};
use std::cell::OnceCell;
use whyslow_model::{Connection, Exchange, ExchangeRole, Timeline};

/// Inbound request → (its server port, its request line).
pub type Kinds<'t> = HashMap<u32, (u16, &'t str)>;

pub struct Scene<'t> {
    pub exchanges: &'t [Exchange],
    pub connections: &'t [Connection],
    pub units: Vec<Unit>,
    /// Connections with a call made while no request waited, between the
    /// service's requests (`unbidden`).
    pub unbidden: HashSet<u32>,
    port: &'t HashMap<u32, u16>,
    /// Built only when a rule asks: most captures never compare kinds.
    kinds: OnceCell<Kinds<'t>>,
}

impl<'t> Scene<'t> {
    /// Sets the units, and the connections where a call was made while no
    /// request waited, after the service's first request arrived and before
    /// its last was answered: a writer's fire-and-forget stashes, queued and
    /// sent after the request that asked for them answered. There one
    /// request in flight says nothing of whose a call is (a fixed cache
    /// app's two stashes were given to the capture's last request, and read
    /// as a duplicate call it never made); a pool's set-up statements before
    /// the first request do not count.
    pub fn set_units(&mut self, units: Vec<Unit>) {
        let inbound = self
            .exchanges
            .iter()
            .filter(|e| e.role == ExchangeRole::Inbound);
        let (mut first, mut last) = (u64::MAX, 0);
        for e in inbound {
            first = first.min(e.request_first_at_us);
            last = last.max(e.response_first_at_us.unwrap_or(0));
        }
        self.unbidden.clear();
        for u in units.iter().filter(|u| u.cands.is_empty() && u.complete) {
            if u.start > first && u.end < last {
                let conn = u.calls.first().map(|&c| self.exchanges[c].connection);
                self.unbidden.extend(conn);
            }
        }
        self.units = units;
    }

    /// Whether `u`'s one candidate may be taken for its request: not on a
    /// connection that also carries calls no request waited for.
    pub fn alone_tells(&self, u: &Unit) -> bool {
        u.calls
            .first()
            .is_none_or(|&c| !self.unbidden.contains(&self.exchanges[c].connection))
    }

    pub fn new(t: &'t Timeline, port: &'t HashMap<u32, u16>) -> Self {
        Scene {
            exchanges: &t.exchanges,
            connections: &t.connections,
            units: Vec::new(),
            unbidden: HashSet::new(),
            port,
            kinds: OnceCell::new(),
        }
    }

    /// Each inbound request's server port and request kind.
    pub fn kinds(&self) -> &Kinds<'t> {
        self.kinds.get_or_init(|| {
            self.exchanges
                .iter()
                .filter(|e| e.role == ExchangeRole::Inbound)
                .map(|e| {
                    let p = self.port.get(&e.connection).copied().unwrap_or(0);
                    (e.id, (p, e.request.as_str()))
                })
                .collect()
        })
    }

    /// Whether two inbound requests are of one kind.
    pub fn same_kind(&self, a: u32, b: u32) -> bool {
        let kinds = self.kinds();
        kinds.get(&a).is_some_and(|k| Some(k) == kinds.get(&b))
    }

    /// `u` declared ambiguous, counted for its candidates' kind when they
    /// share one.
    pub fn ambiguous(&self, u: &Unit) -> Decision {
        Decision::Ambiguous {
            kind_of: u.kind_of(|a, b| self.same_kind(a, b)),
        }
    }
}
