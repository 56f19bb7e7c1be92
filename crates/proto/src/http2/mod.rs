//! HTTP/2 (h2c) exchanges from a byte stream (placeholder: filled in by its analyzer).

use crate::{Sniff, Start, StreamAnalyzer};
use whyslow_model::{Direction, Exchange};

/// Incremental HTTP/2 (h2c) analyzer for one TCP connection.
#[derive(Debug)]
pub struct Http2Analyzer {
    connection: u32,
}

impl Http2Analyzer {
    pub fn new(connection: u32, _start: Start) -> Self {
        Http2Analyzer { connection }
    }

    pub fn after_h2c_upgrade(connection: u32, _label: String, _request: crate::Span) -> Self {
        Http2Analyzer { connection }
    }

    /// Do these first client bytes (from `start`) look like HTTP/2 (h2c)?
    pub fn sniff(_client: &[u8], _start: Start) -> Sniff {
        Sniff::No
    }
}

impl StreamAnalyzer for Http2Analyzer {
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
