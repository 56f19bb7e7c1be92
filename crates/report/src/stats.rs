use whyslow_model::stats::percentile;

/// min / median / max of a set of durations, for small samples (probe runs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Summary {
    pub min: u64,
    pub median: u64,
    pub max: u64,
    pub count: usize,
}

impl Summary {
    pub fn of(values: impl IntoIterator<Item = u64>) -> Option<Summary> {
        let mut v: Vec<u64> = values.into_iter().collect();
        if v.is_empty() {
            return None;
        }
        v.sort_unstable();
        Some(Summary {
            min: v[0],
            median: percentile(&v, 0.5),
            max: v[v.len() - 1],
            count: v.len(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_of_odd_and_even_samples() {
        assert_eq!(
            Summary::of([5, 1, 3]).unwrap(),
            Summary {
                min: 1,
                median: 3,
                max: 5,
                count: 3
            }
        );
        assert_eq!(Summary::of([4, 1, 3, 2]).unwrap().median, 2);
        assert!(Summary::of([]).is_none());
    }
}
