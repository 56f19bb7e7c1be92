//! One file per scenario. A new case study is a new file here plus one line in
//! `scenario::SCENARIOS`.

pub mod cache_hol;
pub mod dns_lookups;
pub mod fanout_pool;
pub mod grpc_streams;
pub mod healthy;
pub mod orm_storm;
pub mod post_stall;
pub mod tax_stall;
