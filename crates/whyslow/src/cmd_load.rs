//! `whyslow load URL`: open-model load on a schedule (--rate, --ramp, --steps)
//! or closed-model load (--connections only), with latency corrected for
//! coordinated omission, SLO checks, --find-max, result files and HDR logs.

use crate::cmd_probe::{usage, RequestArgs};
use crate::{runtime, EXIT_BREACH};
use clap::Args;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use whyslow_check::{parse_duration, parse_rules, slo_checks, Rule, SLO_METRICS};
use whyslow_client::{redact_url, TlsOptions};
use whyslow_load::findmax::{Knee, Search, Step, RATE_KEPT};
use whyslow_load::hdrlog::HdrLog;
use whyslow_load::histograms::{error_class_exit_code, Recorded};
use whyslow_load::{LoadPlan, LoadResult, LoadResultExt, Metric, Model, RunSetup, Schedule, Stop};
use whyslow_model::{CheckResult, FindingKind, LoadDocument, Report};
use whyslow_report::load as text;
use whyslow_report::to_json;

/// A run with neither --duration, -n, nor a schedule of its own lasts this long (wrk's default).
const DEFAULT_DURATION: Duration = Duration::from_secs(10);
/// Each --find-max step lasts this long unless --duration says otherwise:
/// thousands of requests at the rates worth searching, enough for a p99.
const FIND_MAX_STEP: Duration = Duration::from_secs(5);
/// --find-max starts here unless --rate gives a first guess.
const FIND_MAX_START: f64 = 100.0;
/// A target on loopback shares the machine: whyslow takes 1/LOOPBACK_SHARE of the cores.
const LOOPBACK_SHARE: usize = 2;
/// Exit code of a run stopped by Ctrl-C (128 + SIGINT, as shells report it).
const EXIT_INTERRUPTED: u8 = 130;

#[derive(Args)]
#[command(after_help = "Examples:
  whyslow load --rate 500 --duration 30s --slo 'p99<200ms,errors<0.1%' http://127.0.0.1:8080/
  whyslow load -c 32 --duration 10s http://127.0.0.1:8080/            (closed model)
  whyslow load --ramp 100:2000:60s -c 50 -o ramp.json --hdr-log ramp.hlog http://host/
  whyslow load --find-max --slo 'p99<200ms' --rate 100 -c 50 http://host/
  whyslow merge a.json b.json -o all.json")]
pub struct LoadArgs {
    /// http:// or https:// URL
    pub url: String,
    /// Open model: start RATE requests per second on schedule
    #[arg(long, conflicts_with_all = ["ramp", "steps"])]
    pub rate: Option<f64>,
    /// Open model: rate rising linearly, FROM:TO:OVER (100:1000:30s), then holding TO
    #[arg(long, conflicts_with = "steps")]
    pub ramp: Option<String>,
    /// Open model: rates held in turn, RATE:DURATION,... (100:10s,200:10s)
    #[arg(long)]
    pub steps: Option<String>,
    /// Connections; without a rate each sends as fast as responses return (closed model)
    #[arg(short = 'c', long, default_value_t = 10)]
    pub connections: usize,
    /// Concurrent HTTP/2 streams per connection
    #[arg(long, default_value_t = 1)]
    pub streams: usize,
    /// How long to send: 30s, 2m (default 10s; a ramp or steps last their own length)
    #[arg(long)]
    pub duration: Option<String>,
    /// Stop after N requests
    #[arg(short = 'n', long = "requests")]
    pub requests: Option<u64>,
    /// Exit 1 naming each broken rule: 'p99<200ms,errors<0.1%'
    /// (p50 p75 p90 p95 p99 p99.9 max mean: corrected latency; errors: percent)
    #[arg(long)]
    pub slo: Option<String>,
    /// Search for the highest rate that meets --slo (steps of --duration, default 5s)
    #[arg(long, requires = "slo", conflicts_with_all = ["ramp", "steps", "hdr_log"])]
    pub find_max: bool,
    /// Upper bound of the --find-max search, requests per second
    #[arg(long, default_value_t = 1_000_000.0)]
    pub max_rate: f64,
    /// Print the JSON report instead of text
    #[arg(long)]
    pub json: bool,
    /// Write the result file (with histograms; `whyslow merge` combines them)
    #[arg(short = 'o', long = "output")]
    pub output: Option<PathBuf>,
    /// Also write a self-contained HTML report: histogram, percentile spectrum, latency over time
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,
    /// Write an HdrHistogram interval log (one histogram per --interval)
    #[arg(long)]
    pub hdr_log: Option<PathBuf>,
    /// Interval of the progress line and the HDR log
    #[arg(long, default_value = "1s")]
    pub interval: String,
    /// Worker threads (default: one per core; half the cores for a target on this machine)
    #[arg(long)]
    pub threads: Option<usize>,
    /// No progress line (it is shown only on a terminal anyway)
    #[arg(short = 'q', long)]
    pub quiet: bool,
    /// Append the TLS secrets to FILE, NSS key log format (default: $SSLKEYLOGFILE, as curl)
    #[arg(long, value_name = "FILE")]
    pub keylog: Option<PathBuf>,
    #[command(flatten)]
    pub request: RequestArgs,
}

