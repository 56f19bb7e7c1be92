//! Attribution held to what the apps recorded out of band: each call an
//! app made for a request, matched to its exchange in the analyzed
//! timeline, and the request whyslow gave that exchange compared with the
//! one that made it.

use serde_json::Value;
use std::collections::HashMap;
use std::path::Path;
use whyslow_lab::truth::{CallTruth, RequestTruth};

/// What a test app wrote (apps/truth.py): one JSON request per line.
pub fn read_app_truth(path: &Path) -> Vec<RequestTruth> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let field = |v: &Value, name: &str| v[name].as_u64().unwrap_or_else(|| panic!("{name} in {v}"));
    text.lines()
        .map(|line| {
            let r: Value = serde_json::from_str(line).unwrap();
            let calls = r["calls"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| CallTruth {
                    local_port: field(c, "local_port") as u16,
                    udp: false,
                    stream: None,
                    seq: field(c, "seq"),
                    sent_us: field(c, "sent_us"),
                    done_us: field(c, "done_us"),
                })
                .collect();
            RequestTruth {
                client_port: field(&r, "client_port") as u16,
                received_us: field(&r, "received_us"),
                calls,
            }
        })
        .collect()
}

/// Per request the app served, the time it waited for a pooled connection
/// with all of them checked out (`pool_wait_us`, apps/truth.py): the app's
/// own measure of pool queueing, 0 where it keeps no pool.
pub fn app_pool_waits(path: &Path) -> Vec<u64> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .map(|line| {
            let r: Value = serde_json::from_str(line).unwrap();
            r["pool_wait_us"].as_u64().unwrap_or(0)
        })
        .collect()
}

/// Whether some inbound request began before another was answered.
pub fn requests_overlapped(report: &Value) -> bool {
    let mut spans: Vec<(u64, u64)> = report["timeline"]["exchanges"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["role"] == "inbound")
        .filter_map(|e| {
            Some((
                e["request_first_at_us"].as_u64()?,
                e["response_first_at_us"].as_u64()?,
            ))
        })
        .collect();
    spans.sort_unstable();
    spans.windows(2).any(|w| w[1].0 < w[0].1)
}

/// A request's own time by the app's clock (apps/truth.py): from reading
/// it to having answered, less its calls (their union) and its waits for a
/// pooled connection. Per line of the truth file.
#[derive(Debug, Clone, Copy)]
pub struct AppOwnTime {
    pub client_port: u16,
    pub received_us: u64,
    pub own_us: u64,
}

pub fn read_app_own_times(path: &Path) -> Vec<AppOwnTime> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .filter_map(|line| {
            let r: Value = serde_json::from_str(line).ok()?;
            let received = r["received_us"].as_u64()?;
            let answered = r["answered_us"].as_u64()?;
            let mut calls: Vec<(u64, u64)> = r["calls"]
                .as_array()?
                .iter()
                .filter_map(|c| Some((c["sent_us"].as_u64()?, c["done_us"].as_u64()?)))
                .collect();
            calls.sort_unstable();
            let (mut in_calls, mut reach) = (0, 0);
            for (sent, done) in calls {
                let from = sent.max(reach);
                in_calls += done.saturating_sub(from);
                reach = reach.max(done);
            }
            let waited = r["pool_wait_us"].as_u64().unwrap_or(0);
            Some(AppOwnTime {
                client_port: r["client_port"].as_u64()? as u16,
                received_us: received,
                own_us: answered
                    .saturating_sub(received)
                    .saturating_sub(in_calls + waited),
            })
        })
        .collect()
}

/// Whether every request a `server_time` finding of `report` cites spent,
/// by the app's own clock (`own`), at least half the time whyslow says it
/// spent in itself: the service's own time was real, not a wait whyslow
/// could not see. False without such a finding.
pub fn server_time_confirmed(report: &Value, own: &[AppOwnTime]) -> bool {
    let Some(f) = report["findings"]
        .as_array()
        .and_then(|fs| fs.iter().find(|f| f["kind"] == "server_time"))
    else {
        return false;
    };
    let timeline = &report["timeline"];
    let client_port = client_ports(timeline);
    let exchange: HashMap<u64, &Value> = timeline["exchanges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["id"].as_u64().unwrap(), e))
        .collect();
    let cited = f["evidence"].as_array().unwrap();
    !cited.is_empty()
        && cited.iter().all(|ev| {
            let (Some(id), Some(said)) = (ev["id"].as_u64(), ev["facts"]["own_us"].as_f64()) else {
                return false;
            };
            let e = exchange[&id];
            let (_, port) = client_port[&e["connection"].as_u64().unwrap()];
            let (from, to) = (
                e["request_last_at_us"].as_u64().unwrap(),
                e["response_first_at_us"].as_u64().unwrap(),
            );
            own.iter()
                .find(|o| o.client_port == port && (from..=to).contains(&o.received_us))
                .is_some_and(|o| o.own_us as f64 >= 0.5 * said)
        })
}

/// How attribution did against the truth.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Score {
    /// Calls matched to a request of the truth.
    pub calls: usize,
    /// Of them, given to a request.
    pub given: usize,
    /// Of those, given to another request than the one that made them.
    pub wrong: usize,
    /// Of them, left ambiguous.
    pub ambiguous: usize,
}

