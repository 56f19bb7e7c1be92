//! A single call goes by timing only when it clearly can: it fills most of
//! one request's window and that request brackets it far more tightly than
//! any other. Among several candidates, a call on a connection that
//! interleaves calls of requests in flight together is never timed
//! (measured on the lab's HTTP/2 fan-out at 16 clients: a fifth of the
//! calls timing gave there went to the wrong request). Nor are calls that
//! would all go to one request while they overlap, when as many requests
//! were waiting through each: one call each fits the wire as well (a host
//! stall stretches calls of requests that arrived together alike; measured
//! on the lab's DNS front at 16 clients on a busy host: eight calls of
//! eight requests given to the one whose answer came first).

use crate::attribution::fit::clearly_below;
use crate::attribution::scene::Scene;
use crate::attribution::table::{Decision, Table};
use crate::attribution::units::{Holder, Unit};
use crate::attribution::windows::{is_lost, Window};
use crate::intervals::most_at_once;
use foldhash::{HashMap, HashMapExt};
use whyslow_model::Rule;

/// Share of a request's window a unit must cover for timing to give it to
/// that request: a call filling most of the time a request waited is that
/// request's work; a short call fits every request in flight alike.
pub const FILL_SHARE: f64 = 0.5;
pub fn place(s: &Scene, table: &mut Table) {
    let mut picks: HashMap<u32, Vec<&Unit>> = HashMap::new();
    for u in &s.units {
        let single = matches!(u.holder, Holder::Call | Holder::Fingerprint(..));
        if !single || !u.complete || u.interleaved || !table.unit_open(u) {
            continue;
        }
        if let Some(w) = clearest(u) {
            picks.entry(w.id).or_default().push(u);
        }
    }
    for (request, mut units) in picks {
        units.sort_unstable_by_key(|u| u.start);
        let mut reach = Vec::with_capacity(units.len());
        let mut latest = 0;
        for u in &units {
            latest = latest.max(u.end);
            reach.push(latest);
        }
        for u in &units {
            if !one_each_fits(u, &units, &reach) {
                table.decide_unit(u, Decision::Given(request, u.level(), Rule::Bracket));
            }
        }
    }
}

/// Whether `u` and the units of `picked` (by start; `reach`: the latest
/// end among each prefix) in flight with it, all picked for one request,
/// could as well be one per request waiting through `u`: at most as many
/// ran at once as requests waited.
fn one_each_fits(u: &Unit, picked: &[&Unit], reach: &[u64]) -> bool {
    let mut i = picked.partition_point(|o| o.start < u.end);
    let mut spans = Vec::new();
    while i > 0 && reach[i - 1] > u.start {
        i -= 1;
        let o = picked[i];
        if o.end > u.start {
            spans.push((o.start.max(u.start), o.end.min(u.end)));
        }
        if spans.len() > u.cands.len() {
            break; // bounded: the spans so far say enough to withhold it
        }
    }
    let at_once = most_at_once(spans.into_iter());
    at_once >= 2 && at_once <= u.cands.len()
}

/// The first candidate (they are sorted by slack) when `u` fills
/// FILL_SHARE of its window and its slack is clearly below the next one's.
/// None when a candidate is a request the capture lost: its window spans
/// from the answer before it to the next request, wider than it waited, so
/// any real neighbour would look tighter.
fn clearest(u: &Unit) -> Option<&Window> {
    if u.cands.iter().any(|w| is_lost(w.id)) {
        return None;
    }
    let slack = |w: &Window| w.slack(u.start, u.end);
    let best = u.cands.first()?;
    let tight = slack(best);
    let fills = u.len() as f64 >= FILL_SHARE * best.len() as f64;
    let clear = u
        .cands
        .get(1)
        .is_none_or(|next| clearly_below(tight, slack(next)));
    (fills && clear).then_some(best)
}
