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
    /// A cgroup (v2) as /proc/PID/cgroup names it, or its directory: its
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
        self.selectors()
            .iter()
            .map(|s| Target::find(s, &self.host_root))
            .collect()
    }

    /// The one workload whose network namespace is captured, if any was
    /// named: Err when none is found, or when those named do not share one.
    pub fn one(&self) -> Result<Option<Target>, String> {
        let found = self.all()?;
        let Some(first) = found.first() else {
            return Ok(None);
        };
        if found.iter().any(|t| !t.same_netns(first)) {
            return Err("the processes named are in different network namespaces: \
                 capture one at a time (agent takes several containers)"
                .into());
        }
        Ok(Some(first.clone()))
    }
}

/// A size in bytes: 500M, 2G, 64K, 1GiB or a plain number.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim().trim_end_matches("iB").trim_end_matches('B');
    let (digits, unit) = t.split_at(t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len()));
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("{s:?} is not a size (500M, 2G)"))?;
    let shift = match unit.to_ascii_uppercase().as_str() {
        "" => 0,
        "K" => 10,
        "M" => 20,
        "G" => 30,
        "T" => 40,
        _ => return Err(format!("{s:?}: a size ends in K, M, G or T")),
    };
    n.checked_mul(1 << shift)
        .ok_or_else(|| format!("{s:?} is too large"))
}

#[cfg(test)]
mod tests {
    use super::parse_size;

    #[test]
    fn sizes_as_people_write_them() {
        assert_eq!(parse_size("500M"), Ok(500 << 20));
        assert_eq!(parse_size("1GiB"), Ok(1 << 30));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert!(parse_size("1X").is_err());
        assert!(parse_size("M").is_err());
        assert!(parse_size("99999999999T").is_err());
    }
}
