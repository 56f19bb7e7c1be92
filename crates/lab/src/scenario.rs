//! Scenarios: a case study on loopback, broken or fixed, with the truth it injects.
//! Each scenario lives in its own file under `scenarios/` and is listed in `SCENARIOS`.

use crate::scenarios;
use crate::truth::CallLog;
use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;
use whyslow_model::FindingKind;

/// What a scenario injects: the cause a diagnosis must name and what it costs.
#[derive(Debug, Clone, Copy)]
pub struct Truth {
    /// None: nothing is wrong, a diagnosis must find nothing.
    pub kind: Option<FindingKind>,
    /// Time lost per affected request.
    pub time_lost_us: u64,
    /// What else the scenario sets and a diagnosis can be held to
    /// ("calls": 11, "pool": 5).
    pub facts: &'static [Fact],
}

/// One number a scenario injects.
#[derive(Debug, Clone, Copy)]
pub struct Fact {
    pub name: &'static str,
    pub value: u64,
}

impl Truth {
    pub fn fact(&self, name: &str) -> Option<u64> {
        self.facts.iter().find(|f| f.name == name).map(|f| f.value)
    }
}

/// A load phase a diagnosis needs to see the scenario's cause (a stall
/// that hits 1 call in N shows only over many requests).
#[derive(Debug, Clone, Copy)]
pub struct LoadHint {
    /// Requests per second.
    pub rate: u32,
    pub duration_ms: u64,
}

/// The future of a starting scenario.
pub type BoxedStart = Pin<Box<dyn Future<Output = std::io::Result<Running>> + Send>>;
/// Starts a scenario's servers; `true` starts the fixed variant.
pub type StartFn = fn(bool) -> BoxedStart;

#[derive(Clone, Copy)]
pub struct Scenario {
    pub name: &'static str,
    /// The case study it reproduces (file prefix in cases/).
    pub case: &'static str,
    pub summary: &'static str,
    pub broken: &'static str,
    pub fixed: &'static str,
    /// The request a client makes (the user of `lab run` or `demo`).
    pub method: &'static str,
    pub path: &'static str,
    pub body: &'static str,
    /// Truth of the broken variant; the fixed variant injects nothing of that kind.
    pub truth: Truth,
    /// The load phase `demo` adds to the diagnosis, if the cause needs one.
    pub load: Option<LoadHint>,
    /// What the fixed variant shows under `CONCURRENT_CLIENTS` clients at
    /// once: the queueing concurrency itself causes there, if any (a pool
    /// smaller than the clients really queues). Empty: nothing.
    pub fixed_under_load: &'static [FindingKind],
    /// What the broken app's requests hold of their backing connections:
    /// what attribution without trace context can tell apart depends on it.
    pub holds: Holding,
    pub start: StartFn,
    /// The same scenario with every hop over TLS, if it has that variant:
    /// its servers and clients write their secrets to `Running::keylog`.
    pub tls: Option<StartFn>,
}

impl std::fmt::Debug for Scenario {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scenario")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

pub const SCENARIOS: &[Scenario] = &[
    scenarios::post_stall::SCENARIO,
    scenarios::fanout_pool::SCENARIO,
    scenarios::grpc_streams::SCENARIO,
    scenarios::orm_storm::SCENARIO,
    scenarios::orm_storm::MYSQL_SCENARIO,
    scenarios::tax_stall::SCENARIO,
    scenarios::cache_hol::SCENARIO,
    scenarios::dns_lookups::SCENARIO,
    scenarios::healthy::SCENARIO,
];

pub fn find(name: &str) -> Option<&'static Scenario> {
    SCENARIOS.iter().find(|s| s.name == name)
}

/// How an app's requests use their backing connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Holding {
    /// No backing call.
    Nothing,
    /// A connection of a pool for the request's whole work (an ORM's session).
    Request,
    /// A pooled connection per call, given back after it.
    Call,
    /// One connection every request uses at once (pipelined, multiplexed).
    Shared,
    /// Most calls are DNS queries, each on a socket of its own that ties
    /// it to no request: the wire tells them apart only where one request
    /// alone was waiting.
    Lookups,
}

/// Clients at once in the lab's concurrent runs (`demo`'s concurrent
/// rows, the tests under load).
pub const CONCURRENT_CLIENTS: u32 = 16;

