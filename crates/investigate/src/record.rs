//! `capture`: packets to a pcapng file for a duration, while a command
//! runs, or until Ctrl-C — whichever comes first.

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::ExitStatus;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use whyslow_ebpf::{events_path, Cgroup, Filter, Processes, TraceStats, Tracer};
use whyslow_model::ServerWorkload;
use whyslow_wire::live::{CaptureStats, LiveCapture};

use crate::target::Target;

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
    /// events file, on the capture's ports only (when it has some).
    pub ebpf: Option<Traced>,
    /// Capture inside this workload's network namespace (`--pid`,
    /// `--container`, `--cgroup`); None: this process's own.
    pub target: Option<Target>,
}

/// The processes `capture --ebpf` traces: these, or a cgroup's, or with
/// neither given the command's, or with no command every process.
#[derive(Debug, Clone, Default)]
pub struct Traced {
    pub pids: Vec<u32>,
    /// A cgroup v2 (a container), as /proc/PID/cgroup names it.
    pub cgroup: Option<String>,
}

impl Traced {
    fn named(&self) -> bool {
        !self.pids.is_empty() || self.cgroup.is_some()
    }

    fn filter(&self, command: bool, ports: &[u16]) -> Result<Filter, String> {
        let processes = match &self.cgroup {
            Some(name) => Processes::Cgroup(
                Cgroup::named(name)
                    .map_err(|e| format!("--cgroup: {e}; carrying on with packets only"))?,
            ),
            None if !self.named() && !command => Processes::All,
            None => Processes::Pids(self.pids.clone()),
        };
        Ok(Filter {
            processes,
            ports: ports.to_vec(),
        })
    }
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
    /// With a target: who listened on each port of its namespace at the end.
    pub servers: Vec<ServerWorkload>,
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
        out.extend(
            self.servers
                .iter()
                .map(|s| format!("listening on :{}: {}", s.port, s.workload.label())),
        );
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

extern "C" fn on_stop_signal(_: libc::c_int) {
    INTERRUPTED.store(true, Ordering::Relaxed);
}

/// A flag that turns true at Ctrl-C (SIGINT) or SIGTERM (what a container
/// runtime sends to stop a pod), for runs without an async runtime.
pub fn stop_signal() -> &'static AtomicBool {
    // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
    unsafe {
        let handler = on_stop_signal as *const () as libc::sighandler_t;
        libc::signal(libc::SIGINT, handler);
        libc::signal(libc::SIGTERM, handler);
    }
    &INTERRUPTED
}

/// Records until the first of: the duration, the command's exit, Ctrl-C.
/// `waiting` is called once when only Ctrl-C can end it.
pub fn record(job: &Recording, waiting: impl FnOnce()) -> Result<Recorded, RecordError> {
    let setup = match &job.target {
        Some(t) => t.thread_setup().map_err(RecordError::Start)?,
        None => Box::new(|| Ok(())),
    };
    let handle = LiveCapture::spawn_on(setup, &job.iface, &job.ports, &job.ports, &job.file)
        .map_err(|e| RecordError::Start(format!("capture on {}: {e}", job.iface)))?;
    let mut tracer = job.ebpf.as_ref().map(|traced| {
        let filter = traced.filter(!job.command.is_empty(), &job.ports)?;
        Tracer::beside(&filter, &job.file)
    });
    let interrupted = stop_signal();
    let start = Instant::now();
    // The command is traced when no process was named.
    let named = job.ebpf.as_ref().is_some_and(Traced::named);
    let trace_command = matches!((&tracer, named), (Some(Ok(_)), false));
    let mut add_pid = |pid: u32| {
        if let Some(Ok(t)) = tracer.as_mut() {
            if let Err(e) = t.add_pid(pid) {
                eprintln!("whyslow: eBPF: {e}");
            }
        }
    };
    let hold: Option<&mut dyn FnMut(u32)> = trace_command.then_some(&mut add_pid);
    let mut child = match job.command.split_first() {
        Some((cmd, rest)) => match spawn_held(cmd, rest, hold) {
            Ok(c) => Some(c),
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
    while !interrupted.load(Ordering::Relaxed) && job.duration.is_none_or(|l| start.elapsed() < l) {
        if let Some(Ok(Some(s))) = child.as_mut().map(|c| c.try_wait()) {
            status = Some(s);
            break;
        }
        std::thread::sleep(TICK);
    }
    let servers = job.target.as_ref().map(Target::servers).unwrap_or_default();
    let ebpf = tracer.map(|t| t.and_then(Tracer::stop));
    let stats = handle
        .stop()
        .map_err(|e| RecordError::Capture(format!("capture: {e}")))?;
    Ok(Recorded {
        stats,
        ebpf,
        command: status,
        servers,
    })
}

/// Spawns `cmd`. With `on_pid`, the child is held before its exec until
/// `on_pid` has had its pid: a command traced by pid must not fork (a
/// shell's first command) before its pid is in the tracer's map. The child
/// writes its pid on one pipe and waits for a byte on another, since
/// `spawn` itself only returns once the child has exec'd.
fn spawn_held(
    cmd: &str,
    args: &[String],
    on_pid: Option<&mut dyn FnMut(u32)>,
) -> std::io::Result<std::process::Child> {
    use std::os::fd::AsRawFd;
    use std::os::unix::process::CommandExt;
    let mut command = std::process::Command::new(cmd);
    command.args(args);
    let Some(on_pid) = on_pid else {
        return command.spawn();
    };
    let (pid_read, pid_write) = pipe()?;
    let (gate_read, gate_write) = pipe()?;
    let fds = [pid_read.as_raw_fd(), pid_write.as_raw_fd()];
    let gate = [gate_read.as_raw_fd(), gate_write.as_raw_fd()];
    // SAFETY: between fork and exec the closure calls only close, getpid,
    // write and read, all async-signal-safe; it allocates nothing.
    unsafe {
        command.pre_exec(move || {
            libc::close(fds[0]);
            libc::close(gate[1]);
            let pid = libc::getpid().to_ne_bytes();
            libc::write(fds[1], pid.as_ptr().cast(), pid.len());
            let mut byte = 0u8;
            while libc::read(gate[0], (&mut byte as *mut u8).cast(), 1) < 0
                && *libc::__errno_location() == libc::EINTR
            {}
            Ok(())
        });
    }
    std::thread::scope(|scope| {
        let spawned = scope.spawn(move || {
            let child = command.spawn();
            // A failed fork leaves the pid pipe to end empty.
            drop(pid_write);
            child
        });
        let mut pid = [0u8; 4];
        if std::fs::File::from(pid_read).read_exact(&mut pid).is_ok() {
            on_pid(u32::from_ne_bytes(pid));
        }
        // The byte, or the pipe's close, lets the child exec.
        let _ = std::fs::File::from(gate_write).write_all(b"g");
        drop(gate_read);
        spawned
            .join()
            .unwrap_or_else(|_| Err(std::io::Error::other("spawn panicked")))
    })
}

/// A pipe whose ends close on exec.
fn pipe() -> std::io::Result<(std::os::fd::OwnedFd, std::os::fd::OwnedFd)> {
    use std::os::fd::{FromRawFd, OwnedFd};
    let mut fds = [0; 2];
    // SAFETY: pipe2 writes two descriptors into the array it is given.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: both descriptors were just opened and are owned here alone.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}
