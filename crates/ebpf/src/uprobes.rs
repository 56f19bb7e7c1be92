//! OpenSSL's plaintext: the uprobes of sockio.bpf.c attached to every
//! libssl the traced processes map — the system's, and the copies wheels
//! ship (psycopg2-binary brings its own) — found in `/proc/PID/maps` and
//! looked for again each second, so a library loaded after tracing began
//! is hooked too. Where the processes are named from the start (`--pid`,
//! a container's cgroup) each library is hooked in those processes only: a
//! uprobe on a file otherwise traps in every process that maps it (wrk's
//! own libssl calls, 4 traps a request when a TLS service is traced), and
//! each trap costs the process that takes it whether the programs keep its
//! call or not. Otherwise (every process, or a command started after
//! tracing began) the system's libssl is hooked for all from the start, so
//! that a short command (`capture --ebpf -- curl …`) is seen before a look
//! at its maps could find it.
//!
//! Go binaries carry their own TLS and scheduler: a traced process whose
//! executable is a Go binary gets crypto/tls's Read and Write hooked, and
//! the runtime's goroutine starts and ends (`gobin` finds them).

use crate::gobin;
use aya::programs::UProbe;
use aya::Ebpf;
use foldhash::HashSet;
use std::path::{Path, PathBuf};

/// Entry programs and the OpenSSL functions they hook; `ssl_return` is
/// attached to the return of each.
const ENTRIES: [(&str, &str); 4] = [
    ("ssl_write", "SSL_write"),
    ("ssl_write_ex", "SSL_write_ex"),
    ("ssl_read", "SSL_read"),
    ("ssl_read_ex", "SSL_read_ex"),
];
const RETURN: &str = "ssl_return";

/// The programs for Go binaries (sockio.bpf.c).
const GO_PROGRAMS: [&str; 6] = [
    "go_tls_write",
    "go_tls_read",
    "go_tls_return",
    "go_newproc1",
    "go_newproc1_return",
    "go_goexit1",
];

/// A Go binary larger than this is not read for its symbols (the largest
/// real services are a few hundred MB with debug information).
const MAX_GO_BINARY: u64 = 1 << 30;

/// A file, as the kernel knows it: device and inode.
type FileId = (u64, u64);

/// Where distributions put the system's libssl.
const SYSTEM_LIB_DIRS: [&str; 5] = [
    "/usr/lib/x86_64-linux-gnu",
    "/lib/x86_64-linux-gnu",
    "/usr/lib64",
    "/usr/lib",
    "/lib64",
];

/// OpenSSL's libssl (libssl.so.3, a wheel's libssl-1a2b3c.so.3), not
/// NSS's libssl3.so.
fn is_libssl(name: &str) -> bool {
    name.starts_with("libssl") && !name.starts_with("libssl3") && name.contains(".so")
}

fn file_id(path: &Path) -> Option<FileId> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).ok()?;
    Some((m.dev(), m.ino()))
}

/// The libssl files hooked so far, and what could not be.
#[derive(Debug, Default)]
pub struct SslHooks {
    /// Files hooked, each for one process or (pid 0) for all.
    done: HashSet<(FileId, u32)>,
    /// Hook each library in the traced processes only.
    per_process: bool,
    /// Files said hooked (once each, whatever the processes).
    said: HashSet<FileId>,
    /// The Go binaries hooked: a process running one is marked as Go.
    go_files: HashSet<FileId>,
    /// Paths of the libraries hooked.
    pub hooked: Vec<String>,
    /// Libraries that could not be hooked, each with why: their TLS stays
    /// encrypted.
    pub failed: Vec<String>,
}

/// Loads the uprobe programs (once, before any attach).
pub fn load_programs(ebpf: &mut Ebpf) -> Result<(), String> {
    let names = ENTRIES.iter().map(|(p, _)| *p).chain([RETURN]);
    for name in names.chain(GO_PROGRAMS) {
        program(ebpf, name)?
            .load()
            .map_err(|e| format!("{name}: {e}"))?;
    }
    Ok(())
}

