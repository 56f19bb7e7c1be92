//! `--otlp-endpoint URL`: the spans POSTed as OTLP/HTTP protobuf, one
//! `ExportTraceServiceRequest` per request, as an SDK's exporter sends them
//! to a Collector (or to `whyslow receive`). Plain HTTP/1.1 on one kept
//! connection; each answer is read for its status and skipped by length.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;
use whyslow_otlp::proto::ExportTraceServiceRequest;

/// OTLP/HTTP's path for traces, added to a URL that names none (as the
/// SDKs do with `OTEL_EXPORTER_OTLP_ENDPOINT`).
const TRACES_PATH: &str = "/v1/traces";
/// An SDK exporter's default timeout (OTEL_EXPORTER_OTLP_TIMEOUT, 10 s).
const TIMEOUT: Duration = Duration::from_secs(10);
/// An answer's head and body are read up to this; a Collector's are bytes.
const MAX_ANSWER_BYTES: u64 = 1 << 20;

/// Where spans go: `http://HOST[:PORT][/PATH]`.
#[derive(Debug, Clone, PartialEq)]
pub struct Endpoint {
    host: String,
    port: u16,
    path: String,
}

impl Endpoint {
    pub fn parse(url: &str) -> Result<Endpoint, String> {
        let rest = match url.split_once("://") {
            Some(("http", rest)) => rest,
            Some(("https", _)) => {
                return Err(format!(
                    "{url}: https is not sent to; point it at a Collector's http:// receiver"
                ))
            }
            _ => return Err(format!("{url}: not an http:// URL")),
        };
        let (authority, path) = match rest.find('/') {
            Some(i) => rest.split_at(i),
            None => (rest, ""),
        };
        let (host, port) = match authority.rsplit_once(':') {
            Some((h, p)) if !h.ends_with(']') || !p.is_empty() => (
                h,
                p.parse::<u16>()
                    .map_err(|_| format!("{url}: port {p:?} is not a port"))?,
            ),
            _ => (authority, 80),
        };
        let host = host.trim_start_matches('[').trim_end_matches(']');
        if host.is_empty() {
            return Err(format!("{url}: no host"));
        }
        let path = match path {
            "" | "/" => TRACES_PATH.to_string(),
            p => p.to_string(),
        };
        Ok(Endpoint {
            host: host.to_string(),
            port,
            path,
        })
    }
}

impl Endpoint {
    /// The same collector's path for another signal (`logs`, `metrics`):
    /// a path ending in /v1/traces (as given, or by default) has it replaced.
    pub fn for_signal(&self, signal: &str) -> Endpoint {
        let base = self.path.strip_suffix(TRACES_PATH).unwrap_or(&self.path);
        Endpoint {
            path: format!("{}/v1/{signal}", base.trim_end_matches('/')),
            ..self.clone()
        }
    }
}

/// Why a POST failed, and whether the same POST may succeed later (the
/// collector unreachable, overloaded or restarting: OTLP/HTTP's retryable
/// answers 429, 502, 503, 504).
#[derive(Debug, Clone, PartialEq)]
pub struct PostError {
    pub why: String,
    pub retryable: bool,
}

/// Statuses OTLP/HTTP says to retry (opentelemetry-proto's otlp.md).
const RETRYABLE: [u16; 4] = [429, 502, 503, 504];

/// POSTs one protobuf body, gzip-compressed, on a connection of its own.
pub fn post_once(to: &Endpoint, body: &[u8]) -> Result<(), PostError> {
    let stream = connect(to).map_err(|why| PostError {
        why,
        retryable: true,
    })?;
    let gz = gzip(body);
    post(BufReader::new(stream), to, &gz, true)
        .map(drop)
        .map_err(|why| PostError {
            retryable: answered_status(&why).is_none_or(|s| RETRYABLE.contains(&s)),
            why: format!("{to}: {why}"),
        })
}

/// The status an error of `post` names ("answered 503 …"), if it names one.
fn answered_status(why: &str) -> Option<u16> {
    why.strip_prefix("answered ")?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

fn gzip(body: &[u8]) -> Vec<u8> {
    use flate2::write::GzEncoder;
    let mut e = GzEncoder::new(Vec::new(), flate2::Compression::fast());
    let _ = e.write_all(body);
    e.finish().unwrap_or_default()
}

impl std::fmt::Display for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.host.contains(':') {
            true => write!(f, "http://[{}]:{}{}", self.host, self.port, self.path),
            false => write!(f, "http://{}:{}{}", self.host, self.port, self.path),
        }
    }
}

