//! The built-in lab: small real servers on loopback that reproduce the case
//! studies, each in a broken and a fixed variant, each declaring the truth it
//! injects so a diagnosis can be checked against it.

pub mod cache;
pub mod delay_line;
pub mod dnsmini;
pub mod grpc;
pub mod hosts;
pub mod http1;
pub mod latency;
pub mod line;
pub mod mymini;
pub mod pgmini;
pub mod pki;
pub mod pool;
pub mod proxy;
pub mod respmini;
pub mod scenario;
pub mod scenarios;
pub mod tls_h2;
pub mod truth;
pub mod work;

pub use scenario::{find, listing, named, Fact, LoadHint, Running, Scenario, Truth, SCENARIOS};
