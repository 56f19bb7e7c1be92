//! Live capture on `lo` of a real TCP exchange. Needs CAP_NET_RAW: skipped
//! with a printed reason without it, unless WHYSLOW_REQUIRE_CAPTURE=1.
#![cfg(target_os = "linux")]

mod common;

use common::{exchange, required};
use std::net::TcpListener;
use std::time::Duration;
use whyslow_wire::{timeline_from_file, Limits, LiveCapture, WireError};

#[test]
fn captures_a_loopback_exchange() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let path = common::temp_file("live.pcapng", b"");
    let handle = match LiveCapture::spawn("lo", &[port], &path) {
        Ok(h) => h,
        Err(WireError::PermissionDenied) if !required() => {
            eprintln!("skipped: live capture needs CAP_NET_RAW");
            return;
        }
        Err(e) => panic!("live capture failed: {e}"),
    };
    exchange(port, listener);
    std::thread::sleep(Duration::from_millis(100));
    let stats = handle.stop().unwrap();
    assert_eq!(stats.kernel_drops, 0);
    // Handshake (3) + 3 × (request, response) + close (≥ 3): at least 12,
    // each seen once despite loopback's double view.
    assert!(stats.packets >= 12, "{stats:?}");
    let out = timeline_from_file(&path, &Limits::default()).unwrap();
    assert_eq!(out.error, None);
    assert_eq!(out.packets, stats.packets);
    let t = &out.timeline;
    assert_eq!(t.connections.len(), 1, "{:#?}", t.connections);
    let c = &t.connections[0];
    assert_eq!(c.server.port(), port);
    assert!(c.handshake_us().is_some());
    assert_eq!(
        c.to_server.retransmissions, 0,
        "duplicates would look like resends"
    );
    let labels: Vec<_> = t.exchanges.iter().map(|e| e.request.as_str()).collect();
    assert_eq!(labels, ["GET /m/0", "GET /m/1", "GET /m/2"]);
    assert!(t.exchanges.iter().all(|e| e.status == Some(200)));
    eprintln!("live capture: {stats:?}, file {}", path.display());
}

#[test]
fn unknown_interface_is_a_clear_error() {
    match LiveCapture::open("no-such-if0", &[80]) {
        Err(WireError::NoSuchInterface(n)) => assert_eq!(n, "no-such-if0"),
        Err(WireError::PermissionDenied) => {}
        Err(e) => panic!("unexpected error {e}"),
        Ok(_) => panic!("opened a missing interface"),
    }
}
