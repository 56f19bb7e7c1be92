//! From two readings to the USE table: rates and shares over the interval.

use crate::Counters;
use whyslow_model::{Facts, ResourceUse};

/// Every resource `use` reports, in its order.
pub const RESOURCES: [&str; 9] = [
    "cpu",
    "memory",
    "network",
    "tcp",
    "listen_queue",
    "softnet",
    "disk",
    "file_descriptors",
    "tcp_memory",
];

/// Tasks waiting for a CPU for this share of the interval (PSI "some") is
/// saturation: the kernel's PSI documentation treats sustained "some" of a
/// few percent as the start of contention; 10 % is well past noise.
const PSI_SATURATED_PCT: f64 = 10.0;
/// CPU busy past this share, with tasks waiting, is a saturated CPU (USE:
/// utilization near 100 % and a run queue longer than the CPU count).
const CPU_BUSY_PCT: f64 = 90.0;
/// Less memory available than this share means the kernel is reclaiming.
const MEMORY_LOW_PCT: f64 = 10.0;
/// A disk busy this share of the interval has no room for more I/O (USE's
/// 100 % utilization, less a margin for sampling).
const DISK_BUSY_PCT: f64 = 90.0;
/// File handles past this share of fs.file-max: opens are about to fail.
const FILES_NEAR_MAX_PCT: f64 = 90.0;

fn delta(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    Some(b?.saturating_sub(a?))
}

fn pct(part: f64, whole: f64) -> f64 {
    if whole <= 0.0 {
        0.0
    } else {
        (part * 1000.0 / whole).round() / 10.0
    }
}

fn row(
    resource: &str,
    u: Option<f64>,
    s: Option<f64>,
    unit: &str,
    errors: u64,
    saturated: bool,
    note: String,
) -> ResourceUse {
    ResourceUse {
        resource: resource.into(),
        utilization_pct: u,
        saturation: s,
        saturation_unit: unit.into(),
        errors,
        saturated,
        note,
        counts: Facts::default(),
    }
}

/// The numbers a row's note shows, as facts beside it.
fn counted(mut r: ResourceUse, counts: &[(&str, u64)]) -> ResourceUse {
    for (name, n) in counts {
        r.counts.set(name, *n as f64);
    }
    r
}

