//! Gives each unit of calls to the inbound request it was made for, with
//! the evidence it was given on, or declares it ambiguous.
//!
//! A unit has candidates: the requests whose windows enclose it. One
//! candidate is the answer. Among several, a call on a connection that
//! interleaves calls of requests in flight together is ambiguous (measured
//! on the lab's HTTP/2 fan-out at 16 clients: a fifth of the calls timing
//! gave there went to the wrong request). Otherwise timing decides only
//! when it clearly can: the unit fills most of one request's window and that
//! request brackets it far more tightly than any other. Units a request
//! can hold only one of at a time (a trace, a transaction on a pool) are
//! decided jointly, tightest first: a request that already holds one is no
//! candidate for another of the same kind. Everything else is ambiguous.

use super::units::{Holder, Unit};
use super::windows::{Window, Windows};
use foldhash::{HashMap, HashSet};
use whyslow_model::{Attribution, Exchange};

/// Share of a request's window a unit must cover for timing to give it to
/// that request: a call filling most of the time a request waited is that
/// request's work; a short call fits every request in flight alike.
pub const FILL_SHARE: f64 = 0.5;
/// How much looser the next candidate's bracket must be: twice the slack
/// (arrival → unit start plus unit end → answer). Nearer than that, the
/// two are near-equal and the unit is ambiguous — never a guess.
pub const BRACKET_MARGIN: u64 = 2;
/// And looser by at least this much: on a loaded host a runnable thread
/// may wait the scheduler's minimum granularity before it runs (CFS: 0.75
/// ms by default, more with more CPUs), which moves a call's start or an
/// answer's write. A bracket tighter by less than that is noise.
pub const BRACKET_MIN_US: u64 = 1_000;

/// What one unit was decided to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Made while no request waited (background work).
    Outside,
    Given(u32, Attribution),
    /// Several candidates; `kind_of`: one of them, when all are of one
    /// request kind (for counting the ambiguous calls of a kind).
    Ambiguous {
        kind_of: Option<u32>,
    },
}

/// Decides every unit. `held`: requests that already hold a unit of a
/// holder kind (their own trace matched calls exactly). `same_kind`: whether
/// two inbound requests are of one kind.
pub fn decide(
    units: &[Unit],
    windows: &Windows,
    mut held: HashSet<(u32, Holder)>,
    same_kind: impl Fn(u32, u32) -> bool,
) -> Vec<Decision> {
    let mut out = vec![Decision::Outside; units.len()];
    // (best slack, unit, its candidates by slack) for units held one at a time.
    let mut joint: Vec<(u64, usize, Vec<Window>)> = Vec::new();
    let mut found = Vec::new();
    for (n, u) in units.iter().enumerate() {
        let complete = windows.enclosing(u.start, u.end, &mut found);
        let mut cands = std::mem::take(&mut found);
        cands.sort_by_key(|w| (w.slack(u.start, u.end), w.id));
        let ambiguous = || Decision::Ambiguous {
            kind_of: kind_of(&cands, &same_kind),
        };
        out[n] = match cands.len() {
            0 if complete => Decision::Outside,
            _ if !complete => ambiguous(),
            1 => Decision::Given(cands[0].id, level(u)),
            _ if u.interleaved => ambiguous(),
            _ if u.holder == Holder::Call => pick(u, &cands).unwrap_or_else(ambiguous),
            _ => {
                joint.push((cands[0].slack(u.start, u.end), n, cands));
                continue;
            }
        };
        found = cands;
    }
    joint.sort_by_key(|(slack, n, _)| (*slack, *n));
    for (_, n, cands) in joint {
        let u = &units[n];
        let free: Vec<Window> = cands
            .iter()
            .filter(|w| !held.contains(&(w.id, u.holder)))
            .copied()
            .collect();
        out[n] = match pick(u, &free) {
            Some(Decision::Given(id, how)) => {
                held.insert((id, u.holder));
                Decision::Given(id, how)
            }
            _ => Decision::Ambiguous {
                kind_of: kind_of(&cands, &same_kind),
            },
        };
    }
    out
}

/// The level a unit is given at when timing or its group decided.
fn level(u: &Unit) -> Attribution {
    match u.holder {
        Holder::Trace => Attribution::TraceGroup,
        _ => Attribution::Inferred,
    }
}

/// The candidate that clearly brackets `u` best (`cands` by slack), if any.
fn pick(u: &Unit, cands: &[Window]) -> Option<Decision> {
    let best = cands.first()?;
    let slack = best.slack(u.start, u.end);
    let fills = u.len() as f64 >= FILL_SHARE * best.len() as f64;
    let clear = cands.get(1).is_none_or(|next| {
        let other = next.slack(u.start, u.end);
        other >= BRACKET_MARGIN * slack.max(1) && other - slack >= BRACKET_MIN_US
    });
    (fills && clear).then_some(Decision::Given(best.id, level(u)))
}

/// One of `cands` when every one is of its kind.
fn kind_of(cands: &[Window], same_kind: &impl Fn(u32, u32) -> bool) -> Option<u32> {
    let first = cands.first()?.id;
    cands
        .iter()
        .all(|w| same_kind(first, w.id))
        .then_some(first)
}

/// Applies the decisions: parents and levels on the calls; each ambiguous
/// call's request kind, when its candidates agree, into `ambiguous_kind`.
pub fn apply(
    exchanges: &mut [Exchange],
    units: &[Unit],
    decisions: &[Decision],
    ambiguous_kind: &mut HashMap<u32, u32>,
) {
    for (u, d) in units.iter().zip(decisions) {
        for &i in &u.calls {
            let e = &mut exchanges[i];
            (e.parent, e.attribution) = match *d {
                Decision::Outside => (None, None),
                Decision::Given(id, how) => (Some(id), Some(how)),
                Decision::Ambiguous { kind_of } => {
                    if let Some(k) = kind_of {
                        ambiguous_kind.insert(e.id, k);
                    }
                    (None, Some(Attribution::Ambiguous))
                }
            };
        }
    }
}
