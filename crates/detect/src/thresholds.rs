//! Thresholds shared by several detectors, with where each number comes from.

use whyslow_model::Population;

/// Linux TCP_DELACK_MIN = HZ/25 = 40 ms (include/net/tcp.h). A delayed ACK
/// never fires sooner; we accept 30 ms to allow for timer granularity and HZ.
pub const DELAYED_ACK_MIN_US: u64 = 30_000;

/// Linux TCP_DELACK_MAX = HZ/5 = 200 ms; Windows delays ~200 ms (KB214397).
/// Allow scheduling slack above it.
pub const DELAYED_ACK_MAX_US: u64 = 250_000;

/// Share of an inbound request's time below which a cost is not worth a
/// finding: Sentry's consecutive-DB detector asks for ≥ 10 % of the transaction.
pub const WORTH_SHARE: f64 = 0.10;

/// Share of an inbound request's time above which one part "dominates" it
/// (slow_dependency, server_time, large_response): more than half.
pub const DOMINANT_SHARE: f64 = 0.5;

/// A part of a request is slow from 100 ms: the limit under which people
/// feel a response as instant (Nielsen), and Sentry's minimum saving for its
/// consecutive-DB and -HTTP detectors.
pub const SLOW_PART_US: u64 = 100_000;

/// Share of the requests that could show a cause (told apart, with their
/// own time known or calls to the server) it must be seen in before it is
/// named as the service's: a cause of the service's latency shows on many
/// of its requests; what one or two requests in dozens show on a loaded
/// host is a stall. Measured: a Python front descheduled once (one page
/// of 28, 145 ms in itself), a checkout of 204 whose first statement went
/// out 12 ms late while eight threads shared an interpreter lock, a page of
/// 24 whose eleven calls took 100 ms. One of two sequential probes counts.
pub const MIN_REQUEST_SHARE: f64 = 0.1;

/// `hits` requests of `of`, as a cause seen on them is judged: named
/// from `MIN_REQUEST_SHARE` of them.
pub fn requests_seen(hits: usize, of: usize) -> Population {
    Population::share_of(hits, of, MIN_REQUEST_SHARE)
}
