//! The agent's OTLP exporter: each window's spans, logs and metrics queued
//! and sent in order; a collector that is down, restarting or overloaded
//! (a retryable failure) leaves them queued for the next window, within a
//! bound in bytes past which the oldest are given up; a refusal gives up
//! that request. Everything given up is counted, never lost unsaid.

use std::collections::VecDeque;
use std::time::{Duration, Instant};
pub use whyslow_investigate::send::Signal;
use whyslow_investigate::send::{Destination, Exporter as Connection};
use whyslow_model::ExportCounts;

/// Bytes of encoded requests kept while the collector is unreachable:
/// about 20 windows of a busy service's spans.
pub const MAX_QUEUED_BYTES: usize = 64 << 20;
/// How long the last window's flush keeps retrying before giving up.
pub const FINAL_RETRY: Duration = Duration::from_secs(10);
/// The pause between the final flush's tries.
const RETRY_EVERY: Duration = Duration::from_millis(500);

/// One export request, encoded, and how many items it carries.
#[derive(Debug)]
pub struct Pending {
    pub signal: Signal,
    pub body: Vec<u8>,
    pub items: u64,
}

pub struct Exporter {
    connection: Connection,
    queue: VecDeque<Pending>,
    queued_bytes: usize,
    max_bytes: usize,
}

fn count(c: &mut ExportCounts, p: &Pending, sent: bool) {
    let (ok, lost) = match p.signal {
        Signal::Traces => (&mut c.spans_sent, &mut c.spans_dropped),
        Signal::Logs => (&mut c.logs_sent, &mut c.logs_dropped),
        Signal::Metrics => (&mut c.points_sent, &mut c.points_dropped),
    };
    *(if sent { ok } else { lost }) += p.items;
}

impl Exporter {
    pub fn new(to: &Destination, max_bytes: usize) -> Exporter {
        Exporter {
            connection: Connection::new(to.clone()),
            queue: VecDeque::new(),
            queued_bytes: 0,
            max_bytes,
        }
    }

    /// Queues `pending`, the oldest given up past the bound.
    pub fn add(&mut self, pending: Vec<Pending>, counts: &mut ExportCounts) {
        for p in pending.into_iter().filter(|p| p.items > 0) {
            self.queued_bytes += p.body.len();
            self.queue.push_back(p);
        }
        while self.queued_bytes > self.max_bytes {
            let Some(old) = self.queue.pop_front() else {
                break;
            };
            self.queued_bytes -= old.body.len();
            count(counts, &old, false);
        }
    }

    /// Sends what is queued, in order, until a retryable failure. Returns
    /// the last failure's reason, if one stopped it.
    pub fn flush(&mut self, counts: &mut ExportCounts) -> Option<String> {
        let mut failed = None;
        while let Some(p) = self.queue.front() {
            let result = self.connection.send(p.signal, &p.body);
            if let Err(e) = &result {
                failed = Some(e.why.clone());
                if e.retryable {
                    break;
                }
            }
            let p = self.queue.pop_front().expect("the front is there");
            self.queued_bytes -= p.body.len();
            count(counts, &p, result.is_ok());
        }
        counts.queued = self.queue.len() as u64;
        failed
    }

    /// The last flush: retried for `FINAL_RETRY`, then what is left given up.
    pub fn finish(&mut self, counts: &mut ExportCounts) -> Option<String> {
        let until = Instant::now() + FINAL_RETRY;
        let mut failed = self.flush(counts);
        while !self.queue.is_empty() && Instant::now() < until {
            std::thread::sleep(RETRY_EVERY);
            failed = self.flush(counts);
        }
        for p in std::mem::take(&mut self.queue) {
            count(counts, &p, false);
        }
        self.queued_bytes = 0;
        counts.queued = 0;
        failed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused() -> Destination {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let url = format!("http://127.0.0.1:{port}");
        Destination::plain(whyslow_investigate::send::Endpoint::parse(&url).unwrap())
    }

    fn pending(signal: Signal, bytes: usize, items: u64) -> Pending {
        Pending {
            signal,
            body: vec![0; bytes],
            items,
        }
    }

    #[test]
    fn an_unreachable_collector_keeps_them_queued_within_the_bound() {
        let mut e = Exporter::new(&refused(), 250);
        let mut c = ExportCounts::default();
        e.add(
            vec![
                pending(Signal::Traces, 100, 7),
                pending(Signal::Logs, 100, 2),
            ],
            &mut c,
        );
        assert!(e.flush(&mut c).is_some());
        assert_eq!((c.spans_sent, c.spans_dropped, c.queued), (0, 0, 2));
        // Past 250 bytes the oldest (the spans) go, counted.
        e.add(vec![pending(Signal::Metrics, 100, 5)], &mut c);
        assert_eq!((c.spans_dropped, c.logs_dropped), (7, 0));
        let mut last = ExportCounts::default();
        let started = Instant::now();
        e.finish(&mut last);
        assert!(started.elapsed() >= FINAL_RETRY);
        assert_eq!(
            (last.logs_dropped, last.points_dropped, last.queued),
            (2, 5, 0)
        );
    }
}
