//! Loads sockio.bpf.o (checked in, built by bpf/build.sh) with aya and
//! writes what its ring buffer hands over to an events file, on a thread
//! of its own, until stopped. Where eBPF is not allowed the error is one
//! line that says why, and the caller carries on with packets.

use crate::cgroup::Cgroup;
use crate::file::EventsWriter;
use crate::uprobes::{self, SslHooks};
use aya::maps::{HashMap as BpfHashMap, MapData, PerCpuArray, RingBuf};
use aya::programs::RawTracePoint;
use aya::{Ebpf, EbpfLoader};
use std::io::{BufWriter, Write};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

static OBJECT: &[u8] = aya::include_bytes_aligned!("../bpf/sockio.bpf.o");

/// How long the reader waits on an empty ring buffer before looking at the
/// stop flag and the lost count again.
const POLL_MS: i32 = 100;

/// Which processes to trace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Processes {
    /// Every process on the machine.
    All,
    /// These processes, and the processes they start (pre-fork servers).
    Pids(Vec<u32>),
    /// The processes of a cgroup and of the cgroups below it (a container).
    Cgroup(Cgroup),
}

/// What to trace, filtered in the kernel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Filter {
    pub processes: Processes,
    /// Only TCP sockets with an end on one of these ports (Unix-domain
    /// sockets are kept); empty: every port.
    pub ports: Vec<u16>,
}

impl From<Processes> for Filter {
    fn from(processes: Processes) -> Filter {
        Filter {
            processes,
            ports: Vec::new(),
        }
    }
}

/// Ports the kernel side can filter on (the size of its `ports` map).
pub const MAX_PORTS: usize = 64;

/// What tracing handed over.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TraceStats {
    pub events: u64,
    /// Events the ring buffer had no room for.
    pub lost: u64,
    pub seconds: u64,
    pub seconds_with_loss: u64,
    pub max_lost_per_second: u64,
    /// libssl files whose plaintext was traced.
    pub tls_hooked: Vec<String>,
    /// libssl files that could not be hooked, each with why.
    pub tls_failed: Vec<String>,
}

/// Tracing under way.
pub struct Tracer {
    /// Processes traced (absent when every process is).
    pids: Option<BpfHashMap<MapData, u32, u8>>,
    /// The same, for the reader's look for libssl files (None: all).
    scan: Option<Arc<Mutex<Vec<u32>>>>,
    stop: Arc<AtomicBool>,
    reader: JoinHandle<Result<TraceStats, String>>,
    /// Asks the reader to go on in another events file (`rotate`).
    rotate: Sender<Rotation>,
}

/// Where events go.
type Out = BufWriter<Box<dyn Write + Send>>;
/// A new events file for the reader, and where it says the old one is done.
type Rotation = (Box<dyn Write + Send>, Sender<Result<(), String>>);
/// How long `rotate` waits for the reader: it looks every POLL_MS.
const ROTATE_WAIT: Duration = Duration::from_secs(5);

fn clock_ns(clock: libc::clockid_t) -> i128 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid clock id and a timespec to write to.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    i128::from(ts.tv_sec) * 1_000_000_000 + i128::from(ts.tv_nsec)
}

/// CLOCK_REALTIME − CLOCK_MONOTONIC, from the tightest of a few readings.
pub fn clock_offset_ns() -> i64 {
    (0..5)
        .map(|_| {
            let a = clock_ns(libc::CLOCK_MONOTONIC);
            let real = clock_ns(libc::CLOCK_REALTIME);
            let b = clock_ns(libc::CLOCK_MONOTONIC);
            (b - a, real - (a + b) / 2)
        })
        .min()
        .map_or(0, |(_, offset)| offset as i64)
}

/// The one line a user reads when tracing cannot start.
fn why(e: impl std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    if text.contains("Operation not permitted") || text.contains("EPERM") {
        "eBPF is not allowed here: it needs root or CAP_BPF with CAP_PERFMON (and no \
         kernel lockdown); carrying on with packets only"
            .into()
    } else {
        format!("eBPF could not start ({text}); carrying on with packets only")
    }
}

