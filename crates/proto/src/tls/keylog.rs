//! The NSS key log format (`SSLKEYLOGFILE`), as curl, browsers, Python's
//! `ssl`, Go's `KeyLogWriter` and rustls write it: one secret per line,
//! `LABEL <client random, hex> <secret, hex>`. Lines this reader does not
//! use (early traffic, exporter secrets, comments) are skipped.

use std::collections::HashMap;

/// One session's secrets, by the client random of its ClientHello.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct SessionSecrets {
    /// TLS 1.2 and earlier: the 48-byte master secret.
    pub master: Option<Vec<u8>>,
    /// TLS 1.3 traffic secrets.
    pub client_handshake: Option<Vec<u8>>,
    pub server_handshake: Option<Vec<u8>>,
    pub client_traffic: Option<Vec<u8>>,
    pub server_traffic: Option<Vec<u8>>,
}

/// Every session of one or more key log files.
#[derive(Clone, Default)]
pub struct KeyLog {
    sessions: HashMap<[u8; 32], SessionSecrets>,
}

/// Secrets never reach a debug print, a log or a report.
impl std::fmt::Debug for KeyLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "KeyLog({} sessions)", self.sessions.len())
    }
}

/// A secret longer than this is not a TLS secret (SHA-384 gives 48 bytes).
const MAX_SECRET: usize = 64;

fn hex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) || s.len() > 2 * MAX_SECRET {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

impl KeyLog {
    /// Reads a key log's text; lines that are not key log lines are counted
    /// in the second value, never fatal (files are appended to by many processes).
    pub fn parse(text: &str) -> (KeyLog, usize) {
        let mut log = KeyLog::default();
        let bad = log.add_text(text);
        (log, bad)
    }

    /// Adds another key log's text (a second file, the secrets of this
    /// process's own connections); returns the lines it could not use.
    pub fn add_text(&mut self, text: &str) -> usize {
        let mut bad = 0;
        for line in text.lines().map(str::trim) {
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            if !self.add_line(line) {
                bad += 1;
            }
        }
        bad
    }

    /// Adds one line; false when it is not a key log line.
    fn add_line(&mut self, line: &str) -> bool {
        let mut parts = line.split_ascii_whitespace();
        let (Some(label), Some(random), Some(secret), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return false;
        };
        let (Some(random), Some(secret)) = (hex(random), hex(secret)) else {
            return false;
        };
        let Ok(random) = <[u8; 32]>::try_from(random.as_slice()) else {
            return false;
        };
        if secret.is_empty() || secret.len() > MAX_SECRET {
            return false;
        }
        let s = self.sessions.entry(random).or_default();
        let slot = match label {
            "CLIENT_RANDOM" => &mut s.master,
            "CLIENT_HANDSHAKE_TRAFFIC_SECRET" => &mut s.client_handshake,
            "SERVER_HANDSHAKE_TRAFFIC_SECRET" => &mut s.server_handshake,
            "CLIENT_TRAFFIC_SECRET_0" => &mut s.client_traffic,
            "SERVER_TRAFFIC_SECRET_0" => &mut s.server_traffic,
            // Known labels this reader has no use for.
            "CLIENT_EARLY_TRAFFIC_SECRET" | "EXPORTER_SECRET" | "EARLY_EXPORTER_SECRET" => {
                return true
            }
            _ => return false,
        };
        *slot = Some(secret);
        true
    }

    /// Adds every session of another key log (its secrets win).
    pub fn extend(&mut self, other: KeyLog) {
        self.sessions.extend(other.sessions);
    }

    pub fn session(&self, client_random: &[u8; 32]) -> Option<&SessionSecrets> {
        self.sessions.get(client_random)
    }

    pub fn is_empty(&self) -> bool {
        self.sessions.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_tls12_and_tls13_lines_and_counts_the_rest() {
        let r = "ab".repeat(32);
        let text = format!(
            "# comment\nCLIENT_RANDOM {r} {m}\nCLIENT_TRAFFIC_SECRET_0 {r} {t}\n\
             SERVER_TRAFFIC_SECRET_0 {r} {t}\nEXPORTER_SECRET {r} {t}\n\
             garbage\nCLIENT_RANDOM zz {m}\nCLIENT_RANDOM {r} {huge}\n",
            m = "01".repeat(48),
            t = "02".repeat(32),
            huge = "03".repeat(4096)
        );
        let (log, bad) = KeyLog::parse(&text);
        assert_eq!(bad, 3);
        let s = log.session(&[0xab; 32]).unwrap();
        assert_eq!(s.master.as_deref(), Some(&[1u8; 48][..]));
        assert_eq!(s.client_traffic.as_deref(), Some(&[2u8; 32][..]));
        assert!(s.client_handshake.is_none());
        assert!(log.session(&[0; 32]).is_none());
    }
}
