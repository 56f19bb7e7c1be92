//! A symptom never outranks its cause. A pool queue on a server where the
//! requests also run an N+1 is that N+1's doing: each request holds its
//! connection for all its statements, so the others wait for it. Fixing
//! the N+1 shortens the hold and the queue with it; a bigger pool would
//! only move the wait into the database.

use whyslow_model::{Finding, FindingKind};

/// Marks pool queues that an N+1 to the same server causes, and says so in
/// their summary.
pub fn mark(findings: &mut [Finding]) {
    let n_plus_one: Vec<String> = findings
        .iter()
        .filter(|f| f.kind == FindingKind::NPlusOne)
        .map(|f| f.subject.clone())
        .collect();
    for f in findings
        .iter_mut()
        .filter(|f| f.kind == FindingKind::PoolQueueing)
    {
        let server = f.subject.as_str();
        let caused = n_plus_one
            .iter()
            .any(|s| s.split(' ').next() == Some(server));
        if caused && f.symptom_of.is_none() {
            f.symptom_of = Some(FindingKind::NPlusOne);
            f.summary.push_str(
                "; the N+1 above holds each connection for all its statements: fix it first",
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use whyslow_model::Severity;

    fn finding(kind: FindingKind, summary: &str, subject: &str, lost: u64) -> Finding {
        Finding {
            kind,
            severity: Severity::Critical,
            summary: summary.into(),
            time_lost_us: lost,
            time_lost_per_occurrence_us: lost,
            occurrences: 1,
            evidence: Vec::new(),
            fix: String::new(),
            background: false,
            symptom_of: None,
            subject: subject.into(),
            facts: Default::default(),
        }
    }

    #[test]
    fn a_pool_queue_behind_an_n_plus_one_ranks_after_it() {
        let pool = "101 calls to 127.0.0.1:5432 waited for one of 8 connections: 148 ms";
        let mut f = vec![
            finding(FindingKind::PoolQueueing, pool, "127.0.0.1:5432", 200),
            finding(
                FindingKind::NPlusOne,
                "…",
                "127.0.0.1:5432 SELECT … $1",
                100,
            ),
            finding(
                FindingKind::PoolQueueing,
                "11 calls …",
                "127.0.0.1:9090",
                50,
            ),
        ];
        mark(&mut f);
        Finding::sort(&mut f);
        let kinds: Vec<FindingKind> = f.iter().map(|f| f.kind).collect();
        use FindingKind::*;
        assert_eq!(kinds, [NPlusOne, PoolQueueing, PoolQueueing]);
        assert_eq!(f[1].symptom_of, None, "another server's queue is a cause");
        assert_eq!(f[2].symptom_of, Some(NPlusOne));
        assert!(f[2].summary.ends_with("fix it first"));
    }
}
