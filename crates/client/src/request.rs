use bytes::Bytes;
use std::time::Duration;

/// How the client writes a request with a body onto the socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WritePattern {
    /// Headers and body in one write (curl, Python requests).
    Coalesced,
    /// Headers, then body, in two writes (Ruby's Net::HTTP in case 000).
    Split,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HttpVersion {
    /// HTTP/1.1 for http://; ALPN offering h2 and http/1.1 for https://.
    Auto,
    Http1,
    /// h2 over TLS by ALPN, or h2c with prior knowledge over plain TCP.
    Http2,
}

/// One request as the user described it (curl's -X, -d, -H).
#[derive(Debug, Clone)]
pub struct RequestSpec {
    pub method: String,
    pub headers: Vec<(String, String)>,
    pub body: Bytes,
    pub version: HttpVersion,
    pub write: WritePattern,
    /// TCP_NODELAY on the client socket (curl sets it by default).
    pub nodelay: bool,
    /// Limit for each phase (connect, tls, each read and write).
    pub timeout: Duration,
    /// A fresh `traceparent` per request, unless `headers` has one.
    pub trace: crate::TraceContext,
}

/// curl's `-d` values: `@FILE` reads a file; several are joined with '&'.
pub fn curl_body(data: &[String]) -> Result<Bytes, String> {
    let mut parts = Vec::new();
    for d in data {
        match d.strip_prefix('@') {
            Some(path) => parts.push(std::fs::read(path).map_err(|e| format!("-d @{path}: {e}"))?),
            None => parts.push(d.clone().into_bytes()),
        }
    }
    Ok(Bytes::from(parts.join(&b'&')))
}

/// curl's `-H 'Name: value'` headers.
pub fn curl_headers(given: &[String]) -> Result<Vec<(String, String)>, String> {
    given
        .iter()
        .map(|h| {
            let (n, v) = h
                .split_once(':')
                .ok_or_else(|| format!("-H {h:?}: expected 'Name: value'"))?;
            if n.trim().is_empty() || n.contains(char::is_whitespace) {
                return Err(format!("-H {h:?}: bad header name"));
            }
            Ok((n.trim().to_string(), v.trim().to_string()))
        })
        .collect()
}

impl Default for RequestSpec {
    fn default() -> Self {
        RequestSpec {
            method: "GET".into(),
            headers: Vec::new(),
            body: Bytes::new(),
            version: HttpVersion::Auto,
            write: WritePattern::Coalesced,
            nodelay: true,
            timeout: Duration::from_secs(10),
            trace: crate::TraceContext::Sampled,
        }
    }
}

impl RequestSpec {
    pub fn has_header(&self, name: &str) -> bool {
        self.headers
            .iter()
            .any(|(n, _)| n.eq_ignore_ascii_case(name))
    }

    /// Whether each request gets a fresh `traceparent`: on, and none given.
    pub fn fresh_trace(&self) -> Option<crate::TraceContext> {
        (self.trace != crate::TraceContext::Off && !self.has_header("traceparent"))
            .then_some(self.trace)
    }
}
