//! Message framing for one direction of an HTTP/1.x stream: where the head
//! ends and how long the body is (RFC 9112 §6). Only head bytes are kept;
//! body bytes are counted and dropped.

/// Largest head (start line + header fields) kept while waiting for its end.
/// Common servers refuse far smaller heads (nginx large_client_header_buffers
/// 4×8 KiB, Apache LimitRequestFieldSize 8 KiB per field), so 64 KiB bounds
/// memory on hostile input without rejecting real traffic.
pub const MAX_HEAD_BYTES: usize = 64 * 1024;

/// Longest chunk-size line or trailer line accepted. Chunk extensions are
/// rare and short in practice; the bound turns garbage into an error early.
pub const MAX_CHUNK_LINE: u32 = 4096;

/// Head buffer capacity a flow keeps between messages: typical heads fit.
const KEPT_HEAD_CAPACITY: usize = 4096;

/// A u64 holds at most 16 hex digits; more would overflow.
const MAX_CHUNK_SIZE_DIGITS: u8 = 16;

/// Where the body of the current message ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyKind {
    None,
    Length(u64),
    Chunked,
    /// Body runs to the end of the connection (response without length).
    UntilClose,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Chunk {
    /// Reading hex digits of the chunk size.
    Size {
        value: u64,
        digits: u8,
    },
    /// Skipping a chunk extension up to the line end.
    Ext {
        value: u64,
        line: u32,
    },
    Data {
        remaining: u64,
        last: bool,
    },
    /// CRLF after chunk data.
    DataEnd {
        seen_cr: bool,
    },
    /// Trailer section: `line` bytes seen on the current trailer line.
    Trailer {
        line: u32,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Head,
    Length(u64),
    Chunked(Chunk),
    UntilClose,
    /// Bytes are no longer HTTP (upgrade, CONNECT tunnel): counted, not parsed.
    Opaque,
}

/// What `Framer::step` found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Consumed bytes belong to the current message; nothing else happened.
    Progress,
    /// The head is complete and available through `Framer::head`. The caller
    /// must call `start_body` before the next `step`.
    HeadDone,
    /// The current message is complete.
    MessageDone,
}

/// What a gap in the capture did to the current message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gap {
    /// Inside a body: only uncounted bytes.
    Absorbed,
    /// The gap ran exactly to the end of the body.
    MessageDone,
    /// The framing is lost (gap in a head, chunk framing, or past a body).
    Lost,
}

/// Incremental framer for one direction.
#[derive(Debug)]
pub struct Framer {
    state: State,
    /// Body bytes of the current message (chunk framing excluded).
    body_bytes: u64,
    head: Vec<u8>,
    /// Where to resume looking for the blank line that ends the head.
    scan_from: usize,
}

impl Default for Framer {
    fn default() -> Self {
        Self::new()
    }
}

impl Framer {
    pub fn new() -> Self {
        Framer {
            state: State::Head,
            body_bytes: 0,
            head: Vec::new(),
            scan_from: 0,
        }
    }

    /// Head bytes of the current message kept so far.
    pub fn head(&self) -> &[u8] {
        &self.head
    }

    /// The complete head after `Step::HeadDone`, given the bytes that step
    /// consumed: a head that arrived whole in one chunk is not copied.
    pub fn complete_head<'a>(&'a self, consumed: &'a [u8]) -> &'a [u8] {
        if self.head.is_empty() {
            consumed
        } else {
            &self.head
        }
    }

    /// Body bytes of the current message so far, chunk framing excluded.
    pub fn body_bytes(&self) -> u64 {
        self.body_bytes
    }

    pub fn in_head(&self) -> bool {
        self.state == State::Head
    }

    pub fn reading_until_close(&self) -> bool {
        self.state == State::UntilClose
    }

    /// After `HeadDone`: how the body is framed. Returns true when the
    /// message is already complete (no body).
    pub fn start_body(&mut self, body: BodyKind) -> bool {
        self.release_head();
        self.body_bytes = 0;
        self.scan_from = 0;
        self.state = match body {
            BodyKind::None | BodyKind::Length(0) => State::Head,
            BodyKind::Length(n) => State::Length(n),
            BodyKind::Chunked => State::Chunked(Chunk::Size {
                value: 0,
                digits: 0,
            }),
            BodyKind::UntilClose => State::UntilClose,
        };
        self.state == State::Head
    }

