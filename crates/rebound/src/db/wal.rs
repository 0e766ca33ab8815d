//! The `wal` design at the database level: opening (newest snapshot, then
//! the log after it), logging table and index creation, and snapshots
//! that bound the log. Formats and invariants are in `crate::wal`.

use super::{Database, DbInner, IndexOptions, Table, TableOptions, DATA_FILE};
use crate::catalog::{IndexDef, TableDef, MAX_SESSIONS, MAX_WORKERS};
use crate::error::{Error, Result};
use crate::heap::TableHeap;
use crate::index::BTree;
use crate::medium::Guarantee;
use crate::recovery::RecoveryReport;
use crate::txn::Store;
use crate::wal::record::{self, Record, TableSpec};
use crate::wal::snapshot::{self, Snapshot, SnapshotWriter};
use crate::wal::{segment, Log, LogConfig, Resume};
use parking_lot::{Condvar, Mutex};
use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Name of the lock file that marks a directory as a `wal` database.
pub const WAL_LOCK_FILE: &str = "LOCK";
/// The DDL records' buffer, after every worker's.
const DDL_RING: usize = MAX_WORKERS;
/// How long a snapshot waits for older transactions before giving up
/// (the next attempt starts over).
const SNAPSHOT_PATIENCE: Duration = Duration::from_secs(10);
/// Transaction id of the versions loaded from a snapshot: older than any
/// transaction of this process (the clock restarts after the snapshot).
const LOADED_TXN: u64 = 1;
/// Recovery threads at most: each takes a session and a heap region.
const MAX_RECOVERY_THREADS: usize = 16;
/// Attempts of a recovery transaction, alongside the other recovery
/// threads, before it is left for when they are done.
const APPLY_TRIES: u32 = 100;
/// Rows applied per recovery transaction.
const APPLY_BATCH: usize = 1024;

/// Whether a recovery batch that keeps conflicting is left for later.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Defer {
    Yes,
    No,
}

/// Per (table, key), the newest logged version after the snapshot: its
/// timestamp and value (`None`: deleted).
type Newest = HashMap<LoggedKey, LoggedVersion>;
/// A key of a table.
type LoggedKey = (u32, Vec<u8>);
/// A logged version: timestamp and value (`None`: deleted).
type LoggedVersion = (u64, Option<Vec<u8>>);

/// The log, the snapshot bookkeeping and the snapshot thread.
pub(super) struct WalState {
    pub log: Arc<Log>,
    dir: PathBuf,
    guarantee: Guarantee,
    /// Log bytes written since the last snapshot that trigger the next.
    snapshot_after: u64,
    /// Number of the snapshot in force; held while one is written.
    newest_snapshot: Mutex<u64>,
    /// `Log::written` when the last snapshot started.
    written_at_snapshot: AtomicU64,
    snapshots: AtomicU64,
    /// Size of the snapshot in force.
    snapshot_bytes: AtomicU64,
    stop: Arc<(Mutex<bool>, Condvar)>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
    _lock: File,
}

/// What the directory held, read before the store is built.
pub(super) struct WalFound {
    dir: PathBuf,
    lock: File,
    snapshot: Option<Snapshot>,
    /// Tables and indexes created after the snapshot, in log order.
    tables: Vec<TableSpec>,
    indexes: Vec<IndexDef>,
    newest: Newest,
    resume: Resume,
    max_ts: u64,
    log_records: u64,
    read_time: Duration,
}

impl WalFound {
    /// The first timestamp the reopened clock may hand out.
    pub fn next_ts(&self) -> u64 {
        self.max_ts + 1
    }
}

/// Locks and reads a `wal` database directory (creating it if asked).
pub(super) fn read_directory(dir: &Path, create: bool) -> Result<WalFound> {
    let started = Instant::now();
    let lock = lock_directory(dir, create)?;
    let snapshot = snapshot::read_newest(dir)?;
    let from = snapshot.as_ref().map_or(0, |s| s.ts);
    let mut found = WalFound {
        dir: dir.to_path_buf(),
        lock,
        max_ts: from,
        snapshot: None,
        tables: Vec::new(),
        indexes: Vec::new(),
        newest: HashMap::new(),
        resume: Resume {
            segments: Vec::new(),
            next_segment: 1,
            next_round: 1,
        },
        log_records: 0,
        read_time: Duration::ZERO,
    };
    found.resume = segment::replay(dir, |rec| found.take(rec, from))?;
    found.snapshot = snapshot;
    found.read_time = started.elapsed();
    Ok(found)
}

