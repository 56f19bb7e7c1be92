//! A call carrying the trace id one inbound request carried is that
//! request's, exactly. A trace id several requests carried (a client that
//! reuses one) gives no call: such calls are ambiguous, and no weaker rule
//! may guess them.

use crate::attribution::table::{Decision, Table};
use foldhash::{HashMap, HashMapExt};
use whyslow_model::{Attribution, Exchange, ExchangeRole, Rule, TraceId};

/// Inbound trace id → the one request that carried it (None: several did).
fn inbound_traces(exchanges: &[Exchange]) -> HashMap<TraceId, Option<u32>> {
    let mut out: HashMap<TraceId, Option<u32>> = HashMap::new();
    for e in exchanges.iter().filter(|e| e.role == ExchangeRole::Inbound) {
        if let Some(t) = e.trace {
            out.entry(t)
                .and_modify(|id| *id = None)
                .or_insert(Some(e.id));
        }
    }
    out
}

/// How many trace ids more than one inbound request carried.
pub fn repeated(exchanges: &[Exchange]) -> usize {
    inbound_traces(exchanges)
        .values()
        .filter(|id| id.is_none())
        .count()
}

pub fn place(exchanges: &[Exchange], table: &mut Table) {
    let inbound = inbound_traces(exchanges);
    if inbound.is_empty() {
        return;
    }
    for (i, e) in exchanges.iter().enumerate() {
        if e.role != ExchangeRole::Outbound {
            continue;
        }
        let d = match e.trace.and_then(|t| inbound.get(&t)) {
            Some(&Some(id)) => Decision::Given(id, Attribution::TraceContext, Rule::TraceContext),
            Some(None) => Decision::Ambiguous { kind_of: None },
            None => continue,
        };
        table.decide(i, d);
    }
}
