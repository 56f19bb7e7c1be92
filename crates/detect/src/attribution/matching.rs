//! Runs on held connections placed by deduction, not by nearness.
//!
//! Each run is one request's, a request holds at most one run per server,
//! and a run can only be a request's whose window encloses it. A run is
//! given where every way of placing all runs under those rules puts it with
//! the same request: it is forced. Where two requests could swap their runs
//! (both answered after both runs ended), which run is whose is a guess
//! whatever the timing: with the sum of the gaps from run end to answer the
//! same either way, the nearer end only says which answer was written
//! sooner. Measured on a threaded Python app over PostgreSQL at 8 clients:
//! a request answered 2 ms after its own run ended, 0.3 ms after another
//! request's, and nearness gave it the other's run (43 calls of 1,763).
//!
//! The rules are a bipartite graph, runs to requests. One maximum matching
//! M is found (augmenting paths); a pair (q, R) of M is forced unless
//! another maximum matching leaves it out: R can move to a request M
//! leaves free, possibly displacing others along the way; or R and q lie
//! on a cycle that alternates between M and the other edges; or a run M
//! leaves unplaced can take q's place. Each is a reachability question in
//! one directed graph (edges of M from request to run, the others from run
//! to request), answered in linear time.

/// Steps the augmenting-path search may take per candidate edge: where a
/// hostile capture makes the search quadratic, the runs still unplaced
/// stay ambiguous (and so make their neighbours ambiguous too).
const SEARCH_STEPS_PER_EDGE: usize = 64;

/// For each run (its candidate requests), the request it is forced to.
pub fn forced(cands: &[Vec<u32>]) -> Vec<Option<u32>> {
    let g = Graph::new(cands);
    let m = g.maximum_matching();
    let d = Alternating::new(&g, &m);
    let can_move = d.reaches_free_request();
    let displaceable = d.reached_from_unplaced_runs();
    let component = d.components();
    (0..g.runs())
        .map(|r| {
            let q = m.request_of[r]?;
            let node_q = g.runs() + q;
            let free_to_swap =
                can_move[r] || displaceable[node_q] || component[r] == component[node_q];
            (!free_to_swap).then_some(g.request_ids[q])
        })
        .collect()
}

/// Runs 0..runs, requests dense 0..requests (ids kept in `request_ids`).
struct Graph {
    adj: Vec<Vec<usize>>,
    request_ids: Vec<u32>,
}

impl Graph {
    fn new(cands: &[Vec<u32>]) -> Graph {
        let mut dense = foldhash::HashMap::default();
        let mut request_ids = Vec::new();
        let adj = cands
            .iter()
            .map(|c| {
                c.iter()
                    .map(|&id| {
                        *dense.entry(id).or_insert_with(|| {
                            request_ids.push(id);
                            request_ids.len() - 1
                        })
                    })
                    .collect()
            })
            .collect();
        Graph { adj, request_ids }
    }

    fn runs(&self) -> usize {
        self.adj.len()
    }

    fn requests(&self) -> usize {
        self.request_ids.len()
    }

    /// Greedy first, then an augmenting path for each run left unplaced.
    fn maximum_matching(&self) -> Matching {
        let mut m = Matching {
            request_of: vec![None; self.runs()],
            run_of: vec![None; self.requests()],
        };
        for r in 0..self.runs() {
            if let Some(&q) = self.adj[r].iter().find(|&&q| m.run_of[q].is_none()) {
                m.place(r, q);
            }
        }
        let edges: usize = self.adj.iter().map(Vec::len).sum();
        let mut budget = edges.saturating_mul(SEARCH_STEPS_PER_EDGE);
        let mut seen = vec![usize::MAX; self.requests()];
        for r in 0..self.runs() {
            if m.request_of[r].is_none() && budget > 0 {
                self.augment(r, &mut m, &mut seen, &mut budget);
            }
        }
        m
    }

    /// An augmenting path from unplaced run `start` (iterative depth-first:
    /// paths can be as long as a capture's runs). Each stack entry is a run
    /// on the path and how far along its candidates it has looked; the
    /// candidate it looked at last is the request it would take.
    fn augment(&self, start: usize, m: &mut Matching, seen: &mut [usize], budget: &mut usize) {
        let mut stack = vec![(start, 0usize)];
        while let Some(&mut (r, ref mut next)) = stack.last_mut() {
            if *budget == 0 {
                return;
            }
            *budget -= 1;
            let Some(&q) = self.adj[r].get(*next) else {
                stack.pop();
                continue;
            };
            *next += 1;
            if seen[q] == start {
                continue;
            }
            seen[q] = start;
            match m.run_of[q] {
                Some(owner) => stack.push((owner, 0)),
                None => {
                    for &(run, next) in &stack {
                        m.place(run, self.adj[run][next - 1]);
                    }
                    return;
                }
            }
        }
    }
}

struct Matching {
    request_of: Vec<Option<usize>>,
    run_of: Vec<Option<usize>>,
}

impl Matching {
    fn place(&mut self, r: usize, q: usize) {
        self.request_of[r] = Some(q);
        self.run_of[q] = Some(r);
    }
}