/// The libssl files `pid` maps, each with the path to open it by (through
/// the process's root, so a process in another mount namespace is read in
/// its own). None: the process is gone.
fn libssl_of(pid: u32) -> Option<Vec<PathBuf>> {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).ok()?;
    let mut out: Vec<PathBuf> = Vec::new();
    // address perms offset dev inode path
    for path in maps.lines().filter_map(|l| l.split_whitespace().nth(5)) {
        let name = Path::new(path).file_name().and_then(|n| n.to_str());
        if name.is_some_and(is_libssl) {
            let root = PathBuf::from(format!("/proc/{pid}/root"));
            let path = root.join(path.trim_start_matches('/'));
            if !out.contains(&path) {
                out.push(path);
            }
        }
    }
    Some(out)
}

/// The system's libssl files.
fn system_libssl() -> Vec<PathBuf> {
    SYSTEM_LIB_DIRS
        .iter()
        .filter_map(|d| std::fs::read_dir(d).ok())
        .flat_map(|dir| dir.flatten())
        .filter(|e| e.file_name().to_str().is_some_and(is_libssl))
        .map(|e| e.path())
        .collect()
}

/// Hooks the functions `path` has. Err: it has none of them (a library
/// stripped of its dynamic symbols, say).
fn attach(ebpf: &mut Ebpf, path: &Path, pid: Option<u32>) -> Result<(), String> {
    let mut first_error = None;
    let mut hooked = 0;
    let pid = pid.and_then(|p| i32::try_from(p).ok());
    for (entry, function) in ENTRIES {
        let mut one = |name: &str| -> Result<(), String> {
            program(ebpf, name)?
                .attach(Some(function), 0, path, pid)
                .map(|_| ())
                .map_err(|e| format!("{function}: {e}"))
        };
        match one(entry).and_then(|()| one(RETURN)) {
            Ok(()) => hooked += 1,
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    match (hooked, first_error) {
        (0, Some(e)) => Err(e),
        _ => Ok(()),
    }
}

fn program<'a>(ebpf: &'a mut Ebpf, name: &str) -> Result<&'a mut UProbe, String> {
    ebpf.program_mut(name)
        .ok_or_else(|| format!("no program {name}"))?
        .try_into()
        .map_err(|e| format!("{name}: {e}"))
}

/// Attaches `name` at `offset` of the file `path`.
fn attach_at(ebpf: &mut Ebpf, name: &str, path: &Path, offset: u64) -> Result<(), String> {
    program(ebpf, name)?
        .attach(None, offset, path, None)
        .map(|_| ())
        .map_err(|e| format!("{name} at {offset:#x}: {e}"))
}

/// Hooks a Go binary's TLS and goroutines; returns what was hooked. Err:
/// not a Go binary (None), or one that could not be hooked (with why).
fn attach_go(ebpf: &mut Ebpf, path: &Path) -> Result<Vec<&'static str>, Option<String>> {
    let size = std::fs::metadata(path).map_err(|_| None)?.len();
    if size > MAX_GO_BINARY {
        return Err(None);
    }
    let data = std::fs::read(path).map_err(|_| None)?;
    let found = match gobin::read(&data) {
        Ok(f) => f,
        Err(why) if why == gobin::NOT_GO => return Err(None),
        Err(why) => return Err(Some(why)),
    };
    let mut parts = Vec::new();
    if let (Some(write), Some(read)) = (&found.tls_write, &found.tls_read) {
        attach_at(ebpf, "go_tls_write", path, write.probe_at).map_err(Some)?;
        attach_at(ebpf, "go_tls_read", path, read.probe_at).map_err(Some)?;
        // Write is read at its entry alone (sockio.bpf.c).
        for &at in &read.returns {
            attach_at(ebpf, "go_tls_return", path, at).map_err(Some)?;
        }
        parts.push("crypto/tls");
    }
    if let (Some(spawn), Some(exit)) = (&found.newproc1, &found.goexit1) {
        for &at in &spawn.returns {
            attach_at(ebpf, "go_newproc1_return", path, at).map_err(Some)?;
        }
        attach_at(ebpf, "go_newproc1", path, spawn.probe_at).map_err(Some)?;
        attach_at(ebpf, "go_goexit1", path, exit.probe_at).map_err(Some)?;
        parts.push("goroutines");
    }
    if parts.is_empty() {
        return Err(Some(
            "a Go binary with neither crypto/tls nor the runtime's newproc1".into(),
        ));
    }
    // Said with what was hooked: where each entry probe went.
    let entries = [
        &found.tls_write,
        &found.tls_read,
        &found.newproc1,
        &found.goexit1,
    ];
    let (mut pushed, mut at_entry) = (0, 0);
    for f in entries.into_iter().flatten() {
        match f.probe_at == f.entry {
            true => at_entry += 1,
            false => pushed += 1,
        }
    }
    parts.push(match (pushed, at_entry) {
        (_, 0) => "entry probes on PUSH RBP",
        (0, _) => "entry probes at the entry",
        _ => "entry probes on PUSH RBP where the prologue allows, else at the entry",
    });
    Ok(parts)
}

