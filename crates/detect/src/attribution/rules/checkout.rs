//! A run of calls on a connection a request checked out of a pool (`runs`)
//! is that request's, and a request holds one connection to a server at a
//! time: a server's runs are placed by deduction. One deduction cannot
//! place is ambiguous.

use crate::attribution::deduction::{self, held_whole};
use crate::attribution::scene::Scene;
use crate::attribution::table::Table;
use crate::attribution::units::Holder;
use whyslow_model::Rule;

pub fn place(s: &Scene, table: &mut Table) {
    let left = deduction::place_each(&s.units, table, Rule::Checkout, |u| match u.holder {
        Holder::Run(server) if held_whole(u) => Some((server, deduction::ids(u))),
        _ => None,
    });
    for u in left {
        table.decide_unit(u, s.ambiguous(u));
    }
}
