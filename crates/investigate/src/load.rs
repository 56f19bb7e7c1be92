//! `load`: one run of a plan, or the --find-max search over constant
//! rates, with the host sampled alongside, the HDR log written as intervals
//! arrive, and every run judged against the SLO rules. The binary turns
//! flags into a `LoadJob` and renders the `LoadOutcome`.

use std::path::PathBuf;
use std::sync::Arc;
use whyslow_check::{slo_checks, Rule};
use whyslow_client::{redact_url, ProbeError};
use whyslow_load::findmax::{self, Knee, Search, Step};
use whyslow_load::hdrlog::HdrLog;
use whyslow_load::{run_setup, Interval, LoadPlan, LoadResult, LoadResultExt, Model, Schedule};
use whyslow_model::{CheckResult, LoadDocument, Report};

/// What to run: the plan, the rules, and what to watch it with.
pub struct LoadJob {
    pub plan: LoadPlan,
    pub rules: Vec<Rule>,
    /// `--find-max`: search constant rates from `start` up to `max_rate`
    /// instead of running the plan's schedule.
    pub find_max: Option<FindMax>,
    /// Write an HDR histogram log of every interval here.
    pub hdr_log: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy)]
pub struct FindMax {
    pub start: f64,
    pub max_rate: f64,
}

/// What the caller sees while it runs: each interval with the rate the
/// schedule asked for then, and each judged --find-max step.
pub trait LoadWatcher {
    fn interval(&mut self, interval: &Interval, total: Option<f64>, scheduled: Option<f64>);
    /// A run ended (clear any progress line).
    fn run_ended(&mut self) {}
    fn step(&mut self, _step: &Step) {}
}

#[derive(Debug)]
pub enum LoadError {
    /// The HDR log could not be created.
    HdrLog(String),
    /// No run could start (bad URL, refused, ...).
    Request(ProbeError),
}

/// How the job ended.
#[derive(Debug)]
pub struct LoadOutcome {
    /// The run (or, with --find-max, the best passing step); None when no
    /// --find-max step met the rules.
    pub result: Option<LoadResult>,
    pub checks: Vec<CheckResult>,
    pub knee: Option<Knee>,
    /// The HDR log failed mid-run; the run itself went on.
    pub hdr_log_error: Option<String>,
    pub interrupted: bool,
}

impl LoadOutcome {
    /// The output document: what `--json`, the text and `merge` show.
    pub fn document(&self, url: &str) -> LoadDocument {
        document(url, self.result.as_ref(), &self.checks, self.knee.as_ref())
    }
}

/// The document of a run (or merged runs) judged by `checks`.
pub fn document(
    url: &str,
    result: Option<&LoadResult>,
    checks: &[CheckResult],
    knee: Option<&Knee>,
) -> LoadDocument {
    let mut report = Report::new("load", Some(redact_url(url)));
    if let Some(res) = result {
        report.findings = res.findings.clone();
        report.errors = res
            .failures
            .iter()
            .map(|(class, n)| format!("{n} request(s) failed: {class}"))
            .collect();
    }
    report.checks = checks.to_vec();
    LoadDocument {
        report,
        load: result.map(LoadResult::summary),
        find_max: knee.cloned(),
    }
}

/// The rules applied to one result.
pub fn judge(rules: &[Rule], result: &LoadResult) -> Vec<CheckResult> {
    let rec = result.recorded().unwrap_or_default();
    slo_checks(rules, &rec, result)
}