impl Score {
    pub fn wrong_share(&self) -> f64 {
        self.wrong as f64 / self.given.max(1) as f64
    }

    /// Share of the calls given to a request.
    pub fn coverage(&self) -> f64 {
        self.given as f64 / self.calls.max(1) as f64
    }
}

/// A connection end's port, as apps/truth.py records it: for the address
/// that stands for a Unix-domain socket, its inode's low 15 bits.
fn port_of(addr: &Value) -> u16 {
    let a: std::net::SocketAddr = addr.as_str().unwrap().parse().unwrap();
    match a.ip() {
        std::net::IpAddr::V6(ip) if whyslow_model::unix_socket::is_unix_socket(a) => {
            ip.segments()[7] & 0x7FFF
        }
        _ => a.port(),
    }
}

/// Each connection's client port (`port_of`), by connection id.
/// A client's end: (UDP, port). A UDP socket and a TCP connection may
/// hold one port number at once.
type End = (bool, u16);

fn client_ports(timeline: &Value) -> HashMap<u64, End> {
    timeline["connections"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            let udp = c["udp"].as_bool().unwrap_or(false);
            (c["id"].as_u64().unwrap(), (udp, port_of(&c["client"])))
        })
        .collect()
}

/// An exchange's span: first request byte → last byte seen.
fn span(e: &Value) -> (u64, u64) {
    let start = e["request_first_at_us"].as_u64().unwrap();
    let end = e["response_last_at_us"]
        .as_u64()
        .or(e["request_last_at_us"].as_u64())
        .unwrap();
    (start, end)
}

/// Scores the timeline of `report` against `truth`.
pub fn score(report: &Value, truth: &[RequestTruth]) -> Score {
    let mut score = Score::default();
    for (e, request) in made_for(report, truth) {
        score.calls += 1;
        match e["parent"].as_u64() {
            Some(p) => {
                score.given += 1;
                score.wrong += usize::from(p != request);
            }
            None => score.ambiguous += usize::from(e["attribution"] == "ambiguous"),
        }
    }
    score
}

/// Of the calls matched to the truth, those in a trace group that holds
/// exactly one request's calls, all of them; and all matched calls.
pub fn in_exact_trace_groups(report: &Value, truth: &[RequestTruth]) -> (usize, usize) {
    let made = made_for(report, truth);
    let mut groups: HashMap<&str, Vec<u64>> = HashMap::new();
    let mut per_request: HashMap<u64, usize> = HashMap::new();
    for (e, request) in &made {
        *per_request.entry(*request).or_default() += 1;
        if let Some(trace) = e["trace"].as_str() {
            groups.entry(trace).or_default().push(*request);
        }
    }
    let exact: usize = groups
        .values()
        .filter(|g| g.iter().all(|r| *r == g[0]) && per_request[&g[0]] == g.len())
        .map(Vec::len)
        .sum();
    (exact, made.len())
}

