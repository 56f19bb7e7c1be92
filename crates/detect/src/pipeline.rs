//! The one analysis pipeline every command runs on a timeline: which server
//! is the service under investigation (given, or found from the wire), which
//! inbound request each backing call served, then every detector.

use crate::attribution;
use whyslow_model::{Finding, Timeline};

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
    pub fn ports(&self) -> Vec<u16> {
        match self {
            Service::Given(p) => p.clone(),
            Service::Found(p) => vec![*p],
            Service::None => Vec::new(),
        }
    }
}

/// What the pipeline computed besides the roles and parents it set on the timeline.
#[derive(Debug, Clone)]
pub struct Analysis {
    pub service: Service,
    /// Servers whose exchanges nest inside the service's requests.
    pub backing: Vec<u16>,
    pub findings: Vec<Finding>,
}

/// Attributes calls to requests (setting roles and parents) and runs every
/// detector. `service`: the service's ports, or None to find it from the wire.
pub fn analyze(timeline: &mut Timeline, service: Option<&[u16]>) -> Analysis {
    let service = match service {
        Some(ports) => Service::Given(ports.to_vec()),
        None => attribution::find_service(timeline).map_or(Service::None, Service::Found),
    };
    let front = service.ports();
    let backing = if front.is_empty() {
        Vec::new()
    } else {
        attribution::attribute(timeline, &front);
        attribution::nested_servers(timeline, &front)
    };
    let findings = crate::run_all(timeline);
    Analysis {
        service,
        backing,
        findings,
    }
}
