//! The load engine: lanes that send requests on schedule (open model) or back
//! to back (closed model), and a collector that gathers what they recorded
//! once per interval.
//!
//! A lane is one connection, or one stream of a shared HTTP/2 connection. In
//! the open model lane i owns slots i, i+L, i+2L, … of the schedule (wrk2's
//! per-connection schedule). A slot whose lane is still busy with an earlier
//! request waits for it: that wait is `queue` time, part of the corrected
//! latency (a user arriving then would have waited too). Time lost after the
//! lane was free — a late timer, a starved task — is `lag`: whyslow's own
//! lateness, the measure of whether the generator kept its schedule.

use crate::histograms::{error_class, Recorded, Sample};
use crate::result::IntervalPoint;
use crate::schedule::{Model, Schedule};
use crate::timer::Timer;
use bytes::BytesMut;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};
use tokio::sync::Notify;
use tokio::task::JoinSet;
use whyslow_client::h1::{self, ExchangeTiming, PreparedRequest};
use whyslow_client::{
    connect, ErrorKind, H2Conn, HttpVersion, Io, ProbeError, RequestSpec, Target, TlsOptions,
    TlsSetup,
};
pub use whyslow_model::Interval;

/// After Ctrl-C, in-flight requests get this long to finish before they are
/// cut and counted as unfinished: a healthy service answers well within it,
/// and a person waiting for the results does not have to press twice.
pub const INTERRUPT_GRACE: Duration = Duration::from_secs(2);
/// Initial read buffer per HTTP/1.1 connection (the probe's size).
const READ_BUF: usize = 16 * 1024;

/// Everything a run needs to know.
#[derive(Debug, Clone)]
pub struct LoadPlan {
    pub url: String,
    pub spec: RequestSpec,
    pub tls: TlsOptions,
    pub model: Model,
    pub connections: usize,
    /// Concurrent streams per HTTP/2 connection (lanes per connection).
    pub streams: usize,
    /// Stop starting requests after this long; None: run until `max_requests`.
    pub duration: Option<Duration>,
    pub max_requests: Option<u64>,
    /// How often the collector gathers interval histograms.
    pub interval: Duration,
    /// Worker threads, each with its own single-threaded runtime and histogram shard.
    pub threads: usize,
}

impl LoadPlan {
    pub fn lanes(&self) -> usize {
        self.connections.max(1) * self.streams.max(1)
    }
}

/// Asks a run to stop starting requests (Ctrl-C, or a caller's deadline).
#[derive(Debug, Default)]
pub struct Stop {
    flag: AtomicBool,
    notify: Notify,
}

impl Stop {
    pub fn trigger(&self) {
        self.flag.store(true, Ordering::SeqCst);
        self.notify.notify_waiters();
    }

    pub fn is_set(&self) -> bool {
        self.flag.load(Ordering::Relaxed)
    }

    /// Returns once `trigger` was called.
    pub async fn wait(&self) {
        loop {
            let notified = self.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.is_set() {
                return;
            }
            notified.await;
        }
    }
}

/// What a run measured.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub totals: Recorded,
    pub started_at: SystemTime,
    pub elapsed: Duration,
    pub interrupted: bool,
    /// Requests still in flight when the run was cut.
    pub unfinished: u64,
    pub lanes: usize,
    pub intervals: Vec<IntervalPoint>,
}

enum Session {
    H1 { io: Box<dyn Io>, buf: BytesMut },
    H2 { conn: H2Conn, generation: u64 },
}

struct Lane {
    id: usize,
    shard: usize,
    session: Option<Session>,
    /// Generation of the shared HTTP/2 connection that failed on this lane.
    failed_generation: u64,
}

/// Connect and TLS time of a request that opened its connection.
type Opened = Option<(u64, u64)>;

struct Ctx {
    target: Target,
    spec: RequestSpec,
    tls: Option<TlsSetup>,
    prepared: PreparedRequest,
    schedule: Option<Schedule>,
    start: Instant,
    duration: Option<Duration>,
    max_requests: Option<u64>,
    lanes: u64,
    connections: usize,
    streams: usize,
    claimed: AtomicU64,
    in_flight: AtomicU64,
    /// Closed model: the run's duration is over (set by the collector, so
    /// lanes need not read the clock before every request).
    ended: AtomicBool,
    shards: Vec<Mutex<Recorded>>,
    /// One per connection when streams share it (HTTP/2).
    shared: Vec<tokio::sync::Mutex<Option<(u64, H2Conn)>>>,
    generation: AtomicU64,
    stop: Arc<Stop>,
}

