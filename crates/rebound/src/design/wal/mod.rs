//! The `wal` design (LeanStore's logging; FIR's "DRAM-DB (Log)"):
//! versions and indexes in DRAM, a redo log with group commit, and
//! snapshots that bound the log.
//!
//! * Write path and durability point: `txn` appends each commit's redo
//!   record to the log (`crate::wal::log`), and the commit is durable when
//!   its group's frame is synced.
//! * Recovery: [`open`] here (newest snapshot chain, then the log after
//!   it; the rows are served in place and loaded in the background).
//! * Background work: the snapshot thread, folds of the snapshot chain.
//!
//! Formats and invariants of the files are in `crate::wal`.

use super::engine::{BackgroundWork, ColdLoad, Parts};
use super::report::{self, RecoveryReport};
use super::{secondary, Config, Design, Engine, GcGuard, WalConfig, DATA_FILE};
use crate::catalog::{IndexDef, MAX_WORKERS};
use crate::checkpoint::CheckpointStats;
use crate::error::{Error, Result};
use crate::heap::Addr;
use crate::heap::TableOptions;
use crate::index::BTree;
use crate::medium::{FileView, Guarantee, Medium};
use crate::parallel;
use crate::txn::{ColdEntries, Store, TableRt};
use crate::wal::newest::NewestVersions;
use crate::wal::record::Entries;
use crate::wal::record::{self, Record, TableSpec};
use crate::wal::snapshot::{Recovered, SnapshotChain, SnapshotWriter};
use crate::wal::{segment, FileSystem, Log, LogConfig, Resume, WalDir};
use parking_lot::{Condvar, Mutex};
use std::fs::{File, OpenOptions};
use std::ops::Bound;
use std::panic::AssertUnwindSafe;
use std::path::Path;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock, Weak};
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
/// Recovery and loader threads at most: each appends to its own region.
const MAX_RECOVERY_THREADS: usize = 16;
/// Deltas on a base after which they are folded into a new base (so that
/// a lookup served in place reads at most this many groups and one more).
const MAX_DELTAS: u64 = 8;

/// The `wal` design's own state: its log and snapshots once replayed,
/// and what opening did.
pub struct Wal {
    state: OnceLock<WalState>,
    report: OnceLock<RecoveryReport>,
}

/// The log, the snapshot bookkeeping and the snapshot thread.
struct WalState {
    pub log: Arc<Log>,
    dir: WalDir,
    guarantee: Guarantee,
    /// Log bytes written since the last snapshot that trigger the next.
    snapshot_after: u64,
    /// Number and timestamp of the newest snapshot in force ((0, 0):
    /// none); held while one is written.
    newest_snapshot: Mutex<(u64, u64)>,
    /// `Log::written` when the last snapshot started.
    written_at_snapshot: AtomicU64,
    snapshots: AtomicU64,
    /// Bytes of the snapshots in force, and of their base.
    snapshot_bytes: AtomicU64,
    base_bytes: AtomicU64,
    /// Deltas on top of the base.
    deltas_since_fold: AtomicU64,
    folds: AtomicU64,
    /// The fold running in the background, if any.
    fold: Mutex<Option<std::thread::JoinHandle<()>>>,
    /// Folds run in a thread of their own, else in the snapshot's caller
    /// (without background work, so that nothing runs unasked).
    fold_in_background: bool,
    engine: Weak<Engine>,
    stop: Arc<(Mutex<bool>, Condvar)>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
    /// Test hook: the next fold thread fails to spawn.
    #[cfg(test)]
    fail_fold_spawn: std::sync::atomic::AtomicBool,
    /// `None` on a simulated file system, which has no `flock`.
    _lock: Option<File>,
}

/// What the directory held, read before the store is built.
struct WalFound {
    dir: WalDir,
    lock: Option<File>,
    snapshot: Option<SnapshotChain>,
    /// Tables and indexes created after the snapshot, in log order.
    tables: Vec<TableSpec>,
    indexes: Vec<IndexDef>,
    /// The logged versions after the snapshot, newest per key once read.
    newest: NewestVersions,
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
fn read_directory(fs: &FileSystem, path: &Path, create: bool) -> Result<WalFound> {
    let dir = WalDir::new(fs.clone(), path);
    let started = Instant::now();
    let lock = lock_directory(&dir, create)?;
    let snapshot = SnapshotChain::open(&dir)?;
    read_log(dir, lock, snapshot, (false, started))
}

/// How often a read-only open reads the directory again when the writer
/// changed its files meanwhile, before it gives up with `Conflict`.
const READ_ONLY_ATTEMPTS: usize = 50;

/// Reads a `wal` directory without the lock and without changing
/// anything, beside a writer that may append, rotate segments and write
/// snapshots meanwhile. The log is append-only between snapshots, so
/// what was read is a prefix of it, unless the writer wrote a snapshot
/// (after which it removes segments) or started a segment meanwhile:
/// then the directory's file names changed, and it is read again.
fn read_directory_beside_writer(fs: &FileSystem, path: &Path) -> Result<WalFound> {
    let dir = WalDir::new(fs.clone(), path);
    check_read_only_directory(&dir)?;
    for _ in 0..READ_ONLY_ATTEMPTS {
        let before = dir.names()?;
        // A file removed under the read (by a snapshot or fold) shows as
        // a missing file or a link to none: the names tell.
        let started = Instant::now();
        let read = SnapshotChain::open_live(&dir)
            .and_then(|snapshot| read_log(dir.clone(), None, snapshot, (true, started)));
        if dir.names()? == before {
            return read;
        }
    }
    Err(Error::Conflict)
}

/// What a read-only open needs to find: a `wal` database.
fn check_read_only_directory(dir: &WalDir) -> Result<()> {
    if let Some(path) = dir.sim().is_none().then(|| dir.path()) {
        super::ensure_directory(path, false)?;
        if path.join(DATA_FILE).exists() {
            return Err(Error::NotADatabase(format!(
                "{} holds a log-free database, not a wal one",
                path.display()
            )));
        }
    }
    match dir.exists(WAL_LOCK_FILE) {
        true => Ok(()),
        false => Err(Error::NotADatabase(
            "the directory holds no wal database".into(),
        )),
    }
}

/// Reads the log after the snapshot chain; a `reader` changes nothing.
fn read_log(
    dir: WalDir,
    lock: Option<File>,
    snapshot: Option<SnapshotChain>,
    (reader, started): (bool, Instant),
) -> Result<WalFound> {
    let from = snapshot.as_ref().map_or(0, |s| s.newest().ts);
    let mut found = WalFound {
        dir: dir.clone(),
        lock,
        max_ts: from,
        snapshot: None,
        tables: Vec::new(),
        indexes: Vec::new(),
        newest: NewestVersions::default(),
        resume: Resume {
            segments: Vec::new(),
            next_segment: 1,
            next_round: 1,
        },
        log_records: 0,
        read_time: Duration::ZERO,
    };
    let threads = parallel::cores().clamp(1, MAX_RECOVERY_THREADS);
    let (resume, scans) = segment::replay(&dir, (threads, reader), LogScan::new, |scan, rec| {
        scan.take(rec, from)
    })?;
    found.resume = resume;
    for scan in scans {
        found.max_ts = found.max_ts.max(scan.max_ts);
        found.log_records += scan.records;
        found.tables.extend(scan.tables);
        found.indexes.extend(scan.indexes);
        found.newest.append(scan.newest);
    }
    found.snapshot = snapshot;
    found.read_time = started.elapsed();
    Ok(found)
}

/// What one segment adds to the snapshot.
struct LogScan {
    tables: Vec<TableSpec>,
    indexes: Vec<IndexDef>,
    newest: NewestVersions,
    max_ts: u64,
    records: u64,
}

impl LogScan {
    fn new(segment: Arc<FileView>) -> LogScan {
        LogScan {
            tables: Vec::new(),
            indexes: Vec::new(),
            newest: NewestVersions::in_view(segment),
            max_ts: 0,
            records: 0,
        }
    }

