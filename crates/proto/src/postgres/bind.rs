//! Bind messages read as they stream in (parameter values are hashed piece by
//! piece, never held), and the bounded maps from prepared statement / portal
//! names to their normalized text.

use crate::digest::ParamDigest;
use crate::digest::StreamHash;
use foldhash::{HashMap, HashMapExt};
use std::hash::Hasher;
use whyslow_model::SmolStr;

/// Bytes of a statement or portal name kept. The server truncates names to
/// NAMEDATALEN-1 = 63 bytes; a little more keeps odd clients apart.
pub const MAX_NAME: usize = 256;

/// What a prepared statement or portal stands for.
#[derive(Clone)]
pub struct Prepared {
    pub label: SmolStr,
    /// Literals of the statement text (and, for a portal, its bind values).
    pub digest: ParamDigest,
    /// The trace id of the text's sqlcommenter comment.
    pub trace: Option<whyslow_model::TraceId>,
}

/// Name → `Prepared`, at most `cap` named entries; on overflow the oldest is
/// forgotten (a Bind of it later is labeled unknown, nothing else breaks).
/// The unnamed statement and portal, which most clients use for every
/// query, have their own slot: no hashing, and no comparison of empty keys
/// (memcmp of zero bytes at a dangling address stalls some CPUs' masked loads).
pub struct Names {
    map: HashMap<Vec<u8>, (Prepared, u64)>,
    unnamed: Option<Prepared>,
    cap: usize,
    seq: u64,
}

impl Names {
    pub fn new(cap: usize) -> Self {
        Names {
            map: HashMap::new(),
            unnamed: None,
            cap,
            seq: 0,
        }
    }

    pub fn insert(&mut self, name: &[u8], p: Prepared) {
        if name.is_empty() {
            self.unnamed = Some(p);
            return;
        }
        if !self.map.contains_key(name) && self.map.len() >= self.cap {
            // O(cap), only when full: rare, and cap is small.
            let oldest = self.map.iter().min_by_key(|(_, (_, s))| *s);
            if let Some(k) = oldest.map(|(k, _)| k.clone()) {
                self.map.remove(&k);
            }
        }
        self.seq += 1;
        self.map.insert(name.to_vec(), (p, self.seq));
    }

    pub fn get(&self, name: &[u8]) -> Option<&Prepared> {
        if name.is_empty() {
            return self.unnamed.as_ref();
        }
        self.map.get(name).map(|(p, _)| p)
    }

    pub fn remove(&mut self, name: &[u8]) {
        if name.is_empty() {
            self.unnamed = None;
        } else {
            self.map.remove(name);
        }
    }

    pub fn len(&self) -> usize {
        self.map.len() + usize::from(self.unnamed.is_some())
    }
}

/// Where a Bind body is being read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Field {
    Portal,
    Statement,
    FormatCount,
    Formats(u32),
    ParamCount,
    ParamLen,
    Value(u32),
    /// Result format codes (or a malformed tail): skipped.
    Rest,
}

/// Streaming reader of one Bind body.
pub struct BindParser {
    field: Field,
    pub portal: Vec<u8>,
    pub statement: Vec<u8>,
    num: [u8; 4],
    num_have: usize,
    params_left: u16,
    /// Parameters the Bind carries.
    pub params: u16,
    value: StreamHash,
    /// Statement literals + bind values; set once the statement name is read.
    pub digest: Option<ParamDigest>,
    /// The body was well formed up to the parameter values' end.
    pub complete: bool,
}

impl BindParser {
    pub fn new() -> Self {
        BindParser {
            field: Field::Portal,
            portal: Vec::new(),
            statement: Vec::new(),
            num: [0; 4],
            num_have: 0,
            params_left: 0,
            params: 0,
            value: StreamHash::default(),
            digest: None,
            complete: false,
        }
    }

    /// The next piece of the body; `names` gives the bound statement's digest.
    pub fn feed(&mut self, mut data: &[u8], names: &Names) {
        while !data.is_empty() {
            let n = match self.field {
                Field::Portal | Field::Statement => self.name(data, names),
                Field::Formats(left) | Field::Value(left) => self.bulk(data, left),
                Field::FormatCount | Field::ParamCount => self.number(data, 2),
                Field::ParamLen => self.number(data, 4),
                Field::Rest => data.len(),
            };
            data = &data[n..];
        }
    }

    fn name(&mut self, data: &[u8], names: &Names) -> usize {
        let nul = data.iter().position(|&b| b == 0);
        let part = &data[..nul.unwrap_or(data.len())];
        let into = if self.field == Field::Portal {
            &mut self.portal
        } else {
            &mut self.statement
        };
        let room = MAX_NAME.saturating_sub(into.len());
        into.extend_from_slice(&part[..part.len().min(room)]);
        let Some(nul) = nul else { return data.len() };
        if self.field == Field::Portal {
            self.field = Field::Statement;
        } else {
            let d = names.get(&self.statement).map(|p| p.digest.clone());
            self.digest = Some(d.unwrap_or_default());
            self.field = Field::FormatCount;
        }
        nul + 1
    }

    /// Collects a big-endian int16/int32, then moves on.
    fn number(&mut self, data: &[u8], size: usize) -> usize {
        let n = (size - self.num_have).min(data.len());
        self.num[self.num_have..self.num_have + n].copy_from_slice(&data[..n]);
        self.num_have += n;
        if self.num_have == size {
            self.num_have = 0;
            let v = if size == 2 {
                // Counts are unsigned on the server side (up to 65535 parameters).
                i32::from(u16::from_be_bytes([self.num[0], self.num[1]]))
            } else {
                i32::from_be_bytes(self.num)
            };
            self.got_number(v);
        }
        n
    }

    fn got_number(&mut self, v: i32) {
        self.field = match (self.field, v) {
            (Field::ParamLen, v) if v < -1 => Field::Rest,
            (Field::FormatCount, v) => Field::Formats(v as u32 * 2),
            (Field::ParamCount, v) => {
                self.params_left = v as u16;
                self.params = v as u16;
                self.next_param()
            }
            (Field::ParamLen, -1) => {
                self.add(|d| d.add_null());
                self.next_param()
            }
            (Field::ParamLen, len) => {
                self.value = StreamHash::default();
                self.value.write_u32(len as u32);
                Field::Value(len as u32)
            }
            _ => Field::Rest,
        };
    }

    fn next_param(&mut self) -> Field {
        if self.params_left == 0 {
            self.complete = true;
            return Field::Rest;
        }
        self.params_left -= 1;
        Field::ParamLen
    }

    fn bulk(&mut self, data: &[u8], left: u32) -> usize {
        let n = data.len().min(left as usize);
        let rest = left - n as u32;
        match self.field {
            Field::Value(_) => {
                // A byte stream: pieces hash like the whole value.
                self.value.write(&data[..n]);
                self.field = Field::Value(rest);
                if rest == 0 {
                    let h = self.value.finish().to_le_bytes();
                    self.add(|d| d.add(&h));
                    self.field = self.next_param();
                }
            }
            _ if rest == 0 => self.field = Field::ParamCount,
            _ => self.field = Field::Formats(rest),
        }
        n
    }

    fn add(&mut self, f: impl FnOnce(&mut ParamDigest)) {
        if let Some(d) = self.digest.as_mut() {
            f(d);
        }
    }
}