/// The USE table for the interval between readings `a` and `b`.
pub fn resources(a: &Counters, b: &Counters, interval_us: u64, cpus: u32) -> Vec<ResourceUse> {
    let psi = |x, y| delta(x, y).map(|d| pct(d as f64, interval_us as f64));
    let mut out = Vec::new();
    // CPU: utilization from jiffies; saturation as the PSI share, else the run queue.
    let util = match (a.cpu_jiffies, b.cpu_jiffies) {
        (Some((b0, t0)), Some((b1, t1))) => Some(pct(
            b1.saturating_sub(b0) as f64,
            t1.saturating_sub(t0) as f64,
        )),
        _ => None,
    };
    let cpu_psi = psi(a.psi_cpu_us, b.psi_cpu_us);
    let runnable = b.procs_running.unwrap_or(0);
    let waiting = cpu_psi.map_or(runnable > cpus as u64, |p| p >= PSI_SATURATED_PCT);
    let busy = util.unwrap_or(0.0) >= CPU_BUSY_PCT;
    out.push(counted(
        row(
            "cpu",
            util,
            cpu_psi,
            "percent of time tasks waited for a CPU (PSI some)",
            0,
            busy && waiting,
            format!("{runnable} runnable tasks on {cpus} CPUs"),
        ),
        &[("runnable_tasks", runnable), ("cpus", u64::from(cpus))],
    ));
    let avail = match (b.mem_total_kib, b.mem_available_kib) {
        (Some(t), Some(a)) => Some(pct(a as f64, t as f64)),
        _ => None,
    };
    let swapped = delta(a.swap_pages, b.swap_pages).unwrap_or(0);
    let mem_psi = psi(a.psi_memory_us, b.psi_memory_us);
    out.push(row(
        "memory",
        avail.map(|a| ((100.0 - a) * 10.0).round() / 10.0),
        mem_psi,
        "percent of time tasks waited for memory (PSI some)",
        0,
        mem_psi.is_some_and(|p| p >= PSI_SATURATED_PCT)
            || (swapped > 0 && avail.is_some_and(|a| a < MEMORY_LOW_PCT)),
        format!("{swapped} pages swapped in or out"),
    ));
    out.last_mut()
        .unwrap()
        .counts
        .set("pages_swapped", swapped as f64);
    let net_errors = delta(a.net_errors, b.net_errors).unwrap_or(0);
    out.push(row(
        "network",
        None,
        None,
        "",
        net_errors,
        net_errors > 0,
        "interface errors and drops, both ways".into(),
    ));
    let out_segs = delta(a.tcp_out_segs, b.tcp_out_segs).unwrap_or(0);
    let retrans = delta(a.tcp_retrans_segs, b.tcp_retrans_segs).unwrap_or(0);
    out.push(row(
        "tcp",
        None,
        Some(pct(retrans as f64, out_segs as f64)),
        "percent of segments sent again",
        retrans,
        false,
        format!("{retrans} retransmitted of {out_segs} segments sent"),
    ));
    let tcp = out.last_mut().unwrap();
    tcp.counts.set("segments_retransmitted", retrans as f64);
    tcp.counts.set("segments_sent", out_segs as f64);
    let listen = delta(a.listen_drops, b.listen_drops).unwrap_or(0);
    out.push(row(
        "listen_queue",
        None,
        Some(listen as f64),
        "connections dropped or overflowed",
        listen,
        listen > 0,
        "TcpExt ListenOverflows + ListenDrops: accept queues full".into(),
    ));
    let softnet = delta(a.softnet_drops, b.softnet_drops).unwrap_or(0);
    out.push(row(
        "softnet",
        None,
        Some(softnet as f64),
        "packets dropped or squeezed",
        softnet,
        softnet > 0,
        "/proc/net/softnet_stat: the kernel's receive backlog overflowed or ran out of budget"
            .into(),
    ));
    let interval_ms = (interval_us / 1000).max(1) as f64;
    let disk_util =
        delta(a.disk_io_ms, b.disk_io_ms).map(|d| pct(d as f64, interval_ms).min(100.0));
    let queue = delta(a.disk_weighted_ms, b.disk_weighted_ms)
        .map(|d| (d as f64 / interval_ms * 100.0).round() / 100.0);
    let io_psi = psi(a.psi_io_us, b.psi_io_us);
    out.push(row(
        "disk",
        disk_util,
        queue,
        "average I/O queue length",
        0,
        disk_util.is_some_and(|u| u >= DISK_BUSY_PCT)
            && io_psi.is_some_and(|p| p >= PSI_SATURATED_PCT),
        format!(
            "PSI io some {}",
            io_psi.map_or("unavailable".into(), |p| format!("{p} %"))
        ),
    ));
    if let Some(p) = io_psi {
        out.last_mut().unwrap().counts.set("io_psi_percent", p);
    }
    let files = b.files.map(|(n, max)| pct(n as f64, max as f64));
    out.push(row(
        "file_descriptors",
        files,
        None,
        "",
        0,
        files.is_some_and(|f| f >= FILES_NEAR_MAX_PCT),
        b.files.map_or("unavailable".into(), |(n, max)| {
            format!("{n} of {max} file handles")
        }),
    ));
    if let Some((n, max)) = b.files {
        let files = out.last_mut().unwrap();
        files.counts.set("file_handles", n as f64);
        files.counts.set("file_handles_max", max as f64);
    }
    let tcp_mem = match (b.tcp_mem_pages, b.tcp_mem_pressure_pages) {
        (Some(m), Some(p)) => Some(pct(m as f64, p as f64)),
        _ => None,
    };
    out.push(row(
        "tcp_memory",
        tcp_mem,
        None,
        "",
        0,
        tcp_mem.is_some_and(|t| t >= 100.0),
        "TCP buffer pages as a share of tcp_mem's pressure threshold".into(),
    ));
    out
}
