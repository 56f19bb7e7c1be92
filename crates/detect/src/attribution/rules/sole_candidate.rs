//! A unit only one request was waiting through is that request's, unless
//! its connection carries calls no request waited for (`Scene::set_units`).

use crate::attribution::scene::Scene;
use crate::attribution::table::{Decision, Table};
use whyslow_model::Rule;

pub fn place(s: &Scene, table: &mut Table) {
    for u in &s.units {
        if let ([only], true, true) = (u.cands.as_slice(), u.complete, s.alone_tells(u)) {
            let d = Decision::Given(only.id, u.level(), Rule::SoleCandidate);
            if table.unit_open(u) {
                table.decide_unit(u, d);
            }
        }
    }
}
