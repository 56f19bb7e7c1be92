//! A unit only one request was waiting through is that request's.

use crate::attribution::scene::Scene;
use crate::attribution::table::{Decision, Table};
use whyslow_model::Rule;

pub fn place(s: &Scene, table: &mut Table) {
    for u in &s.units {
        if let ([only], true) = (u.cands.as_slice(), u.complete) {
            let d = Decision::Given(only.id, u.level(), Rule::SoleCandidate);
            if table.unit_open(u) {
                table.decide_unit(u, d);
            }
        }
    }
}
