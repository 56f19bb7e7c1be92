//! `--pid`, `--container`, `--cgroup`: the workload to look inside, shared
//! by capture, diagnose and agent.

use clap::Args;
use std::path::PathBuf;
use whyslow_container::Selector;
use whyslow_investigate::target::Target;

#[derive(Args, Debug, Clone, Default)]
pub struct TargetArgs {
    /// Capture inside this process's network namespace (its own loopback
    /// included); with --ebpf, trace it and the processes it starts (repeatable)
    #[arg(long, value_name = "PID")]
    pub pid: Vec<u32>,
    /// A container by id or unique prefix (Docker, containerd, CRI-O,
    /// Podman): its network namespace; with --ebpf, its cgroup
    #[arg(long, value_name = "ID", conflicts_with_all = ["pid", "cgroup"])]
    pub container: Vec<String>,
    /// A cgroup (v2) by its path (as a process's cgroup file shows it) or its directory: its
    /// first process's network namespace; with --ebpf, its processes and
    /// those of the cgroups below it
    #[arg(long, value_name = "PATH", conflicts_with = "pid")]
    pub cgroup: Option<String>,
    /// The node's root, under which the kubelet's pod directories are read
    /// (/host where a DaemonSet mounts the node's)
    #[arg(long, value_name = "DIR", default_value = "/")]
    pub host_root: PathBuf,
}

impl TargetArgs {
    /// Each workload named, in the order given.
    pub fn selectors(&self) -> Vec<Selector> {
        let pids = self.pid.iter().map(|p| Selector::Pid(*p));
        let containers = self
            .container
            .iter()
            .map(|c| Selector::Container(c.clone()));
        let cgroup = self.cgroup.iter().map(|c| Selector::Cgroup(c.clone()));
        pids.chain(containers).chain(cgroup).collect()
    }

    /// Every workload named, each found (the agent watches several).
    pub fn all(&self) -> Result<Vec<Target>, String> {
        Target::find_all(&self.selectors(), &self.host_root)
    }

    /// The one network namespace to capture in, if a workload was named.
    pub fn one(&self) -> Result<Option<Target>, String> {
        Target::find_one(&self.selectors(), &self.host_root)
    }
}
