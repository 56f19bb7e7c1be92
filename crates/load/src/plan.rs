//! From what a person asks for to a plan: schedules written as text
//! (`--rate`, `--ramp FROM:TO:OVER`, `--steps RATE:DURATION,…`), how long a
//! run lasts when nothing says, how many worker threads, and the setup a
//! result file records.

use crate::{LoadPlan, Model, RunSetup, Schedule};
use std::time::Duration;
use whyslow_client::{redact_url, Target};

/// A run with neither a duration, a request count, nor a schedule of its own
/// lasts this long (wrk's default).
pub const DEFAULT_DURATION: Duration = Duration::from_secs(10);
/// Each find-max step lasts this long unless a duration says otherwise:
/// thousands of requests at the rates worth searching, enough for a p99.
pub const FIND_MAX_STEP: Duration = Duration::from_secs(5);
/// A target on loopback shares the machine: the generator takes
/// 1/LOOPBACK_SHARE of the cores.
pub const LOOPBACK_SHARE: usize = 2;
/// The highest rate a schedule may ask for, requests per second.
pub const MAX_RATE: f64 = 1e8;

pub use whyslow_model::parse_duration;

/// A rate written as "500" or "500/s"; `what` names the flag in the error.
/// Zero is a rate (a ramp may start from it).
pub fn parse_rate(s: &str, what: &str) -> Result<f64, String> {
    let r: f64 = s
        .trim()
        .trim_end_matches("/s")
        .parse()
        .map_err(|_| format!("{what}: {s:?} is not a rate"))?;
    if !(0.0..=MAX_RATE).contains(&r) {
        return Err(format!("{what}: rate {r} out of range"));
    }
    Ok(r)
}

/// A constant rate a run keeps: above 0, at most MAX_RATE. Used by `load
/// --rate` and `diagnose --rate` alike.
pub fn check_rate(rate: f64, what: &str) -> Result<f64, String> {
    if rate > 0.0 && rate <= MAX_RATE {
        Ok(rate)
    } else {
        Err(format!(
            "{what} {rate}: must be above 0 (and at most {MAX_RATE})"
        ))
    }
}