/// Each outbound exchange of `report` matched to a call of `truth`, with
/// the inbound exchange (its id) of the request that made it.
pub fn made_for<'a>(report: &'a Value, truth: &[RequestTruth]) -> Vec<(&'a Value, u64)> {
    let timeline = &report["timeline"];
    let client_port = client_ports(timeline);
    // Per client end: its exchanges by start.
    let mut on_port: HashMap<End, Vec<&Value>> = HashMap::new();
    for e in timeline["exchanges"].as_array().unwrap() {
        let port = client_port[&e["connection"].as_u64().unwrap()];
        on_port.entry(port).or_default().push(e);
    }
    for list in on_port.values_mut() {
        list.sort_by_key(|e| span(e));
    }
    // Each truth request's inbound exchange: the last on its client's
    // connection whose request was whole before the app read it.
    let inbound: Vec<Option<u64>> = truth
        .iter()
        .map(|r| {
            on_port
                .get(&(false, r.client_port))?
                .iter()
                .filter(|e| e["role"] == "inbound")
                .rfind(|e| e["request_last_at_us"].as_u64().unwrap() <= r.received_us)
                .map(|e| e["id"].as_u64().unwrap())
        })
        .collect();
    // Per local port: the calls made on it, with the request that made each.
    let mut calls_on: HashMap<End, Vec<(CallTruth, usize)>> = HashMap::new();
    for (i, r) in truth.iter().enumerate() {
        for c in &r.calls {
            calls_on
                .entry((c.udp, c.local_port))
                .or_default()
                .push((*c, i));
        }
    }
    let mut made = Vec::new();
    for (port, mut calls) in calls_on {
        calls.sort_by_key(|(c, _)| c.seq);
        let exchanges: Vec<&Value> = on_port
            .get(&port)
            .map(|l| {
                l.iter()
                    .copied()
                    .filter(|e| e["role"] == "outbound")
                    .collect()
            })
            .unwrap_or_default();
        for (n, e) in exchanges.iter().enumerate() {
            let request = made_by(e, n, &exchanges, &calls).and_then(|i| inbound[i]);
            made.extend(request.map(|r| (*e, r)));
        }
    }
    made
}

/// The truth request that made the `n`th outbound exchange on a connection:
/// by HTTP/2 stream; by order when the connection carried exactly the
/// recorded calls (one exchange each); else the one call whose send and
/// answer enclose the exchange (a call of several exchanges: a statement
/// prepared, then run).
fn made_by(
    e: &Value,
    n: usize,
    exchanges: &[&Value],
    calls: &[(CallTruth, usize)],
) -> Option<usize> {
    if let Some(stream) = e["stream"].as_u64() {
        let same = |c: &&(CallTruth, usize)| c.0.stream == Some(stream as u32);
        return calls.iter().find(same).map(|c| c.1);
    }
    if exchanges.len() == calls.len() {
        return Some(calls[n].1);
    }
    let (start, end) = span(e);
    let mut enclosing = calls
        .iter()
        .filter(|(c, _)| c.sent_us <= start && end <= c.done_us);
    match (enclosing.next(), enclosing.next()) {
        (Some(c), None) => Some(c.1),
        _ => None,
    }
}

/// Every outbound call of the report's timeline and its attribution level.
pub fn attribution_levels(report: &Value) -> Vec<String> {
    report["timeline"]["exchanges"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["role"] == "outbound")
        .map(|e| e["attribution"].as_str().unwrap_or("none").to_string())
        .collect()
}

/// Share of the calls that may be given by something other than their
/// thread: the statements on a pooled connection opened before the
/// capture began (its first statement has no response to bracket).
pub const MIN_BY_THREAD: f64 = 0.99;

/// eBPF runs: requests overlapped, every exchange was joined to its socket calls, and
/// at least `MIN_BY_THREAD` of the calls were given by thread, none wrongly,
/// against the app's own record.
pub fn held_to_truth_by_thread(run: &str, report: &Value, truth_file: &Path) {
    let truth = read_app_truth(truth_file);
    assert!(
        requests_overlapped(report),
        "{run}: requests never overlapped"
    );
    let threads = &report["capture"]["threads"];
    assert!(
        threads["exchanges_joined"].as_u64() > Some(0),
        "{run}: {threads}"
    );
    let s = score(report, &truth);
    let recorded: usize = truth.iter().map(|r| r.calls.len()).sum();
    let levels = attribution_levels(report);
    let by_thread = levels.iter().filter(|l| *l == "thread").count();
    eprintln!(
        "{run}: {} requests, {recorded} calls recorded, {s:?}, {by_thread} of {} by thread",
        truth.len(),
        levels.len()
    );
    assert!(s.calls >= recorded, "{run}: {recorded} recorded, {s:?}");
    assert_eq!(s.wrong, 0, "{run}: {s:?}");
    assert!(s.coverage() >= MIN_BY_THREAD, "{run}: {s:?}");
    assert!(
        by_thread as f64 >= MIN_BY_THREAD * levels.len() as f64,
        "{run}: {by_thread} of {} by thread",
        levels.len()
    );
}

/// Of the calls given to the wrong request, how many each rule gave
/// (`rule`): printed beside a failing score, so that it says which
/// evidence misled.
pub fn wrong_by_rule(report: &Value, truth: &[RequestTruth]) -> HashMap<String, usize> {
    let mut by = HashMap::new();
    for (e, request) in made_for(report, truth) {
        if e["parent"].as_u64().is_some_and(|p| p != request) {
            let rule = e["rule"].as_str().unwrap_or("?").to_string();
            *by.entry(rule).or_default() += 1;
        }
    }
    by
}
