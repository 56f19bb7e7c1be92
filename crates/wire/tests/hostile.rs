//! Hostile and damaged input: truncated files, garbage, absurd lengths,
//! packets cut by the snapshot length. Never a panic; a clear error and the
//! partial result.

mod common;

use common::*;
use whyslow_wire::{fuzz, timeline_from_reader, FlowOptions, WireError};

/// Deterministic xorshift64 so failures reproduce.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

fn capture() -> (Vec<u8>, u64) {
    let mut s = Sim::new(40100, 80);
    s.handshake();
    s.send(true, GET);
    s.send(false, OK);
    s.fin(true);
    let n = s.packets;
    (s.bytes(), n)
}

/// The same packets as a legacy pcap file (microsecond, little endian).
fn as_pcap(pcapng: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    // Magic number of microsecond pcap, little endian (pcap-savefile(5)).
    out.extend_from_slice(&0xa1b2_c3d4u32.to_le_bytes());
    out.extend_from_slice(&2u16.to_le_bytes());
    out.extend_from_slice(&4u16.to_le_bytes());
    out.extend_from_slice(&[0; 8]);
    out.extend_from_slice(&65535u32.to_le_bytes());
    out.extend_from_slice(&1u32.to_le_bytes());
    let mut r = whyslow_wire::CaptureReader::new(pcapng).unwrap();
    while let Some(p) = r.next_packet().unwrap() {
        out.extend_from_slice(&((p.at_us / 1_000_000) as u32).to_le_bytes());
        out.extend_from_slice(&((p.at_us % 1_000_000) as u32).to_le_bytes());
        out.extend_from_slice(&(p.data.len() as u32).to_le_bytes());
        out.extend_from_slice(&p.orig_len.to_le_bytes());
        out.extend_from_slice(&p.data);
    }
    out
}

#[test]
fn pcap_and_pcapng_read_the_same() {
    let (ng, n) = capture();
    let pcap = as_pcap(&ng);
    let a = timeline_from_reader(&ng[..], &FlowOptions::default()).unwrap();
    let b = timeline_from_reader(&pcap[..], &FlowOptions::default()).unwrap();
    assert_eq!((a.packets, b.packets), (n, n));
    assert_eq!(a.timeline, b.timeline);
}

#[test]
fn truncated_at_every_offset() {
    let (ng, n) = capture();
    for file in [ng.clone(), as_pcap(&ng)] {
        for cut in 0..file.len() {
            match timeline_from_reader(&file[..cut], &FlowOptions::default()) {
                Ok(out) => {
                    assert!(out.packets <= n);
                    if out.packets < n {
                        // Cut inside a block: said so. Cut between blocks: a
                        // shorter but valid file.
                        let said = out.error.is_some();
                        assert!(said || cut < file.len(), "cut {cut}");
                    }
                }
                Err(WireError::NotACapture | WireError::Truncated { .. }) => {}
                Err(e) => panic!("cut {cut}: unexpected {e}"),
            }
        }
    }
}

#[test]
fn cut_mid_block_reports_truncation_and_keeps_packets() {
    let (ng, n) = capture();
    let out = timeline_from_reader(&ng[..ng.len() - 10], &FlowOptions::default()).unwrap();
    assert_eq!(out.packets, n - 1);
    assert!(out.error.unwrap().contains("truncated"));
    assert_eq!(out.timeline.exchanges.len(), 1);
}

#[test]
fn absurd_block_length_is_refused_without_allocating_it() {
    let (mut ng, _) = capture();
    // Blocks: SHB (28 bytes), IDB (20), then EPBs. Corrupt the 3rd EPB's length.
    let mut at = 48;
    for _ in 0..2 {
        let len = u32::from_le_bytes(ng[at + 4..at + 8].try_into().unwrap());
        at += len as usize;
    }
    ng[at + 4..at + 8].copy_from_slice(&0xFFFF_FFF0u32.to_le_bytes());
    let out = timeline_from_reader(&ng[..], &FlowOptions::default()).unwrap();
    assert_eq!(out.packets, 2);
    let err = out.error.expect("an error");
    assert!(
        err.contains("corrupt") || err.contains("truncated"),
        "{err}"
    );
    // The same with more data behind it than the cap: still refused.
    let mut big = ng.clone();
    big.resize(ng.len() + (20 << 20), 0);
    let out = timeline_from_reader(&big[..], &FlowOptions::default()).unwrap();
    assert_eq!(out.packets, 2);
    assert!(out.error.is_some());
}

