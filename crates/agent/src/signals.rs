//! A window's findings and numbers as OTLP logs and metrics, one resource
//! per workload (container and pod as the semantic conventions name them):
//! each finding a log record (kind, time lost, subject, request, summary),
//! and metrics of time lost per cause kind and server, requests and their
//! latency per request kind, and the agent's own cost.

use whyslow_model::{AgentWindow, WorkloadWindow};
use whyslow_otlp::proto::{AnyValue, InstrumentationScope, KeyValue, Resource, Value};
use whyslow_otlp::proto_signals::*;

/// `service.name` of what the agent sends.
pub const SERVICE: &str = "whyslow-agent";

fn resource(w: &WorkloadWindow) -> Resource {
    let mut attributes = vec![
        KeyValue::string("service.name", SERVICE),
        KeyValue::string("whyslow.workload", &w.label),
    ];
    if let Some(wl) = &w.workload {
        if let Some(c) = &wl.container {
            attributes.push(KeyValue::string("container.id", &c.id));
            attributes.push(KeyValue::string("container.runtime", &c.runtime));
        }
        if let Some(p) = &wl.pod {
            attributes.push(KeyValue::string("k8s.namespace.name", &p.namespace));
            attributes.push(KeyValue::string("k8s.pod.name", &p.name));
            attributes.push(KeyValue::string("k8s.pod.uid", &p.uid));
        }
        attributes.push(KeyValue::int("process.pid", i64::from(wl.pid)));
    }
    Resource {
        attributes,
        dropped_attributes_count: 0,
    }
}

fn scope() -> Option<InstrumentationScope> {
    Some(InstrumentationScope {
        name: "whyslow".into(),
        version: env!("CARGO_PKG_VERSION").into(),
        ..Default::default()
    })
}

fn ends_ns(w: &AgentWindow) -> (u64, u64) {
    let start = w.start_us * 1000;
    (start, start + (w.seconds * 1e9) as u64)
}

/// One log record per finding of each workload.
pub fn logs(w: &AgentWindow) -> ExportLogsServiceRequest {
    let (_, end) = ends_ns(w);
    let resource_logs = w
        .workloads
        .iter()
        .map(|wl| ResourceLogs {
            resource: Some(resource(wl)),
            scope_logs: vec![ScopeLogs {
                scope: scope(),
                log_records: wl
                    .findings
                    .iter()
                    .map(|f| LogRecord {
                        time_unix_nano: end,
                        observed_time_unix_nano: end,
                        severity_number: SEVERITY_WARN,
                        severity_text: "WARN".into(),
                        event_name: "whyslow.finding".into(),
                        body: Some(AnyValue {
                            value: Some(Value::StringValue(f.summary.clone())),
                        }),
                        attributes: vec![
                            KeyValue::string("whyslow.finding.kind", f.kind.as_str()),
                            KeyValue::int("whyslow.time_lost_us", f.time_lost_us as i64),
                            KeyValue::string("whyslow.subject", &f.subject),
                            KeyValue::string("whyslow.request", &f.request),
                            KeyValue::int("whyslow.window", w.window as i64),
                        ],
                    })
                    .collect(),
            }],
        })
        .collect();
    ExportLogsServiceRequest { resource_logs }
}

fn point(start: u64, end: u64, value: Number, attributes: Vec<KeyValue>) -> NumberDataPoint {
    NumberDataPoint {
        attributes,
        start_time_unix_nano: start,
        time_unix_nano: end,
        value: Some(value),
    }
}

fn sum(name: &str, unit: &str, points: Vec<NumberDataPoint>) -> Metric {
    Metric {
        name: name.into(),
        unit: unit.into(),
        data: Some(Data::Sum(Sum {
            data_points: points,
            aggregation_temporality: DELTA,
            is_monotonic: true,
        })),
        ..Default::default()
    }
}

fn gauge(name: &str, unit: &str, points: Vec<NumberDataPoint>) -> Metric {
    Metric {
        name: name.into(),
        unit: unit.into(),
        data: Some(Data::Gauge(Gauge {
            data_points: points,
        })),
        ..Default::default()
    }
}

fn workload_metrics(w: &AgentWindow, wl: &WorkloadWindow) -> Vec<Metric> {
    let (start, end) = ends_ns(w);
    let lost = wl
        .findings
        .iter()
        .map(|f| {
            let server = f.subject.split(' ').next().unwrap_or("").to_string();
            let attributes = vec![
                KeyValue::string("whyslow.finding.kind", f.kind.as_str()),
                KeyValue::string("server.address", server),
            ];
            point(start, end, Number::AsInt(f.time_lost_us as i64), attributes)
        })
        .collect();
    let kind = |r: &whyslow_model::RequestKind| vec![KeyValue::string("whyslow.request", &r.kind)];
    let requests = wl
        .requests
        .iter()
        .map(|r| point(start, end, Number::AsInt(r.count as i64), kind(r)))
        .collect();
    let latency = wl
        .requests
        .iter()
        .flat_map(|r| {
            [("p50", r.p50_us), ("p99", r.p99_us)].map(|(q, us)| {
                let mut a = kind(r);
                a.push(KeyValue::string("whyslow.quantile", q));
                point(start, end, Number::AsInt(us as i64), a)
            })
        })
        .collect();
    vec![
        sum("whyslow.time_lost", "us", lost),
        sum("whyslow.requests", "{request}", requests),
        gauge("whyslow.request.latency", "us", latency),
    ]
}

/// Each workload's metrics, and the agent's own cost as the first resource's.
pub fn metrics(w: &AgentWindow) -> ExportMetricsServiceRequest {
    let (start, end) = ends_ns(w);
    let resource_metrics = w
        .workloads
        .iter()
        .enumerate()
        .map(|(i, wl)| {
            let mut metrics = workload_metrics(w, wl);
            if i == 0 {
                metrics.push(gauge(
                    "whyslow.agent.cpu",
                    "1",
                    vec![point(
                        start,
                        end,
                        Number::AsDouble(w.agent.cpu_share),
                        vec![],
                    )],
                ));
                metrics.push(gauge(
                    "whyslow.agent.memory",
                    "By",
                    vec![point(
                        start,
                        end,
                        Number::AsInt(w.agent.anon_bytes as i64),
                        vec![],
                    )],
                ));
            }
            ResourceMetrics {
                resource: Some(resource(wl)),
                scope_metrics: vec![ScopeMetrics {
                    scope: scope(),
                    metrics,
                }],
            }
        })
        .collect();
    ExportMetricsServiceRequest { resource_metrics }
}

pub fn log_count(r: &ExportLogsServiceRequest) -> u64 {
    r.resource_logs
        .iter()
        .flat_map(|r| &r.scope_logs)
        .map(|s| s.log_records.len() as u64)
        .sum()
}

pub fn point_count(r: &ExportMetricsServiceRequest) -> u64 {
    r.resource_metrics
        .iter()
        .flat_map(|r| &r.scope_metrics)
        .flat_map(|s| &s.metrics)
        .map(|m| match &m.data {
            Some(Data::Gauge(g)) => g.data_points.len() as u64,
            Some(Data::Sum(s)) => s.data_points.len() as u64,
            None => 0,
        })
        .sum()
}
