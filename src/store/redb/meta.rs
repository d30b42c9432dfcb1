//! Numbers kept in `META` (8 bytes, little-endian): the memory counters and readers' cursors.

use redb::{ReadableTable, WriteTransaction};

use super::backend;
use super::tables::META;
use crate::store::StoreError;

/// The number stored under `name`, if any.
pub(super) fn meta_u64(
    meta: &impl ReadableTable<&'static str, &'static [u8]>,
    name: &str,
) -> Result<Option<u64>, StoreError> {
    let Some(bytes) = meta.get(name).map_err(backend)? else { return Ok(None) };
    <[u8; 8]>::try_from(bytes.value())
        .map(|bytes| Some(u64::from_le_bytes(bytes)))
        .map_err(|_| StoreError::Corrupt(format!("the store's {name} is not an 8-byte number")))
}

pub(super) fn set_meta_u64(write: &WriteTransaction, name: &str, value: u64) -> Result<(), StoreError> {
    write.open_table(META).map_err(backend)?.insert(name, value.to_le_bytes().as_slice()).map_err(backend)?;
    Ok(())
}