    /// Keeps what a log record adds to the snapshot taken at `from`.
    fn take(&mut self, rec: Record<'_>, from: u64) -> Result<()> {
        self.records += 1;
        match rec {
            Record::Commit { ts, writes } => {
                self.max_ts = self.max_ts.max(ts);
                if ts >= from {
                    let newest = &mut self.newest;
                    for_each_version(ts, writes, |table, key, value| {
                        newest.push_in_view(table, ts, key, value)
                    })?;
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
fn lock_directory(dir: &WalDir, create: bool) -> Result<Option<File>> {
    if dir.sim().is_some() {
        return lock_simulated(dir, create).map(|()| None);
    }
    let dir = dir.path();
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
    let existed = lock_path.exists();
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&lock_path)?;
    if file.try_lock().is_err() {
        return Err(Error::Locked);
    }
    // A new lock file marks a new database: its name must be durable
    // before anything is logged there. An existing one already is.
    if !existed {
        File::open(dir)?.sync_all()?;
    }
    Ok(Some(file))
}

/// `lock_directory` on a simulated file system: the same checks of what
/// it holds, and the lock file's name made durable the same way.
fn lock_simulated(dir: &WalDir, create: bool) -> Result<()> {
    if dir.exists(WAL_LOCK_FILE) {
        return Ok(());
    }
    if !dir.names()?.is_empty() {
        return Err(Error::NotADatabase(
            "the simulated file system holds no database".into(),
        ));
    }
    if !create {
        return Err(Error::NotADatabase(
            "the simulated file system is empty".into(),
        ));
    }
    dir.create(WAL_LOCK_FILE)?;
    dir.sync()
}

/// Opens (or creates) a `wal` database: reads the directory, builds an
/// empty store whose clock starts after everything logged, rebuilds the
/// tables from the snapshot chain and the log, then starts the log.
pub fn open(
    path: &Path,
    config: &Config,
    design: &WalConfig,
    instance: u64,
    started: Instant,
) -> Result<Arc<Engine>> {
    let found = match config.read_only {
        true => read_directory_beside_writer(&design.file_system, path)?,
        false => read_directory(&design.file_system, path, config.create_if_missing)?,
    };
    let medium = Medium::volatile(config.max_size.min(1 << 38), crate::catalog::DATA_START)?;
    report::format(&medium)?;
    let (store, _) = report::fresh(medium, instance, found.next_ts())?;
    let wal = Wal {
        state: OnceLock::new(),
        report: OnceLock::new(),
    };
    let engine = Engine::new(
        config,
        Parts {
            store,
            design: Box::new(wal),
            path: Some(path.to_path_buf()),
            gc_enabled: true,
            indexes_whole: false,
            started,
        },
    );
    let report = match replay(&engine, found, config, design, started) {
        Ok(report) => report,
        Err(e) => {
            // Nothing started may outlive a failed open.
            engine.drop_handle();
            return Err(e);
        }
    };
    let _ = of(&engine).report.set(report);
    Ok(engine)
}

/// The design of an engine this module opened.
fn of(engine: &Engine) -> &Wal {
    engine
        .design()
        .as_any()
        .downcast_ref::<Wal>()
        .expect("an engine opened by the wal design runs it")
}

/// Rebuilds the tables from what `read_directory` found, then starts the
/// log (and the snapshot thread when background work runs). The log's
/// newest versions and the snapshots' rows are served in place and loaded
/// in the background; nothing is applied before transactions are
/// admitted.
fn replay(
    engine: &Arc<Engine>,
    found: WalFound,
    config: &Config,
    design: &WalConfig,
    started: Instant,
) -> Result<RecoveryReport> {
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
    if let Some(snapshot) = &snapshot {
        create_snapshot_tables(engine, snapshot, &mut all_indexes)?;
    }
    let replay_started = Instant::now();
    for spec in &tables {
        replay_table(engine, spec)?;
    }
    for def in indexes {
        let known = all_indexes
            .iter()
            .any(|d: &IndexDef| d.table == def.table && d.number == def.number);
        if !known {
            all_indexes.push(def);
        }
    }
    let chain = ChainFigures::of(snapshot.as_ref());
    // The store's clock starts after everything the files hold (their
    // timestamps validated as txn ids), so every snapshot taken from now
    // on is above the chain's newest (`take_snapshot` asserts the order).
    assert!(
        engine.store().clock().peek() > chain.ts,
        "the clock restarts above the newest snapshot's ts {}",
        chain.ts
    );
    let mut newest = newest;
    newest.settle();
    let recovered = Arc::new(Recovered::new(newest, snapshot));
    serve_recovered(engine, &recovered, &all_indexes)?;
    let replayed_after = replay_started.elapsed();
    let indexes_started = Instant::now();
    // An index of a table dropped later goes with it.
    let live = |def: &&IndexDef| {
        engine
            .store()
            .get_table(def.table)
            .is_none_or(|t| !t.is_dropped())
    };
    for def in all_indexes.iter().filter(live) {
        create_logged_index(engine, def)?;
    }
    let indexes_after = indexes_started.elapsed();
    // A read-only open never writes: no log, no snapshots.
    if !config.read_only {
        start_log(engine, (dir, lock), resume, (config, design), &chain)?;
    }
    if engine.store().tables().any(|t| t.is_loading()) {
        let load = Box::new(RecoveredLoad(recovered.clone()));
        engine.start_cold_load(load, config.load_indexes_in_background);
    }
    Ok(RecoveryReport {
        fresh: chain.number == 0 && log_records == 0,
        from_checkpoint: chain.number != 0,
        checkpoint_sequence: chain.number,
        redo_from_txn: chain.ts,
        metadata: read_time,
        undo_redo: replayed_after,
        index_build: indexes_after,
        total: started.elapsed(),
        tables: engine.store().table_count(),
        versions_scanned: log_records,
        versions_committed: recovered.log_keys() as u64,
        checkpoint_entries: chain.rows,
        ..Default::default()
    })
}

/// Starts the log where replay left it, and the snapshot thread when
/// background work runs.
fn start_log(
    engine: &Arc<Engine>,
    (dir, lock): (WalDir, Option<File>),
    resume: Resume,
    (config, design): (&Config, &WalConfig),
    chain: &ChainFigures,
) -> Result<()> {
    let log = Arc::new(Log::start(
        &dir,
        MAX_WORKERS + 1,
        resume,
        LogConfig {
            segment_bytes: (design.log_limit / 8).clamp(1 << 16, 64 << 20),
            sync: true,
            epoch: design.epoch,
        },
        engine.poison_slot(),
    )?);
    engine.store().start_log(log.clone());
    // A simulated file system simulates power loss.
    let guarantee = match dir.sim().is_none() && crate::medium::on_tmpfs(dir.path()) {
        true => Guarantee::ProcessCrash,
        false => Guarantee::PowerLoss,
    };
    let state = WalState {
        log,
        guarantee,
        snapshot_after: (design.log_limit / 2).max(1),
        newest_snapshot: Mutex::new((chain.number, chain.ts)),
        written_at_snapshot: AtomicU64::new(0),
        snapshots: AtomicU64::new(0),
        snapshot_bytes: AtomicU64::new(chain.bytes),
        base_bytes: AtomicU64::new(chain.base_bytes),
        deltas_since_fold: AtomicU64::new(chain.deltas),
        folds: AtomicU64::new(0),
        fold: Mutex::new(None),
        fold_in_background: config.background_thread,
        engine: Arc::downgrade(engine),
        stop: Arc::new((Mutex::new(false), Condvar::new())),
        thread: Mutex::new(None),
        #[cfg(test)]
        fail_fold_spawn: std::sync::atomic::AtomicBool::new(false),
        dir,
        _lock: lock,
    };
    if of(engine).state.set(state).is_err() {
        return Err(Error::InvalidOption("the log was started twice".into()));
    }
    if config.background_thread {
        start_snapshot_thread(engine)?;
    }
    Ok(())
}

/// Creates the snapshot's tables, empty; its indexes are left in
/// `indexes` to be built once the log is applied.
fn create_snapshot_tables(
    engine: &Engine,
    snapshot: &SnapshotChain,
    indexes: &mut Vec<IndexDef>,
) -> Result<()> {
    let bad = |what: &str| Error::Corrupt(format!("snapshot: {what}"));
    for rec in snapshot.newest().catalog() {
        match rec.ok_or_else(|| bad("a catalog record does not decode"))? {
            Record::Table { spec, .. } => {
                let table = create_logged_table(engine, &spec)?;
                if spec.dropped {
                    drop_logged_table(engine, &table)?;
                }
            }
            Record::Index { def, .. } => indexes.push(def),
            Record::Rows { .. } | Record::Commit { .. } => {
                return Err(bad("holds rows or commits in its catalog"))
            }
        }
    }
    match snapshot
        .tables()
        .into_iter()
        .all(|id| engine.store().get_table(id).is_some())
    {
        true => Ok(()),
        false => Err(bad("rows of an unknown table")),
    }
}

/// Makes every table with rows in the log or the snapshots serve them in
/// place until they are loaded (the log's newest versions over the
/// snapshot chain). Tables with secondary indexes are loaded now: building
/// an index reads every row.
fn serve_recovered(
    engine: &Arc<Engine>,
    recovered: &Arc<Recovered>,
    indexes: &[IndexDef],
) -> Result<()> {
    let mut indexed = Vec::new();
    for id in recovered.tables() {
        let table = engine
            .store()
            .get_table(id)
            .ok_or_else(|| Error::Corrupt(format!("rows of unknown table {id}")))?;
        if table.is_dropped() {
            continue;
        }
        table.set_cold(Arc::new(SnapshotRun {
            snapshot: recovered.clone(),
            table: id,
            engine: Arc::downgrade(engine),
        }));
        if indexes.iter().any(|def| def.table == id) {
            indexed.push(table.clone());
        }
    }
    load_tables(engine.store(), recovered, &indexed, &|| false)
}

/// A table's create or drop record from the log. One at or after the
/// snapshot's timestamp may be in its catalog already, dropped even (a
/// snapshot reads the catalog after waiting for older transactions, so
/// a table created and dropped meanwhile is in it as dropped while both
/// records are above its timestamp).
fn replay_table(engine: &Engine, spec: &TableSpec) -> Result<()> {
    let twice = || Error::Corrupt(format!("table {} logged twice", spec.id));
    match (engine.store().get_table(spec.id), spec.dropped) {
        (Some(rt), _) if rt.heap.def.name != spec.name => Err(twice()),
        (Some(rt), true) if !rt.is_dropped() => drop_logged_table(engine, rt),
        (Some(_), _) => Ok(()),
        (None, false) => create_logged_table(engine, spec).map(drop),
        (None, true) => Err(Error::Corrupt(format!(
            "drop of table {}, which was never created",
            spec.id
        ))),
    }
}

/// Replays a drop: the table keeps its id and has no rows (the ones the
/// files hold for it are never loaded).
fn drop_logged_table(engine: &Engine, table: &TableRt) -> Result<()> {
    if table.is_loading() {
        return Err(Error::Corrupt(format!(
            "table {} is dropped after its rows",
            table.heap.def.id
        )));
    }
    crate::catalog::drop_table(engine.store().medium(), table.heap.def.id)?;
    table.mark_dropped(1);
    table.mark_reclaimable();
    Ok(())
}

fn create_logged_table(engine: &Engine, spec: &TableSpec) -> Result<Arc<TableRt>> {
    let table = engine
        .create_table(&spec.name, spec_options(spec))
        .map_err(refused_from_file)?;
    check_id(&table, spec)?;
    Ok(table)
}

fn create_logged_index(engine: &Engine, def: &IndexDef) -> Result<()> {
    let table = engine
        .store()
        .get_table(def.table)
        .cloned()
        .ok_or_else(|| Error::Corrupt(format!("index {} of unknown table", def.name)))?;
    if table.secondaries.count() > def.number as usize {
        return Err(Error::Corrupt(format!(
            "index {} recreated out of order",
            def.name
        )));
    }
    // A failed `create_index` left its number unused.
    while table.secondaries.count() < def.number as usize {
        table
            .secondaries
            .push(Arc::new(crate::txn::SecondaryRt::placeholder()));
    }
    let index = secondary::create_index(engine, &table, &def.name, def.parts.clone(), def.unique)
        .map_err(refused_from_file)?;
    if index.def.number != def.number {
        return Err(Error::Corrupt(format!(
            "index {} recreated out of order",
            def.name
        )));
    }
    Ok(())
}

/// Starts the snapshot thread; without it the log would grow without
/// bound, so a failed spawn fails the open.
fn start_snapshot_thread(engine: &Arc<Engine>) -> Result<()> {
    let Some(wal) = of(engine).state.get() else {
        return Ok(());
    };
    let weak = Arc::downgrade(engine);
    let stop = wal.stop.clone();
    let handle = std::thread::Builder::new()
        .name("rebound-snapshot".into())
        .spawn(move || watched("rebound-snapshot", weak, |weak| snapshot_loop(weak, stop)))?;
    *wal.thread.lock() = Some(handle);
    Ok(())
}

/// Runs `body`; a panic in it poisons the database (nobody else would
/// notice: the log would grow without bound, or a fold stop halfway) and
/// stops the log, so that commits under way fail too.
fn watched(name: &str, weak: Weak<Engine>, body: impl FnOnce(Weak<Engine>)) {
    let outcome = std::panic::catch_unwind(AssertUnwindSafe(|| body(weak.clone())));
    if let (Err(panic), Some(engine)) = (outcome, weak.upgrade()) {
        engine.poison(name, panic.as_ref());
        if let Some(wal) = of(&engine).state.get() {
            let why = crate::wal::log::panic_message(panic.as_ref());
            wal.log.stop_failed(&format!("{name} panicked: {why}"));
        }
    }
}

/// Takes a snapshot whenever enough log was written since the last one.
fn snapshot_loop(weak: Weak<Engine>, stop: Arc<(Mutex<bool>, Condvar)>) {
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
        let Some(engine) = weak.upgrade() else {
            return;
        };
        let design = of(&engine);
        let Some(wal) = design.state.get() else {
            return;
        };
        // A poisoned database takes no more snapshots: each would only
        // fail on the stopped log.
        if engine.poisoned_by().is_some() {
            return;
        }
        let since = wal.log.written() - wal.written_at_snapshot.load(Ordering::Acquire);
        if since >= wal.snapshot_after {
            if let Err(e) = design.take_snapshot(&engine) {
                engine.note_failure(BackgroundWork::Checkpoint, &e);
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

impl Wal {
    /// Writes a snapshot of what changed since the one in force (the
    /// first one holds everything), puts it in place, recycles the log it
    /// covers, and starts a fold if the chain grew long.
    fn take_snapshot(&self, engine: &Engine) -> Result<SnapshotStats> {
        let wal = self
            .state
            .get()
            .ok_or_else(|| Error::InvalidOption("not a wal database".into()))?;
        let mut newest = wal.newest_snapshot.lock();
        let (previous, since) = *newest;
        let number = previous + 1;
        let worker = engine.claim_worker()?;
        let outcome = self.write_snapshot(engine, wal, worker, number, (previous, since));
        // The background thread may have flagged the slot as a long
        // transaction; the next session must not inherit that.
        engine.store().clear_long_flag(worker);
        engine.release_worker(worker);
        let (stats, written) = outcome?;
        // A snapshot holds the versions from its predecessor's timestamp
        // to its own, so timestamps never go back (equal when no
        // transaction began in between); the chain's files are checked
        // for the same order when read back (`SnapshotChain`), and the
        // clock restarts above the newest (`replay`).
        assert!(
            stats.ts >= since && stats.number == previous + 1,
            "snapshot {} at ts {} follows snapshot {previous} at ts {since}",
            stats.number,
            stats.ts
        );
        // In force from its rename on: the next one builds on it, even if
        // recycling the log it covers fails below (a retry from the
        // previous one would miss what the recycled segments held).
        *newest = (number, stats.ts);
        wal.snapshots.fetch_add(1, Ordering::AcqRel);
        engine.count_checkpoint();
        wal.snapshot_bytes.fetch_add(stats.bytes, Ordering::AcqRel);
        match previous {
            0 => wal.base_bytes.store(stats.bytes, Ordering::Release),
            _ => drop(wal.deltas_since_fold.fetch_add(1, Ordering::AcqRel)),
        }
        wal.written_at_snapshot.store(written, Ordering::Release);
        let recycled = wal.log.recycle_before(stats.ts);
        drop(newest);
        self.fold_if_due(engine, wal);
        recycled?;
        Ok(stats)
    }

    fn write_snapshot(
        &self,
        engine: &Engine,
        wal: &WalState,
        worker: usize,
        number: u64,
        previous: (u64, u64),
    ) -> Result<(SnapshotStats, u64)> {
        let written = wal.log.written();
        // Announced as a transaction's begin is, so that the transactions
        // it waits for are exactly those older than it.
        engine
            .store()
            .announce(worker, engine.store().clock().peek());
        let at = engine.store().clock().peek();
        engine.store().announce(worker, at);
        let outcome = self.write_changes(engine, wal, worker, number, previous, at);
        engine.store().retire(worker);
        let (rows, bytes) = outcome?;
        let stats = SnapshotStats {
            number,
            ts: at,
            rows,
            bytes,
        };
        Ok((stats, written))
    }

    /// Once every transaction older than `at` ended and its commit is in
    /// the log files, writes the newest version of each key that such a
    /// transaction wrote at or after the previous snapshot's timestamp
    /// (deletions included, except in a base, which has no predecessor).
    fn write_changes(
        &self,
        engine: &Engine,
        wal: &WalState,
        worker: usize,
        number: u64,
        (previous, since): (u64, u64),
        at: u64,
    ) -> Result<(u64, u64)> {
        let deadline = Instant::now() + SNAPSHOT_PATIENCE;
        while engine
            .store()
            .oldest_running_except(worker)
            .is_some_and(|ts| ts < at)
        {
            if Instant::now() > deadline {
                return Err(Error::Conflict);
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        // Deferred commits may have ended before their records reached
        // the files.
        wal.log.wait_for_reads(at - 1)?;
        // Every table that exists now: an older transaction may have
        // written to one created after `at`, and its rows are visible at
        // `at`. Replay skips the records of tables and indexes the
        // snapshot already has.
        let (catalog, dropped) = {
            let _ddl = engine.create_lock();
            let dropped: Vec<u32> = engine
                .store()
                .tables()
                .filter(|t| t.is_dropped())
                .map(|t| t.heap.def.id)
                .collect();
            (catalog_records(engine, at), dropped)
        };
        let mut changed = NewestVersions::default();
        segment::scan(&wal.dir, |rec| match rec {
            Record::Commit { ts, writes } if (since..at).contains(&ts) => {
                for_each_version(ts, writes, |table, key, value| {
                    changed.push(table, ts, key, value)
                })
            }
            _ => Ok(()),
        })?;
        changed.settle();
        let mut writer = SnapshotWriter::create(&wal.dir, number, at, previous)?;
        for encoded in &catalog {
            writer.catalog_record(encoded)?;
        }
        for version in changed.versions() {
            if dropped.contains(&version.table) {
                continue;
            }
            let value = changed.value(version);
            if previous != 0 || value.is_some() {
                writer.row(version.table, changed.key(version), value)?;
            }
        }
        writer.finish()
    }

    /// Starts a fold of the snapshot chain, unless one runs already: of
    /// everything into a new base once the deltas add up to half the base
    /// (so that the files in force stay under 1.5 times the data), else
    /// of the deltas into one once there are `MAX_DELTAS` (so that a
    /// lookup served in place reads few files, at a cost that follows the
    /// changes, not the table).
    fn fold_if_due(&self, engine: &Engine, wal: &WalState) {
        let mut fold = wal.fold.lock();
        if fold.as_ref().is_some_and(|f| !f.is_finished()) {
            return;
        }
        if let Some(done) = fold.take() {
            let _ = done.join();
        }
        let deltas = wal.deltas_since_fold.load(Ordering::Acquire);
        let bytes = wal.snapshot_bytes.load(Ordering::Acquire);
        let base = wal.base_bytes.load(Ordering::Acquire);
        let whole = bytes - base.min(bytes) >= base / 2;
        if deltas < MAX_DELTAS && !whole {
            return;
        }
        let dir = wal.dir.clone();
        if !wal.fold_in_background {
            // Under the lock: two callers must not fold at once.
            let outcome = fold_chain(&dir, whole);
            drop(fold);
            self.fold_done(engine, outcome);
            return;
        }
        let weak = wal.engine.clone();
        let spawned = spawn_fold(wal, move || {
            watched("rebound-snapshot-fold", weak, |weak| {
                let outcome = fold_chain(&dir, whole);
                if let Some(engine) = weak.upgrade() {
                    of(&engine).fold_done(&engine, outcome);
                }
            })
        });
        // Nothing is left claimed by a failed spawn: the next snapshot
        // tries again.
        match spawned {
            Ok(handle) => *fold = Some(handle),
            Err(e) => engine.note_failure(BackgroundWork::Checkpoint, &e.into()),
        }
    }

    /// Takes a fold's result: the chain's bytes and deltas start over from
    /// its base.
    fn fold_done(&self, engine: &Engine, outcome: Result<FoldStats>) {
        let Some(wal) = self.state.get() else {
            return;
        };
        match outcome {
            Ok(fold) => {
                if fold.deltas_merged > 0 {
                    wal.folds.fetch_add(1, Ordering::AcqRel);
                }
                if let Some(bytes) = fold.base_bytes {
                    wal.base_bytes.store(bytes, Ordering::Release);
                }
                let _ =
                    wal.deltas_since_fold
                        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                            Some(n.saturating_sub(fold.deltas_merged))
                        });
                wal.snapshot_bytes.store(
                    crate::wal::snapshot::files_bytes(&wal.dir),
                    Ordering::Release,
                );
            }
            Err(e) => engine.note_failure(BackgroundWork::Checkpoint, &e),
        }
    }

    /// Waits for a running fold.
    fn join_snapshot_fold(&self) {
        let Some(wal) = self.state.get() else {
            return;
        };
        let handle = wal.fold.lock().take();
        if let Some(handle) = handle {
            let _ = handle.join();
        }
    }

    /// A snapshot taken on request, reported like a checkpoint.
    fn snapshot_as_checkpoint(&self, engine: &Engine) -> Result<CheckpointStats> {
        let started = Instant::now();
        let taken = self.take_snapshot(engine)?;
        let stats = CheckpointStats {
            sequence: taken.number,
            t_low: taken.ts,
            duration: started.elapsed(),
            entries: taken.rows,
            bytes: taken.bytes,
            chain_length: 1,
            ..Default::default()
        };
        engine.set_last_checkpoint(&stats);
        Ok(stats)
    }

    /// At close: a last snapshot if anything was logged since the one in
    /// force and no transaction is open (so the next open replays
    /// nothing), then the log stops.
    fn close_wal(&self, engine: &Engine) -> Result<()> {
        let Some(wal) = self.state.get() else {
            return Ok(());
        };
        self.stop_snapshot_thread();
        // A transaction still open can no longer commit (its commit meets
        // the closed log); a snapshot would wait for it, so the next open
        // replays the log instead.
        let idle = engine.store().oldest_running().is_none();
        let snapshot =
            match idle && wal.log.written() > wal.written_at_snapshot.load(Ordering::Acquire) {
                true => self.take_snapshot(engine).map(|_| ()),
                false => Ok(()),
            };
        self.join_snapshot_fold();
        // Stopped either way: every commit is in the log already.
        let stopped = wal.log.shutdown();
        snapshot.and(stopped)
    }

    fn stop_snapshot_thread(&self) {
        let Some(wal) = self.state.get() else {
            return;
        };
        *wal.stop.0.lock() = true;
        wal.stop.1.notify_all();
        if let Some(handle) = wal.thread.lock().take() {
            let _ = handle.join();
        }
        self.join_snapshot_fold();
    }

    /// Bytes on disk: the segments kept and the snapshot in force.
    fn wal_bytes(&self) -> Option<u64> {
        self.state
            .get()
            .map(|w| w.log.retained_bytes() + w.snapshot_bytes.load(Ordering::Acquire))
    }

    fn wal_guarantee(&self) -> Option<Guarantee> {
        self.state.get().map(|w| w.guarantee)
    }

    /// Log and snapshot figures, for `Stats`.
    fn log_figures(&self) -> Option<WalStats> {
        self.state.get().map(|w| WalStats {
            epoch: w.log.epochs().0,
            durable_epoch: w.log.epochs().1,
            log_bytes_written: w.log.written(),
            group_commits: w.log.frames(),
            log_bytes_retained: w.log.retained_bytes(),
            snapshots: w.snapshots.load(Ordering::Acquire),
            folds: w.folds.load(Ordering::Acquire),
            snapshot_bytes: w.snapshot_bytes.load(Ordering::Acquire),
        })
    }
}

/// Encoded table and index records of the whole catalog.
fn catalog_records(engine: &Engine, ts: u64) -> Vec<Vec<u8>> {
    let mut records = Vec::new();
    for table in engine.store().tables() {
        let mut buf = Vec::new();
        let spec = TableSpec {
            dropped: table.is_dropped(),
            ..table_spec(&table.heap.def)
        };
        record::encode_table(&mut buf, ts, &spec);
        records.push(buf);
    }
    for table in engine.store().tables().filter(|t| !t.is_dropped()) {
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
    /// Snapshots taken since open (each a delta on the one before, or
    /// the first base).
    pub snapshots: u64,
    /// Folds of the snapshot chain into one base since open.
    pub folds: u64,
    /// Bytes of the snapshot files in force.
    pub snapshot_bytes: u64,
    /// With `Options::wal_epoch`: the current epoch and the newest one
    /// whose commits are all durable (acknowledged); zeros without.
    #[cfg_attr(feature = "serde", serde(default))]
    pub epoch: u64,
    #[cfg_attr(feature = "serde", serde(default))]
    pub durable_epoch: u64,
}

pub fn table_spec(def: &crate::catalog::TableDef) -> TableSpec {
    TableSpec {
        id: def.id,
        name: def.name.clone(),
        max_key_len: def.max_key_len,
        max_value_len: def.max_value_len,
        slots_per_block: def.slots_per_block,
        dropped: false,
    }
}

fn spec_options(spec: &TableSpec) -> TableOptions {
    TableOptions::default()
        .max_key_len(spec.max_key_len)
        .max_value_len(spec.max_value_len)
        .block_slots(spec.slots_per_block)
}

/// A definition the files hold that the engine refuses to create (limits
/// out of range, a name twice, a unique index over rows that repeat its
/// key) was never written by it: the files are damaged, whatever the
/// caller's error for the same request would be.
fn refused_from_file(e: Error) -> Error {
    match e {
        Error::InvalidTable(why) | Error::InvalidIndex(why) | Error::InvalidOption(why) => {
            Error::Corrupt(format!("a logged definition is refused: {why}"))
        }
        Error::TableExists(name) | Error::IndexExists(name) => {
            Error::Corrupt(format!("{name} is defined twice"))
        }
        Error::TooManyTables(n) => Error::Corrupt(format!("more than {n} tables defined")),
        Error::UniqueViolation(name) => {
            Error::Corrupt(format!("unique index {name} holds a key twice"))
        }
        e => e,
    }
}

fn check_id(table: &TableRt, spec: &TableSpec) -> Result<()> {
    match table.heap.def.id == spec.id {
        true => Ok(()),
        false => Err(Error::Corrupt(format!(
            "table {} was logged as id {} but recreated as {}",
            spec.name, spec.id, table.heap.def.id
        ))),
    }
}

/// What the rest of the open needs to know of the snapshot chain once it
/// is handed to the tables.
struct ChainFigures {
    number: u64,
    ts: u64,
    bytes: u64,
    base_bytes: u64,
    deltas: u64,
    rows: u64,
}

impl ChainFigures {
    fn of(chain: Option<&SnapshotChain>) -> ChainFigures {
        let Some(chain) = chain else {
            return ChainFigures {
                number: 0,
                ts: 0,
                bytes: 0,
                base_bytes: 0,
                deltas: 0,
                rows: 0,
            };
        };
        ChainFigures {
            number: chain.newest().number,
            ts: chain.newest().ts,
            bytes: chain.len(),
            base_bytes: chain.base().len(),
            deltas: chain.files().len() as u64 - 1,
            rows: chain.tables().into_iter().map(|t| chain.rows_of(t)).sum(),
        }
    }
}

/// Appends a committed row (or tombstone) of `table` to `region` of its
/// heap; `Corrupt` if the table cannot hold it.
fn copy_row(
    store: &Store,
    table: &TableRt,
    region: usize,
    (key, value): (&[u8], &[u8]),
    tombstone: bool,
    slot: &mut Vec<u8>,
) -> Result<Addr> {
    let def = &table.heap.def;
    if !(1..=def.max_key_len as usize).contains(&key.len())
        || value.len() > def.max_value_len as usize
    {
        return Err(Error::Corrupt(format!(
            "a recovered row of table {} is longer than the table allows",
            def.name
        )));
    }
    table.heap.encode(slot, LOADED_TXN, key, value, tombstone);
    table
        .heap
        .append_older(store.medium(), store.space(), region, LOADED_TXN, slot)
}

/// A table's rows in the snapshot in force, served in place: a lookup
/// that misses the DRAM index reads the group that would hold the key
/// and copies the row into the heap.
struct SnapshotRun {
    snapshot: Arc<Recovered>,
    table: u32,
    engine: Weak<Engine>,
}

impl SnapshotRun {
    /// Copies in the rows whose keys the DRAM index lacks (a scan that
    /// reaches rows already taken in must not copy them again: GC leaves a
    /// loading table alone, so such copies would pile up).
    fn copy_in(&self, rows: Vec<(Vec<u8>, Vec<u8>)>) -> Result<Vec<(Vec<u8>, u64)>> {
        let engine = self.engine.upgrade().ok_or(Error::Closed)?;
        let table = engine
            .store()
            .get_table(self.table)
            .ok_or_else(|| Error::Corrupt(format!("snapshot: unknown table {}", self.table)))?;
        let mut slot = Vec::new();
        let mut copied = Vec::with_capacity(rows.len());
        for (key, value) in rows {
            if table.index().get(&key).is_none() {
                let row = (key.as_slice(), value.as_slice());
                let addr = copy_row(engine.store(), table, COPY_REGION, row, false, &mut slot)?;
                copied.push((key, addr.0));
            }
        }
        Ok(copied)
    }
}

impl ColdEntries for SnapshotRun {
    fn len(&self) -> u64 {
        self.snapshot.rows_of(self.table)
    }

    fn split_keys(&self, _: &Medium, parts: usize) -> Vec<Vec<u8>> {
        self.snapshot.split_keys(self.table, parts)
    }

    fn find(&self, _: &Medium, key: &[u8]) -> Result<Option<u64>> {
        let Some(value) = self.snapshot.find(self.table, key)? else {
            return Ok(None);
        };
        let copied = self.copy_in(vec![(key.to_vec(), value)])?;
        Ok(copied.first().map(|&(_, addr)| addr))
    }

    fn range(
        &self,
        _: &Medium,
        lower: Bound<&[u8]>,
        upper: Bound<&[u8]>,
        limit: usize,
    ) -> Result<Vec<(Vec<u8>, u64)>> {
        let rows = self
            .snapshot
            .range(self.table, (lower, upper), limit, false)?;
        self.copy_in(rows)
    }

    fn range_rev(
        &self,
        _: &Medium,
        lower: Bound<&[u8]>,
        upper: Bound<&[u8]>,
        limit: usize,
    ) -> Result<Vec<(Vec<u8>, u64)>> {
        let rows = self
            .snapshot
            .range(self.table, (lower, upper), limit, true)?;
        self.copy_in(rows)
    }

    fn copies(&self) -> bool {
        true
    }
}

/// The region that rows copied in by lookups go to (appends to a region
/// are serialized, so it may be a session's).
const COPY_REGION: usize = 0;
/// Groups a loader thread takes at a time.
const LOAD_PIECE: usize = 64;

/// The rows a restart serves in place (the log's newest versions over
/// the snapshot chain), loaded into the heap and the DRAM indexes.
struct RecoveredLoad(Arc<Recovered>);

impl ColdLoad for RecoveredLoad {
    /// Loads every table still serving the snapshot in place.
    fn load(&self, engine: &Engine, cancelled: &(dyn Fn() -> bool + Sync)) -> Result<()> {
        let tables: Vec<Arc<TableRt>> = engine
            .store()
            .tables()
            .filter(|table| table.is_loading())
            .cloned()
            .collect();
        load_tables(engine.store(), &self.0, &tables, cancelled)
    }
}

impl Design for Wal {
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }

    fn report(&self) -> &RecoveryReport {
        static OPENING: OnceLock<RecoveryReport> = OnceLock::new();
        self.report
            .get()
            .unwrap_or_else(|| OPENING.get_or_init(RecoveryReport::default))
    }

    fn guarantee(&self, engine: &Engine) -> Guarantee {
        self.wal_guarantee()
            .unwrap_or_else(|| engine.store().medium().guarantee())
    }

    /// The segments kept and the snapshot in force.
    fn bytes(&self, engine: &Engine) -> u64 {
        self.wal_bytes()
            .unwrap_or_else(|| engine.store().medium().len())
    }

    fn new_index(&self) -> BTree {
        BTree::new()
    }

    /// Logs a created table or index and waits until the record is
    /// durable; nothing to do during replay (the log has not started).
    fn log_ddl(&self, engine: &Engine, encode: &mut dyn FnMut(&mut Vec<u8>, u64)) -> Result<()> {
        let Some(wal) = self.state.get() else {
            return Ok(());
        };
        let store = engine.store();
        let ts = store.clock().next(store.medium())?;
        let ticket = wal.log.append(DDL_RING, |buf| {
            encode(buf, ts);
            ts
        });
        wal.log.wait(ticket)
    }

    /// A snapshot, which recycles the log it covers (`entries` are its
    /// rows).
    fn checkpoint(&self, engine: &Engine) -> Result<CheckpointStats> {
        self.snapshot_as_checkpoint(engine)
    }

    /// Versions live in DRAM only: GC's copies need nothing to be durable
    /// (the log holds the rows; a snapshot writes what is live).
    fn gc_guard(&self) -> Box<dyn GcGuard + '_> {
        Box::new(NothingToPersist)
    }

    fn gc_copy_budget(&self) -> u64 {
        u64::MAX
    }

    fn before_gc(&self, _: &Engine) {}

    /// Snapshots have a thread of their own, paced by the log.
    fn maintain(&self, _: &Engine, _: bool) -> Result<()> {
        Ok(())
    }

    fn after_round(&self, _: &Arc<Engine>) {}

    fn tick(&self) -> Duration {
        Duration::from_millis(50)
    }

    fn close(&self, engine: &Engine) -> Result<()> {
        self.close_wal(engine)
    }

    fn stop(&self, _: &Engine) {
        self.stop_snapshot_thread();
    }

    fn wal_stats(&self) -> Option<WalStats> {
        self.log_figures()
    }
}

struct NothingToPersist;

impl GcGuard for NothingToPersist {
    fn persist_copies(&mut self, _: &Engine) -> Result<()> {
        Ok(())
    }
}

/// Moves the snapshot rows of `tables` into their heaps and indexes: each
/// table is cut into key ranges of `LOAD_PIECE` base groups that one
/// thread per core takes in turn, merging the chain's files over each.
/// Keys already in the DRAM index are newer (redone from the log, written
/// since, or copied in by a lookup) and stay. A table whose rows turn out
/// damaged is marked so; the first such error is returned.
fn load_tables(
    store: &Store,
    snapshot: &Recovered,
    tables: &[Arc<TableRt>],
    cancelled: &(dyn Fn() -> bool + Sync),
) -> Result<()> {
    let tasks: Vec<(usize, KeyRange)> = tables
        .iter()
        .enumerate()
        .flat_map(|(t, table)| load_ranges(snapshot, table.heap.def.id).map(move |r| (t, r)))
        .collect();
    let failures: Vec<Mutex<Option<Error>>> = tables.iter().map(|_| Mutex::new(None)).collect();
    let next = AtomicUsize::new(0);
    let threads = parallel::cores().clamp(1, MAX_RECOVERY_THREADS);
    parallel::map(0..threads.min(tasks.len()).max(1), |region| {
        while let Some((t, range)) = tasks.get(next.fetch_add(1, Ordering::Relaxed)) {
            let (Some(table), Some(failure)) = (tables.get(*t), failures.get(*t)) else {
                continue;
            };
            if cancelled() {
                return;
            }
            if failure.lock().is_some() {
                continue;
            }
            if let Err(e) = load_range(store, snapshot, table, range, region) {
                failure.lock().get_or_insert(e);
            }
        }
    });
    if cancelled() {
        return Ok(());
    }
    let mut first_error = None;
    for (table, failure) in tables.iter().zip(failures) {
        if let Some(e) = failure.into_inner() {
            table.mark_damaged();
            first_error.get_or_insert(e);
        }
        table.finish_cold();
    }
    first_error.map_or(Ok(()), Err)
}

/// Keys from the first up to (not including) the second; `None`: unbounded.
type KeyRange = (Option<Vec<u8>>, Option<Vec<u8>>);

/// The key ranges a table's load is cut into: `LOAD_PIECE` groups of the
/// base each, open at both ends (deltas may hold keys past the base's).
fn load_ranges(snapshot: &Recovered, table: u32) -> impl Iterator<Item = KeyRange> {
    let groups = snapshot.chain().map(|c| c.base().groups_of(table));
    let cuts: Vec<Vec<u8>> = groups
        .unwrap_or_default()
        .iter()
        .skip(LOAD_PIECE)
        .step_by(LOAD_PIECE)
        .map(|g| g.first_key().to_vec())
        .collect();
    let lowers = std::iter::once(None).chain(cuts.clone().into_iter().map(Some));
    let uppers = cuts.into_iter().map(Some).chain(std::iter::once(None));
    lowers.zip(uppers)
}

/// Copies the live rows of one key range that the DRAM index lacks into
/// the heap and the index, in sorted batches.
fn load_range(
    store: &Store,
    snapshot: &Recovered,
    table: &TableRt,
    (lower, upper): &KeyRange,
    region: usize,
) -> Result<()> {
    let bounds = (
        lower.as_deref().map_or(Bound::Unbounded, Bound::Included),
        upper.as_deref().map_or(Bound::Unbounded, Bound::Excluded),
    );
    let mut cursor = snapshot.cursor(table.heap.def.id, bounds, false)?;
    let mut slot = Vec::new();
    let mut batch: Vec<(Vec<u8>, u64)> = Vec::with_capacity(LOAD_BATCH);
    let mut failed = None;
    while cursor.next_row(|key, value| {
        let Some(value) = value else {
            return;
        };
        if failed.is_some() || table.index().get(key).is_some() {
            return;
        }
        match copy_row(store, table, region, (key, value), false, &mut slot) {
            Ok(addr) => batch.push((key.to_vec(), addr.0)),
            Err(e) => failed = Some(e),
        }
    })? {
        if let Some(e) = failed.take() {
            return Err(e);
        }
        if batch.len() >= LOAD_BATCH {
            adopt_batch(store, table, &mut batch);
        }
    }
    adopt_batch(store, table, &mut batch);
    failed.map_or(Ok(()), Err)
}

/// Rows moved into an index per sorted batch.
const LOAD_BATCH: usize = 1024;

/// Takes a sorted batch of copies into the index; a copy whose key a
/// lookup or a writer took meanwhile is marked obsolete.
fn adopt_batch(store: &Store, table: &TableRt, batch: &mut Vec<(Vec<u8>, u64)>) {
    let entries: Vec<(&[u8], u64)> = batch.iter().map(|(k, a)| (k.as_slice(), *a)).collect();
    let mut superseded = Vec::new();
    table.adopt_sorted(&entries, &mut superseded);
    for addr in superseded {
        table.heap.set_obsolete(store.medium(), Addr(addr));
    }
    batch.clear();
}

/// Hands each version of a commit record to `keep` as its table, key and
/// value (`None`: deleted).
fn for_each_version<'r>(
    ts: u64,
    writes: Entries<'r>,
    mut keep: impl FnMut(u32, &'r [u8], Option<&'r [u8]>),
) -> Result<()> {
    for entry in writes {
        let (table, bytes) = entry.ok_or_else(|| malformed("a commit entry"))?;
        let slot = crate::heap::decode_bytes(bytes)
            .filter(|s| s.txn == ts)
            .ok_or_else(|| malformed("a logged version"))?;
        keep(table, slot.key, (!slot.tombstone).then_some(slot.value));
    }
    Ok(())
}

/// Spawns a fold thread (or, under test, fails to when asked).
fn spawn_fold(
    wal: &WalState,
    body: impl FnOnce() + Send + 'static,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    #[cfg(test)]
    if wal.fail_fold_spawn.swap(false, Ordering::AcqRel) {
        return Err(std::io::Error::other("injected: no thread for the fold"));
    }
    #[cfg(not(test))]
    let _ = wal;
    std::thread::Builder::new()
        .name("rebound-snapshot-fold".into())
        .spawn(body)
}

/// What a fold did.
struct FoldStats {
    /// Deltas it merged away (their number less the one it wrote).
    deltas_merged: u64,
    /// Bytes of the new base, if it wrote one.
    base_bytes: Option<u64>,
}

/// Merges the snapshot chain in force under the newest snapshot's number
/// and timestamp and renames the result over that snapshot (a crash
/// leaves one or the other, both whole), then removes the files it
/// replaced. With `whole`, everything goes into one base without deleted
/// keys; else the deltas go into one delta on the same base. Deltas
/// written meanwhile link to that number and stay valid.
/// The ids a snapshot's catalog lists dropped: a fold leaves out their
/// rows.
fn dropped_in<'c>(catalog: impl Iterator<Item = Option<Record<'c>>>) -> Result<Vec<u32>> {
    let mut dropped = Vec::new();
    for record in catalog {
        match record {
            Some(Record::Table { spec, .. }) if spec.dropped => dropped.push(spec.id),
            Some(_) => {}
            None => {
                return Err(Error::Corrupt(
                    "snapshot: a catalog record does not decode".into(),
                ))
            }
        }
    }
    Ok(dropped)
}

fn fold_chain(dir: &WalDir, whole: bool) -> Result<FoldStats> {
    let unchanged = FoldStats {
        deltas_merged: 0,
        base_bytes: None,
    };
    let Some(chain) = SnapshotChain::open_live(dir)? else {
        return Ok(unchanged);
    };
    let files = chain.files();
    let (newest, base) = (chain.newest(), chain.base());
    let merged = if whole { files.len() } else { files.len() - 1 };
    if merged < 2 {
        return Ok(unchanged);
    }
    let previous = if whole { 0 } else { base.number };
    let mut writer = SnapshotWriter::create(dir, newest.number, newest.ts, previous)?;
    writer.catalog_record(newest.catalog_bytes())?;
    let tables = if whole {
        chain.tables()
    } else {
        chain.delta_tables()
    };
    let dropped = dropped_in(newest.catalog())?;
    for table in tables.into_iter().filter(|t| !dropped.contains(t)) {
        let mut cursor = match whole {
            true => chain.cursor(table, (Bound::Unbounded, Bound::Unbounded), false)?,
            false => chain.deltas_cursor(table)?,
        };
        let mut failed = None;
        while cursor.next_row(|key, value| {
            if failed.is_none() && (value.is_some() || !whole) {
                failed = writer.row(table, key, value).err();
            }
        })? {}
        if let Some(e) = failed {
            return Err(e);
        }
    }
    let (_, bytes) = writer.finish()?;
    let replaced = files.iter().take(merged).skip(1).map(|f| f.number);
    crate::wal::snapshot::remove_numbers(dir, replaced)?;
    Ok(FoldStats {
        deltas_merged: merged as u64 - 1,
        base_bytes: whole.then_some(bytes),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Database, Table, TableOptions};

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

    fn scan_all(db: &Database, table: &Table) -> Vec<(Vec<u8>, Vec<u8>)> {
        let mut session = db.session().unwrap();
        let mut tx = session.begin();
        let rows = tx.scan::<&[u8]>(table, .., usize::MAX).unwrap();
        tx.commit().unwrap();
        rows
    }

    /// The log's newest versions are served in place (deletions hide the
    /// key), then loaded on every loader thread over few keys (so that
    /// their ranges meet in shared leaves); reads give the same rows
    /// before and after.
    #[test]
    fn logged_versions_are_served_in_place_then_loaded_deletions_included() {
        let (_dir, db, table) = wal_table();
        let id = table.rt().heap.def.id;
        let mut newest = NewestVersions::default();
        for key in 0..600u64 {
            let value = (key % 7 != 3).then(|| (key * 11).to_le_bytes());
            let value = value.as_ref().map(|v| &v[..]);
            newest.push(id, key + 1, &key.to_be_bytes(), value);
            // An older version of the same key, pushed after the newer.
            newest.push(id, key, &key.to_be_bytes(), Some(b"older"));
        }
        newest.settle();
        let recovered = Arc::new(Recovered::new(newest, None));
        serve_recovered(db.engine(), &recovered, &[]).unwrap();
        assert!(table.rt().is_loading());
        let expected: Vec<_> = (0..600u64)
            .filter(|key| key % 7 != 3)
            .map(|key| {
                (
                    key.to_be_bytes().to_vec(),
                    (key * 11).to_le_bytes().to_vec(),
                )
            })
            .collect();
        let mut session = db.session().unwrap();
        let mut tx = session.begin();
        assert_eq!(tx.get(&table, &3u64.to_be_bytes()).unwrap(), None);
        assert_eq!(
            tx.get(&table, &4u64.to_be_bytes()).unwrap(),
            Some(44u64.to_le_bytes().to_vec())
        );
        tx.commit().unwrap();
        assert_eq!(scan_all(&db, &table), expected, "served in place");
        RecoveredLoad(recovered.clone())
            .load(db.engine(), &|| false)
            .unwrap();
        assert!(!table.rt().is_loading());
        assert_eq!(scan_all(&db, &table), expected, "loaded");
    }

    /// A fold thread that could not be spawned is noted and leaves nothing
    /// claimed: the fold due at the next snapshot runs.
    #[test]
    fn a_fold_that_could_not_spawn_blocks_no_later_fold() {
        // Background work on (folds in their own thread), but a log limit
        // the writes below never reach: only the snapshots asked for here.
        let options = crate::Options::default()
            .durability(crate::Durability::Wal)
            .file_system(FileSystem::Simulated(crate::wal::SimFs::new()))
            .wal_log_limit(1 << 20);
        let db = Database::open("unused", options).unwrap();
        let table_options = TableOptions::default().max_key_len(8).max_value_len(8);
        let table = db.create_table("kv", table_options).unwrap();
        let wal = of(db.engine()).state.get().unwrap();
        wal.fail_fold_spawn.store(true, Ordering::Release);
        let mut session = db.session().unwrap();
        let mut snapshot = |round: u64| {
            let mut tx = session.begin();
            for key in 0..20u64 {
                tx.put(&table, &key.to_be_bytes(), &round.to_le_bytes())
                    .unwrap();
            }
            tx.commit().unwrap();
            db.checkpoint().unwrap();
            of(db.engine()).join_snapshot_fold();
        };
        // A base, then deltas as big as it: a fold is due at the second.
        for round in 0..2 {
            snapshot(round);
        }
        assert!(
            !wal.fail_fold_spawn.load(Ordering::Acquire),
            "no fold was due"
        );
        assert_eq!(wal.folds.load(Ordering::Acquire), 0);
        assert_eq!(db.stats().checkpoint_failures, 1);
        snapshot(2);
        assert_eq!(
            wal.folds.load(Ordering::Acquire),
            1,
            "the next fold did not run"
        );
        assert_eq!(scan_all(&db, &table).len(), 20);
    }

    /// A logged row longer than its table allows is damage, not a panic.
    #[test]
    fn logged_rows_the_table_cannot_hold_are_damage() {
        let (_dir, db, table) = wal_table();
        let id = table.rt().heap.def.id;
        let mut newest = NewestVersions::default();
        newest.push(id, 1, &[1; 8], Some(&[0; 9]));
        newest.settle();
        serve_recovered(db.engine(), &Arc::new(Recovered::new(newest, None)), &[]).unwrap();
        let mut session = db.session().unwrap();
        let mut tx = session.begin();
        assert!(matches!(tx.get(&table, &[1; 8]), Err(Error::Corrupt(_))));
    }
}
