//! PostgreSQL (frontend/backend protocol 3.0) exchanges from a byte stream (placeholder: filled in by its analyzer).

use crate::{Sniff, Start, StreamAnalyzer};
use whyslow_model::{Direction, Exchange};

/// Incremental PostgreSQL (frontend/backend protocol 3.0) analyzer for one TCP connection.
#[derive(Debug)]
pub struct PgAnalyzer {
    connection: u32,
}

impl PgAnalyzer {
    pub fn new(connection: u32, _start: Start) -> Self {
        PgAnalyzer { connection }
    }

    /// Do these first client bytes (from `start`) look like PostgreSQL (frontend/backend protocol 3.0)?
    pub fn sniff(_client: &[u8], _start: Start) -> Sniff {
        Sniff::No
    }
}

impl StreamAnalyzer for PgAnalyzer {
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
