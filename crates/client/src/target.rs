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
    /// `user:password` from the URL, sent as HTTP Basic authorization (as curl does).
    pub userinfo: Option<String>,
}

impl Target {
    pub fn parse(url: &str) -> Result<Target, ProbeError> {
        let shown = redact_url(url);
        let bad =
            |why: &str| ProbeError::new("url", ErrorKind::BadUrl, format!("{shown:?}: {why}"));
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
        let userinfo = authority.rsplit_once('@').map(|(u, _)| u.to_string());
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
            userinfo,
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

/// A URL as reports may show it: no `user:password@`, and the query replaced
/// by `?…` (tokens and personal data travel there). Works on any text, so a
/// URL that does not parse is redacted too.
pub fn redact_url(url: &str) -> String {
    let (head, query) = match url.find(['?', '#']) {
        Some(i) => (
            &url[..i],
            if url[i..].starts_with('?') {
                "?…"
            } else {
                ""
            },
        ),
        None => (url, ""),
    };
    let (scheme, rest) = match head.find("://") {
        Some(i) => head.split_at(i + 3),
        None => ("", head),
    };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let rest = match rest[..authority_end].rfind('@') {
        Some(at) => &rest[at + 1..],
        None => rest,
    };
    format!("{scheme}{rest}{query}")
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
    fn reports_never_show_credentials_or_queries() {
        assert_eq!(
            redact_url("https://u:p@h:8443/a?token=1#f"),
            "https://h:8443/a?…"
        );
        assert_eq!(redact_url("http://h/p"), "http://h/p");
        assert_eq!(redact_url("u:p@h/x?y"), "h/x?…");
        let t = Target::parse("http://user:secret@h/").unwrap();
        assert_eq!(t.userinfo.as_deref(), Some("user:secret"));
        let e = Target::parse("ftp://user:secret@h/?k=v").unwrap_err();
        assert!(
            !e.detail.contains("secret") && !e.detail.contains("k=v"),
            "{}",
            e.detail
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
