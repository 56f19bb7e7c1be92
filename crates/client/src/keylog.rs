//! Where the client's TLS secrets go, in the NSS key log format that curl,
//! browsers and Wireshark share (`SSLKEYLOGFILE`): appended to a file, kept
//! in memory for this process's own capture analysis, or both.

use std::fmt::Write as _;
use std::fs::File;
use std::io::{self, Write as _};
use std::path::Path;
use std::sync::Mutex;

/// The variable curl, browsers and Python's `ssl` read for the same purpose.
pub const SSLKEYLOGFILE: &str = "SSLKEYLOGFILE";

#[derive(Default)]
pub struct KeyLogWriter {
    file: Option<Mutex<File>>,
    kept: Option<Mutex<String>>,
}

/// Secrets never reach a debug print.
impl std::fmt::Debug for KeyLogWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyLogWriter")
            .field("file", &self.file.is_some())
            .field("kept", &self.kept.is_some())
            .finish()
    }
}

impl KeyLogWriter {
    /// Appends to `path`, created readable by this user only: whoever reads
    /// it can decrypt the sessions.
    pub fn to_file(path: &Path) -> io::Result<KeyLogWriter> {
        use std::os::unix::fs::OpenOptionsExt;
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(path)?;
        Ok(KeyLogWriter {
            file: Some(Mutex::new(file)),
            kept: None,
        })
    }

    /// The file `SSLKEYLOGFILE` names, if it is set (as curl does).
    pub fn from_env() -> io::Result<Option<KeyLogWriter>> {
        match std::env::var_os(SSLKEYLOGFILE) {
            Some(p) if !p.is_empty() => Self::to_file(Path::new(&p)).map(Some),
            _ => Ok(None),
        }
    }

    /// `--keylog-out FILE` when given, else `SSLKEYLOGFILE`, else none.
    pub fn chosen(flag: Option<&Path>) -> Result<Option<KeyLogWriter>, String> {
        match flag {
            Some(p) => Self::to_file(p)
                .map(Some)
                .map_err(|e| format!("--keylog-out {}: {e}", p.display())),
            None => Self::from_env().map_err(|e| format!("{SSLKEYLOGFILE}: {e}")),
        }
    }

    /// Also keeps every line in memory (see `kept`).
    pub fn keeping(mut self) -> KeyLogWriter {
        self.kept = Some(Mutex::new(String::new()));
        self
    }

    /// The lines kept so far, in key log format.
    pub fn kept(&self) -> String {
        self.kept
            .as_ref()
            .and_then(|k| k.lock().ok().map(|s| s.clone()))
            .unwrap_or_default()
    }
}

fn line(label: &str, client_random: &[u8], secret: &[u8]) -> String {
    let mut out = String::with_capacity(label.len() + 2 * (client_random.len() + secret.len()) + 3);
    out.push_str(label);
    out.push(' ');
    for b in client_random {
        let _ = write!(out, "{b:02x}");
    }
    out.push(' ');
    for b in secret {
        let _ = write!(out, "{b:02x}");
    }
    out.push('\n');
    out
}

impl rustls::KeyLog for KeyLogWriter {
    fn log(&self, label: &str, client_random: &[u8], secret: &[u8]) {
        let line = line(label, client_random, secret);
        if let Some(file) = &self.file {
            if let Ok(mut f) = file.lock() {
                // One write per line so that processes sharing the file do
                // not interleave within a line (O_APPEND).
                let _ = f.write_all(line.as_bytes());
            }
        }
        if let Some(kept) = &self.kept {
            if let Ok(mut k) = kept.lock() {
                k.push_str(&line);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::KeyLog;

    #[test]
    fn writes_nss_lines_to_the_file_and_memory() {
        let dir = std::env::temp_dir().join(format!("whyslow-keylog-{}", std::process::id()));
        let _ = std::fs::remove_file(&dir);
        let w = KeyLogWriter::to_file(&dir).unwrap().keeping();
        w.log("CLIENT_RANDOM", &[0xab; 32], &[0x01, 0xff]);
        let expected = format!("CLIENT_RANDOM {} 01ff\n", "ab".repeat(32));
        assert_eq!(w.kept(), expected);
        assert_eq!(std::fs::read_to_string(&dir).unwrap(), expected);
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&dir).unwrap().permissions().mode();
        assert_eq!(mode & 0o077, 0, "{mode:o}");
        let _ = std::fs::remove_file(&dir);
        assert!(!format!("{w:?}").contains("ab"));
    }
}
