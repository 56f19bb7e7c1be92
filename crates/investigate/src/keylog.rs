//! Reading a TLS key log (SSLKEYLOGFILE, NSS format), as Wireshark's
//! `tls.keylog_file` does.

use std::path::Path;
use whyslow_proto::tls::KeyLog;

/// Reads a key log. Lines it cannot use are counted in the second value,
/// not fatal; a file with no secret at all is an error.
pub fn read_keylog(path: &Path) -> Result<(KeyLog, usize), String> {
    let text =
        std::fs::read_to_string(path).map_err(|e| format!("--keylog {}: {e}", path.display()))?;
    let (log, bad) = KeyLog::parse(&text);
    if log.is_empty() {
        return Err(format!("--keylog {}: no TLS secrets in it", path.display()));
    }
    Ok((log, bad))
}
