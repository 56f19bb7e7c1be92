//! `whyslow load URL`: open-model load on a schedule (--rate, --ramp, --steps)
//! or closed-model load (--connections only), with latency corrected for
//! coordinated omission, SLO checks, --find-max, result files and HDR logs.

use crate::flags::commands::LoadArgs;
use crate::flags::exit::Exit;
use crate::stdout::{self, Done, Stop};
use crate::{out, runtime};
use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use whyslow_check::{parse_duration, parse_rules, slo_checks, Rule, SLO_METRICS};
use whyslow_client::{redact_url, TlsOptions};
use whyslow_load::findmax::{self, Knee, Search, Step};
use whyslow_load::hdrlog::HdrLog;
use whyslow_load::histograms::{error_class_kind, Recorded};
use whyslow_load::{
    plan, run_setup, LoadPlan, LoadResult, LoadResultExt, Model, Schedule, Stop as LoadStop,
};
use whyslow_model::{CheckResult, LoadDocument, Report};
use whyslow_report::load as text;

struct Setup {
    plan: LoadPlan,
    rules: Vec<Rule>,
}

/// The flags, as a plan and the SLO rules to judge it by.
fn setup(args: &LoadArgs) -> Result<Setup, String> {
    let spec = args.request.spec()?;
    let rules = match &args.slo {
        Some(s) => parse_rules(s, SLO_METRICS).map_err(|e| format!("--slo: {e}"))?,
        None => Vec::new(),
    };
    // --find-max takes --rate as its first guess, not as the schedule.
    let rate = args.rate.filter(|_| !args.find_max);
    let model = plan::model(rate, args.ramp.as_deref(), args.steps.as_deref())?;
    if args.connections == 0 || args.streams == 0 {
        return Err("--connections and --streams must be at least 1".into());
    }
    if args.requests == Some(0) {
        return Err("-n must be at least 1".into());
    }
    let given = args.duration.as_deref().map(parse_duration).transpose()?;
    let duration = plan::run_length(given, args.requests, &model, args.find_max)?;
    let interval = parse_duration(&args.interval).map_err(|e| format!("--interval: {e}"))?;
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let threads = args
        .threads
        .unwrap_or_else(|| plan::default_threads(&args.url, cores));
    let plan = LoadPlan {
        url: args.url.clone(),
        spec,
        tls: TlsOptions {
            keylog: args.keylog.writer()?,
            ..args.request.tls()
        },
        model,
        connections: args.connections,
        streams: args.streams,
        duration,
        max_requests: args.requests,
        interval: interval.max(Duration::from_millis(100)),
        threads: threads.max(1),
    };
    Ok(Setup { plan, rules })
}

/// Shows interval progress on a terminal and writes the HDR log.
struct Watch {
    progress: bool,
    log: Option<HdrLog<std::io::BufWriter<std::fs::File>>>,
    log_error: Option<String>,
    total: Option<f64>,
    schedule: Option<Schedule>,
}

impl Watch {
    fn on_interval(&mut self, iv: &whyslow_load::Interval) {
        if let Some(log) = &mut self.log {
            if let Err(e) = log.write(iv.offset, iv.length, iv.recorded) {
                self.log_error = Some(e.to_string());
                self.log = None;
            }
        }
        if self.progress {
            let scheduled = self.schedule.as_ref().map(|s| s.rate_at(iv.offset));
            eprint!("\r\x1b[2K{}", text::progress(iv, self.total, scheduled));
        }
    }
}

/// One run of `plan`, Ctrl-C aware; `log` receives its intervals.
fn run_once(
    rt: &tokio::runtime::Runtime,
    plan: &LoadPlan,
    stop: &Arc<LoadStop>,
    watch: &mut Watch,
) -> Result<LoadResult, whyslow_client::ProbeError> {
    let outcome = rt.block_on(whyslow_load::run(plan, stop.clone(), &mut |iv| {
        watch.on_interval(iv)
    }));
    if watch.progress {
        eprint!("\r\x1b[2K");
    }
    Ok(LoadResult::from_outcome(run_setup(plan), outcome?))
}

