//! Live capture on Linux: an AF_PACKET socket with a TPACKET_V3 ring and a
//! classic-BPF filter for TCP on the ports of interest. Packets are taken
//! from the network layer up (SOCK_DGRAM), so every interface, including
//! "any", yields the same link type: raw IP.

mod bpf;
mod ring;

use crate::packet::{LinkType, Packet};
use crate::write::PcapngWriter;
use crate::WireError;
use ring::Ring;
use std::ffi::CString;
use std::fs::File;
use std::io::BufWriter;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

pub use bpf::MAX_PORTS;

/// Bytes kept per packet: libpcap's default snapshot length (MAXIMUM_SNAPLEN).
pub const SNAPLEN: u32 = 262_144;
/// sll_pkttype of packets the host sent (linux/if_packet.h).
const PACKET_OUTGOING: u8 = 4;
/// How often the capture thread checks its stop flag.
const POLL_MS: u64 = 50;
/// How often the kernel's drop counter is read (reading resets it): drops
/// are told per second of the run, not only as a total.
const DROPS_EVERY: Duration = Duration::from_secs(1);

/// Totals of one capture.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CaptureStats {
    pub packets: u64,
    pub bytes: u64,
    /// Packets the kernel dropped because the ring was full.
    pub kernel_drops: u64,
    /// Seconds of the capture (whole or begun).
    pub seconds: u64,
    /// Of them, those in which the kernel dropped packets.
    pub seconds_with_drops: u64,
    /// Most packets dropped in one of them.
    pub max_drops_per_second: u64,
}

impl CaptureStats {
    /// "N dropped by the kernel in K of S seconds".
    pub fn drops_line(&self) -> String {
        format!(
            "{} dropped by the kernel in {} of {} seconds",
            self.kernel_drops, self.seconds_with_drops, self.seconds
        )
    }

    /// The totals counted since `before`.
    fn since(&self, before: &CaptureStats) -> CaptureStats {
        CaptureStats {
            packets: self.packets - before.packets,
            bytes: self.bytes - before.bytes,
            kernel_drops: self.kernel_drops - before.kernel_drops,
            seconds: self.seconds - before.seconds,
            seconds_with_drops: self.seconds_with_drops - before.seconds_with_drops,
            max_drops_per_second: self.max_drops_per_second,
        }
    }

    /// Counts one reading of the kernel's drop counter.
    fn add_drops(&mut self, dropped: u64) {
        self.kernel_drops += dropped;
        self.seconds += 1;
        if dropped > 0 {
            self.seconds_with_drops += 1;
            self.max_drops_per_second = self.max_drops_per_second.max(dropped);
        }
    }
}

pub struct LiveCapture {
    ring: Ring,
    /// ifindex of `lo`: its packets are seen twice (out and in), keep one.
    lo_ifindex: i32,
    number: u64,
    stats: CaptureStats,
}

fn ifindex(name: &str) -> Result<i32, WireError> {
    if name == "any" {
        return Ok(0);
    }
    let c = CString::new(name).map_err(|_| WireError::NoSuchInterface(name.into()))?;
    // SAFETY: c is a valid NUL-terminated string.
    let i = unsafe { libc::if_nametoindex(c.as_ptr()) };
    if i == 0 {
        return Err(WireError::NoSuchInterface(name.into()));
    }
    i32::try_from(i).map_err(|_| WireError::NoSuchInterface(name.into()))
}

fn open_error(e: std::io::Error) -> WireError {
    match e.raw_os_error() {
        Some(libc::EPERM) | Some(libc::EACCES) => WireError::PermissionDenied,
        _ => WireError::Live(e.to_string()),
    }
}

impl LiveCapture {
    /// Starts capturing TCP to/from `ports` (all TCP when empty) on `iface`
    /// ("any" for every interface), and DNS: UDP port 53 and `ports`.
    pub fn open(iface: &str, ports: &[u16]) -> Result<Self, WireError> {
        Self::open_with_udp(iface, ports, ports)
    }

    /// As `open`, with UDP on port 53 and `udp` (a resolver on a port of
    /// its own, when all TCP is taken).
    pub fn open_with_udp(iface: &str, ports: &[u16], udp: &[u16]) -> Result<Self, WireError> {
        let index = ifindex(iface)?;
        let filter = bpf::ports_filter(ports, udp, SNAPLEN)
            .ok_or_else(|| WireError::Live(format!("at most {MAX_PORTS} ports can be filtered")))?;
        let blocks = match iface {
            "lo" | "any" => ring::LOOPBACK_BLOCK_COUNT,
            _ => ring::BLOCK_COUNT,
        };
        let ring = Ring::open(index, &filter, blocks).map_err(open_error)?;
        Ok(LiveCapture {
            ring,
            lo_ifindex: ifindex("lo").unwrap_or(-1),
            number: 0,
            stats: CaptureStats::default(),
        })
    }

