//! pcapng details: per-interface timestamp resolution, several interfaces,
//! link types other than Ethernet.

use etherparse::PacketBuilder;
use whyslow_wire::{packet::ip_payload, CaptureReader, LinkType, PcapngWriter};

fn block(ty: u32, body: &[u8]) -> Vec<u8> {
    let len = (12 + body.len()) as u32;
    let mut b = ty.to_le_bytes().to_vec();
    b.extend_from_slice(&len.to_le_bytes());
    b.extend_from_slice(body);
    b.extend_from_slice(&len.to_le_bytes());
    b
}

fn ipv4_tcp() -> Vec<u8> {
    let b = PacketBuilder::ipv4([1, 1, 1, 1], [2, 2, 2, 2], 64).tcp(1000, 80, 1, 100);
    let mut v = Vec::new();
    b.write(&mut v, b"x").unwrap();
    v
}

#[test]
fn interfaces_with_their_own_timestamp_resolution() {
    // Section header from the writer, then two interfaces: raw IP with
    // nanosecond timestamps (if_tsresol = 9), Linux cooked v2 with the default µs.
    let mut f = PcapngWriter::new(Vec::new(), LinkType::RAW, 0)
        .unwrap()
        .into_inner();
    f.truncate(28);
    let mut idb0 = vec![101, 0, 0, 0, 0, 0, 0, 0];
    idb0.extend_from_slice(&[9, 0, 1, 0, 9, 0, 0, 0, 0, 0, 0, 0]);
    f.extend(block(1, &idb0));
    f.extend(block(1, &[0x14, 0x01, 0, 0, 0, 0, 0, 0]));
    let at_us: u64 = 1_700_000_000_123_456;
    let pkt = ipv4_tcp();
    let mut sll2 = vec![0x08, 0x00];
    sll2.resize(20, 0);
    sll2.extend_from_slice(&pkt);
    for (iface, ticks, data) in [(0u32, at_us * 1000, &pkt), (1, at_us, &sll2)] {
        let mut body = iface.to_le_bytes().to_vec();
        body.extend_from_slice(&((ticks >> 32) as u32).to_le_bytes());
        body.extend_from_slice(&(ticks as u32).to_le_bytes());
        body.extend_from_slice(&(data.len() as u32).to_le_bytes());
        body.extend_from_slice(&(data.len() as u32).to_le_bytes());
        body.extend_from_slice(data);
        body.resize(body.len().div_ceil(4) * 4, 0);
        f.extend(block(6, &body));
    }
    let mut r = CaptureReader::new(&f[..]).unwrap();
    let a = r.next_packet().unwrap().unwrap();
    let b = r.next_packet().unwrap().unwrap();
    assert!(r.next_packet().unwrap().is_none());
    assert_eq!((a.number, b.number), (1, 2));
    assert_eq!((a.at_us, b.at_us), (at_us, at_us));
    assert_eq!((a.link, b.link), (LinkType::RAW, LinkType::LINUX_SLL2));
    assert_eq!(ip_payload(b.link, &b.data), Some(&pkt[..]));
}

#[test]
fn link_layers() {
    let ip = ipv4_tcp();
    let mut eth = vec![0u8; 12];
    eth.extend_from_slice(&[0x81, 0x00, 0, 1, 0x08, 0x00]);
    eth.extend_from_slice(&ip);
    assert_eq!(
        ip_payload(LinkType::ETHERNET, &eth),
        Some(&ip[..]),
        "802.1Q tagged"
    );
    let mut sll = vec![0u8; 14];
    sll.extend_from_slice(&[0x08, 0x00]);
    sll.extend_from_slice(&ip);
    assert_eq!(ip_payload(LinkType::LINUX_SLL, &sll), Some(&ip[..]));
    let mut null = 2u32.to_le_bytes().to_vec();
    null.extend_from_slice(&ip);
    assert_eq!(ip_payload(LinkType::NULL, &null), Some(&ip[..]));
    assert_eq!(ip_payload(LinkType(147), &ip), None);
    let mut arp = vec![0u8; 12];
    arp.extend_from_slice(&[0x08, 0x06]);
    assert_eq!(ip_payload(LinkType::ETHERNET, &arp), None);
}
