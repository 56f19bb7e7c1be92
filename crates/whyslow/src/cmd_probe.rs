//! `whyslow probe URL`: the client's view of N requests.

use crate::{ctrl_c, runtime, EXIT_BREACH, EXIT_USAGE};
use bytes::Bytes;
use clap::{Args, ValueEnum};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use whyslow_check::{check_budget, parse_duration, parse_rules, BUDGET_METRICS};
use whyslow_client::{
    probe_until, redact_url, HttpVersion, KeyLogWriter, ProbeOptions, ProbeRun, RequestSpec,
    TlsOptions, WritePattern, SSLKEYLOGFILE,
};
use whyslow_model::{CheckResult, Report, ReportSection};
use whyslow_report::{probe as table, to_json, writeout};

#[derive(Clone, Copy, ValueEnum)]
pub enum OnOff {
    On,
    Off,
}

#[derive(Clone, Copy, ValueEnum)]
pub enum WriteArg {
    Coalesced,
    Split,
}

/// How to make the request: shared by probe, diagnose and load.
#[derive(Args, Clone)]
pub struct RequestArgs {
    /// Request method (default GET, or POST with -d)
    #[arg(short = 'X', long = "request")]
    pub method: Option<String>,
    /// Request body; @FILE reads a file; repeated -d are joined with '&' (as curl)
    #[arg(short = 'd', long = "data", alias = "data-binary")]
    pub data: Vec<String>,
    /// Extra header, 'Name: value' (repeatable)
    #[arg(short = 'H', long = "header")]
    pub headers: Vec<String>,
    /// Use HTTP/1.1 only
    #[arg(long = "http1.1", conflicts_with = "http2")]
    pub http1: bool,
    /// Use HTTP/2 (ALPN over TLS; prior knowledge h2c over plain TCP)
    #[arg(long)]
    pub http2: bool,
    /// Limit for each phase: 10s, 500ms
    #[arg(long, default_value = "10s")]
    pub timeout: String,
    /// TCP_NODELAY on the client socket (curl: on)
    #[arg(long, value_enum, default_value = "on")]
    pub nodelay: OnOff,
    /// Write headers and body in one write (curl) or two (Ruby Net::HTTP)
    #[arg(long, value_enum, default_value = "coalesced")]
    pub write: WriteArg,
    /// Accept any TLS certificate
    #[arg(short = 'k', long)]
    pub insecure: bool,
    /// Trust the PEM certificates in FILE
    #[arg(long)]
    pub cacert: Option<PathBuf>,
}

impl RequestArgs {
    pub fn spec(&self) -> Result<RequestSpec, String> {
        let mut parts = Vec::new();
        for d in &self.data {
            match d.strip_prefix('@') {
                Some(path) => {
                    parts.push(std::fs::read(path).map_err(|e| format!("-d @{path}: {e}"))?)
                }
                None => parts.push(d.clone().into_bytes()),
            }
        }
        let body = parts.join(&b'&');
        let mut headers = Vec::new();
        for h in &self.headers {
            let (n, v) = h
                .split_once(':')
                .ok_or_else(|| format!("-H {h:?}: expected 'Name: value'"))?;
            if n.trim().is_empty() || n.contains(char::is_whitespace) {
                return Err(format!("-H {h:?}: bad header name"));
            }
            headers.push((n.trim().to_string(), v.trim().to_string()));
        }
        let method = self
            .method
            .clone()
            .unwrap_or_else(|| if body.is_empty() { "GET" } else { "POST" }.into());
        Ok(RequestSpec {
            method,
            headers,
            body: Bytes::from(body),
            version: if self.http1 {
                HttpVersion::Http1
            } else if self.http2 {
                HttpVersion::Http2
            } else {
                HttpVersion::Auto
            },
            write: match self.write {
                WriteArg::Coalesced => WritePattern::Coalesced,
                WriteArg::Split => WritePattern::Split,
            },
            nodelay: matches!(self.nodelay, OnOff::On),
            timeout: parse_duration(&self.timeout)?,
        })
    }

    pub fn tls(&self) -> TlsOptions {
        TlsOptions {
            insecure: self.insecure,
            ca_file: self.cacert.clone(),
            keylog: None,
        }
    }
}

/// Where this run's TLS secrets go: `--keylog FILE`, else `SSLKEYLOGFILE` (as curl).
pub fn keylog_writer(path: Option<&Path>) -> Result<Option<Arc<KeyLogWriter>>, String> {
    let writer = match path {
        Some(p) => KeyLogWriter::to_file(p)
            .map(Some)
            .map_err(|e| format!("--keylog {}: {e}", p.display()))?,
        None => KeyLogWriter::from_env().map_err(|e| format!("{SSLKEYLOGFILE}: {e}"))?,
    };
    Ok(writer.map(Arc::new))
}

