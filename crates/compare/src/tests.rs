use super::*;
use whyslow_model::Percentiles;

fn run(command: &str, values: Vec<u64>) -> Run {
    Run {
        file: "x.json".into(),
        command: command.into(),
        target: Some("http://127.0.0.1:1/".into()),
        metrics: vec![(
            "total".into(),
            Distribution::Values(Runs::from_samples(values)),
        )],
        findings: Vec::new(),
    }
}

/// A noisy latency sample around `base` µs with a spread of 20 %.
fn noisy(base: u64, n: u64, seed: u64) -> Vec<u64> {
    (0..n)
        .map(|i| base + (i * 7919 + seed * 104_729) % (base / 5))
        .collect()
}

#[test]
fn same_distribution_is_no_significant_change_and_passes_gates() {
    let gates = gate::parse("p99>+10%,p50>+10%").unwrap();
    let c = compare(
        &run("load", noisy(2000, 500, 1)),
        &run("load", noisy(2000, 500, 2)),
        &gates,
    )
    .unwrap();
    assert!(c.unchanged(), "{:#?}", c.stats);
    assert!(c.checks.iter().all(|c| c.passed));
}

#[test]
fn a_40ms_stall_is_slower_and_crosses_the_gate() {
    let gates = gate::parse("p99>+10%").unwrap();
    let c = compare(
        &run("probe", noisy(1000, 5, 1)),
        &run("probe", noisy(41_000, 5, 1)),
        &gates,
    )
    .unwrap();
    let p50 = c.stats.iter().find(|s| s.stat == "p50").unwrap();
    assert_eq!(p50.change, Change::Slower);
    assert!(p50.change_pct > 3000.0);
    assert!(!c.checks[0].passed);
    // And back: faster, and the gate holds.
    let back = compare(
        &run("probe", noisy(41_000, 5, 1)),
        &run("probe", noisy(1000, 5, 1)),
        &gates,
    )
    .unwrap();
    assert!(back.stats.iter().all(|s| s.change == Change::Faster));
    assert!(back.checks[0].passed);
}

#[test]
fn tiny_but_consistent_shifts_are_not_called_changes() {
    // 20 µs on 2 ms is real in 5 000 samples but below what matters.
    let c = compare(
        &run("load", noisy(2000, 5000, 1)),
        &run("load", noisy(2020, 5000, 1)),
        &[],
    )
    .unwrap();
    assert!(c.unchanged(), "{:#?}", c.shifts);
}

#[test]
fn different_commands_do_not_compare() {
    assert!(compare(&run("load", vec![1]), &run("probe", vec![1]), &[]).is_err());
}

#[test]
fn summaries_are_compared_not_tested() {
    let p = |v| Percentiles {
        count: 100,
        min: v,
        mean: v as f64,
        p50: v,
        p90: v,
        p99: v,
        p999: v,
        max: v,
    };
    let mk = |v| Run {
        metrics: vec![("corrected".into(), Distribution::Summary(p(v)))],
        ..run("load", vec![])
    };
    let c = compare(&mk(1000), &mk(3000), &gate::parse("p99>+10%").unwrap()).unwrap();
    assert!(c.stats.iter().all(|s| s.change == Change::NotTested));
    assert!(c.shifts.is_empty());
    assert!(!c.notes.is_empty());
    assert!(
        !c.checks[0].passed,
        "point estimates decide without samples"
    );
}

#[test]
fn findings_that_came_and_went() {
    use whyslow_model::{Finding, Severity};
    let f = |kind, lost| Finding {
        time_lost_us: lost,
        time_lost_per_occurrence_us: lost,
        occurrences: 1,
        evidence: vec![],
        ..Finding::new(kind, Severity::Warning, String::new(), "")
    };
    let mut a = run("diagnose", vec![1, 2, 3]);
    a.findings = vec![f(FindingKind::NagleDelayedAck, 40_000)];
    let mut b = run("diagnose", vec![1, 2, 3]);
    b.findings = vec![f(FindingKind::ServerTime, 500)];
    let c = compare(&a, &b, &[]).unwrap();
    assert_eq!(c.findings.len(), 2);
    let nagle = c
        .findings
        .iter()
        .find(|x| x.kind == FindingKind::NagleDelayedAck)
        .unwrap();
    assert_eq!(
        (nagle.a_time_lost_us, nagle.b_time_lost_us),
        (Some(40_000), None)
    );
}

#[test]
fn hostile_files_are_clear_errors() {
    for text in [
        "",
        "{",
        "[]",
        "{\"format\":\"whyslow-load-result\"}",
        "{\"x\":1}",
        "null",
    ] {
        assert!(Run::parse("f", text).is_err(), "{text}");
    }
}