    /// Next packet, or `None` when none came within `timeout`.
    pub fn next_packet(&mut self, timeout: Duration) -> Option<Packet> {
        let ms = i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX);
        loop {
            let raw = self.ring.next(ms).ok()??;
            // libpcap (pcap-linux.c) skips outgoing packets on loopback:
            // each one comes back as incoming.
            if raw.pkttype == PACKET_OUTGOING && raw.ifindex == self.lo_ifindex {
                continue;
            }
            let at_us = u64::from(raw.sec) * 1_000_000 + u64::from(raw.nsec) / 1000;
            let p = Packet {
                number: self.number + 1,
                at_us,
                link: LinkType::RAW,
                data: raw.data.to_vec(),
                orig_len: raw.len,
                host: 0,
            };
            self.number += 1;
            self.stats.packets += 1;
            self.stats.bytes += u64::from(raw.len);
            return Some(p);
        }
    }

    /// Totals so far, with the kernel's drop counter read once more.
    pub fn stats(&mut self) -> CaptureStats {
        self.stats.add_drops(self.ring.drops().unwrap_or(0));
        self.stats
    }

    /// Writes packets to a pcapng file until `stop` is set, then drains what
    /// the kernel still holds.
    pub fn write_until(
        &mut self,
        path: &Path,
        stop: &AtomicBool,
    ) -> Result<CaptureStats, WireError> {
        raise_priority();
        let mut file = self.start_file(path)?;
        self.fill(&mut file, stop, None)?;
        self.drain(&mut file)?;
        let stats = self.stats();
        file.finish(stats.kernel_drops)?;
        Ok(stats)
    }

    /// Writes packets to one file per window of `every`, the window's
    /// number given to `path_of` for its name, until `stop` is set; each
    /// file is handed to `closed` once complete, with its own totals. Ends
    /// after `limit` windows, if given. A receiver gone does not stop the
    /// capture.
    pub fn write_windows(
        &mut self,
        every: Duration,
        limit: Option<u64>,
        path_of: &mut dyn FnMut(u64) -> PathBuf,
        stop: &AtomicBool,
        closed: &std::sync::mpsc::Sender<WindowFile>,
    ) -> Result<CaptureStats, WireError> {
        raise_priority();
        for index in 0.. {
            let before = self.stats;
            let path = path_of(index);
            let started = std::time::SystemTime::now();
            let mut file = self.start_file(&path)?;
            self.fill(&mut file, stop, Some(Instant::now() + every))?;
            let last = stop.load(Ordering::Relaxed) || limit == Some(index + 1);
            if last {
                self.drain(&mut file)?;
            }
            self.stats.add_drops(self.ring.drops().unwrap_or(0));
            let stats = self.stats.since(&before);
            file.finish(stats.kernel_drops)?;
            let _ = closed.send(WindowFile {
                index,
                path,
                started,
                ended: std::time::SystemTime::now(),
                stats,
            });
            if last {
                break;
            }
        }
        Ok(self.stats)
    }

    fn start_file(&self, path: &Path) -> Result<OpenFile, WireError> {
        let file = BufWriter::new(File::create(path)?);
        Ok(OpenFile {
            writer: PcapngWriter::new(file, LinkType::RAW, SNAPLEN)?,
            last_at_us: 0,
        })
    }

    /// Writes packets until `stop` is set or `end` is reached.
    fn fill(
        &mut self,
        file: &mut OpenFile,
        stop: &AtomicBool,
        end: Option<Instant>,
    ) -> Result<(), WireError> {
        let poll = Duration::from_millis(POLL_MS);
        let mut drops_read = Instant::now();
        while !stop.load(Ordering::Relaxed) && end.is_none_or(|e| Instant::now() < e) {
            if let Some(p) = self.next_packet(poll) {
                file.write(&p)?;
            }
            if drops_read.elapsed() >= DROPS_EVERY {
                drops_read += DROPS_EVERY;
                self.stats.add_drops(self.ring.drops().unwrap_or(0));
            }
        }
        Ok(())
    }

    /// Blocks are handed over at most BLOCK_TIMEOUT_MS after their last
    /// packet: waits that long (twice, for margin) for stragglers.
    fn drain(&mut self, file: &mut OpenFile) -> Result<(), WireError> {
        let drain = Duration::from_millis(2 * u64::from(ring::BLOCK_TIMEOUT_MS));
        let deadline = Instant::now() + drain;
        while let Some(p) = self.next_packet(deadline.saturating_duration_since(Instant::now())) {
            file.write(&p)?;
        }
        Ok(())
    }

    /// Captures to `path` on a background thread until `CaptureHandle::stop`.
    /// Opening errors (permission, interface) are returned here.
    pub fn spawn(iface: &str, ports: &[u16], path: &Path) -> Result<CaptureHandle, WireError> {
        Self::spawn_with_udp(iface, ports, ports, path)
    }

    /// As `spawn`, with `open_with_udp`'s UDP ports.
    pub fn spawn_with_udp(
        iface: &str,
        ports: &[u16],
        udp: &[u16],
        path: &Path,
    ) -> Result<CaptureHandle, WireError> {
        Self::spawn_on(Box::new(|| Ok(())), iface, ports, udp, path)
    }

    /// As `spawn_with_udp`, the capture opened on its own thread once
    /// `setup` has run there (entering a container's network namespace:
    /// a socket belongs to the namespace of the thread that opens it).
    pub fn spawn_on(
        setup: ThreadSetup,
        iface: &str,
        ports: &[u16],
        udp: &[u16],
        path: &Path,
    ) -> Result<CaptureHandle, WireError> {
        let (iface, ports, udp) = (iface.to_string(), ports.to_vec(), udp.to_vec());
        let path: PathBuf = path.to_path_buf();
        Self::run_on(
            setup,
            move || LiveCapture::open_with_udp(&iface, &ports, &udp),
            move |cap, flag| cap.write_until(&path, flag),
        )
    }

    /// Opens a capture with `open` on a new thread prepared by `setup`,
    /// then runs `work` there until its stop flag is set. Opening errors
    /// are returned here.
    pub fn run_on(
        setup: ThreadSetup,
        open: impl FnOnce() -> Result<LiveCapture, WireError> + Send + 'static,
        work: impl FnOnce(&mut LiveCapture, &AtomicBool) -> Result<CaptureStats, WireError>
            + Send
            + 'static,
    ) -> Result<CaptureHandle, WireError> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let (opened, started) = std::sync::mpsc::sync_channel(1);
        let thread = std::thread::spawn(move || {
            let cap = setup().map_err(WireError::Live).and_then(|()| open());
            match cap {
                Ok(mut cap) => {
                    let _ = opened.send(Ok(()));
                    work(&mut cap, &flag)
                }
                Err(e) => {
                    let said = WireError::Live(e.to_string());
                    let _ = opened.send(Err(e));
                    Err(said)
                }
            }
        });
        match started.recv() {
            Ok(Ok(())) => Ok(CaptureHandle { stop, thread }),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(WireError::Live("capture thread panicked".into())),
        }
    }
}