#[derive(Args)]
pub struct ProbeArgs {
    /// http:// or https:// URL
    pub url: String,
    /// Number of requests
    #[arg(short = 'n', long = "requests", default_value_t = 5)]
    pub requests: u32,
    /// A new connection for every request (default: one reused connection)
    #[arg(long)]
    pub fresh: bool,
    #[command(flatten)]
    pub request: RequestArgs,
    /// curl-style write-out per request: '%{time_total}\n', '%{json}'
    #[arg(short = 'w', long = "write-out")]
    pub write_out: Option<String>,
    /// Exit 1 when any request breaks a limit: 'total<2s,ttfb<500ms'
    /// (dns, connect, tls, send, wait, receive, total, ttfb)
    #[arg(long)]
    pub budget: Option<String>,
    /// Print the JSON report instead of text
    #[arg(long)]
    pub json: bool,
    /// Append the TLS secrets to FILE, NSS key log format (default: $SSLKEYLOGFILE, as curl)
    #[arg(long, value_name = "FILE")]
    pub keylog: Option<PathBuf>,
}

pub fn run(args: ProbeArgs) -> u8 {
    let spec = match args.request.spec() {
        Ok(s) => s,
        Err(e) => return usage(&e),
    };
    let rules = match args
        .budget
        .as_deref()
        .map(|b| parse_rules(b, BUDGET_METRICS))
    {
        Some(Err(e)) => return usage(&format!("--budget: {e}")),
        Some(Ok(r)) => r,
        None => Vec::new(),
    };
    if args.requests == 0 {
        return usage("-n must be at least 1");
    }
    let keylog = match keylog_writer(args.keylog.as_deref()) {
        Ok(k) => k,
        Err(e) => return usage(&e),
    };
    let opts = ProbeOptions {
        url: args.url.clone(),
        requests: args.requests,
        fresh: args.fresh,
        spec,
        tls: TlsOptions {
            keylog,
            ..args.request.tls()
        },
    };
    let run = runtime(1).block_on(probe_until(&opts, ctrl_c()));
    let checks = check_budget(&rules, &run.requests);
    let report = report(&args, &run, checks);
    if args.json {
        println!("{}", to_json(&report));
    } else if let Some(fmt) = &args.write_out {
        for r in &run.requests {
            print!("{}", writeout::expand(fmt, r));
        }
    } else {
        print!("{}", table::text(&header(&args, &opts, &run), &report));
    }
    exit_code(&run, &report.checks)
}

pub fn usage(msg: &str) -> u8 {
    eprintln!("whyslow: {msg}");
    EXIT_USAGE
}

fn exit_code(run: &ProbeRun, checks: &[CheckResult]) -> u8 {
    if let Some(e) = &run.error {
        if !run.requests.is_empty() || !checks.is_empty() {
            eprintln!("whyslow: request {} {e}", run.requests.len() + 1);
        } else {
            eprintln!("whyslow: {e}");
        }
        return e.kind.exit_code() as u8;
    }
    if checks.iter().any(|c| !c.passed) {
        return EXIT_BREACH;
    }
    0
}

fn report(args: &ProbeArgs, run: &ProbeRun, checks: Vec<CheckResult>) -> Report {
    let mut r = Report::new("probe", Some(redact_url(&args.url)));
    let label = if args.fresh { "fresh" } else { "reused" };
    r.sections.push(ReportSection {
        label: label.into(),
        requests: run.requests.clone(),
    });
    r.checks = checks;
    r.findings
        .extend(whyslow_detect::probe_pattern::delayed_ack_finding(
            &run.requests,
            &redact_url(&args.url),
        ));
    if let Some(e) = &run.error {
        r.errors
            .push(format!("request {}: {e}", run.requests.len() + 1));
    }
    r
}

/// The first line of the text: what was asked, as a person would say it.
fn header(args: &ProbeArgs, opts: &ProbeOptions, run: &ProbeRun) -> String {
    let spec = &opts.spec;
    format!(
        "{} {}  {} request(s), {} connection(s) opened, TCP_NODELAY {}, {} writes",
        spec.method,
        redact_url(&args.url),
        run.requests.len(),
        run.connections_opened,
        if spec.nodelay { "on" } else { "off" },
        if spec.write == WritePattern::Split && !spec.body.is_empty() {
            "split"
        } else {
            "coalesced"
        },
    )
}
