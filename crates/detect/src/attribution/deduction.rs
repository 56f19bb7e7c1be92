//! Placing by deduction the units a request holds at most one of (a trace,
//! a transaction or a run to one server, a call of one fingerprint): a unit
//! is given where every way of placing them all puts it with the same
//! request (`matching::forced`).

use super::matching;
use super::scene::Scene;
use super::table::{Decision, Table};
use super::units::{Holder, Unit};
use super::windows::is_lost;
use foldhash::{HashMap, HashMapExt, HashSet};
use std::hash::Hash;
use std::net::SocketAddr;
use whyslow_model::Rule;

/// Groups the open units `pick` keeps (by its key, with the candidates it
/// leaves them) and places each group by deduction under `rule`. Returns
/// the units left open. A unit a request the capture lost may hold is left
/// open: one hole may hide several requests, and deduction, which lets each
/// candidate hold one unit, cannot count them.
pub fn place_each<'u, K: Eq + Hash>(
    s: &'u Scene,
    table: &mut Table,
    rule: Rule,
    pick: impl Fn(&Unit) -> Option<(K, Vec<u32>)>,
) -> Vec<&'u Unit> {
    let mut groups: HashMap<K, (Vec<&Unit>, Vec<Vec<u32>>)> = HashMap::new();
    let mut left = Vec::new();
    for u in s.units.iter().filter(|u| table.unit_open(u)) {
        if let Some((key, cands)) = pick(u) {
            if cands.iter().any(|&id| is_lost(id)) {
                left.push(u);
                continue;
            }
            let g = groups.entry(key).or_default();
            g.0.push(u);
            g.1.push(cands);
        }
    }
    for (members, cands) in groups.values() {
        left.extend(place(s, members, cands, rule, table));
    }
    left
}

/// Places one group. Where a request holds two units only it can hold (a
/// client that checks a connection out per call, a service that runs two
/// transactions), the rule is wrong for this group: a unit is then given
/// only when one request alone encloses it. Returns the units left open.
fn place<'u>(
    s: &Scene,
    members: &[&'u Unit],
    cands: &[Vec<u32>],
    rule: Rule,
    table: &mut Table,
) -> Vec<&'u Unit> {
    let mut sole = HashSet::default();
    let one_each = cands
        .iter()
        .filter(|c| c.len() == 1)
        .all(|c| sole.insert(c[0]));
    let placed = if one_each {
        matching::forced(cands)
    } else {
        let alone = |(u, c): (&&Unit, &Vec<u32>)| (c.len() == 1 && s.alone_tells(u)).then(|| c[0]);
        members.iter().zip(cands).map(alone).collect()
    };
    let mut left = Vec::new();
    for (u, placed) in members.iter().zip(placed) {
        let by = if one_each { rule } else { Rule::SoleCandidate };
        match placed {
            Some(id) => table.decide_unit(u, Decision::Given(id, u.level(), by)),
            None => left.push(*u),
        }
    }
    left
}

/// Places by deduction, per server, the units `server_of` says a request
/// holds one of per server (whole, on a connection carrying one call at a
/// time); a unit deduction cannot place is ambiguous: no weaker rule may
/// guess what the request's holding could not settle.
pub fn place_per_server(
    s: &Scene,
    table: &mut Table,
    rule: Rule,
    server_of: impl Fn(Holder) -> Option<SocketAddr>,
) {
    let left = place_each(s, table, rule, |u| {
        let server = server_of(u.holder).filter(|_| held_whole(u))?;
        Some((server, ids(u)))
    });
    for u in left {
        table.decide_unit(u, s.ambiguous(u));
    }
}

/// Whether `u` is placed whole by deduction: every request that could
/// hold it was seen, and its connection carries one call at a time.
pub fn held_whole(u: &Unit) -> bool {
    u.complete && !u.interleaved
}

/// The ids of `u`'s candidates.
pub fn ids(u: &Unit) -> Vec<u32> {
    u.cands.iter().map(|w| w.id).collect()
}
