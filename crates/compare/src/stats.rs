//! Distribution-free statistics for latency, which is never normal: order
//! statistic intervals for percentiles and Mann–Whitney U for a shift. Both
//! work on sorted (value, count) runs, so raw samples and HDR histograms go
//! through the same code.

/// A distribution as sorted, distinct values with their counts.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Runs(pub Vec<(u64, u64)>);

/// z for a two-sided 95 % interval.
const Z95: f64 = 1.959_964;

impl Runs {
    pub fn from_samples(mut v: Vec<u64>) -> Runs {
        v.sort_unstable();
        let mut runs: Vec<(u64, u64)> = Vec::new();
        for x in v {
            match runs.last_mut() {
                Some((last, n)) if *last == x => *n += 1,
                _ => runs.push((x, 1)),
            }
        }
        Runs(runs)
    }

    pub fn count(&self) -> u64 {
        self.0.iter().fold(0u64, |a, r| a.saturating_add(r.1))
    }

    /// The value at 1-based rank `rank`.
    pub fn at_rank(&self, rank: u64) -> u64 {
        let mut seen = 0u64;
        for &(v, n) in &self.0 {
            seen = seen.saturating_add(n);
            if seen >= rank {
                return v;
            }
        }
        self.0.last().map_or(0, |r| r.0)
    }

    /// Nearest-rank quantile, the project's one rule (model::stats).
    pub fn quantile(&self, q: f64) -> u64 {
        let n = self.count();
        self.at_rank(whyslow_model::stats::nearest_rank(n as usize, q) as u64 + 1)
    }

    /// A 95 % confidence interval for the q-quantile from order statistics
    /// (the binomial rank interval, normal approximation): valid for any
    /// distribution. With few samples it widens to the extremes.
    pub fn quantile_interval(&self, q: f64) -> (u64, u64) {
        let n = self.count() as f64;
        let half = Z95 * (n * q * (1.0 - q)).sqrt();
        let lo = (n * q - half).floor().max(1.0) as u64;
        let hi = ((n * q + half).ceil() + 1.0).min(n) as u64;
        (self.at_rank(lo), self.at_rank(hi.max(1)))
    }
}

/// Mann–Whitney U of B against A with ties (mid-ranks, tie-corrected
/// variance, continuity correction): P(B > A) + ½P(B = A), and the two-sided p.
pub fn mann_whitney(a: &Runs, b: &Runs) -> Option<(f64, f64)> {
    let (na, nb) = (a.count() as f64, b.count() as f64);
    if na == 0.0 || nb == 0.0 {
        return None;
    }
    let n = na + nb;
    let (mut i, mut j) = (0, 0);
    let (mut rank_b, mut below, mut ties) = (0.0, 0.0, 0.0);
    while i < a.0.len() || j < b.0.len() {
        let va = a.0.get(i).map_or(u64::MAX, |r| r.0);
        let vb = b.0.get(j).map_or(u64::MAX, |r| r.0);
        let v = va.min(vb);
        let ca = if va == v {
            i += 1;
            a.0[i - 1].1 as f64
        } else {
            0.0
        };
        let cb = if vb == v {
            j += 1;
            b.0[j - 1].1 as f64
        } else {
            0.0
        };
        let t = ca + cb;
        rank_b += cb * (below + (t + 1.0) / 2.0);
        ties += t * t * t - t;
        below += t;
    }
    let u_b = rank_b - nb * (nb + 1.0) / 2.0;
    let mean = na * nb / 2.0;
    let var = na * nb / 12.0 * ((n + 1.0) - ties / (n * (n - 1.0)).max(1.0));
    let p = if var <= 0.0 {
        1.0
    } else {
        let z = ((u_b - mean).abs() - 0.5).max(0.0) / var.sqrt();
        erfc(z / std::f64::consts::SQRT_2)
    };
    Some((u_b / (na * nb), p.clamp(0.0, 1.0)))
}

/// Complementary error function, fractional error < 1.2e-7 everywhere
/// (Numerical Recipes' `erfcc`, a Chebyshev fit): plenty for p-values.
fn erfc(x: f64) -> f64 {
    let z = x.abs();
    let t = 1.0 / (1.0 + 0.5 * z);
    let poly = -z * z - 1.265_512_23
        + t * (1.000_023_68
            + t * (0.374_091_96
                + t * (0.096_784_18
                    + t * (-0.186_288_06
                        + t * (0.278_868_07
                            + t * (-1.135_203_98
                                + t * (1.488_515_87 + t * (-0.822_152_23 + t * 0.170_872_77))))))));
    let r = t * poly.exp();
    if x >= 0.0 {
        r
    } else {
        2.0 - r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn erfc_matches_known_values() {
        assert!((erfc(0.0) - 1.0).abs() < 1e-6);
        // Two-sided p of z = 1.96 is 0.05.
        assert!((erfc(1.959_964 / std::f64::consts::SQRT_2) - 0.05).abs() < 1e-5);
        assert!((erfc(-1.0) - 1.842_700_79).abs() < 1e-6);
    }

    #[test]
    fn quantiles_and_intervals_by_rank() {
        let r = Runs::from_samples((1..=1000).collect());
        assert_eq!(r.count(), 1000);
        assert_eq!(r.quantile(0.5), 500);
        assert_eq!(r.quantile(0.99), 990);
        let (lo, hi) = r.quantile_interval(0.5);
        assert!(lo < 500 && hi > 500 && hi - lo < 80, "{lo}..{hi}");
        // Five samples: the median's interval spans them all.
        let few = Runs::from_samples(vec![5, 1, 4, 2, 3]);
        assert_eq!(few.quantile_interval(0.5), (1, 5));
    }

    #[test]
    fn mann_whitney_alike_and_shifted() {
        let a = Runs::from_samples((0..200).map(|i| 1000 + (i * 37) % 100).collect());
        let same = Runs::from_samples((0..200).map(|i| 1000 + (i * 53) % 100).collect());
        let (prob, p) = mann_whitney(&a, &same).unwrap();
        assert!((prob - 0.5).abs() < 0.05 && p > 0.3, "{prob} {p}");
        let slower = Runs::from_samples((0..200).map(|i| 1080 + (i * 53) % 100).collect());
        let (prob, p) = mann_whitney(&a, &slower).unwrap();
        assert!(prob > 0.8 && p < 1e-6, "{prob} {p}");
        assert!(mann_whitney(&a, &Runs::default()).is_none());
    }

    #[test]
    fn mann_whitney_all_ties_is_no_shift() {
        let a = Runs(vec![(10, 50)]);
        let (prob, p) = mann_whitney(&a, &a.clone()).unwrap();
        assert_eq!(prob, 0.5);
        assert_eq!(p, 1.0);
    }

    #[test]
    fn small_exact_example() {
        // A = {1,2,3}, B = {4,5,6}: every B beats every A.
        let (prob, p) = mann_whitney(
            &Runs::from_samples(vec![1, 2, 3]),
            &Runs::from_samples(vec![4, 5, 6]),
        )
        .unwrap();
        assert_eq!(prob, 1.0);
        assert!(p < 0.1 && p > 0.04, "{p}");
    }
}
