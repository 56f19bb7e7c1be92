//! Streaming reader for pcap and pcapng files. Memory stays bounded: the
//! file is read through a buffer that grows only up to `MAX_BLOCK_BYTES`.

use crate::packet::{LinkType, Packet};
use crate::WireError;
use pcap_parser::pcapng::Block;
use pcap_parser::traits::PcapReaderIterator;
use pcap_parser::{create_reader, PcapBlockOwned, PcapError};
use std::fs::File;
use std::io::Read;
use std::path::Path;

/// Initial read buffer; pcap-parser's own examples use 64 KiB.
pub const INITIAL_BUFFER: usize = 64 * 1024;

/// Largest block accepted. libpcap refuses pcapng blocks above 16 MiB
/// (INITIAL_MAX_BLOCKSIZE in sf-pcapng.c), so a larger length field is
/// corruption, and must not make us allocate it.
pub const MAX_BLOCK_BYTES: usize = 16 * 1024 * 1024;

const MICROS_PER_SEC: u128 = 1_000_000;

/// Smallest pcapng block: type, length and trailing length (pcapng spec
/// §3.1). pcap-parser 0.16 computes `length - 12` unchecked for process
/// information blocks, so shorter lengths are refused before it sees them.
const MIN_NG_BLOCK: u32 = 12;
/// Section header block type: a palindrome, read the same in both byte orders.
const SHB_TYPE: [u8; 4] = [0x0a, 0x0d, 0x0d, 0x0a];

/// Interfaces per pcapng section. Real captures have a handful (one per
/// NIC, "any" included); the bound stops a file from growing the table.
const MAX_INTERFACES: usize = 1024;

/// Per-interface facts of a pcapng section (or the one "interface" of a pcap file).
#[derive(Debug, Clone, Copy)]
struct Interface {
    link: LinkType,
    /// Timestamp units per second.
    units_per_sec: u64,
    /// Seconds added to every timestamp (if_tsoffset).
    offset_s: i64,
    /// Packets its last statistics block says were dropped while capturing.
    dropped: Option<u64>,
}

/// pcapng interface statistics options (§4.6): packets the interface
/// dropped, and packets the operating system or capture buffer dropped.
/// Both count since the capture began; the last block holds the totals.
const ISB_IFDROP: u16 = 5;
const ISB_OSDROP: u16 = 7;

/// `before` plus what `ifaces`' statistics say they dropped, if anything says.
fn dropped(before: Option<u64>, ifaces: &[Interface]) -> Option<u64> {
    let current = ifaces.iter().filter_map(|i| i.dropped);
    current.fold(before, |sum, d| Some(sum.unwrap_or(0).saturating_add(d)))
}

/// if_tsresol (pcapng spec §4.2): high bit clear = 10^-n s, set = 2^-n s.
fn units_per_sec(tsresol: u8) -> Option<u64> {
    let n = u32::from(tsresol & 0x7f);
    if tsresol & 0x80 == 0 {
        10u64.checked_pow(n)
    } else {
        1u64.checked_shl(n).filter(|_| n < 64)
    }
}

fn to_us(ticks: u64, iface: &Interface) -> u64 {
    let us = u128::from(ticks) * MICROS_PER_SEC / u128::from(iface.units_per_sec.max(1));
    let off = i128::from(iface.offset_s) * MICROS_PER_SEC as i128;
    (us as i128 + off).clamp(0, i128::from(u64::MAX)) as u64
}

/// Reads packets one at a time from a pcap or pcapng stream.
pub struct CaptureReader<'a> {
    inner: Box<dyn PcapReaderIterator + 'a>,
    interfaces: Vec<Interface>,
    capacity: usize,
    packets: u64,
    last_at_us: u64,
    /// Byte order of the current pcapng section; `None` in a pcap file.
    ng_big_endian: Option<bool>,
    /// Drops the statistics of sections already ended reported.
    dropped_before: Option<u64>,
    done: bool,
}

impl CaptureReader<'static> {
    pub fn open(path: &Path) -> Result<Self, WireError> {
        let file = File::open(path)?;
        CaptureReader::new(file)
    }
}

