//! One of several generators making one run together (`load --segment
//! INDEX/COUNT`, as a Kubernetes Indexed Job runs them, its index in
//! `JOB_COMPLETION_INDEX`): each takes every COUNT-th slot of the schedule
//! and its share of the connections and requests, so that `whyslow merge`
//! of their result files is the run one generator would have made.

use crate::{LoadPlan, Model};

/// Where a Kubernetes Indexed Job puts a pod's index.
pub const INDEX_ENV: &str = "JOB_COMPLETION_INDEX";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segment {
    pub index: u64,
    pub count: u64,
}

impl Segment {
    /// "2/4", or "4" (or "/4") with the index from `index_env`, the value of
    /// `JOB_COMPLETION_INDEX`.
    pub fn parse(s: &str, index_env: Option<&str>) -> Result<Segment, String> {
        let number = |v: &str, what: &str| {
            v.trim()
                .parse::<u64>()
                .map_err(|_| format!("--segment {s:?}: {what} {v:?} is not a number"))
        };
        let (index, count) = match (s.split_once('/'), index_env) {
            (Some((i, c)), _) if !i.is_empty() => (number(i, "index")?, number(c, "count")?),
            (given, Some(env)) => {
                let c = given.map_or(s, |(_, c)| c);
                (number(env, INDEX_ENV)?, number(c, "count")?)
            }
            _ => {
                return Err(format!(
                    "--segment {s:?}: INDEX/COUNT, or COUNT with {INDEX_ENV} set"
                ))
            }
        };
        if count == 0 || index >= count {
            return Err(format!(
                "--segment {s:?}: the index is 0 to COUNT-1 (got {index} of {count})"
            ));
        }
        Ok(Segment { index, count })
    }

    /// This segment's share of `n`: n/count, one more for the lowest
    /// indices while the remainder lasts.
    pub fn share_of(&self, n: u64) -> u64 {
        n / self.count + u64::from(self.index < n % self.count)
    }

    /// The plan of this segment alone; Err when there are fewer connections
    /// or requests than segments.
    pub fn apply(&self, plan: &mut LoadPlan) -> Result<(), String> {
        let connections = self.share_of(plan.connections as u64);
        if connections == 0 {
            return Err(format!(
                "--segment: {} connections cannot be shared by {} generators",
                plan.connections, self.count
            ));
        }
        plan.connections = connections as usize;
        if let Some(n) = plan.max_requests {
            match self.share_of(n) {
                0 => {
                    return Err(format!(
                        "--segment: -n {n} is fewer than {} generators",
                        self.count
                    ))
                }
                mine => plan.max_requests = Some(mine),
            }
        }
        if let Model::Open(s) = &plan.model {
            plan.model = Model::Open(s.share(self.index, self.count));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_index_is_given_or_taken_from_the_job() {
        assert_eq!(
            Segment::parse("2/4", None),
            Ok(Segment { index: 2, count: 4 })
        );
        assert_eq!(
            Segment::parse("4", Some("3")),
            Ok(Segment { index: 3, count: 4 })
        );
        assert_eq!(
            Segment::parse("/4", Some("0")),
            Ok(Segment { index: 0, count: 4 })
        );
        assert!(Segment::parse("4", None).is_err());
        assert!(Segment::parse("4/4", None).is_err());
        assert!(Segment::parse("1/0", None).is_err());
        assert!(Segment::parse("x/4", None).is_err());
        assert!(Segment::parse("4", Some("seven")).is_err());
    }

    #[test]
    fn shares_add_up_to_the_whole() {
        for n in [0u64, 1, 7, 8, 10, 1001] {
            let total: u64 = (0..4)
                .map(|i| Segment { index: i, count: 4 }.share_of(n))
                .sum();
            assert_eq!(total, n);
        }
    }
}
