//! Server work of a planned length. Thread sleeps overshoot by tens of
//! microseconds and tokio's timer by up to a millisecond: the lab's servers
//! sleep on a blocking thread to just before the deadline, then spin, so
//! the cost a scenario declares is the cost it injects.

use std::time::{Duration, Instant};

/// Sleep to this much before the deadline, then spin.
const SPIN: Duration = Duration::from_micros(60);

/// Blocks until `deadline` within a few microseconds.
pub fn wait_until(deadline: Instant) {
    let now = Instant::now();
    if deadline > now + SPIN {
        std::thread::sleep(deadline - now - SPIN);
    }
    while Instant::now() < deadline {
        std::hint::spin_loop();
    }
}

/// Works for `cost` without holding up the async runtime.
pub async fn work_for(cost: Duration) {
    work_until(Instant::now() + cost).await;
}

/// Works until `deadline` without holding up the async runtime.
pub async fn work_until(deadline: Instant) {
    let _ = tokio::task::spawn_blocking(move || wait_until(deadline)).await;
}