impl<'a> CaptureReader<'a> {
    pub fn new<R: Read + 'a>(reader: R) -> Result<Self, WireError> {
        Self::with_buffer(reader, INITIAL_BUFFER)
    }

    /// As `new`, with a read buffer of `capacity` bytes to start with
    /// (larger: fewer reads and refills on big files).
    pub fn with_buffer<R: Read + 'a>(reader: R, capacity: usize) -> Result<Self, WireError> {
        let capacity = capacity.clamp(INITIAL_BUFFER, MAX_BLOCK_BYTES);
        let inner = create_reader(capacity, reader).map_err(|e| match e {
            PcapError::HeaderNotRecognized | PcapError::Eof => WireError::NotACapture,
            PcapError::Incomplete(_) | PcapError::UnexpectedEof => WireError::Truncated {
                offset: 0,
                packets: 0,
            },
            other => WireError::Corrupt {
                offset: 0,
                packets: 0,
                reason: format!("{other:?}"),
            },
        })?;
        Ok(CaptureReader {
            inner,
            interfaces: Vec::new(),
            capacity,
            packets: 0,
            last_at_us: 0,
            ng_big_endian: None,
            dropped_before: None,
            done: false,
        })
    }

    /// Packets read so far.
    pub fn packets_read(&self) -> u64 {
        self.packets
    }

    /// Packets the capturing tool says it dropped (pcapng interface
    /// statistics read so far), if the file says.
    pub fn dropped_while_capturing(&self) -> Option<u64> {
        dropped(self.dropped_before, &self.interfaces)
    }

    /// Next packet, `Ok(None)` at the end. After an error the reader stays ended.
    pub fn next_packet(&mut self) -> Result<Option<Packet>, WireError> {
        let mut p = Packet::empty();
        Ok(self.read_into(&mut p)?.then_some(p))
    }

    /// As `next_packet`, into `p`, reusing its buffer: no allocation per
    /// packet. Returns false at the end (`p` is then unspecified).
    pub fn read_into(&mut self, p: &mut Packet) -> Result<bool, WireError> {
        if self.done {
            return Ok(false);
        }
        let r = self.next_inner(p);
        if !matches!(r, Ok(true)) {
            self.done = true;
        }
        r
    }

    fn next_inner(&mut self, p: &mut Packet) -> Result<bool, WireError> {
        loop {
            let offset = self.inner.consumed() as u64;
            if let Some(len) = self.short_ng_block() {
                return Err(self.corrupt(offset, format!("pcapng block length {len} < 12")));
            }
            let step = match self.inner.next() {
                Ok((used, block)) => {
                    if let PcapBlockOwned::NG(Block::SectionHeader(shb)) = &block {
                        self.ng_big_endian = Some(shb.big_endian());
                        self.dropped_before = dropped(self.dropped_before, &self.interfaces);
                    }
                    let big = self.ng_big_endian.unwrap_or(false);
                    let got = handle_block(block, &mut self.interfaces, self.last_at_us, big, p);
                    Ok((used, got))
                }
                Err(e) => Err(classify(e)),
            };
            match step {
                Ok((used, got)) => {
                    self.inner.consume(used);
                    if got.map_err(|reason| self.corrupt(offset, reason))? {
                        self.packets += 1;
                        p.number = self.packets;
                        self.last_at_us = p.at_us;
                        return Ok(true);
                    }
                }
                Err(Next::Eof) => return Ok(false),
                Err(Next::Refill) => self.refill(offset)?,
                Err(Next::Grow) => self.grow(offset)?,
                Err(Next::Truncated) => {
                    return Err(WireError::Truncated {
                        offset,
                        packets: self.packets,
                    })
                }
                Err(Next::Corrupt(reason)) => return Err(self.corrupt(offset, reason)),
            }
        }
    }

    /// The length of the next pcapng block when it is below the minimum.
    fn short_ng_block(&self) -> Option<u32> {
        let big = self.ng_big_endian?;
        let d = self.inner.data();
        if d.len() < 8 || d[..4] == SHB_TYPE {
            return None;
        }
        let b = [d[4], d[5], d[6], d[7]];
        let len = if big {
            u32::from_be_bytes(b)
        } else {
            u32::from_le_bytes(b)
        };
        (len < MIN_NG_BLOCK).then_some(len)
    }

    fn corrupt(&self, offset: u64, reason: String) -> WireError {
        WireError::Corrupt {
            offset,
            packets: self.packets,
            reason,
        }
    }

    fn refill(&mut self, offset: u64) -> Result<(), WireError> {
        let before = self.inner.data().len();
        let failed = self
            .inner
            .refill()
            .map_err(|e| format!("read failed: {e:?}"))
            .err();
        if let Some(reason) = failed {
            return Err(self.corrupt(offset, reason));
        }
        // A full buffer that still needs more data: the block is larger than it.
        if self.inner.data().len() == before && !self.inner.reader_exhausted() {
            self.grow(offset)?;
        }
        Ok(())
    }

    fn grow(&mut self, offset: u64) -> Result<(), WireError> {
        if self.capacity >= MAX_BLOCK_BYTES {
            return Err(self.corrupt(
                offset,
                format!("block longer than {} MiB", MAX_BLOCK_BYTES >> 20),
            ));
        }
        self.capacity = (self.capacity * 2).min(MAX_BLOCK_BYTES);
        if !self.inner.grow(self.capacity) {
            return Err(self.corrupt(offset, "could not grow the read buffer".into()));
        }
        let failed = self
            .inner
            .refill()
            .map_err(|e| format!("read failed: {e:?}"))
            .err();
        match failed {
            Some(reason) => Err(self.corrupt(offset, reason)),
            None => Ok(()),
        }
    }
}

