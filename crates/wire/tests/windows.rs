//! How a capture is cut into windows: small ones (`MIN_WINDOW_EXCHANGES`)
//! when no population needs more, and ones holding at least
//! `WindowPolicy::requests` of the service's requests otherwise, up to
//! `window_exchanges`.

mod common;

use common::*;
use std::collections::HashMap;
use whyslow_model::Timeline;
use whyslow_wire::{
    windows_from_reader, FlowOptions, Window, WindowPolicy, WindowSink, MIN_WINDOW_EXCHANGES,
};

const SERVICE: u16 = 8080;
const REDIS: u16 = 6379;

/// Per window: exchanges, and those that are the service's requests.
struct Sizes {
    service: Vec<u16>,
    windows: Vec<(usize, usize)>,
}

impl WindowSink for Sizes {
    fn service_ports(&mut self, _: &Timeline, _: bool) -> Option<Vec<u16>> {
        Some(self.service.clone())
    }
    fn window(&mut self, w: &mut Window) {
        let port: HashMap<u32, u16> = w
            .timeline
            .connections
            .iter()
            .map(|c| (c.id, c.server.port()))
            .collect();
        let service = w
            .timeline
            .exchanges
            .iter()
            .filter(|e| port.get(&e.connection) == Some(&SERVICE))
            .count();
        self.windows.push((w.timeline.exchanges.len(), service));
    }
}

/// One connection's side of the capture, swapped into the writer's `Sim`
/// while it writes.
struct Side {
    cport: u16,
    sport: u16,
    cnext: u32,
    snext: u32,
}

impl Side {
    fn on(&mut self, s: &mut Sim, f: impl FnOnce(&mut Sim)) {
        std::mem::swap(&mut s.cport, &mut self.cport);
        std::mem::swap(&mut s.sport, &mut self.sport);
        std::mem::swap(&mut s.cnext, &mut self.cnext);
        std::mem::swap(&mut s.snext, &mut self.snext);
        f(s);
        std::mem::swap(&mut s.cport, &mut self.cport);
        std::mem::swap(&mut s.sport, &mut self.sport);
        std::mem::swap(&mut s.cnext, &mut self.cnext);
        std::mem::swap(&mut s.snext, &mut self.snext);
    }
}

/// `requests` to the service, each making `calls` Redis calls inside its
/// wait, on one keep-alive connection each way.
fn service_with_calls(requests: usize, calls: usize) -> Vec<u8> {
    let mut s = Sim::new(40000, SERVICE);
    s.handshake();
    let mut redis = Side {
        cport: 40001,
        sport: REDIS,
        cnext: 1000,
        snext: 5000,
    };
    redis.on(&mut s, Sim::handshake);
    for _ in 0..requests {
        s.send(true, GET);
        redis.on(&mut s, |s| {
            for _ in 0..calls {
                s.send(true, b"*2\r\n$3\r\nGET\r\n$5\r\nk:123\r\n");
                s.send(false, b"$1\r\nv\r\n");
            }
        });
        s.send(false, OK);
    }
    redis.on(&mut s, |s| {
        s.fin(true);
        s.fin(false);
    });
    s.fin(true);
    s.fin(false);
    s.bytes()
}

fn cut(bytes: &[u8], service: &[u16], limits: &FlowOptions) -> Vec<(usize, usize)> {
    let mut sizes = Sizes {
        service: service.to_vec(),
        windows: Vec::new(),
    };
    let out = windows_from_reader(bytes, limits, &mut sizes).expect("a capture");
    assert_eq!(out.error, None);
    assert_eq!(out.windows_forced, 0);
    sizes.windows
}

/// Room a window may run over its size: the packets read in one batch
/// finish a few more exchanges after the size is reached.
const OVERRUN: usize = 1_000;

#[test]
fn without_a_service_windows_are_small() {
    let bytes = service_with_calls(10, 3_000);
    let windows = cut(&bytes, &[], &FlowOptions::default());
    let all: usize = windows.iter().map(|w| w.0).sum();
    assert_eq!(all, 10 * 3_001);
    // The first waits for the sample a service is decided from.
    for w in &windows[1..windows.len() - 1] {
        assert!(
            (MIN_WINDOW_EXCHANGES..MIN_WINDOW_EXCHANGES + OVERRUN).contains(&w.0),
            "{windows:?}"
        );
    }
}

#[test]
fn a_window_holds_the_requests_the_detectors_need() {
    // 300 calls per request: 30 requests are 9 000 exchanges, more than a
    // small window.
    let bytes = service_with_calls(120, 300);
    let limits = FlowOptions {
        window: WindowPolicy {
            requests: 30,
            ..WindowPolicy::default()
        },
        ..FlowOptions::default()
    };
    let windows = cut(&bytes, &[SERVICE], &limits);
    let requests: usize = windows.iter().map(|w| w.1).sum();
    assert_eq!(requests, 120);
    assert!(windows.len() >= 3, "{windows:?}");
    for w in &windows[..windows.len() - 1] {
        assert!(w.1 >= 30, "{windows:?}");
    }
    // Few calls per request: enough requests long before a small window fills.
    let bytes = service_with_calls(2_000, 9);
    let windows = cut(&bytes, &[SERVICE], &limits);
    assert!(windows.len() >= 3, "{windows:?}");
    for w in &windows[1..windows.len() - 1] {
        assert!(w.0 < MIN_WINDOW_EXCHANGES + OVERRUN, "{windows:?}");
    }
}

#[test]
fn a_window_never_passes_its_size_for_requests() {
    let bytes = service_with_calls(20, 3_000);
    let limits = FlowOptions {
        window: WindowPolicy {
            exchanges: 12_000,
            requests: 1_000,
        },
        ..FlowOptions::default()
    };
    let windows = cut(&bytes, &[SERVICE], &limits);
    assert!(windows.len() >= 4, "{windows:?}");
    for w in &windows {
        assert!(w.0 < 12_000 + 3_001 + OVERRUN, "{windows:?}");
    }
}
