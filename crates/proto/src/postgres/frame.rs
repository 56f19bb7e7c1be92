//! Message framing for one direction: type byte + int32 length (including
//! itself), or the untyped startup packet (int32 length + int32 code). Bodies
//! are handed out in pieces as they arrive, never collected here; after a
//! framing error or a gap the framer scans for a boundary it can trust.

/// Frontend message types a client resync may land on (protocol-message-formats:
/// Query, Parse, Bind, Describe, Execute, Sync, Close, Flush, FunctionCall,
/// CopyData, CopyDone, CopyFail).
const SCAN_TYPES: &[u8] = b"QPBDESCHFdcf";
/// Every frontend type after the startup packet (adds Terminate and the
/// password/SASL message `p`).
const FRONTEND_TYPES: &[u8] = b"QPBDESCHFdcfXp";
/// Every backend type of protocol 3.0/3.2.
const BACKEND_TYPES: &[u8] = b"RSKZTDCENAI123tnsGHWdcVv";

/// The two type lists as tables, one lookup per message header.
const FRONTEND: [bool; 256] = type_table(FRONTEND_TYPES);
const BACKEND: [bool; 256] = type_table(BACKEND_TYPES);

const fn type_table(types: &[u8]) -> [bool; 256] {
    let mut table = [false; 256];
    let mut i = 0;
    while i < types.len() {
        table[types[i] as usize] = true;
        i += 1;
    }
    table
}

/// Largest length field: it is an int32, so anything past i32::MAX is a
/// negative length on the wire.
const MAX_MESSAGE_LEN: u32 = i32::MAX as u32;
/// While scanning, a candidate message longer than this is not believed (the
/// server's own PQ_LARGE_MESSAGE_LIMIT is 1 GB, but real messages found at a
/// resync are small; a tighter bound keeps random bytes from matching).
const SCAN_MAX_LEN: u32 = 1 << 20;
/// Bytes kept while looking for a client message boundary: enough to check
/// two ordinary messages (a Bind with a few parameters) in a row.
pub const RESYNC_WINDOW: usize = 4096;
/// Longest statement/portal name a scan accepts in Describe/Close/Execute
/// (NAMEDATALEN is 64; clients do not send longer names in practice).
const SCAN_MAX_NAME: u32 = 256;
/// Query text bytes a scan checks for NUL (a Query holds one C string).
const SCAN_TEXT_CHECK: usize = 256;
/// Startup packet codes (protocol-message-formats: StartupMessage,
/// SSLRequest, GSSENCRequest, CancelRequest).
pub const PROTOCOL_3: u32 = 196_608;
pub const SSL_REQUEST: u32 = 80_877_103;
pub const GSSENC_REQUEST: u32 = 80_877_104;
pub const CANCEL_REQUEST: u32 = 80_877_102;
/// A startup packet is refused by the server past 10000 bytes
/// (MAX_STARTUP_PACKET_LENGTH in postmaster).
pub const MAX_STARTUP_LEN: u32 = 10_000;

