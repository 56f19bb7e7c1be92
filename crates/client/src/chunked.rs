//! Incremental decoder for `Transfer-Encoding: chunked`: counts body bytes and
//! finds the end of the message without storing the body.

/// Chunk-size lines longer than this are not HTTP (16 hex digits + extensions).
const MAX_SIZE_LINE: usize = 4096;

#[derive(Debug, Clone, PartialEq, Eq)]
enum State {
    Size {
        digits: u64,
        seen_digit: bool,
        in_ext: bool,
        line_len: usize,
    },
    SizeLf {
        size: u64,
    },
    Data {
        remaining: u64,
    },
    DataCr,
    DataLf,
    /// Trailer section: `line_len` bytes seen on the current line.
    Trailer {
        line_len: usize,
        cr: bool,
    },
    Done,
}

#[derive(Debug, Clone)]
pub struct ChunkedDecoder {
    state: State,
    pub body_bytes: u64,
}

impl Default for ChunkedDecoder {
    fn default() -> Self {
        ChunkedDecoder {
            state: State::Size {
                digits: 0,
                seen_digit: false,
                in_ext: false,
                line_len: 0,
            },
            body_bytes: 0,
        }
    }
}

impl ChunkedDecoder {
    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// Consumes bytes; returns how many were part of this message (the rest
    /// belongs to the next one), or an error for input that is not chunked encoding.
    pub fn feed(&mut self, data: &[u8]) -> Result<usize, &'static str> {
        let mut i = 0;
        while i < data.len() && self.state != State::Done {
            if let State::Data { remaining } = self.state {
                let take = remaining.min((data.len() - i) as u64);
                self.body_bytes += take;
                i += take as usize;
                self.state = if remaining == take {
                    State::DataCr
                } else {
                    State::Data {
                        remaining: remaining - take,
                    }
                };
                continue;
            }
            self.step(data[i])?;
            i += 1;
        }
        Ok(i)
    }

    fn step(&mut self, b: u8) -> Result<(), &'static str> {
        self.state = match std::mem::replace(&mut self.state, State::Done) {
            State::Size {
                digits,
                seen_digit,
                in_ext,
                line_len,
            } => {
                if line_len > MAX_SIZE_LINE {
                    return Err("chunk size line too long");
                }
                match b {
                    b'\r' => State::SizeLf {
                        size: size_or_err(digits, seen_digit)?,
                    },
                    b'\n' => self.after_size(size_or_err(digits, seen_digit)?),
                    _ if in_ext => State::Size {
                        digits,
                        seen_digit,
                        in_ext,
                        line_len: line_len + 1,
                    },
                    b';' | b' ' | b'\t' => State::Size {
                        digits,
                        seen_digit,
                        in_ext: true,
                        line_len: line_len + 1,
                    },
                    _ => {
                        let v = (b as char).to_digit(16).ok_or("bad chunk size")? as u64;
                        let digits = digits
                            .checked_mul(16)
                            .and_then(|d| d.checked_add(v))
                            .ok_or("chunk size overflows")?;
                        State::Size {
                            digits,
                            seen_digit: true,
                            in_ext,
                            line_len: line_len + 1,
                        }
                    }
                }
            }
            State::SizeLf { size } if b == b'\n' => self.after_size(size),
            State::DataCr if b == b'\r' => State::DataLf,
            State::DataCr if b == b'\n' => self.new_size(),
            State::DataLf if b == b'\n' => self.new_size(),
            State::Trailer { line_len, .. } if b == b'\n' => {
                if line_len == 0 {
                    State::Done
                } else {
                    State::Trailer {
                        line_len: 0,
                        cr: false,
                    }
                }
            }
            State::Trailer { line_len, .. } if b == b'\r' => State::Trailer { line_len, cr: true },
            State::Trailer { line_len, .. } => {
                if line_len > MAX_SIZE_LINE {
                    return Err("trailer line too long");
                }
                State::Trailer {
                    line_len: line_len + 1,
                    cr: false,
                }
            }
            _ => return Err("malformed chunked encoding"),
        };
        Ok(())
    }

    fn new_size(&self) -> State {
        State::Size {
            digits: 0,
            seen_digit: false,
            in_ext: false,
            line_len: 0,
        }
    }

    fn after_size(&self, size: u64) -> State {
        if size == 0 {
            State::Trailer {
                line_len: 0,
                cr: false,
            }
        } else {
            State::Data { remaining: size }
        }
    }
}

fn size_or_err(digits: u64, seen: bool) -> Result<u64, &'static str> {
    if seen {
        Ok(digits)
    } else {
        Err("missing chunk size")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BODY: &[u8] = b"4\r\nWiki\r\n5;ext=1\r\npedia\r\n0\r\nX-T: 1\r\n\r\nNEXT";

    #[test]
    fn decodes_in_one_piece_and_byte_by_byte() {
        let mut d = ChunkedDecoder::default();
        let used = d.feed(BODY).unwrap();
        assert!(d.is_done());
        assert_eq!(d.body_bytes, 9);
        assert_eq!(&BODY[used..], b"NEXT");
        let mut d = ChunkedDecoder::default();
        let mut used = 0;
        for b in BODY {
            if d.is_done() {
                break;
            }
            used += d.feed(std::slice::from_ref(b)).unwrap();
        }
        assert_eq!((d.body_bytes, used), (9, BODY.len() - 4));
    }

    #[test]
    fn rejects_garbage_and_overflow() {
        assert!(ChunkedDecoder::default().feed(b"zz\r\n").is_err());
        assert!(ChunkedDecoder::default()
            .feed(b"fffffffffffffffffff\r\n")
            .is_err());
        assert!(ChunkedDecoder::default().feed(b"\r\n").is_err());
    }
}