fn watch_ctrl_c(rt: &tokio::runtime::Runtime, stop: &Arc<LoadStop>) {
    let stop = stop.clone();
    rt.spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            stop.trigger();
        }
    });
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

/// A failure before any result: the message, and under --json a document.
fn fail(args: &LoadArgs, exit: Exit, msg: &str) -> Done {
    let target = Some(redact_url(&args.url));
    stdout::fail(args.output.json(), "load", target, exit, msg)
}

pub fn run(args: LoadArgs) -> Done {
    let s = match setup(&args) {
        Ok(s) => s,
        Err(e) => return fail(&args, Exit::Usage, &e),
    };
    raise_fd_limit();
    // The lanes run on their own worker threads; this one only collects.
    let rt = runtime(1);
    let stop = Arc::new(LoadStop::default());
    watch_ctrl_c(&rt, &stop);
    if args.find_max {
        return find_max(&args, &s, &rt, &stop);
    }
    let mut watch = Watch {
        progress: !args.quiet && std::io::stderr().is_terminal(),
        log: None,
        log_error: None,
        total: s.plan.duration.map(|d| d.as_secs_f64()),
        schedule: match &s.plan.model {
            Model::Open(sch) => Some(sch.clone()),
            Model::Closed => None,
        },
    };
    if let Some(path) = &args.hdr_log {
        let about = format!("{} {}", s.plan.spec.method, redact_url(&s.plan.url));
        match HdrLog::create(path, std::time::SystemTime::now(), &about) {
            Ok(log) => watch.log = Some(log),
            Err(e) => {
                let msg = format!("--hdr-log {}: {e}", path.display());
                return fail(&args, Exit::Usage, &msg);
            }
        }
    }
    let host =
        whyslow_host::Sampler::start(whyslow_investigate::host::proc_root(), whyslow_host::EVERY);
    let result = match run_once(&rt, &s.plan, &stop, &mut watch) {
        Ok(mut r) => {
            let (samples, unavailable) = host.finish();
            let h = whyslow_investigate::host::host_report("load", samples, unavailable);
            r.findings.extend(h.findings);
            r
        }
        Err(e) => return fail(&args, e.kind.into(), &e.to_string()),
    };
    if let Some(log) = watch.log.take() {
        if let Err(e) = log.finish() {
            watch.log_error = Some(e.to_string());
        }
    }
    if let Some(e) = &watch.log_error {
        eprintln!("whyslow: --hdr-log: {e}");
    }
    finish(&args, &s, result)
}

fn write_output(path: &PathBuf, result: &LoadResult) -> Result<(), String> {
    let text = serde_json::to_string_pretty(result).map_err(|e| e.to_string())?;
    std::fs::write(path, text + "\n").map_err(|e| format!("-o {}: {e}", path.display()))
}

fn report(url: &str, result: Option<&LoadResult>, checks: Vec<CheckResult>) -> Report {
    let mut r = Report::new("load", Some(redact_url(url)));
    if let Some(res) = result {
        r.findings = res.findings.clone();
        r.errors = res
            .failures
            .iter()
            .map(|(class, n)| format!("{n} request(s) failed: {class}"))
            .collect();
    }
    r.checks = checks;
    r
}

/// Writes -o and --html, prints a single run's results, and decides the exit code.
fn finish(args: &LoadArgs, s: &Setup, result: LoadResult) -> Done {
    let rec = result.recorded().unwrap_or_default();
    let checks = slo_checks(&s.rules, &rec, &result);
    if let Some(path) = &args.result {
        if let Err(e) = write_output(path, &result) {
            eprintln!("whyslow: {e}");
        }
    }
    args.output
        .write_html(|| whyslow_report::html::load(&result));
    print_result(args.output.json(), &args.url, &result, &checks, None)?;
    Ok(exit_code(&result, &rec, &checks))
}

