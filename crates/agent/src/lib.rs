//! `whyslow agent`: runs until stopped. One capture thread per workload
//! watched (inside its network namespace), each cutting its traffic into
//! window files; each window is analyzed as `analyze` reads a file, its
//! causes said (and sent as spans to an OTLP endpoint), and its file kept
//! in a bounded ring on disk. Memory stays flat: a window is analyzed from
//! its file with the analysis's own bounds, and nothing outlives it but
//! the record said.

mod export;
mod ring;
mod signals;
mod usage;
mod window;

use export::{Exporter, Pending, Signal};
use prost::Message;
use ring::Ring;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, UNIX_EPOCH};
use whyslow_ebpf::{Cgroup, Filter, Processes, Tracer};
use whyslow_investigate::send::Destination;
use whyslow_investigate::target::Target;
use whyslow_investigate::{analyze_capture, AnalysisOptions, CaptureSource};
use whyslow_model::{AgentWindow, ExportCounts, Workload, WorkloadWindow};
use whyslow_wire::live::{CaptureHandle, LiveCapture, WindowFile};

pub use usage::status_bytes;

/// How often a wait for a window checks for Ctrl-C.
const TICK: Duration = Duration::from_millis(100);
/// A window shorter than this share of `--window` was cut by a stop.
const FULL_WINDOW_SHARE: f64 = 0.95;

#[derive(Debug, Clone)]
pub struct AgentOptions {
    /// The workloads watched; none: this host's own network namespace.
    pub targets: Vec<Target>,
    pub iface: String,
    /// TCP ports captured; empty: all TCP.
    pub ports: Vec<u16>,
    /// The service's ports (`--service`); None: found from each window's traffic.
    pub service: Option<Vec<u16>>,
    pub window: Duration,
    /// Stop after this many windows; None: at Ctrl-C.
    pub windows: Option<u64>,
    /// Where the window files are written and kept.
    pub dir: PathBuf,
    /// Windows kept on disk, for each workload (`--keep` over `--window`).
    pub keep_windows: u64,
    /// Bytes kept on disk, all workloads together.
    pub keep_bytes: u64,
    pub otlp_endpoint: Option<Destination>,
    /// Also trace each workload's socket calls with eBPF, an events file
    /// beside each window's pcapng (`--ebpf`).
    pub ebpf: bool,
}

/// One workload's capture: its name, and the windows it hands over.
struct Watched {
    label: String,
    workload: Option<Workload>,
    windows: Receiver<WindowFile>,
    /// Window files are DIR/PREFIX-NNNNNN.pcapng.
    prefix: String,
    tracer: Option<Tracer>,
    /// Why eBPF did not start, said with the first window.
    untraced: Option<String>,
}

fn window_path(dir: &Path, prefix: &str, index: u64) -> PathBuf {
    dir.join(format!("{prefix}-{index:06}.pcapng"))
}

/// What `--ebpf` traces for a workload: a container's cgroup, a process
/// (and what it starts), or with none named every process.
fn traced(target: Option<&Target>, ports: &[u16]) -> Result<Filter, String> {
    let processes = match target {
        None => Processes::All,
        Some(t) => match (&t.workload.container, &t.workload.cgroup) {
            (Some(_), Some(cgroup)) => Processes::Cgroup(Cgroup::named(cgroup)?),
            _ => Processes::Pids(vec![t.workload.pid]),
        },
    };
    Ok(Filter {
        processes,
        ports: ports.to_vec(),
    })
}

/// The file name's prefix for a workload: its container's short id, else its pid.
fn prefix_of(t: &Target) -> String {
    match &t.workload.container {
        Some(c) => c.short_id().to_string(),
        None => format!("pid{}", t.workload.pid),
    }
}

