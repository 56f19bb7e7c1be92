//! memcached (text and meta commands) exchanges from a byte stream (placeholder: filled in by its analyzer).

use crate::{Sniff, Start, StreamAnalyzer};
use whyslow_model::{Direction, Exchange};

/// Incremental memcached (text and meta commands) analyzer for one TCP connection.
#[derive(Debug)]
pub struct MemcachedAnalyzer {
    connection: u32,
}

impl MemcachedAnalyzer {
    pub fn new(connection: u32, _start: Start) -> Self {
        MemcachedAnalyzer { connection }
    }

    /// Do these first client bytes (from `start`) look like memcached (text and meta commands)?
    pub fn sniff(_client: &[u8], _start: Start) -> Sniff {
        Sniff::No
    }
}

impl StreamAnalyzer for MemcachedAnalyzer {
    fn on_data(&mut self, _direction: Direction, _data: &[u8], _at_us: u64, _packet: u64) {
        let _ = self.connection;
    }
    fn on_gap(&mut self, _direction: Direction, _missing: u64) {}
    fn take_exchanges(&mut self) -> Vec<Exchange> {
        Vec::new()
    }
    fn finish(&mut self) -> Vec<Exchange> {
        Vec::new()
    }
    fn error(&self) -> Option<&str> {
        None
    }
}
