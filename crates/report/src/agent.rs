//! `agent`'s text: a few lines per window, per workload its requests and
//! the causes named. `--json` prints each window's record as one line.

use std::fmt::Write;
use whyslow_model::{fmt_ms, AgentWindow, WorkloadWindow};

/// Causes shown per workload; the record has them all.
const FINDINGS_SHOWN: usize = 3;

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}

fn workload_text(out: &mut String, w: &WorkloadWindow) {
    let _ = writeln!(
        out,
        "  {}: {} packets, {} dropped by the kernel",
        w.label, w.packets, w.kernel_drops
    );
    for r in &w.requests {
        let _ = writeln!(
            out,
            "    {} ×{}: p50 {}, p99 {}",
            r.kind,
            r.count,
            fmt_ms(r.p50_us),
            fmt_ms(r.p99_us)
        );
    }
    let causes: Vec<_> = w.findings.iter().filter(|f| !f.secondary).collect();
    if causes.is_empty() {
        out.push_str("    no cause named\n");
    }
    for f in causes.iter().take(FINDINGS_SHOWN) {
        let _ = writeln!(
            out,
            "    {} ({} lost): {}",
            f.kind,
            fmt_ms(f.time_lost_us),
            f.summary
        );
    }
    for e in &w.errors {
        let _ = writeln!(out, "    ! {e}");
    }
}

/// One window, in text.
pub fn window_text(w: &AgentWindow) -> String {
    let mut out = String::new();
    let cut = if w.partial { ", cut short" } else { "" };
    let _ = writeln!(
        out,
        "window {} ({:.1} s{cut}): agent {:.1} % of a CPU, {} allocated (peak {} with the capture rings); \
         ring {} of {} files, {}",
        w.window,
        w.seconds,
        w.agent.cpu_share * 100.0,
        mib(w.agent.anon_bytes),
        mib(w.agent.peak_rss_bytes),
        w.ring.files,
        w.ring.max_files,
        mib(w.ring.bytes)
    );
    for wl in &w.workloads {
        workload_text(&mut out, wl);
    }
    if let Some(e) = &w.export {
        let _ = writeln!(
            out,
            "  OTLP: sent {} spans, {} logs, {} points; given up {} spans, {} logs, {} points; {} requests queued",
            e.spans_sent,
            e.logs_sent,
            e.points_sent,
            e.spans_dropped,
            e.logs_dropped,
            e.points_dropped,
            e.queued
        );
    }
    out
}
