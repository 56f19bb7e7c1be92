//! A whole capture, analyzed window by window: each window runs the one
//! pipeline (attribution, every detector, breakdowns), and the results merge
//! into one answer over every exchange. Only a bounded timeline is kept, as
//! evidence for `--timeline` and the HTML report.

use crate::attribution;
use crate::exchange_groups::ExchangeGroups;
use crate::merge::{MergedBreakdowns, MergedFindings, MergedSql};
use crate::pipeline::{self, Analysis, Service};
use crate::statements::Copies;
use std::collections::{BTreeSet, HashMap, HashSet};
use whyslow_model::{CaptureSummary, CutEdges, ExchangeRole, Timeline};

/// How much of the timeline to keep as evidence.
#[derive(Debug, Clone, Copy)]
pub struct Keep {
    pub exchanges: usize,
    pub connections: usize,
    /// Per-segment events kept on those connections, in all; connections
    /// past it are kept without their events (`events_truncated`).
    pub events: usize,
}

/// Exchanges the evidence vector is given room for at once (~250 MB of
/// address space at most, touched only as it fills): growing it by doubling
/// held the old and the new vector, a third more than the evidence itself,
/// at the peak (measured: 10 MB of a 117 MB peak on a Redis+PostgreSQL file).
const RESERVED_EVIDENCE: usize = 1 << 20;

/// Which servers a capture's analysis covers.
#[derive(Debug, Clone, Default)]
pub enum Scope {
    /// Every server in the capture (a file from anywhere).
    #[default]
    Everything,
    /// The service and its backing services alone: those in `known` (found
    /// on the host while capturing) and those whose exchanges nest inside
    /// the service's requests. A capture of a host's loopback carries other
    /// programs' traffic too, which is not the service's.
    ServiceAndBacking { known: Vec<u16> },
}

/// Results of the windows so far.
pub struct WindowedAnalysis {
    given: Option<Vec<u16>>,
    scope: Scope,
    service: Option<Service>,
    backing: BTreeSet<u16>,
    findings: MergedFindings,
    breakdowns: MergedBreakdowns,
    sql: MergedSql,
    groups: ExchangeGroups,
    repeated_traces: u64,
    /// Threads that interleaved requests in some window (`rules::thread`).
    event_loops: BTreeSet<whyslow_model::Thread>,
    keep: Keep,
    evidence: Timeline,
    /// Position of each kept connection in `evidence.connections`.
    kept: HashMap<u32, usize>,
    /// Events on the kept connections.
    events: usize,
    /// Inbound requests that got their whole response.
    requests_answered: u64,
    /// Statements prepared before the capture, joined across connections.
    copies: Copies,
}

/// The merged answer.
pub struct CaptureResult {
    pub analysis: Analysis,
    /// Counts and groups; the caller adds what the reader counted (packets,
    /// exchanges, windows).
    pub summary: CaptureSummary,
    /// The first exchanges and connections, within `Keep`.
    pub evidence: Timeline,
}

impl WindowedAnalysis {
    /// `given`: the service's ports (`--service`), or None to find it from
    /// the first window.
    pub fn new(given: Option<&[u16]>, scope: Scope, keep: Keep) -> Self {
        WindowedAnalysis {
            given: given.map(<[u16]>::to_vec),
            scope,
            service: None,
            backing: BTreeSet::new(),
            findings: MergedFindings::default(),
            breakdowns: MergedBreakdowns::default(),
            sql: MergedSql::default(),
            groups: ExchangeGroups::default(),
            repeated_traces: 0,
            event_loops: BTreeSet::new(),
            keep,
            evidence: Timeline::default(),
            kept: HashMap::new(),
            events: 0,
            requests_answered: 0,
            copies: Copies::default(),
        }
    }

    /// Decides the service from what finished before the first cut; its
    /// ports are the ones whose open requests bound the cuts. None: no
    /// server's requests enclose another's yet, and more may tell
    /// (`last_chance` false).
    pub fn service_ports(&mut self, first: &Timeline, last_chance: bool) -> Option<Vec<u16>> {
        let service = pipeline::decide_service(first, self.given.as_deref());
        if service == Service::None && !last_chance {
            return None;
        }
        let ports = service.ports();
        self.service = Some(service);
        Some(ports)
    }

