//! gRPC's framing of a request body (grpc/doc/PROTOCOL-HTTP2.md): each
//! message a compressed flag byte, a 4-byte big-endian length, and the
//! message. Read by `receive --otlp-grpc` before the protobuf goes to the
//! span set as an OTLP/HTTP body does.

/// One message of a gRPC body: compressed or not, and its bytes.
#[derive(Debug, PartialEq, Eq)]
pub struct Message<'a> {
    pub compressed: bool,
    pub bytes: &'a [u8],
}

/// The messages of a whole gRPC request body (1 flag byte, a 4-byte
/// big-endian length, the message; repeated). Err on a cut frame.
pub fn messages(body: &[u8]) -> Result<Vec<Message<'_>>, String> {
    let mut out = Vec::new();
    let mut rest = body;
    while !rest.is_empty() {
        let [flag, a, b, c, d, ..] = *rest else {
            return Err(format!(
                "a gRPC frame cut in its header ({} bytes)",
                rest.len()
            ));
        };
        let len = u32::from_be_bytes([a, b, c, d]) as usize;
        let Some(bytes) = rest.get(5..5 + len) else {
            return Err(format!(
                "a gRPC message of {len} bytes, {} there",
                rest.len() - 5
            ));
        };
        out.push(Message {
            compressed: flag & 1 == 1,
            bytes,
        });
        rest = &rest[5 + len..];
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_are_split_by_their_lengths() {
        let body = [0, 0, 0, 0, 2, 7, 8, 1, 0, 0, 0, 1, 9];
        let m = messages(&body).unwrap();
        assert_eq!(
            m,
            vec![
                Message {
                    compressed: false,
                    bytes: &[7, 8]
                },
                Message {
                    compressed: true,
                    bytes: &[9]
                }
            ]
        );
        assert!(messages(&[0, 0, 0]).is_err());
        assert!(messages(&[0, 0, 0, 0, 9, 1]).is_err());
        assert!(messages(&[0, 0xff, 0xff, 0xff, 0xff]).is_err());
        assert_eq!(messages(&[]).unwrap(), vec![]);
    }
}
