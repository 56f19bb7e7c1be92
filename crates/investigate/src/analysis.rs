//! The one analysis path. Every source feeds it connections and exchanges;
//! it cuts them into bounded windows, decides the service under
//! investigation, attributes each backing call to the request it served,
//! runs every detector and merges the windows into one answer. `analyze`
//! (a capture file) and `diagnose` (its own live capture, once stopped)
//! both come here, so a change to analysis is made once and memory stays
//! flat however long the capture.

use std::path::{Path, PathBuf};
use whyslow_detect::pipeline::Analysis;
use whyslow_detect::stall_coverage;
use whyslow_detect::windowed::{CaptureResult, Keep, Scope, WindowedAnalysis};
use whyslow_ebpf::ThreadIndex;
use whyslow_model::{CaptureSummary, FindingKind, Protocol, Report, Skipped, Timeline};
use whyslow_wire::{windows_from_file, AnalyzeOutcome, FlowOptions, Window, WindowSink};

/// Where the connections and exchanges come from.
#[derive(Debug, Clone, Copy)]
pub enum CaptureSource<'a> {
    /// A pcap or pcapng file (tcpdump -w, Wireshark, whyslow capture), or
    /// an OTLP trace file (JSON lines or framed protobuf, gzip or not).
    File(&'a Path),
}

/// What the analysis is told besides what it reads.
#[derive(Debug, Clone, Default)]
pub struct AnalysisOptions {
    /// The service's ports (`--service`, diagnose's target); None: found
    /// from the wire.
    pub service: Option<Vec<u16>>,
    /// Of traces: the service whose requests are analyzed (`--service-name`);
    /// None: the one whose requests made the most calls.
    pub service_name: Option<String>,
    /// Which servers to cover.
    pub scope: Scope,
    /// Memory bounds, window policy, key log and known listeners.
    pub flow: FlowOptions,
    /// Keep the first exchanges and their connections' events, within the
    /// bounds, as evidence (`--timeline`, `--html`). Without it only the
    /// connections are kept: what is not shown is not held.
    pub evidence: bool,
    /// eBPF socket calls to join to the exchanges (an events file of
    /// `capture --ebpf`): each exchange gains its thread.
    pub events: Option<PathBuf>,
}

pub use crate::events::MAX_SOCKET_CALLS;

/// Everything the analysis found, before anything is rendered.
#[derive(Debug)]
pub struct CaptureAnalysis {
    pub analysis: Analysis,
    pub summary: CaptureSummary,
    /// The first exchanges and connections, within the `--max-*` bounds.
    pub evidence: Timeline,
    /// Causes that could not be examined, and why.
    pub skipped: Vec<Skipped>,
    /// Problems that did not stop the analysis (a stream that could not be parsed).
    pub errors: Vec<String>,
    /// Set when the capture was cut or corrupt: the result covers what was read.
    pub partial: Option<String>,
}

impl AnalysisOptions {
    /// The events file to join: the one given, else the one `capture
    /// --ebpf` wrote beside `capture`, if it did.
    pub fn events_for(capture: &Path, given: Option<PathBuf>) -> Option<PathBuf> {
        given.or_else(|| {
            let beside = whyslow_ebpf::events_path(capture);
            beside.exists().then_some(beside)
        })
    }

    /// The flow table's default options, with windows cut once they hold
    /// the requests a stall period needs (`periodic_stall`).
    pub fn default_flow() -> FlowOptions {
        let mut flow = FlowOptions::default();
        flow.window.requests = stall_coverage::requests_per_window();
        flow
    }
}

/// Share of `--max-events-total` kept as evidence on finished connections:
/// a quarter, so the evidence stops growing early in a large capture and
/// the rest stays for the flows still open.
const EVIDENCE_EVENTS_SHARE: usize = 4;

/// Hands the capture's windows to the whole-capture analysis, each
/// exchange given its thread first when there are socket calls to join.
struct Sink<'a> {
    whole: &'a mut WindowedAnalysis,
    threads: Option<(ThreadIndex, u64)>,
}

