//! The calls of one trace no inbound request carried (the service started
//! it) are one request's, and a request has one trace: trace groups are
//! placed by deduction, never on a request whose own trace already gave it
//! calls. A group deduction cannot place is ambiguous.

use crate::attribution::deduction::{self, held_whole};
use crate::attribution::scene::Scene;
use crate::attribution::table::Table;
use crate::attribution::units::Holder;
use whyslow_model::Rule;

pub fn place(s: &Scene, table: &mut Table) {
    let held = table.requests_given_by(Rule::TraceContext);
    let left = deduction::place_each(s, table, Rule::TraceGroup, |u| {
        let cands = u.cands.iter().map(|w| w.id).filter(|id| !held.contains(id));
        (u.holder == Holder::Trace && held_whole(u)).then(|| ((), cands.collect()))
    });
    for u in left {
        table.decide_unit(u, s.ambiguous(u));
    }
}
