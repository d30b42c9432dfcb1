//! The write-ahead log beside a redb store (`<store>-wal`).
//!
//! A redb commit made durable writes every page the transaction touched (about sixteen for a
//! turn) and flushes them; a group of saves logged here costs one sequential write of its
//! encoded saves and one flush, and redb commits it without flushing (`Durability::None`,
//! readers see it at once). What a crash takes from redb is then exactly the logged records
//! after the store's durable `wal_applied`, and [`super::write::replay`] commits them again when
//! the store is opened.
//!
//! A record is its payload's length (u32), a CRC-32 of the store's salt, its sequence number
//! and payload, the sequence number (u64, from 1, one more than the record before) and the
//! payload, all little-endian. The salt is the store's own, so a log left beside a new store
//! of the same name reads as empty. Reading stops at the first record cut short, failing its
//! checksum, or not following its predecessor: the end of what was written since the log last
//! restarted.
//!
//! The log restarts at its beginning after a checkpoint (a group committed durably by redb),
//! overwriting what it holds, so it never outgrows [`ALLOCATED_BYTES`]: a checkpoint's worth
//! and the largest record. It is written with zeros to that length when it is made, so a flush
//! never changes the file's size. Records left beyond the new end have smaller sequence
//! numbers, so reading never runs on into them.

use std::fs::{File, OpenOptions};
use std::io::{self, Read};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, PoisonError};

/// Length, checksum and sequence number.
const HEADER_BYTES: usize = 16;

/// Once the log holds this much, the next group is a checkpoint: it bounds the log file, the
/// work of a replay, and the pages redb holds for commits not yet flushed.
pub(super) const CHECKPOINT_BYTES: u64 = 1 << 20;

/// A group whose saves encode to more than this commits durably in redb instead (a
/// checkpoint): a flush amortised over that many bytes costs little, and it bounds the
/// memory an encoding takes (a group of 256 long sessions would otherwise be encoded whole).
pub(super) const MAX_RECORD_BYTES: usize = 256 << 10;

/// The log of the store at `store`.
pub(super) fn path_of(store: &Path) -> PathBuf {
    let mut name = store.as_os_str().to_owned();
    name.push("-wal");
    PathBuf::from(name)
}

pub(super) struct Wal {
    file: File,
    salt: u64,
    tail: Mutex<Tail>,
}

/// Where the next record goes and its sequence number.
struct Tail {
    end: u64,
    next: u64,
    /// A record whose commit failed could not be erased: nothing more may be logged after it
    /// (replay would take it for a committed one) until a checkpoint.
    broken: bool,
}

/// A record read back from the log.
#[derive(Debug)]
pub(super) struct Record {
    pub(super) sequence: u64,
    pub(super) payload: Vec<u8>,
}

impl Wal {
    /// Opens (or creates, 0600) the log at `path`: the log, and the records it holds. Nothing
    /// may be appended before [`Wal::restart`] says where the sequence goes on.
    pub(super) fn open(path: &Path, salt: u64) -> io::Result<(Self, Vec<Record>)> {
        let mut file =
            OpenOptions::new().read(true).write(true).create(true).truncate(false).mode(0o600).open(path)?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)?;
        let records = read_records(&bytes, salt);
        allocate(&file, bytes.len() as u64)?;
        Ok((Self { file, salt, tail: Mutex::new(Tail { end: 0, next: 0, broken: true }) }, records))
    }

    /// Starts the log again at its beginning; its next record is numbered `next`.
    pub(super) fn restart(&self, next: u64) {
        *self.lock() = Tail { end: 0, next, broken: false };
    }

    /// Whether the next group should be a checkpoint: the log is long enough, or a failed
    /// save's record could not be taken back (a checkpoint marks its number applied, so a
    /// replay skips it, and the log restarts past it).
    pub(super) fn wants_checkpoint(&self) -> bool {
        let tail = self.lock();
        tail.broken || tail.end >= CHECKPOINT_BYTES
    }

    /// The sequence number the next group takes, logged or not.
    pub(super) fn next_sequence(&self) -> u64 {
        self.lock().next
    }

    /// Writes record `sequence` (which [`Wal::next_sequence`] gave) and flushes it. The record
    /// is taken back when the guard is dropped without [`Appended::keep`]: the commit it logs
    /// failed or panicked.
    pub(super) fn append(&self, sequence: u64, payload: &[u8]) -> io::Result<Appended<'_>> {
        let mut tail = self.lock();
        if tail.broken || tail.next != sequence {
            return Err(io::Error::other(format!("write-ahead log record {sequence} is out of turn")));
        }
        let at = tail.end;
        let record = encode_record(self.salt, sequence, payload)?;
        if let Err(error) = self.file.write_all_at(&record, at).and_then(|()| self.file.sync_data()) {
            self.erase(&mut tail, at);
            return Err(error);
        }
        tail.end = at + record.len() as u64;
        tail.next = sequence + 1;
        Ok(Appended { wal: self, at, sequence, kept: false })
    }

    /// Zeroes the header at `at`, so reading ends there, and takes the end back to it.
    fn erase(&self, tail: &mut Tail, at: u64) {
        let erased = self.file.write_all_at(&[0; HEADER_BYTES], at).and_then(|()| self.file.sync_data());
        match erased {
            Ok(()) => tail.end = at,
            Err(error) => {
                tracing::error!(%error, "the write-ahead log could not take back a failed save; the next save commits durably");
                tail.broken = true;
            }
        }
    }

    fn lock(&self) -> MutexGuard<'_, Tail> {
        // The tail is only assigned whole numbers under the lock: a poisoned one is still whole.
        self.tail.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The length the log reaches at most: a checkpoint's worth and the largest record.
