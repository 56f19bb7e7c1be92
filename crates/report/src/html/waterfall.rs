//! The waterfall of one inbound request: its own bar, then its backing calls,
//! a row each (one lane per connection when there are too many), each call
//! split into send, wait and receive. A call that waited for a connection of
//! its pool has that wait before its bar, as a browser's "queueing" bar:
//! from when its request had it due (`pool_wait_from_us`) to when it was
//! sent. Head-of-line waits show as a call whose send starts long before
//! its answer.

use super::svg::{ticks, Scale, Svg};
use super::{escape, legend};
use crate::fmt_ms;
use std::collections::BTreeMap;
use std::fmt::Write;
use whyslow_model::{Exchange, ExchangeRole, Protocol, Status, Timeline};

const WIDTH: f64 = 1000.0;
const LABEL: f64 = 260.0;
const ROW: f64 = 22.0;
/// Calls drawn per lane; a storm of hundreds still fits on a screen.
const CALLS_SHOWN: usize = 400;
/// Up to this many calls each get a row (a queue reads as a staircase);
/// more go on one lane per connection, as a screen holds about 40 rows.
const ROWS_PER_CALL_MAX: usize = 40;

fn duration(e: &Exchange) -> u64 {
    e.end_us().saturating_sub(e.request_first_at_us)
}

/// The inbound requests worth drawing: the typical one (median duration)
/// and the slowest, preferring requests that made backing calls.
fn chosen(t: &Timeline) -> Vec<(&'static str, &Exchange)> {
    let with_calls: std::collections::BTreeSet<u32> =
        t.exchanges.iter().filter_map(|e| e.parent).collect();
    let mut inbound: Vec<&Exchange> = t
        .exchanges
        .iter()
        .filter(|e| e.role == ExchangeRole::Inbound && e.response_last_at_us.is_some())
        .collect();
    if inbound.iter().any(|e| with_calls.contains(&e.id)) {
        inbound.retain(|e| with_calls.contains(&e.id));
    }
    inbound.sort_by_key(|e| (duration(e), e.id));
    let Some(last) = inbound.last() else {
        return Vec::new();
    };
    let typical = inbound[whyslow_model::stats::nearest_rank(inbound.len(), 0.5)];
    if typical.id == last.id {
        vec![("the request", typical)]
    } else {
        vec![
            ("a typical request (median)", typical),
            ("the slowest request", last),
        ]
    }
}

pub fn section(out: &mut String, t: &Timeline) {
    let chosen = chosen(t);
    if chosen.is_empty() {
        return;
    }
    out.push_str("<h2 id=\"waterfall\">Waterfall</h2>\n");
    out.push_str(legend());
    for (what, inbound) in chosen {
        let _ = writeln!(
            out,
            "<h3>{what}: #{} {} — {}</h3>",
            inbound.id,
            escape(&inbound.request),
            fmt_ms(duration(inbound))
        );
        out.push_str(&draw(t, inbound));
    }
}

/// The rows of a waterfall: one per call when they fit on a screen, else
/// one lane per connection.
fn rows<'t>(t: &'t Timeline, inbound: &Exchange) -> Vec<(u32, Vec<&'t Exchange>)> {
    let mut calls: Vec<&Exchange> = t
        .exchanges
        .iter()
        .filter(|e| e.parent == Some(inbound.id))
        .collect();
    calls.sort_by_key(|e| (e.request_first_at_us, e.id));
    if calls.len() <= ROWS_PER_CALL_MAX {
        return calls.into_iter().map(|e| (e.connection, vec![e])).collect();
    }
    let mut lanes: BTreeMap<u32, Vec<&Exchange>> = BTreeMap::new();
    for e in calls {
        lanes.entry(e.connection).or_default().push(e);
    }
    let mut lanes: Vec<(u32, Vec<&Exchange>)> = lanes.into_iter().collect();
    lanes.sort_by_key(|(c, calls)| (calls[0].request_first_at_us, *c));
    lanes
}

