//! Thresholds shared by several detectors, with where each number comes from.

/// Linux TCP_DELACK_MIN = HZ/25 = 40 ms (include/net/tcp.h). A delayed ACK
/// never fires sooner; we accept 30 ms to allow for timer granularity and HZ.
pub const DELAYED_ACK_MIN_US: u64 = 30_000;

/// Linux TCP_DELACK_MAX = HZ/5 = 200 ms; Windows delays ~200 ms (KB214397).
/// Allow scheduling slack above it.
pub const DELAYED_ACK_MAX_US: u64 = 250_000;
