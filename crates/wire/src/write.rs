//! Minimal pcapng writer: one section, interfaces declared up front,
//! enhanced packet blocks with microsecond timestamps (the pcapng default,
//! if_tsresol = 6). Files open in Wireshark, tshark and libpcap.

use crate::packet::{LinkType, Packet};
use std::io::{self, Write};

/// Block type codes (pcapng spec, draft-ietf-opsawg-pcapng §4).
const SHB_TYPE: u32 = 0x0A0D_0D0A;
const IDB_TYPE: u32 = 0x0000_0001;
const EPB_TYPE: u32 = 0x0000_0006;
const ISB_TYPE: u32 = 0x0000_0005;
/// isb_osdrop: packets the operating system dropped (pcapng spec §4.6).
const ISB_OSDROP: u16 = 7;
/// Byte-order magic: tells readers the file's endianness.
const BYTE_ORDER_MAGIC: u32 = 0x1A2B_3C4D;
/// Section length unknown (-1), allowed by the spec.
const SECTION_LENGTH_UNKNOWN: u64 = u64::MAX;
/// Fixed parts of the blocks, in bytes (type, length, body, trailing length).
const SHB_LEN: u32 = 28;
const IDB_LEN: u32 = 20;
const EPB_FIXED: u32 = 32;
/// Snapshot length libpcap uses by default (MAXIMUM_SNAPLEN in pcap-int.h).
pub const DEFAULT_SNAPLEN: u32 = 262_144;

/// Writes packets as pcapng. Call `flush` (or drop the inner writer) at the end.
pub struct PcapngWriter<W: Write> {
    out: W,
    interfaces: Vec<LinkType>,
    snaplen: u32,
}

impl<W: Write> PcapngWriter<W> {
    /// Starts a section with one interface of the given link type.
    pub fn new(out: W, link: LinkType, snaplen: u32) -> io::Result<Self> {
        let mut w = PcapngWriter {
            out,
            interfaces: Vec::new(),
            snaplen,
        };
        w.section_header()?;
        w.add_interface(link)?;
        Ok(w)
    }

    /// Declares another interface; returns its id for `write_on`.
    pub fn add_interface(&mut self, link: LinkType) -> io::Result<u32> {
        let mut b = Vec::with_capacity(IDB_LEN as usize);
        put32(&mut b, IDB_TYPE);
        put32(&mut b, IDB_LEN);
        b.extend_from_slice(&(link.0 as u16).to_le_bytes());
        b.extend_from_slice(&0u16.to_le_bytes());
        put32(&mut b, self.snaplen);
        put32(&mut b, IDB_LEN);
        self.out.write_all(&b)?;
        self.interfaces.push(link);
        Ok(self.interfaces.len() as u32 - 1)
    }

    fn section_header(&mut self) -> io::Result<()> {
        let mut b = Vec::with_capacity(SHB_LEN as usize);
        put32(&mut b, SHB_TYPE);
        put32(&mut b, SHB_LEN);
        put32(&mut b, BYTE_ORDER_MAGIC);
        b.extend_from_slice(&1u16.to_le_bytes()); // major version
        b.extend_from_slice(&0u16.to_le_bytes()); // minor version
        b.extend_from_slice(&SECTION_LENGTH_UNKNOWN.to_le_bytes());
        put32(&mut b, SHB_LEN);
        self.out.write_all(&b)
    }

    /// Writes one frame on interface 0.
    pub fn write(&mut self, at_us: u64, data: &[u8], orig_len: u32) -> io::Result<()> {
        self.write_on(0, at_us, data, orig_len)
    }

    pub fn write_packet(&mut self, p: &Packet) -> io::Result<()> {
        let iface = match self.interfaces.iter().position(|&l| l == p.link) {
            Some(i) => i as u32,
            None => self.add_interface(p.link)?,
        };
        self.write_on(iface, p.at_us, &p.data, p.orig_len)
    }

    pub fn write_on(
        &mut self,
        iface: u32,
        at_us: u64,
        data: &[u8],
        orig_len: u32,
    ) -> io::Result<()> {
        let cap = data.len().min(self.snaplen as usize);
        let data = &data[..cap];
        let padded = cap.div_ceil(4) * 4;
        let total = EPB_FIXED as usize + padded;
        let total32 = u32::try_from(total)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "packet too large"))?;
        let mut b = Vec::with_capacity(total);
        put32(&mut b, EPB_TYPE);
        put32(&mut b, total32);
        put32(&mut b, iface);
        put32(&mut b, (at_us >> 32) as u32);
        put32(&mut b, at_us as u32);
        put32(&mut b, cap as u32);
        put32(&mut b, orig_len.max(cap as u32));
        b.extend_from_slice(data);
        b.resize(b.len() + padded - cap, 0);
        put32(&mut b, total32);
        self.out.write_all(&b)
    }

    /// Writes interface `iface`'s statistics at `at_us`: `dropped` packets
    /// the kernel could not hand over (isb_osdrop), so that whoever reads
    /// the file later knows what it is missing.
    pub fn write_statistics(&mut self, iface: u32, at_us: u64, dropped: u64) -> io::Result<()> {
        let mut body = Vec::with_capacity(28);
        put32(&mut body, iface);
        put32(&mut body, (at_us >> 32) as u32);
        put32(&mut body, at_us as u32);
        body.extend_from_slice(&ISB_OSDROP.to_le_bytes());
        body.extend_from_slice(&8u16.to_le_bytes());
        body.extend_from_slice(&dropped.to_le_bytes());
        put32(&mut body, 0); // end of options
        let total = body.len() as u32 + 12;
        let mut b = Vec::with_capacity(total as usize);
        put32(&mut b, ISB_TYPE);
        put32(&mut b, total);
        b.extend_from_slice(&body);
        put32(&mut b, total);
        self.out.write_all(&b)
    }

    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }

    pub fn into_inner(self) -> W {
        self.out
    }
}

fn put32(b: &mut Vec<u8>, v: u32) {
    b.extend_from_slice(&v.to_le_bytes());
}
