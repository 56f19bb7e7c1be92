//! Live capture on `lo` of a real TCP exchange. Needs CAP_NET_RAW: skipped
//! with a printed reason without it, unless WHYSLOW_REQUIRE_CAPTURE=1.
#![cfg(target_os = "linux")]

mod common;

use whyslow_wire::{timeline_from_file, FlowOptions, LiveCapture, WireError};

#[test]
fn captures_a_loopback_exchange() {
    let Some((port, path, stats)) = common::capture_loopback_exchange("live.pcapng") else {
        return;
    };
    assert_eq!(stats.kernel_drops, 0);
    // Handshake (3) + 3 × (request, response) + close (≥ 3): at least 12,
    // each seen once despite loopback's double view.
    assert!(stats.packets >= 12, "{stats:?}");
    let out = timeline_from_file(&path, &FlowOptions::default()).unwrap();
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
    assert_eq!(labels, ["GET /m/?"; 3], "one route, ids normalized");
    let digests: std::collections::HashSet<_> =
        t.exchanges.iter().map(|e| e.params_digest).collect();
    assert_eq!(digests.len(), 3, "three ids, three digests");
    assert!(t
        .exchanges
        .iter()
        .all(|e| e.status == Some(whyslow_model::Status::Http(200))));
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
