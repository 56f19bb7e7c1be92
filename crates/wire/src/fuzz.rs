//! Entry points shared by the cargo-fuzz targets (fuzz/) and the in-tree
//! tests that run them on pseudo-random input. None may panic or allocate
//! without bound, whatever the bytes.

use crate::flow::plaintext::{EventsOnly, PlainChunk, PlaintextFeed};
use crate::flow::{Bounds, FlowOptions, FlowTable};
use crate::packet::{LinkType, Packet};
use crate::read::read_packets;
use etherparse::PacketBuilder;

/// Bounds small enough that fuzz inputs reach them.
fn small_limits() -> FlowOptions {
    FlowOptions {
        bounds: Bounds {
            max_events_per_connection: 64,
            max_events_total: 256,
            max_flows: 8,
            max_held_bytes_per_flow: 256,
            max_held_bytes_total: 1024,
            max_exchanges: 16,
            max_connections: 4,
        },
        ..FlowOptions::default()
    }
}

/// Bytes as a pcap/pcapng file: read every packet, analyze it.
pub fn read_capture(data: &[u8]) {
    let mut table = FlowTable::new(small_limits());
    let _ = read_packets(data, |p| table.push(p));
    let _ = table.finish();
}

/// Bytes as a sequence of packets fed to a `FlowTable`. Each record starts
/// with a control byte: bit 7 set = a raw IP packet of `len` bytes follows;
/// clear = a TCP segment between two fixed hosts built from the next bytes
/// (flags, direction, sequence and ack deltas, window, payload).
pub fn flow_table(data: &[u8]) {
    push_segments(FlowTable::new(small_limits()), data);
}

fn push_segments(mut table: FlowTable, data: &[u8]) {
    let mut seq = [1000u32, 5000u32];
    let mut rest = data;
    let mut number = 0u64;
    while let Some((&ctl, tail)) = rest.split_first() {
        number += 1;
        let at_us = number * 1000;
        let len = usize::from(ctl & 0x3f).min(tail.len());
        let (body, next) = tail.split_at(len);
        rest = next;
        let frame = if ctl & 0x80 != 0 {
            body.to_vec()
        } else {
            match tcp_segment(ctl, body, &mut seq) {
                Some(f) => f,
                None => continue,
            }
        };
        let p = Packet {
            number,
            at_us,
            link: LinkType::RAW,
            orig_len: frame.len() as u32 + u32::from(ctl & 0x40 != 0) * 7,
            data: frame,
            host: 0,
        };
        table.push(&p);
    }
    let _ = table.finish();
}

/// Bytes as plaintext chunks (the eBPF source's TLS plaintext and Unix
/// socket calls) then packets: the first byte is the chunk count, each
/// chunk [ctl, time delta, len, data...]: ctl bit 0 sent by the client,
/// bit 1 written by the server's end, bit 2 on a connection no packet
/// shows, bit 3 claims 16 MiB, bits 4-5 the client's port among four
/// (40000 is the packets' connection). The rest: `flow_table`'s segments.
pub fn plaintext_feed(data: &[u8]) {
    let Some((&count, mut rest)) = data.split_first() else {
        return;
    };
    let server: std::net::SocketAddr = "10.0.0.2:80".parse().unwrap_or(([0; 4], 0).into());
    let mut chunks = Vec::new();
    let mut at_us = 0u64;
    for _ in 0..count {
        let [ctl, dt, len, tail @ ..] = rest else {
            break;
        };
        let (body, next) = tail.split_at(usize::from(*len).min(tail.len()));
        rest = next;
        at_us += u64::from(*dt) * 100;
        let client = std::net::SocketAddr::from(([10, 0, 0, 1], 40000 + u16::from(ctl >> 4 & 3)));
        let (local, remote) = if ctl & 2 != 0 {
            (server, client)
        } else {
            (client, server)
        };
        chunks.push(PlainChunk {
            at_us,
            local,
            remote,
            sent: (ctl & 1 != 0) != (ctl & 2 != 0),
            data: body.to_vec(),
            whole: if ctl & 8 != 0 {
                16 << 20
            } else {
                body.len() as u64
            },
            events_only: (ctl & 4 != 0).then(|| EventsOnly {
                path: "/run/x.sock".into(),
                server,
            }),
        });
    }
    let mut options = small_limits();
    options.plaintext = Some(std::sync::Arc::new(PlaintextFeed::new(chunks)));
    push_segments(FlowTable::new(options), rest);
}

/// Builds an IPv4 TCP segment from fuzz bytes: [flags, seq delta, ack delta,
/// window, payload...]; bit 6 of `ctl` picks the direction.
fn tcp_segment(ctl: u8, body: &[u8], seq: &mut [u32; 2]) -> Option<Vec<u8>> {
    let (&flags, body) = body.split_first()?;
    let (&dseq, body) = body.split_first()?;
    let (&dack, body) = body.split_first()?;
    let (&win, payload) = body.split_first()?;
    let dir = usize::from(ctl & 0x40 != 0);
    let (src, dst, sp, dp) = match dir {
        0 => ([10, 0, 0, 1], [10, 0, 0, 2], 40000, 80),
        _ => ([10, 0, 0, 2], [10, 0, 0, 1], 80, 40000),
    };
    // Small signed jumps around the expected sequence: resends, holes, overlaps.
    let s = seq[dir].wrapping_add((dseq as i8) as u32);
    let ack = seq[1 - dir].wrapping_add((dack as i8) as u32);
    let mut b = PacketBuilder::ipv4(src, dst, 64).tcp(sp, dp, s, u16::from(win) << 4);
    if flags & 1 != 0 {
        b = b.syn();
    }
    if flags & 2 != 0 {
        b = b.ack(ack);
    }
    if flags & 4 != 0 {
        b = b.fin();
    }
    if flags & 8 != 0 {
        b = b.rst();
    }
    seq[dir] = s.wrapping_add(payload.len() as u32);
    let mut out = Vec::with_capacity(b.size(payload.len()));
    b.write(&mut out, payload).ok()?;
    Some(out)
}

/// Bytes split into two directions of an HTTP/1 stream.
pub fn http1(data: &[u8]) {
    whyslow_proto::fuzz::http1(data);
}