    /// The service, decided from `t` when no window decided it yet.
    fn decided(&mut self, t: &Timeline) -> Service {
        if self.service.is_none() {
            self.service_ports(t, true);
        }
        self.service.clone().unwrap_or(Service::None)
    }

    /// The service's ports, decided from `t` when no window decided them yet.
    pub fn decided_ports(&mut self, t: &Timeline) -> Vec<u16> {
        self.decided(t).ports()
    }

    /// Analyzes one window. `headers`: connections it carries only as
    /// headers (they come whole in a later window).
    /// What is not kept as evidence stays in `t`, for the caller to drop
    /// or to reuse the vectors of.
    pub fn window(&mut self, t: &mut Timeline, headers: &HashSet<u32>) {
        self.window_within(t, headers, CutEdges::default());
    }

    /// `window`, for one whose `edges` forced cuts made.
    pub fn window_within(&mut self, t: &mut Timeline, headers: &HashSet<u32>, edges: CutEdges) {
        let service = self.decided(t);
        if let Scope::ServiceAndBacking { known } = &self.scope {
            let service_ports = service.ports();
            let mut servers = attribution::nested_servers(t, &service_ports);
            servers.extend(service_ports.iter().chain(known));
            t.retain_servers(&servers);
        }
        self.copies.relabel(t);
        let a = pipeline::analyze_within(t, service, edges);
        self.requests_answered += t
            .exchanges
            .iter()
            .filter(|e| e.role == ExchangeRole::Inbound && e.response_last_at_us.is_some())
            .count() as u64;
        self.backing.extend(a.backing);
        self.findings.add(a.findings);
        self.breakdowns.add(a.time_breakdown);
        self.sql.add(a.sql_summary);
        self.groups.add(t, headers, &a.attributed.ambiguous_kind);
        self.repeated_traces += a.attributed.repeated_traces as u64;
        self.event_loops.extend(a.attributed.event_loops);
        self.keep_evidence(t, headers);
    }

    /// Keeps the first exchanges and connections. A connection kept as a
    /// header is replaced when it comes whole.
    fn keep_evidence(&mut self, t: &mut Timeline, headers: &HashSet<u32>) {
        let room = self
            .keep
            .exchanges
            .saturating_sub(self.evidence.exchanges.len());
        if self.evidence.exchanges.capacity() == 0 {
            let all = self.keep.exchanges.min(RESERVED_EVIDENCE);
            self.evidence.exchanges.reserve_exact(all);
        }
        self.evidence
            .exchanges
            .extend(t.exchanges.drain(..room.min(t.exchanges.len())));
        for mut c in std::mem::take(&mut t.connections) {
            let events = c.segments.len() + c.acks.len();
            if self.events + events > self.keep.events {
                c.segments = Vec::new();
                c.acks = Vec::new();
                // Cut, when events were kept at all: a report that keeps
                // none (the text alone) asked for none.
                c.events_truncated |= events > 0 && self.keep.events > 0;
            } else {
                self.events += events;
            }
            match self.kept.get(&c.id) {
                Some(&i) if !headers.contains(&c.id) => self.evidence.connections[i] = c,
                Some(_) => {}
                None if self.kept.len() < self.keep.connections => {
                    self.kept.insert(c.id, self.evidence.connections.len());
                    self.evidence.connections.push(c);
                }
                None => {}
            }
        }
    }

    pub fn finish(self) -> CaptureResult {
        let mut summary = CaptureSummary::default();
        self.groups.finish(&mut summary);
        summary.kept_exchanges = self.evidence.exchanges.len() as u64;
        summary.kept_connections = self.evidence.connections.len() as u64;
        summary.connections_events_cut = self
            .evidence
            .connections
            .iter()
            .filter(|c| c.events_truncated)
            .count() as u64;
        summary.requests_answered = self.requests_answered;
        summary.repeated_trace_ids = self.repeated_traces;
        summary.event_loops = self.event_loops.into_iter().collect();
        let service = self.service.unwrap_or(Service::None);
        summary.service = service.choice();
        summary.backing_ports = self.backing.iter().copied().collect();
        let mut evidence = self.evidence;
        evidence.sort();
        CaptureResult {
            analysis: Analysis {
                service,
                backing: self.backing.into_iter().collect(),
                findings: self.findings.finish(),
                time_breakdown: self.breakdowns.finish(),
                sql_summary: self.sql.finish(),
                attributed: Default::default(),
            },
            summary,
            evidence,
        }
    }
}
