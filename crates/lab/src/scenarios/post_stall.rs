//! Case 000 (GoCardless): POSTs 250 ms from Ruby, 50 ms from curl. Ruby's
//! Net::HTTP wrote headers and body in two writes without TCP_NODELAY; HAProxy
//! 1.4.18 kept delayed ACKs on the incomplete request, so the body waited for
//! the delayed-ACK timer. HAProxy 1.4.19 re-enabled TCP_QUICKACK there.

use crate::http1::{self, AppConfig};
use crate::proxy::{self, ProxyConfig};
use crate::scenario::{listen, BoxedStart, Holding, Running, Scenario, Truth};
use whyslow_model::FindingKind;

/// Linux's minimum delayed-ACK timeout, TCP_DELACK_MIN = HZ/25 (include/net/tcp.h).
pub const LINUX_DELACK_MIN_US: u64 = 40_000;

const PATH: &str = "/search";

pub const SCENARIO: Scenario = Scenario {
    name: "post-stall",
    case: "000",
    summary: "POST through a proxy that delays its ACKs (HAProxy 1.4.18)",
    broken: "proxy keeps delayed ACKs on incomplete requests; clients that write headers and body separately without TCP_NODELAY stall",
    fixed: "proxy re-enables TCP_QUICKACK on incomplete requests (HAProxy 1.4.19)",
    method: "POST",
    path: PATH,
    body: "{\"query\":{\"match\":{\"name\":\"whyslow\"}}}",
    truth: Truth { kind: Some(FindingKind::NagleDelayedAck), time_lost_us: LINUX_DELACK_MIN_US, facts: &[] },
    load: None,
    fixed_under_load: &[],
    holds: Holding::Nothing,
    start: boxed,
    tls: None,
};

/// client → proxy (delayed or quick ACKs) → app.
async fn start(fixed: bool) -> std::io::Result<Running> {
    let (app_l, app) = listen().await?;
    let (proxy_l, front) = listen().await?;
    let app_task = tokio::spawn(http1::serve(app_l, AppConfig::default()));
    let cfg = ProxyConfig {
        upstream: app,
        quickack_on_partial: fixed,
    };
    let proxy_task = tokio::spawn(proxy::serve(proxy_l, cfg));
    let url = format!("http://{front}{}", PATH);
    Ok(Running::new(
        url,
        vec![front.port(), app.port()],
        vec![proxy_task, app_task],
    ))
}

fn boxed(fixed: bool) -> BoxedStart {
    Box::pin(start(fixed))
}