/// The directed graph of alternatives: a run points to each request that
/// could take it instead, a request to the run it holds in M. Nodes: runs,
/// then requests.
struct Alternating {
    out: Vec<Vec<usize>>,
    free_requests: Vec<usize>,
    unplaced_runs: Vec<usize>,
}

impl Alternating {
    fn new(g: &Graph, m: &Matching) -> Alternating {
        let runs = g.runs();
        let mut out = vec![Vec::new(); runs + g.requests()];
        for (r, cands) in g.adj.iter().enumerate() {
            for &q in cands {
                if m.request_of[r] != Some(q) {
                    out[r].push(runs + q);
                }
            }
        }
        for (q, r) in m.run_of.iter().enumerate() {
            if let Some(r) = *r {
                out[runs + q].push(r);
            }
        }
        Alternating {
            out,
            free_requests: (0..g.requests())
                .filter(|&q| m.run_of[q].is_none())
                .map(|q| runs + q)
                .collect(),
            unplaced_runs: (0..runs).filter(|&r| m.request_of[r].is_none()).collect(),
        }
    }

    fn reversed(&self) -> Vec<Vec<usize>> {
        let mut rev = vec![Vec::new(); self.out.len()];
        for (from, tos) in self.out.iter().enumerate() {
            for &to in tos {
                rev[to].push(from);
            }
        }
        rev
    }

    /// Nodes from which a request M leaves free can be reached.
    fn reaches_free_request(&self) -> Vec<bool> {
        reachable(&self.reversed(), &self.free_requests)
    }

    /// Nodes a run M leaves unplaced can reach.
    fn reached_from_unplaced_runs(&self) -> Vec<bool> {
        reachable(&self.out, &self.unplaced_runs)
    }

    /// Strongly connected component of each node (Kosaraju, iterative).
    fn components(&self) -> Vec<usize> {
        let n = self.out.len();
        let mut order = Vec::with_capacity(n);
        let mut done = vec![false; n];
        for s in 0..n {
            if done[s] {
                continue;
            }
            done[s] = true;
            let mut stack = vec![(s, 0usize)];
            while let Some(&mut (v, ref mut next)) = stack.last_mut() {
                if let Some(&w) = self.out[v].get(*next) {
                    *next += 1;
                    if !done[w] {
                        done[w] = true;
                        stack.push((w, 0));
                    }
                } else {
                    order.push(v);
                    stack.pop();
                }
            }
        }
        let rev = self.reversed();
        let mut component = vec![usize::MAX; n];
        for (c, &s) in order.iter().rev().enumerate() {
            if component[s] != usize::MAX {
                continue;
            }
            component[s] = c;
            let mut stack = vec![s];
            while let Some(v) = stack.pop() {
                for &w in &rev[v] {
                    if component[w] == usize::MAX {
                        component[w] = c;
                        stack.push(w);
                    }
                }
            }
        }
        component
    }
}

/// Nodes reachable in `adj` from any of `from`.
fn reachable(adj: &[Vec<usize>], from: &[usize]) -> Vec<bool> {
    let mut seen = vec![false; adj.len()];
    let mut stack = from.to_vec();
    for &s in from {
        seen[s] = true;
    }
    while let Some(v) = stack.pop() {
        for &w in &adj[v] {
            if !seen[w] {
                seen[w] = true;
                stack.push(w);
            }
        }
    }
    seen
}

#[cfg(test)]
mod tests {
    use super::forced;

    #[test]
    fn a_staircase_has_one_placing() {
        // Run 0 ends before request 1 answers, run 1 after: request 1 can
        // only hold run 0, so request 2 holds run 1.
        let cands = vec![vec![1, 2], vec![2]];
        assert_eq!(forced(&cands), vec![Some(1), Some(2)]);
    }

    #[test]
    fn two_requests_that_could_swap_get_neither() {
        let cands = vec![vec![1, 2], vec![2, 1]];
        assert_eq!(forced(&cands), vec![None, None]);
    }

    #[test]
    fn a_request_that_may_hold_none_leaves_its_candidate_open() {
        // Request 2 may have made no run: run 0 could be either's.
        let cands = vec![vec![1, 2]];
        assert_eq!(forced(&cands), vec![None]);
    }

    #[test]
    fn a_run_with_no_place_makes_its_rivals_open() {
        // Three runs, two requests: one run is someone else's or the rules
        // do not hold; the run alone with request 1 could be the odd one out.
        let cands = vec![vec![1], vec![1], vec![2]];
        assert_eq!(forced(&cands), vec![None, None, Some(2)]);
    }

    #[test]
    fn a_long_chain_is_forced_end_to_end() {
        // Run i fits requests i and i+1; the last request only the last
        // run: everything is forced, whatever the greedy start.
        let n = 5_000u32;
        let mut cands: Vec<Vec<u32>> = (0..n).map(|i| vec![i + 1, i]).collect();
        cands[0] = vec![1, 0];
        cands.push(vec![n]);
        let f = forced(&cands);
        assert!(
            f.iter().enumerate().all(|(i, q)| *q == Some(i as u32)),
            "{:?}",
            &f[..4]
        );
    }
}
