use super::*;
use whyslow_model::{
    Connection, Evidence, Exchange, ExchangeRole, FindingKind, Protocol, Severity, Timeline,
};

fn conn(id: u32, server_port: u16, protocol: Protocol) -> Connection {
    let client = format!("127.0.0.1:{}", 40000 + id).parse().unwrap();
    let server = format!("127.0.0.1:{server_port}").parse().unwrap();
    Connection {
        protocol,
        ..Connection::new(id, client, server, 0)
    }
}

fn exchange(
    id: u32,
    connection: u32,
    request: &str,
    span: (u64, u64),
    parent: Option<u32>,
) -> Exchange {
    let mut e = Exchange::new(connection, Protocol::Http1, request.into());
    e.id = id;
    e.request_first_at_us = span.0;
    e.request_last_at_us = span.0 + 10;
    e.response_first_at_us = Some(span.1 - 10);
    e.response_last_at_us = Some(span.1);
    (e.request_bytes, e.response_bytes) = (100, 100);
    e.request_packets = (1, 1);
    e.response_packets = Some((2, 2));
    if parent.is_some() {
        e.role = ExchangeRole::Outbound;
    }
    e.parent = parent;
    e
}

/// An inbound request whose 6 calls ran on 2 pooled connections.
fn fanout() -> Report {
    let mut t = Timeline {
        connections: vec![
            conn(0, 8080, Protocol::Http1),
            conn(1, 9000, Protocol::Http1),
            conn(2, 9000, Protocol::Http1),
        ],
        ..Timeline::default()
    };
    t.exchanges.push(exchange(
        0,
        0,
        "GET /<script>alert(1)</script>",
        (0, 70_000),
        None,
    ));
    for i in 0..6u32 {
        let at = 1000 + (i as u64 / 2) * 20_000;
        t.exchanges.push(exchange(
            i + 1,
            1 + i % 2,
            "GET /price",
            (at, at + 19_000),
            Some(0),
        ));
    }
    let mut r = Report::new("analyze", Some("x.pcap".into()));
    r.timeline = Some(t);
    r.findings.push(Finding {
        time_lost_us: 40_000,
        time_lost_per_occurrence_us: 40_000,
        occurrences: 1,
        evidence: vec![Evidence::Measurement {
            note: "n".into(),
            facts: Default::default(),
        }],
        ..Finding::new(
            FindingKind::PoolQueueing,
            Severity::Warning,
            "calls waited for a connection & <b>".into(),
            "f",
        )
    });
    r
}

#[test]
fn a_report_is_self_contained_escaped_and_deterministic() {
    let r = fanout();
    let html = report(&r, None);
    assert_eq!(html, report(&r, None), "same input, same bytes");
    assert!(html.contains(CSP));
    assert!(!html.contains("<script"), "request text is escaped");
    assert!(html.contains("&lt;script&gt;"));
    assert!(html.contains("&amp; &lt;b&gt;"));
    // Nothing to fetch: the only URL is the SVG namespace.
    let urls = html.matches("http://").count() + html.matches("https://").count();
    assert_eq!(urls, html.matches("http://www.w3.org/2000/svg").count());
}

/// The first waterfall's SVG.
fn first_waterfall(html: &str) -> &str {
    let svg = &html[html.find("<svg").unwrap()..];
    &svg[..svg.find("</svg>").unwrap()]
}

#[test]
fn the_waterfall_has_a_row_per_call_and_bars_for_calls_that_queued() {
    let mut r = fanout();
    let t = r.timeline.as_mut().unwrap();
    // Rounds two and three were due when the request made its first calls.
    for e in t.exchanges.iter_mut().filter(|e| e.id > 2) {
        e.pool_wait_from_us = Some(1000);
    }
    let html = report(&r, None);
    assert!(html.contains("waiting for a connection"), "legend");
    let svg = first_waterfall(&html);
    assert_eq!(svg.matches("conn #1<").count(), 3, "{svg}");
    assert_eq!(svg.matches("conn #2<").count(), 3, "{svg}");
    // 6 calls × 3 phases + the inbound bar; 4 queued.
    assert_eq!(svg.matches("class=\"wait\"").count(), 6);
    assert_eq!(svg.matches("class=\"inbound\"").count(), 1);
    assert_eq!(svg.matches("class=\"queued\"").count(), 4);
    assert!(svg.contains("#6 waited 40.0 ms for a connection"), "{svg}");
    let plain = report(&fanout(), None);
    assert_eq!(
        first_waterfall(&plain).matches("class=\"queued\"").count(),
        0
    );
}

#[test]
fn lookups_are_drawn_before_the_call_they_preceded_with_their_question() {
    let mut r = fanout();
    let t = r.timeline.as_mut().unwrap();
    let mut c = whyslow_model::Connection::new(
        9,
        "127.0.0.1:50000".parse().unwrap(),
        "127.0.0.1:53".parse().unwrap(),
        0,
    );
    c.protocol = Protocol::Dns;
    t.connections.push(c);
    let mut found = exchange(50, 9, "A api.internal", (100, 900), Some(0));
    found.protocol = Protocol::Dns;
    found.status = Some(whyslow_model::Status::Dns("NXDOMAIN".into()));
    let mut lost = exchange(51, 9, "AAAA api.internal", (200, 300), Some(0));
    lost.protocol = Protocol::Dns;
    (lost.response_first_at_us, lost.response_last_at_us) = (None, None);
    t.exchanges.extend([found, lost]);
    let html = report(&r, None);
    let svg = first_waterfall(&html);
    let row = svg
        .find("dns A api.internal NXDOMAIN")
        .expect("the lookup's row");
    assert!(
        row < svg.find("conn #1<").unwrap(),
        "before the calls: {svg}"
    );
    assert!(
        svg.contains("dns AAAA api.internal never answered"),
        "{svg}"
    );
    assert_eq!(svg.matches("class=\"lookup\"").count(), 1, "{svg}");
    assert_eq!(svg.matches("class=\"lost\"").count(), 1, "{svg}");
    assert_eq!(svg.matches("class=\"wait\"").count(), 6, "calls only");
}

#[test]
fn a_storm_of_calls_goes_on_one_lane_per_connection() {
    let mut r = fanout();
    let t = r.timeline.as_mut().unwrap();
    for i in 0..60u32 {
        let at = 1000 + u64::from(i) * 1000;
        t.exchanges.push(exchange(
            100 + i,
            1 + i % 2,
            "GET /price",
            (at, at + 900),
            Some(0),
        ));
    }
    let html = report(&r, None);
    let svg = first_waterfall(&html);
    assert!(
        svg.contains("conn #1 (33)") && svg.contains("conn #2 (33)"),
        "{svg}"
    );
    assert_eq!(svg.matches("class=\"wait\"").count(), 66);
}

#[test]
fn a_report_without_a_timeline_still_renders() {
    let html = report(&Report::new("probe", None), None);
    assert!(html.contains("No findings") && !html.contains("Waterfall"));
}
