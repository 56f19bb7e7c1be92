//! `host_saturated`: a resource of the host (CPU, memory, disk, accept
//! queues, ...) was saturated while requests were measured, so part of their
//! latency is the host's own queueing, not the service's. It names the
//! resource; the time it cost cannot be told apart from the requests' own.

use whyslow_model::{Evidence, Facts, Finding, FindingKind, HostSample, ResourceUse, Severity};

fn saturated_intervals<'a>(
    samples: &'a [HostSample],
    resource: &str,
) -> Vec<(&'a HostSample, &'a ResourceUse)> {
    samples
        .iter()
        .filter_map(|s| {
            s.resources
                .iter()
                .find(|r| r.resource == resource && r.saturated)
                .map(|r| (s, r))
        })
        .collect()
}

/// The numbers `describe` shows, by name.
fn facts(r: &ResourceUse) -> Facts {
    let mut f = r.counts.clone();
    if let Some(u) = r.utilization_pct {
        f.set("utilized_percent", u);
    }
    if let Some(s) = r.saturation {
        let name = if r.saturation_unit.starts_with("percent") {
            "saturation_percent"
        } else {
            "saturation"
        };
        f.set(name, s);
    }
    if r.errors > 0 {
        f.set("errors", r.errors as f64);
    }
    f
}

fn describe(r: &ResourceUse) -> String {
    let mut parts = Vec::new();
    if let Some(u) = r.utilization_pct {
        parts.push(format!("{u:.0} % utilized"));
    }
    if let Some(s) = r.saturation {
        parts.push(format!("{s} {}", r.saturation_unit));
    }
    if r.errors > 0 {
        parts.push(format!("{} errors", r.errors));
    }
    parts.push(r.note.clone());
    parts.join(", ")
}

/// One finding per resource saturated in any sample.
pub fn detect(samples: &[HostSample]) -> Vec<Finding> {
    let mut names: Vec<&str> = samples
        .iter()
        .flat_map(|s| s.resources.iter())
        .filter(|r| r.saturated)
        .map(|r| r.resource.as_str())
        .collect();
    names.sort_unstable();
    names.dedup();
    names
        .into_iter()
        .map(|name| {
            let hits = saturated_intervals(samples, name);
            let r = hits[0].1;
            Finding {
                facts: facts(r)
                    .with("intervals_saturated", hits.len() as f64)
                    .with("intervals_sampled", samples.len() as f64),
                time_lost_us: 0,
                time_lost_per_occurrence_us: 0,
                occurrences: hits.len() as u32,
                evidence: hits
                    .iter()
                    .take(5)
                    .map(|(s, r)| Evidence::Measurement {
                        facts: facts(r).with("at_ms", s.at_ms as f64),
                        note: format!(
                            "{name} at {:.1} s: {}",
                            s.at_ms as f64 / 1000.0,
                            describe(r)
                        ),
                    })
                    .collect(),
                ..Finding::new(
                    FindingKind::HostSaturated,
                    Severity::Warning,
                    format!(
                        "this host's {name} was saturated in {} of {} intervals sampled ({}): \
                     latency measured then includes the host's own queueing",
                        hits.len(),
                        samples.len(),
                        describe(r)
                    ),
                    fix(name),
                )
            }
        })
        .collect()
}

fn fix(resource: &str) -> &'static str {
    match resource {
        "cpu" => "find what else is busy (top, pidstat 1); run the load generator on another machine than the service",
        "memory" => "find what holds memory (smem, /proc/meminfo); give the service more memory or fewer workers",
        "listen_queue" => "raise the service's listen backlog and net.core.somaxconn, or accept faster (more acceptor threads)",
        "softnet" => "raise net.core.netdev_budget and netdev_max_backlog, or spread receive work over CPUs (RPS/RSS)",
        "disk" => "find the I/O (iotop, pidstat -d 1); move logs or temporary files off the service's disk",
        "file_descriptors" => "raise fs.file-max, or find the process leaking handles (lsof)",
        "tcp_memory" => "raise net.ipv4.tcp_mem, or find sockets with full buffers (ss -tm)",
        _ => "find the cause of the errors (ip -s link, ethtool -S)",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(at_ms: u64, cpu_saturated: bool) -> HostSample {
        HostSample {
            at_ms,
            interval_ms: 1000,
            resources: vec![ResourceUse {
                resource: "cpu".into(),
                utilization_pct: Some(if cpu_saturated { 100.0 } else { 20.0 }),
                saturation: Some(if cpu_saturated { 60.0 } else { 0.0 }),
                saturation_unit: "percent".into(),
                errors: 0,
                saturated: cpu_saturated,
                note: "n".into(),
                counts: Facts::default(),
            }],
        }
    }

    #[test]
    fn a_saturated_cpu_is_named_with_its_share_of_the_run() {
        let f = detect(&[sample(1000, false), sample(2000, true), sample(3000, true)]);
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].kind, FindingKind::HostSaturated);
        assert_eq!(f[0].occurrences, 2);
        assert!(f[0].summary.contains("cpu") && f[0].summary.contains("2 of 3"));
        assert!(!f[0].background);
        // Every number the text shows is a fact too.
        let facts = &f[0].facts.0;
        assert_eq!(facts.get("utilized_percent"), Some(&100.0));
        assert_eq!(facts.get("saturation_percent"), Some(&60.0));
        assert_eq!(facts.get("intervals_sampled"), Some(&3.0));
    }

    #[test]
    fn an_idle_host_has_no_finding() {
        assert!(detect(&[sample(1000, false)]).is_empty());
        assert!(detect(&[]).is_empty());
    }
}
