//! Row encodings shared by the stores: byte strings split over chunk
//! rows, big-endian sequence keys (so that key order is numeric order),
//! JSON meta values, and deletions of key ranges in bounded batches.

use crate::error::StoreError;
use crate::storage::{NodeStorage, CHUNK_BYTES, CHUNK_KEY_LEN};
use rebound::{Table, Transaction};
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::ops::{Bound, ControlFlow};

/// A range of byte keys.
pub(crate) type KeyRange = (Bound<Vec<u8>>, Bound<Vec<u8>>);

/// Rows deleted or written per transaction by the batched helpers: keeps
/// each transaction's write set (and `delete_range`'s key list) small.
pub(crate) const BATCH_ROWS: usize = 512;

pub(crate) fn chunk_key(sequence: u64, chunk: u32) -> [u8; CHUNK_KEY_LEN] {
    let mut key = [0; CHUNK_KEY_LEN];
    key[..8].copy_from_slice(&sequence.to_be_bytes());
    key[8..].copy_from_slice(&chunk.to_be_bytes());
    key
}

/// The 8-byte prefix of every chunk row of `sequence`: it sorts before
/// them all, and after every row of `sequence - 1`.
pub(crate) fn sequence_key(sequence: u64) -> Vec<u8> {
    sequence.to_be_bytes().to_vec()
}

fn split_chunk_key(key: &[u8]) -> Option<(u64, u32)> {
    let sequence = u64::from_be_bytes(key.get(..8)?.try_into().ok()?);
    let chunk = u32::from_be_bytes(key.get(8..CHUNK_KEY_LEN)?.try_into().ok()?);
    (key.len() == CHUNK_KEY_LEN).then_some((sequence, chunk))
}

/// Writes `bytes` as the chunk rows of `sequence`.
pub(crate) fn put_chunks(
    tx: &mut Transaction<'_>,
    table: &Table,
    sequence: u64,
    bytes: &[u8],
) -> Result<(), StoreError> {
    for (key, chunk) in chunk_rows(sequence, bytes) {
        tx.put(table, &key, &chunk)?;
    }
    Ok(())
}

/// Calls `each` with the reassembled byte string of every sequence
/// within `from` and `to` that has rows, ascending. A sequence whose
/// chunks are not numbered 0, 1, 2, ... is `Damaged`; a missing last
/// chunk is left to the decoder of the bytes (log entries are JSON, a
/// kept snapshot has its length and checksum recorded).
pub(crate) fn scan_chunked(
    tx: &mut Transaction<'_>,
    table: &Table,
    from: Bound<u64>,
    to: Bound<u64>,
    mut each: impl FnMut(u64, &[u8]) -> Result<(), StoreError>,
) -> Result<(), StoreError> {
    let Some(range) = key_range(from, to) else {
        return Ok(());
    };
    let mut current: Option<(u64, u32, Vec<u8>)> = None;
    let mut failure = None;
    tx.scan_with(table, range, usize::MAX, |key, value| {
        let step = absorb_chunk(&mut current, key, value, &mut each);
        match step {
            Ok(()) => ControlFlow::Continue(()),
            Err(e) => {
                failure = Some(e);
                ControlFlow::Break(())
            }
        }
    })?;
    if let Some(e) = failure {
        return Err(e);
    }
    match current {
        Some((sequence, _, bytes)) => each(sequence, &bytes),
        None => Ok(()),
    }
}

fn absorb_chunk(
    current: &mut Option<(u64, u32, Vec<u8>)>,
    key: &[u8],
    value: &[u8],
    each: &mut impl FnMut(u64, &[u8]) -> Result<(), StoreError>,
) -> Result<(), StoreError> {
    let (sequence, chunk) = split_chunk_key(key).ok_or_else(|| bad_chunk_key(key))?;
    match current {
        Some((seq, last, bytes)) if *seq == sequence && last.checked_add(1) == Some(chunk) => {
            *last = chunk;
            bytes.extend_from_slice(value);
            return Ok(());
        }
        Some((seq, ..)) if *seq == sequence => {
            return Err(damaged_sequence(sequence, "its chunks are not consecutive"));
        }
        Some((seq, _, bytes)) => each(*seq, bytes)?,
        None => {}
    }
    if chunk != 0 {
        return Err(damaged_sequence(sequence, "its first chunk is missing"));
    }
    *current = Some((sequence, 0, value.to_vec()));
    Ok(())
}

