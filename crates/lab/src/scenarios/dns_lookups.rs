//! DNS behind every call: a front resolves its dependency's name before
//! each backing call, through a resolver one hop away, with a Kubernetes
//! pod's resolv.conf (`search svc.cluster.local cluster.local`,
//! `ndots:5`): every lookup of `api.internal` asks under both suffixes
//! first (NXDOMAIN twice), then the name — three round trips per call —
//! and now and then the resolver drops a query and the client waits its
//! timeout. The fix: resolve once and cache (the answer's TTL), and ask
//! for the name fully qualified (`api.internal.`).

use crate::dnsmini::{self, Resolver, ResolverConfig};
use crate::http1::{self, read_whole_request, AppConfig};
use crate::pool::{Dialer, Http1Pool, Upstream};
use crate::scenario::{
    accept_each, listen, BoxedStart, Fact, Holding, Running, Scenario, Truth, CONCURRENT_CLIENTS,
};
use crate::truth::CallLog;
use bytes::BytesMut;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpStream, UdpSocket};
use whyslow_model::FindingKind;

/// Backing calls per request, one after another.
pub const CALLS: u64 = 3;
/// Names each lookup asks: two search suffixes, then the name.
pub const QUERIES_PER_LOOKUP: u64 = 3;
/// The resolver's time to answer: a resolver one hop away, busy.
pub const RESOLVER_US: u64 = 5_000;
/// Every this-many-th query is dropped (broken variant).
pub const DROP_EVERY: u64 = 40;
/// The front's stub resolver waits this long for an answer, then asks again.
pub const TIMEOUT_US: u64 = 50_000;
/// The backing API's work per call.
const API_US: u64 = 1_000;
/// The dependency's name, and where it listens.
const NAME: &str = "api.internal";
const PATH: &str = "/quote";

pub const SCENARIO: Scenario = Scenario {
    name: "dns-lookups",
    case: "-",
    summary: "a front resolves its dependency before every call, through a search list",
    broken: "3 calls, each after a lookup of api.internal under ndots:5 (two NXDOMAIN first); \
             1 query in 40 dropped",
    fixed: "the name resolved once, fully qualified (api.internal.), and cached",
    method: "GET",
    path: PATH,
    body: "",
    truth: Truth {
        kind: Some(FindingKind::DnsPerCall),
        time_lost_us: CALLS * QUERIES_PER_LOOKUP * RESOLVER_US,
        facts: &[
            Fact {
                name: "lookups",
                value: CALLS,
            },
            Fact {
                name: "queries_per_lookup",
                value: QUERIES_PER_LOOKUP,
            },
            Fact {
                name: "resolver_us",
                value: RESOLVER_US,
            },
        ],
    },
    load: None,
    fixed_under_load: &[],
    holds: Holding::Lookups,
    start: boxed,
    tls: None,
};

/// How the front finds its dependency's address.
enum Lookup {
    /// Before every call.
    EachCall(Resolver),
    /// Once, at start.
    Cached,
}

struct Front {
    lookup: Lookup,
    upstream: Upstream,
    truth: Arc<CallLog>,
}

async fn front(mut stream: TcpStream, app: Arc<Front>) {
    let peer = stream.peer_addr().map_or(0, |a| a.port());
    let mut buf = BytesMut::with_capacity(8192);
    while let Ok(Some(head)) = read_whole_request(&mut stream, &mut buf).await {
        let _ = buf.split_to(head.head_len + head.content_length);
        let truth = app.truth.request(peer);
        let mut failed = false;
        for i in 0..CALLS {
            if let Lookup::EachCall(r) = &app.lookup {
                failed |= r.lookup(NAME, &truth).await.is_err();
            }
            let path = format!("/price/{i}");
            let call = app
                .upstream
                .call(&path, head.traceparent.as_deref(), &truth);
            failed |= call.await.is_err();
        }
        let status = if failed { "502 Bad Gateway" } else { "200 OK" };
        let out = http1::json_response(status, b"{\"quote\":42}\n");
        let sent = stream.write_all(&out).await;
        truth.served();
        if sent.is_err() || head.close {
            return;
        }
    }
}

async fn start(fixed: bool) -> std::io::Result<Running> {
    let resolver_socket = UdpSocket::bind("127.0.0.1:0").await?;
    let resolver = resolver_socket.local_addr()?;
    let (api_l, api) = listen().await?;
    let (front_l, addr) = listen().await?;
    let records = vec![(NAME.to_string(), Ipv4Addr::LOCALHOST)];
    let cfg = ResolverConfig {
        records,
        latency: Duration::from_micros(RESOLVER_US),
        drop_every: if fixed { 0 } else { DROP_EVERY },
    };
    let resolver_task = tokio::spawn(dnsmini::serve(resolver_socket, cfg));
    let stub = Resolver {
        server: resolver,
        search: vec!["svc.cluster.local".into(), "cluster.local".into()],
        ndots: 5,
        timeout: Duration::from_micros(TIMEOUT_US),
        attempts: 2,
    };
    let api_cfg = AppConfig {
        work: Duration::from_micros(API_US),
        body: b"{\"price\":7}\n".to_vec(),
        ..AppConfig::default()
    };
    let api_task = tokio::spawn(http1::serve(api_l, api_cfg));
    let (lookup, api_ip) = if fixed {
        let ip = stub
            .lookup(&format!("{NAME}."), &crate::truth::Calls::none())
            .await?;
        (Lookup::Cached, ip)
    } else {
        (
            Lookup::EachCall(stub),
            std::net::IpAddr::V4(Ipv4Addr::LOCALHOST),
        )
    };
    // A pool as large as the lab's clients: no call waits for a connection.
    let pool = Http1Pool::new(
        Dialer::plain(SocketAddr::new(api_ip, api.port())),
        CONCURRENT_CLIENTS as usize,
    );
    let truth = CallLog::new();
    let app = Arc::new(Front {
        lookup,
        upstream: Upstream::Http1(pool),
        truth: truth.clone(),
    });
    let front_task = tokio::spawn(accept_each(front_l, move |tcp| {
        let app = app.clone();
        async move {
            let _ = tcp.set_nodelay(true);
            front(tcp, app).await
        }
    }));
    Ok(Running::new(
        format!("http://{addr}{PATH}"),
        vec![addr.port(), api.port(), resolver.port()],
        vec![front_task, api_task, resolver_task],
    )
    .with_truth(truth))
}

fn boxed(fixed: bool) -> BoxedStart {
    Box::pin(start(fixed))
}
