//! Sleeping until a request's intended start with microsecond precision.
//!
//! tokio's timer wheel ticks in whole milliseconds and rounds deadlines up, so
//! a request scheduled with it starts 0–1 ms late and that lateness lands in
//! every corrected latency. A timerfd (CLOCK_MONOTONIC, the clock `Instant`
//! reads on Linux) wakes the reactor within microseconds of the deadline.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::{Duration, Instant};
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

/// Waits shorter than this are spun instead of slept: two system calls and a
/// reactor turn cost about as much.
const MIN_SLEEP: Duration = Duration::from_micros(20);

/// One per lane; falls back to tokio's timer when timerfd is unavailable.
pub(crate) struct Timer {
    fd: Option<AsyncFd<OwnedFd>>,
}

impl Timer {
    pub fn new() -> Timer {
        // SAFETY: plain system call; a valid descriptor is owned right below.
        let raw = unsafe {
            libc::timerfd_create(
                libc::CLOCK_MONOTONIC,
                libc::TFD_NONBLOCK | libc::TFD_CLOEXEC,
            )
        };
        let fd = (raw >= 0)
            .then(|| {
                // SAFETY: `raw` is a fresh descriptor that nothing else owns; the
                // OwnedFd keeps it open for as long as the AsyncFd lives.
                unsafe {
                    AsyncFd::register_with_interest(OwnedFd::from_raw_fd(raw), Interest::READABLE)
                }
                .ok()
            })
            .flatten();
        Timer { fd }
    }

    /// Returns at `deadline` (or at once when it has passed).
    pub async fn sleep_until(&mut self, deadline: Instant) {
        let mut now = Instant::now();
        if deadline <= now + MIN_SLEEP {
            // Never start early: spin through the last few microseconds.
            while now < deadline {
                std::hint::spin_loop();
                now = Instant::now();
            }
            return;
        }
        let Some(fd) = &self.fd else {
            tokio::time::sleep_until(deadline.into()).await;
            return;
        };
        if arm(fd.as_raw_fd(), deadline - now).is_err() {
            tokio::time::sleep_until(deadline.into()).await;
            return;
        }
        loop {
            let Ok(mut guard) = fd.readable().await else {
                tokio::time::sleep_until(deadline.into()).await;
                return;
            };
            let mut expirations = [0u8; 8];
            let read = guard.try_io(|inner| {
                // SAFETY: reads 8 bytes into a buffer of 8 bytes.
                let n =
                    unsafe { libc::read(inner.as_raw_fd(), expirations.as_mut_ptr().cast(), 8) };
                if n < 0 {
                    Err(std::io::Error::last_os_error())
                } else {
                    Ok(())
                }
            });
            match read {
                Err(_would_block) => continue,
                Ok(_) => return,
            }
        }
    }
}

/// Arms the timer to fire once after `d` (arming also clears stale expirations).
fn arm(fd: i32, d: Duration) -> std::io::Result<()> {
    let spec = libc::itimerspec {
        it_interval: libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        },
        it_value: libc::timespec {
            tv_sec: d.as_secs() as libc::time_t,
            tv_nsec: d.subsec_nanos() as libc::c_long,
        },
    };
    // SAFETY: valid descriptor and a fully initialized itimerspec.
    let rc = unsafe { libc::timerfd_settime(fd, 0, &spec, std::ptr::null_mut()) };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Compared with tokio's own timer in the same run, sleep by sleep:
    /// on a busy host both wake late, but tokio's also rounds up to its
    /// millisecond tick, so the timerfd wakes closer in most pairs. An
    /// absolute bound would fail whenever the host is busy.
    #[tokio::test]
    async fn wakes_closer_to_the_deadline_than_tokios_timer() {
        let mut t = Timer::new();
        assert!(t.fd.is_some(), "timerfd available on Linux");
        let mut closer = 0;
        const PAIRS: u64 = 20;
        for i in 0..PAIRS {
            let wait = Duration::from_micros(300 + i * 37);
            let deadline = Instant::now() + wait;
            t.sleep_until(deadline).await;
            let now = Instant::now();
            assert!(now >= deadline, "woke early");
            let ours = now - deadline;
            let deadline = Instant::now() + wait;
            tokio::time::sleep_until(deadline.into()).await;
            let tokios = Instant::now() - deadline;
            closer += u64::from(ours <= tokios);
        }
        assert!(closer * 4 >= PAIRS * 3, "closer in {closer} of {PAIRS}");
    }
}