pub(super) const ALLOCATED_BYTES: u64 = CHECKPOINT_BYTES + (MAX_RECORD_BYTES + HEADER_BYTES) as u64;

/// Writes zeros (an empty log, to a reader) up to [`ALLOCATED_BYTES`] once, so no append
/// changes the file's size or allocates blocks: its flush then writes the data alone, where
/// one that grows the file also commits the file system's journal.
fn allocate(file: &File, len: u64) -> io::Result<()> {
    if len >= ALLOCATED_BYTES {
        return Ok(());
    }
    let zeros = vec![0u8; 64 << 10];
    let mut at = len;
    while at < ALLOCATED_BYTES {
        let chunk = zeros.len().min((ALLOCATED_BYTES - at) as usize);
        file.write_all_at(&zeros[..chunk], at)?;
        at += chunk as u64;
    }
    file.sync_all()
}

/// A record written and flushed, taken back from the log when dropped unless kept.
pub(super) struct Appended<'wal> {
    wal: &'wal Wal,
    at: u64,
    sequence: u64,
    kept: bool,
}

impl Appended<'_> {
    /// The commit the record logs succeeded: it stays.
    pub(super) fn keep(mut self) {
        self.kept = true;
    }
}

impl Drop for Appended<'_> {
    fn drop(&mut self) {
        if !self.kept {
            let mut tail = self.wal.lock();
            // It is the last record: redb lets one writer commit at a time.
            tail.next = self.sequence;
            self.wal.erase(&mut tail, self.at);
        }
    }
}

fn encode_record(salt: u64, sequence: u64, payload: &[u8]) -> io::Result<Vec<u8>> {
    let len = u32::try_from(payload.len()).map_err(|_| io::Error::other("write-ahead log record over 4 GiB"))?;
    let mut record = Vec::with_capacity(HEADER_BYTES + payload.len());
    record.extend_from_slice(&len.to_le_bytes());
    record.extend_from_slice(&checksum(salt, sequence, payload).to_le_bytes());
    record.extend_from_slice(&sequence.to_le_bytes());
    record.extend_from_slice(payload);
    Ok(record)
}

fn checksum(salt: u64, sequence: u64, payload: &[u8]) -> u32 {
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(&salt.to_le_bytes());
    hasher.update(&sequence.to_le_bytes());
    hasher.update(payload);
    hasher.finalize()
}

