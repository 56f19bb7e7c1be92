//! A cgroup (v2) to trace, named by its directory: a container's processes.
//! The kernel side compares the current task's ancestor at the cgroup's
//! level with the cgroup's id, which is its directory's inode number, so
//! the processes of the cgroups below it are traced too.

use std::path::{Path, PathBuf};

/// Levels below a traced cgroup whose processes are looked for (libssl
/// files): systemd and container runtimes nest a few.
const MAX_DEPTH: usize = 16;
/// Processes looked for in one cgroup tree.
const MAX_PROCESSES: usize = 10_000;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cgroup {
    /// The directory's inode: `bpf_get_current_cgroup_id`'s value for it.
    pub id: u64,
    /// Its depth below the hierarchy's root (the root is 0).
    pub level: u32,
    pub dir: PathBuf,
}

use whyslow_container::cgroup2_mount_in;

impl Cgroup {
    /// `name`: a cgroup as `/proc/PID/cgroup` shows it (`/system.slice/
    /// docker-….scope`) or its directory under the cgroup2 mount.
    pub fn named(name: &str) -> Result<Cgroup, String> {
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo")
            .map_err(|e| format!("/proc/self/mountinfo: {e}"))?;
        let mount = cgroup2_mount_in(&mountinfo)
            .ok_or("no cgroup v2 hierarchy is mounted: --cgroup needs one")?;
        Cgroup::under(&mount, name)
    }

    fn under(mount: &Path, name: &str) -> Result<Cgroup, String> {
        let given = Path::new(name);
        let relative = given
            .strip_prefix(mount)
            .unwrap_or_else(|_| given.strip_prefix("/").unwrap_or(given));
        if relative
            .components()
            .any(|c| !matches!(c, std::path::Component::Normal(_)))
        {
            return Err(format!(
                "cgroup {name}: a path below {} only",
                mount.display()
            ));
        }
        let dir = mount.join(relative);
        use std::os::unix::fs::MetadataExt;
        let meta = std::fs::metadata(&dir).map_err(|e| format!("cgroup {}: {e}", dir.display()))?;
        if !meta.is_dir() || !dir.join("cgroup.procs").exists() {
            return Err(format!("{} is not a cgroup", dir.display()));
        }
        Ok(Cgroup {
            id: meta.ino(),
            level: relative.components().count() as u32,
            dir,
        })
    }

    /// The processes in it and in the cgroups below it, now.
    pub fn processes(&self) -> Vec<u32> {
        let mut out = Vec::new();
        let mut dirs = vec![(self.dir.clone(), 0)];
        while let Some((dir, depth)) = dirs.pop() {
            if let Ok(text) = std::fs::read_to_string(dir.join("cgroup.procs")) {
                out.extend(text.lines().filter_map(|l| l.trim().parse::<u32>().ok()));
            }
            if out.len() >= MAX_PROCESSES {
                out.truncate(MAX_PROCESSES);
                break;
            }
            if depth >= MAX_DEPTH {
                continue;
            }
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            dirs.extend(
                entries
                    .flatten()
                    .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                    .map(|e| (e.path(), depth + 1)),
            );
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cgroup2_mount_is_read_from_mountinfo() {
        let info = "\
25 30 0:23 / /sys/fs/cgroup rw,nosuid - tmpfs tmpfs ro,mode=755
26 25 0:24 / /sys/fs/cgroup/unified rw,nosuid,nodev shared:4 - cgroup2 cgroup2 rw
27 25 0:25 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu";
        assert_eq!(
            cgroup2_mount_in(info),
            Some(PathBuf::from("/sys/fs/cgroup/unified"))
        );
        assert_eq!(cgroup2_mount_in("1 2 0:1 / / rw - ext4 /dev/sda1 rw"), None);
    }

    #[test]
    fn a_cgroup_is_its_directory_level_and_inode() {
        let root = std::env::temp_dir().join(format!("whyslow-cgroup-{}", std::process::id()));
        let dir = root.join("system.slice/app.scope");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("cgroup.procs"), "12\n34\n").unwrap();
        std::fs::create_dir_all(dir.join("worker")).unwrap();
        std::fs::write(dir.join("worker/cgroup.procs"), "56\n").unwrap();
        for name in ["/system.slice/app.scope", dir.to_str().unwrap()] {
            let c = Cgroup::under(&root, name).unwrap();
            assert_eq!((c.level, &c.dir), (2, &dir));
            let mut procs = c.processes();
            procs.sort();
            assert_eq!(procs, vec![12, 34, 56]);
        }
        assert!(Cgroup::under(&root, "/system.slice/../..").is_err());
        assert!(Cgroup::under(&root, "/nope").is_err());
        // A directory that is not a cgroup.
        assert!(Cgroup::under(&root, "/system.slice").is_err());
        std::fs::remove_dir_all(&root).unwrap();
    }
}
