//! A live capture running in the background while probes run, written to
//! pcapng and read back through the same path as `whyslow analyze`.

use std::path::PathBuf;
use whyslow_model::{CaptureInfo, Timeline};
use whyslow_wire::live::{CaptureHandle, LiveCapture};
use whyslow_wire::{timeline_from_file, Limits, WireError};

/// What the capture was, and the problems it met (they go to the report's errors).
#[derive(Debug, Clone)]
pub struct CaptureSummary {
    pub info: CaptureInfo,
    pub errors: Vec<String>,
}

pub struct CaptureSession {
    handle: CaptureHandle,
    iface: String,
    ports: Vec<u16>,
    path: PathBuf,
    keep: bool,
}

/// A new temporary capture file only this user can read: a capture of `lo`
/// holds every local service's payloads. Created exclusively (no symlink
/// games in /tmp); the capture then writes into it, keeping the mode.
fn private_file() -> Result<PathBuf, String> {
    use std::os::unix::fs::OpenOptionsExt;
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let path = std::env::temp_dir().join(format!("whyslow-{}-{nanos}.pcapng", std::process::id()));
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
        .map_err(|e| format!("temporary capture file {}: {e}", path.display()))?;
    Ok(path)
}

fn why(e: WireError) -> String {
    match e {
        WireError::PermissionDenied => {
            "needs CAP_NET_RAW (run as root or `setcap cap_net_raw+ep $(which whyslow)`)"
                .to_string()
        }
        other => other.to_string(),
    }
}

impl CaptureSession {
    /// Starts capturing TCP on `ports`; Err is one line saying why not.
    pub fn start(
        iface: &str,
        ports: &[u16],
        keep: Option<PathBuf>,
    ) -> Result<CaptureSession, String> {
        let path = match &keep {
            Some(p) => p.clone(),
            None => private_file()?,
        };
        let handle = LiveCapture::spawn(iface, ports, &path).map_err(|e| {
            if keep.is_none() {
                let _ = std::fs::remove_file(&path);
            }
            why(e)
        })?;
        Ok(CaptureSession {
            handle,
            iface: iface.to_string(),
            ports: ports.to_vec(),
            path,
            keep: keep.is_some(),
        })
    }

    /// Stops the capture and rebuilds the timeline from what it caught.
    pub fn finish(self, limits: &Limits) -> Result<(CaptureSummary, Timeline), String> {
        let stats = self.handle.stop().map_err(why)?;
        let outcome = timeline_from_file(&self.path, limits).map_err(|e| e.to_string());
        if !self.keep {
            let _ = std::fs::remove_file(&self.path);
        }
        let outcome = outcome?;
        let mut errors: Vec<String> = outcome.error.into_iter().collect();
        if stats.kernel_drops > 0 {
            errors.push(format!(
                "the kernel dropped {} packets: findings may miss events",
                stats.kernel_drops
            ));
        }
        let summary = CaptureSummary {
            info: CaptureInfo {
                iface: self.iface,
                ports: self.ports,
                backing_ports: Vec::new(),
                packets: stats.packets,
                kernel_drops: stats.kernel_drops,
                file: self.keep.then(|| self.path.display().to_string()),
            },
            errors,
        };
        Ok((summary, outcome.timeline))
    }
}
