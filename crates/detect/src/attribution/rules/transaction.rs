//! The statements of one PostgreSQL transaction are one request's, and a
//! request's session holds one connection of a pool at a time: a server's
//! transactions are placed by deduction. One deduction cannot place is
//! ambiguous.

use crate::attribution::deduction::{self, held_whole};
use crate::attribution::scene::Scene;
use crate::attribution::table::Table;
use crate::attribution::units::Holder;
use whyslow_model::Rule;

pub fn place(s: &Scene, table: &mut Table) {
    let left = deduction::place_each(&s.units, table, Rule::Transaction, |u| match u.holder {
        Holder::Transaction(server) if held_whole(u) => Some((server, deduction::ids(u))),
        _ => None,
    });
    for u in left {
        table.decide_unit(u, s.ambiguous(u));
    }
}