impl WalFound {
    /// Keeps what a log record adds to the snapshot taken at `from`.
    fn take(&mut self, rec: Record<'_>, from: u64) -> Result<()> {
        self.log_records += 1;
        match rec {
            Record::Commit { ts, writes } => {
                self.max_ts = self.max_ts.max(ts);
                if ts < from {
                    return Ok(());
                }
                for entry in writes {
                    let (table, bytes) = entry.ok_or_else(|| malformed("a commit entry"))?;
                    let slot = crate::heap::decode_bytes(bytes)
                        .filter(|s| s.txn == ts)
                        .ok_or_else(|| malformed("a logged version"))?;
                    let value = (!slot.tombstone).then(|| slot.value.to_vec());
                    let newest = self.newest.entry((table, slot.key.to_vec()));
                    let newest = newest.or_insert((0, None));
                    if newest.0 < ts {
                        *newest = (ts, value);
                    }
                }
            }
            Record::Table { ts, spec } => {
                self.max_ts = self.max_ts.max(ts);
                if ts >= from {
                    self.tables.push(spec);
                }
            }
            Record::Index { ts, def } => {
                self.max_ts = self.max_ts.max(ts);
                if ts >= from {
                    self.indexes.push(def);
                }
            }
            Record::Rows { .. } => return Err(malformed("rows in the log")),
        }
        Ok(())
    }
}

fn malformed(what: &str) -> Error {
    Error::Corrupt(format!("redo log: {what} does not decode"))
}

/// Creates or checks the directory and takes its lock: a directory that
/// holds anything but a `wal` database is refused, not written to.
fn lock_directory(dir: &Path, create: bool) -> Result<File> {
    super::ensure_directory(dir, create)?;
    let lock_path = dir.join(WAL_LOCK_FILE);
    if dir.join(DATA_FILE).exists() {
        return Err(Error::NotADatabase(format!(
            "{} holds a log-free database, not a wal one",
            dir.display()
        )));
    }
    if !lock_path.exists() && std::fs::read_dir(dir)?.next().is_some() {
        return Err(Error::NotADatabase(format!(
            "{} is not empty and holds no database",
            dir.display()
        )));
    }
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&lock_path)?;
    if file.try_lock().is_err() {
        return Err(Error::Locked);
    }
    File::open(dir)?.sync_all()?;
    Ok(file)
}

