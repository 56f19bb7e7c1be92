use crate::Protocol;
use serde::{Deserialize, Serialize};

/// Where the time of one kind of inbound request went, as a mean per
/// request so that the parts add up: `total_us` = `server_us` + `queued_us`
/// + `ambiguous_us` + every backing service's `critical_us` + `network_us`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TimeBreakdown {
    /// The service, "127.0.0.1:8080".
    pub server: String,
    /// The request kind, as exchanges name it ("GET /dashboard").
    pub request: String,
    pub requests: u32,
    /// First request byte → last response byte, at the capture point.
    pub total_us: u64,
    /// In the service itself: waiting for no backing call.
    pub server_us: u64,
    /// Backing calls waiting for a free connection of a pool.
    pub queued_us: u64,
    /// Waiting while calls ran that may have been this request's but could
    /// not be told apart from other requests' (attribution: ambiguous):
    /// neither the service's own time nor a known backing service's.
    #[serde(default, alias = "untold_us")]
    pub ambiguous_us: u64,
    /// Backing services on the critical path, most time first.
    pub backing: Vec<BackingTime>,
    /// Moving the request and the response between client and service.
    pub network_us: u64,
    /// Each part's share of `total_us` (0–1), as `with_shares` sets them.
    #[serde(default)]
    pub server_share: f64,
    #[serde(default)]
    pub queued_share: f64,
    #[serde(default, alias = "untold_share")]
    pub ambiguous_share: f64,
    #[serde(default)]
    pub network_share: f64,
}

impl TimeBreakdown {
    /// Sets every part's share of the total.
    pub fn with_shares(mut self) -> TimeBreakdown {
        let share = |us: u64| match self.total_us {
            0 => 0.0,
            total => us as f64 / total as f64,
        };
        self.server_share = share(self.server_us);
        self.queued_share = share(self.queued_us);
        self.ambiguous_share = share(self.ambiguous_us);
        self.network_share = share(self.network_us);
        for b in &mut self.backing {
            b.share = share(b.critical_us);
        }
        self
    }
}

/// One backing service's part of an inbound request's time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BackingTime {
    pub server: String,
    pub protocol: Protocol,
    pub calls_per_request: f64,
    /// Time the request waited on this service and on nothing else;
    /// waits on several services at once are shared between them.
    pub critical_us: u64,
    /// `critical_us`'s share of the request's total (0–1).
    #[serde(default)]
    pub share: f64,
    /// Of `critical_us`, the network's part: the calls' time the caller saw
    /// and the callee did not, where another host's capture holds the
    /// callee's end (`Exchange::callee_us`), in proportion. None: no call's
    /// callee end was captured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network_us: Option<u64>,
    /// Of `critical_us`, the callee's own part (the rest), where
    /// `network_us` is known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_us: Option<u64>,
}

impl BackingTime {
    /// Splits `critical_us` by `network_share` (0–1) of the calls' time.
    pub fn with_network_share(mut self, network_share: Option<f64>) -> BackingTime {
        if let Some(share) = network_share {
            let network = (self.critical_us as f64 * share.clamp(0.0, 1.0)).round() as u64;
            self.network_us = Some(network);
            self.server_us = Some(self.critical_us - network.min(self.critical_us));
        }
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_schema_3_document_reads_its_untold_time_as_ambiguous() {
        let v3 = r#"{"server":"127.0.0.1:8080","request":"GET /","requests":2,"total_us":900,
            "server_us":100,"queued_us":0,"untold_us":300,"backing":[],"network_us":0,
            "untold_share":0.33}"#;
        let b: TimeBreakdown = serde_json::from_str(v3).unwrap();
        assert_eq!((b.ambiguous_us, b.ambiguous_share), (300, 0.33));
        let v4 = serde_json::to_value(&b).unwrap();
        assert_eq!(v4["ambiguous_us"], 300);
        assert!(v4.get("untold_us").is_none());
    }
}
