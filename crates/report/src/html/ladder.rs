//! The packet ladder behind a TCP finding: client and server as two
//! lifelines, each segment and pure ACK as an arrow, one row per packet, with
//! the time since the previous packet beside it, so "segment, 40 ms, delayed
//! ACK, segment" reads off the page.

use super::escape;
use super::svg::Svg;
use crate::fmt_ms;
use std::fmt::Write;
use whyslow_model::{Connection, Direction, Evidence, Finding, Timeline};

/// Packets shown before and after the ones a finding names.
const CONTEXT_PACKETS: u64 = 3;
/// Rows per ladder: a finding names a handful of packets.
const MAX_ROWS: usize = 24;
/// Ladders per report: one per TCP finding, the first of its evidence.
const MAX_LADDERS: usize = 4;
/// A gap this long between packets is drawn as a stall (one delayed-ACK
/// timer is ≥ 40 ms on Linux; a millisecond already matters to a request).
const STALL_GAP_US: u64 = 1000;

const CLIENT_X: f64 = 200.0;
const SERVER_X: f64 = 640.0;
const ROW: f64 = 26.0;

struct Event {
    packet: u64,
    at_us: u64,
    direction: Direction,
    label: String,
    ack: bool,
}

fn events(c: &Connection, lo: u64, hi: u64) -> Vec<Event> {
    let mut ev: Vec<Event> = c
        .segments
        .iter()
        .filter(|s| (lo..=hi).contains(&s.packet))
        .map(|s| {
            let mut flags = Vec::new();
            for (on, name) in [
                (s.flags.syn, "SYN"),
                (s.flags.fin, "FIN"),
                (s.flags.rst, "RST"),
                (s.flags.psh, "PSH"),
                (s.flags.retransmission, "retransmission"),
                (s.flags.zero_window, "zero window"),
            ] {
                if on {
                    flags.push(name);
                }
            }
            Event {
                packet: s.packet,
                at_us: s.at_us,
                direction: s.direction,
                label: format!("#{} {} B {}", s.packet, s.len, flags.join(" ")),
                ack: false,
            }
        })
        .collect();
    ev.extend(
        c.acks
            .iter()
            .filter(|a| !a.piggybacked && (lo..=hi).contains(&a.packet))
            .map(|a| Event {
                packet: a.packet,
                at_us: a.at_us,
                direction: a.direction,
                label: format!("#{} ACK win {}", a.packet, a.window),
                ack: true,
            }),
    );
    ev.sort_by_key(|e| (e.packet, e.at_us));
    ev.dedup_by_key(|e| e.packet);
    ev.truncate(MAX_ROWS);
    ev
}

pub fn section(out: &mut String, t: &Timeline, findings: &[Finding]) {
    let ladders: Vec<(&Finding, u32, &Vec<u64>)> = findings
        .iter()
        .filter_map(|f| {
            f.evidence.iter().find_map(|e| match e {
                Evidence::Packets {
                    connection,
                    packets,
                    ..
                } if !packets.is_empty() => Some((f, *connection, packets)),
                _ => None,
            })
        })
        .take(MAX_LADDERS)
        .collect();
    if ladders.is_empty() {
        return;
    }
    out.push_str("<h2>Packet ladders</h2>\n");
    for (f, conn, packets) in ladders {
        let Some(c) = t.connections.iter().find(|c| c.id == conn) else {
            continue;
        };
        let lo = packets
            .iter()
            .min()
            .copied()
            .unwrap_or(0)
            .saturating_sub(CONTEXT_PACKETS);
        let hi = packets.iter().max().copied().unwrap_or(0) + CONTEXT_PACKETS;
        let ev = events(c, lo, hi);
        if ev.is_empty() {
            continue;
        }
        let _ = writeln!(
            out,
            "<h3>{}: connection #{conn} {} → {}</h3><p class=\"note\">{}</p>",
            f.kind,
            c.client,
            c.server,
            escape(&f.summary)
        );
        out.push_str(&draw(c, &ev, packets));
    }
}

fn draw(c: &Connection, ev: &[Event], named: &[u64]) -> String {
    let height = 50.0 + ROW * ev.len() as f64;
    let mut svg = Svg::new(900.0, height);
    svg.text(
        CLIENT_X,
        14.0,
        "middle",
        "",
        &format!("client {}", c.client),
    );
    svg.text(
        SERVER_X,
        14.0,
        "middle",
        "",
        &format!("server {}", c.server),
    );
    svg.line(CLIENT_X, 20.0, CLIENT_X, height - 6.0, "life");
    svg.line(SERVER_X, 20.0, SERVER_X, height - 6.0, "life");
    let mut prev: Option<u64> = None;
    for (i, e) in ev.iter().enumerate() {
        let y = 34.0 + ROW * i as f64;
        let (x1, x2) = match e.direction {
            Direction::ToServer => (CLIENT_X, SERVER_X),
            Direction::ToClient => (SERVER_X, CLIENT_X),
        };
        svg.arrow(x1, y, x2, y + ROW * 0.6, if e.ack { "ack" } else { "seg" });
        let mark = if named.contains(&e.packet) {
            " ◀"
        } else {
            ""
        };
        svg.text(
            (CLIENT_X + SERVER_X) / 2.0,
            y - 2.0,
            "middle",
            "",
            &format!("{}{mark}", e.label),
        );
        if let Some(p) = prev {
            let gap = e.at_us.saturating_sub(p);
            let class = if gap >= STALL_GAP_US { "stall" } else { "" };
            svg.text(
                CLIENT_X - 12.0,
                y + 4.0,
                "end",
                class,
                &format!("+{}", fmt_ms(gap)),
            );
        }
        prev = Some(e.at_us);
    }
    svg.finish(&format!("packet ladder of connection #{}", c.id))
}
