//! The replicated key-value state machine in Rebound.
//!
//! Every key of the `kv` table starts with a 4-byte big-endian
//! generation; only the generation named by `sm_meta`'s
//! `kv_generation` row is in force. Applying an entry writes its
//! request's effects, `last_applied` and (for a membership entry) the
//! last membership in one transaction, so a restart resumes exactly
//! after the last entry applied: never before it (which would apply it
//! twice), never after.
//!
//! Installing a snapshot writes its pairs under the next generation in
//! bounded transactions (a staging area nothing points to), stores the
//! snapshot's bytes the same way, then switches generation,
//! `last_applied`, membership and the current snapshot in one small
//! transaction; the old generation is deleted afterwards. A crash before
//! the switch leaves the old state in force and staging rows that the
//! next open deletes; a crash after it leaves only garbage.

use crate::error::{Failed, OrFail, StoreError};
use crate::kv::{KvError, KvOp, KvRequest, KvResponse, OpResult};
use crate::rows::{
    chunk_rows, delete_in_batches, get_meta, put_in_batches, put_meta, scan_chunked, sequence_key,
    KeyRange,
};
use crate::snapshot_format::{decode, Encoder, Meta};
use crate::storage::{NodeStorage, GENERATION_LEN};
use crate::{NodeId, TypeConfig};
use openraft::storage::RaftStateMachine;
use openraft::{
    BasicNode, Entry, EntryPayload, LogId, OptionalSend, RaftSnapshotBuilder, Snapshot,
    StorageError, StoredMembership,
};
use rebound::{Table, Transaction};
use serde::{Deserialize, Serialize};
use std::io::Cursor;
use std::ops::{Bound, ControlFlow};
use std::sync::Arc;

const APPLIED_KEY: &str = "last_applied";
const MEMBERSHIP_KEY: &str = "last_membership";
const GENERATION_KEY: &str = "kv_generation";
const SNAPSHOT_KEY: &str = "current_snapshot";
const SNAPSHOT_NUMBER_KEY: &str = "last_snapshot_number";

type Membership = StoredMembership<NodeId, BasicNode>;

/// Where the current snapshot's bytes are: the chunk rows of `number` in
/// the snapshot table, `len` bytes with CRC-32C `crc` in all.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct StoredSnapshot {
    number: u64,
    meta: Meta,
    len: u64,
    crc: u32,
}

/// The state machine of one node.
pub struct StateMachineStore {
    storage: Arc<NodeStorage>,
}

/// Reads the applied state of a node, from anywhere (the state machine
/// itself is owned by openraft once the node runs); cheap to clone.
#[derive(Clone)]
pub struct KvReader {
    storage: Arc<NodeStorage>,
}

/// The whole applied state of a node, as [`KvReader::contents`] reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppliedState {
    /// The id of the last entry applied.
    pub applied: Option<LogId<NodeId>>,
    /// Every key and its value, in key order.
    pub pairs: Vec<(Vec<u8>, Vec<u8>)>,
}

/// Builds a snapshot from one consistent cut of the state machine.
pub struct SnapshotBuilder {
    storage: Arc<NodeStorage>,
}

impl StateMachineStore {
    /// Opens the state machine and deletes what an interrupted snapshot
    /// build or install left behind.
    pub(crate) fn open(storage: Arc<NodeStorage>) -> Result<StateMachineStore, StoreError> {
        remove_unreferenced_rows(&storage)?;
        Ok(StateMachineStore { storage })
    }

    pub fn reader(&self) -> KvReader {
        KvReader {
            storage: self.storage.clone(),
        }
    }

    fn applied_state(&self) -> Result<(Option<LogId<NodeId>>, Membership), StoreError> {
        self.storage.read(|tx| {
            let applied = get_meta(tx, &self.storage.sm_meta, APPLIED_KEY, "last applied id")?;
            let membership = get_meta(tx, &self.storage.sm_meta, MEMBERSHIP_KEY, "membership")?;
            Ok((applied, membership.unwrap_or_default()))
        })
    }

    /// Applies one entry in one transaction. A request the engine refuses
    /// for a reason of its own (the same on every node) is answered with
    /// [`KvError::Refused`] and only advances `last_applied`.
    pub fn apply_entry(&self, entry: &Entry<TypeConfig>) -> Result<KvResponse, StoreError> {
        match self.storage.write(|tx| apply_in(tx, &self.storage, entry)) {
            Err(StoreError::Engine(e)) if refused_for_the_request(&e) => {
                self.storage.write(|tx| {
                    put_meta(
                        tx,
                        &self.storage.sm_meta,
                        APPLIED_KEY,
                        &entry.log_id,
                        "last applied id",
                    )
                })?;
                Ok(KvResponse {
                    outcome: Err(KvError::Refused(e.to_string())),
                })
            }
            other => other,
        }
    }

