//! Raw counters from /proc and /sys, parsed from text: each parser takes the
//! file's contents, so tests and fuzzing feed it anything. A missing or
//! malformed field reads as absent, never as a panic.

use std::collections::BTreeMap;

/// Everything one reading of the host gives, cumulative since boot unless noted.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Counters {
    /// /proc/stat "cpu" line: (busy, total) jiffies.
    pub cpu_jiffies: Option<(u64, u64)>,
    /// Runnable tasks right now (a gauge), /proc/stat procs_running.
    pub procs_running: Option<u64>,
    /// PSI "some" stall totals, µs: cpu, memory, io.
    pub psi_cpu_us: Option<u64>,
    pub psi_memory_us: Option<u64>,
    pub psi_io_us: Option<u64>,
    /// /proc/meminfo, KiB (gauges).
    pub mem_total_kib: Option<u64>,
    pub mem_available_kib: Option<u64>,
    /// /proc/vmstat pages swapped in and out.
    pub swap_pages: Option<u64>,
    /// /proc/net/dev, every interface: errors and drops, both ways.
    pub net_errors: Option<u64>,
    /// /proc/net/snmp Tcp: OutSegs and RetransSegs.
    pub tcp_out_segs: Option<u64>,
    pub tcp_retrans_segs: Option<u64>,
    /// /proc/net/netstat TcpExt: ListenOverflows + ListenDrops.
    pub listen_drops: Option<u64>,
    /// /proc/net/softnet_stat: packets dropped + time squeezes, all CPUs.
    pub softnet_drops: Option<u64>,
    /// /proc/diskstats over whole disks: ms doing I/O (max over disks), weighted ms.
    pub disk_io_ms: Option<u64>,
    pub disk_weighted_ms: Option<u64>,
    /// /proc/sys/fs/file-nr: allocated, max (gauges).
    pub files: Option<(u64, u64)>,
    /// /proc/net/sockstat TCP mem pages, and tcp_mem's pressure threshold (gauges).
    pub tcp_mem_pages: Option<u64>,
    pub tcp_mem_pressure_pages: Option<u64>,
}

fn num(s: &str) -> Option<u64> {
    s.trim().parse().ok()
}

pub fn parse_stat(text: &str, c: &mut Counters) {
    for line in text.lines() {
        let mut f = line.split_whitespace();
        match f.next() {
            Some("cpu") => {
                let v: Vec<u64> = f.filter_map(num).collect();
                if v.len() >= 4 {
                    // idle + iowait are not busy; guest time is already in user.
                    let total = v.iter().take(8).fold(0u64, |a, x| a.saturating_add(*x));
                    let idle = v[3].saturating_add(v.get(4).copied().unwrap_or(0));
                    c.cpu_jiffies = Some((total.saturating_sub(idle), total));
                }
            }
            Some("procs_running") => c.procs_running = f.next().and_then(num),
            _ => {}
        }
    }
}

/// PSI: "some avg10=… total=N".
pub fn parse_psi(text: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with("some "))?;
    line.split_whitespace()
        .find_map(|f| f.strip_prefix("total="))
        .and_then(num)
}

pub fn parse_meminfo(text: &str, c: &mut Counters) {
    let kib = |name: &str| {
        text.lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(num)
    };
    c.mem_total_kib = kib("MemTotal:");
    c.mem_available_kib = kib("MemAvailable:");
}

pub fn parse_vmstat(text: &str, c: &mut Counters) {
    let mut sum = None;
    for line in text.lines() {
        let mut f = line.split_whitespace();
        if let (Some("pswpin" | "pswpout"), Some(v)) = (f.next(), f.next().and_then(num)) {
            sum = Some(sum.unwrap_or(0u64).saturating_add(v));
        }
    }
    c.swap_pages = sum;
}

/// /proc/net/dev: "iface: rx_bytes packets errs drop … tx_bytes packets errs drop …".
pub fn parse_net_dev(text: &str, c: &mut Counters) {
    let mut total = 0u64;
    let mut seen = false;
    for line in text.lines().skip(2) {
        let Some((_, rest)) = line.split_once(':') else {
            continue;
        };
        let v: Vec<u64> = rest.split_whitespace().filter_map(num).collect();
        if v.len() >= 12 {
            total = [v[2], v[3], v[10], v[11]]
                .iter()
                .fold(total, |a, x| a.saturating_add(*x));
            seen = true;
        }
    }
    c.net_errors = seen.then_some(total);
}

/// The "Name: a b c" / "Name: 1 2 3" header-value line pairs of snmp and netstat.
fn pairs<'a>(text: &'a str, name: &str) -> BTreeMap<&'a str, u64> {
    let prefix = format!("{name}:");
    let lines: Vec<&str> = text.lines().filter(|l| l.starts_with(&prefix)).collect();
    let mut out = BTreeMap::new();
    for w in lines.chunks(2) {
        if let [keys, values] = w {
            for (k, v) in keys
                .split_whitespace()
                .zip(values.split_whitespace())
                .skip(1)
            {
                if let Some(v) = num(v) {
                    out.insert(k, v);
                }
            }
        }
    }
    out
}

pub fn parse_snmp(text: &str, c: &mut Counters) {
    let tcp = pairs(text, "Tcp");
    c.tcp_out_segs = tcp.get("OutSegs").copied();
    c.tcp_retrans_segs = tcp.get("RetransSegs").copied();
}

pub fn parse_netstat(text: &str, c: &mut Counters) {
    let ext = pairs(text, "TcpExt");
    let (o, d) = (ext.get("ListenOverflows"), ext.get("ListenDrops"));
    c.listen_drops = o
        .or(d)
        .map(|_| o.unwrap_or(&0).saturating_add(*d.unwrap_or(&0)));
}

