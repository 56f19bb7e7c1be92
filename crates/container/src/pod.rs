//! A Kubernetes pod's namespace and name from its uid, read from the
//! node's files as the kubelet leaves them, without API access: the pod's
//! log directory (`/var/log/pods/NAMESPACE_NAME_UID`), else the kubelet's
//! pod directory (`/var/lib/kubelet/pods/UID`: the hosts file it writes
//! names the pod, the service account token's volume its namespace).

use std::path::Path;
pub use whyslow_model::Pod;

/// Entries of `/var/log/pods` looked at: a node runs at most a few hundred pods.
const MAX_POD_DIRS: usize = 10_000;
/// Bytes read of a kubelet file (the hosts file, a namespace).
const MAX_FILE: u64 = 64 * 1024;

/// The pod with `uid`, from the node whose root is `root` ("/", or where a
/// DaemonSet mounts the host's). None when neither directory names it.
pub fn pod_of(root: &Path, uid: &str) -> Option<Pod> {
    from_log_dir(root, uid).or_else(|| from_kubelet_dir(root, uid))
}

/// `NAMESPACE_NAME_UID`: neither a namespace nor a pod name holds `_`.
pub fn parse_log_dir(name: &str, uid: &str) -> Option<Pod> {
    let rest = name.strip_suffix(uid)?.strip_suffix('_')?;
    let (namespace, pod) = rest.split_once('_')?;
    (!namespace.is_empty() && !pod.is_empty() && !pod.contains('_')).then(|| Pod {
        namespace: namespace.into(),
        name: pod.into(),
        uid: uid.into(),
    })
}

fn from_log_dir(root: &Path, uid: &str) -> Option<Pod> {
    let dir = std::fs::read_dir(root.join("var/log/pods")).ok()?;
    dir.take(MAX_POD_DIRS)
        .flatten()
        .find_map(|e| parse_log_dir(e.file_name().to_str()?, uid))
}

fn read_small(path: &Path) -> Option<String> {
    use std::io::Read;
    let mut text = String::new();
    std::fs::File::open(path)
        .ok()?
        .take(MAX_FILE)
        .read_to_string(&mut text)
        .ok()?;
    Some(text)
}

/// The pod's host name in the kubelet's hosts file: the last line's name
/// (the kubelet writes the pod's own address and name last).
pub fn name_in_hosts_file(text: &str) -> Option<&str> {
    text.lines()
        .map(str::trim)
        .rfind(|l| !l.is_empty() && !l.starts_with('#'))?
        .split_whitespace()
        .nth(1)
}

fn from_kubelet_dir(root: &Path, uid: &str) -> Option<Pod> {
    let pod_dir = root.join("var/lib/kubelet/pods").join(uid);
    let hosts = read_small(&pod_dir.join("etc-hosts"))?;
    let name = name_in_hosts_file(&hosts)?.to_string();
    let projected = pod_dir.join("volumes/kubernetes.io~projected");
    let namespace = std::fs::read_dir(projected)
        .ok()?
        .take(MAX_POD_DIRS)
        .flatten()
        .find_map(|e| read_small(&e.path().join("namespace")))
        .map(|n| n.trim().to_string())
        .filter(|n| !n.is_empty())?;
    Some(Pod {
        namespace,
        name,
        uid: uid.into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const UID: &str = "0c1d2e3f-4a5b-6c7d-8e9f-0a1b2c3d4e5f";

    #[test]
    fn a_log_dir_names_namespace_and_pod() {
        let pod = parse_log_dir(&format!("shop_checkout-7d9f8-xk2p_{UID}"), UID).unwrap();
        assert_eq!(
            (pod.namespace.as_str(), pod.name.as_str()),
            ("shop", "checkout-7d9f8-xk2p")
        );
        assert_eq!(parse_log_dir(&format!("shop_{UID}"), UID), None);
        assert_eq!(parse_log_dir("shop_a_other-uid", UID), None);
    }

    #[test]
    fn the_hosts_file_names_the_pod_last() {
        let text = "# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost\n\n10.244.1.7\tcheckout-7d9f8-xk2p\n";
        assert_eq!(name_in_hosts_file(text), Some("checkout-7d9f8-xk2p"));
        assert_eq!(name_in_hosts_file("# only a comment\n"), None);
    }

    #[test]
    fn a_node_root_is_read_either_way() {
        let root = std::env::temp_dir().join(format!("whyslow-pod-{}", std::process::id()));
        let kubelet = root.join("var/lib/kubelet/pods").join(UID);
        let token = kubelet.join("volumes/kubernetes.io~projected/kube-api-access-x8k2");
        std::fs::create_dir_all(&token).unwrap();
        std::fs::write(
            kubelet.join("etc-hosts"),
            "127.0.0.1 localhost\n10.0.0.9 api-0\n",
        )
        .unwrap();
        std::fs::write(token.join("namespace"), "shop\n").unwrap();
        let want = Pod {
            namespace: "shop".into(),
            name: "api-0".into(),
            uid: UID.into(),
        };
        assert_eq!(pod_of(&root, UID), Some(want.clone()));
        let logs = root.join("var/log/pods").join(format!("prod_api-1_{UID}"));
        std::fs::create_dir_all(&logs).unwrap();
        assert_eq!(pod_of(&root, UID).map(|p| p.name), Some("api-1".into()));
        std::fs::remove_dir_all(&root).unwrap();
        assert_eq!(pod_of(&root, UID), None);
    }
}
