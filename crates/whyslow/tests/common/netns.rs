//! Network namespaces a test makes for itself (`ip netns`), each with its
//! own loopback and its own `/etc/resolv.conf` (`ip netns exec` binds
//! `/etc/netns/NAME/resolv.conf` over it), and a real resolver in one:
//! dnsmasq from Debian's packages. Nothing leaves the namespace.

use super::real::python;
use super::*;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

/// A namespace, deleted with its resolv.conf when dropped.
pub struct Netns {
    pub name: String,
}

/// Whether namespaces can be made here: root and `ip`.
pub fn netns_allowed(test: &str) -> bool {
    // SAFETY: geteuid(2) has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    needed(test, "root (network namespaces)", root) && needed(test, "ip", have("ip"))
}

impl Netns {
    /// A namespace named for `tag` and this process, its loopback up.
    pub fn new(tag: &str) -> Netns {
        let name = format!("ws-{tag}-{}", std::process::id());
        let _ = Command::new("ip").args(["netns", "del", &name]).output();
        run_ok(Command::new("ip").args(["netns", "add", &name]));
        let ns = Netns { name };
        run_ok(ns.command("ip").args(["link", "set", "lo", "up"]));
        ns
    }

    fn etc(&self) -> PathBuf {
        PathBuf::from("/etc/netns").join(&self.name)
    }

    /// The namespace's resolv.conf.
    pub fn resolv_conf(&self, text: &str) {
        std::fs::create_dir_all(self.etc()).unwrap();
        std::fs::write(self.etc().join("resolv.conf"), text).unwrap();
    }

    /// `program` run inside the namespace.
    pub fn command(&self, program: &str) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.name, program]);
        c
    }

    /// nftables rules applied inside the namespace (`nft -f -`).
    pub fn nft(&self, rules: &str) {
        use std::io::Write;
        let mut child = self
            .command("nft")
            .args(["-f", "-"])
            .stdin(Stdio::piped())
            .spawn()
            .expect("nft");
        child
            .stdin
            .take()
            .unwrap()
            .write_all(rules.as_bytes())
            .unwrap();
        assert!(child.wait().unwrap().success(), "nft: {rules}");
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .output();
        let _ = std::fs::remove_dir_all(self.etc());
    }
}

fn run_ok(c: &mut Command) {
    let out = c.output().expect("run");
    assert!(
        out.status.success(),
        "{c:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// dnsmasq on the namespace's 127.0.0.1:53 (UDP and TCP), answering from
/// its own records only; killed when dropped.
pub struct Dnsmasq {
    child: Child,
}

impl Dnsmasq {
    /// `records`: dnsmasq options that make its answers (`--address=…`,
    /// `--local=…`). Returns once it answers.
    pub fn start(ns: &Netns, records: &[&str]) -> Dnsmasq {
        let child = ns
            .command("dnsmasq")
            .args([
                "--keep-in-foreground",
                "--port=53",
                "--listen-address=127.0.0.1",
                "--bind-interfaces",
                "--no-resolv",
                "--no-hosts",
                "--no-negcache",
                "--cache-size=0",
                "--user=root",
                "--pid-file=",
                "--address=/ready.check/127.0.0.1",
            ])
            .args(records)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("dnsmasq");
        let d = Dnsmasq { child };
        let probe = "import socket; socket.getaddrinfo('ready.check.', 0, socket.AF_INET)";
        for _ in 0..100 {
            let ok = ns
                .command(python())
                .args(["-c", probe])
                .output()
                .is_ok_and(|o| o.status.success());
            if ok {
                return d;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        panic!("dnsmasq did not answer in {}", ns.name);
    }
}

impl Drop for Dnsmasq {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A program serving in a namespace; killed when dropped.
pub struct NsServer {
    child: Child,
}

impl NsServer {
    /// Runs `cmd` (a namespace's command) and returns once something
    /// accepts on the namespace's 127.0.0.1:`port`.
    pub fn start(ns: &Netns, cmd: &mut Command, port: u16) -> NsServer {
        Self::start_on(ns, cmd, "127.0.0.1", port)
    }

    /// As `start`, waiting for `addr`:`port` in the namespace.
    pub fn start_on(ns: &Netns, cmd: &mut Command, addr: &str, port: u16) -> NsServer {
        let child = cmd
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start a server in the namespace");
        let s = NsServer { child };
        let probe = format!("import socket; socket.create_connection(('{addr}', {port}), 1)");
        for _ in 0..200 {
            let up = ns
                .command(python())
                .args(["-c", &probe])
                .output()
                .is_ok_and(|o| o.status.success());
            if up {
                return s;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        panic!("nothing listens on {port} in {}", ns.name);
    }
}

impl NsServer {
    /// Runs `cmd` (a namespace's command serving UDP) and gives it a
    /// moment to bind: no handshake tells when a UDP server is up; the
    /// resolver's readiness check in front of it waits for answers.
    pub fn start_udp(_ns: &Netns, cmd: &mut Command) -> NsServer {
        let child = cmd
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start a server in the namespace");
        NsServer { child }
    }
}

impl NsServer {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for NsServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A veth pair joining namespaces `a` and `b`, its ends addressed `a_addr`
/// and `b_addr` (CIDR) and up; gone with either namespace.
pub fn link(a: &Netns, a_addr: &str, b: &Netns, b_addr: &str) {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    let n = N.fetch_add(1, Ordering::SeqCst);
    // Interface names are at most 15 bytes, and created in the host's
    // namespace first: unique to this process and pair.
    let pid = std::process::id() % 1_000_000;
    let (x, y) = (format!("wv{pid}a{n}"), format!("wv{pid}b{n}"));
    run_ok(Command::new("ip").args(["link", "add", &x, "type", "veth", "peer", "name", &y]));
    for (ns, end, addr) in [(a, &x, a_addr), (b, &y, b_addr)] {
        run_ok(Command::new("ip").args(["link", "set", end, "netns", &ns.name]));
        run_ok(ns.command("ip").args(["addr", "add", addr, "dev", end]));
        run_ok(ns.command("ip").args(["link", "set", end, "up"]));
    }
}

/// A slow link joining namespaces `a` and `b` (`whyslow lab link`: two
/// TAP devices, each frame carried `delay` late each way, as netem would
/// delay it), its ends addressed `a_addr` and `b_addr` (CIDR) and up; the
/// link's process ends when dropped.
pub struct SlowLink {
    child: Child,
}

impl SlowLink {
    pub fn new(a: &Netns, a_addr: &str, b: &Netns, b_addr: &str, delay: &str) -> SlowLink {
        use std::io::BufRead;
        let pid = std::process::id() % 1_000_000;
        let (x, y) = (format!("wt{pid}a"), format!("wt{pid}b"));
        let mut child = Command::new(env!("CARGO_BIN_EXE_whyslow"))
            .args(["lab", "link", &x, &y, "--delay", delay])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("whyslow lab link");
        let mut line = String::new();
        let _ = std::io::BufReader::new(child.stdout.take().unwrap()).read_line(&mut line);
        let link = SlowLink { child };
        assert!(line.starts_with("ready"), "lab link: {line:?}");
        for (ns, dev, addr) in [(a, &x, a_addr), (b, &y, b_addr)] {
            run_ok(Command::new("ip").args(["link", "set", dev, "netns", &ns.name]));
            run_ok(ns.command("ip").args(["addr", "add", addr, "dev", dev]));
            run_ok(ns.command("ip").args(["link", "set", dev, "up"]));
        }
        link
    }
}

impl Drop for SlowLink {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
