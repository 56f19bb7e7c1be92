//! A run of calls on a connection a request checked out of a pool (`runs`)
//! is that request's, and a request holds one connection to a server at a
//! time: a server's runs are placed by deduction. One deduction cannot
//! place is ambiguous.

use crate::attribution::deduction;
use crate::attribution::scene::Scene;
use crate::attribution::table::Table;
use crate::attribution::units::Holder;
use whyslow_model::Rule;

pub fn place(s: &Scene, table: &mut Table) {
    let run_to = |h| match h {
        Holder::Run(server) => Some(server),
        _ => None,
    };
    deduction::place_per_server(s, table, Rule::Checkout, run_to);
}