fn load(filter: &Filter) -> Result<Ebpf, String> {
    // Kernels before 5.11 charge BPF maps to RLIMIT_MEMLOCK.
    let unlimited = libc::rlimit {
        rlim_cur: libc::RLIM_INFINITY,
        rlim_max: libc::RLIM_INFINITY,
    };
    // SAFETY: setrlimit with a valid struct; failure is harmless here.
    unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &unlimited) };
    let trace_all = u8::from(filter.processes == Processes::All);
    let (cgroup_id, cgroup_level) = match &filter.processes {
        Processes::Cgroup(c) => (c.id, c.level),
        _ => (0, 0),
    };
    if filter.ports.len() > MAX_PORTS {
        return Err(format!(
            "eBPF filters on at most {MAX_PORTS} ports, {} were given",
            filter.ports.len()
        ));
    }
    let by_port = u8::from(!filter.ports.is_empty());
    let mut ebpf = EbpfLoader::new()
        .set_global("trace_all", &trace_all, true)
        .set_global("cgroup_id", &cgroup_id, true)
        .set_global("cgroup_level", &cgroup_level, true)
        .set_global("by_port", &by_port, true)
        .load(OBJECT)
        .map_err(why)?;
    let mut ports: BpfHashMap<&mut MapData, u16, u8> =
        BpfHashMap::try_from(ebpf.map_mut("ports").ok_or("no ports map")?).map_err(why)?;
    for &port in &filter.ports {
        ports.insert(port, 1, 0).map_err(why)?;
    }
    for (program, tracepoint) in [
        ("sys_enter", "sys_enter"),
        ("sys_exit", "sys_exit"),
        ("process_fork", "sched_process_fork"),
        ("process_exit", "sched_process_exit"),
        ("process_exec", "sched_process_exec"),
    ] {
        let p: &mut RawTracePoint = ebpf
            .program_mut(program)
            .ok_or_else(|| format!("no program {program}"))?
            .try_into()
            .map_err(why)?;
        p.load().map_err(why)?;
        p.attach(tracepoint).map_err(why)?;
    }
    uprobes::load_programs(&mut ebpf)?;
    Ok(ebpf)
}

/// Events lost so far: the per-CPU counters, summed.
fn lost_total(lost: &PerCpuArray<MapData, u64>) -> u64 {
    lost.get(&0, 0).map_or(0, |per_cpu| per_cpu.iter().sum())
}

impl Tracer {
    /// Starts tracing `filter`, writing events to `out`. Err: one line
    /// saying why eBPF is not available.
    pub fn start<W: Write + Send + 'static>(filter: &Filter, out: W) -> Result<Tracer, String> {
        if !cfg!(target_arch = "x86_64") {
            return Err("the eBPF source reads x86_64 system calls only; \
                        carrying on with packets only"
                .into());
        }
        let mut ebpf = load(filter)?;
        let given: &[u32] = match &filter.processes {
            Processes::Pids(pids) => pids,
            _ => &[],
        };
        let pids = match filter.processes {
            Processes::All => None,
            _ => {
                let mut map: BpfHashMap<MapData, u32, u8> =
                    BpfHashMap::try_from(ebpf.take_map("pids").ok_or("no pids map")?)
                        .map_err(why)?;
                for &pid in given {
                    map.insert(pid, 1, 0).map_err(why)?;
                }
                Some(map)
            }
        };
        let ring =
            RingBuf::try_from(ebpf.take_map("events").ok_or("no events map")?).map_err(why)?;
        let lost: PerCpuArray<MapData, u64> =
            PerCpuArray::try_from(ebpf.take_map("lost").ok_or("no lost map")?).map_err(why)?;
        let out: Box<dyn Write + Send> = Box::new(out);
        let writer = EventsWriter::new(BufWriter::new(out), clock_offset_ns())
            .map_err(|e| format!("events file: {e}"))?;
        let (rotate, rotations) = std::sync::mpsc::channel::<Rotation>();
        let scan = match filter.processes {
            Processes::All => None,
            _ => Some(Arc::new(Mutex::new(given.to_vec()))),
        };
        let cgroup = match &filter.processes {
            Processes::Cgroup(c) => Some(c.clone()),
            _ => None,
        };
        // Processes named from the start get their libraries hooked in
        // them alone; a command's are added later, and short ones need the
        // system's libssl hooked before they start.
        let per_process = match &filter.processes {
            Processes::Cgroup(_) => true,
            Processes::Pids(pids) => !pids.is_empty(),
            Processes::All => false,
        };
        let mut hooks = SslHooks::new(per_process);
        hooks.system(&mut ebpf);
        rescan(&mut hooks, &mut ebpf, scan.as_deref(), cgroup.as_ref());
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let shared = scan.clone();
        let reader = std::thread::Builder::new()
            .name("whyslow-ebpf".into())
            .spawn(move || {
                // The programs stay attached while `ebpf` lives.
                let mut libssl = Libssl {
                    ebpf,
                    hooks,
                    pids: shared,
                    cgroup,
                };
                drain(ring, lost, writer, &flag, &rotations, &mut libssl)
            })
            .map_err(|e| format!("eBPF reader thread: {e}"))?;
        Ok(Tracer {
            pids,
            scan,
            stop,
            reader,
            rotate,
        })
    }

    /// Traces `pid` too (a command started after tracing began), and the
    /// processes it starts from now on.
    pub fn add_pid(&mut self, pid: u32) -> Result<(), String> {
        if let Some(scan) = &self.scan {
            scan.lock()
                .map_err(|_| "eBPF reader thread panicked")?
                .push(pid);
        }
        match &mut self.pids {
            Some(map) => map.insert(pid, 1, 0).map_err(why),
            None => Ok(()),
        }
    }

    /// Starts tracing `filter` into the events file beside `capture`,
    /// readable by this user only (it holds payloads, as the capture does).
    /// When tracing cannot start the file is removed, so that no empty
    /// events file sits beside the capture.
    pub fn beside(filter: &Filter, capture: &std::path::Path) -> Result<Tracer, String> {
        let (path, file) = events_file(capture)?;
        Tracer::start(filter, file).inspect_err(|_| {
            let _ = std::fs::remove_file(&path);
        })
    }

    /// Goes on in the events file beside `capture`: every event read so far
    /// is in the one before, finished, when this returns (a window cut).
    pub fn rotate(&self, capture: &std::path::Path) -> Result<(), String> {
        let (_, file) = events_file(capture)?;
        let (done, said) = std::sync::mpsc::channel();
        let gone = || "the eBPF reader thread has stopped".to_string();
        self.rotate
            .send((Box::new(file), done))
            .map_err(|_| gone())?;
        said.recv_timeout(ROTATE_WAIT).map_err(|_| gone())?
    }

    /// Stops tracing; every event handed over so far is written.
    pub fn stop(self) -> Result<TraceStats, String> {
        self.stop.store(true, Ordering::Relaxed);
        self.reader
            .join()
            .map_err(|_| "the eBPF reader thread panicked".to_string())?
    }
}

