//! Reads a result file of any command into named distributions: raw samples
//! from probe-style reports, HDR histograms from `load -o` result files,
//! percentiles alone from `--json` summaries.

use crate::stats::Runs;
use std::collections::BTreeMap;
use whyslow_model::{
    DiagnoseDocument, Finding, LoadResult, Metric, Percentiles, PhaseName, Report, RequestPhases,
    AS_GIVEN, FRESH, LOAD_FORMAT, SPLIT_NO_NODELAY,
};

/// One distribution as a file gave it.
#[derive(Debug, Clone, PartialEq)]
pub enum Distribution {
    /// Every value (samples, or an HDR histogram's recorded values).
    Values(Runs),
    /// Percentiles only: comparable, not testable.
    Summary(Percentiles),
}

impl Distribution {
    pub fn count(&self) -> u64 {
        match self {
            Distribution::Values(r) => r.count(),
            Distribution::Summary(p) => p.count,
        }
    }

    /// The q-quantile; a summary answers with its nearest listed percentile.
    pub fn quantile(&self, q: f64) -> u64 {
        match self {
            Distribution::Values(r) => r.quantile(q),
            Distribution::Summary(p) if q <= 0.5 => p.p50,
            Distribution::Summary(p) if q <= 0.9 => p.p90,
            Distribution::Summary(p) => p.p99,
        }
    }
}

/// A result file, read.
#[derive(Debug, Clone, PartialEq)]
pub struct Run {
    pub file: String,
    pub command: String,
    pub target: Option<String>,
    /// Distributions by metric name, the main one first.
    pub metrics: Vec<(String, Distribution)>,
    pub findings: Vec<Finding>,
}

impl Run {
    /// A result file: a `load -o` result, or `--json` of probe, diagnose or load.
    pub fn read(path: &std::path::Path) -> Result<Run, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        Run::parse(&path.display().to_string(), &text)
    }

    pub fn parse(file: &str, text: &str) -> Result<Run, String> {
        let value: serde_json::Value =
            serde_json::from_str(text).map_err(|e| format!("{file}: not JSON: {e}"))?;
        if value.get("format").and_then(|f| f.as_str()) == Some(LOAD_FORMAT) {
            let r: LoadResult =
                serde_json::from_value(value).map_err(|e| format!("{file}: {e}"))?;
            return from_load(file, &r);
        }
        if value.get("command").and_then(|c| c.as_str()) == Some("diagnose") {
            // A diagnosis document's `capture` is the live capture it ran
            // under, not a capture summary: read it as the document it is.
            let d: DiagnoseDocument =
                serde_json::from_value(value).map_err(|e| format!("{file}: {e}"))?;
            return Ok(Run::from_diagnosis(file, d.report, d.load));
        }
        if value.get("schema_version").is_some() && value.get("command").is_some() {
            let load = value
                .get("load")
                .cloned()
                .map(serde_json::from_value::<LoadResult>)
                .transpose()
                .map_err(|e| format!("{file}: load: {e}"))?;
            let report: Report =
                serde_json::from_value(value).map_err(|e| format!("{file}: {e}"))?;
            return Ok(Run::from_report(file, report, None, load));
        }
        Err(format!(
            "{file}: not a whyslow result (want `load -o`, or `--json` of probe, diagnose or load)"
        ))
    }
}

/// Load metrics in the order a reader wants them.
const LOAD_METRICS: [Metric; 4] = [
    Metric::Corrected,
    Metric::Uncorrected,
    Metric::Wait,
    Metric::Lag,
];

fn from_load(file: &str, r: &LoadResult) -> Result<Run, String> {
    let recorded = r.histograms.as_ref().map(|_| r.recorded()).transpose()?;
    let metrics = LOAD_METRICS
        .iter()
        .filter_map(|m| {
            let d = match &recorded {
                Some(rec) => Distribution::Values(hist_runs(rec.hist(*m))),
                None => Distribution::Summary(*r.percentiles(*m)?),
            };
            (d.count() > 0).then(|| (m.name().to_string(), d))
        })
        .collect();
    Ok(Run {
        file: file.into(),
        command: "load".into(),
        target: Some(r.setup.target.clone()),
        metrics,
        findings: r.findings.clone(),
    })
}

