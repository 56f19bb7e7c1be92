//! What a process's cgroup path says about where it runs: the container
//! runtime and id, and on a Kubernetes node the pod's uid. Parsed from the
//! text of `/proc/PID/cgroup`, which any program may write into a cgroup's
//! name: every field is checked for shape and bounded, never trusted.

pub use whyslow_model::Container;

/// Hex digits of a full container id (Docker, containerd, CRI-O, Podman).
const ID_DIGITS: usize = 64;
/// Longest path segment looked at: a systemd unit name is at most 255 bytes.
const MAX_SEGMENT: usize = 255;

/// The cgroup v2 path of a `/proc/PID/cgroup` text (the `0::` line), else
/// the first v1 path (a host with only v1 hierarchies).
pub fn path_of(proc_cgroup: &str) -> Option<&str> {
    let mut first = None;
    for line in proc_cgroup.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(id), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        if id == "0" && controllers.is_empty() {
            return Some(path);
        }
        first.get_or_insert(path);
    }
    first
}

fn is_id(s: &str) -> bool {
    s.len() == ID_DIGITS && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// The runtime a unit prefix names, as each names its scopes under systemd.
fn runtime_of_prefix(prefix: &str) -> &'static str {
    match prefix {
        "docker" => "docker",
        "cri-containerd" | "containerd" | "nerdctl" => "containerd",
        "crio" | "crio-conmon" => "cri-o",
        "libpod" | "libpod-conmon" => "podman",
        _ => "unknown",
    }
}

/// The container a cgroup path names, from its last segment holding an id:
/// `docker-ID.scope`, `cri-containerd-ID.scope`, `crio-ID.scope`,
/// `libpod-ID.scope` (systemd driver), or a bare `ID` under `/docker/`,
/// `/kubepods/…/`, `/machine.slice/` or a containerd namespace (cgroupfs).
pub fn container_of(path: &str) -> Option<Container> {
    let mut parent = "";
    let mut found = None;
    for segment in path
        .split('/')
        .filter(|s| !s.is_empty() && s.len() <= MAX_SEGMENT)
    {
        let unit = segment.strip_suffix(".scope").unwrap_or(segment);
        if is_id(unit) {
            // A bare id (cgroupfs driver) names its runtime by its parent
            // only where that is the runtime's own: under kubepods it may be
            // containerd, CRI-O or cri-dockerd, and is not guessed.
            let runtime = match parent {
                "docker" => "docker",
                "libpod_parent" => "podman",
                "k8s.io" | "default" | "moby" => "containerd",
                _ => "unknown",
            };
            found = Some(Container {
                id: unit.to_ascii_lowercase(),
                runtime: runtime.into(),
            });
        } else if let Some((prefix, id)) = unit.rsplit_once('-').filter(|(_, id)| is_id(id)) {
            if !prefix.ends_with("conmon") {
                found = Some(Container {
                    id: id.to_ascii_lowercase(),
                    runtime: runtime_of_prefix(prefix).into(),
                });
            }
        }
        parent = segment;
    }
    found
}

/// A pod uid as the kubelet writes it in the pods directory (with dashes),
/// from a `kubepods` cgroup path: `pod<uid>` (cgroupfs driver) or
/// `kubepods-<qos>-pod<uid with underscores>.slice` (systemd driver).
pub fn pod_uid_of(path: &str) -> Option<String> {
    if !path.contains("kubepods") {
        return None;
    }
    path.split('/')
        .filter(|s| s.len() <= MAX_SEGMENT)
        .filter_map(|segment| {
            let unit = segment.strip_suffix(".slice").unwrap_or(segment);
            let at = unit.rfind("pod")?;
            uid_shape(&unit[at + 3..].replace('_', "-"))
        })
        .next_back()
}

/// `s` if it has a uid's shape: 8-4-4-4-12 hex digits.
fn uid_shape(s: &str) -> Option<String> {
    let groups: Vec<&str> = s.split('-').collect();
    let lengths = [8, 4, 4, 4, 12];
    let ok = groups.len() == lengths.len()
        && groups
            .iter()
            .zip(lengths)
            .all(|(g, n)| g.len() == n && g.bytes().all(|b| b.is_ascii_hexdigit()));
    ok.then(|| s.to_ascii_lowercase())
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "3f2a9c0d1e4b5a6978877665544332211000ffeeddccbbaa9988776655443322";

    #[test]
    fn the_v2_line_is_taken_over_v1_ones() {
        let text = format!("12:pids:/docker/{ID}\n0::/system.slice/docker-{ID}.scope\n");
        assert_eq!(
            path_of(&text),
            Some(format!("/system.slice/docker-{ID}.scope").as_str())
        );
        assert_eq!(path_of("4:memory:/a\n2:cpu:/b\n"), Some("/a"));
        assert_eq!(path_of("garbage"), None);
    }

    #[test]
    fn each_runtime_is_named_by_its_form() {
        let cases = [
            (format!("/system.slice/docker-{ID}.scope"), "docker"),
            (format!("/docker/{ID}"), "docker"),
            (format!("/system.slice/cri-containerd-{ID}.scope"), "containerd"),
            (format!("/k8s.io/{ID}"), "containerd"),
            (format!("/kubepods/burstable/pod0c1d2e3f-4a5b-6c7d-8e9f-0a1b2c3d4e5f/{ID}"), "unknown"),
            (format!("/machine.slice/crio-{ID}.scope"), "cri-o"),
            (format!("/machine.slice/libpod-{ID}.scope"), "podman"),
            (format!("/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-{ID}.scope/container"), "podman"),
            (
                format!("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod0c1d2e3f_4a5b_6c7d_8e9f_0a1b2c3d4e5f.slice/cri-containerd-{ID}.scope"),
                "containerd",
            ),
        ];
        for (path, runtime) in cases {
            let c = container_of(&path).unwrap_or_else(|| panic!("{path}"));
            assert_eq!((c.id.as_str(), c.runtime.as_str()), (ID, runtime), "{path}");
        }
        assert_eq!(container_of(&format!("/x/libpod-conmon-{ID}.scope")), None);
        assert_eq!(
            container_of("/user.slice/user-1000.slice/session-2.scope"),
            None
        );
        assert_eq!(container_of(&format!("/docker/{}", &ID[..63])), None);
    }

    #[test]
    fn a_pod_uid_is_read_under_either_driver() {
        let uid = "0c1d2e3f-4a5b-6c7d-8e9f-0a1b2c3d4e5f";
        let systemd = format!(
            "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{}.slice/cri-containerd-{ID}.scope",
            uid.replace('-', "_")
        );
        let cgroupfs = format!("/kubepods/burstable/pod{uid}/{ID}");
        assert_eq!(pod_uid_of(&systemd).as_deref(), Some(uid));
        assert_eq!(pod_uid_of(&cgroupfs).as_deref(), Some(uid));
        assert_eq!(pod_uid_of(&format!("/docker/{ID}")), None);
        assert_eq!(pod_uid_of("/kubepods/burstable/podnot-a-uid/x"), None);
    }
}
