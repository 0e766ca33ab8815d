//! The Raft log in Rebound: each entry is JSON, split over rows of the
//! `raft_log` table keyed by (big-endian log index, chunk number); the
//! vote and the last purged log id are rows of `raft_log_meta`. Every
//! operation is one transaction: an append writes its whole batch at
//! once, and a truncation or purge (with the new purge mark) is one
//! `delete_range`.

use crate::error::{Failed, OrFail, StoreError};
use crate::rows::{get_meta, last_sequence, put_chunks, put_meta, scan_chunked, sequence_key};
use crate::storage::NodeStorage;
use crate::{NodeId, TypeConfig};
use openraft::storage::{LogFlushed, RaftLogStorage};
use openraft::{
    Entry, LogId, LogState, OptionalSend, RaftLogId, RaftLogReader, StorageError, Vote,
};
use std::fmt::Debug;
use std::ops::{Bound, RangeBounds};
use std::sync::Arc;

/// Largest encoded log entry (1 MiB, four times the largest request);
/// a larger one is refused with [`StoreError::EntryTooLarge`] (and the
/// whole append with it).
pub const MAX_ENTRY_BYTES: usize = 1 << 20;

const VOTE_KEY: &str = "vote";
const PURGED_KEY: &str = "last_purged";

/// The log store of one node; cheap to clone (a clone is also its
/// `LogReader`: reads are snapshot transactions and need no lock).
#[derive(Clone)]
pub struct LogStore {
    storage: Arc<NodeStorage>,
}

impl LogStore {
    pub(crate) fn new(storage: Arc<NodeStorage>) -> LogStore {
        LogStore { storage }
    }

    /// Writes `entries` in one transaction; they are durable when this
    /// returns `Ok`. Indexes already present are overwritten whole.
    pub fn append_entries(&self, entries: &[Entry<TypeConfig>]) -> Result<(), StoreError> {
        let encoded = entries
            .iter()
            .map(encode_entry)
            .collect::<Result<Vec<_>, _>>()?;
        let (Some(first), Some(last)) = (entries.first(), entries.last()) else {
            return Ok(());
        };
        let span = (
            Bound::Included(sequence_key(first.log_id.index)),
            end_of(last.log_id.index),
        );
        self.storage.write(|tx| {
            tx.delete_range(&self.storage.log, span.clone())?;
            for (index, bytes) in &encoded {
                put_chunks(tx, &self.storage.log, *index, bytes)?;
            }
            Ok(())
        })
    }

    /// The entries with indexes in `range`, ascending, from one snapshot.
    pub fn entries(
        &self,
        range: impl RangeBounds<u64>,
    ) -> Result<Vec<Entry<TypeConfig>>, StoreError> {
        let (from, to) = (range.start_bound().cloned(), range.end_bound().cloned());
        self.storage.read(|tx| {
            let mut entries = Vec::new();
            scan_chunked(tx, &self.storage.log, from, to, |index, bytes| {
                entries.push(decode_entry(index, bytes)?);
                Ok(())
            })?;
            Ok(entries)
        })
    }

    fn log_state(&self) -> Result<LogState<TypeConfig>, StoreError> {
        self.storage.read(|tx| {
            let purged: Option<LogId<NodeId>> =
                get_meta(tx, &self.storage.log_meta, PURGED_KEY, "purge mark")?;
            let last = match last_sequence(tx, &self.storage.log)? {
                Some(index) => last_entry_id(tx, &self.storage, index)?,
                None => purged,
            };
            Ok(LogState {
                last_purged_log_id: purged,
                last_log_id: last,
            })
        })
    }

    fn delete_from(&self, index: u64) -> Result<(), StoreError> {
        let range = (Bound::Included(sequence_key(index)), Bound::Unbounded);
        self.storage.write(|tx| {
            tx.delete_range(&self.storage.log, range.clone())?;
            Ok(())
        })
    }

