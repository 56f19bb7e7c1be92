//! CRLF-terminated header lines and their decimal numbers, as the lab's RESP
//! server and its cache client read them: bounded, so a peer that never
//! sends CR LF cannot grow a buffer the reader scans.

/// A line longer than its bound.
#[derive(Debug)]
pub struct TooLong;

/// The line starting at `at` of at most `max` bytes: its text and the offset
/// after its CR LF; None while it is incomplete.
pub fn crlf_line(buf: &[u8], at: usize, max: usize) -> Result<Option<(&[u8], usize)>, TooLong> {
    let window = &buf[at.min(buf.len())..buf.len().min(at.saturating_add(max))];
    match window.windows(2).position(|w| w == b"\r\n") {
        Some(end) => Ok(Some((&window[..end], at + end + 2))),
        None if window.len() >= max => Err(TooLong),
        None => Ok(None),
    }
}

/// A decimal number no larger than `max`.
pub fn decimal(text: &[u8], max: usize) -> Option<usize> {
    std::str::from_utf8(text)
        .ok()?
        .trim()
        .parse::<usize>()
        .ok()
        .filter(|n| *n <= max)
}