impl Database {
    /// Rebuilds the tables from what `read_directory` found, then starts
    /// the log (and the snapshot thread when background work runs).
    pub(super) fn open_wal(
        &self,
        found: WalFound,
        options: &super::Options,
        started: Instant,
    ) -> Result<RecoveryReport> {
        let applied_at = Instant::now();
        let WalFound {
            dir,
            lock,
            snapshot,
            tables,
            indexes,
            newest,
            resume,
            log_records,
            read_time,
            ..
        } = found;
        let mut all_indexes = Vec::new();
        let mut rows = 0;
        let threads = std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .clamp(1, MAX_RECOVERY_THREADS);
        if let Some(snapshot) = &snapshot {
            rows = self.load_snapshot(snapshot, &mut all_indexes, threads)?;
        }
        let loaded_after = applied_at.elapsed();
        let replay_started = Instant::now();
        for spec in &tables {
            match self.inner.store.tables.get(spec.id as usize) {
                // Created after the snapshot's timestamp but before it
                // captured the catalog: it is in the snapshot already.
                Some(rt) if rt.heap.def.name == spec.name => {}
                Some(_) => return Err(Error::Corrupt(format!("table {} logged twice", spec.id))),
                None => drop(self.create_logged_table(spec)?),
            }
        }
        for def in indexes {
            let known = all_indexes
                .iter()
                .any(|d: &IndexDef| d.table == def.table && d.number == def.number);
            if !known {
                all_indexes.push(def);
            }
        }
        let replayed = newest.len() as u64;
        self.apply_log(newest, threads)?;
        let replayed_after = replay_started.elapsed();
        let indexes_started = Instant::now();
        for def in &all_indexes {
            self.create_logged_index(def)?;
        }
        let indexes_after = indexes_started.elapsed();
        let log = Arc::new(Log::start(
            &dir,
            MAX_WORKERS + 1,
            resume,
            LogConfig {
                segment_bytes: (options.wal_log_limit / 8).clamp(1 << 16, 64 << 20),
                sync: true,
            },
        )?);
        let _ = self.inner.store.log.set(log.clone());
        let guarantee = match crate::medium::on_tmpfs(&dir) {
            true => Guarantee::ProcessCrash,
            false => Guarantee::PowerLoss,
        };
        let state = WalState {
            log,
            guarantee,
            snapshot_after: (options.wal_log_limit / 2).max(1),
            newest_snapshot: Mutex::new(snapshot.as_ref().map_or(0, |s| s.number)),
            written_at_snapshot: AtomicU64::new(0),
            snapshots: AtomicU64::new(0),
            snapshot_bytes: AtomicU64::new(snapshot.as_ref().map_or(0, |s| s.len())),
            stop: Arc::new((Mutex::new(false), Condvar::new())),
            thread: Mutex::new(None),
            dir,
            _lock: lock,
        };
        if self.inner.wal.set(state).is_err() {
            return Err(Error::InvalidOption("the log was started twice".into()));
        }
        if options.background_thread {
            self.start_snapshot_thread();
        }
        Ok(RecoveryReport {
            fresh: snapshot.is_none() && log_records == 0,
            from_checkpoint: snapshot.is_some(),
            checkpoint_sequence: snapshot.as_ref().map_or(0, |s| s.number),
            redo_from_txn: snapshot.as_ref().map_or(0, |s| s.ts),
            metadata: read_time,
            undo_redo: replayed_after,
            index_build: loaded_after + indexes_after,
            total: started.elapsed(),
            tables: self.inner.store.tables.count(),
            versions_scanned: log_records,
            versions_committed: replayed,
            checkpoint_entries: rows,
            ..Default::default()
        })
    }

    /// Creates the snapshot's tables and loads its rows straight into
    /// their heaps and bottom-up built indexes, each table split into key
    /// ranges loaded by `threads` threads (LeanStore's parallel redo,
    /// §3.7); its indexes are left in `indexes` to be built once the log
    /// is applied too.
    fn load_snapshot(
        &self,
        snapshot: &Snapshot,
        indexes: &mut Vec<IndexDef>,
        threads: usize,
    ) -> Result<u64> {
        let bad = |what: &str| Error::Corrupt(format!("snapshot: {what}"));
        let mut specs: Vec<TableSpec> = Vec::new();
        let mut rows: Vec<Vec<(&[u8], &[u8])>> = Vec::new();
        for rec in snapshot.records() {
            match rec.ok_or_else(|| bad("a record does not decode"))? {
                Record::Table { spec, .. } => {
                    specs.push(spec);
                    rows.push(Vec::new());
                }
                Record::Index { def, .. } => indexes.push(def),
                Record::Rows { table, rows: chunk } => {
                    let table_rows = rows
                        .get_mut(table as usize)
                        .ok_or_else(|| bad("rows of an unknown table"))?;
                    for row in chunk {
                        table_rows.push(row.ok_or_else(|| bad("a row does not decode"))?);
                    }
                }
                Record::Commit { .. } => return Err(bad("holds a commit record")),
            }
        }
        let mut loaded = 0;
        for (spec, table_rows) in specs.iter().zip(&rows) {
            let store = &self.inner.store;
            let table = self.create_table_with(&spec.name, spec_options(spec), |def| {
                check_rows(&def, table_rows)?;
                load_rows(store, def, table_rows, threads)
            })?;
            check_id(&table, spec)?;
            loaded += table_rows.len() as u64;
        }
        Ok(loaded)
    }

