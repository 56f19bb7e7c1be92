//! Tunnels a capture's packets may arrive in, opened to the packet inside:
//! VXLAN and Geneve (overlay networks: flannel, Cilium, OVN, cloud traffic
//! mirroring), GRE with ERSPAN (switch port mirroring) and IP in IP.
//! etherparse reads none of these; each header is a few fixed fields, read
//! here by length with every offset checked, so a hostile header opens
//! nothing rather than reading past its packet.

/// An encapsulation a packet arrived in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Tunnel {
    Vxlan,
    Geneve,
    Gre,
    Erspan,
    /// IPv4 or IPv6 straight inside IPv4 or IPv6 (protocols 4 and 41).
    IpInIp,
}

impl Tunnel {
    pub const ALL: [Tunnel; 5] = [
        Tunnel::Vxlan,
        Tunnel::Geneve,
        Tunnel::Gre,
        Tunnel::Erspan,
        Tunnel::IpInIp,
    ];

    /// Its name as Wireshark's protocol column shows it.
    pub fn name(self) -> &'static str {
        match self {
            Tunnel::Vxlan => "VXLAN",
            Tunnel::Geneve => "Geneve",
            Tunnel::Gre => "GRE",
            Tunnel::Erspan => "ERSPAN",
            Tunnel::IpInIp => "IP in IP",
        }
    }

    /// Its place in `ALL`, for counters kept per tunnel.
    pub fn index(self) -> usize {
        self as usize
    }
}

/// What a tunnel carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Inner<'a> {
    /// An IPv4 or IPv6 packet.
    Ip(&'a [u8]),
    /// An Ethernet frame.
    Ethernet(&'a [u8]),
}

/// What an IP packet's payload turned out to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Opening<'a> {
    Opened(Tunnel, Inner<'a>),
    /// A tunnel whose contents are not read (PPTP's PPP, GRE source
    /// routing, an ERSPAN or Geneve version not known): counted by name.
    Unopened(Tunnel),
    /// No tunnel.
    No,
}

/// VXLAN's IANA port (RFC 7348 §5).
pub const VXLAN_PORT: u16 = 4789;
/// The Linux kernel's VXLAN port when none is given, which flannel's vxlan
/// backend keeps.
pub const VXLAN_LINUX_PORT: u16 = 8472;
/// Geneve's IANA port (RFC 8926 §3.3).
pub const GENEVE_PORT: u16 = 6081;

/// IP protocol numbers (IANA): IPv4 in IP, IPv6 in IP, GRE.
const PROTO_IPIP: u8 = 4;
const PROTO_IPV6: u8 = 41;
const PROTO_GRE: u8 = 47;

/// Ethertypes a tunnel names its payload with.
const ETHERTYPE_IPV4: u16 = 0x0800;
const ETHERTYPE_IPV6: u16 = 0x86dd;
/// Transparent Ethernet bridging (RFC 1701): an Ethernet frame.
const ETHERTYPE_TEB: u16 = 0x6558;
const ETHERTYPE_ERSPAN_2: u16 = 0x88be;
const ETHERTYPE_ERSPAN_3: u16 = 0x22eb;

/// VXLAN's 8-byte header; its flags must carry I, "VNI valid" (RFC 7348 §5).
const VXLAN_HEADER: usize = 8;
const VXLAN_FLAG_I: u8 = 0x08;
/// Geneve's fixed header; options follow, counted in 4-byte words (RFC 8926 §3.4).
const GENEVE_HEADER: usize = 8;
/// GRE: flags and version, then the protocol type (RFC 2784 §2); each of
/// checksum (C), key (K) and sequence number (S) adds 4 bytes (RFC 2890).
const GRE_HEADER: usize = 4;
const GRE_C: u8 = 0x80;
const GRE_R: u8 = 0x40;
const GRE_K: u8 = 0x20;
const GRE_S: u8 = 0x10;
const GRE_VERSION: u8 = 0x07;
/// ERSPAN type II's header; type III's, and its optional platform
/// subheader when the O flag (the last bit) is set (draft-foschiano-erspan).
/// The version, in the first 4 bits, is 1 for type II and 2 for type III;
/// type III's frame type (5 bits after the P flag in bytes 10-11) is 0 for
/// Ethernet, 2 for IP.
const ERSPAN_2_HEADER: usize = 8;
const ERSPAN_3_HEADER: usize = 12;
const ERSPAN_3_SUBHEADER: usize = 8;
const ERSPAN_2_VERSION: u8 = 1;
const ERSPAN_3_VERSION: u8 = 2;
const ERSPAN_FRAME_ETHERNET: u16 = 0;
const ERSPAN_FRAME_IP: u16 = 2;

/// A UDP datagram's payload opened as VXLAN or Geneve, by its destination
/// port and a header that holds; `None` for any other datagram (read as UDP).
pub fn udp(dst_port: u16, payload: &[u8]) -> Option<(Tunnel, Inner<'_>)> {
    match dst_port {
        VXLAN_PORT | VXLAN_LINUX_PORT => {
            let flags = *payload.first()?;
            let inner = payload.get(VXLAN_HEADER..)?;
            (flags & VXLAN_FLAG_I != 0).then_some((Tunnel::Vxlan, Inner::Ethernet(inner)))
        }
        GENEVE_PORT => {
            let first = *payload.first()?;
            if first >> 6 != 0 {
                return None;
            }
            let options = usize::from(first & 0x3f) * 4;
            let ty = be16(payload, 2)?;
            let inner = payload.get(GENEVE_HEADER + options..)?;
            Some((Tunnel::Geneve, by_ethertype(ty, inner)?))
        }
        _ => None,
    }
}

/// An IP payload of protocol `proto` opened when it is a tunnel.
pub fn ip(proto: u8, payload: &[u8]) -> Opening<'_> {
    match proto {
        PROTO_IPIP | PROTO_IPV6 => Opening::Opened(Tunnel::IpInIp, Inner::Ip(payload)),
        PROTO_GRE => gre(payload),
        _ => Opening::No,
    }
}