fn parse_rate(s: &str, what: &str) -> Result<f64, String> {
    let r: f64 = s
        .trim()
        .trim_end_matches("/s")
        .parse()
        .map_err(|_| format!("{what}: {s:?} is not a rate"))?;
    if !(0.0..=1e8).contains(&r) {
        return Err(format!("{what}: rate {r} out of range"));
    }
    Ok(r)
}

/// The workload model from --rate / --ramp / --steps (closed when none).
fn model(args: &LoadArgs) -> Result<Model, String> {
    if let Some(r) = args.rate.filter(|_| !args.find_max) {
        if !(r > 0.0 && r <= 1e8) {
            return Err(format!("--rate {r}: must be above 0"));
        }
        return Ok(Model::Open(Schedule::constant(r)));
    }
    if let Some(ramp) = &args.ramp {
        let parts: Vec<&str> = ramp.split(':').collect();
        let [from, to, over] = parts[..] else {
            return Err(format!(
                "--ramp {ramp:?}: expected FROM:TO:OVER, e.g. 100:1000:30s"
            ));
        };
        let (from, to) = (parse_rate(from, "--ramp")?, parse_rate(to, "--ramp")?);
        let over = parse_duration(over).map_err(|e| format!("--ramp: {e}"))?;
        if over.is_zero() || (from == 0.0 && to == 0.0) {
            return Err(format!("--ramp {ramp:?}: needs a length and a rate"));
        }
        return Ok(Model::Open(Schedule::ramp(from, to, over)));
    }
    if let Some(steps) = &args.steps {
        let mut list = Vec::new();
        for part in steps.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let Some((rate, dur)) = part.split_once(':') else {
                return Err(format!(
                    "--steps {part:?}: expected RATE:DURATION, e.g. 200:10s"
                ));
            };
            let d = parse_duration(dur).map_err(|e| format!("--steps: {e}"))?;
            list.push((parse_rate(rate, "--steps")?, d));
        }
        if list.is_empty() || list.iter().all(|s| s.0 == 0.0) {
            return Err("--steps: needs at least one non-zero rate".into());
        }
        return Ok(Model::Open(Schedule::steps(&list)));
    }
    Ok(Model::Closed)
}

struct Setup {
    plan: LoadPlan,
    rules: Vec<Rule>,
}

