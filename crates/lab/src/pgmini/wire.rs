//! Message encoding and decoding for the lab's PostgreSQL server.

use super::shop::{Statement, Value, INT8, INT8_ARRAY};

/// Backend messages waiting to be written.
#[derive(Default)]
pub struct Out(Vec<u8>);

impl Out {
    /// One message: kind, length, then what `body` writes.
    pub fn msg(&mut self, kind: u8, body: impl FnOnce(&mut Vec<u8>)) {
        self.0.push(kind);
        let at = self.0.len();
        self.0.extend_from_slice(&[0; 4]);
        body(&mut self.0);
        let len = (self.0.len() - at) as u32;
        self.0[at..at + 4].copy_from_slice(&len.to_be_bytes());
    }

    /// ReadyForQuery, idle.
    pub fn ready(&mut self) {
        self.msg(b'Z', |b| b.push(b'I'));
    }

    pub fn error(&mut self, code: &str, message: &str) {
        self.msg(b'E', |b| {
            for (field, v) in [
                (b'S', "ERROR"),
                (b'V', "ERROR"),
                (b'C', code),
                (b'M', message),
            ] {
                b.push(field);
                cstr(b, v);
            }
            b.push(0);
        });
    }

    pub fn take(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.0)
    }
}

pub fn cstr(b: &mut Vec<u8>, s: &str) {
    b.extend_from_slice(s.as_bytes());
    b.push(0);
}

/// Reads a message body; every read is bounds-checked.
pub struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    pub fn new(b: &'a [u8]) -> Self {
        Reader(b)
    }

    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Some(head)
    }

    pub fn u8(&mut self) -> Option<u8> {
        Some(self.take(1)?[0])
    }

    pub fn i16(&mut self) -> Option<i16> {
        let b = self.take(2)?;
        Some(i16::from_be_bytes([b[0], b[1]]))
    }

    fn i32(&mut self) -> Option<i32> {
        let b = self.take(4)?;
        Some(i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    pub fn cstr(&mut self) -> Option<String> {
        let end = self.0.iter().position(|&c| c == 0)?;
        let s = String::from_utf8(self.take(end)?.to_vec()).ok()?;
        self.take(1)?;
        Some(s)
    }

    /// A list of format codes (0 text, 1 binary).
    pub fn formats(&mut self) -> Option<Vec<i16>> {
        let n = self.i16()?;
        (0..n.max(0)).map(|_| self.i16()).collect()
    }

    /// A length-prefixed value; None for SQL NULL is read as empty.
    pub fn value(&mut self) -> Option<&'a [u8]> {
        match self.i32()? {
            -1 => Some(&[]),
            n if n >= 0 => self.take(n as usize),
            _ => None,
        }
    }
}

/// Whether column/parameter `i` is binary under a format-code list.
pub fn format(codes: &[i16], i: usize) -> bool {
    match codes {
        [] => false,
        [one] => *one == 1,
        many => many.get(i) == Some(&1),
    }
}

/// A parameter value of type `oid`.
pub fn decode(raw: &[u8], oid: u32, binary: bool) -> Option<Value> {
    let text = || std::str::from_utf8(raw).ok();
    match (oid, binary) {
        (INT8, true) => Some(Value::Int(i64::from_be_bytes(raw.try_into().ok()?))),
        (INT8, false) => Some(Value::Int(text()?.trim().parse().ok()?)),
        (INT8_ARRAY, true) => int8_array(raw).map(Value::Ints),
        (INT8_ARRAY, false) => {
            let inner = text()?.trim().trim_start_matches('{').trim_end_matches('}');
            let v: Option<Vec<i64>> = inner
                .split(',')
                .filter(|s| !s.trim().is_empty())
                .map(|s| s.trim().parse().ok())
                .collect();
            v.map(Value::Ints)
        }
        _ => Some(Value::Text(text()?.to_string())),
    }
}

/// Binary array of int8: ndim, has-null flag, element type, per dimension
/// (length, lower bound), then length-prefixed elements.
fn int8_array(raw: &[u8]) -> Option<Vec<i64>> {
    let mut r = Reader::new(raw);
    let ndim = r.i32()?;
    let _flags = r.i32()?;
    let _elem = r.i32()?;
    if ndim == 0 {
        return Some(Vec::new());
    }
    if ndim != 1 {
        return None;
    }
    let n = r.i32()?;
    let _lower = r.i32()?;
    let mut v = Vec::with_capacity((n.max(0) as usize).min(1024));
    for _ in 0..n {
        let b = r.value()?;
        v.push(i64::from_be_bytes(b.try_into().ok()?));
    }
    Some(v)
}

/// RowDescription of a statement; `binary` per column (empty: text, as a
/// statement's Describe reports before any Bind).
pub fn row_description(out: &mut Out, s: &Statement, binary: &[bool]) {
    out.msg(b'T', |b| {
        b.extend_from_slice(&(s.columns.len() as i16).to_be_bytes());
        for (i, (name, oid)) in s.columns.iter().enumerate() {
            cstr(b, name);
            b.extend_from_slice(&0u32.to_be_bytes()); // table
            b.extend_from_slice(&0i16.to_be_bytes()); // column number
            b.extend_from_slice(&oid.to_be_bytes());
            let size: i16 = if *oid == INT8 { 8 } else { -1 };
            b.extend_from_slice(&size.to_be_bytes());
            b.extend_from_slice(&(-1i32).to_be_bytes()); // type modifier
            let code = i16::from(binary.get(i).copied().unwrap_or(false));
            b.extend_from_slice(&code.to_be_bytes());
        }
    });
}

/// DataRows and the CommandComplete of a SELECT.
pub fn rows(out: &mut Out, rows: &[Vec<Value>], binary: &[bool]) {
    for row in rows {
        out.msg(b'D', |b| {
            b.extend_from_slice(&(row.len() as i16).to_be_bytes());
            for (i, v) in row.iter().enumerate() {
                let bytes = match (v, binary.get(i).copied().unwrap_or(false)) {
                    (Value::Int(n), true) => n.to_be_bytes().to_vec(),
                    (Value::Int(n), false) => n.to_string().into_bytes(),
                    (Value::Text(s), _) => s.clone().into_bytes(),
                    (Value::Ints(v), _) => format!("{v:?}").into_bytes(),
                };
                b.extend_from_slice(&(bytes.len() as i32).to_be_bytes());
                b.extend_from_slice(&bytes);
            }
        });
    }
    out.msg(b'C', |b| cstr(b, &format!("SELECT {}", rows.len())));
}