    /// Empties the head buffer; one grown by a large head is given back, so
    /// thousands of idle flows do not each keep up to MAX_HEAD_BYTES.
    fn release_head(&mut self) {
        if self.head.capacity() > KEPT_HEAD_CAPACITY {
            self.head = Vec::new();
        } else {
            self.head.clear();
        }
    }

    /// From now on bytes are counted only (protocol switched).
    pub fn make_opaque(&mut self) {
        self.release_head();
        self.state = State::Opaque;
    }

    /// Skips `n` bytes missing from the capture inside a body of known length
    /// (or one read to the close). A snapshot-length cut usually ends exactly
    /// where a body does, so a gap may also complete the message.
    pub fn skip_missing(&mut self, n: u64) -> Gap {
        match self.state {
            State::Length(rem) if n < rem => {
                self.state = State::Length(rem - n);
                self.body_bytes += n;
                Gap::Absorbed
            }
            State::Length(rem) if n == rem => {
                self.state = State::Head;
                self.body_bytes += n;
                Gap::MessageDone
            }
            State::UntilClose | State::Opaque => {
                self.body_bytes += n;
                Gap::Absorbed
            }
            _ => Gap::Lost,
        }
    }

    /// Consumes a prefix of `data`; returns how many bytes and what happened.
    pub fn step(&mut self, data: &[u8]) -> Result<(usize, Step), String> {
        match self.state {
            State::Head => self.step_head(data),
            State::Length(rem) => {
                let take = rem.min(data.len() as u64);
                self.body_bytes += take;
                let left = rem - take;
                if left == 0 {
                    self.state = State::Head;
                    Ok((take as usize, Step::MessageDone))
                } else {
                    self.state = State::Length(left);
                    Ok((take as usize, Step::Progress))
                }
            }
            State::Chunked(c) => self.step_chunked(c, data),
            State::UntilClose | State::Opaque => {
                self.body_bytes += data.len() as u64;
                Ok((data.len(), Step::Progress))
            }
        }
    }

    fn step_head(&mut self, data: &[u8]) -> Result<(usize, Step), String> {
        let mut scan_from = self.scan_from;
        if self.head.is_empty() {
            // The usual case: the whole head in one chunk, parsed in place.
            let window = &data[..data.len().min(MAX_HEAD_BYTES)];
            if let Some(end) = find_head_end(window, 0) {
                return Ok((end, Step::HeadDone));
            }
            scan_from = window.len().saturating_sub(3);
        }
        let room = MAX_HEAD_BYTES - self.head.len();
        let take = data.len().min(room);
        let old = self.head.len();
        self.head.extend_from_slice(&data[..take]);
        if let Some(end) = find_head_end(&self.head, scan_from) {
            self.head.truncate(end);
            return Ok((end - old, Step::HeadDone));
        }
        if self.head.len() >= MAX_HEAD_BYTES {
            return Err(format!(
                "HTTP head longer than {} KiB without an end",
                MAX_HEAD_BYTES / 1024
            ));
        }
        // The terminator may straddle the next chunk: rescan the last 3 bytes.
        self.scan_from = self.head.len().saturating_sub(3);
        Ok((take, Step::Progress))
    }

    fn step_chunked(&mut self, c: Chunk, data: &[u8]) -> Result<(usize, Step), String> {
        if let Chunk::Data { remaining, last } = c {
            let take = remaining.min(data.len() as u64);
            self.body_bytes += take;
            let left = remaining - take;
            self.state = State::Chunked(if left == 0 {
                if last {
                    Chunk::Trailer { line: 0 }
                } else {
                    Chunk::DataEnd { seen_cr: false }
                }
            } else {
                Chunk::Data {
                    remaining: left,
                    last,
                }
            });
            return Ok((take as usize, Step::Progress));
        }
        let mut c = c;
        for (i, &b) in data.iter().enumerate() {
            match chunk_byte(c, b)? {
                ChunkNext::Continue(next) => c = next,
                ChunkNext::Data(next) => {
                    self.state = State::Chunked(next);
                    return Ok((i + 1, Step::Progress));
                }
                ChunkNext::Done => {
                    self.state = State::Head;
                    return Ok((i + 1, Step::MessageDone));
                }
            }
        }
        self.state = State::Chunked(c);
        Ok((data.len(), Step::Progress))
    }
}

enum ChunkNext {
    Continue(Chunk),
    /// Switch to (or past) chunk data: return so data is consumed in bulk.
    Data(Chunk),
    Done,
}

