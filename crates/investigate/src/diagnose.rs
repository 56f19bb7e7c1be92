//! `diagnose`: probe a URL while capturing its traffic (and its backing
//! services' traffic on this host), then run every detector on what was seen.

use crate::analysis::AnalysisOptions;
use crate::capture::CaptureSession;
use crate::interrupted;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use whyslow_client::{
    probe_until, redact_url, KeyLogWriter, ProbeOptions, ProbeRun, RequestSpec, Target, TlsOptions,
    WritePattern, SSLKEYLOGFILE,
};
use whyslow_detect::windowed::Scope;
use whyslow_host::sockets::Watcher;
use whyslow_load::{LoadPlan, LoadResult, LoadResultExt, Model, Schedule, Stop};
use whyslow_model::{
    CaptureInfo, DiagnoseDocument, Finding, Report, ReportSection, Skipped, AS_GIVEN, FRESH,
    SPLIT_NO_NODELAY,
};
use whyslow_proto::tls::KeyLog;
use whyslow_wire::FlowOptions;

/// Fresh-connection probes: enough to see handshakes and TLS resumption.
/// With the other patterns' connections they stay under no_keepalive's share
/// of single-request connections, so our own probing is not reported.
const FRESH_PROBES: u32 = 3;
/// Time for the last packets of the run to reach the capture ring.
const CAPTURE_DRAIN: Duration = Duration::from_millis(150);

#[derive(Debug, Clone)]
pub struct DiagnoseOptions {
    pub url: String,
    pub spec: RequestSpec,
    pub tls: TlsOptions,
    pub requests: u32,
    /// Ports of backing services to capture besides the target's.
    pub extra_ports: Vec<u16>,
    /// Interface; default `lo` for loopback targets, `any` otherwise.
    pub iface: Option<String>,
    pub capture: bool,
    /// Keep the capture here (pcapng); otherwise a temporary file is removed.
    pub keep_capture: Option<PathBuf>,
    /// Bounds and window policy: the keys and listening ports are this
    /// run's own (see `flow_options`).
    pub flow: FlowOptions,
    /// Keep a bounded timeline as evidence (`--timeline`, `--html`).
    pub evidence: bool,
    /// The service's key log (`--keylog`), read once the run is over.
    pub service_keylog: Option<PathBuf>,
    /// Constant-rate load under capture after the probes (`--rate`).
    pub load: Option<LoadPhase>,
    /// Trace the target's socket calls with eBPF (`--ebpf`): its calls are
    /// given to its requests by thread.
    pub ebpf: bool,
    /// The workload whose network namespace this process entered before
    /// the run (`--container`, `--pid`, `--cgroup`): named in the report.
    pub target: Option<crate::target::Target>,
}

/// A load phase over `connections` for `duration`: `rate` requests/s on a
/// schedule (open model), or — with none — each connection sending its next
/// request once the last is answered (closed: that many clients at once),
/// up to `max_requests`.
#[derive(Debug, Clone)]
pub struct LoadPhase {
    pub rate: Option<f64>,
    pub duration: Duration,
    pub connections: usize,
    pub max_requests: Option<u64>,
}

#[derive(Debug)]
pub struct Diagnosis {
    pub report: Report,
    pub load: Option<LoadResult>,
    /// Each client write pattern's run, in report section order.
    pub patterns: Vec<ProbeRun>,
    pub capture: Option<CaptureInfo>,
    /// The host's USE samples during the run.
    pub host: whyslow_model::HostReport,
}

impl LoadPhase {
    /// `--rate`, `--duration` and `-c` checked.
    pub fn new(rate: f64, duration: &str, connections: usize) -> Result<LoadPhase, String> {
        Ok(LoadPhase {
            rate: Some(whyslow_load::plan::check_rate(rate, "--rate")?),
            duration: whyslow_model::parse_duration(duration)
                .map_err(|e| format!("--duration: {e}"))?,
            connections,
            max_requests: None,
        })
    }
}

