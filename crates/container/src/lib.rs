//! Where a service runs: the process, its network namespace, its cgroup,
//! and the container and Kubernetes pod that cgroup names. Found from
//! `/proc` and the node's files, as node agents do, with no runtime or API
//! access; a capture thread then enters the namespace (`enter_netns`) to
//! see the container's own traffic, loopback included.

pub mod cgroup;
pub mod listeners;
pub mod pod;

use std::fs::File;
use std::path::{Path, PathBuf};
pub use whyslow_model::{Container, Pod, Workload};

/// Processes looked at when searching `/proc` (a node runs fewer).
const MAX_PROCESSES: usize = 100_000;
/// Bytes read of a `/proc/PID/cgroup` (a few lines, one per hierarchy).
const MAX_CGROUP_FILE: u64 = 16 * 1024;
/// Fewest digits of a container id to look for, as `docker` accepts a
/// prefix; fewer would match by chance on a busy node.
pub const MIN_ID_PREFIX: usize = 4;

/// How the workload to look at was named on the command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Selector {
    /// `--pid PID`
    Pid(u32),
    /// `--container ID`: a full id or a unique prefix of one.
    Container(String),
    /// `--cgroup PATH`: as `/proc/PID/cgroup` shows it, or its directory.
    Cgroup(String),
}

/// Its network namespace, held open: entering it later reaches the same
/// namespace even if the process has exited meanwhile.
pub fn netns_of(w: &Workload) -> Result<File, String> {
    let path = format!("/proc/{}/ns/net", w.pid);
    File::open(&path).map_err(|e| format!("{path}: {e} (needs root or CAP_SYS_PTRACE)"))
}

/// Enters the network namespace `ns` on the calling thread only (setns):
/// sockets it opens from then on are that namespace's. Call on a thread of
/// its own, or before any other thread is started.
pub fn enter_netns(ns: &File) -> Result<(), String> {
    use std::os::fd::AsRawFd;
    // SAFETY: setns on a descriptor this function borrows; it changes only
    // the calling thread's network namespace.
    if unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
        let e = std::io::Error::last_os_error();
        return Err(format!(
            "cannot enter the network namespace: {e} (needs CAP_SYS_ADMIN)"
        ));
    }
    Ok(())
}

/// The inode of `pid`'s network namespace: equal for processes sharing one.
pub fn netns_inode(pid: u32) -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(format!("/proc/{pid}/ns/net"))
        .ok()
        .map(|m| m.ino())
}

/// Whether `ns` is the calling thread's own network namespace already.
pub fn is_own_netns(ns: &File) -> bool {
    use std::os::unix::fs::MetadataExt;
    let own = std::fs::metadata("/proc/thread-self/ns/net");
    matches!((own, ns.metadata()), (Ok(a), Ok(b)) if a.ino() == b.ino() && a.dev() == b.dev())
}

fn read_cgroup_file(pid: u32) -> Option<String> {
    use std::io::Read;
    let mut text = String::new();
    File::open(format!("/proc/{pid}/cgroup"))
        .ok()?
        .take(MAX_CGROUP_FILE)
        .read_to_string(&mut text)
        .ok()?;
    Some(text)
}

/// The cgroup path of `pid` (the v2 one where there is one).
fn cgroup_path(pid: u32) -> Option<String> {
    cgroup::path_of(&read_cgroup_file(pid)?).map(str::to_string)
}

/// Where `pid` runs, with the pod looked up under the node root `root`.
pub fn workload_of(pid: u32, root: &Path) -> Result<Workload, String> {
    let text = read_cgroup_file(pid).ok_or_else(|| format!("no process {pid}"))?;
    let path = cgroup::path_of(&text).map(str::to_string);
    let container = path.as_deref().and_then(cgroup::container_of);
    let pod = path
        .as_deref()
        .and_then(cgroup::pod_uid_of)
        .and_then(|uid| pod::pod_of(root, &uid));
    Ok(Workload {
        pid,
        cgroup: path,
        container,
        pod,
    })
}

/// Every process's pid, lowest first, within `MAX_PROCESSES`.
fn pids() -> Vec<u32> {
    let mut out: Vec<u32> = std::fs::read_dir("/proc")
        .map(|d| {
            d.flatten()
                .filter_map(|e| e.file_name().to_str()?.parse().ok())
                .take(MAX_PROCESSES)
                .collect()
        })
        .unwrap_or_default();
    out.sort_unstable();
    out
}