#[test]
fn garbage_is_not_a_capture() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for n in [0, 1, 3, 24, 100, 5000] {
        let junk = rng.bytes(n);
        match timeline_from_reader(&junk[..], &FlowOptions::default()) {
            Err(WireError::NotACapture | WireError::Truncated { .. }) => {}
            Err(e) => panic!("unexpected {e}"),
            Ok(out) => assert_eq!(out.packets, 0),
        }
    }
    // A valid header followed by garbage: an error after zero packets.
    let (ng, _) = capture();
    let mut f = ng[..48].to_vec();
    f.extend(rng.bytes(1000));
    if let Ok(out) = timeline_from_reader(&f[..], &FlowOptions::default()) {
        assert!(out.error.is_some());
    }
}

#[test]
fn snaplen_cut_packets_are_counted_and_analyzed() {
    let mut s = Sim::new(40101, 80);
    s.snaplen = Some(70);
    s.handshake();
    s.send(true, GET);
    s.send(false, OK);
    let n = s.packets;
    let out = timeline_from_reader(&s.bytes()[..], &FlowOptions::default()).unwrap();
    assert_eq!(out.packets, n);
    assert_eq!(out.truncated_packets, 2);
    assert_eq!(out.error, None);
    let c = &out.timeline.connections[0];
    assert_eq!(
        c.to_server.payload_bytes,
        GET.len() as u64,
        "wire length, not captured"
    );
    assert_eq!(c.to_server.retransmissions, 0);
    // Headers of the request were cut: the HTTP analysis stops with a reason.
    assert!(!out.protocol_errors.is_empty());
    // Cut inside the IP header: not TCP, no panic.
    let mut s = Sim::new(40102, 80);
    s.snaplen = Some(20);
    s.handshake();
    let out = timeline_from_reader(&s.bytes()[..], &FlowOptions::default()).unwrap();
    assert_eq!(out.non_tcp, 3);
}

/// The fuzz entry points on pseudo-random and mutated input.
#[test]
fn fuzz_entry_points_survive_random_input() {
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    let (ng, _) = capture();
    let pcap = as_pcap(&ng);
    for i in 0..3000 {
        let len = (rng.next() % 600) as usize;
        let junk = rng.bytes(len);
        fuzz::flow_table(&junk);
        fuzz::plaintext_feed(&junk);
        fuzz::http1(&junk);
        fuzz::read_capture(&junk);
        // Mutated valid files reach deeper into the readers.
        let mut m = if i % 2 == 0 { ng.clone() } else { pcap.clone() };
        for _ in 0..1 + rng.next() % 8 {
            let at = (rng.next() as usize) % m.len();
            m[at] = rng.next() as u8;
        }
        let keep = m.len() - (rng.next() as usize % 40);
        fuzz::read_capture(&m[..keep]);
    }
}

#[test]
fn fuzz_http1_on_mutated_http() {
    let mut rng = Rng(0xdead_beef_cafe_f00d);
    let base = [
        &[40][..],
        &GET[..40],
        &[0x80 | 43],
        OK,
        &[0x05],
        &GET[40..],
        &[0x80 | 0x30],
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r",
    ]
    .concat();
    for _ in 0..3000 {
        let mut m = base.clone();
        for _ in 0..1 + rng.next() % 4 {
            let at = (rng.next() as usize) % m.len();
            m[at] = rng.next() as u8;
        }
        fuzz::http1(&m);
    }
}

#[test]
fn pcapng_block_shorter_than_its_header_is_refused() {
    // A process information block (type 0x80000001) whose length is below
    // the 12 bytes of any block's framing (a fuzzing find).
    let (ng, n) = capture();
    for len in 0..12u32 {
        let mut f = ng.clone();
        f.extend_from_slice(&0x8000_0001u32.to_le_bytes());
        f.extend_from_slice(&len.to_le_bytes());
        f.extend_from_slice(&[0; 24]);
        fuzz::read_capture(&f);
        let out = timeline_from_reader(&f[..], &FlowOptions::default()).unwrap();
        assert_eq!(out.packets, n, "len {len}");
        assert!(out.error.is_some(), "len {len}");
    }
}