fn draw(t: &Timeline, inbound: &Exchange) -> String {
    let lanes = rows(t, inbound);
    let all = || lanes.iter().flat_map(|l| l.1.iter());
    let start = all()
        .filter_map(|e| e.pool_wait_from_us)
        .fold(inbound.request_first_at_us, u64::min);
    let end = inbound
        .end_us()
        .max(all().map(|e| e.end_us()).max().unwrap_or(0));
    let span_ms = (end - start).max(1) as f64 / 1000.0;
    let x = Scale {
        from: (0.0, span_ms),
        to: (LABEL, WIDTH - 30.0),
    };
    let height = 30.0 + ROW * (lanes.len() + 1) as f64 + 10.0;
    let mut svg = Svg::new(WIDTH, height);
    for tick in ticks(span_ms, 8) {
        svg.line(x.at(tick), 18.0, x.at(tick), height - 4.0, "grid");
        svg.text(x.at(tick), 12.0, "middle", "", &format!("{tick} ms"));
    }
    let ms = |us: u64| us.saturating_sub(start) as f64 / 1000.0;
    let mut y = 24.0;
    svg.text(
        LABEL - 6.0,
        y + 13.0,
        "end",
        "",
        &format!("inbound #{}", inbound.id),
    );
    bar(&mut svg, &x, y, inbound, &ms, true);
    for (conn, calls) in &lanes {
        y += ROW;
        let label = t
            .connections
            .iter()
            .find(|c| c.id == *conn)
            .map(|c| {
                let what = match calls.len() {
                    1 => String::new(),
                    n => format!(" ({n})"),
                };
                match (c.protocol, calls.as_slice()) {
                    // A lookup's row names its question, before the call
                    // it preceded.
                    (Protocol::Dns, [e]) => format!("dns {} {}", e.request, dns_status(e)),
                    _ => format!("{} {} conn #{conn}{what}", c.protocol.name(), c.server),
                }
            })
            .unwrap_or_else(|| format!("conn #{conn}"));
        svg.text(LABEL - 6.0, y + 13.0, "end", "", &label);
        for e in calls.iter().take(CALLS_SHOWN) {
            queued(&mut svg, &x, y, e, &ms);
            bar(&mut svg, &x, y, e, &ms, false);
        }
    }
    svg.finish(&format!("waterfall of request #{}", inbound.id))
}

/// A call's wait for a connection of its pool, before its bar.
fn queued(svg: &mut Svg, x: &Scale, y: f64, e: &Exchange, ms: &dyn Fn(u64) -> f64) {
    let Some(from) = e.pool_wait_from_us.filter(|&f| f < e.request_first_at_us) else {
        return;
    };
    let title = format!(
        "#{} waited {} for a connection",
        e.id,
        fmt_ms(e.request_first_at_us - from)
    );
    let (a, b) = (x.at(ms(from)), x.at(ms(e.request_first_at_us)));
    svg.rect(a, y + 6.0, b - a, 8.0, "queued", &title);
}

/// A DNS query's answer ("NXDOMAIN"), or that it never came.
fn dns_status(e: &Exchange) -> &str {
    match &e.status {
        Some(Status::Dns(s)) => s,
        _ if e.response_last_at_us.is_none() => "never answered",
        _ => "",
    }
}

/// A DNS query as one bar, sent to answered; one never answered as a mark
/// where it was sent.
fn lookup_bar(svg: &mut Svg, x: &Scale, y: f64, e: &Exchange, ms: &dyn Fn(u64) -> f64) {
    let title = format!(
        "#{} {} {} {}",
        e.id,
        e.request,
        dns_status(e),
        fmt_ms(duration(e))
    );
    let from = x.at(ms(e.request_first_at_us));
    match e.response_last_at_us {
        Some(end) => svg.rect(from, y + 3.0, x.at(ms(end)) - from, 14.0, "lookup", &title),
        None => svg.rect(from, y + 3.0, 3.0, 14.0, "lost", &title),
    }
}

/// One exchange as send / wait / receive.
fn bar(svg: &mut Svg, x: &Scale, y: f64, e: &Exchange, ms: &dyn Fn(u64) -> f64, inbound: bool) {
    if e.protocol == Protocol::Dns && !inbound {
        return lookup_bar(svg, x, y, e, ms);
    }
    let title = format!("#{} {} {}", e.id, e.request, fmt_ms(duration(e)));
    if inbound {
        svg.rect(
            x.at(ms(e.request_first_at_us)),
            y + 3.0,
            x.at(ms(e.end_us())) - x.at(ms(e.request_first_at_us)),
            14.0,
            "inbound",
            &title,
        );
        return;
    }
    let first = e.request_first_at_us;
    let sent = e.request_last_at_us.max(first);
    let answer = e.response_first_at_us.unwrap_or(sent).max(sent);
    let last = e.end_us().max(answer);
    for (from, to, class) in [
        (first, sent, "send"),
        (sent, answer, "wait"),
        (answer, last, "receive"),
    ] {
        if to > from || class == "wait" {
            svg.rect(
                x.at(ms(from)),
                y + 3.0,
                x.at(ms(to)) - x.at(ms(from)),
                14.0,
                class,
                &title,
            );
        }
    }
}
