//! Case 003's second cause: every checkout called a tax service that
//! blocked for seconds now and then — invisible in averages and medians,
//! felt by every request in flight at that moment. The fix loaded the rates
//! once at start-up: no call on the request path.

use crate::http1::{json_response, read_request};
use crate::pool::{Dialer, Http1Pool, Upstream};
use crate::scenario::{
    accept_each, listen, BoxedStart, Fact, Holding, LoadHint, Running, Scenario, Truth,
};
use crate::truth::{CallLog, Calls};
use bytes::BytesMut;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Mutex;
use tokio::time::Instant;
use whyslow_model::FindingKind;

/// The tax service stalls once per this much time, whatever the load: a
/// pause "now and then" (a GC, a nightly-sized lock) is a matter of time,
/// not of how many calls came; counted in calls it would stall most of the
/// time under load and be no tail at all.
pub const STALL_PERIOD_US: u64 = 1_000_000;
/// How long a stall blocks the service (the case's lasted seconds; kept
/// short so that the demo's load phase stays short).
pub const STALL_US: u64 = 300_000;
/// A tax call's usual time.
pub const CALL_LATENCY_US: u64 = 1_000;
/// Connections the front keeps to the tax service.
const POOL: usize = 16;
/// Load that sees the stalls several times: 20/s for 4 s = 80 calls, 3 or
/// 4 stalls.
const LOAD: LoadHint = LoadHint {
    rate: 20,
    duration_ms: 4_000,
};

const PATH: &str = "/checkout";

pub const SCENARIO: Scenario = Scenario {
    name: "tax-stall",
    case: "003",
    summary: "each checkout calls a tax service that blocks now and then",
    broken: "one tax call per checkout; once a second the service blocks for 300 ms",
    fixed: "tax rates loaded once at start-up: no call on the request path",
    method: "GET",
    path: PATH,
    body: "",
    truth: Truth {
        kind: Some(FindingKind::PeriodicStall),
        time_lost_us: STALL_US,
        facts: &[
            Fact {
                name: "stall_period_us",
                value: STALL_PERIOD_US,
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
    fixed_under_load: &[],
    holds: Holding::Call,
    start: boxed,
    tls: None,
};

/// When the tax service stalls next, behind one lock for the whole
/// service: a stall holds it, so every call in flight waits (a GC pause, a
/// global lock); other calls only look at it.
type NextStall = Arc<Mutex<Instant>>;

/// Answers requests on one connection.
async fn tax_connection(mut stream: TcpStream, next_stall: NextStall) {
    let _ = stream.set_nodelay(true);
    let mut buf = BytesMut::with_capacity(4096);
    let body = b"{\"region\":\"EU\",\"rate\":0.2}\n";
    while let Ok(Some(head)) = read_request(&mut stream, &mut buf, false).await {
        let _ = buf.split_to(head.head_len + head.content_length);
        {
            let mut next = next_stall.lock().await;
            if Instant::now() >= *next {
                tokio::time::sleep(Duration::from_micros(STALL_US)).await;
                *next = Instant::now() + Duration::from_micros(STALL_PERIOD_US - STALL_US);
            }
        }
        tokio::time::sleep(Duration::from_micros(CALL_LATENCY_US)).await;
        let out = json_response("200 OK", body);
        if stream.write_all(&out).await.is_err() || head.close {
            return;
        }
    }
}

async fn serve_tax(listener: TcpListener) {
    let first = Instant::now() + Duration::from_micros(STALL_PERIOD_US);
    let next_stall = Arc::new(Mutex::new(first));
    accept_each(listener, |stream| {
        tax_connection(stream, next_stall.clone())
    })
    .await;
}

/// The checkout: the tax call (broken) or the rate in memory (fixed).
async fn front(mut stream: TcpStream, tax: Option<Arc<Upstream>>, truth: Arc<CallLog>) {
    let _ = stream.set_nodelay(true);
    let peer = stream.peer_addr().map_or(0, |a| a.port());
    let mut buf = BytesMut::with_capacity(4096);
    while let Ok(Some(head)) = read_request(&mut stream, &mut buf, false).await {
        let _ = buf.split_to(head.head_len + head.content_length);
        let calls = truth.request(peer);
        let ok = match &tax {
            Some(up) => up
                .call("/rate?region=EU", head.traceparent.as_deref(), &calls)
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
        let sent = stream.write_all(&out).await;
        calls.served();
        if sent.is_err() || head.close {
            return;
        }
    }
}

async fn serve_front(listener: TcpListener, tax: Option<Arc<Upstream>>, truth: Arc<CallLog>) {
    accept_each(listener, |stream| front(stream, tax.clone(), truth.clone())).await;
}

/// client → checkout → tax service (broken); client → checkout (fixed).
async fn start(fixed: bool) -> std::io::Result<Running> {
    let (tax_l, tax) = listen().await?;
    let (front_l, addr) = listen().await?;
    let tax_task = tokio::spawn(serve_tax(tax_l));
    let upstream = Arc::new(Upstream::Http1(Http1Pool::new(Dialer::plain(tax), POOL)));
    // Both variants read the rates at start-up; only the broken one calls
    // again per checkout.
    upstream.call("/rates", None, &Calls::none()).await?;
    let truth = CallLog::new();
    let upstream = (!fixed).then_some(upstream);
    let front_task = tokio::spawn(serve_front(front_l, upstream, truth.clone()));
    Ok(Running::new(
        format!("http://{addr}{PATH}"),
        vec![addr.port(), tax.port()],
        vec![front_task, tax_task],
    )
    .with_truth(truth))
}

fn boxed(fixed: bool) -> BoxedStart {
    Box::pin(start(fixed))
}
