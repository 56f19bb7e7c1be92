//! The common record model of whyslow: what every source produces and every
//! detector and report consumes. Active sources (probe, load) and passive ones
//! (captures) fill the same types.
//!
//! Units: times are microseconds. Absolute instants (`*_at_us`) count from the
//! Unix epoch (packet timestamps come from the kernel in that base); durations
//! end in `_us`.

mod agent_window;
mod breakdown;
mod capture_summary;
mod comparison;
mod document;
mod finding;
mod host;
pub mod load_record;
mod load_result;
mod phases;
pub mod prepared;
mod report;
mod sql_summary;
pub mod stats;
mod subject;
mod timeline;
mod trace;
pub mod unix_socket;
mod workload;

pub use agent_window::{
    AgentCost, AgentWindow, ExportCounts, RequestKind, RingState, WindowFinding, WorkloadWindow,
};
pub use breakdown::{BackingTime, TimeBreakdown};
pub use capture_summary::{
    CaptureGaps, CaptureSummary, ConnectionGaps, ExchangeGroup, HostClock, PortPackets,
    ServerCount, ServiceChoice, ServiceHow, SpanSource, ThreadSource, TunnelPackets,
};
pub use comparison::{Change, ComparedRun, ComparedStat, Comparison, FindingChange, ShiftTest};
pub use document::{
    CaptureInfo, ClientView, ConcurrentRow, DemoDocument, DemoRow, DiagnoseDocument, HostsRow,
    LoadDocument, AS_GIVEN, FRESH, SPLIT_NO_NODELAY,
};
pub use finding::{Evidence, Facts, Finding, FindingKind, Population, Severity};
pub use host::{HostReport, HostSample, ResourceUse};
pub use load_record::{Interval, Metric, Recorded};
pub use load_result::{
    IntervalPoint, Knee, LoadResult, Percentiles, RunSetup, Step, LOAD_FORMAT, LOAD_VERSION,
};
pub use phases::{DnsStep, DnsWalk, PhaseName, RequestPhases, TlsInfo};
pub use report::{CheckResult, Report, ReportSection, Skipped, SCHEMA_VERSION};
/// Exchange labels: short ones inline, long ones shared, so that an
/// analyzer hands the same label to many exchanges without copying it.
pub use smol_str::SmolStr;
pub use sql_summary::{DnsCounts, SqlRequest, SqlShape, SqlSummary, StatementCounts};
pub use subject::{Place, Subject};
pub use timeline::{
    AckEvent, CloseKind, Connection, Direction, DirectionStats, Exchange, ExchangeRole, Gap,
    Protocol, Protocols, Segment, SegmentFlags, Status, Timeline, TlsFacts, TxState, GAPS_KEPT,
    WAITED_MIN_US,
};
pub use trace::{
    Attribution, AttributionCounts, CutEdges, Rule, Thread, ThreadStart, TraceId, GOROUTINE_BIT,
};
pub use workload::{Container, Pod, ServerWorkload, Workload};

/// Milliseconds for people, from microseconds kept internally.
pub fn ms(us: u64) -> f64 {
    us as f64 / 1000.0
}

/// "16.0 MiB", "512 B": sizes for people.
pub fn fmt_bytes(n: u64) -> String {
    const KIB: f64 = 1024.0;
    let b = n as f64;
    if b >= KIB * KIB {
        format!("{:.1} MiB", b / (KIB * KIB))
    } else if b >= KIB {
        format!("{:.1} KiB", b / KIB)
    } else {
        format!("{n} B")
    }
}

/// "2s", "500ms", "250us", "1.5s", "2m"; a bare number is seconds (as curl's -m).
pub fn parse_duration(s: &str) -> Result<std::time::Duration, String> {
    let s = s.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: f64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not a duration (try 500ms, 2s)"))?;
    let scale = match unit.trim() {
        "" | "s" => 1.0,
        "ms" => 1e-3,
        "us" | "µs" => 1e-6,
        "m" | "min" => 60.0,
        other => return Err(format!("unknown unit {other:?} in {s:?} (us, ms, s, m)")),
    };
    if !n.is_finite() || n < 0.0 || n * scale > 1e9 {
        return Err(format!("{s:?} is out of range"));
    }
    Ok(std::time::Duration::from_secs_f64(n * scale))
}

/// "12.34 ms", with a precision that suits the size: the one way every
/// command shows a time to people.
pub fn fmt_ms(us: u64) -> String {
    let ms = ms(us);
    if ms >= 100.0 {
        format!("{ms:.0} ms")
    } else if ms >= 10.0 {
        format!("{ms:.1} ms")
    } else {
        format!("{ms:.2} ms")
    }
}
