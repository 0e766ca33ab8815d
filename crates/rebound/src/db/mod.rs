//! The public API: databases, tables, sessions, transactions, their
//! options and statistics; secondary indexes in `secondary`. Nothing here
//! knows which design runs: `Options::into_config` names it once, and
//! `design::open` builds the engine that runs it.

mod backup;
mod export;
mod integrity;
mod options;
mod secondary;
mod stats;

pub use backup::BackupStats;
use backup::IndexDefinitions;
pub use export::ExportStats;
pub use integrity::IntegrityReport;
pub use options::{Durability, MediumChoice, Options, MIN_MAX_SIZE};
pub use secondary::{Index, IndexOptions, IndexStats};
pub use stats::{SnapshotStats, Stats, TableStats};

use crate::checkpoint::CheckpointStats;
use crate::design::RecoveryReport;
use crate::design::{self, Engine};
use crate::error::Result;
use crate::gc::GcStats;
use crate::heap::TableOptions;
use crate::index::MAX_KEY_LEN;
use crate::medium::Guarantee;
use crate::txn::{
    owned_range, prefix_end, Anchor, Cursor, PendingCommit, Permit, TableRt, TxnState,
};
use std::ops::{Bound, ControlFlow, RangeBounds};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

// The heap sizes its read buffers by the index's key limit.
const _: () = assert!(crate::heap::MAX_KEY_BYTES == MAX_KEY_LEN);

/// Name of the data file inside a database directory.
pub const DATA_FILE: &str = design::DATA_FILE;
/// Largest value a table may be defined to hold (64 MiB).
pub const MAX_VALUE_LEN: u32 = crate::heap::MAX_VALUE_BYTES;
/// Largest value a table holds by default: `MAX_VALUE_LEN` (values above
/// a 64 KiB record go out of line, so the limit costs small rows nothing).
pub const DEFAULT_MAX_VALUE_LEN: u32 = crate::heap::DEFAULT_MAX_VALUE_BYTES;

/// A handle to a table; cheap to clone.
#[derive(Clone)]
pub struct Table {
    rt: Arc<TableRt>,
}

impl Table {
    pub fn name(&self) -> &str {
        &self.rt.heap.def.name
    }
    pub fn options(&self) -> TableOptions {
        let def = &self.rt.heap.def;
        TableOptions {
            max_key_len: def.max_key_len,
            max_value_len: def.max_value_len,
            block_slots: def.slots_per_block,
        }
    }
    /// Number of keys in the primary index (including keys deleted by
    /// transactions whose index clean-up is deferred).
    pub fn approximate_len(&self) -> usize {
        self.rt.index().len()
    }

    #[cfg(test)]
    pub(crate) fn rt(&self) -> &Arc<TableRt> {
        &self.rt
    }
}

/// An open database; cheap to clone and share between threads. When the
/// last handle (sessions hold one too) is dropped, background work stops.
pub struct Database {
    inner: Arc<Engine>,
    durability: Durability,
    /// As opened: a backup opens its copy with them.
    options: Arc<Options>,
}

impl Clone for Database {
    fn clone(&self) -> Self {
        self.inner.add_handle();
        Database {
            inner: self.inner.clone(),
            durability: self.durability,
            options: self.options.clone(),
        }
    }
}

impl Drop for Database {
    fn drop(&mut self) {
        self.inner.drop_handle();
    }
}

impl Database {
    /// Opens (or creates) the database in directory `path`. Options are
    /// checked first: one out of range, or one the chosen durability does
    /// not read set away from its default, is `Error::InvalidOption`.
    pub fn open(path: impl AsRef<Path>, options: Options) -> Result<Database> {
        let durability = options.durability;
        let kept = Arc::new(options.clone());
        let inner = design::open(path.as_ref(), options.into_config()?)?;
        Ok(Database {
            inner,
            durability,
            options: kept,
        })
    }

    /// Blocks until every index is fully in DRAM after a restart; returns
    /// the time from the start of `open` until that happened.
    pub fn wait_for_indexes(&self) -> Option<Duration> {
        self.inner.wait_for_indexes();
        self.inner.indexes_loaded_after()
    }

    /// When every primary index was fully in DRAM after a restart, from
    /// the start of `open`, without waiting for it. `None` while the load
    /// runs, when there was no checkpoint to load, when the load failed
    /// (the table is then damaged), or, with background loading off,
    /// until [`wait_for_indexes`](Self::wait_for_indexes) has loaded them.
    pub fn indexes_loaded_after(&self) -> Option<Duration> {
        self.inner.indexes_loaded_after()
    }

