//! An instrumented HTTP client: every request is timed phase by phase
//! (dns, connect, tls, send, wait, receive) the way curl `-w` does, and the
//! way bytes leave the socket is under control (TCP_NODELAY, split or
//! coalesced writes) so client write patterns can be reproduced exactly.

mod connect;
pub mod dns_walk;
mod error;
pub mod h1;
mod h2conn;
mod keylog;
mod probe;
pub mod request;
mod target;
mod tls;
pub mod trace;

pub use connect::{connect, Connected, Io};
pub use error::{ErrorKind, ProbeError};
pub use h2conn::H2Conn;
pub use keylog::{KeyLogWriter, SSLKEYLOGFILE};
pub use probe::{probe, probe_until, ProbeOptions, ProbeRun};
pub use request::{HttpVersion, RequestSpec, WritePattern};
pub use target::{redact_url, Target};
pub use tls::{TlsOptions, TlsSetup};
pub use trace::TraceContext;