/// Whether a startup packet (length, code) is one PostgreSQL sends: protocol
/// 3.x, or one of the special request codes with its fixed length (the cancel
/// key grew to up to 256 bytes in protocol 3.2).
pub fn startup_ok(len: u32, code: u32) -> bool {
    match code {
        SSL_REQUEST | GSSENC_REQUEST => len == 8,
        CANCEL_REQUEST => (16..=12 + 256).contains(&len),
        c if c >> 16 == PROTOCOL_3 >> 16 && c & 0xffff < 16 => (9..=MAX_STARTUP_LEN).contains(&len),
        _ => false,
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Client,
    Server,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Next message is the untyped startup packet.
    Startup,
    Typed,
    /// Next byte is the server's one-byte answer to SSLRequest/GSSENCRequest.
    Byte,
    /// Looking for a trustworthy boundary.
    Scan,
    Stopped,
}

/// What one `step` found.
#[derive(Debug, PartialEq, Eq)]
pub enum Step<'a> {
    /// No more input (and nothing pending).
    Idle,
    /// Bytes consumed with nothing to report (partial header, scanning).
    Skipped,
    /// A message header: type (0 for a startup packet), body length, and for
    /// a startup packet its code.
    Start {
        kind: u8,
        body: u32,
        code: u32,
    },
    Body(&'a [u8]),
    End,
    /// A typed message whole in the input: its Start, Body and End at once.
    Whole {
        kind: u8,
        body: &'a [u8],
    },
    /// The one-byte answer to SSLRequest/GSSENCRequest.
    Byte(u8),
    /// Client scan found a boundary: these bytes start with a message and
    /// must be read again, before the rest of the input.
    Synced(Vec<u8>),
    /// Server scan found a ReadyForQuery with this status.
    Ready(u8),
    /// Framing broke: the framer now scans (the reason is for `error()`).
    Bad(&'static str),
}

/// Framing state of one direction.
#[derive(Debug)]
pub struct Framer {
    side: Side,
    mode: Mode,
    head: [u8; 8],
    have: usize,
    /// Body bytes still to come, when inside a body.
    left: Option<u32>,
    window: Vec<u8>,
    /// Server scan: the last bytes seen, to match `Z\0\0\0\x05[ITE]`.
    tail: [u8; 6],
}

impl Framer {
    pub fn new(side: Side, startup: bool) -> Self {
        let mode = match (startup, side) {
            (false, _) => Mode::Scan,
            (true, Side::Client) => Mode::Startup,
            (true, Side::Server) => Mode::Typed,
        };
        Framer {
            side,
            mode,
            head: [0; 8],
            have: 0,
            left: None,
            window: Vec::new(),
            tail: [0; 6],
        }
    }

    pub fn expect_byte(&mut self) {
        self.mode = Mode::Byte;
    }
    pub fn expect_startup(&mut self) {
        self.mode = Mode::Startup;
    }
    pub fn stop(&mut self) {
        self.mode = Mode::Stopped;
        self.window = Vec::new();
    }
    pub fn stopped(&self) -> bool {
        self.mode == Mode::Stopped
    }
    pub fn scanning(&self) -> bool {
        self.mode == Mode::Scan
    }
    /// Bytes held (for the bounded-memory tests).
    pub fn buffered(&self) -> usize {
        self.window.capacity()
    }

    /// Reads typed messages from the next byte on, without scanning: the
    /// caller knows a message begins there.
    pub fn trust_boundary(&mut self) {
        self.resync();
        self.mode = Mode::Typed;
    }

    /// Starts looking for a boundary (after a gap the bytes are not contiguous).
    pub fn resync(&mut self) {
        self.mode = Mode::Scan;
        self.left = None;
        self.have = 0;
        self.window.clear();
        self.tail = [0; 6];
    }

    /// `missing` bytes were never captured: inside a body they are only
    /// counted (true); anywhere else framing is lost and a scan begins (false).
    pub fn skip_missing(&mut self, missing: u64) -> bool {
        match self.left {
            Some(left) if missing <= u64::from(left) && self.mode == Mode::Typed => {
                self.left = Some(left - missing as u32);
                true
            }
            _ => {
                if self.mode != Mode::Stopped {
                    self.resync();
                }
                false
            }
        }
    }

    /// Consumes a prefix of `data`: returns how many bytes and what they were.
    pub fn step<'a>(&mut self, data: &'a [u8]) -> (usize, Step<'a>) {
        if let Some(left) = self.left {
            if left == 0 {
                self.left = None;
                return (0, Step::End);
            }
            if data.is_empty() {
                return (0, Step::Idle);
            }
            let n = data.len().min(left as usize);
            self.left = Some(left - n as u32);
            return (n, Step::Body(&data[..n]));
        }
        if data.is_empty() {
            return (0, Step::Idle);
        }
        match self.mode {
            Mode::Stopped => (data.len(), Step::Skipped),
            Mode::Byte => {
                self.mode = Mode::Typed;
                (1, Step::Byte(data[0]))
            }
            Mode::Scan => match self.side {
                Side::Client => self.scan_client(data),
                Side::Server => self.scan_server(data),
            },
            Mode::Startup => self.header(data, 8),
            Mode::Typed => self.whole(data).unwrap_or_else(|| self.header(data, 5)),
        }
    }

    /// A typed message that lies whole in `data` and passes the header's
    /// checks, read in one step (the usual case: small messages, many to a
    /// segment). None leaves it to `header` and the body steps.
    fn whole<'a>(&self, data: &'a [u8]) -> Option<(usize, Step<'a>)> {
        if self.have != 0 {
            return None;
        }
        let (&kind, rest) = data.split_first()?;
        let len = be32(rest.get(..4)?);
        let end = 1 + usize::try_from(len).ok()?;
        if end > data.len() || self.refuse(kind, len, 0).is_some() {
            return None;
        }
        Some((
            end,
            Step::Whole {
                kind,
                body: &data[5..end],
            },
        ))
    }

    fn header<'a>(&mut self, data: &'a [u8], size: usize) -> (usize, Step<'a>) {
        let n = (size - self.have).min(data.len());
        if self.have == 0 && n == size {
            // The whole header is in `data` (the usual case): read in place.
            self.head[..size].copy_from_slice(&data[..size]);
        } else {
            self.head[self.have..self.have + n].copy_from_slice(&data[..n]);
            self.have += n;
            if self.have < size {
                return (n, Step::Skipped);
            }
        }
        self.have = 0;
        let (kind, len, code) = if size == 8 {
            (0, be32(&self.head[..4]), be32(&self.head[4..8]))
        } else {
            (self.head[0], be32(&self.head[1..5]), 0)
        };
        if let Some(reason) = self.refuse(kind, len, code) {
            if self.mode == Mode::Startup {
                self.stop();
                return (n, Step::Bad(reason));
            }
            // Scan again from the byte after this bad message start.
            let seed = self.head;
            self.resync();
            match self.side {
                Side::Client => self.window.extend_from_slice(&seed[1..size]),
                Side::Server => seed[1..size].iter().for_each(|&b| {
                    self.push_tail(b);
                }),
            }
            return (n, Step::Bad(reason));
        }
        if size == 8 {
            self.mode = Mode::Typed;
        }
        let hdr = if size == 8 { 8 } else { 4 };
        self.left = Some(len - hdr);
        (
            n,
            Step::Start {
                kind,
                body: len - hdr,
                code,
            },
        )
    }

    fn refuse(&self, kind: u8, len: u32, code: u32) -> Option<&'static str> {
        if self.mode == Mode::Startup {
            return (!startup_ok(len, code)).then_some("not a PostgreSQL startup packet");
        }
        let types = match self.side {
            Side::Client => &FRONTEND,
            Side::Server => &BACKEND,
        };
        if !types[usize::from(kind)] {
            return Some("unknown message type");
        }
        if !(4..=MAX_MESSAGE_LEN).contains(&len) {
            return Some("message length out of range");
        }
        let fixed = match self.side {
            Side::Client => matches!(kind, b'S' | b'H' | b'c' | b'X'),
            Side::Server => matches!(kind, b'1' | b'2' | b'3' | b'I' | b'n' | b's' | b'c'),
        };
        if (fixed && len != 4) || (self.side == Side::Server && kind == b'Z' && len != 5) {
            return Some("message length out of range");
        }
        None
    }

    /// Appends to the window (bounded) until a boundary is found there.
    fn scan_client<'a>(&mut self, data: &'a [u8]) -> (usize, Step<'a>) {
        let mut used = 0;
        loop {
            let take = (RESYNC_WINDOW - self.window.len()).min(data.len() - used);
            self.window.extend_from_slice(&data[used..used + take]);
            used += take;
            let full = self.window.len() >= RESYNC_WINDOW;
            match find_boundary(&self.window, full) {
                Ok(i) => {
                    let replay = self.window.split_off(i);
                    self.window = Vec::new();
                    self.mode = Mode::Typed;
                    return (used, Step::Synced(replay));
                }
                Err(undecided) => {
                    self.window.drain(..undecided);
                }
            }
            if used == data.len() {
                return (used, Step::Skipped);
            }
        }
    }

    fn push_tail(&mut self, b: u8) -> Option<u8> {
        self.tail.copy_within(1.., 0);
        self.tail[5] = b;
        let ready = &self.tail[..5] == b"Z\0\0\0\x05" && matches!(b, b'I' | b'T' | b'E');
        ready.then_some(b)
    }

    fn scan_server<'a>(&mut self, data: &'a [u8]) -> (usize, Step<'a>) {
        for (i, &b) in data.iter().enumerate() {
            if let Some(status) = self.push_tail(b) {
                self.tail = [0; 6];
                self.mode = Mode::Typed;
                return (i + 1, Step::Ready(status));
            }
        }
        (data.len(), Step::Skipped)
    }
}