    /// Takes an index checkpoint now (the background thread also takes them).
    /// With [`Durability::Wal`] this writes a snapshot and recycles the
    /// log it covers (`entries` are its rows).
    pub fn checkpoint(&self) -> Result<CheckpointStats> {
        self.inner.check_writable()?;
        self.inner.design().checkpoint(&self.inner)
    }

    /// Runs one round of block GC now, whatever the batch size, and its
    /// checkpoint; blocks still reachable by running transactions are
    /// freed by a later round or by the background thread.
    pub fn collect_garbage(&self) -> Result<GcStats> {
        self.check_open()?;
        self.inner.collect_garbage()
    }

    /// Does one round of the background thread's work now, in the calling
    /// thread (see [`Options::background_thread`](Options#structfield.background_thread)): reaps settled
    /// deletions, flags and moves long transactions, runs a GC round if
    /// enough blocks qualify, and takes a checkpoint if one is due. Every
    /// step runs; the first error is returned.
    pub fn run_maintenance(&self) -> Result<()> {
        self.inner.check_writable()?;
        self.inner.maintain(false)
    }

    /// Statistics of the most recent checkpoint of this process.
    pub fn last_checkpoint(&self) -> Option<CheckpointStats> {
        self.inner.last_checkpoint()
    }

    /// Creates a table; durable when this returns.
    pub fn create_table(&self, name: &str, options: TableOptions) -> Result<Table> {
        self.inner.check_writable()?;
        let rt = self.inner.create_table(name, options)?;
        Ok(Table { rt })
    }

    /// Drops the table called `name` (`NoSuchTable` if there is none):
    /// durable when this returns, and whole or not at all after a crash.
    /// Its name is free at once, handles to it give `NoSuchTable` (but in
    /// snapshots that began before the drop, which still read it), and its
    /// space returns once no transaction or snapshot older than the drop
    /// runs (at the next maintenance round, `collect_garbage`, or open).
    /// Its id stays taken: dropped tables count towards the catalog's
    /// limit of tables.
    pub fn drop_table(&self, name: &str) -> Result<()> {
        self.inner.drop_table(name)
    }

    /// The table called `name`, if it exists; `Corrupt` if its recovered
    /// data was found damaged (never presented as empty or absent).
    pub fn table(&self, name: &str) -> Result<Option<Table>> {
        self.check_open()?;
        let Some(rt) = self.inner.find_table(name) else {
            return Ok(None);
        };
        rt.check_damaged()?;
        Ok(Some(Table { rt }))
    }

    /// A snapshot, and the tables live when it began with their index
    /// definitions then (see `Engine::with_catalog_fixed`): what a backup
    /// or an export copies.
    pub(crate) fn snapshot_with_tables<'s>(
        &self,
        session: &'s mut Session,
    ) -> Result<(Transaction<'s>, Vec<(Table, IndexDefinitions)>)> {
        let (snapshot, tables) = self.inner.with_catalog_fixed(|| {
            let snapshot = session.begin_read_only();
            let live = self.inner.store().tables().filter(|t| !t.is_dropped());
            let tables: Vec<_> = live.map(|rt| Table { rt: rt.clone() }).collect();
            let defined = tables.into_iter().map(|t| {
                let indexes = self.index_definitions(&t);
                (t, indexes)
            });
            (snapshot, defined.collect::<Vec<_>>())
        });
        for (table, _) in &tables {
            table.rt.check_damaged()?;
        }
        Ok((snapshot, tables))
    }

    /// Names of all tables, in creation order.
    pub fn table_names(&self) -> Vec<String> {
        self.inner
            .store()
            .tables()
            .filter(|t| !t.is_dropped())
            .map(|t| t.heap.def.name.clone())
            .collect()
    }

    /// A session for the calling thread, bound to its own region.
    pub fn session(&self) -> Result<Session> {
        self.check_open()?;
        let worker = self.inner.claim_worker()?;
        Ok(Session {
            db: self.clone(),
            worker,
        })
    }

    /// Counters and storage figures; walks every block's obsolete bitmap.
    pub fn stats(&self) -> Stats {
        stats::of(&self.inner)
    }

    /// What a successful commit survives.
    pub fn guarantee(&self) -> Guarantee {
        self.inner.design().guarantee(&self.inner)
    }

    pub fn durability(&self) -> Durability {
        self.durability
    }

    /// What the last open had to do, phase by phase.
    pub fn recovery_report(&self) -> &RecoveryReport {
        self.inner.design().report()
    }

    /// Size of the medium in bytes; with [`Durability::Wal`], of the log
    /// segments and the snapshot in force.
    pub fn medium_size(&self) -> u64 {
        self.inner.design().bytes(&self.inner)
    }

    pub fn path(&self) -> Option<&Path> {
        self.inner.path()
    }

    /// Stops accepting work and makes everything durable. Sessions still
    /// held afterwards get [`Error::Closed`]. The files stay locked until
    /// the last handle (sessions and transactions included) is dropped:
    /// an abort then still writes to them.
    pub fn close(&self) -> Result<()> {
        self.inner.close()
    }

    fn check_open(&self) -> Result<()> {
        self.inner.check_open()
    }

    /// Test hook: makes the background thread panic at its next tick, to
    /// check that the database then refuses work with `Error::Poisoned`.
    #[doc(hidden)]
    #[doc(hidden)]
    pub fn inject_background_panic(&self) {
        self.inner.request_background_panic();
    }

    #[cfg(test)]
    pub(crate) fn engine(&self) -> &Arc<Engine> {
        &self.inner
    }
}