impl Diagnosis {
    /// The error that ends the run badly: Ctrl-C, or one that left the
    /// first pattern without a single response.
    pub fn failure(&self) -> Option<whyslow_client::ProbeError> {
        let first_empty = self.patterns.first().is_none_or(|p| p.requests.is_empty());
        self.patterns
            .iter()
            .find_map(|p| p.error.clone())
            .filter(|e| e.kind == whyslow_client::ErrorKind::Interrupted || first_empty)
    }

    /// The output document: everything `--json`, the text and the HTML show.
    pub fn document(self, spec: &RequestSpec) -> DiagnoseDocument {
        let client = format!(
            "{}, TCP_NODELAY {}",
            if spec.write == WritePattern::Split {
                "headers then body"
            } else {
                "one write"
            },
            if spec.nodelay { "on" } else { "off" }
        );
        DiagnoseDocument {
            client_view: whyslow_model::ClientView::of(&self.report),
            report: self.report,
            method: spec.method.clone(),
            client,
            load: self.load,
            live_capture: self.capture,
            host: self.host,
        }
    }
}

fn patterns(opts: &DiagnoseOptions) -> Vec<(&'static str, ProbeOptions)> {
    let base = ProbeOptions {
        url: opts.url.clone(),
        requests: opts.requests,
        fresh: false,
        spec: opts.spec.clone(),
        tls: opts.tls.clone(),
        walk_dns: false,
    };
    let mut out = vec![
        (AS_GIVEN, base.clone()),
        (
            FRESH,
            ProbeOptions {
                fresh: true,
                requests: FRESH_PROBES.min(opts.requests),
                ..base.clone()
            },
        ),
    ];
    let already_split = opts.spec.write == WritePattern::Split && !opts.spec.nodelay;
    if !opts.spec.body.is_empty() && !already_split {
        // How Ruby's Net::HTTP wrote POSTs in case 000.
        let spec = RequestSpec {
            write: WritePattern::Split,
            nodelay: false,
            ..opts.spec.clone()
        };
        out.push((SPLIT_NO_NODELAY, ProbeOptions { spec, ..base }));
    }
    out
}

fn default_iface(target: &Target) -> &'static str {
    let loopback = target.host == "localhost"
        || target
            .host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback());
    if loopback {
        "lo"
    } else {
        "any"
    }
}

/// Runs the diagnosis; when `stop` turns true (Ctrl-C) the probes stop and
/// what was captured so far is still analyzed.
pub async fn diagnose(opts: &DiagnoseOptions, stop: &watch::Receiver<bool>) -> Diagnosis {
    let mut report = Report::new("diagnose", Some(redact_url(&opts.url)));
    let host = whyslow_host::Sampler::start(crate::host::proc_root(), whyslow_host::EVERY);
    let target = Target::parse(&opts.url).ok();
    let own_keys = own_keys(target.as_ref(), &mut report);
    let opts = &DiagnoseOptions {
        tls: TlsOptions {
            keylog: own_keys.clone().or(opts.tls.keylog.clone()),
            ..opts.tls.clone()
        },
        ..opts.clone()
    };
    let mut session = start_capture(opts, target.as_ref(), &mut report);
    if let (Some(s), Some(t), true) = (session.as_mut(), &target, opts.ebpf) {
        trace_target(s, t.port, &mut report);
    }
    let watcher = match (&session, &target) {
        (Some(_), Some(t)) => Some(Watcher::start(t.port)),
        _ => None,
    };
    let patterns = run_patterns(opts, stop, &mut report).await;
    let reachable = patterns.first().is_some_and(|p| !p.requests.is_empty());
    let load = match &opts.load {
        Some(phase) if reachable && !*stop.borrow() => {
            run_load(opts, phase, stop, &mut report).await
        }
        _ => None,
    };
    let mut capture = None;
    if let Some(s) = session {
        tokio::time::sleep(CAPTURE_DRAIN).await;
        let service_ports = target.as_ref().map_or(0, |t| t.port);
        let backing = watcher.map(Watcher::finish).unwrap_or_default();
        let flow = flow_options(
            opts,
            own_keys.as_deref(),
            service_ports,
            &backing,
            &mut report,
        );
        let analysis = AnalysisOptions {
            service: Some(vec![service_ports]),
            service_name: None,
            scope: Scope::ServiceAndBacking {
                known: backing
                    .into_iter()
                    .chain(opts.extra_ports.iter().copied())
                    .collect(),
            },
            flow,
            evidence: opts.evidence,
            events: None,
        };
        capture = finish_capture(s, &analysis, &mut report);
    }
    if let Some(l) = &load {
        report.findings.extend(l.findings.iter().cloned());
    }
    let (samples, unavailable) = host.finish();
    let host = crate::host::host_report("diagnose", samples, unavailable);
    report.findings.extend(host.findings.iter().cloned());
    Finding::sort(&mut report.findings);
    Diagnosis {
        report,
        load,
        patterns,
        capture,
        host,
    }
}

