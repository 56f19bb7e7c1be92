//! Record protection: the cipher suites whyslow decrypts, their keys from a
//! key log's secrets (TLS 1.3's HKDF-Expand-Label, TLS 1.2's PRF), and AEAD
//! opening of one record. ring (already under rustls) does the cryptography.

use ring::{aead, hkdf, hmac};

/// AEAD tag length of every suite here.
pub const TAG: usize = 16;
/// TLS 1.2 AES-GCM records start with an 8-byte explicit nonce.
const EXPLICIT_NONCE: usize = 8;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cipher {
    Aes128Gcm,
    Aes256Gcm,
    Chacha20Poly1305,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hash {
    Sha256,
    Sha384,
}

/// A cipher suite whyslow can decrypt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Suite {
    pub id: u16,
    pub name: &'static str,
    pub cipher: Cipher,
    pub hash: Hash,
    pub tls13: bool,
}

const SUITES: &[Suite] = &[
    suite(
        0x1301,
        "TLS_AES_128_GCM_SHA256",
        Cipher::Aes128Gcm,
        Hash::Sha256,
        true,
    ),
    suite(
        0x1302,
        "TLS_AES_256_GCM_SHA384",
        Cipher::Aes256Gcm,
        Hash::Sha384,
        true,
    ),
    suite(
        0x1303,
        "TLS_CHACHA20_POLY1305_SHA256",
        Cipher::Chacha20Poly1305,
        Hash::Sha256,
        true,
    ),
    suite(
        0xc02b,
        "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
        Cipher::Aes128Gcm,
        Hash::Sha256,
        false,
    ),
    suite(
        0xc02f,
        "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
        Cipher::Aes128Gcm,
        Hash::Sha256,
        false,
    ),
    suite(
        0xc02c,
        "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
        Cipher::Aes256Gcm,
        Hash::Sha384,
        false,
    ),
    suite(
        0xc030,
        "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
        Cipher::Aes256Gcm,
        Hash::Sha384,
        false,
    ),
    suite(
        0xcca8,
        "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256",
        Cipher::Chacha20Poly1305,
        Hash::Sha256,
        false,
    ),
    suite(
        0xcca9,
        "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256",
        Cipher::Chacha20Poly1305,
        Hash::Sha256,
        false,
    ),
    suite(
        0x009e,
        "TLS_DHE_RSA_WITH_AES_128_GCM_SHA256",
        Cipher::Aes128Gcm,
        Hash::Sha256,
        false,
    ),
    suite(
        0x009f,
        "TLS_DHE_RSA_WITH_AES_256_GCM_SHA384",
        Cipher::Aes256Gcm,
        Hash::Sha384,
        false,
    ),
];

const fn suite(id: u16, name: &'static str, cipher: Cipher, hash: Hash, tls13: bool) -> Suite {
    Suite {
        id,
        name,
        cipher,
        hash,
        tls13,
    }
}

impl Suite {
    pub fn find(id: u16) -> Option<Suite> {
        SUITES.iter().copied().find(|s| s.id == id)
    }

    fn key_len(self) -> usize {
        match self.cipher {
            Cipher::Aes128Gcm => 16,
            Cipher::Aes256Gcm | Cipher::Chacha20Poly1305 => 32,
        }
    }

    /// TLS 1.2's fixed IV: a 4-byte salt for GCM, the whole 12-byte nonce
    /// mask for ChaCha20 (RFC 7905).
    fn tls12_iv_len(self) -> usize {
        match self.cipher {
            Cipher::Chacha20Poly1305 => 12,
            _ => 4,
        }
    }

    fn algorithm(self) -> &'static aead::Algorithm {
        match self.cipher {
            Cipher::Aes128Gcm => &aead::AES_128_GCM,
            Cipher::Aes256Gcm => &aead::AES_256_GCM,
            Cipher::Chacha20Poly1305 => &aead::CHACHA20_POLY1305,
        }
    }
}

/// Decryption state of one direction in one epoch.
pub struct RecordKeys {
    key: aead::LessSafeKey,
    iv: Vec<u8>,
    tls13: bool,
    /// Records opened in this epoch: the implicit sequence number.
    pub seq: u64,
}

struct Len(usize);

impl hkdf::KeyType for Len {
    fn len(&self) -> usize {
        self.0
    }
}

/// HKDF-Expand-Label (RFC 8446 §7.1) with an empty context.
fn expand_label(hash: Hash, secret: &[u8], label: &str, len: usize) -> Option<Vec<u8>> {
    let alg = match hash {
        Hash::Sha256 => hkdf::HKDF_SHA256,
        Hash::Sha384 => hkdf::HKDF_SHA384,
    };
    let full = format!("tls13 {label}");
    let mut info = Vec::with_capacity(4 + full.len());
    info.extend_from_slice(&(len as u16).to_be_bytes());
    info.push(full.len() as u8);
    info.extend_from_slice(full.as_bytes());
    info.push(0);
    let prk = hkdf::Prk::new_less_safe(alg, secret);
    let info = [info.as_slice()];
    let okm = prk.expand(&info, Len(len)).ok()?;
    let mut out = vec![0; len];
    okm.fill(&mut out).ok()?;
    Some(out)
}

