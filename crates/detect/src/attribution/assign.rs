//! Gives each unit of calls to the inbound request it was made for, with
//! the evidence it was given on, or declares it ambiguous.
//!
//! A unit has candidates: the requests whose windows enclose it. One
//! candidate is the answer. Among several, a call on a connection that
//! interleaves calls of requests in flight together is ambiguous (measured
//! on the lab's HTTP/2 fan-out at 16 clients: a fifth of the calls timing
//! gave there went to the wrong request). Units a request holds one of at a
//! time — the calls of a trace the service started, a run or a transaction
//! on a held connection — are placed by deduction where every placing
//! agrees (`matching`): nearness alone gave a Python service's trace groups
//! to the wrong request (35 of 1120 calls at 16 clients), its threads
//! waiting tens of milliseconds for the interpreter between a request and
//! its first call. A single call goes by timing only when it clearly can:
//! it fills most of one request's window and that request brackets it far
//! more tightly than any other. Everything else is ambiguous.

use super::matching;
use super::units::{Holder, Unit};
use super::windows::{Window, Windows};
use super::Attributed;
use foldhash::{HashMap, HashMapExt, HashSet};
use whyslow_model::{Attribution, CutEdges, Exchange, Rule};

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
    /// Given to a request at a level, by a rule.
    Given(u32, Attribution, Rule),
    /// Several candidates; `kind_of`: one of them, when all are of one
    /// request kind (for counting the ambiguous calls of a kind).
    Ambiguous { kind_of: Option<u32> },
}

/// Decides every unit. `held`: requests that already hold a unit of a
/// holder kind (their own trace matched calls exactly). `same_kind`: whether
/// two inbound requests are of one kind.
pub fn decide(
    units: &[Unit],
    windows: &Windows,
    edges: CutEdges,
    held: HashSet<(u32, Holder)>,
    same_kind: impl Fn(u32, u32) -> bool,
) -> Vec<Decision> {
    let mut out = vec![Decision::Outside; units.len()];
    // (unit, its candidates by fit) for the single calls timing must decide.
    let mut open: Vec<(usize, Vec<Window>)> = Vec::new();
    // Per holder a request holds one of at a time (a trace the service
    // started, a run or a transaction to a server): (unit, its candidates),
    // placed by deduction.
    let mut one_each: HashMap<Holder, Vec<(usize, Vec<Window>)>> = HashMap::new();
    let mut found = Vec::new();
    // Units near a forced cut, with the one request kind of their candidates.
    let mut near = Vec::new();
    for (n, u) in units.iter().enumerate() {
        let complete = windows.enclosing(u.start, u.end, &mut found);
        let mut cands = std::mem::take(&mut found);
        cands.sort_by_key(|w| (fit(u, w), w.id));
        if edges.near(u.start) {
            near.push((n, kind_of(&cands, &same_kind)));
        }
        let held_whole = matches!(
            u.holder,
            Holder::Trace | Holder::Run(_) | Holder::Transaction(_)
        );
        // A request of the shape's kind made one such call, wherever its
        // connection's calls interleave; requests of other kinds none. What
        // deduction leaves open, timing may still give (`open`).
        if let Holder::Shape(_, kind) = u.holder {
            if complete && !cands.is_empty() {
                if !u.interleaved {
                    open.push((n, cands.clone()));
                }
                cands.retain(|w| same_kind(w.id, kind));
                one_each.entry(u.holder).or_default().push((n, cands));
                continue;
            }
        }
        out[n] = match cands.len() {
            0 if complete => Decision::Outside,
            _ if held_whole && complete && !u.interleaved => {
                cands.retain(|w| !held.contains(&(w.id, u.holder)));
                one_each.entry(u.holder).or_default().push((n, cands));
                continue;
            }
            1 if complete => Decision::Given(cands[0].id, level(u.holder), Rule::SoleCandidate),
            _ if !complete || u.interleaved => Decision::Ambiguous {
                kind_of: kind_of(&cands, &same_kind),
            },
            _ => {
                open.push((n, cands));
                continue;
            }
        };
        found = cands;
    }
    for (holder, group) in &one_each {
        place_held(*holder, group, &mut out, &same_kind);
    }
    for (n, cands) in &open {
        if matches!(out[*n], Decision::Given(..)) {
            continue; // a shape's call deduction placed
        }
        out[*n] = pick(&units[*n], cands).unwrap_or(Decision::Ambiguous {
            kind_of: kind_of(cands, &same_kind),
        });
    }
    // Near a forced cut a candidate may sit in the next or the last window:
    // the candidates seen here are not all there were, so a unit there is
    // given by nothing seen here. It still takes its part in deduction,
    // where leaving it out would free a request whose freedom runs through
    // every overlapping request of the window.
    for (n, kind_of) in near {
        if matches!(out[n], Decision::Given(..) | Decision::Outside) {
            out[n] = Decision::Ambiguous { kind_of };
        }
    }
    out
}