    fn current_snapshot(&self) -> Result<Option<Snapshot<TypeConfig>>, StoreError> {
        self.storage.read(|tx| {
            let Some(stored) =
                get_meta::<StoredSnapshot>(tx, &self.storage.sm_meta, SNAPSHOT_KEY, "snapshot")?
            else {
                return Ok(None);
            };
            let bytes = read_snapshot_bytes(tx, &self.storage, &stored)?;
            Ok(Some(Snapshot {
                meta: stored.meta,
                snapshot: Box::new(Cursor::new(bytes)),
            }))
        })
    }

    /// Replaces the state with the snapshot's (see the module's notes).
    pub fn install(&self, meta: &Meta, bytes: Vec<u8>) -> Result<(), StoreError> {
        let contents = decode(&bytes)?;
        if contents.meta != *meta {
            return Err(StoreError::SnapshotMismatch {
                found: contents.meta.to_string(),
                offered: meta.to_string(),
            });
        }
        let storage = &*self.storage;
        let old_generation = storage.read(|tx| generation(tx, &storage.sm_meta))?;
        let staged = old_generation
            .checked_add(1)
            .ok_or_else(|| StoreError::Damaged {
                what: "kv generation".into(),
                reason: "it cannot advance past u32::MAX".into(),
            })?;
        stage_generation(storage, staged, &contents.pairs)?;
        keep_snapshot(storage, meta, &bytes, Switch::Always, |tx| {
            put_in_force(tx, storage, staged, meta)
        })?;
        delete_in_batches(storage, &storage.kv, generation_range(old_generation))
    }
}

/// Writes `pairs` as generation `staged`, after clearing what an
/// interrupted install may have left there.
fn stage_generation(
    storage: &NodeStorage,
    staged: u32,
    pairs: &[(Vec<u8>, Vec<u8>)],
) -> Result<(), StoreError> {
    delete_in_batches(storage, &storage.kv, generation_range(staged))?;
    let rows: Vec<_> = pairs
        .iter()
        .map(|(key, value)| (kv_key(staged, key), value.clone()))
        .collect();
    put_in_batches(storage, &storage.kv, &rows)
}

/// Makes generation `staged` the state, as of the snapshot `meta`.
fn put_in_force(
    tx: &mut Transaction<'_>,
    storage: &NodeStorage,
    staged: u32,
    meta: &Meta,
) -> Result<(), StoreError> {
    let sm_meta = &storage.sm_meta;
    put_meta(tx, sm_meta, GENERATION_KEY, &staged, "kv generation")?;
    put_meta(
        tx,
        sm_meta,
        APPLIED_KEY,
        &meta.last_log_id,
        "last applied id",
    )?;
    put_meta(
        tx,
        sm_meta,
        MEMBERSHIP_KEY,
        &meta.last_membership,
        "membership",
    )
}

fn apply_in(
    tx: &mut Transaction<'_>,
    storage: &NodeStorage,
    entry: &Entry<TypeConfig>,
) -> Result<KvResponse, StoreError> {
    let response = match &entry.payload {
        EntryPayload::Blank => KvResponse::empty(),
        EntryPayload::Normal(request) => {
            let generation = generation(tx, &storage.sm_meta)?;
            execute(tx, &storage.kv, generation, request)?
        }
        EntryPayload::Membership(membership) => {
            let stored = Membership::new(Some(entry.log_id), membership.clone());
            put_meta(tx, &storage.sm_meta, MEMBERSHIP_KEY, &stored, "membership")?;
            KvResponse::empty()
        }
    };
    put_meta(
        tx,
        &storage.sm_meta,
        APPLIED_KEY,
        &entry.log_id,
        "last applied id",
    )?;
    Ok(response)
}

