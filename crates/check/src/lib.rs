//! Limits a run is held to: `probe --budget 'total<2s,ttfb<500ms'` against
//! the worst request, and `load --slo 'p99<200ms,errors<0.1%'` against a
//! run's (or a merge's) corrected latency and error rate. Pure: parsed rules
//! and measurements in, `CheckResult`s out; the binary decides exit codes.

mod budget;
mod rules;
mod size;
mod slo;

pub use budget::{check_budget, BUDGET_METRICS};
pub use rules::{flag_rules, parse_duration, parse_rules, LimitValue, Rule};
pub use size::parse_size;
pub use slo::{slo_checks, SLO_METRICS};
