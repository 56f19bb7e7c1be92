//! A "container" made as a runtime makes one, with no runtime installed:
//! its own network, mount and PID namespaces (`unshare`), and its own
//! cgroup v2 named as containerd names a container's
//! (`cri-containerd-ID.scope`), running a lab scenario on its own loopback.

use super::*;
use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};

/// Where the cgroup v2 hierarchy is mounted here, if it is.
fn cgroup2_mount() -> Option<PathBuf> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    whyslow_container::cgroup2_mount_in(&info)
}

/// Whether containers can be made here: root, a cgroup v2 hierarchy,
/// unshare and ip.
pub fn containers_allowed(test: &str) -> bool {
    // SAFETY: geteuid(2) has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    needed(test, "root (namespaces and cgroups)", root)
        && needed(test, "a cgroup v2 hierarchy", cgroup2_mount().is_some())
        && needed(test, "unshare", have("unshare"))
        && needed(test, "ip", have("ip"))
}

/// A container id: 64 random hex digits.
fn new_id() -> String {
    let mut bytes = [0u8; 32];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .unwrap();
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

pub struct LabContainer {
    pub id: String,
    pub cgroup: PathBuf,
    /// The scenario's URL on the container's own loopback.
    pub url: String,
    child: Child,
}

impl LabContainer {
    /// `whyslow lab run SCENARIO [--fixed]` in a new container.
    pub fn start(scenario: &str, fixed: bool) -> LabContainer {
        let id = new_id();
        let slice = cgroup2_mount()
            .unwrap()
            .join(format!("whyslow-test-{}.slice", std::process::id()));
        let cgroup = slice.join(format!("cri-containerd-{id}.scope"));
        std::fs::create_dir_all(&cgroup).unwrap();
        let lab = format!(
            "ip link set lo up && exec {} lab run {scenario}{}",
            env!("CARGO_BIN_EXE_whyslow"),
            if fixed { " --fixed" } else { "" }
        );
        // The shell joins the cgroup, then becomes unshare: every process
        // of the container starts inside it.
        let script = format!(
            "echo $$ > {}/cgroup.procs && exec unshare --net --mount --pid --fork --mount-proc sh -c '{lab}'",
            cgroup.display()
        );
        let mut child = Command::new("sh")
            .args(["-c", &script])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let url = line.trim().to_string();
        let c = LabContainer {
            id,
            cgroup,
            url,
            child,
        };
        assert!(
            c.url.starts_with("http://127.0.0.1:"),
            "{scenario}: {:?}",
            c.url
        );
        c
    }

    /// Its first process (the container's init, as a runtime starts it).
    pub fn pid(&self) -> u32 {
        let procs = std::fs::read_to_string(self.cgroup.join("cgroup.procs")).unwrap();
        procs.lines().filter_map(|l| l.parse().ok()).min().unwrap()
    }

    /// The container's service port.
    pub fn port(&self) -> u16 {
        self.url
            .rsplit(':')
            .next()
            .unwrap()
            .split('/')
            .next()
            .unwrap()
            .parse()
            .unwrap()
    }

    /// `whyslow load` inside the container's network namespace, bounded by
    /// `duration`: `clients` connections, each sending as answers come.
    pub fn load(&self, clients: usize, duration: &str) -> Child {
        Command::new("nsenter")
            .args(["-t", &self.pid().to_string(), "-n"])
            .arg(env!("CARGO_BIN_EXE_whyslow"))
            .args([
                "load",
                "-q",
                "-c",
                &clients.to_string(),
                "--duration",
                duration,
            ])
            .arg(&self.url)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap()
    }
}

impl Drop for LabContainer {
    fn drop(&mut self) {
        if let Ok(procs) = std::fs::read_to_string(self.cgroup.join("cgroup.procs")) {
            for pid in procs.lines().filter_map(|l| l.parse::<i32>().ok()) {
                // SAFETY: kill(2) on a process of this test's own cgroup.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        }
        let _ = self.child.wait();
        for _ in 0..50 {
            if std::fs::remove_dir(&self.cgroup).is_ok() {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        if let Some(slice) = self.cgroup.parent() {
            let _ = std::fs::remove_dir(slice);
        }
    }
}