fn execute(
    tx: &mut Transaction<'_>,
    kv: &Table,
    generation: u32,
    request: &KvRequest,
) -> Result<KvResponse, StoreError> {
    if let Err(refusal) = request.validate() {
        return Ok(KvResponse {
            outcome: Err(refusal),
        });
    }
    let mut results = Vec::with_capacity(request.ops.len());
    for op in &request.ops {
        let key = kv_key(generation, op.key());
        results.push(match op {
            KvOp::Put { value, .. } => OpResult::Put {
                existed: tx.put(kv, &key, value)?,
            },
            KvOp::Delete { .. } => OpResult::Delete {
                existed: tx.delete(kv, &key)?,
            },
            KvOp::Get { .. } => OpResult::Get {
                value: tx.get(kv, &key)?,
            },
        });
    }
    Ok(KvResponse {
        outcome: Ok(results),
    })
}

/// Engine errors caused by the request's content, which every node meets
/// alike: answering them keeps the nodes in step, where failing the
/// apply would stop the state machine.
fn refused_for_the_request(e: &rebound::Error) -> bool {
    matches!(
        e,
        rebound::Error::KeyLength { .. }
            | rebound::Error::ValueTooLarge { .. }
            | rebound::Error::DuplicateKey
            | rebound::Error::KeyNotFound
    )
}

fn generation(tx: &mut Transaction<'_>, sm_meta: &Table) -> Result<u32, StoreError> {
    Ok(get_meta(tx, sm_meta, GENERATION_KEY, "kv generation")?.unwrap_or(0))
}

fn kv_key(generation: u32, key: &[u8]) -> Vec<u8> {
    let mut full = Vec::with_capacity(GENERATION_LEN + key.len());
    full.extend_from_slice(&generation.to_be_bytes());
    full.extend_from_slice(key);
    full
}

fn generation_range(generation: u32) -> KeyRange {
    let start = Bound::Included(generation.to_be_bytes().to_vec());
    let end = match generation.checked_add(1) {
        Some(next) => Bound::Excluded(next.to_be_bytes().to_vec()),
        None => Bound::Unbounded,
    };
    (start, end)
}

/// The key ranges of everything outside `inside`, a range from an
/// included key to an excluded one or to the end, as built by
/// [`generation_range`] and [`snapshot_range`].
fn outside(inside: KeyRange) -> Vec<KeyRange> {
    let mut ranges = Vec::with_capacity(2);
    if let Bound::Included(start) = inside.0 {
        ranges.push((Bound::Unbounded, Bound::Excluded(start)));
    }
    if let Bound::Excluded(end) = inside.1 {
        ranges.push((Bound::Included(end), Bound::Unbounded));
    }
    ranges
}

fn snapshot_range(number: u64) -> KeyRange {
    let end = match number.checked_add(1) {
        Some(next) => Bound::Excluded(sequence_key(next)),
        None => Bound::Unbounded,
    };
    (Bound::Included(sequence_key(number)), end)
}

/// Deletes kv rows of other generations than the one in force (an
/// install's staging area or its leftover old generation) and snapshot
/// rows of other snapshots than the current one.
fn remove_unreferenced_rows(storage: &NodeStorage) -> Result<(), StoreError> {
    let (generation, snapshot) = storage.read(|tx| {
        let generation = generation(tx, &storage.sm_meta)?;
        let snapshot: Option<StoredSnapshot> =
            get_meta(tx, &storage.sm_meta, SNAPSHOT_KEY, "snapshot")?;
        Ok((generation, snapshot))
    })?;
    for range in outside(generation_range(generation)) {
        delete_in_batches(storage, &storage.kv, range)?;
    }
    let snapshot_ranges = match snapshot {
        Some(stored) => outside(snapshot_range(stored.number)),
        None => vec![(Bound::Unbounded, Bound::Unbounded)],
    };
    for range in snapshot_ranges {
        delete_in_batches(storage, &storage.snapshots, range)?;
    }
    Ok(())
}

fn read_snapshot_bytes(
    tx: &mut Transaction<'_>,
    storage: &NodeStorage,
    stored: &StoredSnapshot,
) -> Result<Vec<u8>, StoreError> {
    let mut found = Vec::new();
    let number = Bound::Included(stored.number);
    scan_chunked(tx, &storage.snapshots, number, number, |_, bytes| {
        found = bytes.to_vec();
        Ok(())
    })?;
    if found.len() as u64 != stored.len || crc32c::crc32c(&found) != stored.crc {
        return Err(StoreError::Damaged {
            what: format!("snapshot {}", stored.meta.snapshot_id),
            reason: format!(
                "{} bytes stored of {}, or a checksum mismatch",
                found.len(),
                stored.len
            ),
        });
    }
    Ok(found)
}

