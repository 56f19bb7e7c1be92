//! `--otlp-endpoint URL`: spans, logs and metrics sent as an SDK's OTLP
//! exporter sends them to a Collector (or to `whyslow receive`):
//! OTLP/HTTP protobuf (`http1`) or OTLP/gRPC (`grpc`), over TLS for an
//! `https://` URL (the system's roots, or a CA file), gzip-compressed,
//! with the headers given (an authorization), retried where OTLP says a
//! failure may pass. Header values are never printed: they are secrets.

mod grpc;
mod http1;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};
use whyslow_client::{HttpVersion, TlsOptions, TlsSetup};
use whyslow_otlp::proto::ExportTraceServiceRequest;

/// OTLP/HTTP's path for traces, added to a URL that names none (as the
/// SDKs do with `OTEL_EXPORTER_OTLP_ENDPOINT`).
const TRACES_PATH: &str = "/v1/traces";
/// An SDK exporter's default timeout (OTEL_EXPORTER_OTLP_TIMEOUT, 10 s).
const TIMEOUT: Duration = Duration::from_secs(10);
/// How long `post_traces` retries one request before giving up the rest:
/// a Collector restarting is back within seconds.
const RETRY_FOR: Duration = Duration::from_secs(10);
/// The first pause between tries, doubled each time (as the SDKs back off).
const FIRST_BACKOFF: Duration = Duration::from_millis(250);

/// Where spans go: `http[s]://HOST[:PORT][/PATH]`.
#[derive(Debug, Clone, PartialEq)]
pub struct Endpoint {
    tls: bool,
    host: String,
    port: u16,
    path: String,
}

impl Endpoint {
    pub fn parse(url: &str) -> Result<Endpoint, String> {
        let (tls, rest) = match url.split_once("://") {
            Some(("http", rest)) => (false, rest),
            Some(("https", rest)) => (true, rest),
            _ => return Err(format!("{url}: not an http:// or https:// URL")),
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
            _ => (authority, if tls { 443 } else { 80 }),
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
            tls,
            host: host.to_string(),
            port,
            path,
        })
    }

    /// The same collector's path for another signal: a path ending in
    /// /v1/traces (as given, or by default) has it replaced.
    fn path_for(&self, signal: Signal) -> String {
        let base = self.path.strip_suffix(TRACES_PATH).unwrap_or(&self.path);
        match signal {
            Signal::Traces => self.path.clone(),
            _ => format!("{}/v1/{}", base.trim_end_matches('/'), signal.name()),
        }
    }
}

impl Endpoint {
    /// `http[s]://HOST:PORT`, the URL without its path.
    fn origin(&self) -> String {
        let scheme = if self.tls { "https" } else { "http" };
        match self.host.contains(':') {
            true => format!("{scheme}://[{}]:{}", self.host, self.port),
            false => format!("{scheme}://{}:{}", self.host, self.port),
        }
    }
}

impl std::fmt::Display for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}{}", self.origin(), self.path)
    }
}

/// OTLP's two transports, named as `OTEL_EXPORTER_OTLP_PROTOCOL` names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Protocol {
    #[default]
    HttpProtobuf,
    Grpc,
}

impl Protocol {
    pub fn parse(s: &str) -> Result<Protocol, String> {
        match s {
            "http/protobuf" | "http" => Ok(Protocol::HttpProtobuf),
            "grpc" => Ok(Protocol::Grpc),
            _ => Err(format!("{s}: grpc or http/protobuf")),
        }
    }
}

/// What an export request carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    Traces,
    Logs,
    Metrics,
}

impl Signal {
    fn name(self) -> &'static str {
        match self {
            Signal::Traces => "traces",
            Signal::Logs => "logs",
            Signal::Metrics => "metrics",
        }
    }
}

/// A header given with `--otlp-header NAME=VALUE` (or in
/// `OTEL_EXPORTER_OTLP_HEADERS`, comma-separated).
pub fn parse_header(s: &str) -> Result<(String, String), String> {
    let (name, value) = s
        .split_once('=')
        .ok_or_else(|| "NAME=VALUE expected".to_string())?;
    let name = name.trim().to_ascii_lowercase();
    let valid = !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b));
    if !valid {
        return Err(format!("{name:?} is not a header name"));
    }
    if value.bytes().any(|b| b == b'\r' || b == b'\n') {
        return Err(format!("{name}: a header value is one line"));
    }
    Ok((name, value.trim().to_string()))
}

/// Everything an export needs: where, how, with which headers and trust.
#[derive(Clone)]
pub struct Destination {
    pub endpoint: Endpoint,
    pub protocol: Protocol,
    headers: Vec<(String, String)>,
    tls: Option<Arc<rustls::ClientConfig>>,
}