/// One line per CPU, hex: processed, dropped, time_squeeze, ….
pub fn parse_softnet(text: &str, c: &mut Counters) {
    let mut total = 0u64;
    let mut seen = false;
    for line in text.lines() {
        let v: Vec<u64> = line
            .split_whitespace()
            .filter_map(|h| u64::from_str_radix(h, 16).ok())
            .collect();
        if v.len() >= 3 {
            total = total.saturating_add(v[1]).saturating_add(v[2]);
            seen = true;
        }
    }
    c.softnet_drops = seen.then_some(total);
}

/// Whole disks only (no partitions, loop or ram devices): field 13 is ms
/// spent doing I/O, field 14 the weighted ms (queue length × time).
pub fn parse_diskstats(text: &str, c: &mut Counters) {
    let (mut busy, mut weighted, mut seen) = (0u64, 0u64, false);
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 14 {
            continue;
        }
        let name = f[2];
        let partition = name.starts_with("nvme") && name.contains('p')
            || !name.starts_with("nvme") && name.ends_with(|ch: char| ch.is_ascii_digit());
        if partition || name.starts_with("loop") || name.starts_with("ram") {
            continue;
        }
        busy = busy.max(num(f[12]).unwrap_or(0));
        weighted = weighted.saturating_add(num(f[13]).unwrap_or(0));
        seen = true;
    }
    if seen {
        c.disk_io_ms = Some(busy);
        c.disk_weighted_ms = Some(weighted);
    }
}

pub fn parse_file_nr(text: &str, c: &mut Counters) {
    let v: Vec<u64> = text.split_whitespace().filter_map(num).collect();
    if v.len() >= 3 {
        c.files = Some((v[0], v[2]));
    }
}

pub fn parse_sockstat(text: &str, c: &mut Counters) {
    let line = text.lines().find(|l| l.starts_with("TCP:"));
    c.tcp_mem_pages = line.and_then(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        f.windows(2).find(|w| w[0] == "mem").and_then(|w| num(w[1]))
    });
}

/// tcp_mem: "min pressure max" pages.
pub fn parse_tcp_mem(text: &str, c: &mut Counters) {
    c.tcp_mem_pressure_pages = text.split_whitespace().nth(1).and_then(num);
}

/// Every parser on the same hostile text: none may panic.
pub fn fuzz(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let mut c = Counters::default();
    for parse in [
        parse_stat,
        parse_meminfo,
        parse_vmstat,
        parse_net_dev,
        parse_snmp,
        parse_netstat,
        parse_softnet,
        parse_diskstats,
        parse_file_nr,
        parse_sockstat,
        parse_tcp_mem,
    ] {
        parse(&text, &mut c);
    }
    c.psi_cpu_us = parse_psi(&text);
    let _ = crate::resources(&Counters::default(), &c, 1_000_000, 2);
    let _ = crate::resources(&c, &Counters::default(), 0, 0);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_real_proc_text() {
        let mut c = Counters::default();
        parse_stat(
            "cpu  100 0 50 800 50 0 0 0 0 0\ncpu0 1 2 3 4\nprocs_running 3\n",
            &mut c,
        );
        assert_eq!(c.cpu_jiffies, Some((150, 1000)));
        assert_eq!(c.procs_running, Some(3));
        assert_eq!(
            parse_psi(
                "some avg10=5.06 avg60=4.25 avg300=2.97 total=843711059\nfull avg10=0.00 total=0\n"
            ),
            Some(843_711_059)
        );
        parse_snmp(
            "Tcp: RtoAlgorithm OutSegs RetransSegs\nTcp: 1 1000 7\n",
            &mut c,
        );
        assert_eq!((c.tcp_out_segs, c.tcp_retrans_segs), (Some(1000), Some(7)));
        parse_netstat("TcpExt: ListenOverflows ListenDrops\nTcpExt: 2 3\n", &mut c);
        assert_eq!(c.listen_drops, Some(5));
        parse_softnet(
            "0000000a 00000001 00000002\n0000000a 00000000 00000001\n",
            &mut c,
        );
        assert_eq!(c.softnet_drops, Some(4));
        parse_diskstats(
            "   8       0 sda 1 2 3 4 5 6 7 8 9 900 1800 0\n   8       1 sda1 1 2 3 4 5 6 7 8 9 50 60 0\n   7 0 loop0 0 0 0 0 0 0 0 0 0 10 10 0\n",
            &mut c,
        );
        assert_eq!((c.disk_io_ms, c.disk_weighted_ms), (Some(900), Some(1800)));
        parse_sockstat(
            "sockets: used 5\nTCP: inuse 15 orphan 0 tw 15 alloc 15 mem 82\n",
            &mut c,
        );
        assert_eq!(c.tcp_mem_pages, Some(82));
        parse_file_nr("341\t0\t2466177\n", &mut c);
        assert_eq!(c.files, Some((341, 2_466_177)));
    }

    #[test]
    fn hostile_text_reads_as_absent() {
        let mut c = Counters::default();
        parse_stat("cpu x y\nprocs_running -1\n", &mut c);
        parse_snmp("Tcp: OutSegs\n", &mut c);
        parse_diskstats("8 0 sda", &mut c);
        assert_eq!(c, Counters::default());
        fuzz(&[0xff, b'\n', b':', 0]);
        fuzz("Tcp: OutSegs RetransSegs\nTcp: 18446744073709551615 1\n".as_bytes());
        // Counters near u64::MAX add without overflow.
        fuzz(b"ffffffffffffffff ffffffffffffffff ffffffffffffffff\nffffffffffffffff ffffffffffffffff ffffffffffffffff\n");
        fuzz(b"TcpExt: ListenOverflows ListenDrops\nTcpExt: 18446744073709551615 18446744073709551615\n");
    }
}