/// Runs the job to its end, to Ctrl-C, or to `stop`.
pub fn run(
    job: &LoadJob,
    stop: &Arc<whyslow_load::Stop>,
    watcher: &mut dyn LoadWatcher,
) -> Result<LoadOutcome, LoadError> {
    raise_fd_limit();
    // The lanes run on their own worker threads; this one only collects.
    let rt = crate::runtime(1);
    let on_ctrl_c = stop.clone();
    rt.spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            on_ctrl_c.trigger();
        }
    });
    if let Some(search) = job.find_max {
        return find_max(job, search, &rt, stop, watcher);
    }
    let mut log = match &job.hdr_log {
        Some(path) => {
            let about = format!("{} {}", job.plan.spec.method, redact_url(&job.plan.url));
            let log = HdrLog::create(path, std::time::SystemTime::now(), &about)
                .map_err(|e| LoadError::HdrLog(format!("--hdr-log {}: {e}", path.display())))?;
            Some(log)
        }
        None => None,
    };
    let mut log_error = None;
    let host = whyslow_host::Sampler::start(crate::host::proc_root(), whyslow_host::EVERY);
    let mut result = run_once(&rt, &job.plan, stop, watcher, &mut |iv| {
        if let Some(l) = &mut log {
            if let Err(e) = l.write(iv.offset, iv.length, iv.recorded) {
                log_error = Some(e.to_string());
                log = None;
            }
        }
    })
    .map_err(LoadError::Request)?;
    let (samples, unavailable) = host.finish();
    let host = crate::host::host_report("load", samples, unavailable);
    result.findings.extend(host.findings);
    if let Some(l) = log {
        if let Err(e) = l.finish() {
            log_error = Some(e.to_string());
        }
    }
    Ok(LoadOutcome {
        checks: judge(&job.rules, &result),
        interrupted: result.interrupted,
        result: Some(result),
        knee: None,
        hdr_log_error: log_error,
    })
}

/// One run of `plan`; `log` receives its intervals.
fn run_once(
    rt: &tokio::runtime::Runtime,
    plan: &LoadPlan,
    stop: &Arc<whyslow_load::Stop>,
    watcher: &mut dyn LoadWatcher,
    log: &mut dyn FnMut(&Interval),
) -> Result<LoadResult, ProbeError> {
    let total = plan.duration.map(|d| d.as_secs_f64());
    let schedule = match &plan.model {
        Model::Open(s) => Some(s.clone()),
        Model::Closed => None,
    };
    let outcome = rt.block_on(whyslow_load::run(plan, stop.clone(), &mut |iv| {
        log(iv);
        let scheduled = schedule.as_ref().map(|s| s.rate_at(iv.offset));
        watcher.interval(iv, total, scheduled);
    }));
    watcher.run_ended();
    Ok(LoadResult::from_outcome(run_setup(plan), outcome?))
}

/// --find-max: constant-rate steps until the search settles on the knee.
fn find_max(
    job: &LoadJob,
    search: FindMax,
    rt: &tokio::runtime::Runtime,
    stop: &Arc<whyslow_load::Stop>,
    watcher: &mut dyn LoadWatcher,
) -> Result<LoadOutcome, LoadError> {
    let mut steps = Search::new(search.start, search.max_rate);
    let mut best: Option<LoadResult> = None;
    while let Some(rate) = steps.next_rate() {
        if stop.is_set() {
            break;
        }
        let mut plan = job.plan.clone();
        plan.model = Model::Open(Schedule::constant(rate));
        let result = run_once(rt, &plan, stop, watcher, &mut |_| {}).map_err(LoadError::Request)?;
        let broken = judge(&job.rules, &result)
            .into_iter()
            .filter(|c| !c.passed)
            .map(|c| c.rule)
            .collect();
        let step = findmax::judge(&result, rate, broken);
        watcher.step(&step);
        if step.passed() && !result.interrupted {
            best = Some(result);
        }
        steps.record(step);
    }
    Ok(LoadOutcome {
        checks: best
            .as_ref()
            .map_or_else(Vec::new, |b| judge(&job.rules, b)),
        result: best,
        knee: Some(steps.knee()),
        hdr_log_error: None,
        interrupted: stop.is_set(),
    })
}

/// Raises the open-file limit to its hard maximum: each connection takes a
/// descriptor (and each open-model lane a timer), and the usual soft limit
/// of 1024 would cap a run at a few hundred connections.
fn raise_fd_limit() {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: get/setrlimit on this process with a valid struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_cur < lim.rlim_max {
            lim.rlim_cur = lim.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
}
