//! Case 002 over gRPC: the page of case 002 makes its 11 backing calls as
//! gRPC calls over one channel — one HTTP/2 connection, as gRPC clients
//! keep — to a server that allows 2 streams at once
//! (SETTINGS_MAX_CONCURRENT_STREAMS): the calls run in rounds of 2, as they
//! ran in rounds of 5 on a pool of 5 connections. HTTP/2 lifts the limit
//! per host only as far as the server lets it; the fix is the server's
//! setting.

use crate::grpc::{self, Channel};
use crate::http1::read_whole_request;
use crate::pki;
use crate::pool::{Dialer, Stream};
use crate::scenario::{accept_each, listen, BoxedStart, Fact, Holding, Running, Scenario, Truth};
use crate::truth::CallLog;
use bytes::{Bytes, BytesMut};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;
use whyslow_model::FindingKind;

/// Calls the page makes (case 002's 11).
pub const CALLS: u64 = 11;
/// Streams the broken server allows on a connection at once.
pub const STREAMS: u64 = 2;
/// Streams the fixed server allows: more than 16 pages' calls at once (the
/// lab's concurrent runs), as gRPC servers' defaults are (grpc-go: no limit).
pub const FIXED_STREAMS: u32 = 1_000;
/// Each call's latency on the server.
pub const CALL_LATENCY_US: u64 = 10_000;
/// The front's own work after the calls (rendering the page).
pub const RENDER_US: u64 = 2_000;
/// Rounds of calls through the streams, minus the one enough streams need.
const ROUNDS: u64 = CALLS.div_ceil(STREAMS);

const PATH: &str = "/quote";
/// The method every call invokes.
const METHOD: &str = "/lab.Prices/Quote";

pub const SCENARIO: Scenario = Scenario {
    name: "grpc-streams",
    case: "002",
    summary: "a page makes 11 gRPC calls over one HTTP/2 connection",
    broken: "the gRPC server allows 2 streams at once: the calls run in 6 rounds",
    fixed: "the server allows 1000 streams: all 11 at once",
    method: "GET",
    path: PATH,
    body: "",
    truth: Truth {
        kind: Some(FindingKind::StreamQueueing),
        time_lost_us: (ROUNDS - 1) * CALL_LATENCY_US,
        facts: &[
            Fact {
                name: "calls",
                value: CALLS,
            },
            Fact {
                name: "streams",
                value: STREAMS,
            },
            // One round of calls: the time lost is ROUNDS - 1 of them.
            Fact {
                name: "round_us",
                value: CALL_LATENCY_US,
            },
            Fact {
                name: "render_us",
                value: RENDER_US,
            },
        ],
    },
    load: None,
    fixed_under_load: &[],
    holds: Holding::Shared,
    start: boxed,
    tls: Some(boxed_tls),
};

/// The front's shared state: its channel to the price service, its call log.
struct Front {
    channel: Channel,
    truth: Arc<CallLog>,
}

