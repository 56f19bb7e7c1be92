//! Scenarios: a case study on loopback, broken or fixed, with the truth it injects.

use crate::http1::{self, AppConfig};
use crate::proxy::{self, ProxyConfig};
use std::net::SocketAddr;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use whyslow_model::FindingKind;

/// Linux's minimum delayed-ACK timeout, TCP_DELACK_MIN = HZ/25 (include/net/tcp.h).
pub const LINUX_DELACK_MIN_US: u64 = 40_000;

/// What a scenario injects: the cause a diagnosis must name and what it costs.
#[derive(Debug, Clone, Copy)]
pub struct Truth {
    /// None: nothing is wrong, a diagnosis must find nothing.
    pub kind: Option<FindingKind>,
    /// Time lost per affected request.
    pub time_lost_us: u64,
}

#[derive(Debug, Clone, Copy)]
pub struct Scenario {
    pub name: &'static str,
    /// The case study it reproduces (file prefix in cases/).
    pub case: &'static str,
    pub summary: &'static str,
    pub broken: &'static str,
    pub fixed: &'static str,
    pub method: &'static str,
    pub path: &'static str,
    pub body: &'static str,
    /// Truth of the broken variant; the fixed variant injects nothing of that kind.
    pub truth: Truth,
}

pub const SCENARIOS: &[Scenario] = &[
    Scenario {
        name: "post-stall",
        case: "000",
        summary: "POST through a proxy that delays its ACKs (HAProxy 1.4.18)",
        broken: "proxy keeps delayed ACKs on incomplete requests; clients that write headers and body separately without TCP_NODELAY stall",
        fixed: "proxy re-enables TCP_QUICKACK on incomplete requests (HAProxy 1.4.19)",
        method: "POST",
        path: "/search",
        body: "{\"query\":{\"match\":{\"name\":\"whyslow\"}}}",
        truth: Truth { kind: Some(FindingKind::NagleDelayedAck), time_lost_us: LINUX_DELACK_MIN_US },
    },
    Scenario {
        name: "healthy",
        case: "-",
        summary: "a well-behaved service: nothing to find",
        broken: "the same service (nothing is broken)",
        fixed: "the same service",
        method: "GET",
        path: "/",
        body: "",
        truth: Truth { kind: None, time_lost_us: 0 },
    },
];

pub fn find(name: &str) -> Option<&'static Scenario> {
    SCENARIOS.iter().find(|s| s.name == name)
}

/// A started scenario. Its servers stop when this is dropped.
pub struct Running {
    pub url: String,
    /// Every port the scenario listens on: the front door and the backing services.
    pub ports: Vec<u16>,
    tasks: Vec<JoinHandle<()>>,
}

impl Drop for Running {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

async fn listen() -> std::io::Result<(TcpListener, SocketAddr)> {
    let l = TcpListener::bind("127.0.0.1:0").await?;
    let a = l.local_addr()?;
    Ok((l, a))
}

impl Scenario {
    /// Starts the scenario's servers on loopback (ephemeral ports).
    pub async fn start(&self, fixed: bool) -> std::io::Result<Running> {
        match self.name {
            "post-stall" => {
                let (app_l, app) = listen().await?;
                let (proxy_l, front) = listen().await?;
                let app_task = tokio::spawn(http1::serve(app_l, AppConfig::default()));
                let cfg = ProxyConfig {
                    upstream: app,
                    quickack_on_partial: fixed,
                };
                let proxy_task = tokio::spawn(proxy::serve(proxy_l, cfg));
                Ok(Running {
                    url: format!("http://{front}{}", self.path),
                    ports: vec![front.port(), app.port()],
                    tasks: vec![proxy_task, app_task],
                })
            }
            _ => {
                let (l, a) = listen().await?;
                let task = tokio::spawn(http1::serve(l, AppConfig::default()));
                Ok(Running {
                    url: format!("http://{a}{}", self.path),
                    ports: vec![a.port()],
                    tasks: vec![task],
                })
            }
        }
    }
}
