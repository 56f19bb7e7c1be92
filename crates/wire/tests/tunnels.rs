//! Connections captured inside tunnels: each frame of a simulated HTTP
//! exchange wrapped in VXLAN, GRE, both, or too many, or in a tunnel whose
//! contents are not read; and cut at every length.

mod common;

use common::*;
use whyslow_model::TunnelPackets;
use whyslow_wire::{timeline_from_reader, AnalyzeOutcome, FlowOptions};

const OUTER_A: [u8; 4] = [192, 168, 0, 1];
const OUTER_B: [u8; 4] = [192, 168, 0, 2];
/// VXLAN's header with I set and network 42 (RFC 7348 §5).
const VXLAN: [u8; 8] = [0x08, 0, 0, 0, 0, 0, 42, 0];
/// GRE with a key (K), carrying IPv4 (RFC 2890).
const GRE_KEYED: [u8; 8] = [0x20, 0, 0x08, 0x00, 0, 0, 0, 7];
/// Enhanced GRE (version 1, PPTP's), carrying PPP.
const GRE_PPTP: [u8; 8] = [0x30, 0x81, 0x88, 0x0b, 0, 4, 0, 1];

fn outer(proto: u8, payload: &[u8]) -> Vec<u8> {
    let mut f = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x08, 0x00];
    let ip = etherparse::Ipv4Header::new(
        u16::try_from(payload.len()).unwrap(),
        64,
        etherparse::IpNumber(proto),
        OUTER_A,
        OUTER_B,
    )
    .unwrap();
    ip.write(&mut f).unwrap();
    f.extend_from_slice(payload);
    f
}

fn vxlan(frame: &[u8]) -> Vec<u8> {
    let len = u16::try_from(8 + VXLAN.len() + frame.len()).unwrap();
    let mut udp = [
        50000u16.to_be_bytes(),
        4789u16.to_be_bytes(),
        len.to_be_bytes(),
        [0, 0],
    ]
    .concat();
    udp.extend_from_slice(&VXLAN);
    udp.extend_from_slice(frame);
    outer(17, &udp)
}

/// The frame's IP packet (past its Ethernet header) in keyed GRE.
fn gre(frame: &[u8]) -> Vec<u8> {
    outer(47, &[&GRE_KEYED[..], &frame[14..]].concat())
}

fn gre_in_vxlan(frame: &[u8]) -> Vec<u8> {
    vxlan(&gre(frame))
}

/// GRE in three VXLANs: the GRE, fourth, is past the bound.
fn four_deep(frame: &[u8]) -> Vec<u8> {
    vxlan(&vxlan(&gre_in_vxlan(frame)))
}

fn pptp(frame: &[u8]) -> Vec<u8> {
    outer(47, &[&GRE_PPTP[..], &frame[14..]].concat())
}

/// One HTTP exchange on a connection opened and closed, each frame wrapped.
fn exchange(wrap: Wrap, snaplen: Option<usize>) -> (AnalyzeOutcome, u64) {
    let mut s = Sim::new(40000, 80);
    s.wrap = Some(wrap);
    s.snaplen = snaplen;
    s.handshake();
    s.round_trip(GET, OK);
    s.fin(true);
    s.fin(false);
    s.ack(true);
    let packets = s.packets;
    let out = timeline_from_reader(&s.bytes()[..], &FlowOptions::default()).expect("a capture");
    (out, packets)
}

fn tunnel(name: &str, packets: u64, opened: bool) -> TunnelPackets {
    TunnelPackets {
        tunnel: name.into(),
        packets,
        opened,
    }
}

#[test]
fn an_exchange_in_each_tunnel_is_read_as_without_one() {
    for (wrap, outermost) in [
        (vxlan as Wrap, "VXLAN"),
        (gre, "GRE"),
        (gre_in_vxlan, "VXLAN"),
    ] {
        let (out, packets) = exchange(wrap, None);
        assert_eq!(out.tunnels, vec![tunnel(outermost, packets, true)]);
        assert_eq!(out.non_tcp, 0);
        let t = &out.timeline;
        assert_eq!(t.connections.len(), 1, "{outermost}");
        assert_eq!(t.exchanges.len(), 1, "{outermost}");
        assert!(t.exchanges[0].request.starts_with("GET /items"));
        // The inner addresses are the connection's, not the tunnel's.
        assert_eq!(t.connections[0].server.ip().to_string(), "10.0.0.2");
    }
}

#[test]
fn tunnels_nested_too_deep_or_not_read_are_counted_by_name() {
    for (wrap, name) in [(four_deep as Wrap, "GRE"), (pptp, "GRE")] {
        let (out, packets) = exchange(wrap, None);
        assert_eq!(out.tunnels, vec![tunnel(name, packets, false)]);
        assert_eq!(out.non_tcp, packets);
        assert!(out.timeline.exchanges.is_empty());
    }
}

#[test]
fn tunnelled_frames_cut_at_every_length_are_counted_not_misread() {
    let full = gre_in_vxlan(&[0u8; 54]).len();
    for cut in 0..full {
        let (out, packets) = exchange(gre_in_vxlan, Some(cut));
        assert_eq!(out.packets, packets, "cut at {cut}");
        assert!(
            out.timeline
                .exchanges
                .iter()
                .all(|e| e.request.is_empty() || e.request.starts_with("GET /items")),
            "cut at {cut}: {:?}",
            out.timeline.exchanges
        );
    }
}