fn gre(p: &[u8]) -> Opening<'_> {
    let (Some(&flags), Some(&version), Some(ty)) = (p.first(), p.get(1), be16(p, 2)) else {
        return Opening::Unopened(Tunnel::Gre);
    };
    // Version 1 is PPTP's (PPP inside); source routing (R) is obsolete.
    if version & GRE_VERSION != 0 || flags & GRE_R != 0 {
        return Opening::Unopened(Tunnel::Gre);
    }
    let words = [GRE_C, GRE_K, GRE_S]
        .iter()
        .filter(|&&f| flags & f != 0)
        .count();
    let Some(rest) = p.get(GRE_HEADER + 4 * words..) else {
        return Opening::Unopened(Tunnel::Gre);
    };
    let version = rest.first().map(|b| b >> 4);
    match ty {
        // Type I has no header of its own and no GRE sequence number.
        ETHERTYPE_ERSPAN_2 if flags & GRE_S == 0 => erspan(rest, 0, ERSPAN_FRAME_ETHERNET),
        ETHERTYPE_ERSPAN_2 if version == Some(ERSPAN_2_VERSION) => {
            erspan(rest, ERSPAN_2_HEADER, ERSPAN_FRAME_ETHERNET)
        }
        ETHERTYPE_ERSPAN_3 if version == Some(ERSPAN_3_VERSION) => {
            let (Some(bits), Some(&last)) = (be16(rest, 10), rest.get(ERSPAN_3_HEADER - 1)) else {
                return Opening::Unopened(Tunnel::Erspan);
            };
            let sub = if last & 1 != 0 { ERSPAN_3_SUBHEADER } else { 0 };
            erspan(rest, ERSPAN_3_HEADER + sub, (bits >> 10) & 0x1f)
        }
        ETHERTYPE_ERSPAN_2 | ETHERTYPE_ERSPAN_3 => Opening::Unopened(Tunnel::Erspan),
        _ => match by_ethertype(ty, rest) {
            Some(inner) => Opening::Opened(Tunnel::Gre, inner),
            None => Opening::Unopened(Tunnel::Gre),
        },
    }
}

/// ERSPAN's mirrored frame, `header` bytes in, of frame type `frame`.
fn erspan(rest: &[u8], header: usize, frame: u16) -> Opening<'_> {
    match (rest.get(header..), frame) {
        (Some(f), ERSPAN_FRAME_ETHERNET) => Opening::Opened(Tunnel::Erspan, Inner::Ethernet(f)),
        (Some(f), ERSPAN_FRAME_IP) => Opening::Opened(Tunnel::Erspan, Inner::Ip(f)),
        _ => Opening::Unopened(Tunnel::Erspan),
    }
}

fn by_ethertype(ty: u16, rest: &[u8]) -> Option<Inner<'_>> {
    match ty {
        ETHERTYPE_IPV4 | ETHERTYPE_IPV6 => Some(Inner::Ip(rest)),
        ETHERTYPE_TEB => Some(Inner::Ethernet(rest)),
        _ => None,
    }
}

fn be16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*b.get(at)?, *b.get(at + 1)?]))
}

#[cfg(test)]
mod tests {
    use super::*;

    const FRAME: &[u8] = b"inner frame";

