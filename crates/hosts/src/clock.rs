//! Two hosts' clocks from the connections they share. A segment that went
//! from x's side to y's took a one-way delay d ≥ 0: it shows at y at
//! t_x + d + θ on y's clock, θ being how far y's clock runs ahead of x's.
//! So t_y − t_x ≥ θ for every segment x saw first, and ≤ θ for every one
//! y saw first: the two directions bound θ from both sides, and the
//! midpoint is told with half the gap as its bound (NTP's reasoning,
//! taken over every segment rather than four timestamps). Which host sees
//! a direction first is found the same way: only one of the two readings
//! leaves a range.

use crate::matching::Shared;

/// What a pair of hosts' shared connections say of θ (µs): y's clock less
/// x's lies in [lo, hi].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Range {
    pub lo: i64,
    pub hi: i64,
}

impl Range {
    pub fn mid(&self) -> i64 {
        self.lo + (self.hi - self.lo) / 2
    }

    pub fn bound(&self) -> u64 {
        (self.hi - self.lo).unsigned_abs().div_ceil(2)
    }
}

/// θ's range from one shared connection, and whether x's side 0 is the one
/// x saw first (x is nearer the end that sent it). None when a direction
/// carried no shared segment, or the times fit neither reading.
pub fn of(s: &Shared) -> Option<(Range, bool)> {
    let deltas = |d: usize| s.times[d].iter().map(|&(x, y)| y as i64 - x as i64);
    let (min0, max0) = (deltas(0).min()?, deltas(0).max()?);
    let (min1, max1) = (deltas(1).min()?, deltas(1).max()?);
    // x saw side 0's segments first: θ ≤ every Δ of side 0, ≥ every of side 1.
    let x_first = Range { lo: max1, hi: min0 };
    let y_first = Range { lo: max0, hi: min1 };
    match (x_first.lo <= x_first.hi, y_first.lo <= y_first.hi) {
        (true, _) => Some((x_first, true)),
        (false, true) => Some((y_first, false)),
        (false, false) => None,
    }
}

/// One pair of hosts' θ from all their shared connections: the ranges
/// intersected; where they do not all overlap (a clock stepped or drifted
/// between them), the median midpoint with a bound that covers them all,
/// and `true`.
pub fn combined(ranges: &[Range]) -> Option<(Range, bool)> {
    let lo = ranges.iter().map(|r| r.lo).max()?;
    let hi = ranges.iter().map(|r| r.hi).min()?;
    if lo <= hi {
        return Some((Range { lo, hi }, false));
    }
    let mut mids: Vec<i64> = ranges.iter().map(Range::mid).collect();
    mids.sort_unstable();
    let mid = mids[mids.len() / 2];
    let lo = ranges.iter().map(|r| r.lo).min()?;
    let hi = ranges.iter().map(|r| r.hi).max()?;
    let half = (mid - lo).max(hi - mid);
    Some((
        Range {
            lo: mid - half,
            hi: mid + half,
        },
        true,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shared(times0: Vec<(u64, u64)>, times1: Vec<(u64, u64)>) -> Shared {
        Shared {
            x: (0, 0),
            y: (1, 0),
            flip: 0,
            times: [times0, times1],
        }
    }

    #[test]
    fn the_two_directions_bound_the_offset() {
        // y's clock runs 41 ms ahead; 100 µs each way; x sends side 0.
        let theta = 41_000i64;
        let at = |t: u64, d: i64| (t, (t as i64 + d + theta) as u64);
        let s = shared(
            vec![at(1_000, 100), at(5_000, 120)],
            // y sends at 44 ms on its clock (3 ms on x's); x sees it 100 µs later.
            vec![(3_100, 44_000)],
        );
        let (r, x_first) = of(&s).unwrap();
        assert!(x_first);
        assert!(r.lo <= theta && theta <= r.hi, "{r:?}");
        assert!(r.bound() <= 100, "{r:?}");
    }

    #[test]
    fn the_other_host_nearer_the_sender_reads_the_other_way() {
        // Side 0 sent from y's end: y sees it first.
        let theta = -7_500i64;
        let s = shared(
            vec![(10_000, (10_000 - 200 + theta) as u64)],
            vec![(20_000, (20_200 + theta) as u64)],
        );
        let (r, x_first) = of(&s).unwrap();
        assert!(!x_first);
        assert!(r.lo <= theta && theta <= r.hi, "{r:?}");
        assert_eq!(r.bound(), 200);
    }

    #[test]
    fn ranges_that_do_not_overlap_are_told_as_disagreeing() {
        let (r, disagree) = combined(&[Range { lo: 0, hi: 10 }, Range { lo: 5, hi: 20 }]).unwrap();
        assert_eq!((r, disagree), (Range { lo: 5, hi: 10 }, false));
        let (r, disagree) =
            combined(&[Range { lo: 0, hi: 10 }, Range { lo: 500, hi: 510 }]).unwrap();
        assert!(disagree);
        assert!(r.lo <= 0 && r.hi >= 510, "{r:?}");
    }
}