fn micros(d: Duration) -> u64 {
    d.as_micros().min(u128::from(u64::MAX)) as u64
}

impl Ctx {
    fn new(plan: &LoadPlan, stop: Arc<Stop>) -> Result<Ctx, ProbeError> {
        let target = Target::parse(&plan.url)?;
        let tls = match target.https {
            true => Some(TlsSetup::new(&plan.tls, plan.spec.version)?),
            false => None,
        };
        let connections = plan.connections.max(1);
        // One worker thread (and histogram shard) per thread asked for, never
        // more than there are connections to share out.
        let workers = plan.threads.clamp(1, connections);
        let streams = plan.streams.max(1);
        Ok(Ctx {
            prepared: PreparedRequest::new(&target, &plan.spec),
            target,
            spec: plan.spec.clone(),
            tls,
            schedule: match &plan.model {
                Model::Open(s) => Some(s.clone()),
                Model::Closed => None,
            },
            start: Instant::now(),
            duration: plan.duration,
            max_requests: plan.max_requests,
            lanes: plan.lanes() as u64,
            streams,
            claimed: AtomicU64::new(0),
            in_flight: AtomicU64::new(0),
            ended: AtomicBool::new(false),
            shards: (0..workers).map(|_| Mutex::default()).collect(),
            connections,
            shared: match streams > 1 {
                true => (0..connections).map(|_| Default::default()).collect(),
                false => Vec::new(),
            },
            generation: AtomicU64::new(0),
            stop,
        })
    }

    /// When slot `n` of the schedule is meant to start; None past the end.
    fn intended(&self, n: u64) -> Option<Instant> {
        if self.max_requests.is_some_and(|max| n >= max) {
            return None;
        }
        let t = self.schedule.as_ref()?.time_of(n)?;
        if !t.is_finite() || t < 0.0 {
            return None;
        }
        let at = Duration::from_secs_f64(t);
        if self.duration.is_some_and(|d| at >= d) {
            return None;
        }
        Some(self.start + at)
    }

    /// Closed model: may this lane start another request?
    fn claim(&self) -> bool {
        if self.stop.is_set() {
            return false;
        }
        if self.ended.load(Ordering::Relaxed) {
            return false;
        }
        match self.max_requests {
            None => true,
            Some(n) => self.claimed.fetch_add(1, Ordering::Relaxed) < n,
        }
    }

    async fn connect_new(&self) -> Result<(Session, (u64, u64)), ProbeError> {
        let c = connect(&self.target, &self.spec, self.tls.as_ref()).await?;
        let phases = (c.dns_us + c.connect_us, c.tls_us);
        let h2 = c.alpn_h2() || (c.tls.is_none() && self.spec.version == HttpVersion::Http2);
        let session = if h2 {
            Session::H2 {
                conn: H2Conn::handshake(c.io, self.spec.timeout).await?,
                generation: self.generation.fetch_add(1, Ordering::Relaxed) + 1,
            }
        } else {
            Session::H1 {
                io: c.io,
                buf: BytesMut::with_capacity(READ_BUF),
            }
        };
        Ok((session, phases))
    }

    /// A session for `lane`: its own, a stream of its shared HTTP/2 connection, or a new one.
    /// `failed` is the generation of the shared connection that last failed on the lane.
    async fn open_session(
        &self,
        lane: usize,
        failed: u64,
    ) -> Result<(Session, Opened), ProbeError> {
        if self.shared.is_empty() {
            let (s, phases) = self.connect_new().await?;
            return Ok((s, Some(phases)));
        }
        let mut slot = self.shared[lane / self.streams].lock().await;
        if let Some((generation, conn)) = slot.as_ref() {
            if *generation != failed {
                let s = Session::H2 {
                    conn: conn.clone(),
                    generation: *generation,
                };
                return Ok((s, None));
            }
        }
        let (session, phases) = self.connect_new().await?;
        if let Session::H2 { conn, generation } = &session {
            *slot = Some((*generation, conn.clone()));
        }
        Ok((session, Some(phases)))
    }

    /// One request on `lane`, opening a connection when it has none.
    async fn request(&self, lane: &mut Lane) -> Result<(ExchangeTiming, Opened), ProbeError> {
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        let r = self.attempt(lane).await;
        self.in_flight.fetch_sub(1, Ordering::Relaxed);
        r
    }

