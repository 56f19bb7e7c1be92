//! OTLP/HTTP protobuf: one POST per export request on a kept HTTP/1.1
//! connection (TLS where the URL is https://); each answer is read for its
//! status and skipped by length. Written by hand over std's blocking
//! sockets: one request at a time is all an exporter sends.

use super::{Destination, PostError, Signal, TIMEOUT};
use rustls::pki_types::ServerName;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};

/// An answer's head and body are read up to this; a Collector's are bytes.
const MAX_ANSWER_BYTES: u64 = 1 << 20;
/// Statuses OTLP/HTTP says to retry (opentelemetry-proto's otlp.md).
const RETRYABLE: [u16; 4] = [429, 502, 503, 504];

/// A connection to the collector, plain or TLS.
pub enum Stream {
    Plain(TcpStream),
    Tls(Box<rustls::StreamOwned<rustls::ClientConnection, TcpStream>>),
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Stream::Plain(s) => s.read(buf),
            Stream::Tls(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Stream::Plain(s) => s.write(buf),
            Stream::Tls(s) => s.write(buf),
        }
    }
    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Stream::Plain(s) => s.flush(),
            Stream::Tls(s) => s.flush(),
        }
    }
}

pub type Kept = BufReader<Stream>;

/// POSTs one gzipped body, on the kept connection or a new one.
pub fn send(
    to: &Destination,
    kept: &mut Option<Kept>,
    signal: Signal,
    gz: &[u8],
) -> Result<(), PostError> {
    let conn = match kept.take() {
        Some(c) => c,
        None => BufReader::new(connect(to).map_err(|why| PostError {
            why,
            retryable: true,
        })?),
    };
    let path = to.endpoint.path_for(signal);
    match post(conn, to, &path, gz) {
        Ok(back) => {
            *kept = back;
            Ok(())
        }
        Err(why) => Err(PostError {
            retryable: answered_status(&why).is_none_or(|s| RETRYABLE.contains(&s)),
            why: format!("{}{path}: {why}", to.endpoint.origin()),
        }),
    }
}

/// The status an error of `post` names ("answered 503 …"), if it names one.
fn answered_status(why: &str) -> Option<u16> {
    why.strip_prefix("answered ")?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// A TCP connection to the endpoint, with TLS where it says https.
pub fn connect_tcp(host: &str, port: u16, named: &str) -> Result<TcpStream, String> {
    let addrs = (host, port)
        .to_socket_addrs()
        .map_err(|e| format!("{named}: {e}"))?;
    let mut last = format!("{named}: no address");
    for a in addrs {
        match TcpStream::connect_timeout(&a, TIMEOUT) {
            Ok(s) => {
                s.set_read_timeout(Some(TIMEOUT)).ok();
                s.set_write_timeout(Some(TIMEOUT)).ok();
                s.set_nodelay(true).ok();
                return Ok(s);
            }
            Err(e) => last = format!("{named}: {e}"),
        }
    }
    Err(last)
}

fn connect(to: &Destination) -> Result<Stream, String> {
    let e = &to.endpoint;
    let named = to.endpoint.origin();
    let tcp = connect_tcp(&e.host, e.port, &named)?;
    let Some(config) = &to.tls else {
        return Ok(Stream::Plain(tcp));
    };
    let name = ServerName::try_from(e.host.clone()).map_err(|err| format!("{named}: {err}"))?;
    let conn = rustls::ClientConnection::new(config.clone(), name)
        .map_err(|err| format!("{named}: {err}"))?;
    let mut tls = rustls::StreamOwned::new(conn, tcp);
    // The handshake now, so that a certificate refused reads as such.
    while tls.conn.is_handshaking() {
        tls.conn
            .complete_io(&mut tls.sock)
            .map_err(|err| format!("{named}: TLS: {err}"))?;
    }
    Ok(Stream::Tls(Box::new(tls)))
}

/// One POST and its answer; the connection back when it may be kept.
fn post(mut conn: Kept, to: &Destination, path: &str, gz: &[u8]) -> Result<Option<Kept>, String> {
    let mut head = format!(
        "POST {path} HTTP/1.1\r\nHost: {}:{}\r\nContent-Type: application/x-protobuf\r\n\
         Content-Encoding: gzip\r\nContent-Length: {}\r\nUser-Agent: whyslow/{}\r\n",
        to.endpoint.host,
        to.endpoint.port,
        gz.len(),
        env!("CARGO_PKG_VERSION")
    );
    for (name, value) in &to.headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    let s = conn.get_mut();
    s.write_all(head.as_bytes())
        .and_then(|_| s.write_all(gz))
        .and_then(|_| s.flush())
        .map_err(|e| format!("sending: {e}"))?;
    let mut limited = (&mut conn).take(MAX_ANSWER_BYTES);
    let mut lines = Vec::new();
    loop {
        let mut line = String::new();
        match limited.read_line(&mut line) {
            Ok(0) => return Err("the connection closed before an answer".into()),
            Ok(_) if line == "\r\n" || line == "\n" => break,
            Ok(_) => lines.push(line.trim_end().to_string()),
            Err(e) => return Err(format!("reading the answer: {e}")),
        }
    }
    let status = lines
        .first()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|c| c.parse::<u16>().ok())
        .ok_or_else(|| format!("not an HTTP answer: {:?}", lines.first()))?;
    let header = |name: &str| {
        lines.iter().skip(1).find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.trim()
                .eq_ignore_ascii_case(name)
                .then(|| v.trim().to_string())
        })
    };
    let length: Option<u64> = header("content-length").and_then(|v| v.parse().ok());
    let close = header("connection").is_some_and(|v| v.eq_ignore_ascii_case("close"));
    let mut answer = Vec::new();
    if let Some(n) = length {
        (&mut limited)
            .take(n)
            .read_to_end(&mut answer)
            .map_err(|e| format!("reading the answer: {e}"))?;
    }
    if !(200..300).contains(&status) {
        let said = String::from_utf8_lossy(&answer[..answer.len().min(200)]).to_string();
        return Err(format!("answered {status} {}", said.trim()));
    }
    Ok((length.is_some() && !close).then_some(conn))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_named_in_errors() {
        assert_eq!(answered_status("answered 503 busy"), Some(503));
        assert_eq!(answered_status("sending: broken pipe"), None);
    }
}
