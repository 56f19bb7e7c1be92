//! Each command's arguments: its own flags, and the shared groups it flattens.

use super::keylog::{KeyLogIn, KeyLogOut};
use super::limits::LimitArgs;
use super::output::{Json, Output, TimelineOutput};
use super::request::RequestArgs;
use super::target::TargetArgs;
use clap::{Args, Subcommand};
use std::path::PathBuf;

#[derive(Args, Debug)]
#[command(after_help = "Examples:
  whyslow probe -n 5 http://127.0.0.1:8080/
  whyslow probe -X POST -d @body.json --nodelay off --write split http://127.0.0.1:8080/search
  whyslow probe --budget 'total<2s,ttfb<500ms' https://example.com/
  whyslow probe -k --keylog-out keys.log https://127.0.0.1:8443/")]
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
    #[command(flatten)]
    pub output: Json,
    #[command(flatten)]
    pub keylog: KeyLogOut,
}

#[derive(Args, Debug)]
#[command(
    after_help = "Examples:\n  whyslow capture -i lo -p 8080 --duration 10s -w stall.pcapng\n  whyslow capture --container 3f2a9c0d -i lo --duration 30s -w pod.pcapng\n  whyslow capture -p 8080 -w run.pcapng -- curl -s http://127.0.0.1:8080/ http://127.0.0.1:8080/"
)]
pub struct CaptureArgs {
    /// Interface (lo, eth0, any)
    #[arg(short = 'i', long, default_value = "lo")]
    pub iface: String,
    /// TCP port to capture, as source or destination (repeatable; none = all TCP)
    #[arg(short = 'p', long = "port")]
    pub ports: Vec<u16>,
    /// Stop after this long (10s, 500ms)
    #[arg(long, value_parser = whyslow_check::parse_duration)]
    pub duration: Option<std::time::Duration>,
    /// pcapng file to write (Wireshark and tshark read it)
    #[arg(short = 'w', long = "write")]
    pub file: PathBuf,
    /// Also trace socket calls with their thread (eBPF, root) into FILE.events,
    /// which analyze reads: the --pid processes or --container, else the
    /// command, else all; on the -p ports only
    #[arg(long)]
    pub ebpf: bool,
    #[command(flatten)]
    pub target: TargetArgs,
    /// Capture while this command runs: `-- COMMAND ARGS…`
    #[arg(last = true)]
    pub command: Vec<String>,
}

#[derive(Args, Debug)]
#[command(after_help = "Examples:
  whyslow agent --container 3f2a9c0d --window 60s --keep 10m -w /var/lib/whyslow
  whyslow agent -i any --otlp-endpoint http://127.0.0.1:4318 --json")]
