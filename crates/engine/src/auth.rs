//! Pre-shared keys and the HMAC handshake that opens a session.
//!
//! The client speaks first and proves it knows the key; an unauthenticated peer gets nothing
//! back, not even a challenge. The server then proves it knows the key too. Client hellos carry
//! a timestamp and a nonce; the server refuses hellos outside ±[`HELLO_WINDOW_MS`] and nonces it
//! has seen within the window, so a captured hello cannot be replayed.

use hmac::{Hmac, Mac};
use mgrp_wire::control::{MAC_LEN, NONCE_LEN};
use sha2::Sha256;
use std::collections::VecDeque;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

/// Accepted clock difference between a client hello and the server, and how long nonces are kept.
pub const HELLO_WINDOW_MS: u64 = 60_000;
/// At most this many remembered nonces (every buffer has a bound); when full, new hellos are
/// refused until old ones age out.
pub const MAX_NONCES: usize = 65_536;
/// Environment variable that may hold the key (hex), instead of a key file.
pub const KEY_ENV: &str = "MGRP_KEY";

/// Why a key could not be had.
#[derive(Debug, Clone, thiserror::Error)]
pub enum KeyError {
    #[error("key must be hex digits (e.g. from `openssl rand -hex 32`)")]
    NotHex,
    #[error("key is {0} bytes; use at least 16 (32 hex digits)")]
    TooShort(usize),
    #[error("cannot read key file {path}: {cause}")]
    Read {
        path: String,
        cause: std::sync::Arc<std::io::Error>,
    },
    #[error(
        "key file {path} can be read by other users (mode {mode:04o}); run `chmod 600 {path}`"
    )]
    Exposed { path: String, mode: u32 },
    #[error("{path}: {cause}")]
    InFile { path: String, cause: Box<KeyError> },
    #[error("{KEY_ENV}: {0}")]
    InEnv(Box<KeyError>),
    #[error(
        "no key: pass --key-file FILE or set {KEY_ENV} (hex); keys never go on the command line"
    )]
    Missing,
}

/// Refuse a key file whose mode lets users other than its owner and group at it.
fn check_private(path: &Path, mode: u32) -> Result<(), KeyError> {
    if mode & 0o007 != 0 {
        return Err(KeyError::Exposed {
            path: path.display().to_string(),
            mode: mode & 0o7777,
        });
    }
    Ok(())
}

/// A pre-shared key: at least 16 bytes.
#[derive(Clone)]
pub struct Key(Vec<u8>);

/// What a rider's tag covers.
pub struct RiderTagInput<'a> {
    pub session: u32,
    pub seq: u32,
    pub train: u32,
    pub index: u16,
    pub frag_id: u32,
    pub offset: u16,
    pub proto: u8,
    pub last: bool,
    pub data: &'a [u8],
}

impl RiderTagInput<'_> {
    fn fixed(&self) -> Vec<u8> {
        let mut fixed = Vec::with_capacity(32);
        fixed.extend_from_slice(b"mgrp1 rider");
        fixed.extend_from_slice(&self.session.to_be_bytes());
        fixed.extend_from_slice(&self.seq.to_be_bytes());
        fixed.extend_from_slice(&self.train.to_be_bytes());
        fixed.extend_from_slice(&self.index.to_be_bytes());
        fixed.extend_from_slice(&self.frag_id.to_be_bytes());
        fixed.extend_from_slice(&self.offset.to_be_bytes());
        fixed.push(self.proto);
        fixed.push(self.last as u8);
        fixed
    }
}

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Key(..)")
    }
}

impl Key {
    /// A fresh random 32-byte key, for agents a process starts for itself (benchmarks, demos).
    pub fn random() -> Key {
        let mut k = vec![0u8; 32];
        rand::Rng::fill(&mut rand::rng(), &mut k[..]);
        Key(k)
    }