/// A new events file beside `capture`, readable by this user only (it
/// holds payloads, as the capture does).
fn events_file(capture: &std::path::Path) -> Result<(std::path::PathBuf, std::fs::File), String> {
    use std::os::unix::fs::OpenOptionsExt;
    let path = crate::events_path(capture);
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&path)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    Ok((path, file))
}

/// What the reader needs to hook libssl files as they appear.
struct Libssl {
    ebpf: Ebpf,
    hooks: SslHooks,
    /// The traced processes (None: all of them).
    pids: Option<Arc<Mutex<Vec<u32>>>>,
    /// The traced cgroup, whose processes are looked for each time.
    cgroup: Option<Cgroup>,
}

/// Hooks the libssl files the traced processes map now; forgets the
/// processes that ended.
fn rescan(
    hooks: &mut SslHooks,
    ebpf: &mut Ebpf,
    pids: Option<&Mutex<Vec<u32>>>,
    cgroup: Option<&Cgroup>,
) {
    match pids {
        None => {
            hooks.scan(ebpf, &uprobes::all_pids());
        }
        Some(shared) => {
            let mut now = shared.lock().map(|p| p.clone()).unwrap_or_default();
            if let Some(c) = cgroup {
                now.extend(c.processes());
            }
            let alive = hooks.scan(ebpf, &now);
            if let Ok(mut p) = shared.lock() {
                // Keep pids added since `now` was taken.
                p.retain(|pid| alive.contains(pid) || !now.contains(pid));
            }
        }
    }
}

fn drain(
    mut ring: RingBuf<MapData>,
    lost: PerCpuArray<MapData, u64>,
    mut writer: EventsWriter<Out>,
    stop: &AtomicBool,
    rotations: &Receiver<Rotation>,
    libssl: &mut Libssl,
) -> Result<TraceStats, String> {
    let io = |e: std::io::Error| format!("events file: {e}");
    let started = Instant::now();
    let mut stats = TraceStats::default();
    let mut second = Instant::now();
    let mut lost_before = 0;
    loop {
        let stopping = stop.load(Ordering::Relaxed);
        while let Some(record) = ring.next() {
            writer.record(&record).map_err(io)?;
            stats.events += 1;
            if let (Some(pid), Some(pids)) = (crate::event::new_process(&record), &libssl.pids) {
                if let Ok(mut p) = pids.lock() {
                    p.push(pid);
                }
            }
        }
        while let Ok((out, done)) = rotations.try_recv() {
            let _ = done.send(rotated(&mut writer, out));
        }
        if stopping || second.elapsed() >= Duration::from_secs(1) {
            let total = lost_total(&lost);
            let new = total - lost_before.min(total);
            if new > 0 {
                let now_ns = clock_ns(libc::CLOCK_MONOTONIC) as u64;
                writer.lost(now_ns, total).map_err(io)?;
                stats.seconds_with_loss += 1;
                stats.max_lost_per_second = stats.max_lost_per_second.max(new);
            }
            lost_before = total;
            second = Instant::now();
            rescan(
                &mut libssl.hooks,
                &mut libssl.ebpf,
                libssl.pids.as_deref(),
                libssl.cgroup.as_ref(),
            );
        }
        if stopping {
            break;
        }
        let mut fds = [libc::pollfd {
            fd: ring.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        }];
        // SAFETY: one valid pollfd.
        unsafe { libc::poll(fds.as_mut_ptr(), 1, POLL_MS) };
    }
    writer.finish().map_err(io)?;
    stats.lost = lost_before;
    stats.seconds = started.elapsed().as_secs().max(1);
    stats.tls_hooked = std::mem::take(&mut libssl.hooks.hooked);
    stats.tls_failed = std::mem::take(&mut libssl.hooks.failed);
    Ok(stats)
}

/// Finishes the current events file and goes on in `out`.
fn rotated(writer: &mut EventsWriter<Out>, out: Box<dyn Write + Send>) -> Result<(), String> {
    let io = |e: std::io::Error| format!("events file: {e}");
    let next = EventsWriter::new(BufWriter::new(out), clock_offset_ns()).map_err(io)?;
    std::mem::replace(writer, next).finish().map_err(io)?;
    Ok(())
}
