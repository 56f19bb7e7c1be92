//! A captured packet and the link layers whyslow understands.

/// Link-layer header type, numbered as in the tcpdump.org LINKTYPE_ registry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LinkType(pub u32);

impl LinkType {
    pub const NULL: LinkType = LinkType(0);
    pub const ETHERNET: LinkType = LinkType(1);
    pub const RAW: LinkType = LinkType(101);
    pub const LOOP: LinkType = LinkType(108);
    pub const LINUX_SLL: LinkType = LinkType(113);
    pub const IPV4: LinkType = LinkType(228);
    pub const IPV6: LinkType = LinkType(229);
    pub const LINUX_SLL2: LinkType = LinkType(276);
}

/// One packet as read from a file or a live socket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packet {
    /// 1-based, as Wireshark numbers frames.
    pub number: u64,
    /// Capture time, microseconds since the Unix epoch.
    pub at_us: u64,
    pub link: LinkType,
    /// Captured bytes (possibly cut to the snapshot length).
    pub data: Vec<u8>,
    /// Length of the packet on the wire.
    pub orig_len: u32,
    /// Which capture it came from, of several hosts' read as one
    /// (`merged`); 0 otherwise.
    pub host: u16,
}

impl Packet {
    /// A packet with no bytes, to be filled by `CaptureReader::read_into`.
    pub fn empty() -> Packet {
        Packet {
            number: 0,
            at_us: 0,
            link: LinkType::RAW,
            data: Vec::new(),
            orig_len: 0,
            host: 0,
        }
    }

    /// True when the capture kept fewer bytes than were on the wire.
    pub fn is_cut(&self) -> bool {
        (self.data.len() as u64) < u64::from(self.orig_len)
    }
}

/// Ethernet II header length (IEEE 802.3): two MACs and the EtherType.
const ETHERNET_HEADER: usize = 14;
/// 802.1Q tag: TPID + TCI; the inner EtherType follows.
const VLAN_TAG: usize = 4;
/// Linux cooked v1 header (LINKTYPE_LINUX_SLL): protocol type at offset 14.
const SLL_HEADER: usize = 16;
/// Linux cooked v2 header (LINKTYPE_LINUX_SLL2): protocol type at offset 0.
const SLL2_HEADER: usize = 20;
/// BSD loopback (LINKTYPE_NULL/LOOP): 4-byte address family.
const NULL_HEADER: usize = 4;

const ETHERTYPE_IPV4: u16 = 0x0800;
const ETHERTYPE_IPV6: u16 = 0x86dd;
const ETHERTYPE_VLAN: u16 = 0x8100;
const ETHERTYPE_QINQ: u16 = 0x88a8;

/// The IP packet inside a link-layer frame, if it carries IPv4 or IPv6.
pub fn ip_payload(link: LinkType, frame: &[u8]) -> Option<&[u8]> {
    match link {
        LinkType::ETHERNET => ethernet_payload(frame),
        LinkType::LINUX_SLL => {
            let proto = be16(frame, 14)?;
            ip_by_ethertype(proto, frame.get(SLL_HEADER..)?)
        }
        LinkType::LINUX_SLL2 => {
            let proto = be16(frame, 0)?;
            ip_by_ethertype(proto, frame.get(SLL2_HEADER..)?)
        }
        LinkType::RAW | LinkType::IPV4 | LinkType::IPV6 => Some(frame),
        LinkType::NULL | LinkType::LOOP => {
            // The family is in host byte order of the capturing machine;
            // trust the IP version nibble instead of guessing it.
            frame.get(NULL_HEADER..)
        }
        _ => None,
    }
}

fn ethernet_payload(frame: &[u8]) -> Option<&[u8]> {
    let mut at = ETHERNET_HEADER - 2;
    let mut ty = be16(frame, at)?;
    // Up to two stacked tags (802.1ad Q-in-Q).
    for _ in 0..2 {
        if ty != ETHERTYPE_VLAN && ty != ETHERTYPE_QINQ {
            break;
        }
        at += VLAN_TAG;
        ty = be16(frame, at)?;
    }
    ip_by_ethertype(ty, frame.get(at + 2..)?)
}

fn ip_by_ethertype(ty: u16, rest: &[u8]) -> Option<&[u8]> {
    (ty == ETHERTYPE_IPV4 || ty == ETHERTYPE_IPV6).then_some(rest)
}

fn be16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*b.get(at)?, *b.get(at + 1)?]))
}