fn bad_chunk_key(key: &[u8]) -> StoreError {
    StoreError::Damaged {
        what: "chunk row".into(),
        reason: format!("key of {} bytes", key.len()),
    }
}

fn damaged_sequence(sequence: u64, reason: &str) -> StoreError {
    StoreError::Damaged {
        what: format!("row group {sequence}"),
        reason: reason.into(),
    }
}

/// The byte-key range of the chunk rows of the sequences within `from`
/// and `to`; `None` when it is empty.
fn key_range(from: Bound<u64>, to: Bound<u64>) -> Option<KeyRange> {
    let start = match from {
        Bound::Included(s) => Bound::Included(sequence_key(s)),
        Bound::Excluded(u64::MAX) => return None,
        Bound::Excluded(s) => Bound::Included(sequence_key(s + 1)),
        Bound::Unbounded => Bound::Unbounded,
    };
    let end = match to {
        Bound::Excluded(s) => Bound::Excluded(sequence_key(s)),
        Bound::Included(u64::MAX) | Bound::Unbounded => Bound::Unbounded,
        Bound::Included(s) => Bound::Excluded(sequence_key(s + 1)),
    };
    Some((start, end))
}

/// The highest sequence with rows in `table`, if any.
pub(crate) fn last_sequence(
    tx: &mut Transaction<'_>,
    table: &Table,
) -> Result<Option<u64>, StoreError> {
    let Some(entry) = tx.range::<&[u8]>(table, ..)?.next_back() else {
        return Ok(None);
    };
    let (key, _) = entry?;
    let (sequence, _) = split_chunk_key(&key).ok_or_else(|| bad_chunk_key(&key))?;
    Ok(Some(sequence))
}

/// Reads a JSON meta value.
pub(crate) fn get_meta<T: DeserializeOwned>(
    tx: &mut Transaction<'_>,
    table: &Table,
    key: &str,
    what: &'static str,
) -> Result<Option<T>, StoreError> {
    match tx.get(table, key.as_bytes())? {
        Some(bytes) => Ok(Some(
            serde_json::from_slice(&bytes).map_err(StoreError::codec(what))?,
        )),
        None => Ok(None),
    }
}

/// Writes a JSON meta value.
pub(crate) fn put_meta<T: Serialize>(
    tx: &mut Transaction<'_>,
    table: &Table,
    key: &str,
    value: &T,
    what: &'static str,
) -> Result<(), StoreError> {
    let bytes = serde_json::to_vec(value).map_err(StoreError::codec(what))?;
    tx.put(table, key.as_bytes(), &bytes)?;
    Ok(())
}

/// Deletes every key of `table` in `range`, [`BATCH_ROWS`] per
/// transaction: for garbage whose removal need not be atomic (rows no
/// committed pointer refers to any more).
pub(crate) fn delete_in_batches(
    storage: &NodeStorage,
    table: &Table,
    range: KeyRange,
) -> Result<(), StoreError> {
    loop {
        let deleted = storage.write(|tx| {
            let keys: Vec<Vec<u8>> = tx
                .scan(table, range.clone(), BATCH_ROWS)?
                .into_iter()
                .map(|(key, _)| key)
                .collect();
            for key in &keys {
                tx.delete(table, key)?;
            }
            Ok(keys.len())
        })?;
        if deleted < BATCH_ROWS {
            return Ok(());
        }
    }
}