/// A diagnosis's section by the short name a gate uses: `split.total.p50`.
pub fn section_key(label: &str) -> String {
    match label {
        AS_GIVEN => "given".into(),
        FRESH => "fresh".into(),
        SPLIT_NO_NODELAY => "split".into(),
        other => other
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
            .collect(),
    }
}

/// The phases of `requests`, total first; a phase every request spent no
/// time in is left out.
fn phase_metrics(requests: &[RequestPhases], prefix: &str) -> Vec<(String, Distribution)> {
    let mut phases: Vec<PhaseName> = vec![PhaseName::Total];
    phases.extend(PhaseName::ALL.iter().filter(|p| **p != PhaseName::Total));
    phases
        .into_iter()
        .map(|p| {
            let values = requests.iter().map(|r| r.phase_us(p)).collect();
            (p, Distribution::Values(Runs::from_samples(values)))
        })
        .filter(|(p, d)| *p == PhaseName::Total || d.quantile(1.0) > 0)
        .filter(|(_, d)| d.count() > 0)
        .map(|(p, d)| (format!("{prefix}{}", p.as_str()), d))
        .collect()
}

/// A load phase's corrected latency: every value when the result holds its
/// histograms, a summary otherwise.
fn load_latency(l: &LoadResult) -> Option<Distribution> {
    let values = l.histograms.as_ref().and_then(|_| l.recorded().ok());
    let d = match values {
        Some(rec) => Some(Distribution::Values(hist_runs(rec.hist(Metric::Corrected)))),
        None => l
            .percentiles(Metric::Corrected)
            .map(|p| Distribution::Summary(*p)),
    };
    d.filter(|d| d.count() > 0)
}

impl Run {
    /// A diagnosis: each client pattern's section on its own (`given.total`,
    /// `fresh.total`, `split.total`, …) and the load phase (`load.corrected`),
    /// since a fix may move one pattern and leave the others as they were.
    pub fn from_diagnosis(file: &str, report: Report, load: Option<LoadResult>) -> Run {
        let mut metrics: Vec<(String, Distribution)> = report
            .sections
            .iter()
            .flat_map(|s| phase_metrics(&s.requests, &format!("{}.", section_key(&s.label))))
            .collect();
        metrics.extend(
            load.as_ref()
                .and_then(load_latency)
                .map(|d| ("load.corrected".into(), d)),
        );
        Run {
            file: file.into(),
            command: report.command,
            target: report.target,
            metrics,
            findings: report.findings,
        }
    }

    /// Phases of a probe-style report, total first, from the section labelled
    /// `section` (the first one, the request as given, when None); a
    /// diagnose's load phase adds its latency: every value when the result
    /// holds its histograms, a summary otherwise.
    pub fn from_report(
        file: &str,
        report: Report,
        section: Option<&str>,
        load: Option<LoadResult>,
    ) -> Run {
        let requests = match section {
            Some(label) => report.section(label),
            None => report.sections.first().map(|s| s.requests.as_slice()),
        }
        .unwrap_or(&[]);
        let mut metrics = phase_metrics(requests, "");
        metrics.extend(
            load.as_ref()
                .and_then(load_latency)
                .map(|d| ("load corrected".into(), d)),
        );
        let findings = report.findings;
        Run {
            file: file.into(),
            command: report.command,
            target: report.target,
            metrics,
            findings,
        }
    }
}

/// Every value an HDR histogram recorded, as (value, count) runs.
fn hist_runs(h: &hdrhistogram::Histogram<u64>) -> Runs {
    Runs(
        h.iter_recorded()
            .map(|v| (v.value_iterated_to(), v.count_at_value()))
            .collect(),
    )
}

/// Metric names in both runs, in A's order.
pub fn common<'a>(a: &'a Run, b: &'a Run) -> Vec<(&'a str, &'a Distribution, &'a Distribution)> {
    let b_by: BTreeMap<&str, &Distribution> =
        b.metrics.iter().map(|(n, d)| (n.as_str(), d)).collect();
    a.metrics
        .iter()
        .filter_map(|(n, d)| Some((n.as_str(), d, *b_by.get(n.as_str())?)))
        .collect()
}
