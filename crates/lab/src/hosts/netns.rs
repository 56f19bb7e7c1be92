//! Hosts as network namespaces (`ip netns`), the links between them, and
//! the services running in them; all undone when dropped.

use super::tiers::Tier;
use super::Link;
use crate::delay_line;
use std::io::BufRead;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

/// A network namespace, deleted when dropped.
pub struct Netns {
    pub name: String,
}

fn run_ok(cmd: &mut Command) -> Result<(), String> {
    let out = cmd.output().map_err(|e| format!("{cmd:?}: {e}"))?;
    match out.status.success() {
        true => Ok(()),
        false => Err(format!(
            "{cmd:?}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )),
    }
}

/// Names unique to this process: namespaces and devices of two runs at
/// once must not meet.
fn unique(tag: &str) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    let n = N.fetch_add(1, Ordering::SeqCst);
    format!("{tag}{}x{n}", std::process::id() % 100_000)
}

impl Netns {
    /// A new namespace for host `host`, its loopback up.
    pub fn new(host: &str) -> Result<Netns, String> {
        let ns = Netns {
            name: unique(&format!("wsl-{host}-")),
        };
        run_ok(Command::new("ip").args(["netns", "add", &ns.name]))?;
        run_ok(
            ns.command(Path::new("ip"))
                .args(["link", "set", "lo", "up"]),
        )?;
        Ok(ns)
    }

    /// `program` to run in the namespace.
    pub fn command(&self, program: &Path) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.name]).arg(program);
        c
    }

    /// Moves device `dev` here, addressed `addr` (CIDR) and up.
    fn take(&self, dev: &str, addr: &str) -> Result<(), String> {
        run_ok(Command::new("ip").args(["link", "set", dev, "netns", &self.name]))?;
        let ip = Path::new("ip");
        run_ok(self.command(ip).args(["addr", "add", addr, "dev", dev]))?;
        run_ok(self.command(ip).args(["link", "set", dev, "up"]))
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .output();
    }
}

/// Joins `a` (at `a_addr`, CIDR) and `b` (at `b_addr`) by `link`: gone
/// with the namespaces (a slow link's carrier ends with its devices).
pub fn link(a: &Netns, a_addr: &str, b: &Netns, b_addr: &str, link: Link) -> Result<(), String> {
    let (x, y) = (unique("wsla"), unique("wslb"));
    match link {
        Link::Veth => {
            run_ok(
                Command::new("ip").args(["link", "add", &x, "type", "veth", "peer", "name", &y]),
            )?;
        }
        Link::Slow(ms) => {
            let tap = |n: &str| delay_line::open_tap(n).map_err(|e| format!("TAP device {n}: {e}"));
            let (tx, ty) = (tap(&x)?, tap(&y)?);
            let delay = std::time::Duration::from_millis(ms);
            std::thread::spawn(move || delay_line::carry(tx, ty, delay));
        }
    }
    a.take(&x, a_addr)?;
    b.take(&y, b_addr)
}

/// A service (`whyslow lab tier`) running in a namespace; stopped when dropped.
pub struct Served {
    child: Child,
}

impl Served {
    /// Starts `tier` on `listen` in `ns` with `exe`, once it listens.
    pub fn start(ns: &Netns, exe: &Path, tier: Tier, listen: &str) -> Result<Served, String> {
        let mut cmd = ns.command(exe);
        cmd.args(["lab", "tier"])
            .args(tier.args())
            .args(["--listen", listen])
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        let mut child = cmd.spawn().map_err(|e| format!("{cmd:?}: {e}"))?;
        let mut line = String::new();
        let stdout = child.stdout.take().expect("piped");
        let _ = std::io::BufReader::new(stdout).read_line(&mut line);
        let served = Served { child };
        if !line.starts_with("ready") {
            return Err(format!("tier {tier:?} on {listen} did not start"));
        }
        Ok(served)
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
