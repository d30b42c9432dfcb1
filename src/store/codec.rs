//! Versioned value encoding: one version byte, then JSON.
//!
//! JSON keeps stored sessions readable with standard tools and lets records gain optional
//! fields without a migration; the version byte leaves room for a different encoding later.

use std::sync::Arc;

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::StoreError;
use crate::secrets::{SecretSealer, with_sealer};

const VERSION: u8 = 1;

pub fn encode<T: Serialize>(value: &T) -> Result<Vec<u8>, StoreError> {
    let mut bytes = vec![VERSION];
    serde_json::to_writer(&mut bytes, value).map_err(|err| StoreError::Backend(format!("encoding: {err}")))?;
    Ok(bytes)
}

pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, StoreError> {
    match bytes.split_first() {
        Some((&VERSION, json)) => serde_json::from_slice(json).map_err(|err| StoreError::Corrupt(err.to_string())),
        Some((version, _)) => Err(StoreError::Corrupt(format!("unknown encoding version {version}"))),
        None => Err(StoreError::Corrupt("empty value".into())),
    }
}

/// [`encode`] with `sealer` sealing every [`crate::secrets::Secret`] inside `value`.
pub fn encode_sealed<T: Serialize>(sealer: &Arc<dyn SecretSealer>, value: &T) -> Result<Vec<u8>, StoreError> {
    with_sealer(sealer.clone(), || encode(value))
}

/// [`encode_sealed`], or `None` as soon as the encoding passes `limit` bytes: it stops there,
/// so a large value never takes more memory than that to find out.
pub fn encode_sealed_within<T: Serialize>(
    sealer: &Arc<dyn SecretSealer>,
    value: &T,
    limit: usize,
) -> Result<Option<Vec<u8>>, StoreError> {
    let mut within = Within { bytes: vec![VERSION], limit, over: false };
    let encoded = with_sealer(sealer.clone(), || serde_json::to_writer(&mut within, value));
    match encoded {
        Ok(()) => Ok(Some(within.bytes)),
        Err(_) if within.over => Ok(None),
        Err(err) => Err(StoreError::Backend(format!("encoding: {err}"))),
    }
}

/// A buffer that refuses to grow past `limit`.
struct Within {
    bytes: Vec<u8>,
    limit: usize,
    over: bool,
}

impl std::io::Write for Within {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.bytes.len() + buf.len() > self.limit {
            self.over = true;
            return Err(std::io::Error::other("over the limit"));
        }
        self.bytes.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// [`decode`] with `sealer` opening every sealed [`crate::secrets::Secret`] inside.
pub fn decode_sealed<T: DeserializeOwned>(sealer: &Arc<dyn SecretSealer>, bytes: &[u8]) -> Result<T, StoreError> {
    with_sealer(sealer.clone(), || decode(bytes))
}
