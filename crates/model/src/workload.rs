//! Where a server runs: its process, cgroup, container and pod, as found on
//! the node (whyslow-container), named in reports beside its address.

use serde::{Deserialize, Serialize};

/// A container, as its runtime names it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Container {
    /// The full id: 64 hex digits.
    pub id: String,
    /// docker, containerd, cri-o, podman; "unknown" when the path holds an
    /// id whose runtime its form does not tell.
    pub runtime: String,
}

impl Container {
    /// The first 12 digits, as `docker ps` and `crictl ps` show an id.
    pub fn short_id(&self) -> &str {
        self.id.get(..12).unwrap_or(&self.id)
    }
}

/// A Kubernetes pod.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pod {
    pub namespace: String,
    pub name: String,
    pub uid: String,
}

/// Where one process runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Workload {
    /// The process named, or the lowest pid of the container or cgroup.
    pub pid: u32,
    /// Its cgroup path (the v2 one where there is one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cgroup: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container: Option<Container>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<Pod>,
}

impl Workload {
    /// "pod shop/api-0, container containerd 3f2a9c0d1e4b", "container
    /// docker 3f2a…", or "pid 812" for a process in no container.
    pub fn label(&self) -> String {
        let container = self
            .container
            .as_ref()
            .map(|c| format!("container {} {}", c.runtime, c.short_id()));
        match (&self.pod, container) {
            (Some(p), Some(c)) => format!("pod {}/{}, {c}", p.namespace, p.name),
            (Some(p), None) => format!("pod {}/{}", p.namespace, p.name),
            (None, Some(c)) => c,
            (None, None) => format!("pid {}", self.pid),
        }
    }
}

/// A port listening in the captured network namespace, and who listens.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServerWorkload {
    pub port: u16,
    pub workload: Workload,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_label_names_the_most_precise_place() {
        let mut w = Workload {
            pid: 812,
            cgroup: None,
            container: None,
            pod: None,
        };
        assert_eq!(w.label(), "pid 812");
        w.container = Some(Container {
            id: "3f2a9c0d1e4b".repeat(6)[..64].to_string(),
            runtime: "containerd".into(),
        });
        assert_eq!(w.label(), "container containerd 3f2a9c0d1e4b");
        w.pod = Some(Pod {
            namespace: "shop".into(),
            name: "api-0".into(),
            uid: "u".into(),
        });
        assert_eq!(
            w.label(),
            "pod shop/api-0, container containerd 3f2a9c0d1e4b"
        );
    }
}
