//! `whyslow load URL`: flags into a `LoadJob`, its outcome rendered, and
//! the exit code.

use crate::flags::commands::LoadArgs;
use crate::flags::exit::Exit;
use crate::out;
use crate::stdout::{self, Done, Stop};
use std::io::IsTerminal;
use std::sync::Arc;
use std::time::Duration;
use whyslow_check::{flag_rules, parse_duration, SLO_METRICS};
use whyslow_client::{redact_url, TlsOptions};
use whyslow_investigate::load::{self as job, FindMax, LoadError, LoadJob, LoadWatcher};
use whyslow_load::findmax::{self, Step};
use whyslow_load::histograms::all_failed;
use whyslow_load::{plan, segment, Interval, LoadPlan, LoadResult, Stop as LoadStop};
use whyslow_model::{CheckResult, LoadDocument};
use whyslow_report::load as text;

/// The flags, as a job.
fn setup(args: &LoadArgs) -> Result<LoadJob, String> {
    let spec = args.request.spec(whyslow_client::TraceContext::Unsampled)?;
    let rules = flag_rules("--slo", args.slo.as_deref(), SLO_METRICS)?;
    // --find-max takes --rate as its first guess, not as the schedule.
    let rate = args.rate.filter(|_| !args.find_max);
    let model = plan::model(rate, args.ramp.as_deref(), args.steps.as_deref())?;
    plan::check_counts(args.connections, args.streams, args.requests)?;
    let given = args.duration.as_deref().map(parse_duration).transpose()?;
    let duration = plan::run_length(given, args.requests, &model, args.find_max)?;
    let interval = parse_duration(&args.interval).map_err(|e| format!("--interval: {e}"))?;
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let threads = args
        .threads
        .unwrap_or_else(|| plan::default_threads(&args.url, cores));
    let mut plan = LoadPlan {
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
    if let Some(s) = &args.segment {
        let index = std::env::var(segment::INDEX_ENV).ok();
        segment::Segment::parse(s, index.as_deref())?.apply(&mut plan)?;
    }
    let find_max = args.find_max.then(|| FindMax {
        start: args.rate.unwrap_or(findmax::START),
        max_rate: args.max_rate,
    });
    Ok(LoadJob {
        plan,
        rules,
        find_max,
        hdr_log: args.hdr_log.clone(),
    })
}

/// Progress on a terminal's stderr; --find-max steps unless --quiet/--json.
struct Progress {
    lines: bool,
    steps: bool,
}

impl LoadWatcher for Progress {
    fn interval(&mut self, iv: &Interval, total: Option<f64>, scheduled: Option<f64>) {
        if self.lines {
            eprint!("\r\x1b[2K{}", text::progress(iv, total, scheduled));
        }
    }
    fn run_ended(&mut self) {
        if self.lines {
            eprint!("\r\x1b[2K");
        }
    }
    fn step(&mut self, step: &Step) {
        if self.steps {
            let verdict = if step.passed() { "ok" } else { "broken" };
            eprintln!("find-max: {} req/s: {verdict}", step.rate);
        }
    }
}

/// A failure before any result: the message, and under --json a document.
fn fail(args: &LoadArgs, exit: Exit, msg: &str) -> Done {
    let target = Some(redact_url(&args.url));
    stdout::fail(args.output.json(), "load", target, exit, msg)
}

pub fn run(args: LoadArgs) -> Done {
    let job = match setup(&args) {
        Ok(j) => j,
        Err(e) => return fail(&args, Exit::Usage, &e),
    };
    let mut progress = Progress {
        lines: !args.quiet && std::io::stderr().is_terminal(),
        steps: !args.quiet && !args.output.json(),
    };
    let stop = Arc::new(LoadStop::default());
    let outcome = match job::run(&job, &stop, &mut progress) {
        Ok(o) => o,
        Err(LoadError::HdrLog(msg)) => return fail(&args, Exit::Usage, &msg),
        Err(LoadError::Request(e)) => return fail(&args, e.kind.into(), &e.to_string()),
    };
    if let Some(e) = &outcome.hdr_log_error {
        eprintln!("whyslow: --hdr-log: {e}");
    }
    if let Some(result) = &outcome.result {
        if let Some(Err(e)) = args.result.as_deref().map(|p| result.write(p)) {
            eprintln!("whyslow: {e}");
        }
        args.output
            .write_html(|| whyslow_report::html::load(result));
    }
    print(args.output.json(), &outcome.document(&args.url))?;
    Ok(match &outcome.result {
        None => {
            eprintln!("whyslow: no rate tried met the SLO");
            Exit::Breach
        }
        Some(_) if outcome.knee.is_some() && outcome.interrupted => Exit::Interrupted,
        Some(_) if outcome.knee.is_some() => Exit::Ok,
        Some(result) => exit_code(result, &outcome.checks),
    })
}

/// Text or JSON of a load document (merge prints the same).
pub fn print(json: bool, doc: &LoadDocument) -> Result<(), Stop> {
    if json {
        stdout::json(doc)
    } else {
        out!("{}", text::text(doc))
    }
}

fn exit_code(result: &LoadResult, checks: &[CheckResult]) -> Exit {
    if let Some(kind) = all_failed(result) {
        eprintln!("whyslow: no response: every request failed");
        return kind.into();
    }
    if let Some(broken) = checks.iter().find(|c| !c.passed) {
        eprintln!("whyslow: SLO broken: {}", text::check_line(broken));
        return Exit::Breach;
    }
    match result.interrupted {
        true => Exit::Interrupted,
        false => Exit::Ok,
    }
}
