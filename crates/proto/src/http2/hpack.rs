//! HPACK header block decoding (RFC 7541) for one direction of a connection.
//!
//! Written here rather than taken from a crate: decoders built for endpoints
//! treat a reference to a dynamic-table entry they never saw as a connection
//! error, while a capture that began mid-connection (or lost a header block)
//! meets exactly that. This one answers such references with a placeholder
//! and keeps decoding; the indices of entries inserted since are still right
//! (newest first), so later blocks decode normally.
//!
//! Only the fields an exchange needs leave the decoder (`:method`, `:path`,
//! `:status`, `content-encoding`, `traceparent`, and gRPC's `content-type` and
//! `grpc-status`); other values exist only in the dynamic
//! table, which later blocks refer to, bounded by `MAX_TABLE_BYTES`.

use super::huffman;
use std::collections::VecDeque;

/// Dynamic table size before any SETTINGS or size update: RFC 9113 §6.5.2
/// (SETTINGS_HEADER_TABLE_SIZE initial value).
pub const DEFAULT_TABLE_SIZE: usize = 4096;
/// Most table bytes kept per direction. Peers rarely allow more than the
/// 4096 default (some use 64 KiB); past this, the oldest entries are dropped
/// and references to them get placeholders.
pub const MAX_TABLE_BYTES: usize = 64 * 1024;
/// Size accounted per entry on top of name and value: RFC 7541 §4.1.
const ENTRY_OVERHEAD: usize = 32;
/// Entries of the static table: RFC 7541 Appendix A.
const STATIC_LEN: usize = 61;
/// Continuation bytes of one integer: 5 carry 35 bits, more than any length,
/// index or table size (all fit 32 bits) needs; longer ones are hostile.
const MAX_INT_CONTINUATIONS: usize = 5;
/// Stands for the name or value of an entry inserted before the capture began.
pub const PLACEHOLDER: &str = "?";

/// Static table, RFC 7541 Appendix A (index 1 first).
const STATIC: [(&str, &str); STATIC_LEN] = [
    (":authority", ""),
    (":method", "GET"),
    (":method", "POST"),
    (":path", "/"),
    (":path", "/index.html"),
    (":scheme", "http"),
    (":scheme", "https"),
    (":status", "200"),
    (":status", "204"),
    (":status", "206"),
    (":status", "304"),
    (":status", "400"),
    (":status", "404"),
    (":status", "500"),
    ("accept-charset", ""),
    ("accept-encoding", "gzip, deflate"),
    ("accept-language", ""),
    ("accept-ranges", ""),
    ("accept", ""),
    ("access-control-allow-origin", ""),
    ("age", ""),
    ("allow", ""),
    ("authorization", ""),
    ("cache-control", ""),
    ("content-disposition", ""),
    ("content-encoding", ""),
    ("content-language", ""),
    ("content-length", ""),
    ("content-location", ""),
    ("content-range", ""),
    ("content-type", ""),
    ("cookie", ""),
    ("date", ""),
    ("etag", ""),
    ("expect", ""),
    ("expires", ""),
    ("from", ""),
    ("host", ""),
    ("if-match", ""),
    ("if-modified-since", ""),
    ("if-none-match", ""),
    ("if-range", ""),
    ("if-unmodified-since", ""),
    ("last-modified", ""),
    ("link", ""),
    ("location", ""),
    ("max-forwards", ""),
    ("proxy-authenticate", ""),
    ("proxy-authorization", ""),
    ("range", ""),
    ("referer", ""),
    ("refresh", ""),
    ("retry-after", ""),
    ("server", ""),
    ("set-cookie", ""),
    ("strict-transport-security", ""),
    ("transfer-encoding", ""),
    ("user-agent", ""),
    ("vary", ""),
    ("via", ""),
    ("www-authenticate", ""),
];

/// The fields of one header block an exchange keeps.
#[derive(Debug, Default)]
pub struct Fields {
    pub method: Option<String>,
    pub path: Option<String>,
    pub status: Option<u16>,
    /// A content-encoding other than identity.
    pub encoded: bool,
    /// A field came from an entry never seen (placeholder used).
    pub placeholder: bool,
    /// `traceparent`: the trace it names, or what is wrong with it.
    pub trace: Option<Result<whyslow_model::TraceId, &'static str>>,
    /// A `content-type` of gRPC (`application/grpc`, `+proto`, `+json`).
    pub grpc: bool,
    /// `grpc-status` of a response's trailers.
    pub grpc_status: Option<u8>,
}

