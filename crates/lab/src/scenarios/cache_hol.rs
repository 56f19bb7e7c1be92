//! Case 004 (a search API, 12 → 62 ms on average after a cache-client
//! change): cache writes ran asynchronously on the same persistent
//! connection as the reads, so a read of a hot key waited for the write
//! ahead of it. Here a product page stashes a large rendered fragment
//! asynchronously and reads a small hot key, both on one shared cache
//! connection. Fixed: writes go on a dedicated connection.
//!
//! The cache is the lab's own RESP server (a SET costs WRITE_US, as the
//! case's server held writes to hot keys), or a real Redis or memcached
//! given to `start_with_cache`.

use crate::cache::{CacheProtocol, SharedConnection};
use crate::http1::{json_response, read_request};
use crate::respmini;
use crate::scenario::{accept_each, listen, BoxedStart, Fact, Holding, Running, Scenario, Truth};
use crate::truth::{CallLog, Calls};
use bytes::{Bytes, BytesMut};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;
use whyslow_model::FindingKind;

/// What the lab's cache server takes to store a write, counted from the
/// write's first byte: the case's reads slowed by 50 ms on average; a third
/// of that keeps the demo short and stays far above loopback noise.
pub const WRITE_US: u64 = 15_000;
/// The stashed fragment: large beside the hot key, small enough that
/// sending and parsing it (a quarter of a millisecond on loopback, a few on
/// a busy machine) ends well inside WRITE_US, which the server counts from
/// the first byte, so the wait the lab declares is the wait it injects (a
/// busy host once added 4 ms when the cost began after the last byte).
pub const VALUE_BYTES: usize = 256 << 10;
/// The small key every page reads (the case's "highly requested key").
pub const HOT_KEY: &str = "hot:config";
/// The key each page's fragment is stashed under.
const STASH_KEY: &str = "stash:product:42";

const PATH: &str = "/product/42";

pub const SCENARIO: Scenario = Scenario {
    name: "cache-hol",
    case: "004",
    summary: "a product page reads a hot cache key behind its own large asynchronous write",
    broken: "the 256 KiB fragment write and the hot-key read share one cache connection",
    fixed: "writes go on a dedicated connection; reads never wait behind them",
    method: "GET",
    path: PATH,
    body: "",
    truth: Truth {
        kind: Some(FindingKind::PipelineHol),
        time_lost_us: WRITE_US,
        facts: &[
            Fact {
                name: "value_bytes",
                value: VALUE_BYTES as u64,
            },
            Fact {
                name: "write_us",
                value: WRITE_US,
            },
        ],
    },
    load: None,
    fixed_under_load: &[],
    holds: Holding::Shared,
    start: boxed,
    tls: None,
};

/// The page's cache connections: one for both (broken) or one each.
struct Cache {
    reads: SharedConnection,
    writes: SharedConnection,
    /// One stash at a time: a page finding one in flight skips its own
    /// (write-behind), so a slow cache never piles up writes.
    stashing: Arc<AtomicBool>,
    fragment: Bytes,
    truth: Arc<CallLog>,
}

impl Cache {
    /// Stashes the fragment without waiting, then reads the hot key.
    async fn render(&self, truth: &Calls) -> std::io::Result<()> {
        if !self.stashing.swap(true, Ordering::AcqRel) {
            let write = self.writes.set(STASH_KEY, self.fragment.clone(), truth);
            let stashing = self.stashing.clone();
            tokio::spawn(async move {
                let _ = write.wait().await;
                stashing.store(false, Ordering::Release);
            });
        }
        self.reads.get(HOT_KEY, truth).wait().await.map(|_| ())
    }
}

async fn page(mut stream: TcpStream, cache: Arc<Cache>) {
    let _ = stream.set_nodelay(true);
    let peer = stream.peer_addr().map_or(0, |a| a.port());
    let mut buf = BytesMut::with_capacity(4096);
    while let Ok(Some(head)) = read_request(&mut stream, &mut buf, false).await {
        let _ = buf.split_to(head.head_len + head.content_length);
        let truth = cache.truth.request(peer);
        let (status, body) = match cache.render(&truth).await {
            Ok(()) => ("200 OK", "{\"product\":42,\"price\":12.5}\n"),
            Err(_) => ("502 Bad Gateway", "{\"error\":\"cache\"}\n"),
        };
        let out = json_response(status, body.as_bytes());
        let sent = stream.write_all(&out).await;
        truth.served();
        if sent.is_err() || head.close {
            return;
        }
    }
}

async fn serve_pages(listener: TcpListener, cache: Arc<Cache>) {
    accept_each(listener, |stream| page(stream, cache.clone())).await;
}

/// client → product page → a real cache at `cache` (Redis or memcached),
/// the stash `value_bytes` long: broken or fixed.
pub async fn start_with_cache(
    fixed: bool,
    cache: SocketAddr,
    protocol: CacheProtocol,
    value_bytes: usize,
) -> std::io::Result<Running> {
    start_page(fixed, cache, protocol, value_bytes, Vec::new()).await
}

async fn start_page(
    fixed: bool,
    cache: SocketAddr,
    protocol: CacheProtocol,
    value_bytes: usize,
    mut tasks: Vec<JoinHandle<()>>,
) -> std::io::Result<Running> {
    let reads = SharedConnection::connect(cache, protocol).await?;
    reads
        .set(
            HOT_KEY,
            Bytes::from_static(b"{\"currency\":\"EUR\"}"),
            &Calls::none(),
        )
        .wait()
        .await?;
    let writes = if fixed {
        SharedConnection::connect(cache, protocol).await?
    } else {
        reads.clone()
    };
    let cache_state = Arc::new(Cache {
        reads,
        writes,
        stashing: Arc::new(AtomicBool::new(false)),
        fragment: Bytes::from(vec![b'x'; value_bytes]),
        truth: CallLog::new(),
    });
    let truth = cache_state.truth.clone();
    let (front_l, addr) = listen().await?;
    tasks.push(tokio::spawn(serve_pages(front_l, cache_state)));
    Ok(Running::new(
        format!("http://{addr}{PATH}"),
        vec![addr.port(), cache.port()],
        tasks,
    )
    .with_truth(truth))
}

/// The page on the lab's own RESP server.
async fn start(fixed: bool) -> std::io::Result<Running> {
    let (cache_l, cache) = listen().await?;
    let cache_task = tokio::spawn(respmini::serve(cache_l, Duration::from_micros(WRITE_US)));
    start_page(
        fixed,
        cache,
        CacheProtocol::Resp,
        VALUE_BYTES,
        vec![cache_task],
    )
    .await
}

fn boxed(fixed: bool) -> BoxedStart {
    Box::pin(start(fixed))
}