/// Serves the page to the client at `peer`: every call at once over the
/// channel, each with its own message (a product id), then rendering.
async fn front<S: Stream>(mut stream: S, peer: u16, app: Arc<Front>) {
    let mut buf = BytesMut::with_capacity(8192);
    while let Ok(Some(head)) = read_whole_request(&mut stream, &mut buf).await {
        let _ = buf.split_to(head.head_len + head.content_length);
        let close = head.close;
        let truth = app.truth.request(peer);
        let mut calls = JoinSet::new();
        for i in 0..CALLS {
            let (app, trace, truth) = (app.clone(), head.traceparent.clone(), truth.clone());
            calls.spawn(async move {
                let product = format!("\x0a\x08sku-{i:04}");
                app.channel
                    .unary(METHOD, product.as_bytes(), trace.as_deref(), &truth)
                    .await
            });
        }
        let mut failed = false;
        while let Some(done) = calls.join_next().await {
            failed |= !matches!(done, Ok(Ok(())));
        }
        tokio::time::sleep(Duration::from_micros(RENDER_US)).await;
        let (status, body) = match failed {
            true => ("502 Bad Gateway", "{\"error\":\"prices\"}\n"),
            false => ("200 OK", "{\"quotes\":11}\n"),
        };
        let out = format!(
            "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        let sent = stream.write_all(out.as_bytes()).await;
        truth.served();
        if sent.is_err() || close {
            return;
        }
    }
}

/// The front door, over TLS when `tls` is given (HTTP/1.1 either way).
async fn serve_front(
    listener: TcpListener,
    channel: Channel,
    tls: Option<TlsAcceptor>,
    truth: Arc<CallLog>,
) {
    let app = Arc::new(Front { channel, truth });
    accept_each(listener, |tcp| {
        let (app, tls) = (app.clone(), tls.clone());
        async move {
            let _ = tcp.set_nodelay(true);
            let peer = tcp.peer_addr().map_or(0, |a| a.port());
            match tls {
                None => front(tcp, peer, app).await,
                Some(a) => {
                    if let Ok(s) = a.accept(tcp).await {
                        front(s, peer, app).await
                    }
                }
            }
        }
    })
    .await;
}

/// A quote as the price service answers it: two numbers and a description
/// of 255 bytes, protobuf-encoded. (A DATA frame under 256 bytes that the channel has yet to read
/// counts against h2's budget for small frames: a hundred answers waiting
/// for busy tasks would close the channel.)
fn quote() -> Vec<u8> {
    let mut q = b"\x08\x01\x10\xe8\x07\x1a".to_vec();
    q.push(0xff);
    q.push(0x01);
    q.resize(q.len() + 255, b'.');
    q
}

/// The price service's limit of streams per connection.
fn streams(fixed: bool) -> u32 {
    if fixed {
        FIXED_STREAMS
    } else {
        STREAMS as u32
    }
}

/// client → front → price service (gRPC over h2c, 2 streams or 1000).
async fn start(fixed: bool) -> std::io::Result<Running> {
    let (prices_l, prices) = listen().await?;
    let (front_l, addr) = listen().await?;
    let latency = Duration::from_micros(CALL_LATENCY_US);
    let reply = Bytes::from(quote());
    let prices_task = tokio::spawn(grpc::serve(prices_l, latency, streams(fixed), reply, None));
    let truth = CallLog::new();
    let channel = Channel::new(prices);
    let front_task = tokio::spawn(serve_front(front_l, channel, None, truth.clone()));
    Ok(Running::new(
        format!("http://{addr}{PATH}"),
        vec![addr.port(), prices.port()],
        vec![front_task, prices_task],
    )
    .with_truth(truth))
}

/// The same over TLS, as gRPC between services mostly runs: the front door
/// (HTTP/1.1) and the price service (ALPN h2) serve a certificate of the
/// lab's own authority, and every endpoint writes its secrets to one key log.
async fn start_tls(fixed: bool) -> std::io::Result<Running> {
    let tls = pki::two_hops(&[b"h2"], &[b"h2"])?;
    let (prices_l, prices) = listen().await?;
    let (front_l, addr) = listen().await?;
    let latency = Duration::from_micros(CALL_LATENCY_US);
    let acceptor = Some(TlsAcceptor::from(tls.backend));
    let reply = Bytes::from(quote());
    let prices_task = tokio::spawn(grpc::serve(
        prices_l,
        latency,
        streams(fixed),
        reply,
        acceptor,
    ));
    let truth = CallLog::new();
    let channel = Channel::over(Dialer::tls(prices, tls.client));
    let front_tls = Some(TlsAcceptor::from(tls.front));
    let front_task = tokio::spawn(serve_front(front_l, channel, front_tls, truth.clone()));
    Ok(Running::new(
        format!("https://{addr}{PATH}"),
        vec![addr.port(), prices.port()],
        vec![front_task, prices_task],
    )
    .with_keylog(tls.keylog)
    .with_truth(truth))
}

fn boxed(fixed: bool) -> BoxedStart {
    Box::pin(start(fixed))
}

fn boxed_tls(fixed: bool) -> BoxedStart {
    Box::pin(start_tls(fixed))
}
