//! One file per scenario. A new case study is a new file here plus one line in
//! `scenario::SCENARIOS`.

pub mod healthy;
pub mod post_stall;