/// Run on a capture's thread before it opens its socket.
pub type ThreadSetup = Box<dyn FnOnce() -> Result<(), String> + Send>;

/// The capture thread's nice value where allowed (root, CAP_SYS_NICE): on
/// a busy host a reader with a fair share of CPU fell behind loopback
/// bursts of 16 MiB values and the kernel dropped packets; the work it
/// measures runs at the default 0.
const READER_NICE: libc::c_int = -10;

/// Runs the calling thread at `READER_NICE`, if allowed; a plain user's
/// capture keeps the default.
fn raise_priority() {
    // SAFETY: gettid and setpriority on the calling thread only.
    unsafe {
        let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
        libc::setpriority(libc::PRIO_PROCESS, tid, READER_NICE);
    }
}

/// A pcapng file being written.
struct OpenFile {
    writer: PcapngWriter<BufWriter<File>>,
    last_at_us: u64,
}

impl OpenFile {
    fn write(&mut self, p: &Packet) -> Result<(), WireError> {
        self.writer.write(p.at_us, &p.data, p.orig_len)?;
        self.last_at_us = p.at_us;
        Ok(())
    }

    fn finish(mut self, kernel_drops: u64) -> Result<(), WireError> {
        self.writer
            .write_statistics(0, self.last_at_us, kernel_drops)?;
        self.writer.flush()?;
        Ok(())
    }
}

/// One window's file of `write_windows`, complete.
#[derive(Debug, Clone)]
pub struct WindowFile {
    /// 0 for the first window.
    pub index: u64,
    pub path: PathBuf,
    pub started: std::time::SystemTime,
    pub ended: std::time::SystemTime,
    /// This window's totals alone.
    pub stats: CaptureStats,
}

/// A capture running on its own thread.
pub struct CaptureHandle {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<Result<CaptureStats, WireError>>,
}

impl CaptureHandle {
    /// Stops the capture, finishes the file and returns its totals.
    pub fn stop(self) -> Result<CaptureStats, WireError> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread
            .join()
            .map_err(|_| WireError::Live("capture thread panicked".into()))?
    }
}

/// Captures TCP on `ports` to a pcapng file until `stop` is set.
pub fn capture_to_file(
    iface: &str,
    ports: &[u16],
    path: &Path,
    stop: &AtomicBool,
) -> Result<CaptureStats, WireError> {
    LiveCapture::open(iface, ports)?.write_until(path, stop)
}

#[cfg(test)]
mod tests {
    use super::CaptureStats;

    #[test]
    fn drops_are_told_per_second() {
        let mut s = CaptureStats::default();
        for dropped in [0, 12, 0, 3, 0] {
            s.add_drops(dropped);
        }
        assert_eq!(s.kernel_drops, 15);
        assert_eq!((s.seconds, s.seconds_with_drops), (5, 2));
        assert_eq!(s.max_drops_per_second, 12);
    }
}
