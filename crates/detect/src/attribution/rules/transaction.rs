//! The statements of one PostgreSQL transaction are one request's, and a
//! request's session holds one connection of a pool at a time: a server's
//! transactions are placed by deduction. One deduction cannot place is
//! ambiguous.

use crate::attribution::deduction;
use crate::attribution::scene::Scene;
use crate::attribution::table::Table;
use crate::attribution::units::Holder;
use whyslow_model::Rule;

pub fn place(s: &Scene, table: &mut Table) {
    deduction::place_per_server(s, table, Rule::Transaction, |h| match h {
        Holder::Transaction(server) => Some(server),
        _ => None,
    });
}