/// A thread's connection to the database, owning one region per table.
pub struct Session {
    db: Database,
    worker: usize,
}

impl Session {
    /// Starts a transaction; one at a time per session. On a database
    /// opened read-only, a snapshot (`begin_read_only`).
    pub fn begin(&mut self) -> Transaction<'_> {
        // Nothing can write: a snapshot reads what a reader would.
        if self.db.inner.is_read_only() {
            return self.begin_read_only();
        }
        // Admitted before the timestamp is taken: a transaction that
        // waited starts as young as any.
        let permit = self.db.inner.store().admit();
        let state = TxnState::begin(self.db.inner.store(), self.worker);
        self.transaction(state, permit)
    }

    /// Starts a read-only transaction on a snapshot: it sees every
    /// transaction committed before it (under MVTO, unless a writer older
    /// than those runs on past [`FRESH_PATIENCE`]: then it sees the serial
    /// order up to that writer), leaves no marks, never conflicts and
    /// never makes a writer conflict. Writes fail with
    /// [`Error::ReadOnly`](crate::Error::ReadOnly); `commit` (or dropping
    /// it) ends it. While open it keeps GC from freeing what it can see
    /// (`Stats::snapshots`), not checkpoints or relocation.
    ///
    /// [`FRESH_PATIENCE`]: crate::FRESH_PATIENCE
    pub fn begin_read_only(&mut self) -> Transaction<'_> {
        let permit = self.db.inner.store().admit_snapshot();
        let state = TxnState::begin_snapshot(self.db.inner.store(), self.worker);
        self.transaction(state, permit)
    }

    /// A snapshot at the timestamp of `anchor`'s, which must stay open
    /// until this one has begun: another thread's share of one snapshot
    /// (a backup's copying threads).
    pub(crate) fn begin_read_only_beside(&mut self, anchor: Anchor) -> Transaction<'_> {
        let permit = self.db.inner.store().admit_snapshot();
        let state = TxnState::begin_snapshot_beside(self.db.inner.store(), self.worker, anchor);
        self.transaction(state, permit)
    }

    /// The handle of a transaction just begun; one on a closed database
    /// can only fail.
    fn transaction<'s>(&'s self, mut state: TxnState<'s>, permit: Permit<'s>) -> Transaction<'s> {
        if let Err(e) = self.db.check_open() {
            state.poison(e);
        }
        Transaction {
            state,
            db: &self.db.inner,
            _permit: permit,
        }
    }

    /// The worker (region) number this session writes to.
    pub fn worker(&self) -> usize {
        self.worker
    }

    pub fn database(&self) -> &Database {
        &self.db
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.db.inner.release_worker(self.worker);
    }
}

/// A serializable transaction. Dropping it without `commit` aborts it.
pub struct Transaction<'s> {
    state: TxnState<'s>,
    db: &'s Engine,
    /// Its place among the transactions admitted to run.
    _permit: Permit<'s>,
}

impl<'s> Transaction<'s> {
    /// This transaction's timestamp (its id); a snapshot's is the one
    /// it reads at: it sees the commits below it.
    pub fn id(&self) -> u64 {
        self.state.id()
    }

    /// Whether this is a snapshot ([`Session::begin_read_only`]).
    pub fn is_read_only(&self) -> bool {
        self.state.is_snapshot()
    }