    async fn attempt(&self, lane: &mut Lane) -> Result<(ExchangeTiming, Opened), ProbeError> {
        let mut opened = None;
        if lane.session.is_none() {
            let (s, o) = self.open_session(lane.id, lane.failed_generation).await?;
            lane.session = Some(s);
            opened = o;
        }
        let result = match lane.session.as_mut() {
            Some(Session::H1 { io, buf }) => {
                h1::exchange(io.as_mut(), buf, &self.prepared, self.spec.timeout).await
            }
            Some(Session::H2 { conn, .. }) => conn.exchange(&self.target, &self.spec).await,
            None => unreachable!("session opened above"),
        };
        match result {
            Ok(t) => {
                if !t.keep_alive {
                    lane.session = None;
                }
                Ok((t, opened))
            }
            Err(e) => {
                if let Some(Session::H2 { generation, .. }) = lane.session.take() {
                    lane.failed_generation = generation;
                }
                Err(e)
            }
        }
    }

    fn record(&self, lane: &Lane, r: Result<(ExchangeTiming, Opened), ProbeError>, s: Sample) {
        let mut shard = self.shards[lane.shard]
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        match r {
            Ok((t, opened)) => shard.record(&Sample {
                connect_us: opened.map(|o| o.0),
                tls_us: opened.filter(|_| self.target.https).map(|o| o.1),
                send_us: t.send_us,
                wait_us: t.wait_us,
                receive_us: t.receive_us,
                status: t.status,
                ..s
            }),
            Err(e) => shard.record_failure(error_class(&e), s.lag_us),
        }
    }
}

async fn open_lane(ctx: Arc<Ctx>, mut lane: Lane) {
    let mut timer = Timer::new();
    let mut slot = lane.id as u64;
    let mut free_at = ctx.start;
    while let Some(intended) = ctx.intended(slot) {
        if ctx.stop.is_set() {
            break;
        }
        if intended > Instant::now() {
            tokio::select! {
                biased;
                _ = ctx.stop.wait() => break,
                _ = timer.sleep_until(intended) => {}
            }
        }
        let ready = intended.max(free_at);
        let started = Instant::now();
        let r = ctx.request(&mut lane).await;
        let done = Instant::now();
        let sample = Sample {
            corrected_us: micros(done - intended),
            uncorrected_us: micros(done - started),
            lag_us: Some(micros(started.saturating_duration_since(ready))),
            queue_us: Some(micros(ready - intended)),
            ..Sample::default()
        };
        ctx.record(&lane, r, sample);
        free_at = done;
        slot += ctx.lanes;
    }
}

async fn closed_lane(ctx: Arc<Ctx>, mut lane: Lane) {
    while ctx.claim() {
        let started = Instant::now();
        let r = ctx.request(&mut lane).await;
        let took = micros(started.elapsed());
        let sample = Sample {
            corrected_us: took,
            uncorrected_us: took,
            ..Sample::default()
        };
        ctx.record(&lane, r, sample);
    }
}

/// Gathers the shards' histograms into an interval and the run's totals.
struct Collector {
    spare: Recorded,
    interval: Recorded,
    totals: Recorded,
    index: u32,
    last: Instant,
    /// One point per interval, for latency and throughput over time.
    points: Vec<IntervalPoint>,
}

impl Collector {
    fn collect(&mut self, ctx: &Ctx, on_interval: &mut dyn FnMut(&Interval)) {
        for shard in &ctx.shards {
            {
                let mut s = shard.lock().unwrap_or_else(|p| p.into_inner());
                std::mem::swap(&mut *s, &mut self.spare);
            }
            self.interval.add(&self.spare);
            self.spare.reset();
        }
        self.totals.add(&self.interval);
        let now = Instant::now();
        on_interval(&Interval {
            index: self.index,
            offset: self.last - ctx.start,
            length: now - self.last,
            recorded: &self.interval,
            totals: &self.totals,
            in_flight: ctx.in_flight.load(Ordering::Relaxed),
        });
        self.points.push(crate::result::interval_point(
            self.last - ctx.start,
            now - self.last,
            &self.interval,
        ));
        self.interval.reset();
        self.index += 1;
        self.last = now;
    }
}

