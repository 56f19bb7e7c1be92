//! HTTP/2 framing (RFC 9113 §4, §6) for one direction: the client preface,
//! 9-byte frame headers, and payloads either kept (header-block fragments,
//! SETTINGS; bounded) or skipped by their length.

/// Client connection preface, RFC 9113 §3.4.
pub const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// Frame header size, RFC 9113 §4.1.
pub const HEADER_LEN: usize = 9;
/// Initial SETTINGS_MAX_FRAME_SIZE, RFC 9113 §6.5.2: the largest frame a
/// peer sends before the other one raised it (sniffing insists on it).
pub const DEFAULT_MAX_FRAME: u32 = 16_384;
/// Most payload bytes of one frame kept (header-block fragments, SETTINGS).
/// Frames may be up to 16 MiB-1 long once SETTINGS_MAX_FRAME_SIZE allows it,
/// but header blocks of real requests stay far below 64 KiB (servers refuse
/// larger ones: nginx by default holds headers in 4 buffers of 8 KiB).
pub const MAX_KEPT_PAYLOAD: usize = 64 * 1024;

pub const DATA: u8 = 0;
pub const HEADERS: u8 = 1;
pub const PRIORITY: u8 = 2;
pub const RST_STREAM: u8 = 3;
pub const SETTINGS: u8 = 4;
pub const PUSH_PROMISE: u8 = 5;
pub const PING: u8 = 6;
pub const GOAWAY: u8 = 7;
pub const WINDOW_UPDATE: u8 = 8;
pub const CONTINUATION: u8 = 9;

pub const END_STREAM: u8 = 0x1;
pub const ACK: u8 = 0x1;
pub const END_HEADERS: u8 = 0x4;
pub const PADDED: u8 = 0x8;
pub const PRIORITY_FLAG: u8 = 0x20;

/// Setting identifier of SETTINGS_HEADER_TABLE_SIZE, RFC 9113 §6.5.2.
pub const SETTINGS_HEADER_TABLE_SIZE: u16 = 1;

/// A parsed 9-byte frame header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameHeader {
    pub len: u32,
    pub kind: u8,
    pub flags: u8,
    pub stream: u32,
    /// The reserved bit before the stream id (must be 0 when sent).
    pub reserved: bool,
}

impl FrameHeader {
    pub fn parse(b: &[u8; HEADER_LEN]) -> Self {
        let id = u32::from_be_bytes([b[5], b[6], b[7], b[8]]);
        FrameHeader {
            len: u32::from_be_bytes([0, b[0], b[1], b[2]]),
            kind: b[3],
            flags: b[4],
            stream: id & 0x7fff_ffff,
            reserved: id & 0x8000_0000 != 0,
        }
    }

    pub fn has(&self, flag: u8) -> bool {
        self.flags & flag != 0
    }

    /// Rules of RFC 9113 §6 a receiver treats as connection errors: stream
    /// 0 or not, fixed payload sizes. Met in a capture they mean the bytes
    /// are not where a frame starts.
    pub fn check(&self) -> Result<(), String> {
        let on_zero = self.stream == 0;
        let ok = match self.kind {
            DATA | HEADERS | CONTINUATION | PUSH_PROMISE => !on_zero,
            PRIORITY => !on_zero && self.len == 5,
            RST_STREAM => !on_zero && self.len == 4,
            SETTINGS => on_zero && self.len.is_multiple_of(6) && !(self.has(ACK) && self.len != 0),
            PING => on_zero && self.len == 8,
            GOAWAY => on_zero && self.len >= 8,
            WINDOW_UPDATE => self.len == 4,
            _ => true,
        };
        if ok {
            Ok(())
        } else {
            Err(format!(
                "HTTP/2 frame type {} of {} bytes on stream {} breaks RFC 9113 §6",
                self.kind, self.len, self.stream
            ))
        }
    }

    /// A frame header as real peers send them, strictly: known type, only
    /// defined flags, default size limit, reserved bit clear. `client`: sent
    /// by the client, whose streams are odd and who never pushes.
    pub fn plausible(&self, client: bool) -> bool {
        let flags = match self.kind {
            DATA => END_STREAM | PADDED,
            HEADERS => END_STREAM | END_HEADERS | PADDED | PRIORITY_FLAG,
            SETTINGS | PING => ACK,
            PUSH_PROMISE => END_HEADERS | PADDED,
            CONTINUATION => END_HEADERS,
            PRIORITY | RST_STREAM | GOAWAY | WINDOW_UPDATE => 0,
            _ => return false,
        };
        let own_stream = matches!(self.kind, DATA | HEADERS | CONTINUATION);
        self.check().is_ok()
            && self.flags & !flags == 0
            && self.len <= DEFAULT_MAX_FRAME
            && !self.reserved
            && !(client && self.kind == PUSH_PROMISE)
            && !(client && own_stream && self.stream.is_multiple_of(2))
    }

    /// Whether the payload is kept for its content.
    fn kept(&self) -> bool {
        matches!(self.kind, HEADERS | CONTINUATION | PUSH_PROMISE | SETTINGS)
    }
}