/// Places the units of one holder (a trace, runs or transactions to one
/// server) by deduction, where each request holds at most one of them. Where a request holds two that
/// only it can hold (a client that checks a connection out per call, a
/// service that runs two transactions), that rule is wrong for this server:
/// a run is then given only when one request alone encloses it.
fn place_held(
    holder: Holder,
    group: &[(usize, Vec<Window>)],
    out: &mut [Decision],
    same_kind: &impl Fn(u32, u32) -> bool,
) {
    let mut sole = HashSet::default();
    let one_each = group
        .iter()
        .filter(|(_, c)| c.len() == 1)
        .all(|(_, c)| sole.insert(c[0].id));
    let ids: Vec<Vec<u32>> = group
        .iter()
        .map(|(_, c)| c.iter().map(|w| w.id).collect())
        .collect();
    let placed = if one_each {
        matching::forced(&ids)
    } else {
        ids.iter().map(|c| (c.len() == 1).then(|| c[0])).collect()
    };
    for ((n, cands), placed) in group.iter().zip(placed) {
        out[*n] = match placed {
            // Where deduction does not hold, only a sole candidate places a unit.
            Some(id) if one_each => Decision::Given(id, level(holder), deduced_by(holder)),
            Some(id) => Decision::Given(id, level(holder), Rule::SoleCandidate),
            None => Decision::Ambiguous {
                kind_of: kind_of(cands, same_kind),
            },
        };
    }
}

/// Whether a fit of `best` is clearly tighter than one of `next`.
fn clearly_below(best: u64, next: u64) -> bool {
    next >= BRACKET_MARGIN * best.max(1) && next - best >= BRACKET_MIN_US
}

/// The level a unit is given at when timing or its group decided.
fn level(holder: Holder) -> Attribution {
    match holder {
        Holder::Trace => Attribution::TraceGroup,
        _ => Attribution::Inferred,
    }
}

/// The rule a holder's units are placed by when deduction places them.
fn deduced_by(holder: Holder) -> Rule {
    match holder {
        Holder::Trace => Rule::TraceGroup,
        Holder::Transaction(_) => Rule::Transaction,
        Holder::Run(_) => Rule::Checkout,
        Holder::Shape(..) => Rule::Fingerprint,
        // Single calls are not placed by deduction; timing decides them.
        Holder::Call => Rule::Bracket,
    }
}

/// How closely a candidate brackets `u`: its slack.
fn fit(u: &Unit, w: &Window) -> u64 {
    w.slack(u.start, u.end)
}

/// The candidate that clearly brackets `u` best, if any (`cands` by fit).
fn pick(u: &Unit, cands: &[Window]) -> Option<Decision> {
    let w = clearest(cands, |w| fit(u, w), u.len())?;
    Some(Decision::Given(w.id, level(u.holder), Rule::Bracket))
}

/// The first of `cands` (sorted by `slack`) when it fills FILL_SHARE of its
/// window with `len` and its slack is clearly below the next one's.
fn clearest(cands: &[Window], slack: impl Fn(&Window) -> u64, len: u64) -> Option<&Window> {
    let best = cands.first()?;
    let tight = slack(best);
    let fills = len as f64 >= FILL_SHARE * best.len() as f64;
    let clear = cands
        .get(1)
        .is_none_or(|next| clearly_below(tight, slack(next)));
    (fills && clear).then_some(best)
}

/// One of `cands` when every one is of its kind.
fn kind_of(cands: &[Window], same_kind: &impl Fn(u32, u32) -> bool) -> Option<u32> {
    let first = cands.first()?.id;
    cands
        .iter()
        .all(|w| same_kind(first, w.id))
        .then_some(first)
}

/// Applies the decisions: parents and levels on the calls; into `out`,
/// each ambiguous call's request kind when its candidates agree, and the
/// runs on held connections: who holds one, and which ambiguous calls were
/// in one.
pub fn apply(
    exchanges: &mut [Exchange],
    units: &[Unit],
    decisions: &[Decision],
    out: &mut Attributed,
) {
    for (n, (u, d)) in units.iter().zip(decisions).enumerate() {
        let run = match u.holder {
            Holder::Run(server) => Some(server),
            _ => None,
        };
        if let (Some(server), Decision::Given(id, ..)) = (run, d) {
            out.held_runs.given.insert((*id, server));
        }
        for &i in &u.calls {
            let e = &mut exchanges[i];
            (e.parent, e.attribution, e.rule) = match *d {
                Decision::Outside => (None, None, None),
                Decision::Given(id, how, rule) => (Some(id), Some(how), Some(rule)),
                Decision::Ambiguous { kind_of } => {
                    if let Some(k) = kind_of {
                        out.ambiguous_kind.insert(e.id, k);
                    }
                    if let Some(server) = run {
                        out.held_runs.ambiguous.insert(e.id, (server, n as u32));
                    }
                    (None, Some(Attribution::Ambiguous), None)
                }
            };
        }
    }
}