    /// Applies the newest logged version of every key. Keys are sorted and
    /// split into `threads` contiguous ranges, one session each, so that
    /// threads meet only in the leaves at range ends (spread keys would
    /// put every thread's inserts into the same gaps, and two threads
    /// retrying against each other can keep conflicting). A batch that
    /// still conflicts is applied afterwards, when no other thread runs.
    fn apply_log(&self, newest: Newest, threads: usize) -> Result<()> {
        let tables: Vec<Table> = self
            .inner
            .store
            .tables
            .iter()
            .map(|(_, rt)| Table { rt: rt.clone() })
            .collect();
        let mut versions: Vec<_> = newest.into_iter().collect();
        versions.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        let per_thread = versions.len().div_ceil(threads).max(1);
        let deferred = std::thread::scope(|scope| {
            let handles: Vec<_> = versions
                .chunks(per_thread)
                .enumerate()
                .map(|(part, versions)| {
                    let tables = &tables;
                    scope.spawn(move || self.apply_versions(tables, versions, part, Defer::Yes))
                })
                .collect();
            // Every thread joined before any error returns: a scope left
            // with a panicked thread unjoined would panic itself.
            let outcomes: Vec<_> = handles
                .into_iter()
                .map(|h| h.join().unwrap_or_else(|_| Err(loader_panicked())))
                .collect();
            let mut deferred = Vec::new();
            for outcome in outcomes {
                deferred.extend(outcome?);
            }
            Ok::<_, Error>(deferred)
        })?;
        for batch in deferred {
            self.apply_versions(&tables, batch, 0, Defer::No)?;
        }
        Ok(())
    }

    /// Applies `versions` (range number `part`) in batches, each tried up
    /// to `APPLY_TRIES` times on a conflict; returns the batches that kept
    /// conflicting if `defer` allows, else fails with the conflict.
    fn apply_versions<'v>(
        &self,
        tables: &[Table],
        versions: &'v [(LoggedKey, LoggedVersion)],
        part: usize,
        defer: Defer,
    ) -> Result<Vec<&'v [(LoggedKey, LoggedVersion)]>> {
        let mut session = self.session()?;
        let mut deferred = Vec::new();
        for batch in versions.chunks(APPLY_BATCH) {
            let mut tried = 1;
            loop {
                match apply_batch(&mut session, tables, batch) {
                    Err(Error::Conflict) if tried < APPLY_TRIES => {
                        // Threads retrying in step keep meeting: stagger them.
                        let pause = u64::from(tried.min(10)) * (part as u64 + 1);
                        std::thread::sleep(Duration::from_micros(pause));
                        tried += 1;
                    }
                    Err(Error::Conflict) if defer == Defer::Yes => {
                        deferred.push(batch);
                        break;
                    }
                    outcome => break outcome?,
                }
            }
        }
        Ok(deferred)
    }

    fn create_logged_table(&self, spec: &TableSpec) -> Result<Table> {
        let table = self.create_table(&spec.name, spec_options(spec))?;
        check_id(&table, spec)?;
        Ok(table)
    }

    fn create_logged_index(&self, def: &IndexDef) -> Result<()> {
        let table = self
            .inner
            .store
            .tables
            .get(def.table as usize)
            .map(|rt| Table { rt: rt.clone() })
            .ok_or_else(|| Error::Corrupt(format!("index {} of unknown table", def.name)))?;
        if table.rt.secondaries.count() > def.number as usize {
            return Err(Error::Corrupt(format!(
                "index {} recreated out of order",
                def.name
            )));
        }
        // A failed `create_index` left its number unused.
        while table.rt.secondaries.count() < def.number as usize {
            table
                .rt
                .secondaries
                .push(Arc::new(crate::txn::SecondaryRt::placeholder()));
        }
        let options = IndexOptions::from_parts(def.parts.clone(), def.unique);
        let index = self.create_index(&table, &def.name, options)?;
        if index.number() != def.number {
            return Err(Error::Corrupt(format!(
                "index {} recreated out of order",
                def.name
            )));
        }
        Ok(())
    }

    fn start_snapshot_thread(&self) {
        let Some(wal) = self.inner.wal.get() else {
            return;
        };
        let weak = Arc::downgrade(&self.inner);
        let stop = wal.stop.clone();
        let handle = std::thread::Builder::new()
            .name("rebound-snapshot".into())
            .spawn(move || snapshot_loop(weak, stop));
        *wal.thread.lock() = handle.ok();
    }
}