fn start(opts: &AgentOptions, target: Option<&Target>) -> Result<(Watched, CaptureHandle), String> {
    let (label, prefix) = match target {
        Some(t) => (t.workload.label(), prefix_of(t)),
        None => ("host".to_string(), "host".to_string()),
    };
    let setup = match target {
        Some(t) => t.thread_setup()?,
        None => Box::new(|| Ok(())),
    };
    let (tx, rx) = std::sync::mpsc::channel();
    let (iface, ports) = (opts.iface.clone(), opts.ports.clone());
    let (dir, every, limit) = (opts.dir.clone(), opts.window, opts.windows);
    let name = prefix.clone();
    // Traced from before the capture starts, into the first window's file.
    let (tracer, untraced) = match opts.ebpf {
        false => (None, None),
        true => match traced(target, &opts.ports)
            .and_then(|f| Tracer::beside(&f, &window_path(&opts.dir, &prefix, 0)))
        {
            Ok(t) => (Some(t), None),
            Err(e) => (None, Some(format!("--ebpf: {e}"))),
        },
    };
    let handle = LiveCapture::run_on(
        setup,
        move || LiveCapture::open(&iface, &ports),
        move |cap, flag| {
            let mut path_of = |i: u64| window_path(&dir, &name, i);
            cap.write_windows(every, limit, &mut path_of, flag, &tx)
        },
    )
    .map_err(|e| format!("capture on {} for {label}: {e}", opts.iface))?;
    let watched = Watched {
        label,
        workload: target.map(|t| t.workload.clone()),
        windows: rx,
        prefix,
        tracer,
        untraced,
    };
    Ok((watched, handle))
}

/// The next window file of `w`; stops every capture once `stop` is set (the
/// captures then hand over their last, partial windows). None: no more.
fn next_file(
    w: &Watched,
    stop: &AtomicBool,
    handles: &mut Vec<CaptureHandle>,
    errors: &mut Vec<String>,
) -> Option<WindowFile> {
    loop {
        match w.windows.recv_timeout(TICK) {
            Ok(f) => return Some(f),
            Err(RecvTimeoutError::Disconnected) => return None,
            Err(RecvTimeoutError::Timeout) if stop.load(Ordering::Relaxed) => {
                for h in handles.drain(..) {
                    if let Err(e) = h.stop() {
                        errors.push(format!("capture: {e}"));
                    }
                }
            }
            Err(RecvTimeoutError::Timeout) => {}
        }
    }
}

/// Runs until `stop` is set or `--windows` have run, calling `emit` at
/// each window's end. Err: no capture could start.
pub fn run(
    opts: &AgentOptions,
    stop: &AtomicBool,
    emit: &mut dyn FnMut(&AgentWindow),
) -> Result<u64, String> {
    std::fs::create_dir_all(&opts.dir).map_err(|e| format!("{}: {e}", opts.dir.display()))?;
    let targets: Vec<Option<&Target>> = match opts.targets.is_empty() {
        true => vec![None],
        false => opts.targets.iter().map(Some).collect(),
    };
    let mut watched = Vec::new();
    let mut handles = Vec::new();
    for t in targets {
        let (w, h) = start(opts, t)?;
        watched.push(w);
        handles.push(h);
    }
    let mut ring = Ring::new(
        opts.keep_windows.max(1) * watched.len() as u64,
        opts.keep_bytes,
    );
    let mut meter = usage::Meter::start();
    let mut exporter = opts
        .otlp_endpoint
        .as_ref()
        .map(|to| Exporter::new(to, export::MAX_QUEUED_BYTES));
    let mut errors = Vec::new();
    let mut done = 0;
    loop {
        let files: Vec<Option<WindowFile>> = watched
            .iter()
            .map(|w| next_file(w, stop, &mut handles, &mut errors))
            .collect();
        let Some(first) = files.iter().flatten().next().cloned() else {
            break;
        };
        let mut pending = Vec::new();
        let mut workloads: Vec<WorkloadWindow> = Vec::new();
        for (w, file) in watched.iter_mut().zip(&files) {
            let Some(file) = file else { continue };
            let events = cut_events(opts, w, file.index, &mut errors);
            let analysis = analyze_window(opts, file, events, &mut pending);
            let mut ww = window::workload_window(&w.label, w.workload.as_ref(), file, analysis);
            ww.errors.append(&mut errors);
            workloads.push(ww);
            ring.add(file.path.clone());
        }
        let seconds = first
            .ended
            .duration_since(first.started)
            .unwrap_or_default()
            .as_secs_f64();
        let mut record = AgentWindow {
            window: first.index,
            start_us: first
                .started
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_micros() as u64),
            seconds,
            partial: seconds < opts.window.as_secs_f64() * FULL_WINDOW_SHARE,
            workloads,
            agent: meter.reading(),
            ring: ring.state(),
            export: None,
        };
        if let Some(e) = exporter.as_mut() {
            let last = opts.windows == Some(first.index + 1) || stop.load(Ordering::Relaxed);
            record.export = Some(send(e, &record, pending, last));
        }
        emit(&record);
        done += 1;
    }
    for h in handles {
        if let Err(e) = h.stop() {
            eprintln!("whyslow: capture: {e}");
        }
    }
    for w in watched {
        if let Some(t) = w.tracer {
            let _ = t.stop();
            // The events of a window that never came: empty, or nearly.
            let next = window_path(&opts.dir, &w.prefix, done);
            let _ = std::fs::remove_file(whyslow_ebpf::events_path(&next));
        }
    }
    Ok(done)
}