/// diagnose's own TLS secrets, for an https target: kept in memory so that
/// the capture sees inside its own probes, and appended to `SSLKEYLOGFILE`
/// too when it is set (as curl does).
fn own_keys(target: Option<&Target>, report: &mut Report) -> Option<Arc<KeyLogWriter>> {
    if !target?.https {
        return None;
    }
    let writer = KeyLogWriter::from_env().unwrap_or_else(|e| {
        report.errors.push(format!("{SSLKEYLOGFILE}: {e}"));
        None
    });
    Some(Arc::new(writer.unwrap_or_default().keeping()))
}

/// The options of the capture's analysis, with what this run knows: the
/// secrets of the service's key log and of our own connections, and the
/// ports that listen. A key log that cannot be read is said in the report.
fn flow_options(
    opts: &DiagnoseOptions,
    own: Option<&KeyLogWriter>,
    service_ports: u16,
    backing: &[u16],
    report: &mut Report,
) -> FlowOptions {
    let mut log = KeyLog::default();
    if let Some(path) = &opts.service_keylog {
        match crate::keylog::read_keylog(path) {
            Ok((service, bad)) => {
                log.extend(service);
                if bad > 0 {
                    report.errors.push(format!(
                        "--keylog {}: {bad} line(s) are not key log lines",
                        path.display()
                    ));
                }
            }
            Err(e) => report.errors.push(e),
        }
    }
    if let Some(own) = own {
        log.add_text(&own.kept());
    }
    let listening = std::iter::once(service_ports)
        .chain(backing.iter().copied())
        .chain(opts.extra_ports.iter().copied())
        .collect();
    FlowOptions {
        keylog: (!log.is_empty()).then(|| Arc::new(log)),
        listening,
        ..opts.flow.clone()
    }
}

/// Starts the capture, or says in the report why there is none.
fn start_capture(
    opts: &DiagnoseOptions,
    target: Option<&Target>,
    report: &mut Report,
) -> Option<CaptureSession> {
    if !opts.capture {
        let why = "turned off (--no-capture)".into();
        report.skipped.push(Skipped {
            what: "packet capture".into(),
            why,
            facts: Default::default(),
        });
        return None;
    }
    let t = target?;
    let iface = opts
        .iface
        .clone()
        .unwrap_or_else(|| default_iface(t).to_string());
    // On loopback, take all TCP: the service's backing calls are found while
    // and after the run, when its connections to them exist (see `backing`).
    // UDP: DNS on port 53, and on the ports given (a resolver of its own).
    let ports: Vec<u16> = match iface.as_str() {
        "lo" => Vec::new(),
        _ => std::iter::once(t.port)
            .chain(opts.extra_ports.iter().copied())
            .collect(),
    };
    let udp = &opts.extra_ports;
    match CaptureSession::start(&iface, &ports, udp, opts.keep_capture.clone()) {
        Ok(mut s) => {
            if let Some(t) = &opts.target {
                s.within(t.clone());
            }
            Some(s)
        }
        Err(why) => {
            report.skipped.push(Skipped {
                what: "packet capture (wire-level findings)".into(),
                why,
                facts: Default::default(),
            });
            None
        }
    }
}

