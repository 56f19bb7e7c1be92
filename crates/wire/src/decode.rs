//! IP + TCP/UDP header decoding with etherparse, tolerant of packets cut by
//! the capture's snapshot length: the headers must be there, the payload may
//! not. Packets inside tunnels (`tunnel`) are opened and read as the packet
//! they carry.

use crate::packet::{ip_payload, LinkType};
use crate::tunnel::{self, Inner, Opening, Tunnel};
use etherparse::{LaxNetSlice, LaxSlicedPacket, TcpOptionElement, TcpSlice, UdpSlice};
use std::net::{IpAddr, SocketAddr};

/// Fixed IPv6 header length (RFC 8200 §3).
const IPV6_HEADER: usize = 40;

/// Tunnels opened one inside another, at most: an overlay over a mirrored
/// port is two; deeper nesting is counted as a tunnel not opened, so that a
/// crafted packet costs a bounded number of header reads.
const MAX_TUNNELS: u8 = 3;

/// The TCP facts of one packet.
#[derive(Debug, Clone)]
pub struct TcpPacket<'a> {
    pub src: SocketAddr,
    pub dst: SocketAddr,
    pub seq: u32,
    pub ack: u32,
    pub syn: bool,
    pub ack_flag: bool,
    pub fin: bool,
    pub rst: bool,
    pub psh: bool,
    /// Raw (unscaled) window field.
    pub window: u16,
    /// Window scale option (RFC 7323), only meaningful on SYNs.
    pub wscale: Option<u8>,
    /// Payload bytes present in the capture.
    pub payload: &'a [u8],
    /// Payload length on the wire (from the IP length); ≥ `payload.len()`.
    pub seg_len: u32,
    /// The outermost tunnel the segment came in, if any.
    pub tunnel: Option<Tunnel>,
}

impl TcpPacket<'_> {
    pub fn is_cut(&self) -> bool {
        (self.payload.len() as u64) < u64::from(self.seg_len)
    }
}

/// The UDP facts of one datagram.
#[derive(Debug, Clone)]
pub struct UdpPacket<'a> {
    pub src: SocketAddr,
    pub dst: SocketAddr,
    /// Payload bytes present in the capture.
    pub payload: &'a [u8],
    /// Payload length on the wire (from the UDP length); ≥ `payload.len()`.
    pub len: u32,
    /// The outermost tunnel the datagram came in, if any.
    pub tunnel: Option<Tunnel>,
}

/// A packet's transport layer.
#[derive(Debug, Clone)]
pub enum Decoded<'a> {
    Tcp(TcpPacket<'a>),
    Udp(UdpPacket<'a>),
}

impl Decoded<'_> {
    /// The outermost tunnel the packet came in, if any.
    pub fn tunnel(&self) -> Option<Tunnel> {
        match self {
            Decoded::Tcp(t) => t.tunnel,
            Decoded::Udp(u) => u.tunnel,
        }
    }
}

/// Why a packet gave no TCP segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Skip {
    /// Not IP, not TCP or UDP, or a non-first fragment.
    NotTcp,
    /// IP or TCP header incomplete in the capture.
    Cut,
    /// Inside a tunnel whose contents are not read, or nested too deep.
    Tunnel(Tunnel),
    /// Opened from a tunnel (the outermost), but not TCP or UDP inside.
    NotTcpIn(Tunnel),
}

/// The TCP segment of a frame; anything else is `Skip::NotTcp`.
pub fn decode_tcp(link: LinkType, frame: &[u8]) -> Result<TcpPacket<'_>, Skip> {
    match decode(link, frame)? {
        Decoded::Tcp(t) => Ok(t),
        Decoded::Udp(_) => Err(Skip::NotTcp),
    }
}

/// The TCP segment or UDP datagram of a frame.
pub fn decode(link: LinkType, frame: &[u8]) -> Result<Decoded<'_>, Skip> {
    let ip = ip_payload(link, frame).ok_or(Skip::NotTcp)?;
    decode_ip(ip, None, 0)
}

/// The packet a tunnel carries, decoded; `outer`: the outermost tunnel.
fn open<'a>(
    tunnel: Tunnel,
    inner: Inner<'a>,
    outer: Option<Tunnel>,
    depth: u8,
) -> Result<Decoded<'a>, Skip> {
    if depth >= MAX_TUNNELS {
        return Err(Skip::Tunnel(tunnel));
    }
    let outermost = outer.unwrap_or(tunnel);
    let ip = match inner {
        Inner::Ip(ip) => Some(ip),
        Inner::Ethernet(frame) => ip_payload(LinkType::ETHERNET, frame),
    };
    let decoded = match ip {
        Some(ip) => decode_ip(ip, Some(outermost), depth + 1),
        None => Err(Skip::NotTcp),
    };
    decoded.map_err(|skip| match skip {
        Skip::NotTcp | Skip::Cut => Skip::NotTcpIn(outermost),
        other => other,
    })
}

