//! The pcapng files of the last windows, kept on disk so a person can
//! `analyze` the moment a cause appeared: bounded in count (the windows
//! within `--keep`) and in bytes (`--keep-size`), oldest removed first. A
//! window's eBPF events file (`--ebpf`) goes with it, and counts with it.

use std::collections::VecDeque;
use std::path::PathBuf;
use whyslow_model::RingState;

#[derive(Debug)]
pub struct Ring {
    files: VecDeque<(PathBuf, u64)>,
    max_files: u64,
    max_bytes: u64,
}

impl Ring {
    pub fn new(max_files: u64, max_bytes: u64) -> Ring {
        Ring {
            files: VecDeque::new(),
            max_files: max_files.max(1),
            max_bytes,
        }
    }

    /// Adds a complete file, then removes the oldest until both bounds
    /// hold (the newest is kept even when it alone is over the bytes).
    pub fn add(&mut self, path: PathBuf) {
        let size = |p: &std::path::Path| std::fs::metadata(p).map_or(0, |m| m.len());
        let bytes = size(&path) + size(&whyslow_ebpf::events_path(&path));
        self.files.push_back((path, bytes));
        while self.files.len() > 1
            && (self.files.len() as u64 > self.max_files || self.bytes() > self.max_bytes)
        {
            if let Some((old, _)) = self.files.pop_front() {
                let _ = std::fs::remove_file(whyslow_ebpf::events_path(&old));
                let _ = std::fs::remove_file(old);
            }
        }
    }

    fn bytes(&self) -> u64 {
        self.files.iter().map(|(_, b)| b).sum()
    }

    pub fn state(&self) -> RingState {
        RingState {
            files: self.files.len() as u64,
            bytes: self.bytes(),
            max_files: self.max_files,
            max_bytes: self.max_bytes,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_oldest_go_first_past_either_bound() {
        let dir = std::env::temp_dir().join(format!("whyslow-ring-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut ring = Ring::new(3, 250);
        let paths: Vec<PathBuf> = (0..5).map(|i| dir.join(format!("{i}.pcapng"))).collect();
        for p in &paths[..4] {
            std::fs::write(p, [0u8; 50]).unwrap();
            ring.add(p.clone());
        }
        assert_eq!(ring.state().files, 3);
        assert!(!paths[0].exists() && paths[1].exists());
        std::fs::write(&paths[4], [0u8; 200]).unwrap();
        ring.add(paths[4].clone());
        // 50 + 50 + 200 > 250: two more go.
        assert_eq!((ring.state().files, ring.state().bytes), (2, 250));
        assert!(!paths[2].exists() && paths[3].exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
