//! The attribution rules, one per file. Each reads the timeline (or the
//! units of calls left after the call rules) and the side table, and
//! decides only what no earlier rule decided; the order is in `super`.

pub mod affinity;
pub mod bracket;
pub mod checkout;
pub mod fingerprint;
pub mod lookup;
pub mod sole_candidate;
pub mod span_parent;
pub mod thread;
pub mod trace_context;
pub mod trace_group;
pub mod transaction;