    /// Whether this snapshot started stale: under MVTO, a writer older
    /// than a commit acknowledged before the snapshot began was still
    /// running after [`FRESH_PATIENCE`], and the snapshot reads below it
    /// (a consistent prefix of the serial order that may lack such
    /// commits). Begin another one to see them once that writer ends.
    /// Always false for read-write transactions and under OCC.
    ///
    /// [`FRESH_PATIENCE`]: crate::FRESH_PATIENCE
    pub fn is_stale_snapshot(&self) -> bool {
        self.state.is_stale_snapshot()
    }

    /// A snapshot's anchor (see `Session::begin_read_only_beside`).
    pub(crate) fn anchor(&self) -> Anchor {
        self.state.anchor()
    }

    pub fn get(&mut self, table: &Table, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.state.get(&table.rt, key)
    }

    /// Reads `key`'s value into `out`, reusing its capacity: a loop that
    /// keeps one buffer reads without allocating. Returns false, leaving
    /// `out` unspecified, if the key is absent.
    pub fn get_into(&mut self, table: &Table, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        self.state.get_into(&table.rt, key, out)
    }

    /// Calls `read` with `key`'s value, borrowed from a buffer the session
    /// reuses, and returns what it returns (`None` if the key is absent).
    /// No allocation once the buffer has grown to the table's values.
    ///
    /// ```no_run
    /// # use rebound::{Database, Options, TableOptions};
    /// # let db = Database::open("/dev/shm/doc-get-with", Options::default())?;
    /// # let accounts = db.create_table("accounts", TableOptions::default())?;
    /// # let mut session = db.session()?;
    /// let mut tx = session.begin();
    /// let balance = tx.get_with(&accounts, b"alice", |value| value.len())?;
    /// # Ok::<(), rebound::Error>(())
    /// ```
    pub fn get_with<R>(
        &mut self,
        table: &Table,
        key: &[u8],
        read: impl FnOnce(&[u8]) -> R,
    ) -> Result<Option<R>> {
        self.state.get_with(&table.rt, key, read)
    }

    /// Inserts a new key; [`Error::DuplicateKey`] if it exists.
    pub fn insert(&mut self, table: &Table, key: &[u8], value: &[u8]) -> Result<()> {
        self.prepare_write(table, key, value)?;
        self.state.insert(&table.rt, key, value)
    }

    /// Replaces the value of an existing key; [`Error::KeyNotFound`] otherwise.
    pub fn update(&mut self, table: &Table, key: &[u8], value: &[u8]) -> Result<()> {
        self.prepare_write(table, key, value)?;
        self.state.update(&table.rt, key, value)
    }

    /// Inserts or replaces; returns whether the key existed.
    pub fn put(&mut self, table: &Table, key: &[u8], value: &[u8]) -> Result<bool> {
        self.prepare_write(table, key, value)?;
        self.state.put(&table.rt, key, value)
    }

    /// Deletes a key; returns whether it existed.
    pub fn delete(&mut self, table: &Table, key: &[u8]) -> Result<bool> {
        self.state.delete(&table.rt, key)
    }

    /// Deletes every key in `range`; returns how many there were. One
    /// transaction's work, so atomic across a crash and serializable like
    /// a scan of the range followed by its deletes (no older transaction
    /// adds a key to the range afterwards). The tombstones are reclaimed
    /// like any deletion's. The range's keys are held in memory: delete a
    /// range of millions of keys in a few transactions of sub-ranges.
    pub fn delete_range<K: AsRef<[u8]>>(
        &mut self,
        table: &Table,
        range: impl RangeBounds<K>,
    ) -> Result<u64> {
        let mut keys = Vec::new();
        self.scan_with(table, range, usize::MAX, |key, _| {
            keys.push(key.to_vec());
            ControlFlow::Continue(())
        })?;
        for key in &keys {
            self.delete(table, key)?;
        }
        Ok(keys.len() as u64)
    }

