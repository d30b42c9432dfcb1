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

/// The JSON inside a value [`encode`] made: what a larger encoding may embed as it is.
pub fn json_of(encoded: &[u8]) -> &[u8] {
    &encoded[1..]
}

/// The start of an encoding whose JSON the caller writes (of [`json_of`] pieces, say), with room
/// for `capacity` bytes in all.
pub fn encoded_json(capacity: usize) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(capacity);
    bytes.push(VERSION);
    bytes
}

/// [`encode`] with `sealer` sealing every [`crate::secrets::Secret`] inside `value`.
pub fn encode_sealed<T: Serialize>(sealer: &Arc<dyn SecretSealer>, value: &T) -> Result<Vec<u8>, StoreError> {
    with_sealer(sealer.clone(), || encode(value))
}

/// [`decode`] with `sealer` opening every sealed [`crate::secrets::Secret`] inside.
pub fn decode_sealed<T: DeserializeOwned>(sealer: &Arc<dyn SecretSealer>, bytes: &[u8]) -> Result<T, StoreError> {
    with_sealer(sealer.clone(), || decode(bytes))
}