/// The workload model: a constant `rate`, a `ramp` FROM:TO:OVER, or `steps`
/// RATE:DURATION,…; the closed model when none is given.
pub fn model(rate: Option<f64>, ramp: Option<&str>, steps: Option<&str>) -> Result<Model, String> {
    if let Some(r) = rate {
        return Ok(Model::Open(Schedule::constant(check_rate(r, "--rate")?)));
    }
    if let Some(ramp) = ramp {
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
    if let Some(steps) = steps {
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

/// Connections, streams per connection and a request count (-n) are at
/// least 1 when given.
pub fn check_counts(
    connections: usize,
    streams: usize,
    requests: Option<u64>,
) -> Result<(), String> {
    if connections == 0 || streams == 0 {
        return Err("--connections and --streams must be at least 1".into());
    }
    if requests == Some(0) {
        return Err("-n must be at least 1".into());
    }
    Ok(())
}

/// How long a run sends: the duration given; else none when a request
/// count ends it; else the schedule's own length; else a find-max step or
/// the default. A zero duration is refused.
pub fn run_length(
    given: Option<Duration>,
    max_requests: Option<u64>,
    model: &Model,
    find_max: bool,
) -> Result<Option<Duration>, String> {
    let natural = match model {
        Model::Open(s) => s.natural_length(),
        Model::Closed => None,
    };
    let length = match (given, max_requests, natural) {
        (Some(d), _, _) => Some(d),
        (None, Some(_), _) => None,
        (None, None, Some(n)) => Some(n),
        (None, None, None) if find_max => Some(FIND_MAX_STEP),
        (None, None, None) => Some(DEFAULT_DURATION),
    };
    if length.is_some_and(|d| d.is_zero()) {
        return Err("--duration must be above 0".into());
    }
    Ok(length)
}

/// One worker thread per core, except for a target on this machine
/// (loopback): it gets 1/LOOPBACK_SHARE of the cores, because a generator
/// competing with the server it measures for CPU measures its own interference.
pub fn default_threads(url: &str, cores: usize) -> usize {
    let local = Target::parse(url).is_ok_and(|t| {
        t.host == "localhost"
            || t.host
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback())
    });
    if local {
        (cores / LOOPBACK_SHARE).max(1)
    } else {
        cores.max(1)
    }
}

/// What a result file records of the plan: target (without credentials),
/// model, the schedule in words and its mean rate over the run.
pub fn run_setup(plan: &LoadPlan) -> RunSetup {
    let (model, schedule, target_rate) = match &plan.model {
        Model::Open(s) => {
            let span = plan.duration.or(s.natural_length());
            let mean = span
                .filter(|d| !d.is_zero())
                .map(|d| s.count_until(d) / d.as_secs_f64())
                .unwrap_or_else(|| s.rate_at(Duration::ZERO));
            ("open", s.describe().to_string(), Some(mean))
        }
        Model::Closed => ("closed", "as fast as possible".to_string(), None),
    };
    RunSetup {
        target: redact_url(&plan.url),
        method: plan.spec.method.clone(),
        model: model.into(),
        schedule,
        target_rate,
        connections: plan.connections as u64,
        streams: plan.streams as u64,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("2s").unwrap(), Duration::from_secs(2));
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("1.5").unwrap(), Duration::from_millis(1500));
        assert_eq!(parse_duration("250us").unwrap(), Duration::from_micros(250));
        for bad in ["", "x", "2h", "-1s", "1e999"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn rates() {
        assert_eq!(parse_rate("500", "--ramp").unwrap(), 500.0);
        assert_eq!(parse_rate(" 20/s", "--ramp").unwrap(), 20.0);
        assert_eq!(parse_rate("0", "--ramp").unwrap(), 0.0);
        for bad in ["x", "-1", "1e9"] {
            assert!(parse_rate(bad, "--ramp").is_err(), "{bad}");
        }
        assert!(check_rate(0.0, "--rate").is_err());
        assert!(check_rate(f64::NAN, "--rate").is_err());
        assert!(check_rate(f64::INFINITY, "--rate").is_err());
        assert_eq!(check_rate(0.5, "--rate").unwrap(), 0.5);
    }

    #[test]
    fn models_from_text() {
        assert_eq!(model(None, None, None).unwrap(), Model::Closed);
        assert_eq!(
            model(Some(100.0), None, None).unwrap(),
            Model::Open(Schedule::constant(100.0))
        );
        assert!(model(Some(0.0), None, None).is_err());
        let Model::Open(ramp) = model(None, Some("100:1000:30s"), None).unwrap() else {
            panic!("a ramp is open")
        };
        assert_eq!(ramp, Schedule::ramp(100.0, 1000.0, Duration::from_secs(30)));
        assert_eq!(ramp.natural_length(), Some(Duration::from_secs(30)));
        let Model::Open(steps) = model(None, None, Some("100:10s, 200:5s")).unwrap() else {
            panic!("steps are open")
        };
        assert_eq!(steps.natural_length(), Some(Duration::from_secs(15)));
        for (ramp, steps) in [
            (Some("100:1000"), None),
            (Some("0:0:10s"), None),
            (Some("100:1000:0s"), None),
            (None, Some("100")),
            (None, Some("0:10s")),
            (None, Some(",")),
        ] {
            assert!(model(None, ramp, steps).is_err(), "{ramp:?} {steps:?}");
        }
    }

    #[test]
    fn run_lengths() {
        let closed = Model::Closed;
        let ramp = model(None, Some("1:10:3s"), None).unwrap();
        let given = Some(Duration::from_secs(2));
        assert_eq!(run_length(given, Some(5), &ramp, false).unwrap(), given);
        assert_eq!(run_length(None, Some(5), &ramp, false).unwrap(), None);
        assert_eq!(
            run_length(None, None, &ramp, false).unwrap(),
            Some(Duration::from_secs(3))
        );
        assert_eq!(
            run_length(None, None, &closed, true).unwrap(),
            Some(FIND_MAX_STEP)
        );
        assert_eq!(
            run_length(None, None, &closed, false).unwrap(),
            Some(DEFAULT_DURATION)
        );
        assert!(run_length(Some(Duration::ZERO), None, &closed, false).is_err());
    }

    #[test]
    fn loopback_targets_get_a_share_of_the_cores() {
        assert_eq!(default_threads("http://127.0.0.1:8080/", 8), 4);
        assert_eq!(default_threads("http://localhost/", 1), 1);
        assert_eq!(default_threads("http://[::1]:80/", 2), 1);
        assert_eq!(default_threads("https://example.com/", 8), 8);
    }

    #[test]
    fn setups_say_the_model_and_mean_rate() {
        let mut plan = LoadPlan {
            url: "http://user:secret@127.0.0.1:1/x".into(),
            spec: Default::default(),
            tls: Default::default(),
            model: model(None, Some("0:100:10s"), None).unwrap(),
            connections: 4,
            streams: 2,
            duration: None,
            max_requests: None,
            interval: Duration::from_secs(1),
            threads: 1,
        };
        let s = run_setup(&plan);
        assert_eq!(s.model, "open");
        assert!(!s.target.contains("secret"), "{}", s.target);
        assert!((s.target_rate.unwrap() - 50.0).abs() < 0.5, "{s:?}");
        assert_eq!((s.connections, s.streams), (4, 2));
        plan.model = Model::Closed;
        let s = run_setup(&plan);
        assert_eq!((s.model.as_str(), s.target_rate), ("closed", None));
        assert_eq!(s.schedule, "as fast as possible");
    }
}
