//! One node's Rebound database and its tables, and the two ways this
//! crate runs a transaction: a writer retried on serialization conflicts,
//! and a reader on a consistent snapshot (`begin_read_only`).

use crate::error::StoreError;
use rebound::{Database, Options, Table, TableOptions, Transaction};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Bytes of every chunk-table value: large byte strings are split into
/// rows of this size (`rows.rs`), a choice made when Rebound stored values
/// in fixed slots of the table's `max_value_len` (a table sized for 1 MiB
/// values spent a megabyte per small log entry); the formats keep it.
pub(crate) const CHUNK_BYTES: usize = 1024;
/// A chunk row's key: an 8-byte big-endian sequence (log index or
/// snapshot number) then a 4-byte big-endian chunk number.
pub(crate) const CHUNK_KEY_LEN: usize = 12;
/// Generation prefix of every key in the kv table (`state_machine.rs`).
pub(crate) const GENERATION_LEN: usize = 4;
/// Small values of the meta tables (vote, log ids, membership, snapshot
/// descriptors), JSON-encoded.
const META_VALUE_LEN: u32 = 16 * 1024;
/// Attempts of a writer that keeps hitting serialization conflicts.
const MAX_ATTEMPTS: usize = 64;
/// How long a reader retries for a snapshot that sees this node's newest
/// commit before it gives up (`StoreError::StaleRead`).
const FRESH_READ_PATIENCE: Duration = Duration::from_secs(10);

pub(crate) const LOG_TABLE: &str = "raft_log";
pub(crate) const LOG_META_TABLE: &str = "raft_log_meta";
pub(crate) const KV_TABLE: &str = "kv";
pub(crate) const SM_META_TABLE: &str = "sm_meta";
pub(crate) const SNAPSHOT_TABLE: &str = "sm_snapshot";

/// The database of one node and handles to its tables.
pub struct NodeStorage {
    db: Database,
    /// The serial-order id of the newest commit of [`NodeStorage::write`],
    /// which every later [`NodeStorage::read`] must see.
    newest_commit: AtomicU64,
    pub(crate) log: Table,
    pub(crate) log_meta: Table,
    pub(crate) kv: Table,
    pub(crate) sm_meta: Table,
    pub(crate) snapshots: Table,
}

impl NodeStorage {
    /// Opens or creates the database in `dir` and the tables it lacks.
    pub fn open(dir: &Path, options: Options) -> Result<Arc<NodeStorage>, StoreError> {
        let db = Database::open(dir, options)?;
        let chunks = TableOptions::default()
            .max_key_len(CHUNK_KEY_LEN as u32)
            .max_value_len(CHUNK_BYTES as u32);
        let meta = TableOptions::default()
            .max_key_len(32)
            .max_value_len(META_VALUE_LEN);
        let kv = TableOptions::default()
            .max_key_len((GENERATION_LEN + crate::MAX_KEY_LEN) as u32)
            .max_value_len(crate::MAX_VALUE_LEN as u32);
        Ok(Arc::new(NodeStorage {
            log: table(&db, LOG_TABLE, chunks)?,
            log_meta: table(&db, LOG_META_TABLE, meta)?,
            kv: table(&db, KV_TABLE, kv)?,
            sm_meta: table(&db, SM_META_TABLE, meta)?,
            snapshots: table(&db, SNAPSHOT_TABLE, chunks)?,
            db,
            newest_commit: AtomicU64::new(0),
        }))
    }

    /// The database, for statistics or a backup.
    pub fn database(&self) -> &Database {
        &self.db
    }

