//! Which process listens on each TCP port of a network namespace, and so
//! which container or pod each server of a capture taken there belongs to
//! (the containers of a Kubernetes pod share one namespace).

use crate::{netns_inode, workload_of, Workload};
use std::collections::BTreeMap;
use std::path::Path;

/// TCP_LISTEN in /proc/net/tcp (include/net/tcp_states.h).
const TCP_LISTEN: &str = "0A";
/// Descriptors looked at per process: a server holds fewer than this.
const MAX_FDS: usize = 65_536;
/// Rows of a socket table read (the listening ones come among them).
const MAX_ROWS: usize = 1_000_000;

/// The listening ports of a `/proc/net/tcp{,6}` text, with their socket inodes.
pub fn listening_in(table: &str) -> Vec<(u16, u64)> {
    table
        .lines()
        .skip(1)
        .take(MAX_ROWS)
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            let (local, state, inode) = (f.get(1)?, f.get(3)?, f.get(9)?);
            let port = u16::from_str_radix(local.rsplit(':').next()?, 16).ok()?;
            (*state == TCP_LISTEN).then_some((port, inode.parse().ok()?))
        })
        .collect()
}

/// The socket inodes `pid` holds open.
fn socket_inodes(pid: u32) -> Vec<u64> {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return Vec::new();
    };
    dir.take(MAX_FDS)
        .flatten()
        .filter_map(|e| {
            let target = std::fs::read_link(e.path()).ok()?;
            let t = target.to_str()?;
            t.strip_prefix("socket:[")?.strip_suffix(']')?.parse().ok()
        })
        .collect()
}

/// Each listening port in the network namespace of `workload`, with the workload
/// of the process listening on it (the lowest pid holding the socket).
pub fn servers_of(workload: &Workload, root: &Path) -> BTreeMap<u16, Workload> {
    let mut by_inode: BTreeMap<u64, u16> = BTreeMap::new();
    for table in ["tcp", "tcp6"] {
        if let Ok(text) = std::fs::read_to_string(format!("/proc/{}/net/{table}", workload.pid)) {
            by_inode.extend(listening_in(&text).into_iter().map(|(p, i)| (i, p)));
        }
    }
    let mut out = BTreeMap::new();
    let ns = netns_inode(workload.pid);
    if by_inode.is_empty() || ns.is_none() {
        return out;
    }
    for pid in crate::pids() {
        if netns_inode(pid) != ns {
            continue;
        }
        for inode in socket_inodes(pid) {
            if let Some(port) = by_inode.get(&inode) {
                if !out.contains_key(port) {
                    if let Ok(p) = workload_of(pid, root) {
                        out.insert(*port, p);
                    }
                }
            }
        }
        if out.len() == by_inode.len() {
            break;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listening_rows_give_port_and_inode() {
        let table = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 12345 1 0000000000000000 100 0 0 10 0\n   1: 0100007F:1F90 0100007F:D431 01 00000000:00000000 00:00000000 00000000     0        0 12346 1\n";
        assert_eq!(listening_in(table), vec![(8080, 12345)]);
        assert!(listening_in("garbage\n1: x y z").is_empty());
    }

    #[test]
    fn a_listener_of_this_process_is_found() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let me = crate::workload_of(std::process::id(), Path::new("/")).unwrap();
        let servers = servers_of(&me, Path::new("/"));
        assert!(servers.contains_key(&port), "{servers:?}");
    }
}
