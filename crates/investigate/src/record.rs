//! `capture`: packets to a pcapng file for a duration, while a command
//! runs, or until Ctrl-C — whichever comes first.

use std::path::PathBuf;
use std::process::ExitStatus;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use whyslow_ebpf::{events_path, Filter, TraceStats, Tracer};
use whyslow_wire::live::{CaptureStats, LiveCapture};

/// How often the wait loop checks for Ctrl-C, the duration and the command.
const TICK: Duration = Duration::from_millis(20);

pub struct Recording {
    pub iface: String,
    pub ports: Vec<u16>,
    pub file: PathBuf,
    pub duration: Option<Duration>,
    /// Run this command and stop when it exits.
    pub command: Vec<String>,
    /// Also trace socket calls with eBPF (`--ebpf`) into the capture's
    /// events file: these processes, or with none given the command's, or
    /// with neither every process.
    pub ebpf: Option<Vec<u32>>,
}

#[derive(Debug)]
pub enum RecordError {
    /// The capture could not start (no CAP_NET_RAW, no such interface).
    Start(String),
    /// The command could not be started.
    Command(String),
    /// The capture failed while it ran.
    Capture(String),
}

pub struct Recorded {
    pub stats: CaptureStats,
    /// What eBPF tracing handed over, or why it could not run.
    pub ebpf: Option<Result<TraceStats, String>>,
    /// The command's exit status, when one ran to its end.
    pub command: Option<ExitStatus>,
}

impl Recorded {
    /// What was written, a line each: packets, and socket calls with --ebpf
    /// (or why none were).
    pub fn summary(&self, file: &std::path::Path) -> String {
        let s = &self.stats;
        let mut out = vec![format!(
            "{} packets ({} bytes) written to {}; {}",
            s.packets,
            s.bytes,
            file.display(),
            s.drops_line()
        )];
        match &self.ebpf {
            Some(Ok(t)) => {
                out.push(format!(
                    "{} socket calls written to {}; {} lost (at most {} in one second)",
                    t.events,
                    events_path(file).display(),
                    t.lost,
                    t.max_lost_per_second
                ));
                out.extend(tls_lines(t));
            }
            Some(Err(why)) => out.push(format!("whyslow: {why}")),
            None => {}
        }
        out.join("\n")
    }
}

/// Which TLS libraries gave their plaintext, and which could not.
pub fn tls_lines(t: &TraceStats) -> Vec<String> {
    let mut out = Vec::new();
    if !t.tls_hooked.is_empty() {
        out.push(format!(
            "TLS plaintext traced in {}",
            t.tls_hooked.join(", ")
        ));
    }
    out.extend(t.tls_failed.iter().map(|f| format!("whyslow: {f}")));
    out
}

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_sigint(_: libc::c_int) {
    INTERRUPTED.store(true, Ordering::Relaxed);
}

/// Records until the first of: the duration, the command's exit, Ctrl-C.
/// `waiting` is called once when only Ctrl-C can end it.
pub fn record(job: &Recording, waiting: impl FnOnce()) -> Result<Recorded, RecordError> {
    let handle = LiveCapture::spawn(&job.iface, &job.ports, &job.file)
        .map_err(|e| RecordError::Start(format!("capture on {}: {e}", job.iface)))?;
    let mut tracer = job.ebpf.as_ref().map(|pids| {
        let filter = match (pids.is_empty(), job.command.is_empty()) {
            (true, true) => Filter::All,
            _ => Filter::Pids(pids.clone()),
        };
        Tracer::beside(&filter, &job.file)
    });
    // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
    unsafe { libc::signal(libc::SIGINT, on_sigint as *const () as libc::sighandler_t) };
    let start = Instant::now();
    let mut child = match job.command.split_first() {
        Some((cmd, rest)) => match std::process::Command::new(cmd).args(rest).spawn() {
            Ok(c) => {
                // The command is traced when no process was named.
                let named = job.ebpf.as_ref().is_some_and(|p| !p.is_empty());
                if let (Some(Ok(t)), false) = (tracer.as_mut(), named) {
                    if let Err(e) = t.add_pid(c.id()) {
                        eprintln!("whyslow: eBPF: {e}");
                    }
                }
                Some(c)
            }
            Err(e) => {
                let _ = handle.stop();
                return Err(RecordError::Command(format!("cannot run {cmd}: {e}")));
            }
        },
        None => None,
    };
    if child.is_none() && job.duration.is_none() {
        waiting();
    }
    let mut status = None;
    while !INTERRUPTED.load(Ordering::Relaxed) && job.duration.is_none_or(|l| start.elapsed() < l) {
        if let Some(Ok(Some(s))) = child.as_mut().map(|c| c.try_wait()) {
            status = Some(s);
            break;
        }
        std::thread::sleep(TICK);
    }
    let ebpf = tracer.map(|t| t.and_then(Tracer::stop));
    let stats = handle
        .stop()
        .map_err(|e| RecordError::Capture(format!("capture: {e}")))?;
    Ok(Recorded {
        stats,
        ebpf,
        command: status,
    })
}
