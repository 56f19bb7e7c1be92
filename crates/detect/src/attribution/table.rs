//! The side table every rule writes to: per call (index into the
//! timeline's exchanges), what was decided and by which rule. A rule
//! decides only calls no earlier rule decided; what no rule decided is
//! ambiguous, counted once (`mod.rs`).

use foldhash::{HashSet, HashSetExt};
use whyslow_model::{Attribution, Rule};

use super::units::Unit;

/// What one call (or unit of calls) was decided to be.
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

/// Decisions by call index.
pub struct Table {
    decided: Vec<Option<Decision>>,
}

impl Table {
    pub fn new(calls: usize) -> Self {
        Table {
            decided: vec![None; calls],
        }
    }

    /// The decision on call `i`, if any rule made one.
    pub fn get(&self, i: usize) -> Option<Decision> {
        self.decided[i]
    }

    pub fn is_open(&self, i: usize) -> bool {
        self.decided[i].is_none()
    }

    /// Decides call `i`, unless an earlier rule did. A call given to a
    /// request the capture lost is ambiguous: whose it was, it cannot say.
    pub fn decide(&mut self, i: usize, d: Decision) {
        let d = match d {
            Decision::Given(id, ..) if super::windows::is_lost(id) => {
                Decision::Ambiguous { kind_of: None }
            }
            d => d,
        };
        self.decided[i].get_or_insert(d);
    }

    /// Whether no rule decided `u` yet (its calls are decided together).
    pub fn unit_open(&self, u: &Unit) -> bool {
        u.calls.first().is_some_and(|&i| self.is_open(i))
    }

    /// Decides every call of `u`, unless an earlier rule did.
    pub fn decide_unit(&mut self, u: &Unit, d: Decision) {
        for &i in &u.calls {
            self.decide(i, d);
        }
    }

    /// Overrides the decision on `u`'s calls (the cut-edge pass, after
    /// every rule ran).
    pub fn overrule_unit(&mut self, u: &Unit, d: Decision) {
        for &i in &u.calls {
            self.decided[i] = Some(d);
        }
    }

    /// The requests `rule` gave at least one call to.
    pub fn requests_given_by(&self, rule: Rule) -> HashSet<u32> {
        let mut out = HashSet::new();
        for d in self.decided.iter().flatten() {
            if let Decision::Given(id, _, r) = *d {
                if r == rule {
                    out.insert(id);
                }
            }
        }
        out
    }
}