/// The header-block fragment of a HEADERS, PUSH_PROMISE or CONTINUATION
/// payload: padding and priority fields removed (RFC 9113 §6.2, §6.6).
pub fn fragment<'a>(h: &FrameHeader, payload: &'a [u8]) -> Result<&'a [u8], String> {
    let mut start = 0usize;
    let mut pad = 0usize;
    if h.kind != CONTINUATION && h.has(PADDED) {
        pad = usize::from(
            *payload
                .first()
                .ok_or("HTTP/2 padded frame without its pad length")?,
        );
        start = 1;
    }
    if h.kind == HEADERS && h.has(PRIORITY_FLAG) {
        start += 5;
    }
    if h.kind == PUSH_PROMISE {
        start += 4;
    }
    payload
        .len()
        .checked_sub(pad)
        .filter(|&end| start <= end)
        .map(|end| &payload[start..end])
        .ok_or_else(|| format!("HTTP/2 padding of {pad} bytes longer than its frame"))
}

/// (identifier, value) pairs of a SETTINGS payload (RFC 9113 §6.5.1).
pub fn settings(payload: &[u8]) -> impl Iterator<Item = (u16, u32)> + '_ {
    payload.chunks_exact(6).map(|s| {
        (
            u16::from_be_bytes([s[0], s[1]]),
            u32::from_be_bytes([s[2], s[3], s[4], s[5]]),
        )
    })
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Preface(usize),
    Header(usize),
    Payload(u32),
}

/// What one `Framer::step` reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// All input consumed, more needed.
    Need,
    /// The client preface is complete.
    Preface,
    /// A frame header is complete; its payload follows.
    Header(FrameHeader),
    /// A frame is complete; `payload()` holds it when it was kept.
    Done(FrameHeader),
}

/// What a gap in the capture did to the framing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gap {
    /// Inside a skipped payload: only uncounted bytes.
    Absorbed,
    /// Frame boundaries are lost.
    Lost,
}

/// Frame reader of one direction.
#[derive(Debug)]
pub struct Framer {
    state: State,
    header: [u8; HEADER_LEN],
    frame: Option<FrameHeader>,
    optional_preface: bool,
    keep: bool,
    payload: Vec<u8>,
}

impl Framer {
    /// `preface`: the client side, whose stream begins with the preface;
    /// `optional`: or may begin with a frame (capture started mid-stream).
    pub fn new(preface: bool, optional: bool) -> Self {
        Framer {
            optional_preface: optional,
            state: if preface {
                State::Preface(0)
            } else {
                State::Header(0)
            },
            header: [0; HEADER_LEN],
            frame: None,
            keep: false,
            payload: Vec::new(),
        }
    }

    /// Bytes consumed now belong to a frame header (or the preface).
    pub fn in_header(&self) -> bool {
        !matches!(self.state, State::Payload(_))
    }

    pub fn in_preface(&self) -> bool {
        matches!(self.state, State::Preface(_))
    }

    /// The frame whose payload the next bytes belong to.
    pub fn current(&self) -> Option<FrameHeader> {
        match self.state {
            State::Payload(_) => self.frame,
            _ => None,
        }
    }

    /// The payload of the frame just done, when it was kept.
    pub fn payload(&self) -> Option<&[u8]> {
        self.keep.then_some(self.payload.as_slice())
    }

    /// Consumes bytes from `data` up to the next event; returns how many.
    pub fn step(&mut self, data: &[u8]) -> Result<(usize, Step), String> {
        if self.state == State::Preface(0) && self.optional_preface {
            // A frame header cannot start with the preface's 'P': its
            // length would be over 5 MiB.
            match data.first() {
                None => return Ok((0, Step::Need)),
                Some(&b) if b != PREFACE[0] => self.state = State::Header(0),
                Some(_) => {}
            }
        }
        match self.state {
            State::Preface(have) => {
                let n = (PREFACE.len() - have).min(data.len());
                if data[..n] != PREFACE[have..have + n] {
                    return Err("HTTP/2 client preface expected".into());
                }
                if have + n == PREFACE.len() {
                    self.state = State::Header(0);
                    return Ok((n, Step::Preface));
                }
                self.state = State::Preface(have + n);
                Ok((n, Step::Need))
            }
            State::Header(have) => {
                let n = (HEADER_LEN - have).min(data.len());
                self.header[have..have + n].copy_from_slice(&data[..n]);
                if have + n < HEADER_LEN {
                    self.state = State::Header(have + n);
                    return Ok((n, Step::Need));
                }
                let h = FrameHeader::parse(&self.header);
                h.check()?;
                self.frame = Some(h);
                self.keep = h.kept() && h.len as usize <= MAX_KEPT_PAYLOAD;
                self.payload.clear();
                self.state = State::Payload(h.len);
                Ok((n, Step::Header(h)))
            }
            State::Payload(left) => {
                let n = data.len().min(left as usize);
                if self.keep {
                    self.payload.extend_from_slice(&data[..n]);
                }
                let left = left - n as u32;
                if left > 0 {
                    self.state = State::Payload(left);
                    return Ok((n, Step::Need));
                }
                self.state = State::Header(0);
                match self.frame.take() {
                    Some(h) => Ok((n, Step::Done(h))),
                    None => Ok((n, Step::Need)),
                }
            }
        }
    }

    /// `missing` bytes were never captured: a gap inside a skipped payload
    /// only shortens it; anywhere else the frame boundaries are lost.
    pub fn skip_missing(&mut self, missing: u64) -> Gap {
        match self.state {
            State::Payload(left) if !self.keep && missing <= u64::from(left) => {
                self.state = State::Payload(left - missing as u32);
                Gap::Absorbed
            }
            _ => Gap::Lost,
        }
    }
}
