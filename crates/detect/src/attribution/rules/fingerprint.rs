//! A call of a fingerprint (server, statement, parameters) the capture
//! holds exactly as many of as requests of one kind (`fingerprints`): each
//! request of that kind made one, requests of other kinds none, wherever
//! its connection's calls interleave. Placed by deduction among the
//! requests of that kind; what deduction leaves, timing may still give. A
//! request the capture lost is of no known kind, and so of any: it stays a
//! candidate.

use crate::attribution::deduction;
use crate::attribution::scene::Scene;
use crate::attribution::table::Table;
use crate::attribution::units::Holder;
use crate::attribution::windows::is_lost;
use whyslow_model::Rule;

pub fn place(s: &Scene, table: &mut Table) {
    deduction::place_each(s, table, Rule::Fingerprint, |u| match u.holder {
        Holder::Fingerprint(_, kind) if u.complete => {
            let cands = u.cands.iter().map(|w| w.id);
            Some((
                u.holder,
                cands
                    .filter(|&id| is_lost(id) || s.same_kind(id, kind))
                    .collect(),
            ))
        }
        _ => None,
    });
}
