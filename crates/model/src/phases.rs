use serde::{Deserialize, Serialize};

/// The named phases of one request, as an instrumented client sees them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PhaseName {
    Dns,
    Connect,
    Tls,
    Send,
    Wait,
    Receive,
    Total,
}

impl PhaseName {
    pub const ALL: [PhaseName; 7] = [
        PhaseName::Dns,
        PhaseName::Connect,
        PhaseName::Tls,
        PhaseName::Send,
        PhaseName::Wait,
        PhaseName::Receive,
        PhaseName::Total,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            PhaseName::Dns => "dns",
            PhaseName::Connect => "connect",
            PhaseName::Tls => "tls",
            PhaseName::Send => "send",
            PhaseName::Wait => "wait",
            PhaseName::Receive => "receive",
            PhaseName::Total => "total",
        }
    }

    pub fn parse(s: &str) -> Option<PhaseName> {
        let s = s.trim().to_ascii_lowercase();
        Some(match s.as_str() {
            "dns" | "namelookup" => PhaseName::Dns,
            "connect" | "tcp" => PhaseName::Connect,
            "tls" | "ssl" => PhaseName::Tls,
            "send" => PhaseName::Send,
            "wait" => PhaseName::Wait,
            "receive" | "download" => PhaseName::Receive,
            "total" => PhaseName::Total,
            _ => return None,
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TlsInfo {
    /// "TLSv1.3", "TLSv1.2".
    pub version: String,
    pub cipher: String,
    /// Protocol agreed by ALPN ("h2", "http/1.1"), if any.
    pub alpn: Option<String>,
    /// True when the session was resumed (abbreviated handshake).
    pub resumed: bool,
}

/// The client's view of one request: phases (durations) in microseconds.
/// dns + connect + tls + send + wait + receive = total, up to scheduling noise.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RequestPhases {
    /// 0-based index of the request in the run.
    pub index: u32,
    /// 0-based id of the client connection that carried it.
    pub connection: u32,
    /// False when the request opened its connection.
    pub reused: bool,
    pub dns_us: u64,
    pub connect_us: u64,
    pub tls_us: u64,
    pub send_us: u64,
    pub wait_us: u64,
    pub receive_us: u64,
    pub total_us: u64,
    pub status: u16,
    /// "1.1" or "2".
    pub http_version: String,
    pub remote: Option<std::net::SocketAddr>,
    pub local: Option<std::net::SocketAddr>,
    pub request_bytes: u64,
    pub response_header_bytes: u64,
    pub response_body_bytes: u64,
    pub content_encoding: Option<String>,
    pub tls: Option<TlsInfo>,
}

impl RequestPhases {
    pub fn phase_us(&self, p: PhaseName) -> u64 {
        match p {
            PhaseName::Dns => self.dns_us,
            PhaseName::Connect => self.connect_us,
            PhaseName::Tls => self.tls_us,
            PhaseName::Send => self.send_us,
            PhaseName::Wait => self.wait_us,
            PhaseName::Receive => self.receive_us,
            PhaseName::Total => self.total_us,
        }
    }

    /// Time to first byte as curl counts it: from the start up to the first response byte.
    pub fn ttfb_us(&self) -> u64 {
        self.dns_us + self.connect_us + self.tls_us + self.send_us + self.wait_us
    }
}

/// A name looked up as glibc's stub resolver does (resolv.conf's search
/// list and `ndots`, `timeout:` and `attempts:`), each name it asked timed.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct DnsWalk {
    /// The name as given.
    pub name: String,
    /// The nameserver asked (resolv.conf's first).
    pub resolver: String,
    pub ndots: u32,
    pub steps: Vec<DnsStep>,
    pub total_us: u64,
    /// Names asked before the one that answered with addresses (the search
    /// list's expansion), and their time.
    pub search_names: u32,
    pub search_us: u64,
    /// Time spent waiting for answers that never came, over every name.
    pub retry_us: u64,
}

/// One name of a walk: A and AAAA asked together on one socket, until
/// answered or out of attempts.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct DnsStep {
    pub name: String,
    /// "NOERROR", "NXDOMAIN", … or "no answer".
    pub answer: String,
    /// Addresses the answers gave.
    pub addresses: u32,
    /// Times the questions were sent (1: answered at the first try).
    pub tries: u32,
    pub us: u64,
    /// Of `us`, the time spent waiting on tries that went unanswered.
    pub retry_us: u64,
}

impl DnsWalk {
    /// Adds `step`, and what the steps so far add up to.
    pub fn push(&mut self, step: DnsStep) {
        self.steps.push(step);
        let answered = self.steps.iter().any(|s| s.addresses > 0);
        let before = self.steps.iter().take_while(|s| s.addresses == 0);
        let (n, us) = before.fold((0, 0), |(n, us), s| (n + 1, us + s.us));
        (self.search_names, self.search_us) = if answered { (n, us) } else { (0, 0) };
        self.retry_us = self.steps.iter().map(|s| s.retry_us).sum();
    }
}