impl Fields {
    fn take(&mut self, name: &[u8], value: &[u8]) {
        match name {
            b":method" => self.method = Some(String::from_utf8_lossy(value).into_owned()),
            b":path" => self.path = Some(String::from_utf8_lossy(value).into_owned()),
            b":status" => {
                self.status = std::str::from_utf8(value)
                    .ok()
                    .filter(|s| s.len() == 3)
                    .and_then(|s| s.parse().ok());
            }
            b"traceparent" if self.trace.is_none() => {
                let trace = crate::trace_context::traceparent(value).map(|c| c.trace_id);
                self.trace = Some(trace);
            }
            b"content-type" => self.grpc = value.starts_with(b"application/grpc"),
            b"grpc-status" => {
                self.grpc_status = std::str::from_utf8(value).ok().and_then(|s| s.parse().ok());
            }
            b"content-encoding" => {
                let v = String::from_utf8_lossy(value);
                let v = v.trim();
                self.encoded = !v.is_empty() && !v.eq_ignore_ascii_case("identity");
            }
            _ => {}
        }
    }
}

/// One dynamic table entry: name and value in one allocation.
#[derive(Debug)]
struct Entry {
    bytes: Box<[u8]>,
    name_len: usize,
}

impl Entry {
    fn size(&self) -> usize {
        self.bytes.len().saturating_add(ENTRY_OVERHEAD)
    }
}

/// HPACK decoding state of one direction.
#[derive(Debug)]
pub struct Decoder {
    /// Newest first (index 62 is `entries[0]`).
    entries: VecDeque<Entry>,
    size: usize,
    /// Table size the encoder last declared (RFC 7541 §6.3).
    max_size: usize,
    /// SETTINGS_HEADER_TABLE_SIZE of the receiving peer.
    allowed: usize,
    /// Entries may exist that this decoder never saw (capture started
    /// mid-connection, a block was lost, or sizes were guessed).
    partial: bool,
    name: Vec<u8>,
    value: Vec<u8>,
}

impl Decoder {
    pub fn new(partial: bool) -> Self {
        Decoder {
            entries: VecDeque::new(),
            size: 0,
            max_size: DEFAULT_TABLE_SIZE,
            allowed: DEFAULT_TABLE_SIZE,
            partial,
            name: Vec::new(),
            value: Vec::new(),
        }
    }

    /// The receiving peer's SETTINGS_HEADER_TABLE_SIZE.
    pub fn set_allowed(&mut self, size: u32) {
        self.allowed = size as usize;
    }

    /// A header block was lost: its insertions are unknown from now on.
    pub fn lose_sync(&mut self) {
        self.partial = true;
    }

    /// Current table as (name, value, size), newest first (for tests).
    #[cfg(test)]
    pub fn table(&self) -> Vec<(String, String, usize)> {
        let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        self.entries
            .iter()
            .map(|e| {
                let (n, v) = e.bytes.split_at(e.name_len);
                (text(n), text(v), e.size())
            })
            .collect()
    }

    #[cfg(test)]
    pub fn size(&self) -> usize {
        self.size
    }

    /// Decodes one complete header block into `fields`. On error the rest of
    /// the block is lost, so later references may need placeholders.
    pub fn decode(&mut self, block: &[u8], fields: &mut Fields) -> Result<(), String> {
        let mut name = std::mem::take(&mut self.name);
        let mut value = std::mem::take(&mut self.value);
        let r = self.decode_fields(block, fields, &mut name, &mut value);
        name.clear();
        value.clear();
        self.name = name;
        self.value = value;
        if r.is_err() {
            self.partial = true;
        }
        r
    }

    fn decode_fields(
        &mut self,
        block: &[u8],
        fields: &mut Fields,
        name: &mut Vec<u8>,
        value: &mut Vec<u8>,
    ) -> Result<(), String> {
        let mut pos = 0;
        while let Some(&first) = block.get(pos) {
            if first & 0x80 != 0 {
                // Indexed header field (§6.1).
                let index = integer(block, &mut pos, 7)?;
                let known = self.field(index, name, Some(value))?;
                fields.placeholder |= !known;
            } else if first & 0xe0 == 0x20 {
                // Dynamic table size update (§6.3).
                let size = integer(block, &mut pos, 5)?;
                self.resize(size);
                continue;
            } else {
                // Literal: with incremental indexing (§6.2.1, 6-bit index),
                // without indexing or never indexed (§6.2.2-3, 4-bit index).
                let indexing = first & 0x40 != 0;
                let index = integer(block, &mut pos, if indexing { 6 } else { 4 })?;
                let known = if index == 0 {
                    string(block, &mut pos, name)?;
                    true
                } else {
                    self.field(index, name, None)?
                };
                string(block, &mut pos, value)?;
                fields.placeholder |= !known;
                if indexing {
                    self.insert(name, value, !known);
                }
            }
            fields.take(name, value);
        }
        Ok(())
    }

