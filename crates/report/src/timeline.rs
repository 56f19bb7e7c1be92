//! A capture in a few lines: counts, servers, exchanges grouped by request.

use crate::fmt_ms;
use std::fmt::Write;
use whyslow_model::{
    Attribution, AttributionCounts, CaptureSummary, Connection, ExchangeGroup, SpanSource,
    Timeline, TlsFacts,
};

/// Request groups shown in text; JSON has every exchange.
const GROUPS_SHOWN: usize = 15;

/// What OTLP spans gave: counts, the service, and what could not be placed.
fn span_source(s: &CaptureSummary, spans: &SpanSource) -> String {
    let mut out = format!(
        "  {} spans in {} OTLP requests ({}): {} exchanges; connections are lanes per peer \
         (the most calls in flight at once), not TCP connections\n",
        spans.spans, spans.requests, spans.from, s.exchanges
    );
    if let Some(service) = &spans.service {
        let _ = writeln!(
            out,
            "  service {service:?}: {} calls given by their span's parent, {} reached no request of it",
            spans.calls_by_parent, spans.calls_without_request
        );
    }
    if !spans.other_services.is_empty() {
        let _ = writeln!(
            out,
            "  other services (read for when each call reached them): {}",
            spans.other_services.join(", ")
        );
    }
    let odd = [
        (
            spans.nested_calls,
            "client spans inside another, counted once",
        ),
        (
            spans.skewed,
            "spans outside their parent's time (clock skew), moved inside",
        ),
        (
            spans.broken_chains,
            "parent chains that looped or ran too deep",
        ),
        (spans.dropped, "spans past the bound, not read"),
    ];
    for (n, what) in odd.iter().filter(|(n, _)| *n > 0) {
        let _ = writeln!(out, "  {n} {what}");
    }
    for (name, addr) in &spans.named_peers {
        let _ = writeln!(out, "    {addr} stands for {name}");
    }
    out
}

/// Ports of non-DNS UDP named in the text; the JSON lists them all.
const OTHER_UDP_LISTED: usize = 5;
/// Event-loop threads named in the text; the JSON lists them all.
const EVENT_LOOPS_LISTED: usize = 8;