    fn purge_through(&self, log_id: LogId<NodeId>) -> Result<(), StoreError> {
        let range = (Bound::Unbounded, end_of(log_id.index));
        self.storage.write(|tx| {
            put_meta(
                tx,
                &self.storage.log_meta,
                PURGED_KEY,
                &log_id,
                "purge mark",
            )?;
            tx.delete_range(&self.storage.log, range.clone())?;
            Ok(())
        })
    }

    fn store_vote(&self, vote: &Vote<NodeId>) -> Result<(), StoreError> {
        self.storage
            .write(|tx| put_meta(tx, &self.storage.log_meta, VOTE_KEY, vote, "vote"))
    }

    fn load_vote(&self) -> Result<Option<Vote<NodeId>>, StoreError> {
        self.storage
            .read(|tx| get_meta(tx, &self.storage.log_meta, VOTE_KEY, "vote"))
    }
}

/// The exclusive key bound just past every row of log index `index`.
fn end_of(index: u64) -> Bound<Vec<u8>> {
    match index.checked_add(1) {
        Some(next) => Bound::Excluded(sequence_key(next)),
        None => Bound::Unbounded,
    }
}

fn encode_entry(entry: &Entry<TypeConfig>) -> Result<(u64, Vec<u8>), StoreError> {
    let index = entry.log_id.index;
    let bytes = serde_json::to_vec(entry).map_err(StoreError::codec("log entry"))?;
    if bytes.len() > MAX_ENTRY_BYTES {
        return Err(StoreError::EntryTooLarge {
            index,
            len: bytes.len(),
            max: MAX_ENTRY_BYTES,
        });
    }
    Ok((index, bytes))
}

fn decode_entry(index: u64, bytes: &[u8]) -> Result<Entry<TypeConfig>, StoreError> {
    let entry: Entry<TypeConfig> =
        serde_json::from_slice(bytes).map_err(StoreError::codec("log entry"))?;
    if entry.log_id.index != index {
        return Err(StoreError::Damaged {
            what: format!("log entry {index}"),
            reason: format!("it holds the entry of index {}", entry.log_id.index),
        });
    }
    Ok(entry)
}

fn last_entry_id(
    tx: &mut rebound::Transaction<'_>,
    storage: &NodeStorage,
    index: u64,
) -> Result<Option<LogId<NodeId>>, StoreError> {
    let mut last = None;
    scan_chunked(
        tx,
        &storage.log,
        Bound::Included(index),
        Bound::Included(index),
        |i, bytes| {
            last = Some(*decode_entry(i, bytes)?.get_log_id());
            Ok(())
        },
    )?;
    Ok(last)
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry<TypeConfig>>, StorageError<NodeId>> {
        self.entries(range).or_fail(Failed::ReadLogs)
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError<NodeId>> {
        self.log_state().or_fail(Failed::ReadLogs)
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<NodeId>) -> Result<(), StorageError<NodeId>> {
        self.store_vote(vote).or_fail(Failed::WriteVote)
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<NodeId>>, StorageError<NodeId>> {
        self.load_vote().or_fail(Failed::ReadVote)
    }

    /// Commits the batch before reporting it flushed: Rebound's `commit`
    /// returns once the transaction is durable, so the callback never
    /// runs ahead of the medium.
    async fn append<I>(
        &mut self,
        entries: I,
        callback: LogFlushed<TypeConfig>,
    ) -> Result<(), StorageError<NodeId>>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let entries: Vec<_> = entries.into_iter().collect();
        match self.append_entries(&entries) {
            Ok(()) => {
                callback.log_io_completed(Ok(()));
                Ok(())
            }
            Err(e) => {
                callback.log_io_completed(Err(std::io::Error::other(e.to_string())));
                Err(Failed::WriteLogs.of(e))
            }
        }
    }

    async fn truncate(&mut self, log_id: LogId<NodeId>) -> Result<(), StorageError<NodeId>> {
        self.delete_from(log_id.index).or_fail(Failed::WriteLogs)
    }

    async fn purge(&mut self, log_id: LogId<NodeId>) -> Result<(), StorageError<NodeId>> {
        self.purge_through(log_id).or_fail(Failed::WriteLogs)
    }
}