    /// Copies the name (and value) at `index` into the buffers. `Ok(false)`
    /// when a placeholder stands for an entry this decoder never saw.
    fn field(
        &self,
        index: usize,
        name: &mut Vec<u8>,
        value: Option<&mut Vec<u8>>,
    ) -> Result<bool, String> {
        let (n, v, known): (&[u8], &[u8], bool) = if index == 0 {
            return Err("HPACK index 0".into());
        } else if let Some((n, v)) = STATIC.get(index - 1) {
            (n.as_bytes(), v.as_bytes(), true)
        } else if let Some(e) = self.entries.get(index - 1 - STATIC_LEN) {
            let (n, v) = e.bytes.split_at(e.name_len);
            (n, v, true)
        } else if self.uncertain() && index <= self.possible_index() {
            (PLACEHOLDER.as_bytes(), PLACEHOLDER.as_bytes(), false)
        } else {
            return Err(format!("HPACK index {index} past the dynamic table"));
        };
        name.clear();
        name.extend_from_slice(n);
        if let Some(value) = value {
            value.clear();
            value.extend_from_slice(v);
        }
        Ok(known)
    }

    /// Whether entries may exist beyond the ones kept.
    fn uncertain(&self) -> bool {
        self.partial || self.max_size > MAX_TABLE_BYTES
    }

    /// Highest index any table the peers could have agreed on can hold.
    fn possible_index(&self) -> usize {
        let mut size = self.max_size.max(self.allowed);
        if self.partial {
            size = size.max(MAX_TABLE_BYTES);
        }
        STATIC_LEN.saturating_add(size / ENTRY_OVERHEAD)
    }

    fn resize(&mut self, size: usize) {
        self.max_size = size;
        self.evict(0);
    }

    /// Drops the oldest entries until `room` more bytes fit.
    fn evict(&mut self, room: usize) {
        let cap = self.max_size.min(MAX_TABLE_BYTES);
        while self.size.saturating_add(room) > cap {
            match self.entries.pop_back() {
                Some(e) => self.size = self.size.saturating_sub(e.size()),
                None => {
                    self.size = 0;
                    break;
                }
            }
        }
    }

    /// Adds an entry (§4.4). `guessed`: its name is a placeholder, so its
    /// real size is unknown and so is what it evicted.
    fn insert(&mut self, name: &[u8], value: &[u8], guessed: bool) {
        let size = name
            .len()
            .saturating_add(value.len())
            .saturating_add(ENTRY_OVERHEAD);
        if guessed {
            self.partial = true;
        }
        if size > self.max_size.min(MAX_TABLE_BYTES) {
            // Too big for the table: it empties it (§4.4); or too big for
            // the bytes kept here, while the peers' table holds it.
            if size <= self.max_size {
                self.partial = true;
            }
            self.entries.clear();
            self.size = 0;
            return;
        }
        self.evict(size);
        let mut bytes = Vec::with_capacity(name.len() + value.len());
        bytes.extend_from_slice(name);
        bytes.extend_from_slice(value);
        self.entries.push_front(Entry {
            bytes: bytes.into_boxed_slice(),
            name_len: name.len(),
        });
        self.size = self.size.saturating_add(size);
    }
}

/// An integer with an N-bit prefix (§5.1) starting at `pos`.
pub fn integer(buf: &[u8], pos: &mut usize, prefix: u8) -> Result<usize, String> {
    let mask = (1u8 << prefix) - 1;
    let first = buf.get(*pos).ok_or("HPACK integer truncated")? & mask;
    *pos += 1;
    if first < mask {
        return Ok(usize::from(first));
    }
    let mut value = u64::from(mask);
    for i in 0..MAX_INT_CONTINUATIONS {
        let b = *buf.get(*pos).ok_or("HPACK integer truncated")?;
        *pos += 1;
        value = value.saturating_add(u64::from(b & 0x7f) << (7 * i));
        if b & 0x80 == 0 {
            return u32::try_from(value)
                .map(|v| v as usize)
                .map_err(|_| format!("HPACK integer {value} overflows 32 bits"));
        }
    }
    Err(format!(
        "HPACK integer longer than {} bytes",
        MAX_INT_CONTINUATIONS + 1
    ))
}

/// A string literal (§5.2) starting at `pos`, decoded into `out`.
fn string(buf: &[u8], pos: &mut usize, out: &mut Vec<u8>) -> Result<(), String> {
    let huffman = buf.get(*pos).ok_or("HPACK string truncated")? & 0x80 != 0;
    let len = integer(buf, pos, 7)?;
    let end = pos
        .checked_add(len)
        .filter(|&end| end <= buf.len())
        .ok_or_else(|| format!("HPACK string of {len} bytes past the end of its header block"))?;
    let raw = &buf[*pos..end];
    *pos = end;
    out.clear();
    if huffman {
        huffman::decode(raw, out).map_err(|e| format!("HPACK: {e}"))?;
    } else {
        out.extend_from_slice(raw);
    }
    Ok(())
}
