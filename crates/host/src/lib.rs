//! The host's side of a slow request: Brendan Gregg's USE method
//! (utilization, saturation, errors per resource) from /proc and /sys, as a
//! snapshot and sampled every second during `load` and `diagnose`.
//! Linux only; what a kernel lacks (PSI before 4.20) is listed as unavailable.

pub mod counters;
mod resources;
mod sampler;
pub mod sockets;

pub use counters::Counters;
pub use resources::{resources, RESOURCES};
pub use sampler::Sampler;

use std::path::Path;

/// How often `load` and `diagnose` sample the host: once a second, as
/// vmstat 1 and sar do.
pub const EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// The files read, relative to the proc root, and their parsers.
type Parser = fn(&str, &mut Counters);
const FILES: [(&str, Parser); 14] = [
    ("stat", counters::parse_stat),
    ("pressure/cpu", |t, c| c.psi_cpu_us = counters::parse_psi(t)),
    ("pressure/memory", |t, c| {
        c.psi_memory_us = counters::parse_psi(t)
    }),
    ("pressure/io", |t, c| c.psi_io_us = counters::parse_psi(t)),
    ("meminfo", counters::parse_meminfo),
    ("vmstat", counters::parse_vmstat),
    ("net/dev", counters::parse_net_dev),
    ("net/snmp", counters::parse_snmp),
    ("net/netstat", counters::parse_netstat),
    ("net/softnet_stat", counters::parse_softnet),
    ("diskstats", counters::parse_diskstats),
    ("sys/fs/file-nr", counters::parse_file_nr),
    ("net/sockstat", counters::parse_sockstat),
    ("sys/net/ipv4/tcp_mem", counters::parse_tcp_mem),
];

/// /proc files are small; a bigger one is not what we think it is.
const MAX_FILE_BYTES: u64 = 1 << 20;

fn read_small(path: &Path) -> std::io::Result<String> {
    use std::io::Read;
    let mut s = String::new();
    std::fs::File::open(path)?
        .take(MAX_FILE_BYTES)
        .read_to_string(&mut s)?;
    Ok(s)
}

/// One reading of every counter under `proc_root` ("/proc" on a real host),
/// and the files that could not be read.
pub fn read(proc_root: &Path) -> (Counters, Vec<String>) {
    let mut c = Counters::default();
    let mut missing = Vec::new();
    for (file, parse) in FILES {
        let path = proc_root.join(file);
        match read_small(&path) {
            Ok(text) => parse(&text, &mut c),
            Err(_) => missing.push(path.display().to_string()),
        }
    }
    (c, missing)
}

/// CPUs online, for run-queue saturation.
pub fn cpus() -> u32 {
    std::thread::available_parallelism().map_or(1, |n| n.get() as u32)
}