/// One byte of chunk framing (size line, CRLF after data, trailers).
fn chunk_byte(c: Chunk, b: u8) -> Result<ChunkNext, String> {
    let bad = |what: &str| Err(format!("bad chunked encoding: {what}"));
    Ok(match c {
        Chunk::Size { value, digits } => match (b as char).to_digit(16) {
            Some(d) if digits < MAX_CHUNK_SIZE_DIGITS => ChunkNext::Continue(Chunk::Size {
                value: (value << 4) | u64::from(d),
                digits: digits + 1,
            }),
            Some(_) => return bad("chunk size does not fit in 64 bits"),
            None if digits == 0 => return bad("chunk size expected"),
            None if b == b'\n' => start_chunk(value),
            None if b == b';' || b == b'\r' || b == b' ' || b == b'\t' => {
                ChunkNext::Continue(Chunk::Ext { value, line: 0 })
            }
            None => return bad("unexpected byte in chunk size"),
        },
        Chunk::Ext { value, line } => {
            if b == b'\n' {
                start_chunk(value)
            } else if line >= MAX_CHUNK_LINE {
                return bad("chunk extension too long");
            } else {
                ChunkNext::Continue(Chunk::Ext {
                    value,
                    line: line + 1,
                })
            }
        }
        Chunk::DataEnd { seen_cr } => match b {
            b'\r' if !seen_cr => ChunkNext::Continue(Chunk::DataEnd { seen_cr: true }),
            b'\n' => ChunkNext::Continue(Chunk::Size {
                value: 0,
                digits: 0,
            }),
            _ => return bad("missing CRLF after chunk data"),
        },
        Chunk::Trailer { line } => match b {
            b'\n' if line == 0 => ChunkNext::Done,
            b'\n' => ChunkNext::Continue(Chunk::Trailer { line: 0 }),
            b'\r' if line == 0 => ChunkNext::Continue(c),
            _ if line >= MAX_CHUNK_LINE => return bad("trailer line too long"),
            _ => ChunkNext::Continue(Chunk::Trailer { line: line + 1 }),
        },
        Chunk::Data { .. } => ChunkNext::Data(c),
    })
}

/// After a chunk-size line: data follows, or the trailers when the size is 0.
fn start_chunk(size: u64) -> ChunkNext {
    if size == 0 {
        ChunkNext::Continue(Chunk::Trailer { line: 0 })
    } else {
        ChunkNext::Data(Chunk::Data {
            remaining: size,
            last: false,
        })
    }
}

/// End of the head: the first empty line (CRLF CRLF, or bare LF LF which
/// RFC 9112 §2.2 lets recipients accept). Returns the index just past it.
/// Every head is scanned once, and this scan was the analyzer's hottest
/// spot: memchr finds the line ends with SIMD.
fn find_head_end(buf: &[u8], from: usize) -> Option<usize> {
    memchr::memchr_iter(b'\n', buf.get(from..)?)
        .map(|n| from + n)
        .find_map(|at| match buf.get(at + 1) {
            Some(b'\n') => Some(at + 2),
            Some(b'\r') if buf.get(at + 2) == Some(&b'\n') => Some(at + 3),
            _ => None,
        })
}

#[cfg(test)]
mod scan_tests {
    use super::*;

    #[test]
    fn head_end_matches_a_byte_loop() {
        let naive = |buf: &[u8], from: usize| {
            (from..buf.len()).find_map(|i| {
                let rest = &buf[i..];
                rest.starts_with(b"\n\n")
                    .then_some(i + 2)
                    .or_else(|| rest.starts_with(b"\n\r\n").then_some(i + 3))
            })
        };
        let mut buf = [b'a'; 70];
        for at in 0..66 {
            for (end, len) in [(&b"\n\n"[..], 2), (&b"\n\r\n"[..], 3)] {
                buf.iter_mut().for_each(|b| *b = b'a');
                buf[at / 2] = b'\n';
                buf[at..at + len].copy_from_slice(end);
                for from in [0, at / 2, at] {
                    assert_eq!(find_head_end(&buf, from), naive(&buf, from), "{at} {from}");
                }
            }
        }
    }

    #[test]
    fn head_end() {
        assert_eq!(
            find_head_end(b"GET / HTTP/1.1\r\nA: b\r\n\r\nbody", 0),
            Some(24)
        );
        assert_eq!(find_head_end(b"GET / HTTP/1.1\n\nx", 0), Some(16));
        assert_eq!(find_head_end(b"GET / HTTP/1.1\r\nA: b\r\n", 0), None);
        assert_eq!(find_head_end(b"\r\n\r\n", 1), Some(4));
        assert_eq!(find_head_end(b"ab", 5), None);
    }
}