#[test]
fn the_fuzz_seed_is_a_readable_probe_report() {
    let r = Run::parse(
        "seed",
        include_str!("../../../fuzz/seeds/compare_result/probe.json"),
    )
    .unwrap();
    assert_eq!(r.command, "probe");
    assert_eq!(r.metrics[0].0, "total");
    assert_eq!(r.metrics[0].1.count(), 1);
}

fn diagnosis(sections: &[(&str, &[u64])]) -> String {
    use whyslow_model::{
        CaptureInfo, DiagnoseDocument, HostReport, Report, ReportSection, RequestPhases,
        SCHEMA_VERSION,
    };
    let mut report = Report::new("diagnose", Some("http://127.0.0.1:1/".into()));
    for (label, totals) in sections {
        report.sections.push(ReportSection {
            label: (*label).into(),
            requests: totals
                .iter()
                .enumerate()
                .map(|(i, &t)| RequestPhases {
                    index: i as u32,
                    total_us: t,
                    wait_us: t * 9 / 10,
                    ..Default::default()
                })
                .collect(),
            dns: None,
        });
    }
    report.capture = Some(whyslow_model::CaptureSummary::default());
    let doc = DiagnoseDocument {
        report,
        method: "GET".into(),
        client: "one write, TCP_NODELAY on".into(),
        load: None,
        client_view: None,
        live_capture: Some(CaptureInfo {
            iface: "lo".into(),
            ports: vec![1],
            backing_ports: Vec::new(),
            packets: 40,
            kernel_drops: 0,
            seconds: 1,
            seconds_with_drops: 0,
            max_drops_per_second: 0,
            file: None,
            workload: None,
            servers: Vec::new(),
        }),
        host: HostReport {
            schema_version: SCHEMA_VERSION,
            command: "diagnose".into(),
            cpus: 2,
            samples: Vec::new(),
            findings: Vec::new(),
            unavailable: Vec::new(),
        },
    };
    serde_json::to_string(&doc).unwrap()
}

/// `diagnose --json` carries the live capture it ran under as `capture`,
/// which is not an analyzed capture's summary: it reads as a diagnosis.
#[test]
fn diagnose_documents_read_with_their_capture() {
    let text = diagnosis(&[(whyslow_model::AS_GIVEN, &[1000, 1001, 1002, 1003, 1004])]);
    let run = Run::parse("d.json", &text).unwrap();
    assert_eq!(run.command, "diagnose");
    assert_eq!(run.metrics[0].0, "given.total");
    assert_eq!(run.metrics[0].1.count(), 5);
    assert!(compare(&run, &run, &[]).is_ok());
}

/// Case 000: the fix moves the split-write probe (44 ms → 0.1 ms) and
/// leaves the request as given where it was. Each section is compared on
/// its own, and a gate holds in every one unless it names one.
#[test]
fn diagnose_sections_are_compared_each_on_its_own() {
    use whyslow_model::{AS_GIVEN, FRESH, SPLIT_NO_NODELAY};
    let given = noisy(150, 6, 1);
    let broken = (0..6).map(|i| 43_800 + i * 37).collect::<Vec<u64>>();
    let fixed = noisy(120, 6, 3);
    let fresh = noisy(400, 3, 2);
    let a = Run::parse(
        "broken.json",
        &diagnosis(&[
            (AS_GIVEN, &given),
            (FRESH, &fresh),
            (SPLIT_NO_NODELAY, &broken),
        ]),
    )
    .unwrap();
    let b = Run::parse(
        "fixed.json",
        &diagnosis(&[
            (AS_GIVEN, &given),
            (FRESH, &fresh),
            (SPLIT_NO_NODELAY, &fixed),
        ]),
    )
    .unwrap();
    let c = compare(&a, &b, &[]).unwrap();
    let split = c.shifts.iter().find(|t| t.metric == "split.total").unwrap();
    assert_eq!(split.change, Change::Faster, "{split:?}");
    assert!(split.p_value < 0.05, "{split:?}");
    let as_given = c.shifts.iter().find(|t| t.metric == "given.total").unwrap();
    assert_eq!(as_given.change, Change::NoSignificantChange);
    assert!(!c.unchanged());
    // Broken after fixed: the split section regressed, and both the named
    // gate and one naming no section fail, saying where.
    for rule in ["split.total.p50>+10%", "p50>+10%"] {
        let gates = gate::parse(rule).unwrap();
        let back = compare(&b, &a, &gates).unwrap();
        assert!(!back.checks[0].passed, "{rule}: {:?}", back.checks);
        let worst = back.checks[0].worst.as_deref().unwrap();
        assert!(worst.starts_with("split.total p50"), "{rule}: {worst}");
        let forward = compare(&a, &b, &gates).unwrap();
        assert!(forward.checks[0].passed, "{rule}: {:?}", forward.checks);
    }
    // A gate on the section that did not move passes both ways.
    let gates = gate::parse("given.total.p50>+10%").unwrap();
    assert!(compare(&b, &a, &gates).unwrap().checks[0].passed);
}