pub struct AgentArgs {
    #[command(flatten)]
    pub target: TargetArgs,
    /// Interface, in each workload's network namespace (any: all of them)
    #[arg(short = 'i', long, default_value = "any")]
    pub iface: String,
    /// TCP port to capture (repeatable; none = all TCP)
    #[arg(short = 'p', long = "port")]
    pub ports: Vec<u16>,
    /// Port(s) of the service under investigation (default: found from each window)
    #[arg(long, value_name = "PORT", value_delimiter = ',')]
    pub service: Vec<u16>,
    /// Length of a window: each is analyzed and said once it ends
    #[arg(long, default_value = "60s", value_parser = whyslow_check::parse_duration)]
    pub window: std::time::Duration,
    /// Stop after this many windows (default: at Ctrl-C or SIGTERM)
    #[arg(long, value_name = "N")]
    pub windows: Option<u64>,
    /// Keep the windows' pcapng files of this last stretch of time on disk
    #[arg(long, default_value = "10m", value_parser = whyslow_check::parse_duration)]
    pub keep: std::time::Duration,
    /// Most bytes of pcapng kept on disk, all workloads together (500M, 2G)
    #[arg(long, default_value = "1G", value_parser = whyslow_check::parse_size)]
    pub keep_size: u64,
    /// Directory of the kept windows (WORKLOAD-WINDOW.pcapng)
    #[arg(short = 'w', long = "dir", value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// Also trace each workload's socket calls with eBPF (root): a container's cgroup, a --pid process, or with none every process; an events file beside each window's pcapng
    #[arg(long)]
    pub ebpf: bool,
    /// Each window's spans, findings as log records and metrics, sent as OTLP
    #[command(flatten)]
    pub export: super::otlp::OtlpExport,
    /// One JSON record per window, a line each
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct AnalyzeArgs {
    /// pcap or pcapng file (tcpdump -w, Wireshark, whyslow capture), or OTLP
    /// traces (the Collector's file exporter: JSON lines or framed protobuf, gzip or not).
    /// Several captures: one host each, joined into one analysis by the
    /// connections they share (the host named by the file's stem)
    #[arg(required_unless_present = "host", value_name = "FILE")]
    pub files: Vec<PathBuf>,
    /// One host's capture, named: NAME=FILE (repeatable; with the FILEs)
    #[arg(long = "host", value_name = "NAME=FILE", value_parser = parse_host)]
    pub host: Vec<(String, PathBuf)>,
    /// Port(s) of the service under investigation: its exchanges are the
    /// inbound requests, the others its backing calls (default: found from
    /// the wire, as the server whose requests enclose other servers' exchanges)
    #[arg(long, value_name = "PORT", value_delimiter = ',')]
    pub service: Vec<u16>,
    /// Of OTLP traces: the service (service.name) whose requests are analyzed
    /// (default: the one whose requests made the most calls)
    #[arg(long, value_name = "NAME")]
    pub service_name: Option<String>,
    /// eBPF events of capture --ebpf (default: FILE.events, if there)
    #[arg(long, value_name = "EVENTS")]
    pub events: Option<PathBuf>,
    #[command(flatten)]
    pub keylog: KeyLogIn,
    #[command(flatten)]
    pub limits: LimitArgs,
    #[command(flatten)]
    pub output: TimelineOutput,
}

#[derive(Args, Debug)]
#[command(
    after_help = "Example:\n  whyslow receive --otlp 127.0.0.1:4318 --otlp-grpc 127.0.0.1:4317 --duration 60s --html spans.html\n  \
    (then OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318 OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf)"
)]
pub struct ReceiveArgs {
    /// Address to take OTLP/HTTP on: POST /v1/traces, protobuf or JSON, gzip or not
    #[arg(long, value_name = "ADDR", required_unless_present = "otlp_grpc")]
    pub otlp: Option<std::net::SocketAddr>,
    /// Address to take OTLP/gRPC on (TraceService/Export, gzip or not; 4317 by convention)
    #[arg(long, value_name = "ADDR")]
    pub otlp_grpc: Option<std::net::SocketAddr>,
    /// Stop after this long, then analyze (default: at Ctrl-C)
    #[arg(long, value_parser = whyslow_check::parse_duration)]
    pub duration: Option<std::time::Duration>,
    /// The service (service.name) whose requests are analyzed (default: the
    /// one whose requests made the most calls)
    #[arg(long, value_name = "NAME")]
    pub service_name: Option<String>,
    /// Print the exchanges read from the spans (text: one line each; JSON: in the document)
    #[arg(long)]
    pub timeline: bool,
    #[command(flatten)]
    pub output: Output,
}

#[derive(Args, Debug)]
pub struct CompareArgs {
    /// The baseline: a `load -o` result file, or `--json` of probe, diagnose or load
    pub a: PathBuf,
    /// The candidate, from the same command
    pub b: PathBuf,
    /// Exit 1 on a significant regression past a limit: 'p99>+10%,wait.p50>+5ms';
    /// for diagnose results a metric names its section ('split.total.p50>+10%'),
    /// and a rule naming none holds in every section
    #[arg(long)]
    pub fail_if: Option<String>,
    #[command(flatten)]
    pub output: Output,
}

#[derive(Args, Debug)]
pub struct DemoArgs {
    /// Only these scenarios (repeatable)
    #[arg(long = "only")]
    pub only: Vec<String>,
    /// Keep each diagnosis's capture in DIR (SCENARIO-VARIANT[-under-load].pcapng)
    #[arg(long, value_name = "DIR")]
    pub save: Option<PathBuf>,
    #[command(flatten)]
    pub output: Output,
}

#[derive(Args, Debug)]
#[command(after_help = "Examples:
  whyslow diagnose http://127.0.0.1:8080/
  whyslow diagnose -X POST -d @body.json -p 5432 --save run.pcapng http://127.0.0.1:8080/checkout
  whyslow diagnose --rate 50 --duration 10s --html report.html http://127.0.0.1:8080/
  whyslow diagnose -k --keylog service-keys.log https://127.0.0.1:8443/")]
pub struct DiagnoseArgs {
    /// http:// or https:// URL
    pub url: String,
    /// Requests per client pattern
    #[arg(short = 'n', long = "requests", default_value_t = 5)]
    pub requests: u32,
    #[command(flatten)]
    pub request: RequestArgs,
    /// Also capture this port: a backing service the target calls (repeatable)
    #[arg(short = 'p', long = "port")]
    pub ports: Vec<u16>,
    /// Capture interface (default: lo for loopback targets, any otherwise)
    #[arg(short = 'i', long)]
    pub iface: Option<String>,
    /// Keep the capture in this pcapng file
    #[arg(short = 'w', long = "save")]
    pub save: Option<PathBuf>,
    /// Client-side timing only
    #[arg(long)]
    pub no_capture: bool,
    /// Trace the target's socket calls with eBPF (root): calls given by thread
    #[arg(long, conflicts_with = "no_capture")]
    pub ebpf: bool,
    // The URL is reached and captured inside the workload's network
    // namespace: a container's own loopback.
    #[command(flatten)]
    pub target: TargetArgs,
    /// Add a load phase under capture: constant rate, requests/s (open model)
    #[arg(long)]
    pub rate: Option<f64>,
    /// Length of the load phase
    #[arg(long, default_value = "10s", requires = "rate")]
    pub duration: String,
    /// Connections of the load phase
    #[arg(short = 'c', long, default_value_t = 8, requires = "rate")]
    pub connections: usize,
    #[command(flatten)]
    pub keylog: KeyLogIn,
    #[command(flatten)]
    pub limits: LimitArgs,
    #[command(flatten)]
    pub output: TimelineOutput,
}

