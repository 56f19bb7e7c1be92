//! A well-behaved service: keep-alive, one write per response, no waiting.
//! A diagnosis of it must find nothing at all.

use crate::http1::{self, AppConfig};
use crate::scenario::{listen, BoxedStart, Holding, Running, Scenario, Truth};

const PATH: &str = "/";

pub const SCENARIO: Scenario = Scenario {
    name: "healthy",
    case: "-",
    summary: "a well-behaved service: nothing to find",
    broken: "the same service (nothing is broken)",
    fixed: "the same service",
    method: "GET",
    path: PATH,
    body: "",
    truth: Truth {
        kind: None,
        time_lost_us: 0,
        facts: &[],
    },
    load: None,
    fixed_under_load: &[],
    holds: Holding::Nothing,
    start: boxed,
    tls: None,
};

async fn start() -> std::io::Result<Running> {
    let (l, a) = listen().await?;
    let task = tokio::spawn(http1::serve(l, AppConfig::default()));
    Ok(Running::new(
        format!("http://{a}{}", PATH),
        vec![a.port()],
        vec![task],
    ))
}

fn boxed(_fixed: bool) -> BoxedStart {
    Box::pin(start())
}