/// Takes a snapshot whenever enough log was written since the last one.
fn snapshot_loop(weak: std::sync::Weak<DbInner>, stop: Arc<(Mutex<bool>, Condvar)>) {
    loop {
        {
            let mut stopped = stop.0.lock();
            if *stopped {
                return;
            }
            stop.1.wait_for(&mut stopped, Duration::from_millis(20));
            if *stopped {
                return;
            }
        }
        let Some(inner) = weak.upgrade() else {
            return;
        };
        let Some(wal) = inner.wal.get() else {
            return;
        };
        let since = wal.log.written() - wal.written_at_snapshot.load(Ordering::Acquire);
        if since >= wal.snapshot_after {
            if let Err(e) = inner.take_snapshot() {
                inner.note_failure(super::BackgroundWork::Checkpoint, &e);
            }
        }
    }
}

/// What one snapshot wrote.
#[derive(Debug, Clone, Copy)]
pub struct SnapshotStats {
    pub number: u64,
    pub ts: u64,
    pub rows: u64,
    pub bytes: u64,
}

impl DbInner {
    /// Writes a snapshot of every table as a read-only transaction sees
    /// them, puts it in place, and recycles the log it covers.
    pub(super) fn take_snapshot(&self) -> Result<SnapshotStats> {
        let wal = self
            .wal
            .get()
            .ok_or_else(|| Error::InvalidOption("not a wal database".into()))?;
        let mut newest = wal.newest_snapshot.lock();
        let number = *newest + 1;
        let worker = self.claim_worker()?;
        let outcome = self.write_snapshot(wal, worker, number);
        // The background thread may have flagged the slot as a long
        // transaction; the next session must not inherit that.
        self.store.long[worker].store(crate::txn::LONG_NONE, Ordering::SeqCst);
        self.sessions.lock()[worker] = false;
        let stats = outcome?;
        *newest = number;
        wal.snapshots.fetch_add(1, Ordering::AcqRel);
        self.checkpoints.fetch_add(1, Ordering::AcqRel);
        wal.snapshot_bytes.store(stats.bytes, Ordering::Release);
        Ok(stats)
    }

    fn write_snapshot(&self, wal: &WalState, worker: usize, number: u64) -> Result<SnapshotStats> {
        let written = wal.log.written();
        // Announced before it is read, as a transaction's begin does, so
        // GC's low-water mark never passes it.
        self.store.active[worker].store(self.store.clock.peek(), Ordering::SeqCst);
        let at = self.store.clock.peek();
        self.store.active[worker].store(at, Ordering::SeqCst);
        let outcome = self.write_rows_as_of(wal, worker, number, at);
        self.store.active[worker].store(0, Ordering::SeqCst);
        let (rows, bytes) = outcome?;
        wal.written_at_snapshot.store(written, Ordering::Release);
        wal.log.recycle_before(at)?;
        snapshot::remove_older(&wal.dir, number)?;
        Ok(SnapshotStats {
            number,
            ts: at,
            rows,
            bytes,
        })
    }