/// With `--ebpf`, ends window `index`'s events file (the tracer goes on in
/// the next window's) and returns it; a failure is said with the window.
fn cut_events(
    opts: &AgentOptions,
    w: &mut Watched,
    index: u64,
    errors: &mut Vec<String>,
) -> Option<PathBuf> {
    errors.extend(w.untraced.take());
    let tracer = w.tracer.as_ref()?;
    let next = window_path(&opts.dir, &w.prefix, index + 1);
    match tracer.rotate(&next) {
        Ok(()) => Some(whyslow_ebpf::events_path(&window_path(
            &opts.dir, &w.prefix, index,
        ))),
        Err(e) => {
            errors.push(format!("--ebpf: {e}; carrying on with packets only"));
            w.tracer = None;
            None
        }
    }
}

/// Queues a window's spans (already in `pending`), logs and metrics, and
/// sends what the collector takes; the last window retries a while.
fn send(e: &mut Exporter, w: &AgentWindow, mut pending: Vec<Pending>, last: bool) -> ExportCounts {
    let logs = signals::logs(w);
    let metrics = signals::metrics(w);
    pending.push(Pending {
        signal: Signal::Logs,
        items: signals::log_count(&logs),
        body: logs.encode_to_vec(),
    });
    pending.push(Pending {
        signal: Signal::Metrics,
        items: signals::point_count(&metrics),
        body: metrics.encode_to_vec(),
    });
    let mut counts = ExportCounts::default();
    e.add(pending, &mut counts);
    let failed = match last {
        true => e.finish(&mut counts),
        false => e.flush(&mut counts),
    };
    if let Some(why) = failed {
        eprintln!("whyslow: --otlp-endpoint {why}");
    }
    counts
}

/// Analyzes one window file; with an endpoint, its spans (findings as
/// span events) are added to `pending`.
fn analyze_window(
    opts: &AgentOptions,
    file: &WindowFile,
    events: Option<PathBuf>,
    pending: &mut Vec<Pending>,
) -> Result<whyslow_investigate::CaptureAnalysis, String> {
    let analysis_opts = AnalysisOptions {
        events,
        service: opts.service.clone(),
        flow: AnalysisOptions::default_flow(),
        evidence: opts.otlp_endpoint.is_some(),
        ..AnalysisOptions::default()
    };
    let a = analyze_capture(CaptureSource::File(&file.path), &analysis_opts)?;
    if opts.otlp_endpoint.is_some() {
        let requests = whyslow_otlp::export(&a.evidence, &a.analysis.findings);
        pending.extend(requests.iter().map(|r| Pending {
            signal: Signal::Traces,
            items: whyslow_otlp::span_count(r),
            body: whyslow_otlp::encoded(r),
        }));
    }
    Ok(a)
}
