//! Protocol analyzers: reassembled TCP byte streams → `Exchange`s.
//! One analyzer per protocol, each fed incrementally so memory does not grow
//! with the size of bodies or the length of a connection.

pub mod fuzz;
pub mod http1;

use whyslow_model::{Direction, Exchange};

/// An incremental analyzer for one connection. The flow reassembler calls
/// `on_data` with in-order bytes per direction, `on_gap` when bytes were never
/// captured, and `finish` at the end of the connection or capture.
pub trait StreamAnalyzer {
    /// `at_us`/`packet`: capture time and number of the segment that carried `data`.
    fn on_data(&mut self, direction: Direction, data: &[u8], at_us: u64, packet: u64);
    /// Bytes missing from the capture in this direction; the analyzer resynchronises or gives up.
    fn on_gap(&mut self, direction: Direction, missing: u64);
    /// Exchanges completed so far are moved out (ids not yet assigned: 0).
    fn take_exchanges(&mut self) -> Vec<Exchange>;
    /// End of the connection: flush a partial exchange, if any.
    fn finish(&mut self) -> Vec<Exchange>;
    /// First parse error met, if any (the analyzer stops after it).
    fn error(&self) -> Option<&str>;
}