    /// Runs `work` in a read-write transaction and commits it, durable
    /// when this returns `Ok`. On a serialization conflict the whole of
    /// `work` runs again in a fresh transaction, so it must not have side
    /// effects outside the transaction.
    pub(crate) fn write<T>(
        &self,
        mut work: impl FnMut(&mut Transaction<'_>) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let mut session = self.db.session()?;
        let mut attempt = 1;
        loop {
            let mut tx = session.begin();
            let outcome = match work(&mut tx) {
                Ok(value) => self.commit(tx).map(|()| value),
                Err(e) => {
                    tx.abort();
                    Err(e)
                }
            };
            match outcome {
                Err(e) if e.is_conflict() && attempt < MAX_ATTEMPTS => attempt += 1,
                other => return other,
            }
        }
    }

    /// `tx.commit()`, noting the commit's place in the serial order.
    fn commit(&self, tx: Transaction<'_>) -> Result<(), StoreError> {
        let pending = tx.commit_deferred()?;
        let id = pending.id();
        pending.wait()?;
        if let Some(id) = id {
            self.newest_commit.fetch_max(id, Ordering::AcqRel);
        }
        Ok(())
    }

    /// Runs `work` in a read-only snapshot transaction: one consistent
    /// cut of every table, which never conflicts with writers, and which
    /// sees every commit of [`write`](Self::write) that returned before
    /// this was called. (An MVTO snapshot that meets an older writer
    /// still running after `rebound::FRESH_PATIENCE` starts below it,
    /// without the newest commits; openraft needs an appended entry to be
    /// readable once `append` returned, so such a snapshot is dropped and
    /// another one begun.)
    pub(crate) fn read<T>(
        &self,
        work: impl FnOnce(&mut Transaction<'_>) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let must_see = self.newest_commit.load(Ordering::Acquire);
        let deadline = Instant::now() + FRESH_READ_PATIENCE;
        let mut session = self.db.session()?;
        loop {
            let mut tx = session.begin_read_only();
            if tx.id() > must_see {
                let value = work(&mut tx)?;
                tx.commit()?;
                return Ok(value);
            }
            drop(tx);
            if Instant::now() >= deadline {
                return Err(StoreError::StaleRead(FRESH_READ_PATIENCE));
            }
        }
    }
}

/// The table called `name`, created with `options` if it is missing. An
/// existing table must hold what `options` allows: a node whose tables
/// are narrower would refuse requests the others apply.
fn table(db: &Database, name: &str, options: TableOptions) -> Result<Table, StoreError> {
    let Some(table) = db.table(name)? else {
        return Ok(db.create_table(name, options)?);
    };
    let found = table.options();
    if found.max_key_len < options.max_key_len || found.max_value_len < options.max_value_len {
        return Err(StoreError::IncompatibleTable {
            name: name.into(),
            found: (found.max_key_len, found.max_value_len),
            wanted: (options.max_key_len, options.max_value_len),
        });
    }
    Ok(table)
}

/// A fresh directory for a test database, on tmpfs when there is one
/// (where the log-free design emulates persistent memory).
#[cfg(test)]
pub(crate) fn scratch_dir() -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    let root = if shm.is_dir() {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    };
    tempfile::tempdir_in(root).expect("a temporary directory")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_table_narrower_than_needed_is_refused() {
        let dir = scratch_dir();
        let db = Database::open(dir.path(), Options::default()).unwrap();
        let narrow = TableOptions::default().max_key_len(8).max_value_len(16);
        db.create_table(KV_TABLE, narrow).unwrap();
        drop(db);
        match NodeStorage::open(dir.path(), Options::default()) {
            Err(StoreError::IncompatibleTable { name, found, .. }) => {
                assert_eq!((name.as_str(), found), (KV_TABLE, (8, 16)));
            }
            Err(other) => panic!("expected IncompatibleTable, got {other}"),
            Ok(_) => panic!("a narrow kv table was accepted"),
        }
    }

    #[test]
    fn a_read_sees_the_newest_write_while_an_older_writer_runs_on() {
        let dir = scratch_dir();
        let storage = NodeStorage::open(dir.path(), Options::default()).unwrap();
        let (begun, older_begun) = std::sync::mpsc::channel();
        std::thread::scope(|scope| {
            let older_writer = scope.spawn(|| {
                let mut session = storage.db.session().unwrap();
                let mut older = session.begin();
                older.put(&storage.kv, b"elsewhere", b"1").unwrap();
                begun.send(()).unwrap();
                // Runs on until a snapshot has started below it.
                while storage.db.stats().snapshots.started_stale == 0 {
                    std::thread::yield_now();
                }
                older.abort();
            });
            older_begun.recv().unwrap();
            storage
                .write(|tx| Ok(tx.put(&storage.log_meta, b"newest", b"2")?))
                .unwrap();
            let seen = storage.read(|tx| Ok(tx.get(&storage.log_meta, b"newest")?));
            assert_eq!(seen.unwrap(), Some(b"2".to_vec()));
            older_writer.join().unwrap();
        });
    }
}