/// A started scenario. Its servers stop when this is dropped.
pub struct Running {
    pub url: String,
    /// Every port the scenario listens on: the front door first, then the backing services.
    pub ports: Vec<u16>,
    /// The TLS variant's key log (NSS format), removed when the scenario stops.
    pub keylog: Option<PathBuf>,
    /// What its apps recorded of each request's calls, out of band.
    pub truth: Arc<CallLog>,
    tasks: Vec<JoinHandle<()>>,
}

impl Running {
    pub fn new(url: String, ports: Vec<u16>, tasks: Vec<JoinHandle<()>>) -> Running {
        Running {
            url,
            ports,
            keylog: None,
            truth: CallLog::new(),
            tasks,
        }
    }

    /// With the log its apps write their calls to.
    pub fn with_truth(mut self, truth: Arc<CallLog>) -> Running {
        self.truth = truth;
        self
    }

    pub fn with_keylog(mut self, path: PathBuf) -> Running {
        self.keylog = Some(path);
        self
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
        if let Some(k) = &self.keylog {
            let _ = std::fs::remove_file(k);
        }
    }
}

/// The runtime a lab command serves on until stopped: two workers, as the
/// lab's servers need no more.
pub fn runtime() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| e.to_string())
}

/// A listener on an ephemeral loopback port.
pub async fn listen() -> std::io::Result<(TcpListener, SocketAddr)> {
    let l = TcpListener::bind("127.0.0.1:0").await?;
    let a = l.local_addr()?;
    Ok((l, a))
}

/// Accepts connections for ever, each handled on its own task (a
/// connection's error ends only that connection).
pub async fn accept_each<F, Fut>(listener: TcpListener, handle: F)
where
    F: Fn(TcpStream) -> Fut,
    Fut: Future + Send + 'static,
    Fut::Output: Send + 'static,
{
    loop {
        if let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(handle(stream));
        }
    }
}

impl Scenario {
    /// `whyslow lab run`: started on loopback (every hop over TLS with
    /// `tls`), its URL and request told to `said`, served until Ctrl-C.
    pub fn serve_until_stopped(
        &self,
        fixed: bool,
        tls: bool,
        said: &mut dyn FnMut(&str),
    ) -> Result<(), String> {
        runtime()?.block_on(async {
            let started = match tls {
                true => self.start_tls(fixed).await,
                false => self.start(fixed).await,
            };
            let running = started.map_err(|e| format!("cannot start {}: {e}", self.name))?;
            let keys = running.keylog.as_ref().map_or(String::new(), |k| {
                format!("key log: {} (removed on exit)\n", k.display())
            });
            let variant = if fixed { self.fixed } else { self.broken };
            let (method, path, url) = (self.method, self.path, &running.url);
            said(&format!(
                "{url}\n{keys}{method} {path} ({variant}); Ctrl-C to stop"
            ));
            let _ = tokio::signal::ctrl_c().await;
            Ok(())
        })
    }

    /// Starts the scenario's servers on loopback (ephemeral ports).
    pub async fn start(&self, fixed: bool) -> std::io::Result<Running> {
        (self.start)(fixed).await
    }

    /// Starts the TLS variant, or says that the scenario has none.
    pub async fn start_tls(&self, fixed: bool) -> std::io::Result<Running> {
        match self.tls {
            Some(start) => start(fixed).await,
            None => Err(std::io::Error::other(format!(
                "{} has no TLS variant",
                self.name
            ))),
        }
    }
}

/// `lab list`: each scenario, its case, and what its two variants do.
pub fn listing() -> String {
    let mut s = String::new();
    for sc in SCENARIOS {
        s += &format!("{:<12} case {:<4} {}\n", sc.name, sc.case, sc.summary);
        s += &format!("{:<12}   broken: {}\n", "", sc.broken);
        s += &format!("{:<12}   fixed:  {}\n", "", sc.fixed);
        if sc.tls.is_some() {
            s += &format!("{:<12}   also over TLS (--tls)\n", "");
        }
    }
    s
}

/// A scenario by name, or an error that lists the names there are.
pub fn named(name: &str) -> Result<&'static Scenario, String> {
    find(name).ok_or_else(|| {
        let names: Vec<&str> = SCENARIOS.iter().map(|s| s.name).collect();
        format!("no scenario {name:?} (one of: {})", names.join(", "))
    })
}
