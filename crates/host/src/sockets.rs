//! Which backing services does the service on a port talk to? Read from /proc:
//! the process listening on the port, then its established TCP connections to
//! other ports on this host. Linux only; an empty answer elsewhere.

use std::collections::BTreeSet;
use std::fs;

/// TCP states in /proc/net/tcp (include/net/tcp_states.h).
const TCP_ESTABLISHED: &str = "01";
const TCP_LISTEN: &str = "0A";

/// One line of /proc/net/tcp{,6}: local and remote port, state, socket inode.
struct SocketRow {
    local_port: u16,
    remote_port: u16,
    remote_is_local: bool,
    state: String,
    inode: u64,
}

fn port_of(addr: &str) -> Option<u16> {
    u16::from_str_radix(addr.rsplit(':').next()?, 16).ok()
}

/// Loopback in /proc's hex notation (127.x.x.x little-endian, ::1, ::ffff:127.x).
fn is_loopback_hex(addr: &str) -> bool {
    let ip = addr.split(':').next().unwrap_or("");
    match ip.len() {
        8 => ip.ends_with("7F"),
        32 => {
            ip == "00000000000000000000000001000000"
                || (ip.starts_with("0000000000000000FFFF0000") && ip.ends_with("7F"))
        }
        _ => false,
    }
}

fn rows() -> Vec<SocketRow> {
    let mut out = Vec::new();
    for file in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = fs::read_to_string(file) else {
            continue;
        };
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            let (Some(local), Some(remote), Some(state), Some(inode)) =
                (f.get(1), f.get(2), f.get(3), f.get(9))
            else {
                continue;
            };
            let (Some(local_port), Some(remote_port), Ok(inode)) =
                (port_of(local), port_of(remote), inode.parse())
            else {
                continue;
            };
            out.push(SocketRow {
                local_port,
                remote_port,
                remote_is_local: is_loopback_hex(remote),
                state: state.to_string(),
                inode,
            });
        }
    }
    out
}

fn socket_inodes(pid: u32) -> BTreeSet<u64> {
    let Ok(fds) = fs::read_dir(format!("/proc/{pid}/fd")) else {
        return BTreeSet::new();
    };
    fds.flatten()
        .filter_map(|fd| fs::read_link(fd.path()).ok())
        .filter_map(|l| {
            l.to_str()?
                .strip_prefix("socket:[")?
                .strip_suffix(']')?
                .parse()
                .ok()
        })
        .collect()
}

/// Processes holding the listening socket of `service_ports`: one pass over every
/// process's descriptors, done once per run.
pub fn listeners(service_ports: u16) -> Vec<u32> {
    let listening: BTreeSet<u64> = rows()
        .iter()
        .filter(|r| r.state == TCP_LISTEN && r.local_port == service_ports)
        .map(|r| r.inode)
        .collect();
    let Ok(procs) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    procs
        .flatten()
        .filter_map(|p| p.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| !socket_inodes(*pid).is_disjoint(&listening))
        .collect()
}

/// Ports on this host that the processes `pids` (serving `service_ports`) are connected to.
pub fn ports_of(pids: &[u32], service_ports: u16) -> BTreeSet<u16> {
    let rows = rows();
    let mut ports = BTreeSet::new();
    for pid in pids {
        let inodes = socket_inodes(*pid);
        let mine = || rows.iter().filter(|r| inodes.contains(&r.inode));
        // Connections accepted by any of the process's listeners are inbound, not calls it makes.
        let served: BTreeSet<u16> = mine()
            .filter(|r| r.state == TCP_LISTEN)
            .map(|r| r.local_port)
            .collect();
        for r in mine().filter(|r| r.state == TCP_ESTABLISHED && r.remote_is_local) {
            if !served.contains(&r.local_port) && r.remote_port != service_ports {
                ports.insert(r.remote_port);
            }
        }
    }
    ports
}

/// Polls the ports of the service on `service_ports` on a thread until stopped: connections to
/// backing services may live only as long as one inbound connection.
pub struct Watcher {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: std::thread::JoinHandle<BTreeSet<u16>>,
}

/// Between two looks at the service's sockets: short enough to see a
/// connection that lives for one burst of requests; a look reads one
/// process's descriptors and /proc/net/tcp, well under a millisecond.
const POLL_INTERVAL: std::time::Duration = std::time::Duration::from_millis(20);

impl Watcher {
    pub fn start(service_ports: u16) -> Watcher {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let pids = listeners(service_ports);
            let mut seen = BTreeSet::new();
            while !flag.load(std::sync::atomic::Ordering::Relaxed) {
                seen.extend(ports_of(&pids, service_ports));
                std::thread::sleep(POLL_INTERVAL);
            }
            seen.extend(ports_of(&pids, service_ports));
            seen
        });
        Watcher { stop, thread }
    }

    pub fn finish(self) -> Vec<u16> {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.thread
            .join()
            .map(|s| s.into_iter().collect())
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::net::{TcpListener, TcpStream};

    #[test]
    fn finds_the_ports_a_listening_process_talks_to() {
        // This test process listens on `service_ports` and holds a connection to `backing`.
        let service_ports = TcpListener::bind("127.0.0.1:0").unwrap();
        let backing = TcpListener::bind("127.0.0.1:0").unwrap();
        let _conn = TcpStream::connect(backing.local_addr().unwrap()).unwrap();
        let (mut accepted, _) = backing.accept().unwrap();
        accepted.set_nonblocking(true).unwrap();
        let _ = accepted.read(&mut [0; 1]);
        let port = service_ports.local_addr().unwrap().port();
        let found: Vec<u16> = ports_of(&listeners(port), port).into_iter().collect();
        // The accepted side belongs to a listener of this process: inbound, not a call.
        assert_eq!(found, vec![backing.local_addr().unwrap().port()]);
    }

    #[test]
    fn reads_proc_hex_addresses() {
        assert_eq!(port_of("0100007F:1F90"), Some(8080));
        assert!(is_loopback_hex("0100007F:1F90"));
        assert!(is_loopback_hex("00000000000000000000000001000000:0050"));
        assert!(!is_loopback_hex("0A00020F:0050"));
    }
}
