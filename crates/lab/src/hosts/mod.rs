//! The lab on several hosts: each host a network namespace of its own
//! (made with `ip netns`), joined by veth pairs or by a slow link (a delay
//! line between two TAP devices, `delay_line`: the kernel may have no
//! netem), each service a process on its host (`whyslow lab tier`), and
//! every host captured apart (`whyslow capture -i any` in each) while a
//! load runs from the front's host. What comes out is one capture per
//! host, to analyze together as one would captures of real hosts.
//!
//! Namespaces need root; `available` says why they cannot be made.

pub mod netns;
pub mod tiers;

use crate::scenario::{Fact, Truth};
use netns::{Netns, Served};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;
use tiers::Tier;
use whyslow_model::FindingKind;

/// How two hosts are joined.
#[derive(Debug, Clone, Copy)]
pub enum Link {
    /// A veth pair: tens of µs each way.
    Veth,
    /// A delay line of this many ms each way.
    Slow(u64),
}

/// A host of a scenario (its addresses are its links').
#[derive(Debug, Clone, Copy)]
pub struct HostSpec {
    pub name: &'static str,
}

/// A service of a scenario on one host.
#[derive(Debug, Clone, Copy)]
pub struct Service {
    pub host: usize,
    pub listen: &'static str,
    /// The tier; `fixed` is filled in when started.
    pub tier: fn(bool) -> Tier,
}

/// A scenario whose hosts are network namespaces.
#[derive(Debug, Clone, Copy)]
pub struct HostsScenario {
    pub name: &'static str,
    pub summary: &'static str,
    pub broken: &'static str,
    pub fixed: &'static str,
    pub hosts: &'static [HostSpec],
    /// (host a, a's address, host b, b's address, link).
    pub links: &'static [(usize, &'static str, usize, &'static str, Link)],
    /// Started in order (the database first).
    pub services: &'static [Service],
    /// What the load asks for, from the first host.
    pub url: &'static str,
    pub truth: Truth,
}

fn addr(s: &str) -> SocketAddr {
    s.parse().expect("a scenario's address")
}

pub const THREE_TIER: HostsScenario = HostsScenario {
    name: "three-tier",
    summary: "a front, its API and the API's database on three hosts: the API reads 20 products \
              one at a time",
    broken: "the API's GET /summary reads each product with its own statement",
    fixed: "one statement for the 20 products (= ANY($1))",
    hosts: &[
        HostSpec { name: "front" },
        HostSpec { name: "api" },
        HostSpec { name: "db" },
    ],
    links: &[
        (0, "10.81.1.1/24", 1, "10.81.1.2/24", Link::Veth),
        (1, "10.81.2.1/24", 2, "10.81.2.2/24", Link::Veth),
    ],
    services: &[
        Service {
            host: 2,
            listen: "10.81.2.2:5432",
            tier: |_| Tier::Db,
        },
        Service {
            host: 1,
            listen: "10.81.1.2:8080",
            tier: |fixed| Tier::Api {
                db: addr("10.81.2.2:5432"),
                fixed,
            },
        },
        Service {
            host: 0,
            listen: "10.81.1.1:8000",
            tier: |_| Tier::Front {
                api: addr("10.81.1.2:8080"),
            },
        },
    ],
    url: "http://10.81.1.1:8000/report",
    truth: Truth {
        kind: Some(FindingKind::NPlusOne),
        time_lost_us: (tiers::ITEMS as u64 - 1) * tiers::STATEMENT_US,
        facts: &[
            Fact {
                name: "statements",
                value: tiers::ITEMS as u64,
            },
            Fact {
                name: "fixed_statements",
                value: 1,
            },
        ],
    },
};

pub const SLOW_LINK: HostsScenario = HostsScenario {
    name: "slow-link",
    summary: "a page calls 8 endpoints of an API one after another across a link of 10 ms \
              each way",
    broken: "8 calls one after another, each a round trip of the slow link",
    fixed: "one call that answers all 8",
    hosts: &[HostSpec { name: "front" }, HostSpec { name: "api" }],
    links: &[(0, "10.82.1.1/24", 1, "10.82.1.2/24", Link::Slow(10))],
    services: &[
        Service {
            host: 1,
            listen: "10.82.1.2:8080",
            tier: |_| Tier::Parts,
        },
        Service {
            host: 0,
            listen: "10.82.1.1:8000",
            tier: |fixed| Tier::Page {
                api: addr("10.82.1.2:8080"),
                fixed,
            },
        },
    ],
    url: "http://10.82.1.1:8000/page",
    truth: Truth {
        kind: Some(FindingKind::SequentialCalls),
        // All but one call's round trip.
        time_lost_us: (tiers::PARTS.len() as u64 - 1) * 20_000,
        facts: &[
            Fact {
                name: "calls",
                value: tiers::PARTS.len() as u64,
            },
            Fact {
                name: "round_trip_us",
                value: 20_000,
            },
        ],
    },
};