    /// From hex text (whitespace ignored), at least 32 hex digits.
    pub fn from_hex(text: &str) -> Result<Key, KeyError> {
        let t: String = text.chars().filter(|c| !c.is_whitespace()).collect();
        if t.len() % 2 != 0 || !t.chars().all(|c| c.is_ascii_hexdigit()) {
            return Err(KeyError::NotHex);
        }
        let bytes: Vec<u8> = (0..t.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&t[i..i + 2], 16).expect("hex"))
            .collect();
        if bytes.len() < 16 {
            return Err(KeyError::TooShort(bytes.len()));
        }
        Ok(Key(bytes))
    }

    /// From a file holding the hex key. The file must not be accessible to others (mode
    /// `o-rwx`, e.g. 0600 or 0640): a key anyone on the host can read is refused.
    pub fn from_file(path: &Path) -> Result<Key, KeyError> {
        let shown = path.display().to_string();
        let read_err = |e| KeyError::Read {
            path: shown.clone(),
            cause: std::sync::Arc::new(e),
        };
        let meta = std::fs::metadata(path).map_err(read_err)?;
        check_private(path, meta.permissions().mode())?;
        let text = std::fs::read_to_string(path).map_err(read_err)?;
        Key::from_hex(&text).map_err(|e| KeyError::InFile {
            path: shown,
            cause: Box::new(e),
        })
    }

    /// From `--key-file` if given, else from the MGRP_KEY environment variable.
    pub fn load(file: Option<&Path>) -> Result<Key, KeyError> {
        match file {
            Some(p) => Key::from_file(p),
            None => match std::env::var(KEY_ENV) {
                Ok(v) => Key::from_hex(&v).map_err(|e| KeyError::InEnv(Box::new(e))),
                Err(_) => Err(KeyError::Missing),
            },
        }
    }

    fn mac(&self, parts: &[&[u8]]) -> [u8; MAC_LEN] {
        let mut m = Hmac::<Sha256>::new_from_slice(&self.0).expect("HMAC takes any key length");
        for p in parts {
            m.update(p);
        }
        m.finalize().into_bytes().into()
    }

    fn verify(&self, parts: &[&[u8]], tag: &[u8; MAC_LEN]) -> bool {
        let mut m = Hmac::<Sha256>::new_from_slice(&self.0).expect("HMAC takes any key length");
        for p in parts {
            m.update(p);
        }
        m.verify_slice(tag).is_ok()
    }

    /// The tag a rider carries: over the probe's session, sequence, train and index and the
    /// rider's descriptor and bytes (not the send timestamp, stamped after), truncated to
    /// `TAG_LEN`. The receiver injects nothing whose tag does not verify.
    pub fn rider_tag(&self, h: &RiderTagInput<'_>) -> [u8; mgrp_wire::probe::TAG_LEN] {
        let full = self.mac(&[&h.fixed(), h.data]);
        let mut t = [0u8; mgrp_wire::probe::TAG_LEN];
        t.copy_from_slice(&full[..mgrp_wire::probe::TAG_LEN]);
        t
    }

    /// Check a rider's tag in constant time.
    pub fn verify_rider_tag(
        &self,
        h: &RiderTagInput<'_>,
        tag: &[u8; mgrp_wire::probe::TAG_LEN],
    ) -> bool {
        let want = self.rider_tag(h);
        want.iter().zip(tag).fold(0u8, |a, (x, y)| a | (x ^ y)) == 0
    }

    pub fn client_mac(&self, nonce: &[u8; NONCE_LEN], unix_ms: u64) -> [u8; MAC_LEN] {
        self.mac(&[b"mgrp1 client", nonce, &unix_ms.to_be_bytes()])
    }
    pub fn verify_client(
        &self,
        nonce: &[u8; NONCE_LEN],
        unix_ms: u64,
        tag: &[u8; MAC_LEN],
    ) -> bool {
        self.verify(&[b"mgrp1 client", nonce, &unix_ms.to_be_bytes()], tag)
    }
    pub fn server_mac(
        &self,
        client_nonce: &[u8; NONCE_LEN],
        nonce: &[u8; NONCE_LEN],
        session: u32,
    ) -> [u8; MAC_LEN] {
        self.mac(&[b"mgrp1 server", client_nonce, nonce, &session.to_be_bytes()])
    }
    pub fn verify_server(
        &self,
        client_nonce: &[u8; NONCE_LEN],
        nonce: &[u8; NONCE_LEN],
        session: u32,
        tag: &[u8; MAC_LEN],
    ) -> bool {
        self.verify(
            &[b"mgrp1 server", client_nonce, nonce, &session.to_be_bytes()],
            tag,
        )
    }
}

