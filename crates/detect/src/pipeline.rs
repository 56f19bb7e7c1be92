//! The pipeline every window of a capture runs through: which server
//! is the service under investigation (given, or found from the wire), which
//! inbound request each backing call served, then every detector.

use crate::attribution;
use crate::Measured;
use crate::{background, breakdown, pool_queueing, request_calls, sql_summary};
use whyslow_model::{
    CutEdges, Finding, ServiceChoice, ServiceHow, SqlSummary, TimeBreakdown, Timeline,
};

/// How the service under investigation was chosen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Service {
    /// Given by the user (`--service`) or by the command (diagnose's target).
    Given(Vec<u16>),
    /// Found from the wire: the server whose requests enclose other servers' exchanges.
    Found(u16),
    /// No server's requests enclose another's: every exchange stands alone.
    None,
}

impl Service {
    /// As the document says it.
    pub fn choice(&self) -> ServiceChoice {
        let how = match self {
            Service::Given(_) => ServiceHow::Given,
            Service::Found(_) => ServiceHow::Found,
            Service::None => ServiceHow::None,
        };
        ServiceChoice {
            ports: self.ports(),
            how,
        }
    }

    pub fn ports(&self) -> Vec<u16> {
        match self {
            Service::Given(p) => p.clone(),
            Service::Found(p) => vec![*p],
            Service::None => Vec::new(),
        }
    }
}

/// What the pipeline computed besides the roles and parents it set on the timeline.
#[derive(Debug)]
pub struct Analysis {
    pub service: Service,
    /// Servers whose exchanges nest inside the service's requests.
    pub backing: Vec<u16>,
    pub findings: Vec<Finding>,
    /// Where each kind of inbound request spent its time (empty without a service).
    pub time_breakdown: Vec<TimeBreakdown>,
    /// The SQL each kind of inbound request sent (empty without a service).
    pub sql_summary: Vec<SqlSummary>,
    /// What attribution found besides parents and levels.
    pub attributed: attribution::Attributed,
}

/// The service under investigation: given, or found from the wire.
pub fn decide_service(timeline: &Timeline, given: Option<&[u16]>) -> Service {
    match given {
        Some(ports) => Service::Given(ports.to_vec()),
        None => attribution::find_service(timeline).map_or(Service::None, Service::Found),
    }
}

/// Analyzes one window with the service already decided (as the first
/// window decided it), `edges`: the cuts forced on it: attributes calls to
/// requests (setting roles and parents), runs every detector, marks
/// background findings and breaks requests' time down. A whole capture
/// goes through `windowed`, which judges the windows' findings once.
pub fn analyze_within(timeline: &mut Timeline, service: Service, edges: CutEdges) -> Analysis {
    let service_ports = service.ports();
    let (backing, attributed) = if service_ports.is_empty() {
        (Vec::new(), attribution::Attributed::default())
    } else {
        let attributed = attribution::attribute_through(timeline, &service_ports, edges);
        (
            attribution::nested_servers(timeline, &service_ports),
            attributed,
        )
    };
    let (requests, pools) = request_calls::by_request_and_pools(timeline, &attributed.held_runs);
    let ambiguous_runs = request_calls::ambiguous_runs(timeline, &attributed.held_runs);
    let mut findings = crate::run_all(&Measured::of(timeline, &requests, &ambiguous_runs, &pools));
    drop((ambiguous_runs, pools));
    if !service_ports.is_empty() {
        background::mark(&mut findings, timeline, &service_ports);
    }
    Finding::sort(&mut findings);
    if service_ports.is_empty() {
        return Analysis {
            service,
            backing,
            findings,
            time_breakdown: Vec::new(),
            sql_summary: Vec::new(),
            attributed,
        };
    }
    let time_breakdown = breakdown::summarize(&requests);
    let sql_summary = sql_summary::summarize(&requests);
    let waits = pool_queueing::queued_calls(&requests);
    drop(requests);
    mark_pool_waits(timeline, &waits);
    Analysis {
        service,
        backing,
        findings,
        time_breakdown,
        sql_summary,
        attributed,
    }
}

/// Sets each queued call's `pool_wait_from_us` (`waits`: by exchange id).
fn mark_pool_waits(timeline: &mut Timeline, waits: &[(u32, u64)]) {
    if waits.is_empty() {
        return;
    }
    for e in &mut timeline.exchanges {
        if let Ok(i) = waits.binary_search_by_key(&e.id, |w| w.0) {
            e.pool_wait_from_us = Some(waits[i].1.min(e.request_first_at_us));
        }
    }
}
