//! TLS key logs, one meaning per flag: `--keylog FILE` reads a key log (as
//! Wireshark's `tls.keylog_file`) to see inside TLS; `--keylog-out FILE`
//! writes the secrets of whyslow's own connections (as curl's SSLKEYLOGFILE).

use clap::Args;
use std::path::PathBuf;
use std::sync::Arc;
use whyslow_client::KeyLogWriter;
use whyslow_proto::tls::KeyLog;

/// `--keylog FILE`: a key log to read (analyze, diagnose).
#[derive(Args, Clone, Debug, Default)]
pub struct KeyLogIn {
    /// Read TLS secrets from FILE (SSLKEYLOGFILE/NSS format, as Wireshark's
    /// tls.keylog_file) to see inside TLS connections: TLS 1.2 and 1.3,
    /// AES-GCM and ChaCha20-Poly1305
    #[arg(long, value_name = "FILE")]
    pub keylog: Option<PathBuf>,
}

impl KeyLogIn {
    /// The key log, read now (a capture file's keys exist already); lines
    /// it cannot use are said once, not fatal.
    pub fn read(&self) -> Result<Option<Arc<KeyLog>>, String> {
        let Some(path) = self.keylog.as_deref() else {
            return Ok(None);
        };
        let (log, bad) = whyslow_investigate::keylog::read_keylog(path)?;
        if bad > 0 {
            let path = path.display();
            eprintln!("whyslow: --keylog {path}: {bad} line(s) are not key log lines");
        }
        Ok(Some(Arc::new(log)))
    }
}

/// `--keylog-out FILE`: where whyslow's own TLS secrets go (probe, load).
#[derive(Args, Clone, Debug, Default)]
pub struct KeyLogOut {
    /// Append the TLS secrets of whyslow's own connections to FILE, NSS key
    /// log format (default: $SSLKEYLOGFILE, as curl)
    #[arg(long = "keylog-out", value_name = "FILE")]
    pub keylog_out: Option<PathBuf>,
}

impl KeyLogOut {
    /// The writer: `--keylog-out FILE`, else `SSLKEYLOGFILE`, else none.
    pub fn writer(&self) -> Result<Option<Arc<KeyLogWriter>>, String> {
        Ok(KeyLogWriter::chosen(self.keylog_out.as_deref())?.map(Arc::new))
    }
}
