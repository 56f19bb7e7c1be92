//! A server whose latency distribution is known in advance, for checking what
//! a load generator reports: every request takes `base`; every `slow_every`-th
//! request (counted across all connections) takes `slow` instead; and the
//! whole server may freeze once, for `freeze.1`, starting `freeze.0` after the
//! first request arrived — nothing is answered during a freeze.
//!
//! One thread per connection and blocking sleeps (not tokio's millisecond
//! timer wheel) keep every delay within tens of microseconds of the plan.

use crate::http1::parse_request;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

#[derive(Debug, Clone)]
pub struct LatencyPlan {
    pub base: Duration,
    /// Every Nth request is slow (0: none).
    pub slow_every: u64,
    pub slow: Duration,
    /// (after the first request, length): one freeze of the whole server.
    pub freeze: Option<(Duration, Duration)>,
    pub body: Vec<u8>,
}

impl Default for LatencyPlan {
    fn default() -> Self {
        LatencyPlan {
            base: Duration::from_millis(1),
            slow_every: 0,
            slow: Duration::ZERO,
            freeze: None,
            body: b"ok\n".to_vec(),
        }
    }
}

struct Shared {
    plan: LatencyPlan,
    head: Vec<u8>,
    served: AtomicU64,
    first: OnceLock<Instant>,
    stop: AtomicBool,
}

impl Shared {
    /// When the response to a request that arrived at `at` (the `n`th) is due.
    fn due(&self, n: u64, at: Instant) -> Instant {
        let p = &self.plan;
        let slow = p.slow_every > 0 && (n + 1).is_multiple_of(p.slow_every);
        let done = at + if slow { p.slow } else { p.base };
        let Some((after, len)) = p.freeze else {
            return done;
        };
        let start = *self.first.get_or_init(|| at) + after;
        let end = start + len;
        // Work that would be under way at any moment of the freeze waits for its end.
        if at < end && done > start {
            done.max(end)
        } else {
            done
        }
    }
}

/// A running latency server; stops when dropped.
pub struct LatencyServer {
    pub addr: SocketAddr,
    shared: Arc<Shared>,
}

impl LatencyServer {
    /// Listens on 127.0.0.1 (ephemeral port) and serves until dropped.
    pub fn start(plan: LatencyPlan) -> std::io::Result<LatencyServer> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        let head = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\r\n",
            plan.body.len()
        )
        .into_bytes();
        let shared = Arc::new(Shared {
            plan,
            head,
            served: AtomicU64::new(0),
            first: OnceLock::new(),
            stop: AtomicBool::new(false),
        });
        let s = shared.clone();
        std::thread::Builder::new()
            .name("latency-accept".into())
            .spawn(move || accept_loop(listener, s))?;
        Ok(LatencyServer { addr, shared })
    }

    /// Requests answered so far.
    pub fn served(&self) -> u64 {
        self.shared.served.load(Ordering::Relaxed)
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }
}

impl Drop for LatencyServer {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        // Wake the accept loop so it sees the flag.
        let _ = TcpStream::connect(self.addr);
    }
}

fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    for stream in listener.incoming() {
        if shared.stop.load(Ordering::SeqCst) {
            return;
        }
        let Ok(stream) = stream else { continue };
        let s = shared.clone();
        let _ = std::thread::Builder::new()
            .name("latency-conn".into())
            .stack_size(64 * 1024)
            .spawn(move || {
                let _ = serve(stream, &s);
            });
    }
}

fn serve(mut stream: TcpStream, s: &Shared) -> std::io::Result<()> {
    stream.set_nodelay(true)?;
    let mut buf = Vec::with_capacity(4096);
    let mut chunk = [0u8; 4096];
    let mut response = s.head.clone();
    response.extend_from_slice(&s.plan.body);
    loop {
        let head = loop {
            if let Some(h) = parse_request(&buf).map_err(std::io::Error::other)? {
                if buf.len() >= h.head_len + h.content_length {
                    break h;
                }
            }
            let n = stream.read(&mut chunk)?;
            if n == 0 || s.stop.load(Ordering::Relaxed) {
                return Ok(());
            }
            buf.extend_from_slice(&chunk[..n]);
        };
        let at = Instant::now();
        buf.drain(..head.head_len + head.content_length);
        let n = s.served.fetch_add(1, Ordering::Relaxed);
        let due = s.due(n, at);
        let now = Instant::now();
        if due > now {
            std::thread::sleep(due - now);
        }
        stream.write_all(&response)?;
        if head.close {
            return Ok(());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn due_times_follow_the_plan() {
        let s = Shared {
            plan: LatencyPlan {
                base: Duration::from_millis(1),
                slow_every: 100,
                slow: Duration::from_millis(100),
                freeze: Some((Duration::from_secs(1), Duration::from_millis(500))),
                body: Vec::new(),
            },
            head: Vec::new(),
            served: AtomicU64::new(0),
            first: OnceLock::new(),
            stop: AtomicBool::new(false),
        };
        let t0 = Instant::now();
        let ms = |m: u64| Duration::from_millis(m);
        assert_eq!(s.due(0, t0), t0 + ms(1));
        assert_eq!(s.due(99, t0 + ms(10)), t0 + ms(110), "every 100th is slow");
        // Arriving in the freeze (1.0 s – 1.5 s): answered when it ends.
        assert_eq!(s.due(5, t0 + ms(1200)), t0 + ms(1500));
        assert_eq!(s.due(6, t0 + ms(1500)), t0 + ms(1501));
        // Slow work that runs into the freeze waits for its end too.
        assert_eq!(s.due(199, t0 + ms(950)), t0 + ms(1500));
    }
}
