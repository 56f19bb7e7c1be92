//! What the lab's apps record out of band, never on the wire: per inbound
//! request, each backing call it made — the local port of the connection
//! the call used, its place on that connection, and when it was sent and
//! done — so that attribution can be measured against what really
//! happened rather than against itself.
//!
//! Instants are µs since the Unix epoch from the system clock, the base
//! the kernel stamps captured packets in: a request's bytes are stamped
//! before the app reads them, a call's bytes after the app starts writing
//! and before it reads the answer.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

/// Now, in µs since the Unix epoch.
pub fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

/// One backing call as the app made it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallTruth {
    /// Local port of the connection it used.
    pub local_port: u16,
    /// A UDP socket's port (a DNS query), not a TCP connection's: the two
    /// number their ports apart, and one may hold the other's number.
    pub udp: bool,
    /// Its HTTP/2 stream, on a multiplexed connection.
    pub stream: Option<u32>,
    /// Order of sending, across the app: on one connection, the order of
    /// its calls on the wire (a pipelining client takes it as it queues).
    pub seq: u64,
    /// Before its first byte was written.
    pub sent_us: u64,
    /// After its answer was read (or it failed).
    pub done_us: u64,
}

/// One inbound request and the calls made for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestTruth {
    /// The client's port of the inbound connection.
    pub client_port: u16,
    /// After the request was read.
    pub received_us: u64,
    pub calls: Vec<CallTruth>,
}

/// Every request an app served, with its calls.
#[derive(Debug, Default)]
pub struct CallLog {
    /// Served requests; a call a request spawned and did not wait for
    /// (a write-behind) is added to its request when it ends.
    requests: Mutex<Vec<Arc<Mutex<RequestTruth>>>>,
    seq: AtomicU64,
}

impl CallLog {
    pub fn new() -> Arc<CallLog> {
        Arc::new(CallLog::default())
    }

    /// The next sending order number.
    pub fn next_seq(&self) -> u64 {
        self.seq.fetch_add(1, Ordering::Relaxed)
    }

    /// A request read from `client_port` just now: its calls go to the
    /// returned collector, which is logged when served.
    pub fn request(self: &Arc<Self>, client_port: u16) -> Calls {
        Calls(Arc::new(Open {
            log: self.clone(),
            request: Arc::new(Mutex::new(RequestTruth {
                client_port,
                received_us: now_us(),
                calls: Vec::new(),
            })),
        }))
    }

    /// Every request logged so far.
    pub fn requests(&self) -> Vec<RequestTruth> {
        let Ok(all) = self.requests.lock() else {
            return Vec::new();
        };
        all.iter()
            .filter_map(|r| r.lock().ok().map(|r| r.clone()))
            .collect()
    }
}

struct Open {
    log: Arc<CallLog>,
    request: Arc<Mutex<RequestTruth>>,
}

/// One request's calls while it is served (cheap to clone into the tasks
/// it spawns). `Calls::none()` records nothing.
#[derive(Clone)]
pub struct Calls(Arc<Open>);

impl Calls {
    /// A collector for work no request asked for: kept nowhere.
    pub fn none() -> Calls {
        CallLog::new().request(0)
    }

    /// A call about to be sent on the connection from `local_port`.
    pub fn start(&self, local_port: u16) -> Call {
        self.start_on(local_port, false)
    }

    /// A query about to be sent from the UDP socket on `local_port`.
    pub fn start_datagram(&self, local_port: u16) -> Call {
        self.start_on(local_port, true)
    }

    fn start_on(&self, local_port: u16, udp: bool) -> Call {
        Call {
            calls: self.clone(),
            truth: CallTruth {
                local_port,
                udp,
                stream: None,
                seq: self.0.log.next_seq(),
                sent_us: now_us(),
                done_us: 0,
            },
        }
    }

    /// Logs the request with its calls.
    pub fn served(&self) {
        if let Ok(mut all) = self.0.log.requests.lock() {
            all.push(self.0.request.clone());
        }
    }

    fn add(&self, call: CallTruth) {
        if let Ok(mut r) = self.0.request.lock() {
            r.calls.push(call);
        }
    }
}

/// A call in flight; `done` records it.
pub struct Call {
    calls: Calls,
    truth: CallTruth,
}

impl Call {
    pub fn on_stream(mut self, stream: u32) -> Self {
        self.truth.stream = Some(stream);
        self
    }

    pub fn done(mut self) {
        self.truth.done_us = now_us();
        self.calls.add(self.truth);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_is_logged_with_its_calls_in_sending_order() {
        let log = CallLog::new();
        let calls = log.request(40_000);
        let first = calls.start(50_000);
        let second = calls.start(50_001);
        second.done();
        calls.served();
        first.done(); // a write-behind, ended after the answer

        let r = log.requests();
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].client_port, 40_000);
        let seqs: Vec<u64> = r[0].calls.iter().map(|c| c.seq).collect();
        assert_eq!(
            seqs,
            vec![1, 0],
            "in the order they ended, each with its own"
        );
        assert!(r[0].calls.iter().all(|c| c.sent_us <= c.done_us));
    }
}
