//! When one timing fit is clearly tighter than another: bracket weighs a
//! call's candidates by it, lookup a query's neighbours. Near-equal fits
//! are ambiguous, never a guess.

/// How much looser the next candidate's bracket must be: twice the slack
/// (arrival → unit start plus unit end → answer). Nearer than that, the
/// two are near-equal and the unit is ambiguous — never a guess.
pub const BRACKET_MARGIN: u64 = 2;
/// And looser by at least this much: on a loaded host a runnable thread
/// may wait the scheduler's minimum granularity before it runs (CFS: 0.75
/// ms by default, more with more CPUs), which moves a call's start or an
/// answer's write. A bracket tighter by less than that is noise.
pub const BRACKET_MIN_US: u64 = 1_000;

/// Whether a fit of `best` is clearly tighter than one of `next`.
pub(crate) fn clearly_below(best: u64, next: u64) -> bool {
    next >= BRACKET_MARGIN * best.max(1) && next - best >= BRACKET_MIN_US
}
