//! One direction's bytes as bounded text lines and data blocks skipped by
//! length: a line is kept until it is parsed; a data block only counted.

/// Longest command or reply line kept, CR LF excluded. memcached itself
/// closes a connection after 2048 bytes without a newline unless the line
/// is a `get`/`gets`, whose multi-key lines it lets grow without limit
/// (`try_read_command_ascii`, proto_text.c); 64 KiB holds a 250-key
/// multiget of maximum-length (250-byte) keys.
pub const MAX_LINE: usize = 64 * 1024;

/// What a `step` ended on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// A complete line is in `line()` until the next `step`.
    Line,
    /// A data block and its CR LF were consumed.
    DataDone,
    /// The rest of an over-long line was skipped up to its newline.
    Discarded,
    /// A line grew past `MAX_LINE`; the reader now discards to its newline.
    TooLong,
    /// A data block was not followed by CR LF (its length was wrong).
    BadDataEnd,
}

/// What a capture gap did to the reader.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gap {
    /// Inside a data block: only uncounted bytes.
    Absorbed,
    /// The gap ended exactly at the end of a data block (CR LF included).
    DataDone,
    /// The position in the stream is unknown now.
    Lost,
}

#[derive(Debug, Default)]
pub struct Reader {
    buf: Vec<u8>,
    /// `buf` holds a complete line, to be cleared by the next `step`.
    ready: bool,
    /// Data block bytes still to skip, then CR LF bytes still expected.
    data_left: u64,
    crlf_left: u8,
    /// Skipping to the next newline (after an over-long line).
    discarding: bool,
}

impl Reader {
    /// Consumes a prefix of `data` (possibly empty when an event is
    /// returned) and says what it completed, if anything.
    pub fn step(&mut self, data: &[u8]) -> (usize, Option<Event>) {
        if self.ready {
            self.buf.clear();
            self.ready = false;
        }
        if self.data_left > 0 {
            let n = usize::try_from(self.data_left)
                .unwrap_or(usize::MAX)
                .min(data.len());
            self.data_left -= n as u64;
            return (n, None);
        }
        if self.crlf_left > 0 {
            return self.step_crlf(data);
        }
        match data.iter().position(|&b| b == b'\n') {
            Some(i) => self.end_line(data, i),
            None if self.discarding => (data.len(), None),
            None if self.buf.len().saturating_add(data.len()) > MAX_LINE => {
                self.buf.clear();
                self.discarding = true;
                (data.len(), Some(Event::TooLong))
            }
            None => {
                self.buf.extend_from_slice(data);
                (data.len(), None)
            }
        }
    }

    fn step_crlf(&mut self, data: &[u8]) -> (usize, Option<Event>) {
        let want = if self.crlf_left == 2 { b'\r' } else { b'\n' };
        match data.first() {
            None => (0, None),
            Some(&b) if b == want => {
                self.crlf_left -= 1;
                (1, (self.crlf_left == 0).then_some(Event::DataDone))
            }
            Some(_) => {
                self.crlf_left = 0;
                (0, Some(Event::BadDataEnd))
            }
        }
    }

    /// `data[i]` is the newline ending the current line.
    fn end_line(&mut self, data: &[u8], i: usize) -> (usize, Option<Event>) {
        if self.discarding {
            self.discarding = false;
            return (i + 1, Some(Event::Discarded));
        }
        if self.buf.len().saturating_add(i) > MAX_LINE {
            self.buf.clear();
            return (i + 1, Some(Event::TooLong));
        }
        self.buf.extend_from_slice(&data[..i]);
        // memcached accepts a bare "\n" as a line end too.
        if self.buf.last() == Some(&b'\r') {
            self.buf.pop();
        }
        self.ready = true;
        (i + 1, Some(Event::Line))
    }

    /// The line completed by the last `step` (empty otherwise).
    pub fn line(&self) -> &[u8] {
        if self.ready {
            &self.buf
        } else {
            &[]
        }
    }

    /// Bytes held for lines (the allocation, not just the length).
    #[cfg(test)]
    pub fn buffered(&self) -> usize {
        self.buf.capacity()
    }

    /// A data block of `n` bytes and its CR LF follow.
    pub fn expect_data(&mut self, n: u64) {
        self.data_left = n;
        self.crlf_left = 2;
    }

    /// Inside a data block (or its CR LF)?
    pub fn in_data(&self) -> bool {
        self.data_left > 0 || self.crlf_left > 0
    }

    /// Forget the position: the next bytes are scanned as a candidate line
    /// (lost segments usually end on a message boundary).
    pub fn resync(&mut self) {
        self.buf.clear();
        self.ready = false;
        self.data_left = 0;
        self.crlf_left = 0;
    }

    /// `missing` bytes were never captured.
    pub fn skip_gap(&mut self, missing: u64) -> Gap {
        if !self.in_data() {
            return Gap::Lost;
        }
        if missing <= self.data_left {
            self.data_left -= missing;
            return Gap::Absorbed;
        }
        let over = missing - self.data_left;
        if over > u64::from(self.crlf_left) {
            return Gap::Lost;
        }
        self.data_left = 0;
        self.crlf_left -= over as u8;
        if self.crlf_left == 0 {
            Gap::DataDone
        } else {
            Gap::Absorbed
        }
    }
}
