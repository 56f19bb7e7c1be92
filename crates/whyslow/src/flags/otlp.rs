//! Where OTLP goes, as an SDK's exporter is told: `--otlp-endpoint`,
//! `--otlp-protocol`, `--otlp-header`, `--otlp-ca`, each also read from the
//! `OTEL_EXPORTER_OTLP_*` variable the SDKs read when the flag is absent.

use clap::Args;
use std::path::PathBuf;
use whyslow_investigate::send::{parse_header, Destination, Endpoint, Protocol};

#[derive(Args, Clone, Debug, Default)]
pub struct OtlpExport {
    /// Also send the spans (causes as span events) to URL as OTLP: http:// or https:// (a Collector's receiver; /v1/traces when it names no path)
    #[arg(long, value_name = "URL", value_parser = Endpoint::parse)]
    pub otlp_endpoint: Option<Endpoint>,
    /// grpc or http/protobuf [default: OTEL_EXPORTER_OTLP_PROTOCOL, else http/protobuf]
    #[arg(long, value_name = "PROTOCOL", value_parser = Protocol::parse)]
    pub otlp_protocol: Option<Protocol>,
    /// A header sent with each export, NAME=VALUE, repeatable (an authorization; its value is never printed) [also: OTEL_EXPORTER_OTLP_HEADERS]
    #[arg(long = "otlp-header", value_name = "NAME=VALUE", value_parser = parse_header)]
    pub otlp_headers: Vec<(String, String)>,
    /// Trust the PEM certificates in FILE for an https:// endpoint, not the built-in roots [also: OTEL_EXPORTER_OTLP_CERTIFICATE]
    #[arg(long, value_name = "FILE")]
    pub otlp_ca: Option<PathBuf>,
}

impl OtlpExport {
    /// The destination, or None without `--otlp-endpoint`; an error names
    /// what is wrong (an unreadable CA file, a bad variable).
    pub fn destination(&self) -> Result<Option<Destination>, String> {
        let Some(endpoint) = self.otlp_endpoint.clone() else {
            return Ok(None);
        };
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
        let protocol = match (self.otlp_protocol, var("OTEL_EXPORTER_OTLP_PROTOCOL")) {
            (Some(p), _) => p,
            (None, Some(v)) => Protocol::parse(v.trim())
                .map_err(|e| format!("OTEL_EXPORTER_OTLP_PROTOCOL: {e}"))?,
            (None, None) => Protocol::default(),
        };
        let mut headers = self.otlp_headers.clone();
        if headers.is_empty() {
            if let Some(v) = var("OTEL_EXPORTER_OTLP_HEADERS") {
                for pair in v.split(',').filter(|p| !p.trim().is_empty()) {
                    let h = parse_header(&percent_decoded(pair))
                        .map_err(|e| format!("OTEL_EXPORTER_OTLP_HEADERS: {e}"))?;
                    headers.push(h);
                }
            }
        }
        let ca = self
            .otlp_ca
            .clone()
            .or_else(|| var("OTEL_EXPORTER_OTLP_CERTIFICATE").map(PathBuf::from));
        Destination::new(endpoint, protocol, headers, ca.as_deref()).map(Some)
    }
}

/// The SDKs' header list is URL-encoded (`Bearer%20abc`).
fn percent_decoded(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        match (
            b[i],
            b.get(i + 1).and_then(|&c| hex(c)),
            b.get(i + 2).and_then(|&c| hex(c)),
        ) {
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

#[cfg(test)]
mod tests {
    use super::percent_decoded;

    #[test]
    fn header_lists_are_url_decoded() {
        assert_eq!(
            percent_decoded("authorization=Bearer%20a%3Db"),
            "authorization=Bearer a=b"
        );
        assert_eq!(percent_decoded("x=100%"), "x=100%");
    }
}