/// Whether a new snapshot replaces the current one.
#[derive(Clone, Copy, PartialEq)]
enum Switch {
    /// An install: the state is replaced whatever the current snapshot.
    Always,
    /// A build: unless the current one (installed meanwhile) is newer.
    UnlessNewerExists,
}

/// Stores `bytes` as the current snapshot: its rows under a fresh
/// number, then, in one transaction with whatever `also` writes, the
/// pointer to them; then deletes the rows of the snapshot it replaced
/// (or its own, when it did not switch).
fn keep_snapshot(
    storage: &NodeStorage,
    meta: &Meta,
    bytes: &[u8],
    switch: Switch,
    mut also: impl FnMut(&mut Transaction<'_>) -> Result<(), StoreError>,
) -> Result<(), StoreError> {
    let number = allocate_snapshot_number(storage)?;
    put_in_batches(storage, &storage.snapshots, &chunk_rows(number, bytes))?;
    let stored = StoredSnapshot {
        number,
        meta: meta.clone(),
        len: bytes.len() as u64,
        crc: crc32c::crc32c(bytes),
    };
    let garbage = storage.write(|tx| {
        let current: Option<StoredSnapshot> =
            get_meta(tx, &storage.sm_meta, SNAPSHOT_KEY, "snapshot")?;
        let newer_exists = current
            .as_ref()
            .is_some_and(|c| c.meta.last_log_id > meta.last_log_id);
        if switch == Switch::UnlessNewerExists && newer_exists {
            return Ok(Some(number));
        }
        put_meta(tx, &storage.sm_meta, SNAPSHOT_KEY, &stored, "snapshot")?;
        also(tx)?;
        Ok(current.map(|c| c.number))
    })?;
    match garbage {
        Some(number) => delete_in_batches(storage, &storage.snapshots, snapshot_range(number)),
        None => Ok(()),
    }
}

/// A snapshot number no snapshot of this node had: the chunk rows of
/// concurrent builds and installs never mix.
fn allocate_snapshot_number(storage: &NodeStorage) -> Result<u64, StoreError> {
    storage.write(|tx| {
        let sm_meta = &storage.sm_meta;
        let last: Option<u64> = get_meta(tx, sm_meta, SNAPSHOT_NUMBER_KEY, "snapshot number")?;
        let number = last.unwrap_or(0) + 1;
        put_meta(tx, sm_meta, SNAPSHOT_NUMBER_KEY, &number, "snapshot number")?;
        Ok(number)
    })
}

impl SnapshotBuilder {
    /// Encodes the state machine as one snapshot transaction sees it,
    /// keeps the bytes as the current snapshot and returns them.
    pub fn build(&self) -> Result<Snapshot<TypeConfig>, StoreError> {
        let storage = &*self.storage;
        let (meta, bytes) = storage.read(|tx| encode_state(tx, storage))?;
        keep_snapshot(
            storage,
            &meta,
            &bytes,
            Switch::UnlessNewerExists,
            |_| Ok(()),
        )?;
        Ok(Snapshot {
            meta,
            snapshot: Box::new(Cursor::new(bytes)),
        })
    }
}

fn encode_state(
    tx: &mut Transaction<'_>,
    storage: &NodeStorage,
) -> Result<(Meta, Vec<u8>), StoreError> {
    let applied: Option<LogId<NodeId>> =
        get_meta(tx, &storage.sm_meta, APPLIED_KEY, "last applied id")?;
    let membership: Option<Membership> =
        get_meta(tx, &storage.sm_meta, MEMBERSHIP_KEY, "membership")?;
    let built: Option<u64> =
        get_meta(tx, &storage.sm_meta, SNAPSHOT_NUMBER_KEY, "snapshot number")?;
    let snapshot_id = match &applied {
        Some(id) => format!("{}-{}-{}", id.leader_id, id.index, built.unwrap_or(0) + 1),
        None => format!("empty-{}", built.unwrap_or(0) + 1),
    };
    let meta = Meta {
        last_log_id: applied,
        last_membership: membership.unwrap_or_default(),
        snapshot_id,
    };
    let mut encoder = Encoder::new(&meta);
    let generation = generation(tx, &storage.sm_meta)?;
    tx.scan_with(
        &storage.kv,
        generation_range(generation),
        usize::MAX,
        |key, value| {
            encoder.push(&key[GENERATION_LEN..], value);
            ControlFlow::Continue(())
        },
    )?;
    Ok((meta, encoder.finish()))
}

impl KvReader {
    /// `key`'s value in the applied state.
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        self.storage.read(|tx| {
            let generation = generation(tx, &self.storage.sm_meta)?;
            Ok(tx.get(&self.storage.kv, &kv_key(generation, key))?)
        })
    }

    /// Every pair of the applied state and the id of the last entry
    /// applied, from one consistent cut.
    pub fn contents(&self) -> Result<AppliedState, StoreError> {
        self.storage.read(|tx| {
            let applied = get_meta(tx, &self.storage.sm_meta, APPLIED_KEY, "last applied id")?;
            let generation = generation(tx, &self.storage.sm_meta)?;
            let pairs = tx
                .scan(&self.storage.kv, generation_range(generation), usize::MAX)?
                .into_iter()
                .map(|(key, value)| (key[GENERATION_LEN..].to_vec(), value))
                .collect();
            Ok(AppliedState { applied, pairs })
        })
    }
}