/// Where the cgroup v2 hierarchy is mounted, from a mountinfo text.
pub fn cgroup2_mount_in(mountinfo: &str) -> Option<PathBuf> {
    mountinfo.lines().find_map(|line| {
        let (mount, fs) = line.split_once(" - ")?;
        let mount_point = mount.split(' ').nth(4)?;
        (fs.split(' ').next() == Some("cgroup2")).then(|| PathBuf::from(mount_point))
    })
}

/// `given` as `/proc/PID/cgroup` shows a cgroup: a directory under the
/// cgroup v2 mount loses the mount's prefix.
fn as_cgroup_path(given: &str) -> String {
    let mount = std::fs::read_to_string("/proc/self/mountinfo")
        .ok()
        .and_then(|m| cgroup2_mount_in(&m));
    let stripped = mount
        .as_deref()
        .and_then(|m| Path::new(given).strip_prefix(m).ok())
        .map(|rest| format!("/{}", rest.display()));
    let path = stripped.unwrap_or_else(|| given.to_string());
    match path.trim_end_matches('/') {
        "" => "/".to_string(),
        p => p.to_string(),
    }
}

fn within(path: &str, cgroup: &str) -> bool {
    cgroup == "/"
        || path == cgroup
        || path
            .strip_prefix(cgroup)
            .is_some_and(|r| r.starts_with('/'))
}

/// The workload a selector names: the process itself, or the lowest pid of
/// the container or cgroup (its first process, usually the container's
/// init). Err says why none was found, or which ids a prefix matched.
pub fn locate(selector: &Selector, root: &Path) -> Result<Workload, String> {
    match selector {
        Selector::Pid(pid) => workload_of(*pid, root),
        Selector::Container(id) => {
            let want = id.to_ascii_lowercase();
            if want.len() < MIN_ID_PREFIX || !want.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(format!(
                    "container {id}: an id is at least {MIN_ID_PREFIX} hex digits"
                ));
            }
            // Only the cgroup path is read per process; the pod is looked
            // up once, for the process found.
            let mut found: Option<(u32, String)> = None;
            for pid in pids() {
                let Some(c) = cgroup_path(pid).as_deref().and_then(cgroup::container_of) else {
                    continue;
                };
                if !c.id.starts_with(&want) {
                    continue;
                }
                match &found {
                    Some((_, first)) if *first != c.id => {
                        return Err(format!(
                            "container {id} matches {} and {}: give more digits",
                            &first[..12],
                            c.short_id()
                        ));
                    }
                    Some(_) => {}
                    None => found = Some((pid, c.id)),
                }
            }
            match found {
                Some((pid, _)) => workload_of(pid, root),
                None => Err(format!("no running process in a container {id}")),
            }
        }
        Selector::Cgroup(given) => {
            let want = as_cgroup_path(given);
            let pid = pids()
                .into_iter()
                .find(|pid| cgroup_path(*pid).is_some_and(|c| within(&c, &want)))
                .ok_or_else(|| format!("no running process in cgroup {want}"))?;
            workload_of(pid, root)
        }
    }
}

/// The fuzz target's entry: every parser of node files on `data`.
pub fn fuzz(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    if let Some(path) = cgroup::path_of(&text) {
        let _ = cgroup::container_of(path);
        let _ = cgroup::pod_uid_of(path);
    }
    let _ = cgroup::container_of(&text);
    let _ = cgroup::pod_uid_of(&text);
    let _ = listeners::listening_in(&text);
    let _ = pod::name_in_hosts_file(&text);
    let _ = pod::parse_log_dir(&text, "0c1d2e3f-4a5b-6c7d-8e9f-0a1b2c3d4e5f");
    let _ = cgroup2_mount_in(&text);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cgroup_holds_the_ones_below_it() {
        assert!(within("/a/b", "/a"));
        assert!(within("/a", "/a"));
        assert!(!within("/ab", "/a"));
        assert!(within("/anything", "/"));
    }

    #[test]
    fn this_process_is_found_by_its_pid_and_its_cgroup() {
        let me = std::process::id();
        let place = locate(&Selector::Pid(me), Path::new("/")).unwrap();
        assert_eq!(place.pid, me);
        let cgroup = place.cgroup.clone().unwrap();
        let by_cgroup = locate(&Selector::Cgroup(cgroup.clone()), Path::new("/")).unwrap();
        // The lowest pid in it: this one or one started before it.
        assert!(by_cgroup.pid <= me, "{cgroup}");
        assert!(locate(&Selector::Pid(u32::MAX), Path::new("/")).is_err());
        assert!(locate(&Selector::Container("zz".into()), Path::new("/")).is_err());
    }
}
