//! HPACK Huffman decoding (RFC 7541 §5.2, code of Appendix B).
//!
//! The Appendix B code is canonical: codes of one length are consecutive
//! numbers in symbol order, and each length starts where the previous one
//! ended (shifted left). So the table below is only the code length of each
//! symbol; the codes themselves follow, and decoding needs, per length, the
//! first code, how many codes there are and where their symbols start.

/// Code length in bits of symbols 0..=255 and of EOS (256): RFC 7541 Appendix B.
const CODE_BITS: [u8; 257] = [
    13, 23, 28, 28, 28, 28, 28, 28, 28, 24, 30, 28, 28, 30, 28, 28, //
    28, 28, 28, 28, 28, 28, 30, 28, 28, 28, 28, 28, 28, 28, 28, 28, //
    6, 10, 10, 12, 13, 6, 8, 11, 10, 10, 8, 11, 8, 6, 6, 6, //
    5, 5, 5, 6, 6, 6, 6, 6, 6, 6, 7, 8, 15, 6, 12, 10, //
    13, 6, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, //
    7, 7, 7, 7, 7, 7, 7, 7, 8, 7, 8, 13, 19, 13, 14, 6, //
    15, 5, 6, 5, 6, 5, 6, 6, 6, 5, 7, 7, 6, 6, 6, 5, //
    6, 7, 6, 5, 5, 6, 7, 7, 7, 7, 7, 15, 11, 14, 13, 28, //
    20, 22, 20, 20, 22, 22, 22, 23, 22, 23, 23, 23, 23, 23, 24, 23, //
    24, 24, 22, 23, 24, 23, 23, 23, 23, 21, 22, 23, 22, 23, 23, 24, //
    22, 21, 20, 22, 22, 23, 23, 21, 23, 22, 22, 24, 21, 22, 23, 23, //
    21, 21, 22, 21, 23, 22, 23, 23, 20, 22, 22, 22, 23, 22, 22, 23, //
    26, 26, 20, 19, 22, 23, 22, 25, 26, 26, 26, 27, 27, 26, 24, 25, //
    19, 21, 26, 27, 27, 26, 27, 24, 21, 21, 26, 26, 28, 27, 27, 27, //
    20, 24, 20, 21, 22, 21, 21, 23, 22, 22, 25, 25, 24, 24, 26, 23, //
    26, 27, 26, 26, 27, 27, 27, 27, 27, 28, 27, 27, 27, 27, 27, 26, //
    30,
];

/// Longest code (EOS and a few control characters): RFC 7541 Appendix B.
const MAX_BITS: usize = 30;
/// End-of-string symbol: must never appear in a string (RFC 7541 §5.2).
const EOS: u16 = 256;
/// Padding is at most 7 bits (shorter than one byte), RFC 7541 §5.2.
const MAX_PADDING_BITS: usize = 7;

/// Per code length: first code, number of codes, index of the first symbol in `symbols`.
struct Canonical {
    first: [u32; MAX_BITS + 1],
    count: [u32; MAX_BITS + 1],
    start: [u16; MAX_BITS + 1],
    /// Symbols ordered by (code length, symbol): the order of their codes.
    symbols: [u16; 257],
}

const fn canonical() -> Canonical {
    let mut c = Canonical {
        first: [0; MAX_BITS + 1],
        count: [0; MAX_BITS + 1],
        start: [0; MAX_BITS + 1],
        symbols: [0; 257],
    };
    let mut n = 0;
    let mut code = 0u32;
    let mut len = 1;
    while len <= MAX_BITS {
        c.first[len] = code;
        c.start[len] = n as u16;
        let mut sym = 0;
        while sym < 257 {
            if CODE_BITS[sym] as usize == len {
                c.symbols[n] = sym as u16;
                n += 1;
                c.count[len] += 1;
            }
            sym += 1;
        }
        code = (code + c.count[len]) << 1;
        len += 1;
    }
    c
}

static CODE: Canonical = canonical();

/// Decodes a Huffman-coded string literal, appending to `out`.
pub fn decode(src: &[u8], out: &mut Vec<u8>) -> Result<(), &'static str> {
    let mut code = 0u32;
    let mut len = 0usize;
    for &byte in src {
        for shift in (0..8).rev() {
            code = (code << 1) | u32::from((byte >> shift) & 1);
            len += 1;
            if len > MAX_BITS {
                return Err("invalid Huffman code");
            }
            let Some(offset) = code.checked_sub(CODE.first[len]) else {
                continue;
            };
            if offset >= CODE.count[len] {
                continue;
            }
            let at = usize::from(CODE.start[len]) + offset as usize;
            let sym = CODE
                .symbols
                .get(at)
                .copied()
                .ok_or("invalid Huffman code")?;
            if sym == EOS {
                return Err("Huffman EOS inside a string");
            }
            out.push(sym as u8);
            code = 0;
            len = 0;
        }
    }
    // What is left must be the most significant bits of EOS: all ones.
    if len > MAX_PADDING_BITS || code != (1u32 << len) - 1 {
        return Err("invalid Huffman padding");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dec(src: &[u8]) -> Result<Vec<u8>, &'static str> {
        let mut out = Vec::new();
        decode(src, &mut out).map(|()| out)
    }

    #[test]
    fn rfc_examples_and_padding_rules() {
        let www = [
            0xf1, 0xe3, 0xc2, 0xe5, 0xf2, 0x3a, 0x6b, 0xa0, 0xab, 0x90, 0xf4, 0xff,
        ];
        assert_eq!(dec(&www).unwrap(), b"www.example.com");
        assert_eq!(dec(&[0x64, 0x0e, 0xff]).unwrap(), b"307");
        assert_eq!(dec(&[0x07]).unwrap(), b"0");
        assert_eq!(dec(&[]).unwrap(), b"");
        // Padding not all ones; padding of 8+ bits; EOS coded in full.
        assert!(dec(&[0x00]).is_err());
        assert!(dec(&[0x07, 0xff]).is_err());
        assert!(dec(&[0xff, 0xff, 0xff, 0xff]).is_err());
    }

    #[test]
    fn codes_are_canonical_like_appendix_b() {
        // Spot checks against Appendix B rows: '0' = 00000, 'a' = 00011,
        // ':' = 1011100, 0x00 = 1111111111000 (13 bits).
        let code = |sym: usize| {
            let len = CODE_BITS[sym] as usize;
            let i = CODE
                .symbols
                .iter()
                .position(|&s| s as usize == sym)
                .unwrap();
            CODE.first[len] + (i - CODE.start[len] as usize) as u32
        };
        assert_eq!(code(b'0' as usize), 0b00000);
        assert_eq!(code(b'a' as usize), 0b00011);
        assert_eq!(code(b':' as usize), 0b1011100);
        assert_eq!(code(0), 0x1ff8);
        assert_eq!(code(256), 0x3fffffff);
    }
}
