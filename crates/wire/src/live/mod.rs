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
        let file = BufWriter::new(File::create(path)?);
        let mut w = PcapngWriter::new(file, LinkType::RAW, SNAPLEN)?;
        let poll = Duration::from_millis(POLL_MS);
        let mut drops_read = Instant::now();
        let mut last_at_us = 0;
        while !stop.load(Ordering::Relaxed) {
            if let Some(p) = self.next_packet(poll) {
                w.write(p.at_us, &p.data, p.orig_len)?;
                last_at_us = p.at_us;
            }
            if drops_read.elapsed() >= DROPS_EVERY {
                drops_read += DROPS_EVERY;
                self.stats.add_drops(self.ring.drops().unwrap_or(0));
            }
        }
        // Blocks are handed over at most BLOCK_TIMEOUT_MS after their last
        // packet: wait that long (twice, for margin) for stragglers.
        let drain = Duration::from_millis(2 * u64::from(ring::BLOCK_TIMEOUT_MS));
        let deadline = Instant::now() + drain;
        while let Some(p) = self.next_packet(deadline.saturating_duration_since(Instant::now())) {
            w.write(p.at_us, &p.data, p.orig_len)?;
            last_at_us = p.at_us;
        }
        let stats = self.stats();
        w.write_statistics(0, last_at_us, stats.kernel_drops)?;
        w.flush()?;
        Ok(stats)
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
        let mut cap = LiveCapture::open_with_udp(iface, ports, udp)?;
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let path: PathBuf = path.to_path_buf();
        let thread = std::thread::spawn(move || cap.write_until(&path, &flag));
        Ok(CaptureHandle { stop, thread })
    }
}

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