impl WindowSink for Sink<'_> {
    fn service_ports(&mut self, first: &Timeline, last_chance: bool) -> Option<Vec<u16>> {
        self.whole.service_ports(first, last_chance)
    }
    fn window(&mut self, w: &mut Window) {
        if let Some((index, joined)) = &mut self.threads {
            let ports = self.whole.decided_ports(&w.timeline);
            *joined += index.annotate(&mut w.timeline, &ports) as u64;
        }
        self.whole
            .window_within(&mut w.timeline, &w.headers, w.edges);
    }
}

/// Whether `path` holds OTLP traces rather than packets (by its first bytes).
pub(crate) fn is_trace_file(path: &Path) -> bool {
    use std::io::Read;
    let mut head = [0u8; 64];
    let n = std::fs::File::open(path)
        .and_then(|mut f| f.read(&mut head))
        .unwrap_or(0);
    whyslow_otlp::import::looks_like_otlp(&head[..n])
}

/// What the analysis keeps as evidence: within the bounds, and nothing
/// past the connections without `evidence`.
pub(crate) fn evidence_keep(opts: &AnalysisOptions) -> Keep {
    let bounds = &opts.flow.bounds;
    Keep {
        exchanges: if opts.evidence {
            bounds.max_exchanges
        } else {
            0
        },
        connections: bounds.max_connections,
        events: if opts.evidence {
            bounds.max_events_total / EVIDENCE_EVENTS_SHARE
        } else {
            0
        },
    }
}

/// Analyzes a capture. Err: the source cannot be read as a capture at all.
pub fn analyze_capture(
    source: CaptureSource,
    opts: &AnalysisOptions,
) -> Result<CaptureAnalysis, String> {
    let CaptureSource::File(path) = source;
    if is_trace_file(path) {
        let set = whyslow_otlp::import::read_file(path)?;
        return crate::spans::analyze_spans(set, &path.display().to_string(), opts);
    }
    analyze_windows(opts, |flow, sink| {
        windows_from_file(path, flow, sink).map_err(|e| format!("{}: {e}", path.display()))
    })
}

/// The windows `read` hands out (from `opts.flow`, with what the events
/// file adds), analyzed as one capture.
pub(crate) fn analyze_windows(
    opts: &AnalysisOptions,
    read: impl FnOnce(&FlowOptions, &mut (dyn WindowSink + Send)) -> Result<AnalyzeOutcome, String>,
) -> Result<CaptureAnalysis, String> {
    let keep = evidence_keep(opts);
    let mut whole = WindowedAnalysis::new(opts.service.as_deref(), opts.scope.clone(), keep);
    // An events file that cannot be read is a note: the packets still tell
    // everything but the threads.
    let mut flow = opts.flow.clone();
    let (threads, mut thread_source, events_problems) =
        match opts.events.as_deref().map(crate::events::read) {
            Some(Ok(read)) => {
                flow.plaintext = read.plaintext;
                flow.listening.extend(read.server_ports);
                (Some((read.threads, 0)), Some(read.summary), read.problems)
            }
            Some(Err(why)) => (None, None, vec![why]),
            None => (None, None, Vec::new()),
        };
    let mut sink = Sink {
        whole: &mut whole,
        threads,
    };
    let outcome = read(&flow, &mut sink)?;
    if let (Some(s), Some((_, joined))) = (thread_source.as_mut(), sink.threads) {
        s.exchanges_joined = joined;
    }
    let CaptureResult {
        mut analysis,
        mut summary,
        evidence,
    } = whole.finish();
    summary.packets = outcome.packets;
    summary.exchanges = outcome.exchanges_seen;
    summary.windows = outcome.windows;
    summary.windows_forced = outcome.windows_forced;
    summary.non_tcp_packets = outcome.non_tcp;
    summary.other_udp = outcome
        .other_udp
        .iter()
        .map(|&(port, packets)| whyslow_model::PortPackets { port, packets })
        .collect();
    summary.tunnels = outcome.tunnels.clone();
    summary.dropped_while_capturing = outcome.dropped_while_capturing;
    summary.truncated_packets = outcome.truncated_packets;
    summary.threads = thread_source;
    let traced = summary.threads.is_some();
    let mut skipped = left_encrypted(&evidence, traced);
    let stall_seen = analysis
        .findings
        .iter()
        .any(|f| f.kind == FindingKind::PeriodicStall);
    let has_service = !summary.service.ports.is_empty();
    skipped.extend(whyslow_detect::damage::withhold(
        &summary.gaps,
        has_service,
        &mut analysis.findings,
    ));
    if let Some((why, facts)) = stall_coverage::unseen(summary.requests_answered as usize)
        .filter(|_| has_service && !stall_seen)
    {
        skipped.push(Skipped {
            what: "periodic_stall".into(),
            why,
            facts,
        });
    }
    Ok(CaptureAnalysis {
        analysis,
        summary,
        evidence,
        skipped,
        errors: events_problems
            .into_iter()
            .chain(outcome.protocol_errors)
            .collect(),
        partial: outcome.error,
    })
}

