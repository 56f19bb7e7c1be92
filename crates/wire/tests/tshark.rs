//! Agreement with tshark on the same captures: connection count,
//! retransmissions and zero windows. Skipped (with a printed reason) when
//! tshark is not installed, unless WHYSLOW_REQUIRE_CAPTURE=1.

mod common;

use common::*;
use std::path::Path;
use std::process::Command;
use whyslow_wire::{timeline_from_file, FlowOptions};

const TSHARK: &str = "/usr/bin/tshark";

fn tshark_available() -> bool {
    if Path::new(TSHARK).exists() {
        return true;
    }
    if required() {
        panic!("{TSHARK} missing and WHYSLOW_REQUIRE_CAPTURE=1");
    }
    eprintln!("skipped: {TSHARK} not installed");
    false
}

fn tshark(path: &Path, args: &[&str]) -> String {
    let out = Command::new(TSHARK)
        .arg("-n")
        .arg("-r")
        .arg(path)
        .args(args)
        .output()
        .expect("run tshark");
    assert!(
        out.status.success(),
        "tshark failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// What tshark says about a capture.
#[derive(Debug, PartialEq, Eq)]
pub struct Peer {
    connections: u64,
    retransmissions: u64,
    zero_windows: u64,
}

/// Conversations from `-z conv,tcp`; analysis flags from `-z expert`, whose
/// table lists "count  group  protocol  summary" per expert message.
pub fn tshark_counts(path: &Path) -> Peer {
    let conv = tshark(path, &["-q", "-z", "conv,tcp"]);
    let connections = conv.lines().filter(|l| l.contains("<->")).count() as u64;
    let expert = tshark(path, &["-q", "-z", "expert"]);
    let count = |needle: &str| -> u64 {
        expert
            .lines()
            .filter(|l| l.contains(needle))
            .filter_map(|l| l.split_whitespace().next()?.parse::<u64>().ok())
            .sum()
    };
    Peer {
        connections,
        // Fast and spurious retransmissions carry their own message and the
        // plain "retransmission" one, so the latter counts every resend once.
        retransmissions: count("(suspected) retransmission"),
        zero_windows: count("TCP Zero Window segment") + count("TCP zero window segment"),
    }
}

pub fn ours(path: &Path) -> Peer {
    let out = timeline_from_file(path, &FlowOptions::default()).unwrap();
    let t = &out.timeline;
    let sum = |f: fn(&whyslow_model::DirectionStats) -> u64| -> u64 {
        t.connections
            .iter()
            .map(|c| f(&c.to_server) + f(&c.to_client))
            .sum()
    };
    Peer {
        connections: t.connections.len() as u64,
        retransmissions: sum(|s| s.retransmissions),
        zero_windows: sum(|s| s.zero_windows),
    }
}

/// Several connections: clean, retransmitted, zero window, fast retransmit.
fn scenario() -> Vec<u8> {
    let mut s = Sim::new(41000, 80);
    s.handshake();
    s.send(true, GET);
    s.send(false, OK);
    s.ack(true);
    s.fin(true);
    s.fin(false);
    s.ack(true);

    s.cport = 41001;
    s.handshake();
    let seq = s.send(true, GET);
    s.wait_ms(250);
    s.send_at(true, seq, GET);
    s.send(false, OK);

    s.cport = 41002;
    s.handshake();
    s.send(true, GET);
    s.cwin = 0;
    s.send(false, &OK[..20]);
    s.ack(true);
    s.wait_ms(100);
    s.cwin = 512;
    s.ack(true);
    s.send(false, &OK[20..]);

    // Fast retransmission: a lost segment, three duplicate ACKs, resend.
    s.cport = 41003;
    s.handshake();
    s.send(true, GET);
    let lost = s.snext;
    s.advance(false, 10);
    s.wait_ms(1);
    for _ in 0..3 {
        let seq = s.snext;
        s.send_at(false, seq, b"0123456789");
        s.advance(false, 10);
        s.raw(
            true,
            s.cnext,
            lost,
            Flags {
                ack: true,
                ..Default::default()
            },
            s.cwin,
            &[],
            None,
        );
    }
    s.wait_ms(5);
    s.send_at(false, lost, b"abcdefghij");

    // Spurious retransmission: data resent after the peer acknowledged it.
    s.cport = 41004;
    s.handshake();
    let seq = s.send(true, GET);
    s.ack(false);
    s.wait_ms(300);
    s.send_at(true, seq, GET);
    s.bytes()
}

#[test]
fn agrees_with_tshark_on_synthetic_captures() {
    if !tshark_available() {
        return;
    }
    let path = temp_file("scenario.pcapng", &scenario());
    let peer = tshark_counts(&path);
    let mine = ours(&path);
    eprintln!("tshark: {peer:?}\nwhyslow: {mine:?}");
    assert_eq!(mine, peer);
    assert_eq!(mine.connections, 5);
    assert_eq!(
        mine.retransmissions, 3,
        "timeout, fast and spurious resends"
    );
    assert_eq!(mine.zero_windows, 1);
}

#[cfg(target_os = "linux")]
#[test]
fn agrees_with_tshark_on_a_live_capture() {
    if !tshark_available() {
        return;
    }
    let Some((_, path, _)) = capture_loopback_exchange("live-tshark.pcapng") else {
        return;
    };
    assert_eq!(ours(&path), tshark_counts(&path));
}
