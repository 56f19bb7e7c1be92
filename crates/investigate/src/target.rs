//! A container or process to look inside (`--container`, `--pid`,
//! `--cgroup`): found on the node, its network namespace entered by the
//! capture's thread (or by the whole process, for `diagnose`, whose client
//! must reach the container's own loopback too).

use std::path::{Path, PathBuf};
use whyslow_container::{listeners, locate, netns_of, Selector, Workload};
use whyslow_model::ServerWorkload;
use whyslow_wire::live::ThreadSetup;

/// A workload found, and the node root its pod was looked up under.
#[derive(Debug, Clone)]
pub struct Target {
    pub workload: Workload,
    pub host_root: PathBuf,
}

impl Target {
    /// Finds what `selector` names; Err says why it could not.
    pub fn find(selector: &Selector, host_root: &Path) -> Result<Target, String> {
        Ok(Target {
            workload: locate(selector, host_root)?,
            host_root: host_root.to_path_buf(),
        })
    }

    /// Every workload the selectors name, each found.
    pub fn find_all(selectors: &[Selector], host_root: &Path) -> Result<Vec<Target>, String> {
        selectors
            .iter()
            .map(|s| Target::find(s, host_root))
            .collect()
    }

    /// The one network namespace to capture in: the first workload named;
    /// Err when one is not found, or when those named do not share one.
    pub fn find_one(selectors: &[Selector], host_root: &Path) -> Result<Option<Target>, String> {
        let found = Target::find_all(selectors, host_root)?;
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

    /// Run on a capture's thread: enters the workload's network namespace
    /// (nothing to do when it is the caller's own). The namespace is opened
    /// now, so a process that exits before the thread starts is no matter.
    pub fn thread_setup(&self) -> Result<ThreadSetup, String> {
        let ns = netns_of(&self.workload)?;
        Ok(Box::new(move || {
            match whyslow_container::is_own_netns(&ns) {
                true => Ok(()),
                false => whyslow_container::enter_netns(&ns),
            }
        }))
    }

    /// Enters the workload's network namespace on the calling thread. Call
    /// before any other thread starts: they inherit it.
    pub fn enter(&self) -> Result<(), String> {
        (self.thread_setup()?)()
    }

    /// Whether both are in one network namespace.
    pub fn same_netns(&self, other: &Target) -> bool {
        let ns = |t: &Target| whyslow_container::netns_inode(t.workload.pid);
        matches!((ns(self), ns(other)), (Some(a), Some(b)) if a == b)
    }

    /// Who listens on each port of the workload's network namespace, now.
    pub fn servers(&self) -> Vec<ServerWorkload> {
        listeners::servers_of(&self.workload, &self.host_root)
            .into_iter()
            .map(|(port, workload)| ServerWorkload { port, workload })
            .collect()
    }

    /// "capturing in the network namespace of container containerd 3f2a… (pid 812)".
    pub fn said(&self) -> String {
        let w = &self.workload;
        match w.container.is_some() || w.pod.is_some() {
            true => format!("in the network namespace of {} (pid {})", w.label(), w.pid),
            false => format!("in the network namespace of pid {}", w.pid),
        }
    }
}
