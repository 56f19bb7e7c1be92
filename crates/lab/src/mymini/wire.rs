//! MySQL packets for the lab's server and client: framing, length-encoded
//! integers and strings, binary-protocol values (MySQL internals,
//! "Protocol Basics" and "Binary Protocol Value").

use crate::pgmini::shop::Value;
use bytes::{Buf, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt};

/// Packets larger than this end the connection: the shop's are far smaller.
pub const MAX_PACKET: usize = 1 << 20;
/// Column and parameter types used (`enum_field_types`).
pub const LONGLONG: u8 = 0x08;
pub const VAR_STRING: u8 = 0xfd;
pub const COM_QUIT: u8 = 0x01;
pub const COM_QUERY: u8 = 0x03;
pub const COM_PING: u8 = 0x0e;
pub const COM_STMT_PREPARE: u8 = 0x16;
pub const COM_STMT_EXECUTE: u8 = 0x17;
pub const COM_STMT_CLOSE: u8 = 0x19;
pub const COM_STMT_RESET: u8 = 0x1a;

/// Packets being written, each framed with its sequence id.
#[derive(Default)]
pub struct Out {
    buf: Vec<u8>,
}

impl Out {
    pub fn packet(&mut self, seq: u8, body: impl FnOnce(&mut Vec<u8>)) {
        let at = self.buf.len();
        self.buf.extend_from_slice(&[0, 0, 0, seq]);
        body(&mut self.buf);
        let len = (self.buf.len() - at - 4) as u32;
        self.buf[at..at + 3].copy_from_slice(&len.to_le_bytes()[..3]);
    }

    pub fn take(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.buf)
    }
}

pub fn lenenc_int(b: &mut Vec<u8>, n: u64) {
    match n {
        0..=250 => b.push(n as u8),
        251..=0xffff => {
            b.push(0xfc);
            b.extend_from_slice(&(n as u16).to_le_bytes());
        }
        0x1_0000..=0xff_ffff => {
            b.push(0xfd);
            b.extend_from_slice(&(n as u32).to_le_bytes()[..3]);
        }
        _ => {
            b.push(0xfe);
            b.extend_from_slice(&n.to_le_bytes());
        }
    }
}

pub fn lenenc_str(b: &mut Vec<u8>, s: &[u8]) {
    lenenc_int(b, s.len() as u64);
    b.extend_from_slice(s);
}

/// Reads from a packet body; every read is bounds-checked.
pub struct Reader<'a>(pub &'a [u8]);

impl<'a> Reader<'a> {
    pub fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Some(head)
    }

    pub fn u8(&mut self) -> Option<u8> {
        self.take(1).map(|b| b[0])
    }

    pub fn u16(&mut self) -> Option<u16> {
        self.take(2).map(|b| u16::from_le_bytes([b[0], b[1]]))
    }

    pub fn u32(&mut self) -> Option<u32> {
        self.take(4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    pub fn lenenc(&mut self) -> Option<u64> {
        let n = match self.u8()? {
            b @ 0..=250 => return Some(u64::from(b)),
            0xfc => 2,
            0xfd => 3,
            0xfe => 8,
            _ => return None,
        };
        let mut v = [0u8; 8];
        v[..n].copy_from_slice(self.take(n)?);
        Some(u64::from_le_bytes(v))
    }

    pub fn lenenc_str(&mut self) -> Option<&'a [u8]> {
        let n = usize::try_from(self.lenenc()?).ok()?;
        self.take(n)
    }
}

/// One whole packet from `stream`: (sequence id, payload).
pub async fn read_packet<S: AsyncRead + Unpin>(
    stream: &mut S,
    buf: &mut BytesMut,
) -> std::io::Result<(u8, BytesMut)> {
    while buf.len() < 4 {
        read_more(stream, buf).await?;
    }
    let len = u32::from_le_bytes([buf[0], buf[1], buf[2], 0]) as usize;
    if len > MAX_PACKET {
        return Err(std::io::ErrorKind::InvalidData.into());
    }
    while buf.len() < 4 + len {
        read_more(stream, buf).await?;
    }
    let seq = buf[3];
    buf.advance(4);
    Ok((seq, buf.split_to(len)))
}

async fn read_more<S: AsyncRead + Unpin>(
    stream: &mut S,
    buf: &mut BytesMut,
) -> std::io::Result<()> {
    if stream.read_buf(buf).await? == 0 {
        return Err(std::io::ErrorKind::UnexpectedEof.into());
    }
    Ok(())
}

/// A value in the binary protocol, with its type byte.
pub fn encode_value(b: &mut Vec<u8>, v: &Value) -> u8 {
    match v {
        Value::Int(n) => {
            b.extend_from_slice(&n.to_le_bytes());
            LONGLONG
        }
        Value::Text(s) => {
            lenenc_str(b, s.as_bytes());
            VAR_STRING
        }
        Value::Ints(_) => {
            lenenc_str(b, b"");
            VAR_STRING
        }
    }
}

/// A value in the text protocol: a length-encoded string.
pub fn text_value(b: &mut Vec<u8>, v: &Value) {
    match v {
        Value::Int(n) => lenenc_str(b, n.to_string().as_bytes()),
        Value::Text(s) => lenenc_str(b, s.as_bytes()),
        Value::Ints(_) => lenenc_str(b, b""),
    }
}

/// A binary-protocol value of type `t` (integers of 1–8 bytes, or a
/// length-encoded string for any other type).
pub fn decode_value(r: &mut Reader, t: u8) -> Option<Value> {
    let int = |b: &[u8]| {
        let mut v = [0u8; 8];
        v[..b.len()].copy_from_slice(b);
        i64::from_le_bytes(v)
    };
    Some(match t {
        0x01 => Value::Int(int(r.take(1)?)),
        0x02 | 0x0d => Value::Int(int(r.take(2)?)),
        0x03 | 0x09 => Value::Int(int(r.take(4)?)),
        LONGLONG => Value::Int(int(r.take(8)?)),
        _ => Value::Text(String::from_utf8_lossy(r.lenenc_str()?).into_owned()),
    })
}
