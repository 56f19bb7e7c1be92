//! A live capture running in the background while probes run, written to
//! pcapng and read back through the one analysis path, as `analyze` reads
//! a file.

use crate::analysis::{analyze_capture, AnalysisOptions, CaptureAnalysis, CaptureSource};
use std::path::PathBuf;
use whyslow_detect::windowed::Scope;
use whyslow_ebpf::{events_path, Processes, Tracer};
use whyslow_model::CaptureInfo;
use whyslow_wire::live::{CaptureHandle, LiveCapture};
use whyslow_wire::WireError;

pub struct CaptureSession {
    handle: CaptureHandle,
    /// Socket calls traced with eBPF into the events file beside the capture.
    tracer: Option<Tracer>,
    iface: String,
    ports: Vec<u16>,
    path: PathBuf,
    keep: bool,
    /// The workload whose network namespace this process entered, if any.
    target: Option<crate::target::Target>,
}

/// A new temporary capture file only this user can read: a capture of `lo`
/// holds every local service's payloads. Created exclusively (no symlink
/// games in /tmp); the capture then writes into it, keeping the mode.
fn private_file() -> Result<PathBuf, String> {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    use std::os::unix::fs::OpenOptionsExt;
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

/// The backing services the run knew of before reading the capture.
fn known_backing(opts: &AnalysisOptions) -> Vec<u16> {
    let Scope::ServiceAndBacking { known } = &opts.scope else {
        return Vec::new();
    };
    let mut ports = known.clone();
    ports.sort_unstable();
    ports.dedup();
    ports
}

impl CaptureSession {
    /// Starts capturing TCP on `ports`, and DNS: UDP on port 53 and
    /// `udp`; Err is one line saying why not.
    pub fn start(
        iface: &str,
        ports: &[u16],
        udp: &[u16],
        keep: Option<PathBuf>,
    ) -> Result<CaptureSession, String> {
        let path = match &keep {
            Some(p) => p.clone(),
            None => private_file()?,
        };
        let handle = LiveCapture::spawn_with_udp(iface, ports, udp, &path).map_err(|e| {
            if keep.is_none() {
                let _ = std::fs::remove_file(&path);
            }
            why(e)
        })?;
        Ok(CaptureSession {
            handle,
            tracer: None,
            iface: iface.to_string(),
            ports: ports.to_vec(),
            path,
            keep: keep.is_some(),
            target: None,
        })
    }

    /// Names the workload whose network namespace the capture runs in: the
    /// capture's information says where, and who listened on each port.
    pub fn within(&mut self, target: crate::target::Target) {
        self.target = Some(target);
    }

    /// Also traces the socket calls of `pids` (and the processes they
    /// start) with eBPF, into the events file beside the capture, which
    /// `finish` joins. Err: one line saying why not; the capture goes on.
    pub fn trace(&mut self, pids: Vec<u32>) -> Result<(), String> {
        self.tracer = Some(Tracer::beside(&Processes::Pids(pids).into(), &self.path)?);
        Ok(())
    }

    /// Stops the capture and analyzes what it caught. The capture's own
    /// problems (kernel drops) are in the analysis' errors.
    pub fn finish(
        mut self,
        opts: &AnalysisOptions,
    ) -> Result<(CaptureInfo, CaptureAnalysis), String> {
        let servers = self
            .target
            .as_ref()
            .map(|t| t.servers())
            .unwrap_or_default();
        let traced = self.tracer.take().map(Tracer::stop);
        let stats = self.handle.stop().map_err(why)?;
        let events = events_path(&self.path);
        let opts = &AnalysisOptions {
            events: matches!(traced, Some(Ok(_))).then(|| events.clone()),
            ..opts.clone()
        };
        let analysis = analyze_capture(CaptureSource::File(&self.path), opts);
        if !self.keep {
            let _ = std::fs::remove_file(&self.path);
            let _ = std::fs::remove_file(&events);
        }
        let mut analysis = analysis?;
        if let Some(t) = analysis.summary.threads.as_mut().filter(|_| !self.keep) {
            // The file is gone: name what it was, and how to keep it.
            t.file = "this run's capture, not kept: -w FILE keeps it".into();
        }
        match traced {
            Some(Err(why)) => analysis.errors.insert(0, why),
            Some(Ok(t)) => analysis.errors.extend(t.tls_failed),
            None => {}
        }
        if stats.kernel_drops > 0 {
            analysis.errors.insert(
                0,
                format!(
                    "the kernel dropped {} packets in {} of {} seconds (at most {} in one): \
                     findings may miss events",
                    stats.kernel_drops,
                    stats.seconds_with_drops,
                    stats.seconds,
                    stats.max_drops_per_second
                ),
            );
        }
        let info = CaptureInfo {
            iface: self.iface,
            ports: self.ports,
            backing_ports: known_backing(opts),
            packets: stats.packets,
            kernel_drops: stats.kernel_drops,
            seconds: stats.seconds,
            seconds_with_drops: stats.seconds_with_drops,
            max_drops_per_second: stats.max_drops_per_second,
            file: self.keep.then(|| self.path.display().to_string()),
            workload: self.target.map(|t| t.workload),
            servers,
        };
        Ok((info, analysis))
    }
}