/// Whether a backend message of `kind` may have length `len` (the length
/// field, itself included): the fixed-length answers exactly, the others
/// within what a resync believes.
pub fn server_len_ok(kind: u8, len: u32) -> bool {
    match kind {
        b'1' | b'2' | b'3' | b'I' | b'n' | b's' => len == 4,
        b'Z' => len == 5,
        _ => (4..=SCAN_MAX_LEN).contains(&len),
    }
}

pub fn be32(b: &[u8]) -> u32 {
    match b {
        [a, b, c, d, ..] => u32::from_be_bytes([*a, *b, *c, *d]),
        _ => 0,
    }
}

/// Verdict on a candidate message start.
#[derive(Debug, PartialEq, Eq)]
pub enum Check {
    Yes,
    No,
    More,
}

/// First position of `buf` where a client message can be trusted to start;
/// `Err(n)`: the first `n` bytes can be dropped, the rest needs more data.
/// When `full`, candidates that need more than the window are refused.
fn find_boundary(buf: &[u8], full: bool) -> Result<usize, usize> {
    for i in 0..buf.len() {
        match check_at(buf, i, false) {
            Check::Yes => return Ok(i),
            Check::No => {}
            Check::More if full && buf.len() - i >= 5 => {}
            Check::More => return Err(i),
        }
    }
    Err(buf.len())
}