/// Text or JSON for a run (and the find-max table when there is one).
pub fn print_result(
    json: bool,
    url: &str,
    result: &LoadResult,
    checks: &[CheckResult],
    knee: Option<&Knee>,
) -> Result<(), Stop> {
    let doc = LoadDocument {
        report: report(url, Some(result), checks.to_vec()),
        load: Some(result.summary()),
        find_max: knee.cloned(),
    };
    if json {
        stdout::json(&doc)
    } else {
        out!("{}", text::text(&doc))
    }
}

fn exit_code(result: &LoadResult, rec: &Recorded, checks: &[CheckResult]) -> Exit {
    if result.responses == 0 {
        let worst = (0..rec.failures.len()).max_by_key(|i| rec.failures[*i]);
        if let Some(class) = worst.filter(|i| rec.failures[*i] > 0) {
            eprintln!("whyslow: no response: every request failed");
            return error_class_kind(class).into();
        }
    }
    if let Some(broken) = checks.iter().find(|c| !c.passed) {
        eprintln!("whyslow: SLO broken: {}", text::check_line(broken));
        return Exit::Breach;
    }
    if result.interrupted {
        return Exit::Interrupted;
    }
    Exit::Ok
}

/// One --find-max step at `rate`: the run, judged against the rules.
fn find_max_step(
    args: &LoadArgs,
    s: &Setup,
    rt: &tokio::runtime::Runtime,
    stop: &Arc<LoadStop>,
    rate: f64,
) -> Result<(LoadResult, Step), Done> {
    let mut plan = s.plan.clone();
    plan.model = Model::Open(Schedule::constant(rate));
    let mut watch = Watch {
        progress: !args.quiet && std::io::stderr().is_terminal(),
        log: None,
        log_error: None,
        total: plan.duration.map(|d| d.as_secs_f64()),
        schedule: Some(Schedule::constant(rate)),
    };
    let result = run_once(rt, &plan, stop, &mut watch)
        .map_err(|e| fail(args, e.kind.into(), &e.to_string()))?;
    let rec = result.recorded().unwrap_or_default();
    let broken = slo_checks(&s.rules, &rec, &result)
        .into_iter()
        .filter(|c| !c.passed)
        .map(|c| c.rule)
        .collect();
    let st = findmax::judge(&result, rate, broken);
    if !args.quiet && !args.output.json() {
        let verdict = if st.passed() { "ok" } else { "broken" };
        eprintln!("find-max: {} req/s: {verdict}", st.rate);
    }
    Ok((result, st))
}

/// When no rate met the SLO: the steps tried, and exit 1.
fn no_knee(args: &LoadArgs, knee: Knee) -> Done {
    let doc = LoadDocument {
        report: report(&args.url, None, Vec::new()),
        load: None,
        find_max: Some(knee),
    };
    if args.output.json() {
        stdout::json(&doc)?;
    } else {
        out!("{}", text::text(&doc))?;
    }
    eprintln!("whyslow: no rate tried met the SLO");
    Ok(Exit::Breach)
}

fn find_max(
    args: &LoadArgs,
    s: &Setup,
    rt: &tokio::runtime::Runtime,
    stop: &Arc<LoadStop>,
) -> Done {
    let mut search = Search::new(args.rate.unwrap_or(findmax::START), args.max_rate);
    let mut best: Option<LoadResult> = None;
    while let Some(rate) = search.next_rate() {
        if stop.is_set() {
            break;
        }
        let (result, st) = match find_max_step(args, s, rt, stop, rate) {
            Ok(r) => r,
            Err(done) => return done,
        };
        if st.passed() && !result.interrupted {
            best = Some(result);
        }
        search.record(st);
    }
    let knee = search.knee();
    let Some(best) = best else {
        return no_knee(args, knee);
    };
    if let Some(path) = &args.result {
        if let Err(e) = write_output(path, &best) {
            eprintln!("whyslow: {e}");
        }
    }
    let rec = best.recorded().unwrap_or_default();
    let checks = slo_checks(&s.rules, &rec, &best);
    args.output.write_html(|| whyslow_report::html::load(&best));
    print_result(args.output.json(), &args.url, &best, &checks, Some(&knee))?;
    Ok(match stop.is_set() {
        true => Exit::Interrupted,
        false => Exit::Ok,
    })
}