/// TLS 1.2's PRF (RFC 5246 §5): P_hash(secret, label + seed).
fn prf(hash: Hash, secret: &[u8], label: &[u8], seed: &[u8], len: usize) -> Vec<u8> {
    let alg = match hash {
        Hash::Sha256 => hmac::HMAC_SHA256,
        Hash::Sha384 => hmac::HMAC_SHA384,
    };
    let key = hmac::Key::new(alg, secret);
    let mut label_seed = label.to_vec();
    label_seed.extend_from_slice(seed);
    let mut a = hmac::sign(&key, &label_seed).as_ref().to_vec();
    let mut out = Vec::with_capacity(len + 48);
    while out.len() < len {
        let mut ctx = hmac::Context::with_key(&key);
        ctx.update(&a);
        ctx.update(&label_seed);
        out.extend_from_slice(ctx.sign().as_ref());
        a = hmac::sign(&key, &a).as_ref().to_vec();
    }
    out.truncate(len);
    out
}

impl RecordKeys {
    fn new(suite: Suite, key: &[u8], iv: Vec<u8>) -> Option<RecordKeys> {
        let unbound = aead::UnboundKey::new(suite.algorithm(), key).ok()?;
        Some(RecordKeys {
            key: aead::LessSafeKey::new(unbound),
            iv,
            tls13: suite.tls13,
            seq: 0,
        })
    }

    /// TLS 1.3: the keys of one traffic secret.
    pub fn tls13(suite: Suite, secret: &[u8]) -> Option<RecordKeys> {
        let key = expand_label(suite.hash, secret, "key", suite.key_len())?;
        let iv = expand_label(suite.hash, secret, "iv", 12)?;
        RecordKeys::new(suite, &key, iv)
    }

    /// TLS 1.2: (client, server) keys from the master secret and both randoms.
    pub fn tls12(
        suite: Suite,
        master: &[u8],
        client_random: &[u8; 32],
        server_random: &[u8; 32],
    ) -> Option<(RecordKeys, RecordKeys)> {
        let (k, i) = (suite.key_len(), suite.tls12_iv_len());
        let mut seed = server_random.to_vec();
        seed.extend_from_slice(client_random);
        let block = prf(suite.hash, master, b"key expansion", &seed, 2 * k + 2 * i);
        let (ck, rest) = block.split_at(k);
        let (sk, rest) = rest.split_at(k);
        let (civ, siv) = rest.split_at(i);
        Some((
            RecordKeys::new(suite, ck, civ.to_vec())?,
            RecordKeys::new(suite, sk, siv.to_vec())?,
        ))
    }

    /// The per-record nonce: the IV XOR the sequence number, or (TLS 1.2
    /// GCM) the salt and the record's explicit nonce.
    fn nonce(&self, explicit: Option<&[u8]>) -> Option<aead::Nonce> {
        let mut n = [0u8; 12];
        match explicit {
            Some(e) => {
                n[..4].copy_from_slice(self.iv.get(..4)?);
                n[4..].copy_from_slice(e);
            }
            None => {
                n.copy_from_slice(self.iv.get(..12)?);
                for (b, s) in n[4..].iter_mut().zip(self.seq.to_be_bytes()) {
                    *b ^= s;
                }
            }
        }
        Some(aead::Nonce::assume_unique_for_key(n))
    }