/// Traces the processes listening on the target's port with eBPF, beside
/// the capture; where it cannot, the report says why.
fn trace_target(session: &mut CaptureSession, port: u16, report: &mut Report) {
    let pids = whyslow_host::sockets::listeners(port);
    let why = if pids.is_empty() {
        format!("no process of this host listens on :{port}")
    } else {
        match session.trace(pids) {
            Ok(()) => return,
            Err(why) => why,
        }
    };
    report.skipped.push(Skipped {
        what: "eBPF socket calls (attribution by thread)".into(),
        why,
        facts: Default::default(),
    });
}

/// Probes each client pattern in turn; stops early on Ctrl-C or an unreachable target.
async fn run_patterns(
    opts: &DiagnoseOptions,
    stop: &watch::Receiver<bool>,
    report: &mut Report,
) -> Vec<ProbeRun> {
    let mut results = Vec::new();
    for (label, p) in patterns(opts) {
        if *stop.borrow() {
            break;
        }
        let run = probe_until(&p, interrupted(stop.clone())).await;
        if let Some(e) = &run.error {
            report
                .errors
                .push(format!("{label}: request {}: {e}", run.requests.len() + 1));
        }
        report.sections.push(ReportSection {
            label: label.into(),
            requests: run.requests.clone(),
            dns: run.dns.clone(),
        });
        let failed = run.requests.is_empty();
        results.push(run);
        if failed {
            break; // the target is unreachable: more patterns would fail the same way
        }
    }
    results
}

/// Stops the capture and analyzes it on the one path, as `analyze` would
/// the saved file with the target as its service.
fn finish_capture(
    session: CaptureSession,
    opts: &AnalysisOptions,
    report: &mut Report,
) -> Option<CaptureInfo> {
    match session.finish(opts) {
        Ok((info, analysis)) => {
            analysis.fill(report, opts.evidence);
            Some(info)
        }
        Err(why) => {
            report.skipped.push(Skipped {
                what: "packet capture".into(),
                why,
                facts: Default::default(),
            });
            None
        }
    }
}

/// The load phase: the target under load while the capture runs.
async fn run_load(
    opts: &DiagnoseOptions,
    phase: &LoadPhase,
    stop: &watch::Receiver<bool>,
    report: &mut Report,
) -> Option<LoadResult> {
    let plan = LoadPlan {
        url: opts.url.clone(),
        spec: opts.spec.clone(),
        tls: opts.tls.clone(),
        model: match phase.rate {
            Some(rate) => Model::Open(Schedule::constant(rate)),
            None => Model::Closed,
        },
        connections: phase.connections.max(1),
        streams: 1,
        duration: Some(phase.duration),
        max_requests: phase.max_requests,
        interval: Duration::from_secs(1),
        threads: 1,
    };
    let halt = Arc::new(Stop::default());
    let watcher = {
        let (halt, stop) = (halt.clone(), stop.clone());
        tokio::spawn(async move {
            interrupted(stop).await;
            halt.trigger();
        })
    };
    let outcome = whyslow_load::run(&plan, halt, &mut |_| {}).await;
    watcher.abort();
    match outcome {
        Ok(o) => Some(LoadResult::from_outcome(
            whyslow_load::plan::run_setup(&plan),
            o,
        )),
        Err(e) => {
            report.errors.push(format!("load: {e}"));
            None
        }
    }
}
