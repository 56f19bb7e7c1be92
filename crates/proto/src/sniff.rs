//! Choosing a protocol analyzer for a stream (placeholder).