    /// Opens one record's payload in place. Returns the plaintext and, for
    /// TLS 1.3, the inner content type; None when authentication fails
    /// (wrong keys, or the wrong epoch). The sequence number advances only
    /// on success.
    pub fn open<'a>(
        &mut self,
        content_type: u8,
        version: [u8; 2],
        payload: &'a mut [u8],
    ) -> Option<(u8, &'a [u8])> {
        let len = payload.len();
        if len < TAG {
            return None;
        }
        let gcm12 = !self.tls13 && self.iv.len() == 4;
        let (nonce, body) = if gcm12 {
            if len < EXPLICIT_NONCE + TAG {
                return None;
            }
            let (explicit, body) = payload.split_at_mut(EXPLICIT_NONCE);
            (self.nonce(Some(explicit))?, body)
        } else {
            (self.nonce(None)?, payload)
        };
        let aad: Vec<u8> = if self.tls13 {
            let mut a = vec![content_type, version[0], version[1]];
            a.extend_from_slice(&(len as u16).to_be_bytes());
            a
        } else {
            let mut a = self.seq.to_be_bytes().to_vec();
            a.extend_from_slice(&[content_type, version[0], version[1]]);
            a.extend_from_slice(&((body.len() - TAG) as u16).to_be_bytes());
            a
        };
        let plain = self
            .key
            .open_in_place(nonce, aead::Aad::from(aad), body)
            .ok()?;
        self.seq += 1;
        if !self.tls13 {
            return Some((content_type, plain));
        }
        // TLSInnerPlaintext: content, then its type, then zero padding.
        let end = plain.iter().rposition(|b| *b != 0)?;
        Some((plain[end], &plain[..end]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unhex(s: &str) -> Vec<u8> {
        let s: String = s.split_whitespace().collect();
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    /// RFC 8448 §3 (simple 1-RTT handshake): the server's handshake traffic
    /// secret gives this key and IV.
    #[test]
    fn hkdf_expand_label_matches_rfc_8448() {
        let secret = unhex(
            "b6 7b 7d 69 0c c1 6c 4e 75 e5 42 13 cb 2d 37 b4 e9 c9 12 bc de d9 10 5d 42 be fd 59
             d3 91 ad 38",
        );
        let key = expand_label(Hash::Sha256, &secret, "key", 16).unwrap();
        let iv = expand_label(Hash::Sha256, &secret, "iv", 12).unwrap();
        assert_eq!(
            key,
            unhex("3f ce 51 60 09 c2 17 27 d0 f2 e4 e8 6e e4 03 bc")
        );
        assert_eq!(iv, unhex("5d 31 3e b2 67 12 76 ee 13 00 0b 30"));
    }

    /// The TLS 1.2 PRF (SHA-256) test vector published with RFC 5246's
    /// errata discussions (IETF TLS list, "P_SHA256 test vectors").
    #[test]
    fn tls12_prf_sha256_vector() {
        let secret = unhex("9b be 43 6b a9 40 f0 17 b1 76 52 84 9a 71 db 35");
        let seed = unhex("a0 ba 9f 93 6c da 31 18 27 a6 f7 96 ff d5 19 8c");
        let out = prf(Hash::Sha256, &secret, b"test label", &seed, 100);
        assert_eq!(
            out[..16],
            unhex("e3 f2 29 ba 72 7b e1 7b 8d 12 26 20 55 7c d4 53")[..]
        );
        assert_eq!(out.len(), 100);
    }

    /// Sealed with ring under the same derivation, opened here; a flipped
    /// bit or another sequence number fails authentication.
    #[test]
    fn records_open_only_with_their_key_and_sequence() {
        for suite in SUITES {
            let secret = [7u8; 48];
            let (mut open, seal) = if suite.tls13 {
                (
                    RecordKeys::tls13(*suite, &secret[..32]).unwrap(),
                    RecordKeys::tls13(*suite, &secret[..32]).unwrap(),
                )
            } else {
                let (c, _) = RecordKeys::tls12(*suite, &secret, &[1; 32], &[2; 32]).unwrap();
                let (c2, _) = RecordKeys::tls12(*suite, &secret, &[1; 32], &[2; 32]).unwrap();
                (c, c2)
            };
            let record = seal_record(&seal, suite.tls13, b"GET / HTTP/1.1\r\n\r\n");
            let mut bad = record.clone();
            *bad.last_mut().unwrap() ^= 1;
            assert!(open.open(23, [3, 3], &mut bad).is_none(), "{}", suite.name);
            let mut good = record.clone();
            let (ty, plain) = open.open(23, [3, 3], &mut good).unwrap();
            assert_eq!(
                (ty, plain),
                (23, &b"GET / HTTP/1.1\r\n\r\n"[..]),
                "{}",
                suite.name
            );
            // The same record again is sequence 1 now: it fails.
            let mut again = record;
            assert!(
                open.open(23, [3, 3], &mut again).is_none(),
                "{}",
                suite.name
            );
        }
    }

    /// Seals `plain` as record 0 of `keys` (test helper: the inverse of open).
    fn seal_record(keys: &RecordKeys, tls13: bool, plain: &[u8]) -> Vec<u8> {
        let mut body = plain.to_vec();
        let gcm12 = !tls13 && keys.iv.len() == 4;
        if tls13 {
            body.push(23);
        }
        let len = body.len() + TAG + if gcm12 { EXPLICIT_NONCE } else { 0 };
        let explicit = [9u8; 8];
        let nonce = keys.nonce(gcm12.then_some(&explicit[..])).unwrap();
        let aad = if tls13 {
            let mut a = vec![23, 3, 3];
            a.extend_from_slice(&(len as u16).to_be_bytes());
            a
        } else {
            let mut a = 0u64.to_be_bytes().to_vec();
            a.extend_from_slice(&[23, 3, 3]);
            a.extend_from_slice(&(plain.len() as u16).to_be_bytes());
            a
        };
        keys.key
            .seal_in_place_append_tag(nonce, aead::Aad::from(aad), &mut body)
            .unwrap();
        if gcm12 {
            let mut out = explicit.to_vec();
            out.extend_from_slice(&body);
            out
        } else {
            body
        }
    }
}