/// Sends every request; the spans sent, or why the rest were not (after
/// how many requests went).
pub fn post_traces(to: &Endpoint, requests: &[ExportTraceServiceRequest]) -> Result<u64, String> {
    let mut spans = 0u64;
    let mut conn: Option<BufReader<TcpStream>> = None;
    for (n, r) in requests.iter().enumerate() {
        let body = whyslow_otlp::encoded(r);
        let stream = match conn.take() {
            Some(c) => c,
            None => BufReader::new(connect(to)?),
        };
        let sent = post(stream, to, &body, false)
            .map_err(|e| format!("{to}: {e} (after {n} of {} requests)", requests.len()))?;
        conn = sent;
        spans += whyslow_otlp::span_count(r);
    }
    Ok(spans)
}

fn connect(to: &Endpoint) -> Result<TcpStream, String> {
    let addrs = (to.host.as_str(), to.port)
        .to_socket_addrs()
        .map_err(|e| format!("{to}: {e}"))?;
    let mut last = format!("{to}: no address");
    for a in addrs {
        match TcpStream::connect_timeout(&a, TIMEOUT) {
            Ok(s) => {
                s.set_read_timeout(Some(TIMEOUT)).ok();
                s.set_write_timeout(Some(TIMEOUT)).ok();
                s.set_nodelay(true).ok();
                return Ok(s);
            }
            Err(e) => last = format!("{to}: {e}"),
        }
    }
    Err(last)
}

/// One POST and its answer; the connection back when it may be kept.
fn post(
    mut conn: BufReader<TcpStream>,
    to: &Endpoint,
    body: &[u8],
    gzipped: bool,
) -> Result<Option<BufReader<TcpStream>>, String> {
    let head = format!(
        "POST {} HTTP/1.1\r\nHost: {}:{}\r\nContent-Type: application/x-protobuf\r\n\
         {}Content-Length: {}\r\nUser-Agent: whyslow/{}\r\n\r\n",
        to.path,
        to.host,
        to.port,
        if gzipped {
            "Content-Encoding: gzip\r\n"
        } else {
            ""
        },
        body.len(),
        env!("CARGO_PKG_VERSION")
    );
    let s = conn.get_mut();
    s.write_all(head.as_bytes())
        .and_then(|_| s.write_all(body))
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
    fn urls_as_the_sdks_take_them() {
        let e = Endpoint::parse("http://127.0.0.1:4318").unwrap();
        assert_eq!(e.to_string(), "http://127.0.0.1:4318/v1/traces");
        let e = Endpoint::parse("http://[::1]:9/custom/path").unwrap();
        assert_eq!(e.to_string(), "http://[::1]:9/custom/path");
        assert_eq!(Endpoint::parse("http://h").unwrap().port, 80);
        assert!(Endpoint::parse("https://h:4318").is_err());
        assert!(Endpoint::parse("h:4318").is_err());
        assert!(Endpoint::parse("http://h:x").is_err());
        assert!(Endpoint::parse("http://:4318").is_err());
    }

    #[test]
    fn other_signals_go_to_their_own_paths() {
        let e = Endpoint::parse("http://127.0.0.1:4318").unwrap();
        assert_eq!(
            e.for_signal("logs").to_string(),
            "http://127.0.0.1:4318/v1/logs"
        );
        let e = Endpoint::parse("http://h:1/prefix/v1/traces").unwrap();
        assert_eq!(
            e.for_signal("metrics").to_string(),
            "http://h:1/prefix/v1/metrics"
        );
        assert_eq!(answered_status("answered 503 busy"), Some(503));
        assert_eq!(answered_status("sending: broken pipe"), None);
    }

    #[test]
    fn a_refused_endpoint_is_an_error_that_names_it() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let e = Endpoint::parse(&format!("http://127.0.0.1:{port}")).unwrap();
        let req = ExportTraceServiceRequest::default();
        let err = post_traces(&e, &[req]).unwrap_err();
        assert!(err.contains(&port.to_string()), "{err}");
    }
}
