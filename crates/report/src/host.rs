//! `whyslow use` as text: one line per USE resource, worst interval first
//! for the saturated ones, and the findings.

use std::fmt::Write;
use whyslow_model::{HostReport, ResourceUse};

fn line(r: &ResourceUse) -> String {
    let u = r
        .utilization_pct
        .map_or("-".into(), |u| format!("{u:.1} %"));
    let s = r
        .saturation
        .map_or("-".into(), |s| format!("{s} ({})", r.saturation_unit));
    format!(
        "  {:<17} util {:<8} sat {:<58} err {:<4} {}{}",
        r.resource,
        u,
        s,
        r.errors,
        if r.saturated { "SATURATED " } else { "" },
        r.note
    )
}

pub fn text(h: &HostReport) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "USE checklist for this host ({} CPUs, {} intervals sampled):",
        h.cpus,
        h.samples.len()
    );
    let Some(last) = h.samples.last() else {
        out.push_str("  no interval completed\n");
        return out;
    };
    for r in &last.resources {
        // The first interval in which the resource saturated; the last otherwise.
        let shown = h
            .samples
            .iter()
            .find_map(|s| {
                s.resources
                    .iter()
                    .find(|x| x.resource == r.resource && x.saturated)
            })
            .unwrap_or(r);
        let _ = writeln!(out, "{}", line(shown));
    }
    for u in &h.unavailable {
        let _ = writeln!(out, "  not readable: {u}");
    }
    out.push_str("\nfindings:\n");
    out.push_str(&crate::findings::text(&h.findings));
    out
}
