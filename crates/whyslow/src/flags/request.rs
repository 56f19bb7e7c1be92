//! How to make the request, as curl takes it: `-X -d -H`, HTTP version,
//! client write pattern, TLS trust. Shared by probe, diagnose and load.

use clap::{Args, ValueEnum};
use std::path::PathBuf;
use whyslow_client::request::{curl_body, curl_headers};
use whyslow_client::{HttpVersion, RequestSpec, TlsOptions, TraceContext, WritePattern};
use whyslow_load::plan::parse_duration;

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum OnOff {
    On,
    Off,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum WriteArg {
    Coalesced,
    Split,
}

/// How to make the request: shared by probe, diagnose and load.
#[derive(Args, Clone, Debug)]
pub struct RequestArgs {
    /// Request method (default GET, or POST with -d)
    #[arg(short = 'X', long = "request")]
    pub method: Option<String>,
    /// Request body; @FILE reads a file; repeated -d are joined with '&' (as curl)
    #[arg(short = 'd', long = "data", alias = "data-binary")]
    pub data: Vec<String>,
    /// Extra header, 'Name: value' (repeatable)
    #[arg(short = 'H', long = "header")]
    pub headers: Vec<String>,
    /// Use HTTP/1.1 only
    #[arg(long = "http1.1", conflicts_with = "http2")]
    pub http1: bool,
    /// Use HTTP/2 (ALPN over TLS; prior knowledge h2c over plain TCP)
    #[arg(long)]
    pub http2: bool,
    /// Limit for each phase: 10s, 500ms
    #[arg(long, default_value = "10s")]
    pub timeout: String,
    /// TCP_NODELAY on the client socket (curl: on)
    #[arg(long, value_enum, default_value = "on")]
    pub nodelay: OnOff,
    /// Write headers and body in one write (curl) or two (Ruby Net::HTTP)
    #[arg(long, value_enum, default_value = "coalesced")]
    pub write: WriteArg,
    /// Accept any TLS certificate
    #[arg(short = 'k', long)]
    pub insecure: bool,
    /// Trust the PEM certificates in FILE
    #[arg(long, value_name = "FILE")]
    pub cacert: Option<PathBuf>,
    /// A fresh W3C traceparent per request, so the service's calls name their request: probe and
    /// diagnose send it sampled (the service records the trace, comments its SQL), load unsampled
    /// (no flood of the service's tracing). A traceparent given with -H is sent as given.
    #[arg(long, value_name = "MODE", value_parser = TraceContext::NAMES)]
    pub trace_context: Option<String>,
}

impl RequestArgs {
    /// The request; `trace`: the command's `--trace-context` default.
    pub fn spec(&self, trace: TraceContext) -> Result<RequestSpec, String> {
        let body = curl_body(&self.data)?;
        let headers = curl_headers(&self.headers)?;
        let method = self
            .method
            .clone()
            .unwrap_or_else(|| if body.is_empty() { "GET" } else { "POST" }.into());
        Ok(RequestSpec {
            method,
            headers,
            body,
            version: if self.http1 {
                HttpVersion::Http1
            } else if self.http2 {
                HttpVersion::Http2
            } else {
                HttpVersion::Auto
            },
            write: match self.write {
                WriteArg::Coalesced => WritePattern::Coalesced,
                WriteArg::Split => WritePattern::Split,
            },
            nodelay: matches!(self.nodelay, OnOff::On),
            timeout: parse_duration(&self.timeout)?,
            trace: self
                .trace_context
                .as_deref()
                .map_or(trace, TraceContext::named),
        })
    }

    /// TLS trust, without a key log (`KeyLogOut` adds one).
    pub fn tls(&self) -> TlsOptions {
        TlsOptions {
            insecure: self.insecure,
            ca_file: self.cacert.clone(),
            keylog: None,
        }
    }
}