#[derive(Subcommand, Debug)]
pub enum LabCommand {
    /// List the scenarios
    List,
    /// Start a scenario, print its URL, serve until Ctrl-C
    Run {
        name: String,
        /// Run the fixed variant
        #[arg(long)]
        fixed: bool,
        /// Every hop over TLS (scenarios that have that variant); the lab's
        /// secrets go to a key log for `diagnose --keylog` and `analyze --keylog`
        #[arg(long)]
        tls: bool,
    },
    /// A slow link (where the kernel has no netem): TAP devices A and B, each
    /// frame carried to the other DELAY late; until stopped
    Link {
        a: String,
        b: String,
        #[arg(long, value_parser = whyslow_check::parse_duration)]
        delay: std::time::Duration,
    },
    /// A scenario on several hosts (root: network namespaces), each host
    /// captured apart into DIR/HOST.pcapng, to `analyze` together
    Hosts {
        /// three-tier or slow-link
        name: String,
        #[arg(long)]
        fixed: bool,
        #[arg(short = 'c', long, default_value_t = 1)]
        clients: u32,
        #[arg(short = 'n', long, default_value_t = 30)]
        requests: u64,
        #[arg(long, value_parser = whyslow_check::parse_duration)]
        duration: Option<std::time::Duration>,
        #[arg(short = 'w', long = "write")]
        dir: std::path::PathBuf,
    },
    /// One service of a scenario on several hosts: front, page, api, parts, db
    #[command(hide = true)]
    Tier {
        kind: String,
        #[arg(long)]
        listen: std::net::SocketAddr,
        #[arg(long)]
        to: Option<std::net::SocketAddr>,
        #[arg(long)]
        fixed: bool,
    },
}

#[derive(Args, Debug)]
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
    /// Write the result file (with histograms; `whyslow merge` combines them)
    /// One of several generators making one run (a Kubernetes Indexed Job):
    /// INDEX/COUNT, or COUNT with JOB_COMPLETION_INDEX set. Takes every
    /// COUNT-th slot of the schedule and its share of -c and -n; `merge`
    /// of the result files is the whole run
    #[arg(long, value_name = "INDEX/COUNT", conflicts_with = "find_max")]
    pub segment: Option<String>,
    #[arg(short = 'o', long = "output")]
    pub result: Option<PathBuf>,
    #[command(flatten)]
    pub output: Output,
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
    #[command(flatten)]
    pub keylog: KeyLogOut,
    #[command(flatten)]
    pub request: RequestArgs,
}

#[derive(Args, Debug)]
pub struct UseArgs {
    /// How long to sample (at least one interval)
    #[arg(long, default_value = "1s")]
    pub duration: String,
    /// Sampling interval
    #[arg(long, default_value = "1s")]
    pub interval: String,
    #[command(flatten)]
    pub output: Json,
}

#[derive(Args, Debug)]
pub struct MergeArgs {
    /// Result files written by `whyslow load -o`
    #[arg(required = true, num_args = 1..)]
    pub files: Vec<PathBuf>,
    /// Write the merged result file here
    #[arg(short = 'o', long = "output")]
    pub result: Option<PathBuf>,
    /// Check the merged result: 'p99<200ms,errors<0.1%' (exit 1 when broken)
    #[arg(long)]
    pub slo: Option<String>,
    #[command(flatten)]
    pub output: Json,
}

#[derive(Args, Debug)]
#[command(after_help = "Install:
  whyslow completions bash > /etc/bash_completion.d/whyslow
  whyslow completions zsh > \"${fpath[1]}/_whyslow\"
  whyslow completions fish > ~/.config/fish/completions/whyslow.fish")]
pub struct CompletionsArgs {
    /// The shell to complete in
    pub shell: clap_complete::Shell,
}

/// `NAME=FILE` of `analyze --host`.
fn parse_host(s: &str) -> Result<(String, PathBuf), String> {
    match s.split_once('=') {
        Some((name, file)) if !name.is_empty() && !file.is_empty() => {
            Ok((name.to_string(), PathBuf::from(file)))
        }
        _ => Err(format!("{s}: expected NAME=FILE")),
    }
}
