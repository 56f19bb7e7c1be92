//! The agent's own cost, measured per window: CPU time from getrusage, and
//! peak resident memory from the kernel's high-water mark, which is reset
//! at each window's end (`/proc/self/clear_refs`) so each window's peak is
//! its own.

use std::time::Instant;
use whyslow_model::AgentCost;

/// `clear_refs` value that resets VmHWM to the current RSS (proc(5), Linux 4.0).
const RESET_PEAK: &[u8] = b"5";

pub struct Meter {
    cpu_us: u64,
    at: Instant,
}

fn cpu_us() -> u64 {
    // SAFETY: getrusage fills the struct it is given.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) } != 0 {
        return 0;
    }
    let us = |t: libc::timeval| t.tv_sec as u64 * 1_000_000 + t.tv_usec as u64;
    us(u.ru_utime) + us(u.ru_stime)
}

/// A `kB` field of a `/proc/PID/status` text (VmHWM, RssAnon), in bytes.
pub fn status_bytes(status: &str, field: &str) -> Option<u64> {
    let line = status
        .lines()
        .find(|l| l.split(':').next() == Some(field))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kb.checked_mul(1024)
}

impl Meter {
    pub fn start() -> Meter {
        let _ = std::fs::write("/proc/self/clear_refs", RESET_PEAK);
        Meter {
            cpu_us: cpu_us(),
            at: Instant::now(),
        }
    }

    /// The cost since the last reading, and a new start.
    pub fn reading(&mut self) -> AgentCost {
        let cpu = cpu_us();
        let wall = self.at.elapsed().as_micros().max(1) as f64;
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        let field = |name| status_bytes(&status, name).unwrap_or(0);
        let cost = AgentCost {
            cpu_us: cpu.saturating_sub(self.cpu_us),
            cpu_share: cpu.saturating_sub(self.cpu_us) as f64 / wall,
            peak_rss_bytes: field("VmHWM"),
            anon_bytes: field("RssAnon"),
        };
        *self = Meter::start();
        cost
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_high_water_mark_is_read_in_bytes() {
        let status = "Name:\twhyslow\nVmPeak:\t  200 kB\nVmHWM:\t    1234 kB\nVmRSS:\t 1000 kB\n";
        assert_eq!(status_bytes(status, "VmHWM"), Some(1234 * 1024));
        assert_eq!(status_bytes(status, "VmRSS"), Some(1000 * 1024));
        assert_eq!(status_bytes("Name: x\n", "VmHWM"), None);
    }

    #[test]
    fn a_window_of_work_costs_cpu() {
        let mut m = Meter::start();
        let mut x = 0u64;
        let until = Instant::now() + std::time::Duration::from_millis(30);
        while Instant::now() < until {
            x = x.wrapping_mul(31).wrapping_add(7);
        }
        std::hint::black_box(x);
        let cost = m.reading();
        assert!(cost.cpu_us >= 10_000, "{cost:?}");
        assert!(cost.peak_rss_bytes >= cost.anon_bytes && cost.anon_bytes > 0);
    }
}