/// The records from the log's beginning up to the first that is cut short, fails its checksum
/// or does not follow the one before.
fn read_records(mut bytes: &[u8], salt: u64) -> Vec<Record> {
    let mut records: Vec<Record> = Vec::new();
    while let Some((header, rest)) = bytes.split_first_chunk::<HEADER_BYTES>() {
        let number = |range: std::ops::Range<usize>| {
            let mut value = [0u8; 8];
            value[..range.len()].copy_from_slice(&header[range]);
            u64::from_le_bytes(value)
        };
        let (len, crc, sequence) = (number(0..4) as usize, number(4..8) as u32, number(8..16));
        let follows = records.last().map_or(sequence != 0, |last| sequence == last.sequence + 1);
        let Some(payload) = rest.get(..len) else { break };
        if !follows || checksum(salt, sequence, payload) != crc {
            break;
        }
        records.push(Record { sequence, payload: payload.to_vec() });
        bytes = &rest[len..];
    }
    records
}

#[cfg(test)]
mod tests {
    use super::*;

    const SALT: u64 = 0x5eed;

    fn open(dir: &tempfile::TempDir) -> (Wal, Vec<Record>) {
        Wal::open(&dir.path().join("s.redb-wal"), SALT).unwrap()
    }

    fn sequences(records: &[Record]) -> Vec<u64> {
        records.iter().map(|record| record.sequence).collect()
    }

    #[test]
    fn records_read_back_in_order_and_a_restart_overwrites_from_the_start() {
        let dir = tempfile::tempdir().unwrap();
        let (wal, records) = open(&dir);
        assert!(records.is_empty());
        wal.restart(1);
        for sequence in 1..=3 {
            wal.append(sequence, format!("save {sequence} and a long tail").as_bytes()).unwrap().keep();
        }
        drop(wal);
        let (wal, records) = open(&dir);
        assert_eq!(sequences(&records), [1, 2, 3]);
        assert_eq!(records[1].payload, b"save 2 and a long tail");

        // After a checkpoint the log starts again at 0: the old, longer records behind the new
        // one are not read as following it.
        wal.restart(4);
        wal.append(4, b"four").unwrap().keep();
        drop(wal);
        let (_, records) = open(&dir);
        assert_eq!(sequences(&records), [4]);
    }

    #[test]
    fn a_record_not_kept_is_taken_back_and_its_number_reused() {
        let dir = tempfile::tempdir().unwrap();
        let (wal, _) = open(&dir);
        wal.restart(7);
        wal.append(7, b"kept").unwrap().keep();
        drop(wal.append(8, b"its commit failed").unwrap());
        assert_eq!(wal.next_sequence(), 8);
        wal.append(8, b"the next").unwrap().keep();
        assert!(wal.append(10, b"out of turn").is_err());
        drop(wal);
        let (_, records) = open(&dir);
        assert_eq!(sequences(&records), [7, 8]);
        assert_eq!(records[1].payload, b"the next");
        // Another store's log (another salt) holds nothing for this one.
        assert!(Wal::open(&dir.path().join("s.redb-wal"), SALT + 1).unwrap().1.is_empty());
    }

    #[test]
    fn reading_stops_at_a_torn_or_damaged_record() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.redb-wal");
        let (wal, _) = open(&dir);
        wal.restart(1);
        for sequence in 1..=3 {
            wal.append(sequence, &[sequence as u8; 100]).unwrap().keep();
        }
        drop(wal);
        let whole = std::fs::read(&path).unwrap();

        // Cut short in the last record's payload.
        let end = 3 * (HEADER_BYTES + 100);
        assert!(whole[end..].iter().all(|&byte| byte == 0), "zeros after the records");
        std::fs::write(&path, &whole[..end - 10]).unwrap();
        assert_eq!(sequences(&open(&dir).1), [1, 2]);
        // A bit flipped in the second record's payload.
        let mut flipped = whole.clone();
        flipped[HEADER_BYTES + 100 + HEADER_BYTES + 5] ^= 1;
        std::fs::write(&path, &flipped).unwrap();
        assert_eq!(sequences(&open(&dir).1), [1]);
        // A log that is only zeros (an erased first record) holds nothing.
        std::fs::write(&path, vec![0; 300]).unwrap();
        assert!(open(&dir).1.is_empty());
    }

    #[test]
    fn a_new_log_is_private_and_allocated_whole() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        drop(open(&dir));
        let metadata = std::fs::metadata(dir.path().join("s.redb-wal")).unwrap();
        assert_eq!(metadata.permissions().mode() & 0o777, 0o600);
        assert_eq!(metadata.len(), ALLOCATED_BYTES);
    }
}