enum Next {
    Eof,
    Refill,
    Grow,
    Truncated,
    Corrupt(String),
}

fn classify(e: PcapError<&[u8]>) -> Next {
    match e {
        PcapError::Eof => Next::Eof,
        PcapError::Incomplete(_) => Next::Refill,
        PcapError::BufferTooSmall => Next::Grow,
        PcapError::UnexpectedEof => Next::Truncated,
        PcapError::ReadError => Next::Corrupt("read failed".into()),
        PcapError::HeaderNotRecognized => Next::Corrupt("unknown block".into()),
        PcapError::NomError(_, kind) => Next::Corrupt(format!("bad block ({kind:?})")),
        PcapError::OwnedNomError(_, kind) => Next::Corrupt(format!("bad block ({kind:?})")),
    }
}

/// Updates interface state from a block; fills `out` and returns true for
/// data blocks (the packet number is set by the caller).
fn handle_block(
    block: PcapBlockOwned,
    ifaces: &mut Vec<Interface>,
    last_at_us: u64,
    big_endian: bool,
    out: &mut Packet,
) -> Result<bool, String> {
    let mut packet = |link, at_us, data: &[u8], orig_len| {
        out.at_us = at_us;
        out.link = link;
        out.data.clear();
        out.data.extend_from_slice(data);
        out.orig_len = orig_len;
        true
    };
    match block {
        PcapBlockOwned::LegacyHeader(h) => {
            let units = if h.is_nanosecond_precision() {
                1_000_000_000
            } else {
                1_000_000
            };
            ifaces.clear();
            ifaces.push(Interface {
                link: LinkType(h.network.0 as u32),
                units_per_sec: units,
                offset_s: 0,
                dropped: None,
            });
            Ok(false)
        }
        PcapBlockOwned::Legacy(b) => {
            let iface = ifaces.first().ok_or("packet before the file header")?;
            let ticks = u64::from(b.ts_sec) * iface.units_per_sec + u64::from(b.ts_usec);
            Ok(packet(iface.link, to_us(ticks, iface), b.data, b.origlen))
        }
        PcapBlockOwned::NG(b) => handle_ng(b, ifaces, last_at_us, big_endian, packet),
    }
}