/// Marks `pid` as a Go process (its calls told by goroutine) before the
/// first of its Go probes would.
fn mark_go(ebpf: &mut Ebpf, pid: u32) {
    let Some(map) = ebpf.map_mut("go_pids") else {
        return;
    };
    if let Ok(mut pids) = aya::maps::HashMap::<_, u32, u8>::try_from(map) {
        let _ = pids.insert(pid, 1, 0);
    }
}

impl SslHooks {
    /// `per_process`: each library hooked in the traced processes only.
    pub fn new(per_process: bool) -> SslHooks {
        SslHooks {
            per_process,
            ..SslHooks::default()
        }
    }

    /// Hooks the system's libssl files, for every process (none when
    /// hooking per process).
    pub fn system(&mut self, ebpf: &mut Ebpf) {
        if self.per_process {
            return;
        }
        for path in system_libssl() {
            self.hook(ebpf, &path, None);
        }
    }

    /// Hooks the libssl files of `pids` not hooked yet; returns the pids
    /// still alive.
    pub fn scan(&mut self, ebpf: &mut Ebpf, pids: &[u32]) -> Vec<u32> {
        let mut alive = Vec::with_capacity(pids.len());
        for &pid in pids {
            let Some(libs) = libssl_of(pid) else { continue };
            alive.push(pid);
            let exe = PathBuf::from(format!("/proc/{pid}/exe"));
            self.hook_go(ebpf, &exe);
            if file_id(&exe).is_some_and(|id| self.go_files.contains(&id)) {
                mark_go(ebpf, pid);
            }
            let only = self.per_process.then_some(pid);
            for path in libs {
                self.hook(ebpf, &path, only);
            }
        }
        alive
    }

    /// Hooks the executable at `path` if it is a Go binary not hooked yet.
    fn hook_go(&mut self, ebpf: &mut Ebpf, path: &Path) {
        let Some(id) = file_id(path) else { return };
        // A Go binary's probes trap only in the processes running it.
        if !self.done.insert((id, 0)) {
            return;
        }
        let shown = std::fs::read_link(path).unwrap_or_else(|_| path.to_path_buf());
        let shown = shown.display();
        match attach_go(ebpf, path) {
            Ok(parts) => {
                self.go_files.insert(id);
                self.hooked
                    .push(format!("{shown} (Go: {})", parts.join(", ")));
            }
            Err(None) => {}
            Err(Some(why)) => self.failed.push(format!(
                "{shown} (Go): {why}; its TLS stays encrypted and its calls go by thread"
            )),
        }
    }

    /// Hooks `path` in process `pid`, or (None) in every process.
    fn hook(&mut self, ebpf: &mut Ebpf, path: &Path, pid: Option<u32>) {
        let Some(id) = file_id(path) else { return };
        if self.done.contains(&(id, 0)) || !self.done.insert((id, pid.unwrap_or(0))) {
            return;
        }
        let shown = path.display().to_string();
        match attach(ebpf, path, pid) {
            Ok(()) if self.said.insert(id) => self.hooked.push(shown),
            Ok(()) => {}
            Err(why) if self.said.insert(id) => self
                .failed
                .push(format!("{shown}: {why}; TLS through it stays encrypted")),
            Err(_) => {}
        }
    }
}

/// Every process's id, for tracing without a filter.
pub fn all_pids() -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect()
}