/// Is there a frontend message at `buf[i..]`, followed by another one (or,
/// unless `two`, by the end of the data)? Only headers and a few content
/// bytes are looked at, so the answer can be `More`.
pub fn check_at(buf: &[u8], i: usize, two: bool) -> Check {
    let end = match check_one(buf, i) {
        Ok(end) => end,
        Err(c) => return c,
    };
    if end == buf.len() {
        return if two { Check::More } else { Check::Yes };
    }
    if end > buf.len() {
        return Check::More;
    }
    match check_one(buf, end) {
        Ok(_) => Check::Yes,
        Err(c) => c,
    }
}

/// One message's header and visible content: `Ok(end offset)`.
fn check_one(buf: &[u8], i: usize) -> Result<usize, Check> {
    let rest = buf.get(i..).unwrap_or(&[]);
    if rest.len() < 5 {
        // A prefix of a header: still refuse what cannot become one.
        let mut least = [0u8; 4];
        let have = rest.len().saturating_sub(1);
        least[..have].copy_from_slice(&rest[1..1 + have]);
        let plausible = rest.first().is_none_or(|k| SCAN_TYPES.contains(k))
            && u32::from_be_bytes(least) <= SCAN_MAX_LEN;
        return Err(if plausible { Check::More } else { Check::No });
    }
    let h = &rest[..5];
    let kind = h[0];
    let len = be32(&h[1..]);
    if !SCAN_TYPES.contains(&kind) || !(4..=SCAN_MAX_LEN).contains(&len) {
        return Err(Check::No);
    }
    let ok = match kind {
        b'S' | b'H' | b'c' => len == 4,
        b'Q' | b'f' => len >= 5,
        b'P' => len >= 8,
        b'B' => len >= 12,
        b'F' => len >= 14,
        b'D' | b'C' => (6..=5 + SCAN_MAX_NAME).contains(&len),
        b'E' => (9..=8 + SCAN_MAX_NAME).contains(&len),
        _ => true,
    };
    if !ok {
        return Err(Check::No);
    }
    let end = i + 1 + len as usize;
    let body = &buf[i + 5..buf.len().min(end)];
    let complete = end <= buf.len();
    if !content_ok(kind, body, complete) {
        return Err(Check::No);
    }
    Ok(end)
}

/// Checks on the content seen so far: text where text is due, NUL endings.
fn content_ok(kind: u8, body: &[u8], complete: bool) -> bool {
    let last_nul = !complete || body.last() == Some(&0);
    let first = |ok: fn(u8) -> bool| body.first().is_none_or(|&b| ok(b));
    match kind {
        b'Q' => {
            let inner = if complete {
                &body[..body.len().saturating_sub(1)]
            } else {
                body
            };
            // Looking further costs time per candidate, not precision.
            let inner = &inner[..inner.len().min(SCAN_TEXT_CHECK)];
            first(|b| b.is_ascii_graphic() || b.is_ascii_whitespace() || b >= 0x80)
                && last_nul
                && !inner.contains(&0)
        }
        b'D' | b'C' => first(|b| b == b'S' || b == b'P') && last_nul,
        b'E' => {
            // portal name, NUL, int32 max rows.
            !complete || body.get(body.len().saturating_sub(5)) == Some(&0)
        }
        _ => true,
    }
}