fn handle_ng(
    block: Block,
    ifaces: &mut Vec<Interface>,
    last_at_us: u64,
    big_endian: bool,
    mut packet: impl FnMut(LinkType, u64, &[u8], u32) -> bool,
) -> Result<bool, String> {
    match block {
        // Interface ids are per section.
        Block::SectionHeader(_) => ifaces.clear(),
        Block::InterfaceDescription(idb) => {
            if ifaces.len() >= MAX_INTERFACES {
                return Err(format!(
                    "more than {MAX_INTERFACES} interfaces in one section"
                ));
            }
            let units = units_per_sec(idb.if_tsresol)
                .ok_or_else(|| format!("unsupported if_tsresol {}", idb.if_tsresol))?;
            ifaces.push(Interface {
                link: LinkType(idb.linktype.0 as u32),
                units_per_sec: units,
                offset_s: idb.if_tsoffset,
                dropped: None,
            });
        }
        Block::InterfaceStatistics(isb) => {
            let counter = |o: &pcap_parser::pcapng::PcapNGOption| {
                let v: [u8; 8] = o.value().get(..8)?.try_into().ok()?;
                Some(match big_endian {
                    true => u64::from_be_bytes(v),
                    false => u64::from_le_bytes(v),
                })
            };
            let drops = isb
                .options
                .iter()
                .filter(|o| matches!(o.code.0, ISB_IFDROP | ISB_OSDROP))
                .filter_map(counter)
                .fold(None, |sum: Option<u64>, d| {
                    Some(sum.unwrap_or(0).saturating_add(d))
                });
            if let (Some(iface), Some(d)) = (ifaces.get_mut(isb.if_id as usize), drops) {
                iface.dropped = Some(d);
            }
        }
        Block::EnhancedPacket(epb) => {
            let iface = ifaces
                .get(epb.if_id as usize)
                .ok_or_else(|| format!("packet on undeclared interface {}", epb.if_id))?;
            let ticks = (u64::from(epb.ts_high) << 32) | u64::from(epb.ts_low);
            // pcap-parser keeps the padding in `data`; caplen is authoritative.
            let len = (epb.caplen as usize).min(epb.data.len());
            let at = to_us(ticks, iface);
            return Ok(packet(iface.link, at, &epb.data[..len], epb.origlen));
        }
        Block::SimplePacket(spb) => {
            // No timestamp in a simple packet block: keep the last one.
            let iface = ifaces.first().ok_or("simple packet without an interface")?;
            let len = (spb.origlen as usize).min(spb.data.len());
            return Ok(packet(
                iface.link,
                last_at_us,
                &spb.data[..len],
                spb.origlen,
            ));
        }
        _ => {}
    }
    Ok(false)
}

/// What `read_file` saw: packets delivered and the error that ended it, if any.
#[derive(Debug)]
pub struct ReadOutcome {
    pub packets_read: u64,
    /// Packets the capturing tool says it dropped (pcapng statistics).
    pub dropped_while_capturing: Option<u64>,
    pub error: Option<WireError>,
}

/// Calls `f` with each packet of a pcap/pcapng stream (one buffer, reused).
/// A truncated or corrupt stream delivers what was readable, then reports
/// the error.
pub fn read_packets<R: Read>(reader: R, f: impl FnMut(&Packet)) -> ReadOutcome {
    read_packets_buffered(reader, INITIAL_BUFFER, f)
}

/// As `read_packets`, with a read buffer of `capacity` bytes to start with.
pub fn read_packets_buffered<R: Read>(
    reader: R,
    capacity: usize,
    mut f: impl FnMut(&Packet),
) -> ReadOutcome {
    let mut r = match CaptureReader::with_buffer(reader, capacity) {
        Ok(r) => r,
        Err(e) => {
            return ReadOutcome {
                packets_read: 0,
                dropped_while_capturing: None,
                error: Some(e),
            }
        }
    };
    let mut p = Packet::empty();
    let error = loop {
        match r.read_into(&mut p) {
            Ok(true) => f(&p),
            Ok(false) => break None,
            Err(e) => break Some(e),
        }
    };
    ReadOutcome {
        packets_read: r.packets_read(),
        dropped_while_capturing: r.dropped_while_capturing(),
        error,
    }
}
