//! Samples the host every interval on its own thread while a run goes on.

use crate::{cpus, read, resources};
use std::path::PathBuf;
use std::sync::mpsc::{channel, RecvTimeoutError, Sender};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use whyslow_model::HostSample;

pub struct Sampler {
    stop: Sender<()>,
    handle: JoinHandle<(Vec<HostSample>, Vec<String>)>,
}

/// Samples kept: an hour at one per second; a longer run keeps its first hour.
const MAX_SAMPLES: usize = 3600;

impl Sampler {
    pub fn start(proc_root: PathBuf, every: Duration) -> Sampler {
        let (stop, rx) = channel::<()>();
        let handle = std::thread::spawn(move || {
            // Read once: available_parallelism reads cgroup files each call.
            let cpus = cpus();
            let start = Instant::now();
            let (mut prev, missing) = read(&proc_root);
            let mut last = start;
            let mut samples = Vec::new();
            loop {
                let stopped = !matches!(rx.recv_timeout(every), Err(RecvTimeoutError::Timeout));
                let now = Instant::now();
                let (next, _) = read(&proc_root);
                let interval = now - last;
                // A last sliver is too short to tell a rate from noise.
                if interval >= every / 2 && samples.len() < MAX_SAMPLES {
                    samples.push(HostSample {
                        at_ms: (now - start).as_millis() as u64,
                        interval_ms: interval.as_millis() as u64,
                        resources: resources(&prev, &next, interval.as_micros() as u64, cpus),
                    });
                }
                if stopped {
                    return (samples, missing);
                }
                prev = next;
                last = now;
            }
        });
        Sampler { stop, handle }
    }

    /// Stops sampling: the samples, and the files that could not be read.
    pub fn finish(self) -> (Vec<HostSample>, Vec<String>) {
        let _ = self.stop.send(());
        self.handle.join().unwrap_or_default()
    }
}