impl RaftSnapshotBuilder<TypeConfig> for SnapshotBuilder {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, StorageError<NodeId>> {
        self.build().or_fail(Failed::WriteSnapshot)
    }
}

impl RaftStateMachine<TypeConfig> for StateMachineStore {
    type SnapshotBuilder = SnapshotBuilder;

    async fn applied_state(
        &mut self,
    ) -> Result<(Option<LogId<NodeId>>, Membership), StorageError<NodeId>> {
        StateMachineStore::applied_state(self).or_fail(Failed::ReadStateMachine)
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<KvResponse>, StorageError<NodeId>>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        entries
            .into_iter()
            .map(|entry| self.apply_entry(&entry))
            .collect::<Result<_, _>>()
            .or_fail(Failed::WriteStateMachine)
    }

    async fn get_snapshot_builder(&mut self) -> SnapshotBuilder {
        SnapshotBuilder {
            storage: self.storage.clone(),
        }
    }

    async fn begin_receiving_snapshot(
        &mut self,
    ) -> Result<Box<Cursor<Vec<u8>>>, StorageError<NodeId>> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &Meta,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> Result<(), StorageError<NodeId>> {
        self.install(meta, snapshot.into_inner())
            .or_fail(Failed::WriteSnapshot)
    }

    async fn get_current_snapshot(
        &mut self,
    ) -> Result<Option<Snapshot<TypeConfig>>, StorageError<NodeId>> {
        self.current_snapshot().or_fail(Failed::ReadSnapshot)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rows::chunk_rows;
    use crate::storage::scratch_dir as scratch;
    use openraft::testing::log_id;

    fn open(dir: &tempfile::TempDir) -> StateMachineStore {
        let storage = NodeStorage::open(dir.path(), rebound::Options::default()).expect("open");
        StateMachineStore::open(storage).expect("open the state machine")
    }

    fn apply_put(sm: &StateMachineStore, index: u64, key: &str, value: &str) {
        let entry = Entry {
            log_id: log_id(1, 1, index),
            payload: EntryPayload::Normal(KvRequest::put(key, value)),
        };
        let response = sm.apply_entry(&entry).expect("apply");
        assert_eq!(response.outcome, Ok(vec![OpResult::Put { existed: false }]));
    }

    fn row_count(sm: &StateMachineStore, table: &Table) -> usize {
        sm.storage
            .read(|tx| Ok(tx.scan::<&[u8]>(table, .., usize::MAX)?.len()))
            .expect("scan")
    }

    fn pairs(items: &[(&str, &str)]) -> Vec<(Vec<u8>, Vec<u8>)> {
        items
            .iter()
            .map(|(k, v)| (k.as_bytes().to_vec(), v.as_bytes().to_vec()))
            .collect()
    }

    #[test]
    fn reopening_resumes_after_the_last_applied_entry() {
        let dir = scratch();
        let sm = open(&dir);
        apply_put(&sm, 1, "a", "1");
        apply_put(&sm, 2, "b", "2");
        drop(sm);
        let sm = open(&dir);
        let state = sm.reader().contents().unwrap();
        assert_eq!(state.applied, Some(log_id(1, 1, 2)));
        assert_eq!(state.pairs, pairs(&[("a", "1"), ("b", "2")]));
    }

    #[test]
    fn an_interrupted_install_leaves_the_old_state_and_its_rows_go() {
        let dir = scratch();
        let sm = open(&dir);
        apply_put(&sm, 1, "a", "1");
        // What a crash before an install's switch leaves: rows of the next
        // generation and of an unreferenced snapshot number.
        let staged = [(kv_key(1, b"b"), b"2".to_vec())];
        put_in_batches(&sm.storage, &sm.storage.kv, &staged).unwrap();
        put_in_batches(
            &sm.storage,
            &sm.storage.snapshots,
            &chunk_rows(7, b"partial"),
        )
        .unwrap();
        drop(sm);

        let sm = open(&dir);
        let state = sm.reader().contents().unwrap();
        assert_eq!(state.applied, Some(log_id(1, 1, 1)));
        assert_eq!(state.pairs, pairs(&[("a", "1")]));
        assert_eq!(row_count(&sm, &sm.storage.kv), 1);
        assert_eq!(row_count(&sm, &sm.storage.snapshots), 0);
    }

    #[test]
    fn install_replaces_the_whole_state_and_survives_a_reopen() {
        let (leader_dir, follower_dir) = (scratch(), scratch());
        let leader = open(&leader_dir);
        apply_put(&leader, 1, "a", "1");
        apply_put(&leader, 2, "b", "2");
        let snapshot = SnapshotBuilder {
            storage: leader.storage.clone(),
        }
        .build()
        .unwrap();
        let follower = open(&follower_dir);
        apply_put(&follower, 1, "stale", "x");

        follower
            .install(&snapshot.meta, snapshot.snapshot.get_ref().clone())
            .unwrap();
        assert_eq!(
            follower.reader().contents().unwrap(),
            leader.reader().contents().unwrap()
        );
        assert_eq!(
            row_count(&follower, &follower.storage.kv),
            2,
            "the old generation stays"
        );
        drop(follower);

        let follower = open(&follower_dir);
        assert_eq!(
            follower.reader().contents().unwrap(),
            leader.reader().contents().unwrap()
        );
        let kept = follower
            .current_snapshot()
            .unwrap()
            .expect("a current snapshot");
        assert_eq!(kept.meta, snapshot.meta);
        assert_eq!(kept.snapshot.get_ref(), snapshot.snapshot.get_ref());
    }

    #[test]
    fn a_damaged_or_mismatched_snapshot_changes_nothing() {
        let (leader_dir, follower_dir) = (scratch(), scratch());
        let leader = open(&leader_dir);
        apply_put(&leader, 1, "a", "1");
        let snapshot = SnapshotBuilder {
            storage: leader.storage.clone(),
        }
        .build()
        .unwrap();
        let follower = open(&follower_dir);
        apply_put(&follower, 1, "mine", "x");
        let before = follower.reader().contents().unwrap();

        let mut damaged = snapshot.snapshot.get_ref().clone();
        damaged[20] ^= 0x10;
        let refused = follower.install(&snapshot.meta, damaged).unwrap_err();
        assert!(matches!(refused, StoreError::Snapshot(_)), "{refused}");
        let mut other_meta = snapshot.meta.clone();
        other_meta.last_log_id = Some(log_id(9, 9, 99));
        let refused = follower
            .install(&other_meta, snapshot.snapshot.get_ref().clone())
            .unwrap_err();
        assert!(
            matches!(refused, StoreError::SnapshotMismatch { .. }),
            "{refused}"
        );

        assert_eq!(follower.reader().contents().unwrap(), before);
        assert!(follower.current_snapshot().unwrap().is_none());
    }

    #[test]
    fn a_build_older_than_the_current_snapshot_does_not_replace_it() {
        let dir = scratch();
        let sm = open(&dir);
        apply_put(&sm, 1, "a", "1");
        let (older_meta, older_bytes) =
            sm.storage.read(|tx| encode_state(tx, &sm.storage)).unwrap();
        apply_put(&sm, 2, "b", "2");
        let newer = SnapshotBuilder {
            storage: sm.storage.clone(),
        }
        .build()
        .unwrap();

        // The older build finishes last, as if it had raced an install.
        keep_snapshot(
            &sm.storage,
            &older_meta,
            &older_bytes,
            Switch::UnlessNewerExists,
            |_| Ok(()),
        )
        .unwrap();
        let current = sm.current_snapshot().unwrap().expect("a current snapshot");
        assert_eq!(current.meta, newer.meta);
        let newer_rows = chunk_rows(0, newer.snapshot.get_ref()).len();
        assert_eq!(
            row_count(&sm, &sm.storage.snapshots),
            newer_rows,
            "the older rows stayed"
        );
    }
}