    fn with(header: &[u8]) -> Vec<u8> {
        [header, FRAME].concat()
    }

    #[test]
    fn vxlan_opens_on_either_port_only_with_its_flag() {
        let d = with(&[0x08, 0, 0, 0, 0, 0, 42, 0]);
        for port in [VXLAN_PORT, VXLAN_LINUX_PORT] {
            assert_eq!(udp(port, &d), Some((Tunnel::Vxlan, Inner::Ethernet(FRAME))));
        }
        assert_eq!(udp(53, &d), None);
        assert_eq!(udp(VXLAN_PORT, &with(&[0; 8])), None);
        assert_eq!(udp(VXLAN_PORT, &[0x08, 0, 0]), None);
    }

    #[test]
    fn geneve_skips_its_options() {
        let d = with(&[0x02, 0, 0x65, 0x58, 0, 0, 5, 0, 1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(
            udp(GENEVE_PORT, &d),
            Some((Tunnel::Geneve, Inner::Ethernet(FRAME)))
        );
        let ip = with(&[0, 0, 0x08, 0x00, 0, 0, 5, 0]);
        assert_eq!(
            udp(GENEVE_PORT, &ip),
            Some((Tunnel::Geneve, Inner::Ip(FRAME)))
        );
        // Options past the datagram, another version: plain UDP.
        assert_eq!(udp(GENEVE_PORT, &[0x3f, 0, 0x65, 0x58, 0, 0, 5, 0]), None);
        assert_eq!(
            udp(GENEVE_PORT, &with(&[0x40, 0, 0x65, 0x58, 0, 0, 5, 0])),
            None
        );
    }

    #[test]
    fn gre_skips_checksum_key_and_sequence() {
        assert_eq!(
            ip(47, &with(&[0, 0, 0x08, 0x00])),
            Opening::Opened(Tunnel::Gre, Inner::Ip(FRAME))
        );
        let all = with(&[0xb0, 0, 0x65, 0x58, 1, 1, 0, 0, 2, 2, 2, 2, 3, 3, 3, 3]);
        assert_eq!(
            ip(47, &all),
            Opening::Opened(Tunnel::Gre, Inner::Ethernet(FRAME))
        );
    }

    #[test]
    fn gre_that_cannot_be_read_is_named() {
        for p in [
            &[0x00, 0x01, 0x88, 0x0b][..], // PPTP
            &[0x40, 0x00, 0x08, 0x00],     // source routing
            &[0x00, 0x00, 0x88, 0x47],     // MPLS
            &[0xb0, 0x00, 0x08, 0x00, 1],  // header past the packet
            &[0x00],
        ] {
            assert_eq!(ip(47, p), Opening::Unopened(Tunnel::Gre), "{p:?}");
        }
    }

    #[test]
    fn erspan_types_one_two_and_three() {
        assert_eq!(
            ip(47, &with(&[0, 0, 0x88, 0xbe])),
            Opening::Opened(Tunnel::Erspan, Inner::Ethernet(FRAME))
        );
        let two = with(&[0x10, 0, 0x88, 0xbe, 0, 0, 0, 7, 0x10, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(
            ip(47, &two),
            Opening::Opened(Tunnel::Erspan, Inner::Ethernet(FRAME))
        );
        let mut three = vec![0x10, 0, 0x22, 0xeb, 0, 0, 0, 7, 0x20];
        three.extend([0; 10]);
        three.push(1); // O: a platform subheader follows
        three.extend([9; 8]);
        assert_eq!(
            ip(47, &with(&three)),
            Opening::Opened(Tunnel::Erspan, Inner::Ethernet(FRAME))
        );
        // Frame type 2: an IP packet.
        three[8 + 10] = 0x08;
        assert_eq!(
            ip(47, &with(&three)),
            Opening::Opened(Tunnel::Erspan, Inner::Ip(FRAME))
        );
        for unread in [
            &[0x10, 0, 0x22, 0xeb, 0, 0, 0, 7, 0x20][..],
            &[0x10, 0, 0x88, 0xbe, 0, 0, 0, 7, 0x30, 0, 0, 0, 0, 0, 0, 0],
        ] {
            assert_eq!(ip(47, unread), Opening::Unopened(Tunnel::Erspan));
        }
    }

    #[test]
    fn ip_in_ip_and_other_protocols() {
        assert_eq!(
            ip(4, FRAME),
            Opening::Opened(Tunnel::IpInIp, Inner::Ip(FRAME))
        );
        assert_eq!(
            ip(41, FRAME),
            Opening::Opened(Tunnel::IpInIp, Inner::Ip(FRAME))
        );
        assert_eq!(ip(1, FRAME), Opening::No);
    }
}