impl CaptureAnalysis {
    /// Puts the result in `report`: findings, breakdowns, the capture's
    /// summary, what was not examined, and the kept timeline. `evidence`:
    /// the timeline is shown (`--timeline`, `--html`), so say when it
    /// holds less than the capture.
    pub fn fill(self, report: &mut Report, evidence: bool) {
        let s = &self.summary;
        if evidence && s.kept_exchanges < s.exchanges {
            report.errors.push(format!(
                "the timeline (--timeline, --html) holds the first {} of {} exchanges \
                 (--max-exchanges); counts, percentiles and findings cover them all",
                s.kept_exchanges, s.exchanges
            ));
        }
        report.findings.extend(self.analysis.findings);
        report.time_breakdown = self.analysis.time_breakdown;
        report.sql_summary = self.analysis.sql_summary;
        report.skipped.extend(self.skipped);
        report.errors.extend(self.partial);
        report.errors.extend(self.errors);
        report.capture = Some(self.summary);
        report.timeline = Some(self.evidence);
    }
}

/// The kept TLS connections the analysis could not open, by reason, each
/// as one line for the report: no key for the session, or opened before the
/// capture began (no ClientHello to look a key up by); with an events file
/// (`traced`), no OpenSSL call was seen on them either.
fn left_encrypted(timeline: &Timeline, traced: bool) -> Vec<Skipped> {
    const WHY: [&str; 3] = [
        "no key for their sessions: give the service's key log (SSLKEYLOGFILE) \
         with --keylog, or read OpenSSL's plaintext with --ebpf (capture, diagnose); \
         TCP-level findings only there",
        "opened before the capture began: no handshake to look a key up by; \
         have the service reconnect (restart it or its pool) while diagnosing, or read \
         OpenSSL's plaintext with --ebpf",
        "no key for their sessions, and --ebpf saw no OpenSSL call on them: their TLS \
         library is not OpenSSL's (Go's crypto/tls, rustls, Java's JSSE, NSS link none) \
         or their process was not traced; give the key log with --keylog; TCP-level \
         findings only there",
    ];
    // Connection count and servers, per reason (index into WHY).
    let mut groups: [(usize, Vec<String>); 3] = Default::default();
    for c in timeline
        .connections
        .iter()
        .filter(|c| c.protocol == Protocol::Tls)
    {
        let why = match (traced, c.syn_at_us.is_none()) {
            (true, _) => 2,
            (false, before) => usize::from(before),
        };
        let (count, servers) = &mut groups[why];
        *count += 1;
        let server = c.server.to_string();
        if !servers.contains(&server) {
            servers.push(server);
        }
    }
    groups
        .into_iter()
        .zip(WHY)
        .filter(|((count, _), _)| *count > 0)
        .map(|((count, servers), why)| Skipped {
            what: format!(
                "exchanges inside {count} TLS connection(s) to {}",
                servers.join(", ")
            ),
            why: why.into(),
            facts: whyslow_model::Facts::default().with("connections", count as f64),
        })
        .collect()
}