/// A whole capture's counts and request groups (`analyze`): every exchange
/// counted, percentiles from each group's histogram. `evidence`: the
/// connections kept, for each server's TLS note.
pub fn capture_summary(s: &CaptureSummary, evidence: &Timeline) -> String {
    let mut out = match &s.spans {
        Some(spans) => span_source(s, spans),
        None => format!(
            "  {} TCP connections ({} TLS){}, {} exchanges; {} retransmissions, {} zero windows\n",
            s.connections - s.udp_flows,
            s.tls_connections,
            match s.udp_flows {
                0 => String::new(),
                n => format!(" and {n} UDP flows (DNS)"),
            },
            s.exchanges,
            s.retransmissions,
            s.zero_windows
        ),
    };
    if !s.other_udp.is_empty() {
        let total: u64 = s.other_udp.iter().map(|p| p.packets).sum();
        let ports: Vec<String> = s
            .other_udp
            .iter()
            .take(OTHER_UDP_LISTED)
            .map(|p| match p.port {
                0 => format!("other ports ×{}", p.packets),
                port => format!(":{port} ×{}", p.packets),
            })
            .collect();
        let _ = writeln!(
            out,
            "  {total} UDP datagram(s) that are not DNS, not read: {}",
            ports.join(", ")
        );
    }
    for opened in [true, false] {
        let kinds: Vec<String> = s
            .tunnels
            .iter()
            .filter(|t| t.opened == opened)
            .map(|t| format!("{} ×{}", t.tunnel, t.packets))
            .collect();
        let total: u64 = s
            .tunnels
            .iter()
            .filter(|t| t.opened == opened)
            .map(|t| t.packets)
            .sum();
        let what = if opened {
            "read inside tunnels"
        } else {
            "in a tunnel whyslow does not open"
        };
        if total > 0 {
            let _ = writeln!(out, "  {total} packet(s) {what}: {}", kinds.join(", "));
        }
    }
    if let Some(n) = s.dropped_while_capturing.filter(|&n| n > 0) {
        let _ = writeln!(
            out,
            "  the capturing tool dropped {n} packet(s) (the file's interface statistics): \
             their bytes are missing below"
        );
    }
    if !s.gaps.is_empty() {
        let g = &s.gaps;
        let _ = writeln!(
            out,
            "  capture gaps: {} bytes never captured, in {} gap(s) on {} connection(s) (tcpdump or \
             kernel drops): counted, not read as retransmissions; exchanges across a gap may be \
             cut short or missing",
            g.bytes, g.gaps, g.connections
        );
        if let Some(w) = g.worst_second() {
            let _ = writeln!(
                out,
                "    most in one second: {} bytes in {} gap(s), {} s after the first gap \
                 (Unix second {}); {} second(s) with gaps",
                w.bytes,
                w.gaps,
                w.second.saturating_sub(g.seconds[0].second),
                w.second,
                g.seconds.len()
            );
        }
        for c in &g.worst {
            let _ = writeln!(
                out,
                "    {} → {}: {} gap(s), {} bytes to the server, {} to the client",
                c.client, c.server, c.gaps, c.to_server_bytes, c.to_client_bytes
            );
        }
    }
    hosts_lines(&mut out, &s.hosts);
    if let Some(t) = &s.threads {
        let _ = writeln!(
            out,
            "  threads: {} of {} exchanges joined to {} socket calls traced by eBPF ({}); {} lost",
            t.exchanges_joined, s.exchanges, t.socket_calls, t.file, t.lost
        );
        if t.plaintext_calls > 0 {
            let _ = writeln!(
                out,
                "  TLS: {} library calls read in the clear (OpenSSL's SSL_read/SSL_write, Go's crypto/tls; by eBPF), no keys needed",
                t.plaintext_calls
            );
        }
        if !s.event_loops.is_empty() {
            let named: Vec<String> = s
                .event_loops
                .iter()
                .take(EVENT_LOOPS_LISTED)
                .map(|t| format!("{}/{}", t.pid, t.tid))
                .collect();
            let more = s.event_loops.len().saturating_sub(EVENT_LOOPS_LISTED);
            let _ = writeln!(
                out,
                "  event loops: thread(s) {}{} read a request before answering the last: their calls were given by the wire alone, not by thread",
                named.join(", "),
                if more > 0 { format!(" and {more} more") } else { String::new() }
            );
        }
        if t.goroutines > 0 {
            let _ = writeln!(
                out,
                "  Go: calls told by goroutine ({} goroutines), not by thread: the runtime moves goroutines between threads",
                t.goroutines
            );
        }
        if t.unix_socket_calls > 0 {
            let _ = writeln!(
                out,
                "  Unix sockets: {} calls read from the socket calls (by eBPF; no packet shows them)",
                t.unix_socket_calls
            );
            for (addr, path) in &t.unix_sockets {
                let _ = writeln!(out, "    {addr} stands for unix:{path}");
            }
        }
    }
    for server in s.servers.iter().take(GROUPS_SHOWN) {
        let conns: Vec<&Connection> = evidence
            .connections
            .iter()
            .filter(|c| c.server_name() == server.server && c.protocol == server.protocol)
            .collect();
        let _ = writeln!(
            out,
            "    server {} ({}): {} connection(s), {} exchange(s){}",
            server.server,
            server.protocol.name(),
            server.connections,
            server.exchanges,
            tls_note(&conns)
        );
    }
    if s.groups.is_empty() {
        return out;
    }
    let _ = writeln!(
        out,
        "  {:<44} {:>8} {:>7} {:>9} {:>9} {:>9} {:>9}",
        "request", "count", "per req", "median", "p90", "p99", "max"
    );
    let inbound = s.groups.iter().filter(|g| g.made_for.is_none());
    for kind in inbound.take(GROUPS_SHOWN) {
        group_line(&mut out, kind, "");
        let calls = s
            .groups
            .iter()
            .filter(|g| g.made_for.as_deref() == Some(kind.label.as_str()));
        for call in calls.take(GROUPS_SHOWN) {
            group_line(&mut out, call, "  ");
        }
        if let (Some(a), Some(percent)) = (&kind.attribution, kind.calls_given_percent) {
            let _ = writeln!(out, "      {}", attribution_line(a, percent));
        }
    }
    for made_for in ["", ExchangeGroup::AMBIGUOUS_KINDS] {
        let unplaced = s
            .groups
            .iter()
            .filter(|g| g.made_for.as_deref() == Some(made_for));
        for call in unplaced.take(GROUPS_SHOWN) {
            group_line(&mut out, call, "  ");
        }
    }
    if s.repeated_trace_ids > 0 {
        let _ = writeln!(
            out,
            "  {} trace id(s) carried by more than one request: their calls are ambiguous",
            s.repeated_trace_ids
        );
    }
    out
}

/// "calls given to a request: 97.9% (trace context 1,200, inferred 380;
/// 33 ambiguous)": the evidence behind this kind's per-request numbers.
pub fn attribution_line(a: &AttributionCounts, given_percent: f64) -> String {
    let given: Vec<String> = Attribution::ALL
        .iter()
        .filter(|&&l| l != Attribution::Ambiguous && a.of(l) > 0)
        .map(|&l| format!("{} {}", l.label(), a.of(l)))
        .collect();
    let given = if given.is_empty() {
        "none".to_string()
    } else {
        given.join(", ")
    };
    format!(
        "calls given to a request: {given_percent:.1}% ({given}; {} ambiguous)",
        a.ambiguous
    )
}

