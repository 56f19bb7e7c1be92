//! Where OTLP goes, as an SDK's exporter is told (`send::Destination::configured`
//! reads the `OTEL_EXPORTER_OTLP_*` variables for the flags not given).

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
    /// The destination, or None without `--otlp-endpoint`.
    pub fn destination(&self) -> Result<Option<Destination>, String> {
        let Some(endpoint) = self.otlp_endpoint.clone() else {
            return Ok(None);
        };
        let (headers, ca) = (self.otlp_headers.clone(), self.otlp_ca.clone());
        Destination::configured(endpoint, self.otlp_protocol, headers, ca).map(Some)
    }
}