/// Runs the lanes of worker `w` — connections w, w+W, … with all their
/// streams, so a shared HTTP/2 connection lives on one thread — on a
/// single-threaded runtime, to the end or until `cut` aborts them. One
/// runtime per thread (as wrk runs one event loop per thread) keeps a lane's
/// wake-ups on its own thread: no work stealing, no cross-thread wake-ups.
fn worker(ctx: Arc<Ctx>, w: usize, workers: usize, cut: Arc<Stop>) -> std::io::Result<()> {
    // I/O and timers only: without the signal and process drivers, parking
    // does not look for child processes to reap every time.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()?;
    rt.block_on(async {
        let mut set = JoinSet::new();
        for conn in (w..ctx.connections).step_by(workers) {
            for stream in 0..ctx.streams {
                let lane = Lane {
                    id: conn * ctx.streams + stream,
                    shard: w % ctx.shards.len(),
                    session: None,
                    failed_generation: 0,
                };
                match ctx.schedule {
                    Some(_) => set.spawn(open_lane(ctx.clone(), lane)),
                    None => set.spawn(closed_lane(ctx.clone(), lane)),
                };
            }
        }
        loop {
            tokio::select! {
                joined = set.join_next() => if joined.is_none() { break },
                _ = cut.wait() => {
                    set.abort_all();
                    while set.join_next().await.is_some() {}
                    break;
                }
            }
        }
    });
    Ok(())
}

fn start_workers(
    ctx: &Arc<Ctx>,
    workers: usize,
    cut: &Arc<Stop>,
    done: tokio::sync::mpsc::UnboundedSender<()>,
) -> Result<Vec<std::thread::JoinHandle<()>>, ProbeError> {
    let mut handles = Vec::with_capacity(workers);
    for w in 0..workers {
        let (ctx, cut, done) = (ctx.clone(), cut.clone(), done.clone());
        let h = std::thread::Builder::new()
            .name(format!("whyslow-load-{w}"))
            .spawn(move || {
                if let Err(e) = worker(ctx, w, workers, cut) {
                    eprintln!("whyslow: load worker {w}: {e}");
                }
                drop(done);
            })
            .map_err(|e| {
                ProbeError::new("connect", ErrorKind::Io, format!("worker thread: {e}"))
            })?;
        handles.push(h);
    }
    Ok(handles)
}

/// Runs the plan until its schedule ends, its request count is reached, or
/// `stop` is triggered; `on_interval` sees every interval as it closes.
pub async fn run(
    plan: &LoadPlan,
    stop: Arc<Stop>,
    on_interval: &mut dyn FnMut(&Interval),
) -> Result<Outcome, ProbeError> {
    let started_at = SystemTime::now();
    let ctx = Arc::new(Ctx::new(plan, stop.clone())?);
    let cut = Arc::new(Stop::default());
    let (done, mut all_done) = tokio::sync::mpsc::unbounded_channel();
    let workers = ctx.shards.len();
    let handles = start_workers(&ctx, workers, &cut, done)?;
    let mut collector = Collector {
        spare: Recorded::default(),
        interval: Recorded::default(),
        totals: Recorded::default(),
        index: 0,
        last: ctx.start,
        points: Vec::new(),
    };
    let every = plan.interval.max(Duration::from_millis(10));
    let mut ticker = tokio::time::interval_at((ctx.start + every).into(), every);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // Requests still running this long after the schedule ends are cut.
    let mut cut_at = plan.duration.map(|d| ctx.start + d + plan.spec.timeout);
    let (mut interrupted, mut unfinished) = (false, None);
    let end = plan.duration.map(|d| ctx.start + d);
    let far = || Instant::now() + Duration::from_secs(3600);
    loop {
        let at = cut_at.unwrap_or_else(far);
        tokio::select! {
            _ = tokio::time::sleep_until(end.unwrap_or_else(far).into()),
                if end.is_some() && !ctx.ended.load(Ordering::Relaxed) => {
                ctx.ended.store(true, Ordering::Relaxed);
            }
            // Every worker dropped its sender: all lanes are done.
            _ = all_done.recv() => break,
            _ = ticker.tick() => collector.collect(&ctx, on_interval),
            _ = stop.wait(), if !interrupted => {
                interrupted = true;
                let grace = Instant::now() + INTERRUPT_GRACE.min(plan.spec.timeout);
                cut_at = Some(cut_at.map_or(grace, |c| c.min(grace)));
            }
            _ = tokio::time::sleep_until(at.into()), if cut_at.is_some() && unfinished.is_none() => {
                unfinished = Some(ctx.in_flight.load(Ordering::Relaxed));
                cut.trigger();
            }
        }
    }
    for h in handles {
        let _ = h.join();
    }
    collector.collect(&ctx, on_interval);
    Ok(Outcome {
        totals: collector.totals,
        started_at,
        elapsed: ctx.start.elapsed(),
        interrupted,
        unfinished: unfinished.unwrap_or(0),
        lanes: plan.lanes(),
        intervals: collector.points,
    })
}
