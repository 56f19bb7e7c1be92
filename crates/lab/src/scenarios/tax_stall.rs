//! Case 003's second cause: every checkout called a tax service that
//! blocked for seconds now and then — invisible in averages and medians,
//! felt by every request in flight at that moment. The fix loaded the rates
//! once at start-up: no call on the request path.

use crate::http1::{json_response, read_request};
use crate::pool::{Dialer, Http1Pool, Upstream};
use crate::scenario::{accept_each, listen, BoxedStart, Fact, LoadHint, Running, Scenario, Truth};
use bytes::BytesMut;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Mutex;
use whyslow_model::FindingKind;

/// The tax service stalls on every this-many-th call.
pub const STALL_EVERY: u64 = 20;
/// How long a stall blocks the service (the case's lasted seconds; kept
/// short so that the demo's load phase stays short).
pub const STALL_US: u64 = 300_000;
/// A tax call's usual time.
pub const CALL_LATENCY_US: u64 = 1_000;
/// Connections the front keeps to the tax service.
const POOL: usize = 16;
/// Load that sees STALL_EVERY's stalls several times: 20/s for 4 s = 80
/// calls, 4 stalls.
const LOAD: LoadHint = LoadHint {
    rate: 20,
    duration_ms: 4_000,
};

const PATH: &str = "/checkout";

pub const SCENARIO: Scenario = Scenario {
    name: "tax-stall",
    case: "003",
    summary: "each checkout calls a tax service that blocks on every 20th call",
    broken: "one tax call per checkout; every 20th blocks the service for 300 ms",
    fixed: "tax rates loaded once at start-up: no call on the request path",
    method: "GET",
    path: PATH,
    body: "",
    truth: Truth {
        kind: Some(FindingKind::PeriodicStall),
        time_lost_us: STALL_US,
        facts: &[
            Fact {
                name: "stall_every",
                value: STALL_EVERY,
            },
            Fact {
                name: "stall_us",
                value: STALL_US,
            },
            Fact {
                name: "call_latency_us",
                value: CALL_LATENCY_US,
            },
        ],
    },
    load: Some(LOAD),
    start: boxed,
    tls: None,
};

/// Answers requests on one connection. One lock for the whole service:
/// a stall holds it, so every call in flight waits (a GC pause, a global lock).
async fn tax_connection(mut stream: TcpStream, calls: Arc<Mutex<u64>>) {
    let _ = stream.set_nodelay(true);
    let mut buf = BytesMut::with_capacity(4096);
    let body = b"{\"region\":\"EU\",\"rate\":0.2}\n";
    while let Ok(Some(head)) = read_request(&mut stream, &mut buf, false).await {
        let _ = buf.split_to(head.head_len + head.content_length);
        {
            let mut n = calls.lock().await;
            *n += 1;
            let us = if *n % STALL_EVERY == 0 {
                STALL_US
            } else {
                CALL_LATENCY_US
            };
            tokio::time::sleep(Duration::from_micros(us)).await;
        }
        let out = json_response("200 OK", body);
        if stream.write_all(&out).await.is_err() || head.close {
            return;
        }
    }
}

async fn serve_tax(listener: TcpListener) {
    let calls = Arc::new(Mutex::new(0));
    accept_each(listener, |stream| tax_connection(stream, calls.clone())).await;
}

/// The checkout: the tax call (broken) or the rate in memory (fixed).
async fn front(mut stream: TcpStream, tax: Option<Arc<Upstream>>) {
    let _ = stream.set_nodelay(true);
    let mut buf = BytesMut::with_capacity(4096);
    while let Ok(Some(head)) = read_request(&mut stream, &mut buf, false).await {
        let _ = buf.split_to(head.head_len + head.content_length);
        let ok = match &tax {
            Some(up) => up
                .call("/rate?region=EU", head.traceparent.as_deref())
                .await
                .is_ok(),
            None => true,
        };
        let (status, body) = if ok {
            ("200 OK", "{\"total\":120.0}\n")
        } else {
            ("502 Bad Gateway", "{\"error\":\"tax service\"}\n")
        };
        let out = json_response(status, body.as_bytes());
        if stream.write_all(&out).await.is_err() || head.close {
            return;
        }
    }
}

async fn serve_front(listener: TcpListener, tax: Option<Arc<Upstream>>) {
    accept_each(listener, |stream| front(stream, tax.clone())).await;
}

/// client → checkout → tax service (broken); client → checkout (fixed).
async fn start(fixed: bool) -> std::io::Result<Running> {
    let (tax_l, tax) = listen().await?;
    let (front_l, addr) = listen().await?;
    let tax_task = tokio::spawn(serve_tax(tax_l));
    let upstream = Arc::new(Upstream::Http1(Http1Pool::new(Dialer::plain(tax), POOL)));
    // Both variants read the rates at start-up; only the broken one calls
    // again per checkout.
    upstream.call("/rates", None).await?;
    let front_task = tokio::spawn(serve_front(front_l, (!fixed).then_some(upstream)));
    Ok(Running::new(
        format!("http://{addr}{PATH}"),
        vec![addr.port(), tax.port()],
        vec![front_task, tax_task],
    ))
}

fn boxed(fixed: bool) -> BoxedStart {
    Box::pin(start(fixed))
}
