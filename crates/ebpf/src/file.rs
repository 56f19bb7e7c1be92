//! The events file `capture --ebpf` writes beside its pcapng
//! (`CAPTURE.pcapng.events`), and `analyze` reads back.
//!
//! Format (little-endian):
//! - 16 bytes of magic: `whyslow-events\0\x01` (the last byte, the version)
//! - 8 bytes: CLOCK_REALTIME − CLOCK_MONOTONIC in nanoseconds (i64), taken
//!   when tracing began: adds to an event's times to put it on the packets'
//!   clock
//! - frames, each a 1-byte type, a 4-byte length and that many bytes:
//!   - type 1: one event record, as `event` decodes it
//!   - type 2: events lost so far (the ring buffer was full): 8 bytes of
//!     CLOCK_MONOTONIC nanoseconds, 8 bytes of the running total
//!
//! A reader keeps what it read before a cut or corrupt frame, and says so.

use crate::event::{decode, SockEvent, HEADER_SIZE, MAX_PAYLOAD};
use std::io::{self, Read, Write};

/// Where `capture --ebpf` puts the events of a capture, and `analyze`
/// looks for them: beside it, `.events` added to its name.
pub fn events_path(capture: &std::path::Path) -> std::path::PathBuf {
    let mut name = capture.as_os_str().to_owned();
    name.push(".events");
    name.into()
}

pub const MAGIC: &[u8; 16] = b"whyslow-events\0\x01";
const FRAME_EVENT: u8 = 1;
const FRAME_LOST: u8 = 2;
/// Longest frame a writer makes (an event record with a whole payload,
/// padded): a longer length is corruption, never an allocation.
const MAX_FRAME: usize = HEADER_SIZE + MAX_PAYLOAD + 8;

/// Writes an events file.
pub struct EventsWriter<W: Write> {
    out: W,
}

impl<W: Write> EventsWriter<W> {
    pub fn new(mut out: W, clock_offset_ns: i64) -> io::Result<Self> {
        out.write_all(MAGIC)?;
        out.write_all(&clock_offset_ns.to_le_bytes())?;
        Ok(EventsWriter { out })
    }

    fn frame(&mut self, kind: u8, bytes: &[u8]) -> io::Result<()> {
        self.out.write_all(&[kind])?;
        self.out.write_all(&(bytes.len() as u32).to_le_bytes())?;
        self.out.write_all(bytes)
    }

    /// One record as the ring buffer gave it.
    pub fn record(&mut self, record: &[u8]) -> io::Result<()> {
        self.frame(FRAME_EVENT, &record[..record.len().min(MAX_FRAME)])
    }

    pub fn lost(&mut self, at_ns: u64, total: u64) -> io::Result<()> {
        let mut b = [0u8; 16];
        b[..8].copy_from_slice(&at_ns.to_le_bytes());
        b[8..].copy_from_slice(&total.to_le_bytes());
        self.frame(FRAME_LOST, &b)
    }

    pub fn finish(mut self) -> io::Result<W> {
        self.out.flush()?;
        Ok(self.out)
    }
}

/// What an events file held.
#[derive(Debug, Default)]
pub struct EventsRead {
    pub clock_offset_ns: i64,
    pub events: Vec<SockEvent>,
    /// Events the kernel side could not hand over, and when (monotonic
    /// nanoseconds, running total).
    pub lost: Vec<(u64, u64)>,
    /// Records that did not decode, skipped.
    pub undecoded: u64,
    /// Events past `max_events`, counted only.
    pub beyond_limit: u64,
    /// Payload bytes kept, and payloads dropped past `MAX_PAYLOAD_BYTES`.
    pub payload_bytes: usize,
    pub payloads_dropped: u64,
    /// Why reading stopped early: the events before it are kept.
    pub error: Option<String>,
}

