//! Secrets sealed at rest (security review F9): the `env` and `headers` values of a session's
//! MCP servers ([`crate::secrets::Secret`]) are encrypted inside every stored record, so the
//! store file never holds them in plaintext, whoever manages to read it.
//!
//! **Cipher.** XChaCha20-Poly1305 from RustCrypto's `chacha20poly1305` (audited, widely used,
//! pure Rust, constant time without AES hardware). Its 192-bit nonce is what makes a fresh
//! random nonce per value safe for any number of values under one key; AES-GCM's 96-bit nonce
//! would need a counter or a nonce-misuse-resistant mode for the same guarantee.
//!
//! **Key.** 32 random bytes in a key file beside the store (`<store>.key`), per installation.
//! It is created with `O_CREAT | O_EXCL` and mode 0600 the first time the store is opened, and
//! refused if it is longer or shorter than 32 bytes or readable by anyone but its owner. A
//! sealed check value in the store's `meta` table binds the two: a store whose key file is
//! missing, or which was sealed with another key, is refused at open with an error naming the
//! key file, instead of failing on some later read. Stores written before sealing (no check
//! value, plaintext values) open as before and are sealed from their next save on.
//!
//! **Format.** `x1.` then hex of `nonce (24 bytes) || ciphertext || tag (16 bytes)`, inside the
//! `{"sealed": …}` object that [`crate::tools::secret`] writes.

use std::fs::OpenOptions;
use std::io::{self, Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use chacha20poly1305::aead::{Aead, KeyInit};
use chacha20poly1305::{Key, XChaCha20Poly1305, XNonce};

use super::StoreError;
use crate::secrets::SecretSealer;

/// Bytes of a key.
const KEY_LEN: usize = 32;
/// Bytes of an XChaCha20 nonce.
const NONCE_LEN: usize = 24;
/// Prefix of a sealed value: the format's version.
const PREFIX: &str = "x1.";
/// What the store's check value seals.
pub const CHECK_PLAINTEXT: &str = "deputy session store key";

/// The key file of the store at `store`: `<store>.key`, in the same directory.
pub fn key_path(store: &Path) -> PathBuf {
    let mut name = store.as_os_str().to_owned();
    name.push(".key");
    PathBuf::from(name)
}

/// Seals and opens values with one store's key.
pub struct KeySealer {
    cipher: XChaCha20Poly1305,
    /// For error messages.
    path: PathBuf,
}

impl std::fmt::Debug for KeySealer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeySealer").field("key_file", &self.path).finish_non_exhaustive()
    }
}

impl KeySealer {
    fn new(key: [u8; KEY_LEN], path: &Path) -> Self {
        Self { cipher: XChaCha20Poly1305::new(&Key::from(key)), path: path.to_path_buf() }
    }

    /// Reads the key file at `path`; `Ok(None)` if there is none.
    pub fn load(path: &Path) -> Result<Option<Self>, StoreError> {
        let refuse = |why: String| StoreError::Key { path: path.to_path_buf(), message: why };
        if let Some(parent) = path.parent().filter(|parent| !parent.as_os_str().is_empty()) {
            // Private, as the store's own directory (security review F9).
            std::os::unix::fs::DirBuilderExt::mode(std::fs::DirBuilder::new().recursive(true), 0o700)
                .create(parent)
                .map_err(|err| refuse(format!("cannot create its directory: {err}")))?;
        }
        let mut file = match OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW).open(path) {
            Ok(file) => file,
            Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(err) => return Err(refuse(format!("cannot open it: {err}"))),
        };
        let metadata = file.metadata().map_err(|err| refuse(format!("cannot read its mode: {err}")))?;
        if !metadata.is_file() {
            return Err(refuse("it is not a regular file".into()));
        }
        let mode = metadata.mode() & 0o777;
        if mode & 0o077 != 0 {
            return Err(refuse(format!(
                "its mode is {mode:o}, so other users may read it; it must be 600 (chmod 600 it, and consider the \
                 sealed secrets exposed)"
            )));
        }
        let mut bytes = Vec::with_capacity(KEY_LEN + 1);
        Read::by_ref(&mut file)
            .take(KEY_LEN as u64 + 1)
            .read_to_end(&mut bytes)
            .map_err(|err| refuse(format!("cannot read it: {err}")))?;
        let key: [u8; KEY_LEN] = bytes
            .try_into()
            .map_err(|bytes: Vec<u8>| refuse(format!("it holds {} bytes, a key is {KEY_LEN}", bytes.len())))?;
        Ok(Some(Self::new(key, path)))
    }

    /// Creates the key file at `path` (0600, never over an existing file) with a new random
    /// key. If another process created it meanwhile, that key is loaded instead.
    pub fn create(path: &Path) -> Result<Self, StoreError> {
        let refuse = |why: String| StoreError::Key { path: path.to_path_buf(), message: why };
        let mut key = [0u8; KEY_LEN];
        getrandom::fill(&mut key).map_err(|err| refuse(format!("no randomness for a new key: {err}")))?;
        let mut file = match OpenOptions::new().write(true).create_new(true).mode(0o600).open(path) {
            Ok(file) => file,
            Err(err) if err.kind() == io::ErrorKind::AlreadyExists => {
                return Self::load(path)?.ok_or_else(|| refuse("it vanished while being created".into()));
            }
            Err(err) => return Err(refuse(format!("cannot create it: {err}"))),
        };
        file.write_all(&key)
            .and_then(|()| file.sync_all())
            .map_err(|err| refuse(format!("cannot write it: {err}")))?;
        tracing::info!(path = %path.display(), "created the session store's key file");
        Ok(Self::new(key, path))
    }
}