/// Why a client hello was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HelloRefusal {
    BadMac,
    Stale,
    Replayed,
    Full,
}

/// Nonces seen recently, to refuse replayed hellos. Sans-IO: time comes in as `now_ms`.
#[derive(Default)]
pub struct ReplayGuard {
    seen: VecDeque<(u64, [u8; NONCE_LEN])>,
}

impl ReplayGuard {
    /// Check a client hello; on success its nonce is remembered.
    pub fn check(
        &mut self,
        key: &Key,
        nonce: &[u8; NONCE_LEN],
        unix_ms: u64,
        mac: &[u8; MAC_LEN],
        now_ms: u64,
    ) -> Result<(), HelloRefusal> {
        if !key.verify_client(nonce, unix_ms, mac) {
            return Err(HelloRefusal::BadMac);
        }
        if unix_ms.abs_diff(now_ms) > HELLO_WINDOW_MS {
            return Err(HelloRefusal::Stale);
        }
        while self
            .seen
            .front()
            .is_some_and(|(t, _)| t + 2 * HELLO_WINDOW_MS < now_ms)
        {
            self.seen.pop_front();
        }
        if self.seen.iter().any(|(_, n)| n == nonce) {
            return Err(HelloRefusal::Replayed);
        }
        if self.seen.len() >= MAX_NONCES {
            return Err(HelloRefusal::Full);
        }
        self.seen.push_back((now_ms, *nonce));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> Key {
        Key::from_hex("00112233445566778899aabbccddeeff").unwrap()
    }

    #[test]
    fn key_files_readable_by_others_are_refused() {
        let dir = std::env::temp_dir().join(format!("mgrp-key-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("key");
        std::fs::write(&p, "00112233445566778899aabbccddeeff\n").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = Key::from_file(&p).unwrap_err();
        assert!(matches!(e, KeyError::Exposed { mode: 0o644, .. }), "{e:?}");
        assert!(e.to_string().contains("chmod 600"), "{e}");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert!(Key::from_file(&p).is_ok());
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o640)).unwrap();
        assert!(
            Key::from_file(&p).is_ok(),
            "group-readable is the operator's choice"
        );
        std::fs::write(&p, "zz").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert!(matches!(Key::from_file(&p), Err(KeyError::InFile { .. })));
        assert!(matches!(
            Key::from_file(&dir.join("missing")),
            Err(KeyError::Read { .. })
        ));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn keys() {
        assert!(Key::from_hex("0011").is_err());
        assert!(Key::from_hex("zz112233445566778899aabbccddeeff").is_err());
        assert!(Key::from_hex("00112233 44556677 8899aabb ccddeeff\n").is_ok());
        assert_eq!(format!("{:?}", key()), "Key(..)");
    }

    #[test]
    fn hello_checks() {
        let k = key();
        let other = Key::from_hex("ffffffffffffffffffffffffffffffff").unwrap();
        let mut g = ReplayGuard::default();
        let n = [5u8; 16];
        let now = 1_000_000_000;
        assert_eq!(
            g.check(&k, &n, now, &other.client_mac(&n, now), now),
            Err(HelloRefusal::BadMac)
        );
        assert_eq!(
            g.check(&k, &n, now - 120_000, &k.client_mac(&n, now - 120_000), now),
            Err(HelloRefusal::Stale)
        );
        assert_eq!(g.check(&k, &n, now, &k.client_mac(&n, now), now), Ok(()));
        assert_eq!(
            g.check(&k, &n, now, &k.client_mac(&n, now), now + 10),
            Err(HelloRefusal::Replayed)
        );
        // Long after, the nonce has aged out of memory, but the timestamp is stale by then.
        assert_eq!(
            g.check(&k, &n, now, &k.client_mac(&n, now), now + 300_000),
            Err(HelloRefusal::Stale)
        );
        let s = k.server_mac(&n, &[1; 16], 42);
        assert!(k.verify_server(&n, &[1; 16], 42, &s));
        assert!(!k.verify_server(&n, &[1; 16], 43, &s));
    }
}