/// An IP packet's TCP segment or UDP datagram, `depth` tunnels in.
fn decode_ip(ip: &[u8], outer: Option<Tunnel>, depth: u8) -> Result<Decoded<'_>, Skip> {
    let version = ip.first().ok_or(Skip::Cut)? >> 4;
    if version != 4 && version != 6 {
        return Err(Skip::NotTcp);
    }
    let sliced = LaxSlicedPacket::from_ip(ip).map_err(|_| Skip::Cut)?;
    let net = sliced.net.as_ref().ok_or(Skip::Cut)?;
    let (src, dst, declared_total) = match net {
        LaxNetSlice::Ipv4(v4) => {
            let h = v4.header();
            let total = usize::from(h.total_len());
            (
                IpAddr::from(h.source_addr()),
                IpAddr::from(h.destination_addr()),
                total,
            )
        }
        LaxNetSlice::Ipv6(v6) => {
            let h = v6.header();
            let total = IPV6_HEADER + usize::from(h.payload_length());
            (
                IpAddr::from(h.source_addr()),
                IpAddr::from(h.destination_addr()),
                total,
            )
        }
    };
    let pl = net.ip_payload_ref().ok_or(Skip::Cut)?;
    // A datagram's first fragment carries its UDP header: read as a
    // datagram cut short (a DNS answer past the MTU is paired by its
    // header). Later fragments, and fragmented TCP, are not read.
    let first_fragment = match net {
        LaxNetSlice::Ipv4(v4) => v4.header().fragments_offset().value() == 0,
        LaxNetSlice::Ipv6(_) => false,
    };
    if pl.fragmented && !(first_fragment && pl.ip_number == etherparse::IpNumber::UDP) {
        return Err(Skip::NotTcp);
    }
    if pl.ip_number == etherparse::IpNumber::UDP {
        let udp = UdpSlice::from_slice_lax(pl.payload).map_err(|_| Skip::Cut)?;
        if let Some((tunnel, inner)) = tunnel::udp(udp.destination_port(), udp.payload()) {
            // A tunnel's packet split into fragments is not put back together.
            if pl.fragmented {
                return Err(Skip::Tunnel(tunnel));
            }
            return open(tunnel, inner, outer, depth);
        }
        // The UDP length counts its 8-byte header (RFC 768); 0 is a jumbogram's.
        let declared = usize::from(udp.length()).saturating_sub(8);
        let payload = udp.payload();
        return Ok(Decoded::Udp(UdpPacket {
            src: SocketAddr::new(src, udp.source_port()),
            dst: SocketAddr::new(dst, udp.destination_port()),
            payload,
            len: u32::try_from(declared.max(payload.len())).unwrap_or(u32::MAX),
            tunnel: outer,
        }));
    }
    match tunnel::ip(pl.ip_number.0, pl.payload) {
        Opening::Opened(tunnel, inner) => return open(tunnel, inner, outer, depth),
        Opening::Unopened(tunnel) => return Err(Skip::Tunnel(tunnel)),
        Opening::No => {}
    }
    if pl.ip_number != etherparse::IpNumber::TCP {
        return Err(Skip::NotTcp);
    }
    // Bytes of the IP packet before the TCP header (IP header + extensions).
    let ip_hdr = (pl.payload.as_ptr() as usize).saturating_sub(ip.as_ptr() as usize);
    // A zero length field (TCP segmentation offload, jumbograms) gives no
    // length: use what was captured.
    let zero_len_field = declared_total == 0 || declared_total == IPV6_HEADER;
    let declared_tcp = if zero_len_field {
        pl.payload.len()
    } else {
        declared_total.saturating_sub(ip_hdr)
    };
    let tcp = TcpSlice::from_slice(pl.payload).map_err(|_| Skip::Cut)?;
    let hdr = tcp.header_slice().len();
    Ok(Decoded::Tcp(TcpPacket {
        src: SocketAddr::new(src, tcp.source_port()),
        dst: SocketAddr::new(dst, tcp.destination_port()),
        seq: tcp.sequence_number(),
        ack: tcp.acknowledgment_number(),
        syn: tcp.syn(),
        ack_flag: tcp.ack(),
        fin: tcp.fin(),
        rst: tcp.rst(),
        psh: tcp.psh(),
        window: tcp.window_size(),
        wscale: if tcp.syn() { window_scale(&tcp) } else { None },
        payload: tcp.payload(),
        seg_len: u32::try_from(declared_tcp.saturating_sub(hdr).max(tcp.payload().len()))
            .unwrap_or(u32::MAX),
        tunnel: outer,
    }))
}

fn window_scale(tcp: &TcpSlice) -> Option<u8> {
    tcp.options_iterator().find_map(|o| match o {
        Ok(TcpOptionElement::WindowScale(s)) => Some(s),
        _ => None,
    })
}