fn read_full<R: Read>(r: &mut R, buf: &mut [u8]) -> io::Result<bool> {
    let mut got = 0;
    while got < buf.len() {
        match r.read(&mut buf[got..]) {
            Ok(0) if got == 0 => return Ok(false),
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}

/// Which events keep their payload when a file is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Payloads {
    None,
    /// What packets do not show: TLS plaintext and the calls on Unix-domain
    /// sockets (what the analyzers read; the join needs none).
    BeyondPackets,
    All,
}

/// Payload bytes kept by one read, at most: a quarter of a GiB of
/// plaintext is hours of a busy TLS client's requests and responses at
/// 4 KiB each. Past it, events keep their counts and lose their payload.
pub const MAX_PAYLOAD_BYTES: usize = 256 << 20;

/// Reads an events file: at most `max_events` events are kept (memory stays
/// bounded), with the payloads `payloads` says. Err: not an events file.
pub fn read_events<R: Read>(
    mut r: R,
    max_events: usize,
    payloads: Payloads,
) -> Result<EventsRead, String> {
    let mut head = [0u8; 24];
    match read_full(&mut r, &mut head) {
        Ok(true) if &head[..16] == MAGIC => {}
        Ok(_) if head[..15] == MAGIC[..15] => {
            return Err(format!("events file of version {}, not 1", head[15]))
        }
        Ok(_) => return Err("not a whyslow events file".into()),
        Err(e) => return Err(format!("events file: {e}")),
    }
    let mut out = EventsRead {
        clock_offset_ns: i64::from_le_bytes(head[16..24].try_into().unwrap_or([0; 8])),
        ..EventsRead::default()
    };
    let mut frame = vec![0u8; MAX_FRAME];
    loop {
        let mut fh = [0u8; 5];
        match read_full(&mut r, &mut fh) {
            Ok(true) => {}
            Ok(false) => break,
            Err(e) => {
                out.error = Some(format!("events file cut in a frame header: {e}"));
                break;
            }
        }
        let len = u32::from_le_bytes([fh[1], fh[2], fh[3], fh[4]]) as usize;
        if len > MAX_FRAME {
            out.error = Some(format!("corrupt events file: a frame of {len} bytes"));
            break;
        }
        if let Err(e) = read_full(&mut r, &mut frame[..len]).and_then(|whole| {
            whole
                .then_some(())
                .ok_or_else(|| io::ErrorKind::UnexpectedEof.into())
        }) {
            out.error = Some(format!("events file cut in a frame: {e}"));
            break;
        }
        let bytes = &frame[..len];
        match fh[0] {
            FRAME_EVENT if out.events.len() >= max_events => out.beyond_limit += 1,
            FRAME_EVENT => match decode(bytes) {
                Ok(mut e) => {
                    let keep = match payloads {
                        Payloads::None => false,
                        Payloads::BeyondPackets => e.kind.is_tls() || e.unix.is_some(),
                        Payloads::All => true,
                    };
                    if !keep || out.payload_bytes + e.payload.len() > MAX_PAYLOAD_BYTES {
                        out.payloads_dropped += u64::from(keep);
                        e.payload = Vec::new();
                    }
                    out.payload_bytes += e.payload.len();
                    out.events.push(e);
                }
                Err(_) => out.undecoded += 1,
            },
            FRAME_LOST if len == 16 => out.lost.push((
                u64::from_le_bytes(bytes[..8].try_into().unwrap_or([0; 8])),
                u64::from_le_bytes(bytes[8..].try_into().unwrap_or([0; 8])),
            )),
            // Frames of kinds a later version adds are skipped whole.
            _ => {}
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{encode, Kind};
    use whyslow_model::Thread;

    fn event(tid: u32) -> SockEvent {
        SockEvent {
            enter_ns: 1,
            exit_ns: 2,
            thread: Thread { pid: 1, tid },
            kind: Kind::Send,
            bytes: 3,
            seq: 4,
            fd: 5,
            local: Some("127.0.0.1:1".parse().unwrap()),
            remote: Some("127.0.0.1:2".parse().unwrap()),
            unix: None,
            comm: "x".into(),
            payload: b"abc".to_vec(),
        }
    }

    fn file(events: &[SockEvent]) -> Vec<u8> {
        let mut w = EventsWriter::new(Vec::new(), -42).unwrap();
        for e in events {
            w.record(&encode(e)).unwrap();
        }
        w.lost(9, 3).unwrap();
        w.finish().unwrap()
    }

    #[test]
    fn what_is_written_reads_back_with_the_clock_and_losses() {
        let got = read_events(&file(&[event(1), event(2)])[..], 10, Payloads::All).unwrap();
        assert_eq!(got.clock_offset_ns, -42);
        assert_eq!(got.events, vec![event(1), event(2)]);
        assert_eq!(got.lost, vec![(9, 3)]);
        assert!(got.error.is_none());
    }

    #[test]
    fn a_cut_file_keeps_the_events_before_the_cut() {
        let whole = file(&[event(1), event(2)]);
        let got = read_events(&whole[..whole.len() - 30], 10, Payloads::None).unwrap();
        assert_eq!(got.events.len(), 1);
        assert!(got.events[0].payload.is_empty());
        assert!(got.error.unwrap().contains("cut"));
    }

    #[test]
    fn a_huge_frame_length_is_corruption_not_an_allocation() {
        let mut b = file(&[event(1)]);
        b[24 + 1..24 + 5].copy_from_slice(&u32::MAX.to_le_bytes());
        let got = read_events(&b[..], 10, Payloads::None).unwrap();
        assert!(got.events.is_empty());
        assert!(got.error.unwrap().contains("corrupt"));
    }

    #[test]
    fn events_past_the_limit_are_counted_not_kept() {
        let got = read_events(
            &file(&[event(1), event(2), event(3)])[..],
            2,
            Payloads::None,
        )
        .unwrap();
        assert_eq!((got.events.len(), got.beyond_limit), (2, 1));
    }

    #[test]
    fn other_files_are_refused() {
        assert!(read_events(
            &b"\x0a\x0d\x0d\x0a pcapng...................."[..],
            1,
            Payloads::None
        )
        .is_err());
        assert!(read_events(&b""[..], 1, Payloads::None).is_err());
    }
}