impl std::fmt::Debug for Destination {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.headers.iter().map(|(n, _)| n.as_str()).collect();
        write!(
            f,
            "{} ({:?}, headers {names:?})",
            self.endpoint, self.protocol
        )
    }
}

impl Destination {
    /// `ca`: the PEM certificates to trust instead of the built-in roots.
    pub fn new(
        endpoint: Endpoint,
        protocol: Protocol,
        headers: Vec<(String, String)>,
        ca: Option<&Path>,
    ) -> Result<Destination, String> {
        let tls = match (endpoint.tls, ca) {
            (false, Some(_)) => {
                return Err(format!("{endpoint}: a CA file is for an https:// URL"))
            }
            (false, None) => None,
            (true, _) => {
                let opts = TlsOptions {
                    insecure: false,
                    ca_file: ca.map(Path::to_path_buf),
                    keylog: None,
                };
                let version = match protocol {
                    Protocol::Grpc => HttpVersion::Http2,
                    Protocol::HttpProtobuf => HttpVersion::Http1,
                };
                let setup = TlsSetup::new(&opts, version).map_err(|e| e.to_string())?;
                Some(setup.config)
            }
        };
        Ok(Destination {
            endpoint,
            protocol,
            headers,
            tls,
        })
    }

    /// As an SDK's exporter is configured: what is not given is read from
    /// `OTEL_EXPORTER_OTLP_PROTOCOL`, `OTEL_EXPORTER_OTLP_HEADERS` (a
    /// comma-separated, URL-encoded list) and `OTEL_EXPORTER_OTLP_CERTIFICATE`.
    pub fn configured(
        endpoint: Endpoint,
        protocol: Option<Protocol>,
        mut headers: Vec<(String, String)>,
        ca: Option<std::path::PathBuf>,
    ) -> Result<Destination, String> {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
        let protocol = match (protocol, var("OTEL_EXPORTER_OTLP_PROTOCOL")) {
            (Some(p), _) => p,
            (None, Some(v)) => Protocol::parse(v.trim())
                .map_err(|e| format!("OTEL_EXPORTER_OTLP_PROTOCOL: {e}"))?,
            (None, None) => Protocol::default(),
        };
        if headers.is_empty() {
            for pair in var("OTEL_EXPORTER_OTLP_HEADERS")
                .iter()
                .flat_map(|v| v.split(','))
            {
                if !pair.trim().is_empty() {
                    let h = parse_header(&percent_decoded(pair))
                        .map_err(|e| format!("OTEL_EXPORTER_OTLP_HEADERS: {e}"))?;
                    headers.push(h);
                }
            }
        }
        let ca = ca.or_else(|| var("OTEL_EXPORTER_OTLP_CERTIFICATE").map(Into::into));
        Destination::new(endpoint, protocol, headers, ca.as_deref())
    }

    /// Plain http/protobuf to `endpoint`, no headers.
    pub fn plain(endpoint: Endpoint) -> Destination {
        Destination {
            endpoint,
            protocol: Protocol::HttpProtobuf,
            headers: Vec::new(),
            tls: None,
        }
    }
}