/// Writes `rows` to `table`, [`BATCH_ROWS`] per transaction: for rows no
/// committed pointer refers to yet (a staging area).
pub(crate) fn put_in_batches(
    storage: &NodeStorage,
    table: &Table,
    rows: &[(Vec<u8>, Vec<u8>)],
) -> Result<(), StoreError> {
    for batch in rows.chunks(BATCH_ROWS) {
        storage.write(|tx| {
            for (key, value) in batch {
                tx.put(table, key, value)?;
            }
            Ok(())
        })?;
    }
    Ok(())
}

/// The chunk rows of `bytes` under `sequence`: at least one, so that an
/// empty string is still present.
pub(crate) fn chunk_rows(sequence: u64, bytes: &[u8]) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut rows: Vec<(Vec<u8>, Vec<u8>)> = bytes
        .chunks(CHUNK_BYTES)
        .enumerate()
        .map(|(n, chunk)| (chunk_key(sequence, n as u32).to_vec(), chunk.to_vec()))
        .collect();
    if rows.is_empty() {
        rows.push((chunk_key(sequence, 0).to_vec(), Vec::new()));
    }
    rows
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn storage() -> (tempfile::TempDir, Arc<NodeStorage>) {
        let dir = crate::storage::scratch_dir();
        let storage = NodeStorage::open(dir.path(), rebound::Options::default()).expect("open");
        (dir, storage)
    }

    fn collect(
        storage: &NodeStorage,
        from: Bound<u64>,
        to: Bound<u64>,
    ) -> Result<Vec<(u64, Vec<u8>)>, StoreError> {
        storage.read(|tx| {
            let mut found = Vec::new();
            scan_chunked(tx, &storage.log, from, to, |sequence, bytes| {
                found.push((sequence, bytes.to_vec()));
                Ok(())
            })?;
            Ok(found)
        })
    }

    #[test]
    fn byte_strings_of_any_length_come_back_whole_within_bounds() {
        let (_dir, storage) = storage();
        let lengths = [0, 1, CHUNK_BYTES, CHUNK_BYTES + 1, 5 * CHUNK_BYTES + 7];
        let strings: Vec<(u64, Vec<u8>)> = lengths
            .iter()
            .enumerate()
            .map(|(i, &len)| (i as u64 + 10, (0..len).map(|b| (b % 251) as u8).collect()))
            .collect();
        storage
            .write(|tx| {
                for (sequence, bytes) in &strings {
                    put_chunks(tx, &storage.log, *sequence, bytes)?;
                }
                Ok(())
            })
            .unwrap();
        use Bound::{Excluded, Included, Unbounded};
        assert_eq!(collect(&storage, Unbounded, Unbounded).unwrap(), strings);
        assert_eq!(
            collect(&storage, Included(11), Excluded(13)).unwrap(),
            strings[1..3]
        );
        assert_eq!(
            collect(&storage, Excluded(11), Included(13)).unwrap(),
            strings[2..4]
        );
        assert_eq!(
            collect(&storage, Excluded(u64::MAX), Unbounded).unwrap(),
            []
        );
        assert_eq!(last_sequence_of(&storage), Some(14));
    }

    fn last_sequence_of(storage: &NodeStorage) -> Option<u64> {
        storage.read(|tx| last_sequence(tx, &storage.log)).unwrap()
    }

    #[test]
    fn a_missing_chunk_is_damage() {
        let (_dir, storage) = storage();
        storage
            .write(|tx| {
                put_chunks(tx, &storage.log, 1, &[1; 3 * CHUNK_BYTES])?;
                tx.delete(&storage.log, &chunk_key(1, 1))?;
                put_chunks(tx, &storage.log, 2, &[2; 2 * CHUNK_BYTES])?;
                tx.delete(&storage.log, &chunk_key(2, 0))?;
                Ok(())
            })
            .unwrap();
        let gap = collect(&storage, Bound::Included(1), Bound::Included(1)).unwrap_err();
        assert!(gap.to_string().contains("not consecutive"), "{gap}");
        let headless = collect(&storage, Bound::Included(2), Bound::Included(2)).unwrap_err();
        assert!(headless.to_string().contains("first chunk"), "{headless}");
    }
}