    /// Up to `limit` live entries with keys in `range`, ascending; the
    /// same reads as taking `limit` entries from [`range`](Self::range).
    pub fn scan<K: AsRef<[u8]>>(
        &mut self,
        table: &Table,
        range: impl RangeBounds<K>,
        limit: usize,
    ) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        self.state
            .range(table.rt.clone(), owned_range(range), limit)?
            .take(limit)
            .collect()
    }

    /// Calls `visit` with each of up to `limit` live entries with keys in
    /// `range`, ascending, until it returns [`ControlFlow::Break`]; returns
    /// how many entries it was called with. The same reads as
    /// [`scan`](Self::scan), but the key and value are lent from buffers
    /// that the session keeps between transactions, so once they have
    /// grown a scan allocates once per index batch, not per entry. The
    /// first batch asks for `limit` entries (at most 1024) and gap-marks
    /// what it reads, so a caller that stops early should pass a tight
    /// `limit`.
    ///
    /// ```no_run
    /// # use std::ops::ControlFlow;
    /// # fn demo(tx: &mut rebound::Transaction<'_>, t: &rebound::Table) -> rebound::Result<()> {
    /// let mut total = 0u64;
    /// tx.scan_with(t, b"a".as_slice()..b"m".as_slice(), usize::MAX, |_key, value| {
    ///     total += value.len() as u64;
    ///     ControlFlow::Continue(())
    /// })?;
    /// # Ok(()) }
    /// ```
    pub fn scan_with<K: AsRef<[u8]>>(
        &mut self,
        table: &Table,
        range: impl RangeBounds<K>,
        limit: usize,
        mut visit: impl FnMut(&[u8], &[u8]) -> ControlFlow<()>,
    ) -> Result<usize> {
        let mut cursor = self
            .state
            .range(table.rt.clone(), owned_range(range), limit)?;
        let mut visited = 0;
        while visited < limit {
            let Some(flow) = cursor.next_with(&mut visit) else {
                break;
            };
            visited += 1;
            if flow?.is_break() {
                break;
            }
        }
        Ok(visited)
    }

    /// A cursor over the live entries with keys in `range`, in key order;
    /// `.rev()` (or `next_back`) gives descending order. Entries are
    /// fetched lazily, so a cursor dropped early reads little more than it
    /// returned. Any byte-key range works: `..`, `a..b`, `a..=b`,
    /// `(Bound::Excluded(a), Bound::Unbounded)`, ...; a range whose start
    /// is above its end is empty.
    ///
    /// ```no_run
    /// # fn demo(tx: &mut rebound::Transaction<'_>, t: &rebound::Table) -> rebound::Result<()> {
    /// for entry in tx.range(t, b"a".as_slice()..b"m".as_slice())?.rev() {
    ///     let (key, value) = entry?;
    ///     println!("{key:?} = {value:?}");
    /// }
    /// # Ok(()) }
    /// ```
    pub fn range<K: AsRef<[u8]>>(
        &mut self,
        table: &Table,
        range: impl RangeBounds<K>,
    ) -> Result<Cursor<'_, 's>> {
        self.state.range(table.rt.clone(), owned_range(range), 0)
    }

    /// A cursor over the live entries whose keys start with `prefix`.
    pub fn prefix(&mut self, table: &Table, prefix: &[u8]) -> Result<Cursor<'_, 's>> {
        let upper = prefix_end(prefix).map_or(Bound::Unbounded, Bound::Excluded);
        self.range(table, (Bound::Included(prefix.to_vec()), upper))
    }

    /// Makes the transaction durable, then visible. `Ok` means it survives
    /// any crash the medium's [`Guarantee`] covers.
    pub fn commit(self) -> Result<()> {
        let Transaction { state, _permit, .. } = self;
        let pending = state.commit_deferred();
        // Nothing is held while the commit becomes durable: the place goes
        // to the next transaction.
        drop(_permit);
        pending?.wait()
    }

    /// Commits without waiting for durability: the transaction is visible
    /// when this returns, and durable once [`PendingCommit::wait`] returns
    /// `Ok`. A thread can begin its next transaction meanwhile, so that in
    /// the `wal` design its work overlaps the log's flush; in the other
    /// designs the commit is already durable. Errors are those of
    /// [`Transaction::commit`].
    ///
    /// ```
    /// # fn demo(db: &rebound::Database, t: &rebound::Table) -> rebound::Result<()> {
    /// let mut session = db.session()?;
    /// let mut previous: Option<rebound::PendingCommit> = None;
    /// for batch in 0..4u64 {
    ///     let mut tx = session.begin();
    ///     tx.put(t, &batch.to_be_bytes(), b"row")?;
    ///     let pending = tx.commit_deferred()?;
    ///     if let Some(done) = previous.replace(pending) {
    ///         done.wait()?; // batch - 1 is acknowledged here
    ///     }
    /// }
    /// previous.map_or(Ok(()), |last| last.wait())
    /// # }
    /// ```
    pub fn commit_deferred(self) -> Result<PendingCommit> {
        self.state.commit_deferred()
    }

    pub fn abort(self) {
        self.state.abort()
    }
}
