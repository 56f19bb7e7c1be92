//! The one median and percentile rule of the project: nearest rank, as
//! HdrHistogram's `value_at_quantile` (which the load engine reports) uses, so
//! a probe's median and a load run's p50 mean the same thing.

/// The index of nearest rank ⌈q·n⌉ among `n` sorted items (n > 0).
pub fn nearest_rank(n: usize, q: f64) -> usize {
    ((q * n as f64).ceil() as usize).clamp(1, n.max(1)) - 1
}

/// The value at nearest rank ⌈q·n⌉ of sorted values (0 when empty).
pub fn percentile(sorted: &[u64], q: f64) -> u64 {
    match sorted.is_empty() {
        true => 0,
        false => sorted[nearest_rank(sorted.len(), q)],
    }
}

/// The median of `v` by the nearest-rank rule (0 when empty).
pub fn median(mut v: Vec<u64>) -> u64 {
    v.sort_unstable();
    percentile(&v, 0.5)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_of_odd_and_even_samples() {
        assert_eq!(median(vec![5, 1, 3]), 3);
        // Even counts take the lower middle, as HdrHistogram does.
        assert_eq!(median(vec![4, 1, 3, 2]), 2);
        assert_eq!(median(vec![]), 0);
        let v: Vec<u64> = (1..=100).collect();
        assert_eq!(percentile(&v, 0.99), 99);
        assert_eq!(percentile(&v, 1.0), 100);
        assert_eq!(percentile(&v, 0.0), 1);
    }

    #[test]
    fn agrees_with_hdrhistogram_on_small_samples() {
        // value_at_quantile(0.5) of {10, 20, 30, 40} is 20 in HdrHistogram.
        assert_eq!(percentile(&[10, 20, 30, 40], 0.5), 20);
        assert_eq!(percentile(&[10, 20, 30, 40], 0.75), 30);
    }
}