fn group_line(out: &mut String, g: &ExchangeGroup, indent: &str) {
    let per = g.per_request.map_or(String::new(), |p| format!("{p:.1}"));
    let label = match g.made_for.as_deref() {
        Some("") => format!("{indent}{} (no request)", g.label),
        Some(ExchangeGroup::AMBIGUOUS_KINDS) => format!("{indent}{} (ambiguous)", g.label),
        _ => format!("{indent}{}", g.label),
    };
    let label = if label.chars().count() > LABEL_WIDTH && names_a_target(&label) {
        let _ = writeln!(out, "  {label}");
        String::new()
    } else {
        truncate(&label, LABEL_WIDTH)
    };
    let _ = writeln!(
        out,
        "  {label:<44} {:>8} {per:>7} {:>9} {:>9} {:>9} {:>9}",
        g.count,
        fmt_ms(g.p50_us),
        fmt_ms(g.p90_us),
        fmt_ms(g.p99_us),
        fmt_ms(g.max_us)
    );
}

/// "; TLS 1.3 TLS_AES_128_GCM_SHA256 ALPN h2, handshakes 1 full + 3 resumed,
/// median 2.31 ms" for one server's TLS connections (the first one's version,
/// suite and ALPN); empty without TLS.
fn tls_note(conns: &[&Connection]) -> String {
    let facts: Vec<&TlsFacts> = conns.iter().filter_map(|c| c.tls_facts.as_ref()).collect();
    let Some(first) = facts.first() else {
        return String::new();
    };
    let mut out = String::from("; TLS");
    for p in [&first.version, &first.cipher].into_iter().flatten() {
        let _ = write!(out, " {p}");
    }
    if let Some(alpn) = &first.alpn {
        let _ = write!(out, " ALPN {alpn}");
    }
    let mut suites: Vec<(&Option<String>, &Option<String>)> =
        facts.iter().map(|f| (&f.version, &f.cipher)).collect();
    suites.sort_unstable();
    suites.dedup();
    if suites.len() > 1 {
        let _ = write!(out, " (and {} other suite(s))", suites.len() - 1);
    }
    let resumed = facts.iter().filter(|f| f.resumed).count();
    let _ = write!(
        out,
        ", handshakes {} full + {resumed} resumed",
        facts.len() - resumed
    );
    let mut times: Vec<u64> = facts.iter().filter_map(|f| f.handshake_us).collect();
    times.sort_unstable();
    if !times.is_empty() {
        let median = whyslow_model::stats::percentile(&times, 0.5);
        let _ = write!(out, ", median {}", fmt_ms(median));
    }
    out
}

/// "hosts: 3 captures joined, each on front's clock" and a line per host:
/// its offset and the bound on it, what placed it, the connections it
/// shares and the copies left out.
fn hosts_lines(out: &mut String, hosts: &[whyslow_model::HostClock]) {
    let Some(first) = hosts.first() else {
        return;
    };
    let _ = writeln!(
        out,
        "  hosts: {} captures joined by the connections they share, on {}'s clock",
        hosts.len(),
        first.name
    );
    for h in hosts {
        let clock = match (h.clock_offset_us, h.clock_offset_bound_us, &h.placed_by) {
            (_, _, None) if h.name == first.name => "the reference clock".to_string(),
            (Some(o), Some(b), Some(by)) => format!(
                "clock {}{} ± {} (placed by {by}{})",
                if o < 0 { "-" } else { "+" },
                fmt_ms(o.unsigned_abs()),
                fmt_ms(b),
                if h.clock_disagrees {
                    "; its connections disagree"
                } else {
                    ""
                }
            ),
            _ if h.shared_connections > 0 => {
                "its shared connections fit no one clock offset (a step or drift): left out"
                    .to_string()
            }
            _ => "shares no connection with a placed host: left out".to_string(),
        };
        let _ = writeln!(
            out,
            "    {}: {clock}; {} shared connection(s), {} copies read from another host",
            h.name, h.shared_connections, h.copies_left_out
        );
    }
}

/// The request table's first column.
const LABEL_WIDTH: usize = 44;

/// Whether a group's label ends in a request target (an HTTP path, a gRPC
/// method): a name, shown whole on a line of its own where it does not
/// fit, where a statement is clipped.
fn names_a_target(label: &str) -> bool {
    label.rsplit(' ').next().is_some_and(|w| w.starts_with('/'))
}

fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        s.chars().take(n - 1).chain(['…']).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn group(label: &str) -> ExchangeGroup {
        ExchangeGroup {
            label: label.into(),
            made_for: None,
            requests_of_kind: None,
            count: 2,
            per_request: None,
            min_us: 1,
            p50_us: 1,
            p90_us: 1,
            p99_us: 1,
            max_us: 1,
            mean_us: 1,
            attribution: None,
            calls_given_percent: None,
        }
    }

    #[test]
    fn a_method_too_long_for_the_column_is_shown_whole_a_statement_clipped() {
        let method = "POST /timeseriesquery.TimeSeriesQueryService/ServerStreamQuery";
        let mut out = String::new();
        group_line(&mut out, &group(method), "");
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 2, "{out}");
        assert_eq!(lines[0].trim(), method);
        assert!(lines[1].trim_start().starts_with('2'), "{out}");
        let statement = "postgres :5432 SELECT sku, qty, price, name FROM items WHERE id = $1";
        let mut out = String::new();
        group_line(&mut out, &group(statement), "");
        assert_eq!(out.lines().count(), 1, "{out}");
        assert!(out.contains('…'), "{out}");
    }
}