    /// Once every transaction older than `at` ended (each one durable if
    /// it committed), writes what is visible at `at`.
    fn write_rows_as_of(
        &self,
        wal: &WalState,
        worker: usize,
        number: u64,
        at: u64,
    ) -> Result<(u64, u64)> {
        let deadline = Instant::now() + SNAPSHOT_PATIENCE;
        while self
            .store
            .oldest_running_except(worker)
            .is_some_and(|ts| ts < at)
        {
            if Instant::now() > deadline {
                return Err(Error::Conflict);
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        // Every table that exists now: an older transaction may have
        // written to one created after `at`, and its rows are visible at
        // `at`. Replay skips the records of tables and indexes the
        // snapshot already has.
        let (catalog, tables) = {
            let _ddl = self.create_lock.lock();
            let tables: Vec<_> = self.store.tables.iter().map(|(_, t)| t.clone()).collect();
            (self.catalog_records(at), tables)
        };
        let mut writer = SnapshotWriter::create(&wal.dir, number, at)?;
        for encoded in &catalog {
            writer.catalog_record(encoded)?;
        }
        for table in &tables {
            let id = table.heap.def.id;
            self.store
                .rows_as_of(table, at, |key, value| writer.row(id, key, value))?;
        }
        writer.finish()
    }

    /// A snapshot taken on request, reported like a checkpoint.
    pub(super) fn snapshot_as_checkpoint(&self) -> Result<crate::checkpoint::CheckpointStats> {
        let started = Instant::now();
        let taken = self.take_snapshot()?;
        let stats = crate::checkpoint::CheckpointStats {
            sequence: taken.number,
            t_low: taken.ts,
            duration: started.elapsed(),
            entries: taken.rows,
            bytes: taken.bytes,
            chain_length: 1,
            ..Default::default()
        };
        *self.last_checkpoint.lock() = Some(stats.clone());
        Ok(stats)
    }

    /// Encoded table and index records of the whole catalog.
    fn catalog_records(&self, ts: u64) -> Vec<Vec<u8>> {
        let mut records = Vec::new();
        for (_, table) in self.store.tables.iter() {
            let mut buf = Vec::new();
            record::encode_table(&mut buf, ts, &table_spec(&table.heap.def));
            records.push(buf);
        }
        for (_, table) in self.store.tables.iter() {
            for (_, index) in table.secondaries.iter() {
                if !index.is_dropped() {
                    let mut buf = Vec::new();
                    record::encode_index(&mut buf, ts, &index.def);
                    records.push(buf);
                }
            }
        }
        records
    }

    fn claim_worker(&self) -> Result<usize> {
        let mut sessions = self.sessions.lock();
        let worker = sessions
            .iter()
            .position(|used| !used)
            .ok_or(Error::TooManySessions(MAX_SESSIONS))?;
        sessions[worker] = true;
        Ok(worker)
    }

    /// Logs a created table or index and waits until the record is
    /// durable; nothing to do outside the `wal` design or during replay.
    pub(super) fn log_ddl(&self, encode: impl FnOnce(&mut Vec<u8>, u64)) -> Result<()> {
        let Some(wal) = self.wal.get() else {
            return Ok(());
        };
        let ts = self.store.clock.next(&self.store.medium)?;
        let ticket = wal.log.append(DDL_RING, |buf| {
            encode(buf, ts);
            ts
        });
        wal.log.wait(ticket)
    }

    /// At close: a last snapshot if anything was logged since the one in
    /// force and no transaction is open (so the next open replays
    /// nothing), then the log stops.
    pub(super) fn close_wal(&self) -> Result<()> {
        let Some(wal) = self.wal.get() else {
            return Ok(());
        };
        self.stop_snapshot_thread();
        // A transaction still open can no longer commit (its commit meets
        // the closed log); a snapshot would wait for it, so the next open
        // replays the log instead.
        let idle = self.store.oldest_running().is_none();
        let snapshot =
            match idle && wal.log.written() > wal.written_at_snapshot.load(Ordering::Acquire) {
                true => self.take_snapshot().map(|_| ()),
                false => Ok(()),
            };
        // Stopped either way: every commit is in the log already.
        let stopped = wal.log.shutdown();
        snapshot.and(stopped)
    }

    pub(super) fn stop_snapshot_thread(&self) {
        let Some(wal) = self.wal.get() else {
            return;
        };
        *wal.stop.0.lock() = true;
        wal.stop.1.notify_all();
        if let Some(handle) = wal.thread.lock().take() {
            let _ = handle.join();
        }
    }

    /// Bytes on disk: the segments kept and the snapshot in force.
    pub(super) fn wal_bytes(&self) -> Option<u64> {
        self.wal
            .get()
            .map(|w| w.log.retained_bytes() + w.snapshot_bytes.load(Ordering::Acquire))
    }

    pub(super) fn wal_guarantee(&self) -> Option<Guarantee> {
        self.wal.get().map(|w| w.guarantee)
    }

    /// Log and snapshot figures, for `Stats`.
    pub(super) fn wal_stats(&self) -> Option<WalStats> {
        self.wal.get().map(|w| WalStats {
            log_bytes_written: w.log.written(),
            group_commits: w.log.frames(),
            log_bytes_retained: w.log.retained_bytes(),
            snapshots: w.snapshots.load(Ordering::Acquire),
        })
    }
}

/// Figures of the `wal` design's log.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub struct WalStats {
    /// Frame bytes written since open.
    pub log_bytes_written: u64,
    /// Frames written since open; each is one `fdatasync`.
    pub group_commits: u64,
    /// Bytes of the segment files still kept (what recovery would read).
    pub log_bytes_retained: u64,
    /// Snapshots taken since open.
    pub snapshots: u64,
}

pub(super) fn table_spec(def: &crate::catalog::TableDef) -> TableSpec {
    TableSpec {
        id: def.id,
        name: def.name.clone(),
        max_key_len: def.max_key_len,
        max_value_len: def.max_value_len,
        slots_per_block: def.slots_per_block,
    }
}

fn spec_options(spec: &TableSpec) -> TableOptions {
    TableOptions::default()
        .max_key_len(spec.max_key_len)
        .max_value_len(spec.max_value_len)
        .block_slots(spec.slots_per_block)
}

fn check_id(table: &Table, spec: &TableSpec) -> Result<()> {
    match table.rt.heap.def.id == spec.id {
        true => Ok(()),
        false => Err(Error::Corrupt(format!(
            "table {} was logged as id {} but recreated as {}",
            spec.name, spec.id, table.rt.heap.def.id
        ))),
    }
}

fn loader_panicked() -> Error {
    Error::Corrupt("a recovery thread panicked".into())
}

/// Snapshot rows must be what the table can hold, in strictly ascending
/// key order (the bottom-up build relies on it).
fn check_rows(def: &TableDef, rows: &[(&[u8], &[u8])]) -> Result<()> {
    let fits = |(key, value): &(&[u8], &[u8])| {
        (1..=def.max_key_len as usize).contains(&key.len())
            && value.len() <= def.max_value_len as usize
    };
    let ascending = rows.windows(2).all(|w| w[0].0 < w[1].0);
    match ascending && rows.iter().all(fits) {
        true => Ok(()),
        false => Err(Error::Corrupt(format!(
            "snapshot: rows of table {} are out of order or too long",
            def.name
        ))),
    }
}

/// Appends the rows to the table's heap as versions older than every
/// transaction of this process, `threads` contiguous key ranges at once
/// (each into its own region), and builds the index bottom-up.
fn load_rows(
    store: &Store,
    def: TableDef,
    rows: &[(&[u8], &[u8])],
    threads: usize,
) -> Result<(TableHeap, BTree)> {
    let heap = TableHeap::new(def);
    let per_thread = rows.len().div_ceil(threads).max(1);
    let parts: Vec<Result<IndexEntries>> = std::thread::scope(|scope| {
        let handles: Vec<_> = rows
            .chunks(per_thread)
            .enumerate()
            .map(|(region, part)| {
                let heap = &heap;
                scope.spawn(move || append_rows(store, heap, region, part))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err(loader_panicked())))
            .collect()
    });
    let mut entries = Vec::with_capacity(rows.len());
    for part in parts {
        entries.extend(part?);
    }
    Ok((heap, BTree::bulk_load_parallel(&entries, threads)))
}

/// `(key, version address)` pairs for a bottom-up index build.
type IndexEntries<'r> = Vec<(&'r [u8], u64)>;

