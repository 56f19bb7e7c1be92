//! What the unit rules read: the timeline's exchanges and connections, the
//! units of calls left after the call rules, and each inbound request's
//! kind.

use super::table::Decision;
use super::units::Unit;
use foldhash::HashMap;
use std::cell::OnceCell;
use whyslow_model::{Connection, Exchange, ExchangeRole, Timeline};

/// Inbound request → (its server port, its request line).
pub type Kinds<'t> = HashMap<u32, (u16, &'t str)>;

pub struct Scene<'t> {
    pub exchanges: &'t [Exchange],
    pub connections: &'t [Connection],
    pub units: Vec<Unit>,
    port: &'t HashMap<u32, u16>,
    /// Built only when a rule asks: most captures never compare kinds.
    kinds: OnceCell<Kinds<'t>>,
}

impl<'t> Scene<'t> {
    pub fn new(t: &'t Timeline, port: &'t HashMap<u32, u16>) -> Self {
        Scene {
            exchanges: &t.exchanges,
            connections: &t.connections,
            units: Vec::new(),
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