/// The SDKs' header list is URL-encoded (`Bearer%20abc`).
fn percent_decoded(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |at: usize| b.get(at).and_then(|&c| (c as char).to_digit(16));
        match (b[i], hex(i + 1), hex(i + 2)) {
            (b'%', Some(h), Some(l)) => {
                out.push((h * 16 + l) as u8);
                i += 3;
            }
            (c, ..) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Why a send failed, and whether the same send may succeed later (the
/// collector unreachable, overloaded or restarting).
#[derive(Debug, Clone, PartialEq)]
pub struct PostError {
    pub why: String,
    pub retryable: bool,
}

/// One exporter's connection, kept between sends (as an SDK keeps its
/// channel) and opened again after a failure.
pub struct Exporter {
    to: Destination,
    http: Option<http1::Kept>,
    grpc: Option<grpc::Channel>,
}

impl Exporter {
    pub fn new(to: Destination) -> Exporter {
        Exporter {
            to,
            http: None,
            grpc: None,
        }
    }

    /// Sends one encoded export request of `signal`, once.
    pub fn send(&mut self, signal: Signal, body: &[u8]) -> Result<(), PostError> {
        let gz = gzip(body);
        let result = match self.to.protocol {
            Protocol::HttpProtobuf => http1::send(&self.to, &mut self.http, signal, &gz),
            Protocol::Grpc => grpc::send(&self.to, &mut self.grpc, signal, &gz),
        };
        if result.is_err() {
            self.http = None;
            self.grpc = None;
        }
        result
    }

    /// Sends it, retrying a retryable failure with backoff until `until`.
    pub fn send_retrying(
        &mut self,
        signal: Signal,
        body: &[u8],
        until: Instant,
    ) -> Result<(), PostError> {
        let mut pause = FIRST_BACKOFF;
        loop {
            match self.send(signal, body) {
                Err(e) if e.retryable && Instant::now() + pause < until => {
                    std::thread::sleep(pause);
                    pause *= 2;
                }
                other => return other,
            }
        }
    }
}

fn gzip(body: &[u8]) -> Vec<u8> {
    use flate2::write::GzEncoder;
    use std::io::Write;
    let mut e = GzEncoder::new(Vec::new(), flate2::Compression::fast());
    let _ = e.write_all(body);
    e.finish().unwrap_or_default()
}

/// Sends every request, each retried for `RETRY_FOR`; the spans sent, or
/// why the rest were not (after how many requests went).
pub fn post_traces(
    to: &Destination,
    requests: &[ExportTraceServiceRequest],
) -> Result<u64, String> {
    let mut spans = 0u64;
    let mut exporter = Exporter::new(to.clone());
    for (n, r) in requests.iter().enumerate() {
        let body = whyslow_otlp::encoded(r);
        let until = Instant::now() + RETRY_FOR;
        exporter
            .send_retrying(Signal::Traces, &body, until)
            .map_err(|e| format!("{} (after {n} of {} requests)", e.why, requests.len()))?;
        spans += whyslow_otlp::span_count(r);
    }
    Ok(spans)
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
        let e = Endpoint::parse("https://h").unwrap();
        assert_eq!((e.tls, e.port), (true, 443));
        assert!(Endpoint::parse("h:4318").is_err());
        assert!(Endpoint::parse("ftp://h:4318").is_err());
        assert!(Endpoint::parse("http://h:x").is_err());
        assert!(Endpoint::parse("http://:4318").is_err());
    }

    #[test]
    fn other_signals_go_to_their_own_paths() {
        let e = Endpoint::parse("http://127.0.0.1:4318").unwrap();
        assert_eq!(e.path_for(Signal::Logs), "/v1/logs");
        let e = Endpoint::parse("http://h:1/prefix/v1/traces").unwrap();
        assert_eq!(e.path_for(Signal::Metrics), "/prefix/v1/metrics");
        assert_eq!(e.path_for(Signal::Traces), "/prefix/v1/traces");
    }

    #[test]
    fn headers_are_one_line_each_and_named_as_http_names_them() {
        assert_eq!(
            parse_header("Authorization=Bearer abc=").unwrap(),
            ("authorization".into(), "Bearer abc=".into())
        );
        assert!(parse_header("novalue").is_err());
        assert!(parse_header("bad name=x").is_err());
        assert!(parse_header("x-a=1\r\nx-b: 2").is_err());
        let d = Destination::new(
            Endpoint::parse("http://h:1").unwrap(),
            Protocol::Grpc,
            vec![parse_header("authorization=secret").unwrap()],
            None,
        )
        .unwrap();
        let shown = format!("{d:?}");
        assert!(shown.contains("authorization") && !shown.contains("secret"));
    }

    #[test]
    fn header_lists_are_url_decoded() {
        assert_eq!(
            percent_decoded("authorization=Bearer%20a%3Db"),
            "authorization=Bearer a=b"
        );
        assert_eq!(percent_decoded("x=100%"), "x=100%");
    }

    #[test]
    fn a_ca_file_is_for_https_and_must_be_read() {
        let http = Endpoint::parse("http://h:1").unwrap();
        let ca = Path::new("/nonexistent/ca.pem");
        assert!(Destination::new(http, Protocol::HttpProtobuf, vec![], Some(ca)).is_err());
        let https = Endpoint::parse("https://h:1").unwrap();
        let err = Destination::new(https, Protocol::Grpc, vec![], Some(ca)).unwrap_err();
        assert!(err.contains("ca.pem"), "{err}");
    }

    fn refused() -> Endpoint {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        Endpoint::parse(&format!("http://127.0.0.1:{port}")).unwrap()
    }

    #[test]
    fn a_refused_endpoint_is_an_error_that_names_it_either_way() {
        for protocol in [Protocol::HttpProtobuf, Protocol::Grpc] {
            let e = refused();
            let port = e.port;
            let d = Destination::new(e, protocol, vec![], None).unwrap();
            let err = Exporter::new(d).send(Signal::Traces, b"").unwrap_err();
            assert!(err.retryable, "{err:?}");
            assert!(err.why.contains(&port.to_string()), "{err:?}");
        }
    }
}