impl SecretSealer for KeySealer {
    fn seal(&self, plaintext: &str) -> Result<String, String> {
        let mut nonce = [0u8; NONCE_LEN];
        getrandom::fill(&mut nonce).map_err(|err| format!("no randomness for a nonce: {err}"))?;
        let ciphertext = self
            .cipher
            .encrypt(&XNonce::from(nonce), plaintext.as_bytes())
            .map_err(|_| "sealing a secret failed".to_owned())?;
        let mut out = String::with_capacity(PREFIX.len() + 2 * (NONCE_LEN + ciphertext.len()));
        out.push_str(PREFIX);
        for byte in nonce.iter().chain(&ciphertext) {
            out.push_str(&format!("{byte:02x}"));
        }
        Ok(out)
    }

    fn open(&self, sealed: &str) -> Result<String, String> {
        let unreadable = || format!("a sealed secret cannot be opened with the key file {}", self.path.display());
        let hex = sealed.strip_prefix(PREFIX).ok_or_else(unreadable)?;
        let bytes = unhex(hex).ok_or_else(unreadable)?;
        if bytes.len() < NONCE_LEN {
            return Err(unreadable());
        }
        let (nonce, ciphertext) = bytes.split_at(NONCE_LEN);
        let nonce: [u8; NONCE_LEN] = nonce.try_into().map_err(|_| unreadable())?;
        let plaintext = self.cipher.decrypt(&XNonce::from(nonce), ciphertext).map_err(|_| unreadable())?;
        String::from_utf8(plaintext).map_err(|_| unreadable())
    }
}

fn unhex(hex: &str) -> Option<Vec<u8>> {
    if !hex.len().is_multiple_of(2) {
        return None;
    }
    (0..hex.len()).step_by(2).map(|at| u8::from_str_radix(hex.get(at..at + 2)?, 16).ok()).collect()
}

/// The sealer of a store from its key file, bound to the store by its sealed check value
/// (`check`, as the store holds it, if it holds one): the key file is created for a store that
/// has no check yet, and the check value it must then keep is returned with it. A store whose
/// key file is missing or is another store's key is refused, naming the key file.
pub fn bind(key_file: &Path, check: Option<&str>) -> Result<(KeySealer, Option<String>), StoreError> {
    let sealer = match (KeySealer::load(key_file)?, check) {
        (Some(sealer), _) => sealer,
        (None, None) => KeySealer::create(key_file)?,
        (None, Some(_)) => {
            return Err(StoreError::Key {
                path: key_file.to_path_buf(),
                message:
                    "it is missing, and this store holds values sealed with it; restore the key file (or move \
                          the store aside to start afresh)"
                        .into(),
            });
        }
    };
    match check {
        Some(check) => {
            if sealer.open(check).ok().as_deref() != Some(CHECK_PLAINTEXT) {
                return Err(StoreError::Key {
                    path: key_file.to_path_buf(),
                    message: "it is not the key this store was sealed with; restore the store's own key file"
                        .into(),
                });
            }
            Ok((sealer, None))
        }
        None => {
            let check = sealer.seal(CHECK_PLAINTEXT).map_err(StoreError::Backend)?;
            Ok((sealer, Some(check)))
        }
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    #[test]
    fn secrets_key_file_is_0600_exclusive_and_checked_and_values_seal_with_fresh_nonces() {
        let dir = tempfile::tempdir().unwrap();
        let path = key_path(&dir.path().join("sessions.redb"));
        assert_eq!(path, dir.path().join("sessions.redb.key"));
        assert!(KeySealer::load(&path).unwrap().is_none());
        let sealer = KeySealer::create(&path).unwrap();
        let metadata = std::fs::metadata(&path).unwrap();
        assert_eq!((metadata.mode() & 0o777, metadata.len()), (0o600, 32));

        let (a, b) = (sealer.seal("s3cr3t").unwrap(), sealer.seal("s3cr3t").unwrap());
        assert_ne!(a, b, "a fresh nonce per value");
        assert!(!a.contains("s3cr3t") && a.starts_with(PREFIX));
        // The same key, loaded again, opens them; a tampered value does not open.
        let loaded = KeySealer::load(&path).unwrap().unwrap();
        assert_eq!(loaded.open(&a).unwrap(), "s3cr3t");
        let mut tampered = b.clone();
        tampered.replace_range(b.len() - 2.., if b.ends_with("00") { "01" } else { "00" });
        assert!(loaded.open(&tampered).unwrap_err().contains("sessions.redb.key"));
        // Creating again never overwrites: it loads the existing key.
        assert_eq!(KeySealer::create(&path).unwrap().open(&b).unwrap(), "s3cr3t");

        // Another key cannot open them.
        let other = KeySealer::create(&dir.path().join("other.key")).unwrap();
        assert!(other.open(&a).is_err());

        // A key others may read, or of the wrong length, is refused with the file's name.
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let loose = KeySealer::load(&path).unwrap_err().to_string();
        assert!(loose.contains("sessions.redb.key") && loose.contains("644"), "{loose}");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::fs::write(&path, [7u8; 16]).unwrap();
        let short = KeySealer::load(&path).unwrap_err().to_string();
        assert!(short.contains("16 bytes"), "{short}");
    }
}