pub const HOSTS_SCENARIOS: &[HostsScenario] = &[THREE_TIER, SLOW_LINK];

/// The scenario named `name`.
pub fn named(name: &str) -> Result<&'static HostsScenario, String> {
    HOSTS_SCENARIOS
        .iter()
        .find(|s| s.name == name)
        .ok_or_else(|| {
            let names: Vec<&str> = HOSTS_SCENARIOS.iter().map(|s| s.name).collect();
            format!(
                "no scenario on several hosts named {name:?} (there are: {})",
                names.join(", ")
            )
        })
}

/// `whyslow lab hosts`: the scenario `name` run with this program.
pub fn run_named(name: &str, fixed: bool, load: Load, dir: &Path) -> Result<Vec<PathBuf>, String> {
    let exe = std::env::current_exe().map_err(|e| format!("where is this program? {e}"))?;
    run(named(name)?, fixed, load, dir, &exe)
}

/// Why scenarios on several hosts cannot run here, if they cannot: they
/// need root (namespaces, devices) and iproute2's `ip`.
pub fn available() -> Result<(), String> {
    // SAFETY: geteuid(2) has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err("scenarios on several hosts make network namespaces: run as root".into());
    }
    let ip = Command::new("ip").arg("-V").output();
    if !ip.is_ok_and(|o| o.status.success()) {
        return Err("scenarios on several hosts need iproute2's `ip`".into());
    }
    Ok(())
}

/// How a run loads the front.
#[derive(Debug, Clone, Copy)]
pub struct Load {
    pub clients: u32,
    /// Requests in all, at most.
    pub requests: u64,
    /// How long the load runs at most (None: until `requests` are done).
    pub duration: Option<Duration>,
}

/// Runs `s` (fixed or not) with `exe` (the whyslow binary) under `load`,
/// each host captured into `dir/HOST.pcapng`: those files, host by host.
pub fn run(
    s: &HostsScenario,
    fixed: bool,
    load: Load,
    dir: &Path,
    exe: &Path,
) -> Result<Vec<PathBuf>, String> {
    available()?;
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let hosts: Vec<Netns> = s
        .hosts
        .iter()
        .map(|h| Netns::new(h.name))
        .collect::<Result<_, _>>()?;
    for &(a, a_addr, b, b_addr, link) in s.links {
        netns::link(&hosts[a], a_addr, &hosts[b], b_addr, link)?;
    }
    let mut served: Vec<Served> = Vec::new();
    for svc in s.services {
        let tier = (svc.tier)(fixed);
        served.push(Served::start(&hosts[svc.host], exe, tier, svc.listen)?);
    }
    let files: Vec<PathBuf> = s
        .hosts
        .iter()
        .map(|h| dir.join(format!("{}.pcapng", h.name)))
        .collect();
    // Each host's capture runs the next one's, the last the load: every
    // capture is listening before the load begins, and ends after it.
    let mut cmd = hosts[0].command(exe);
    cmd.args(["load", "-c", &load.clients.to_string()]).args([
        "-n",
        &load.requests.to_string(),
        "--trace-context",
        "off",
    ]);
    if let Some(d) = load.duration {
        cmd.args(["--duration", &format!("{}ms", d.as_millis())]);
    }
    cmd.arg(s.url);
    for (ns, file) in hosts.iter().zip(&files).rev() {
        let mut outer = ns.command(exe);
        outer
            .args(["capture", "-i", "any", "-w"])
            .arg(file)
            .arg("--");
        outer.arg(cmd.get_program()).args(cmd.get_args());
        cmd = outer;
    }
    let out = cmd
        .output()
        .map_err(|e| format!("cannot run the capture: {e}"))?;
    drop(served);
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        return Err(format!(
            "{}: the captured load failed: {}",
            s.name,
            err.trim()
        ));
    }
    Ok(files)
}
