//! Case 002 (GOV.UK Performance Platform): a dashboard took 1.5 s because
//! rendering it made 11 HTTP calls to a backing API through a runtime that
//! allowed 5 connections per host: the calls ran in rounds, each waiting for
//! a free connection. Multiplexing them over one connection (SPDY, now
//! HTTP/2) fixed it.

use crate::http1::{self, read_whole_request, AppConfig};
use crate::pki;
use crate::pool::{Dialer, H2Connection, Http1Pool, Stream, Upstream};
use crate::scenario::{accept_each, listen, BoxedStart, Fact, Holding, Running, Scenario, Truth};
use crate::tls_h2;
use crate::truth::CallLog;
use bytes::BytesMut;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;
use whyslow_model::FindingKind;

/// Calls the page makes to the backing API (the case's 11).
pub const CALLS: u64 = 11;
/// Connections the front's client allows per host (the case's runtime: 5).
pub const POOL: u64 = 5;
/// Each backing call's latency: the case's request lost 61 of its 96 ms.
pub const CALL_LATENCY_US: u64 = 30_000;
/// The front's own work after the calls (rendering the page).
pub const RENDER_US: u64 = 5_000;
/// Rounds of calls through the pool, minus the one enough connections would need.
const ROUNDS: u64 = CALLS.div_ceil(POOL);

const PATH: &str = "/dashboard";

pub const SCENARIO: Scenario = Scenario {
    name: "fanout-pool",
    case: "002",
    summary: "a page makes 11 backing calls through a client pool of 5 connections",
    broken: "HTTP/1.1 pool of 5 connections to the backing API: the calls run in 3 rounds",
    fixed: "the same calls multiplexed over one HTTP/2 connection (the case moved to SPDY)",
    method: "GET",
    path: PATH,
    body: "",
    truth: Truth {
        kind: Some(FindingKind::PoolQueueing),
        time_lost_us: (ROUNDS - 1) * CALL_LATENCY_US,
        facts: &[
            Fact {
                name: "calls",
                value: CALLS,
            },
            Fact {
                name: "pool",
                value: POOL,
            },
            Fact {
                name: "call_latency_us",
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
    holds: Holding::Call,
    start: boxed,
    tls: Some(boxed_tls),
};

/// A page of the size a dashboard's HTML might have, kept small for loopback.
fn page() -> Vec<u8> {
    let mut body = b"<html><body>".to_vec();
    body.resize(16 * 1024, b'.');
    body.extend_from_slice(b"</body></html>\n");
    body
}

/// The front's shared state: its client to the API, its page, its call log.
struct Front {
    upstream: Upstream,
    page: Vec<u8>,
    truth: Arc<CallLog>,
}

/// Serves the page to the client at `peer`: every call at once through
/// the upstream, then rendering.
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
                let path = format!("/data/{i}");
                app.upstream.call(&path, trace.as_deref(), &truth).await
            });
        }
        let mut failed = false;
        while let Some(done) = calls.join_next().await {
            failed |= !matches!(done, Ok(Ok(())));
        }
        tokio::time::sleep(Duration::from_micros(RENDER_US)).await;
        let status = if failed { "502 Bad Gateway" } else { "200 OK" };
        let mut out = format!(
            "HTTP/1.1 {status}\r\nContent-Type: text/html\r\nContent-Length: {}\r\n\r\n",
            app.page.len()
        )
        .into_bytes();
        out.extend_from_slice(&app.page);
        let sent = stream.write_all(&out).await;
        truth.served();
        if sent.is_err() || close {
            return;
        }
    }
}

/// The front door, over TLS when `tls` is given (HTTP/1.1 either way).
async fn serve_front(
    listener: TcpListener,
    upstream: Upstream,
    tls: Option<Arc<rustls::ServerConfig>>,
    truth: Arc<CallLog>,
) {
    let app = Arc::new(Front {
        upstream,
        page: page(),
        truth,
    });
    let acceptor = tls.map(TlsAcceptor::from);
    accept_each(listener, |tcp| {
        let (app, acceptor) = (app.clone(), acceptor.clone());
        async move {
            let _ = tcp.set_nodelay(true);
            let peer = tcp.peer_addr().map_or(0, |a| a.port());
            match acceptor {
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

/// Each backing call's response.
fn api_config() -> AppConfig {
    AppConfig {
        work: Duration::from_micros(CALL_LATENCY_US),
        body: b"{\"points\":[1,2,3]}\n".to_vec(),
        ..AppConfig::default()
    }
}

/// client → front → backing API (HTTP/1.1 pool of 5, or one HTTP/2 connection).
async fn start(fixed: bool) -> std::io::Result<Running> {
    let (api_l, api) = listen().await?;
    let (front_l, addr) = listen().await?;
    let (api_task, upstream) = if fixed {
        let task = tokio::spawn(tls_h2::serve_h2c(api_l, api_config()));
        (task, Upstream::Http2(H2Connection::new(Dialer::plain(api))))
    } else {
        let task = tokio::spawn(http1::serve(api_l, api_config()));
        let pool = Http1Pool::new(Dialer::plain(api), POOL as usize);
        (task, Upstream::Http1(pool))
    };
    let truth = CallLog::new();
    let front_task = tokio::spawn(serve_front(front_l, upstream, None, truth.clone()));
    Ok(Running::new(
        format!("http://{addr}{PATH}"),
        vec![addr.port(), api.port()],
        vec![front_task, api_task],
    )
    .with_truth(truth))
}

/// The same over TLS, as in the case (the backing API was HTTPS): the front
/// door and the backing API serve a certificate of the lab's own authority,
/// and every endpoint of the lab writes its secrets to one key log.
async fn start_tls(fixed: bool) -> std::io::Result<Running> {
    let alpn: &[u8] = if fixed { b"h2" } else { b"http/1.1" };
    let tls = pki::two_hops(&[b"h2", b"http/1.1"], &[alpn])?;
    let (api_l, api) = listen().await?;
    let (front_l, addr) = listen().await?;
    let api_task = tokio::spawn(tls_h2::serve_tls(api_l, tls.backend, api_config()));
    let dialer = Dialer::tls(api, tls.client);
    let upstream = if fixed {
        Upstream::Http2(H2Connection::new(dialer))
    } else {
        Upstream::Http1(Http1Pool::new(dialer, POOL as usize))
    };
    let truth = CallLog::new();
    let front_task = tokio::spawn(serve_front(
        front_l,
        upstream,
        Some(tls.front),
        truth.clone(),
    ));
    Ok(Running::new(
        format!("https://{addr}{PATH}"),
        vec![addr.port(), api.port()],
        vec![front_task, api_task],
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