fn setup(args: &LoadArgs) -> Result<Setup, String> {
    let spec = args.request.spec()?;
    let rules = match &args.slo {
        Some(s) => parse_rules(s, SLO_METRICS).map_err(|e| format!("--slo: {e}"))?,
        None => Vec::new(),
    };
    let model = model(args)?;
    if args.connections == 0 || args.streams == 0 {
        return Err("--connections and --streams must be at least 1".into());
    }
    if args.requests == Some(0) {
        return Err("-n must be at least 1".into());
    }
    let natural = match &model {
        Model::Open(s) => s.natural_length(),
        Model::Closed => None,
    };
    let duration = match (&args.duration, args.requests, natural) {
        (Some(d), _, _) => Some(parse_duration(d)?),
        (None, Some(_), _) => None,
        (None, None, Some(n)) => Some(n),
        (None, None, None) if args.find_max => Some(FIND_MAX_STEP),
        (None, None, None) => Some(DEFAULT_DURATION),
    };
    if duration.is_some_and(|d| d.is_zero()) {
        return Err("--duration must be above 0".into());
    }
    let interval = parse_duration(&args.interval).map_err(|e| format!("--interval: {e}"))?;
    let threads = args.threads.unwrap_or_else(|| default_threads(&args.url));
    let plan = LoadPlan {
        url: args.url.clone(),
        spec,
        tls: TlsOptions {
            keylog: crate::cmd_probe::keylog_writer(args.keylog.as_deref())?,
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

/// One worker thread per core, except for a target on this machine
/// (loopback): it gets half the cores, because a generator competing with
/// the server it measures for CPU measures its own interference.
fn default_threads(url: &str) -> usize {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let local = whyslow_client::Target::parse(url).is_ok_and(|t| {
        t.host == "localhost"
            || t.host
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback())
    });
    if local {
        (cores / LOOPBACK_SHARE).max(1)
    } else {
        cores
    }
}

pub fn run_setup(plan: &LoadPlan) -> RunSetup {
    plan.setup()
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
    stop: &Arc<Stop>,
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

fn watch_ctrl_c(rt: &tokio::runtime::Runtime, stop: &Arc<Stop>) {
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

pub fn run(args: LoadArgs) -> u8 {
    let s = match setup(&args) {
        Ok(s) => s,
        Err(e) => return usage(&e),
    };
    raise_fd_limit();
    // The lanes run on their own worker threads; this one only collects.
    let rt = runtime(1);
    let stop = Arc::new(Stop::default());
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
            Err(e) => return usage(&format!("--hdr-log {}: {e}", path.display())),
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
        Err(e) => {
            eprintln!("whyslow: {e}");
            return e.kind.exit_code() as u8;
        }
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

/// Prints a single run's results, writes -o, and decides the exit code.
fn finish(args: &LoadArgs, s: &Setup, result: LoadResult) -> u8 {
    let rec = result.recorded().unwrap_or_default();
    let checks = slo_checks(&s.rules, &rec, &result);
    if let Some(path) = &args.output {
        if let Err(e) = write_output(path, &result) {
            eprintln!("whyslow: {e}");
        }
    }
    crate::cmd_analyze::write_html(args.html.as_deref(), || whyslow_report::html::load(&result));
    print_result(args.json, &args.url, &result, &checks, None);
    exit_code(&result, &rec, &checks)
}

/// Text or JSON for a run (and the find-max table when there is one).
pub fn print_result(
    json: bool,
    url: &str,
    result: &LoadResult,
    checks: &[CheckResult],
    knee: Option<&Knee>,
) {
    let doc = LoadDocument {
        report: report(url, Some(result), checks.to_vec()),
        load: Some(result.summary()),
        find_max: knee.cloned(),
    };
    if json {
        println!("{}", to_json(&doc));
    } else {
        print!("{}", text::text(&doc));
    }
}

fn exit_code(result: &LoadResult, rec: &Recorded, checks: &[CheckResult]) -> u8 {
    if result.responses == 0 {
        let worst = (0..rec.failures.len()).max_by_key(|i| rec.failures[*i]);
        if let Some(class) = worst.filter(|i| rec.failures[*i] > 0) {
            eprintln!("whyslow: no response: every request failed");
            return error_class_exit_code(class) as u8;
        }
    }
    if let Some(broken) = checks.iter().find(|c| !c.passed) {
        eprintln!("whyslow: SLO broken: {}", text::check_line(broken));
        return EXIT_BREACH;
    }
    if result.interrupted {
        return EXIT_INTERRUPTED;
    }
    0
}

/// One --find-max step: a constant-rate run, judged against the rules.
fn step(result: &LoadResult, rules: &[Rule], rate: f64) -> Step {
    let rec = result.recorded().unwrap_or_default();
    let mut broken: Vec<String> = slo_checks(rules, &rec, result)
        .into_iter()
        .filter(|c| !c.passed)
        .map(|c| c.rule)
        .collect();
    if result.achieved_rate < rate * RATE_KEPT {
        broken.push(format!("rate {rate:.0}/s not sustained"));
    }
    let p = result.percentiles(Metric::Corrected).copied();
    Step {
        rate,
        achieved_rate: result.achieved_rate,
        p50_us: p.map_or(0, |p| p.p50),
        p99_us: p.map_or(0, |p| p.p99),
        error_rate_pct: result.error_rate_pct,
        broken,
        generator_saturated: result
            .findings
            .iter()
            .any(|f| f.kind == FindingKind::GeneratorSaturated),
    }
}

/// One --find-max step at `rate`: the run, judged against the rules.
fn find_max_step(
    args: &LoadArgs,
    s: &Setup,
    rt: &tokio::runtime::Runtime,
    stop: &Arc<Stop>,
    rate: f64,
) -> Result<(LoadResult, Step), u8> {
    let mut plan = s.plan.clone();
    plan.model = Model::Open(Schedule::constant(rate));
    let mut watch = Watch {
        progress: !args.quiet && std::io::stderr().is_terminal(),
        log: None,
        log_error: None,
        total: plan.duration.map(|d| d.as_secs_f64()),
        schedule: Some(Schedule::constant(rate)),
    };
    let result = run_once(rt, &plan, stop, &mut watch).map_err(|e| {
        eprintln!("whyslow: {e}");
        e.kind.exit_code() as u8
    })?;
    let st = step(&result, &s.rules, rate);
    if !args.quiet && !args.json {
        let verdict = if st.passed() { "ok" } else { "broken" };
        eprintln!("find-max: {} req/s: {verdict}", st.rate);
    }
    Ok((result, st))
}

/// When no rate met the SLO: the steps tried, and exit 1.
fn no_knee(args: &LoadArgs, knee: Knee) -> u8 {
    let doc = LoadDocument {
        report: report(&args.url, None, Vec::new()),
        load: None,
        find_max: Some(knee),
    };
    if args.json {
        println!("{}", to_json(&doc));
    } else {
        print!("{}", text::text(&doc));
    }
    eprintln!("whyslow: no rate tried met the SLO");
    EXIT_BREACH
}

fn find_max(args: &LoadArgs, s: &Setup, rt: &tokio::runtime::Runtime, stop: &Arc<Stop>) -> u8 {
    let mut search = Search::new(args.rate.unwrap_or(FIND_MAX_START), args.max_rate);
    let mut best: Option<LoadResult> = None;
    while let Some(rate) = search.next_rate() {
        if stop.is_set() {
            break;
        }
        let (result, st) = match find_max_step(args, s, rt, stop, rate) {
            Ok(r) => r,
            Err(code) => return code,
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
    if let Some(path) = &args.output {
        if let Err(e) = write_output(path, &best) {
            eprintln!("whyslow: {e}");
        }
    }
    let rec = best.recorded().unwrap_or_default();
    let checks = slo_checks(&s.rules, &rec, &best);
    crate::cmd_analyze::write_html(args.html.as_deref(), || whyslow_report::html::load(&best));
    print_result(args.json, &args.url, &best, &checks, Some(&knee));
    if stop.is_set() {
        EXIT_INTERRUPTED
    } else {
        0
    }
}
