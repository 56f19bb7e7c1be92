use crate::error::{ErrorKind, ProbeError};

/// Where a request goes, parsed from a URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub https: bool,
    /// Host as written in the URL, without IPv6 brackets.
    pub host: String,
    pub port: u16,
    /// Path and query, never empty ("/" at least).
    pub path_and_query: String,
}

impl Target {
    pub fn parse(url: &str) -> Result<Target, ProbeError> {
        let bad = |why: &str| ProbeError::new("url", ErrorKind::BadUrl, format!("{url:?}: {why}"));
        let uri: http::Uri = url.parse().map_err(|e| bad(&format!("{e}")))?;
        let https = match uri.scheme_str() {
            Some("http") => false,
            Some("https") => true,
            Some(other) => return Err(bad(&format!("unsupported scheme {other:?}"))),
            None => return Err(bad("missing scheme (http:// or https://)")),
        };
        let host = uri.host().ok_or_else(|| bad("missing host"))?;
        let host = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string();
        if host.is_empty() {
            return Err(bad("missing host"));
        }
        // http::Uri drops a port that is not a u16 instead of failing: check the text.
        let authority = uri.authority().map(|a| a.as_str()).unwrap_or("");
        let port = match explicit_port(authority) {
            Some(p) => p
                .parse::<u16>()
                .map_err(|_| bad(&format!("bad port {p:?}")))?,
            None if https => 443,
            None => 80,
        };
        if port == 0 {
            return Err(bad("port 0"));
        }
        let path_and_query = uri
            .path_and_query()
            .map(|p| p.as_str().to_string())
            .filter(|p| !p.is_empty())
            .unwrap_or_else(|| "/".to_string());
        Ok(Target {
            https,
            host,
            port,
            path_and_query,
        })
    }

    /// Value of the Host header: host[:port], port omitted when it is the default.
    pub fn authority(&self) -> String {
        let host = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        let default = if self.https { 443 } else { 80 };
        if self.port == default {
            host
        } else {
            format!("{host}:{}", self.port)
        }
    }
}

/// The port written in an authority ("user@host:port", "[::1]:port"), if any.
fn explicit_port(authority: &str) -> Option<&str> {
    let host_port = authority.rsplit('@').next()?;
    let after_host = match host_port.rfind(']') {
        Some(i) => &host_port[i + 1..],
        None => host_port,
    };
    after_host.rsplit_once(':').map(|(_, p)| p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_usual_forms() {
        let t = Target::parse("http://127.0.0.1:8080/a?b=1").unwrap();
        assert_eq!((t.https, t.port), (false, 8080));
        assert_eq!(t.path_and_query, "/a?b=1");
        assert_eq!(t.authority(), "127.0.0.1:8080");
        let t = Target::parse("https://[::1]/").unwrap();
        assert_eq!((t.host.as_str(), t.port), ("::1", 443));
        assert_eq!(t.authority(), "[::1]");
        assert_eq!(
            Target::parse("https://example.com").unwrap().path_and_query,
            "/"
        );
    }

    #[test]
    fn rejects_what_is_not_a_url() {
        for bad in [
            "",
            "example.com/x",
            "ftp://h/",
            "http://",
            "http://h:0/",
            "http://h:99999/",
        ] {
            let e = Target::parse(bad).unwrap_err();
            assert_eq!(e.kind, ErrorKind::BadUrl, "{bad}");
        }
    }
}
