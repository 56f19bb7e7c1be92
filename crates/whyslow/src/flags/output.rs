//! What a command prints and writes: `--json`, `--html FILE`, `--timeline`, `--otlp FILE`.
//! Defined once here; each command flattens the group that fits it.

use crate::stdout::Stop;
use clap::Args;
use std::path::{Path, PathBuf};
use whyslow_model::Report;

/// `--json`: every command that prints a report.
#[derive(Args, Clone, Debug, Default)]
pub struct Json {
    /// Print the JSON report instead of text (on failure too, with the error in `errors`)
    #[arg(long)]
    pub json: bool,
}

/// `--json` and `--html FILE`: commands with a page to draw.
#[derive(Args, Clone, Debug, Default)]
pub struct Output {
    #[command(flatten)]
    pub json: Json,
    /// Also write a self-contained HTML report to FILE (inline CSS and SVG, no script)
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,
}

impl Output {
    pub fn json(&self) -> bool {
        self.json.json
    }

    /// Writes `--html`; a failure to write is said, and the run's result stands.
    pub fn write_html(&self, render: impl FnOnce() -> String) {
        write_html(self.html.as_deref(), render)
    }
}

/// `--json`, `--html FILE` and `--timeline`: commands that build a timeline.
#[derive(Args, Clone, Debug, Default)]
pub struct TimelineOutput {
    #[command(flatten)]
    pub output: Output,
    /// Include the whole timeline (every connection, segment and exchange) in --json
    #[arg(long)]
    pub timeline: bool,
    /// Also write what was seen as OpenTelemetry spans to FILE: OTLP protobuf framed as the Collector's file exporter frames it, or OTLP/JSON lines when FILE ends in .json or .jsonl
    #[arg(long, value_name = "FILE")]
    pub otlp: Option<PathBuf>,
    #[command(flatten)]
    pub export: super::otlp::OtlpExport,
}

impl TimelineOutput {
    pub fn json(&self) -> bool {
        self.output.json()
    }

    /// Whether the run keeps a bounded timeline as evidence: only what
    /// `--timeline` or `--html` shows. Without either, memory stays flat
    /// however long the capture.
    pub fn evidence(&self) -> bool {
        self.timeline
            || self.output.html.is_some()
            || self.otlp.is_some()
            || self.export.otlp_endpoint.is_some()
    }

    /// Writes `--html` and `--otlp`, then prints `--json` (its timeline only with
    /// `--timeline`) or the text.
    pub fn emit<T: serde::Serialize>(
        &self,
        doc: &mut T,
        report: fn(&mut T) -> &mut Report,
        html: impl FnOnce(&T) -> String,
        text: impl FnOnce(&T) -> String,
    ) -> Result<(), Stop> {
        write_html(self.output.html.as_deref(), || html(doc));
        let r = report(doc);
        if let Some(t) = &r.timeline {
            self.write_spans(t, &r.findings);
        }
        if !self.json() {
            return crate::stdout::print(&text(doc));
        }
        if !self.timeline {
            report(doc).timeline = None;
        }
        crate::stdout::json(doc)
    }

    /// Writes `--otlp` and sends `--otlp-endpoint`; a failure is said, and
    /// the run's result stands.
    fn write_spans(&self, t: &whyslow_model::Timeline, findings: &[whyslow_model::Finding]) {
        if self.otlp.is_none() && self.export.otlp_endpoint.is_none() {
            return;
        }
        let requests = whyslow_otlp::export(t, findings);
        if let Some(path) = &self.otlp {
            write_html(Some(path), || whyslow_otlp::file_named(path, &requests));
        }
        let sent = match self.export.destination() {
            Ok(Some(to)) => whyslow_investigate::send::post_traces(&to, &requests).map(drop),
            Ok(None) => Ok(()),
            Err(e) => Err(e),
        };
        if let Err(e) = sent {
            eprintln!("whyslow: --otlp-endpoint {e}");
        }
    }
}

/// Writes a page (or spans) to `path` when asked for; a failure to write
/// is said, and the run's result stands.
pub fn write_html<T: AsRef<[u8]>>(path: Option<&Path>, render: impl FnOnce() -> T) {
    if let Some(path) = path {
        if let Err(e) = std::fs::write(path, render()) {
            eprintln!("whyslow: {}: {e}", path.display());
        }
    }
}