fn append_rows<'r>(
    store: &Store,
    heap: &TableHeap,
    region: usize,
    rows: &[(&'r [u8], &[u8])],
) -> Result<IndexEntries<'r>> {
    let mut slot = Vec::new();
    let mut entries = Vec::with_capacity(rows.len());
    for &(key, value) in rows {
        heap.encode(&mut slot, LOADED_TXN, key, value, false);
        let addr = heap.append(&store.medium, &store.space, region, LOADED_TXN, &slot)?;
        entries.push((key, addr.0));
    }
    Ok(entries)
}

fn apply_batch(
    session: &mut super::Session,
    tables: &[Table],
    batch: &[(LoggedKey, LoggedVersion)],
) -> Result<()> {
    let mut tx = session.begin();
    for ((table, key), (_, value)) in batch {
        let table = tables
            .get(*table as usize)
            .ok_or_else(|| Error::Corrupt(format!("redo log: unknown table {table}")))?;
        match value {
            Some(value) => tx.put(table, key, value).map(|_| ())?,
            None => tx.delete(table, key).map(|_| ())?,
        }
    }
    tx.commit()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::TableOptions;

    /// A `wal` database on tmpfs with no background thread, and a table.
    fn wal_table() -> (tempfile::TempDir, Database, Table) {
        let dir = tempfile::tempdir_in("/dev/shm").unwrap();
        let options = crate::Options::default()
            .durability(crate::Durability::Wal)
            .background_thread(false);
        let db = Database::open(dir.path(), options).unwrap();
        let table_options = TableOptions::default().max_key_len(8).max_value_len(8);
        let table = db.create_table("kv", table_options).unwrap();
        (dir, db, table)
    }

    /// Recovery applies the log with one thread per contiguous key range;
    /// threads meet in the leaves at range ends and in the gaps there.
    /// Many threads over few keys make those meetings common; every key
    /// must still end with its newest logged version, deletes included.
    #[test]
    fn recovery_threads_meeting_in_shared_leaves_apply_every_key() {
        let (_dir, db, table) = wal_table();
        let id = table.rt.heap.def.id;
        for round in 0..20u64 {
            let newest: Newest = (0..600u64)
                .map(|key| {
                    let value =
                        (key % 7 != round % 7).then(|| (key * round).to_le_bytes().to_vec());
                    ((id, key.to_be_bytes().to_vec()), (round, value))
                })
                .collect();
            db.apply_log(newest, MAX_RECOVERY_THREADS).unwrap();
            let mut session = db.session().unwrap();
            let mut tx = session.begin();
            let rows = tx.scan::<&[u8]>(&table, .., usize::MAX).unwrap();
            tx.commit().unwrap();
            let expected: Vec<_> = (0..600u64)
                .filter(|key| key % 7 != round % 7)
                .map(|key| {
                    (
                        key.to_be_bytes().to_vec(),
                        (key * round).to_le_bytes().to_vec(),
                    )
                })
                .collect();
            assert_eq!(rows, expected, "round {round}");
        }
    }

    /// A batch that keeps meeting another writer is handed back rather
    /// than failing recovery, and goes in once that writer is gone.
    #[test]
    fn a_batch_that_keeps_conflicting_is_deferred_then_applied() {
        let (_dir, db, table) = wal_table();
        let tables = [table.clone()];
        let key = 5u64.to_be_bytes().to_vec();
        let versions = [(
            (table.rt.heap.def.id, key.clone()),
            (1, Some(b"logged".to_vec())),
        )];
        let mut writer = db.session().unwrap();
        let mut holding = writer.begin();
        holding.put(&table, &key, b"pending").unwrap();
        let deferred = db
            .apply_versions(&tables, &versions, 0, Defer::Yes)
            .unwrap();
        assert_eq!(deferred.len(), 1, "the batch meets the pending write");
        assert!(matches!(
            db.apply_versions(&tables, &versions, 0, Defer::No),
            Err(Error::Conflict)
        ));
        holding.abort();
        assert!(db
            .apply_versions(&tables, deferred[0], 0, Defer::No)
            .unwrap()
            .is_empty());
        let mut session = db.session().unwrap();
        let mut tx = session.begin();
        assert_eq!(
            tx.get(&table, &key).unwrap().as_deref(),
            Some(&b"logged"[..])
        );
        tx.commit().unwrap();
    }
}
