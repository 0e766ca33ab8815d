//! What every design shares: the MVTO store and its sessions, poisoning,
//! background failures, the loading of what a restart serves cold, table
//! creation, and the maintenance thread (reaping deletions, moving long
//! transactions, block GC), which asks the design for its own part.

use super::{secondary, Config, Design};
use crate::adaptive::IndexManager;
use crate::catalog::{self, TableDef, MAX_NAME_LEN, MAX_SESSIONS, MAX_TABLES};
use crate::checkpoint::CheckpointStats;
use crate::error::{Error, Result};
use crate::gc::{Collector, GcOptions, GcStats};
use crate::heap::{TableHeap, TableOptions, MAX_VALUE_BYTES};
use crate::index::MAX_KEY_LEN;
use crate::txn::{Store, TableRt};
use parking_lot::{Condvar, Mutex};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

/// Loads into DRAM what the tables serve cold after a restart (the
/// checkpoint chain's runs, or a snapshot's rows); given by the design.
pub trait ColdLoad: Send + Sync {
    fn load(&self, engine: &Engine, cancelled: &(dyn Fn() -> bool + Sync)) -> Result<()>;
}

/// Background work whose failures are counted.
#[derive(Clone, Copy)]
pub enum BackgroundWork {
    Gc,
    Checkpoint,
}

/// Failures of background work, which has no caller to return them to.
#[derive(Default, Clone)]
pub struct BackgroundFailures {
    pub gc: u64,
    pub checkpoint: u64,
    pub last_error: Option<String>,
}

/// The state every design shares, and the design that runs.
pub struct Engine {
    store: Store,
    design: Box<dyn Design>,
    /// User-visible handles (`Database` values, including sessions').
    handles: AtomicUsize,
    cancel_load: AtomicBool,
    /// Loads what the tables serve cold into DRAM after a restart.
    loader: Mutex<Option<std::thread::JoinHandle<()>>>,
    /// What is still to be loaded; held locked while it loads.
    cold: Mutex<Option<Box<dyn ColdLoad>>>,
    /// A cold load ran to its end (it does at most once).
    cold_finished: AtomicBool,
    open_started: Instant,
    index_loaded_after: Mutex<Option<Duration>>,
    /// Checkpoints (or snapshots) taken since open, and the last one.
    checkpoints: AtomicU64,
    last_checkpoint: Mutex<Option<CheckpointStats>>,
    collector: Mutex<Collector>,
    /// A GC round is relocating versions, its design's guard held:
    /// checkpoints must not run now (see `gc_round`).
    gc_relocating: AtomicBool,
    gc: GcOptions,
    /// The last GC round stopped at its copy budget with candidates left:
    /// the background thread comes back sooner than a tick.
    gc_backlog: AtomicBool,
    background: Mutex<Option<Background>>,
    /// Clock readings of earlier rounds, oldest first, for flagging long
    /// transactions; rounds hold it, so they do not overlap.
    clock_history: Mutex<std::collections::VecDeque<(Instant, u64)>>,
    long_after: Duration,
    /// Snapshots further behind the clock are expired (0: never).
    max_snapshot_lag: u64,
    path: Option<PathBuf>,
    sessions: Mutex<Vec<bool>>,
    create_lock: Mutex<()>,
    closed: AtomicBool,
    /// Set when a background thread panicked (or the `wal` design's log
    /// stopped, which reports here itself): every later call fails.
    poisoned: Arc<Mutex<Option<String>>>,
    failures: Mutex<BackgroundFailures>,
    /// Test hook: the background thread panics at its next tick.
    panic_requested: AtomicBool,
    /// Secondary index recovery and statistics.
    indexes: IndexManager,
    /// Rebuilds secondary indexes in the background after a restart.
    index_recovery: Mutex<Option<std::thread::JoinHandle<()>>>,
    /// Opened read-only: nothing may write (`check_writable`).
    read_only: bool,
}

/// What a design hands over to become an engine.
pub struct Parts {
    pub store: Store,
    pub design: Box<dyn Design>,
    pub path: Option<PathBuf>,
    /// GC is on (it needs index checkpoints where the heap persists).
    pub gc_enabled: bool,
    /// Primary indexes are whole at open already (node images).
    pub indexes_whole: bool,
    pub started: Instant,
}

impl Engine {
    pub fn new(config: &Config, parts: Parts) -> Arc<Engine> {
        let threads = match config.index_recovery_threads {
            0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
            n => n,
        };
        let indexes = IndexManager::new(
            config.index_recovery,
            threads,
            parts.started,
            parts.store.medium(),
        );
        Arc::new(Engine {
            indexes,
            design: parts.design,
            handles: AtomicUsize::new(1),
            cancel_load: AtomicBool::new(false),
            loader: Mutex::new(None),
            cold: Mutex::new(None),
            cold_finished: AtomicBool::new(false),
            open_started: parts.started,
            index_loaded_after: Mutex::new(parts.indexes_whole.then(|| parts.started.elapsed())),
            checkpoints: AtomicU64::new(0),
            last_checkpoint: Mutex::new(None),
            collector: Mutex::new(Collector::default()),
            gc_relocating: AtomicBool::new(false),
            gc: GcOptions {
                enabled: config.gc.enabled && parts.gc_enabled,
                ..config.gc
            },
            gc_backlog: AtomicBool::new(false),
            background: Mutex::new(None),
            clock_history: Mutex::new(std::collections::VecDeque::new()),
            long_after: config.long_transaction_after,
            max_snapshot_lag: config.max_snapshot_lag,
            path: parts.path,
            sessions: Mutex::new(vec![false; MAX_SESSIONS]),
            create_lock: Mutex::new(()),
            closed: AtomicBool::new(false),
            poisoned: Arc::default(),
            failures: Mutex::new(BackgroundFailures::default()),
            panic_requested: AtomicBool::new(false),
            index_recovery: Mutex::new(None),
            read_only: config.read_only,
            store: parts
                .store
                .with_transaction_control(config.concurrency, config.admission_limit())
                .with_head_cache(config.head_cache),
        })
    }

    /// After the design opened: secondary index recovery, then the
    /// maintenance threads.
    pub(super) fn start(self: &Arc<Self>, config: &Config) -> Result<()> {
        secondary::start_recovery(self, config.index_recovery_in_background)?;
        if config.background_thread {
            *self.background.lock() = Some(Background::start(self));
        }
        Ok(())
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Whether the database was opened read-only.
    pub fn is_read_only(&self) -> bool {
        self.read_only
    }

    /// `ReadOnly` on a database opened read-only, for everything that
    /// would write (tables, indexes, checkpoints, maintenance).
    pub fn check_writable(&self) -> Result<()> {
        match self.read_only {
            true => Err(Error::ReadOnly),
            false => self.check_open(),
        }
    }

    pub fn design(&self) -> &dyn Design {
        self.design.as_ref()
    }

    pub fn indexes(&self) -> &IndexManager {
        &self.indexes
    }

    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// Shared with the `wal` design's log, which poisons on failure.
    pub(super) fn poison_slot(&self) -> Arc<Mutex<Option<String>>> {
        self.poisoned.clone()
    }

    pub(super) fn create_lock(&self) -> parking_lot::MutexGuard<'_, ()> {
        self.create_lock.lock()
    }

    /// A new user-visible handle.
    pub fn add_handle(&self) {
        self.handles.fetch_add(1, Ordering::AcqRel);
    }

    /// A handle went; the last one stops background work.
    pub fn drop_handle(&self) {
        if self.handles.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.stop_background();
        }
    }

    /// Why the database refuses work, if it does: a background thread
    /// panicked, or the medium failed a sync (after which nothing written
    /// can be trusted to reach it; reopening recovers what did).
    pub fn poisoned_by(&self) -> Option<String> {
        let mut poisoned = self.poisoned.lock();
        if poisoned.is_none() {
            *poisoned = self.store.medium().failure();
        }
        poisoned.clone()
    }

    /// Records a panic of a background thread; from now on the database
    /// refuses work. What was acknowledged is durable already.
    pub fn poison(&self, thread: &str, panic: &(dyn std::any::Any + Send)) {
        let message = crate::wal::log::panic_message(panic);
        self.poisoned
            .lock()
            .get_or_insert(format!("{thread} panicked: {message}"));
    }

    pub fn check_open(&self) -> Result<()> {
        if let Some(why) = self.poisoned_by() {
            return Err(Error::Poisoned(why));
        }
        if self.closed.load(Ordering::Acquire) {
            return Err(Error::Closed);
        }
        Ok(())
    }

    /// Records a failure of background work that has nobody to report to.
    pub fn note_failure(&self, work: BackgroundWork, error: &Error) {
        let mut failures = self.failures.lock();
        let what = match work {
            BackgroundWork::Gc => {
                failures.gc += 1;
                "GC"
            }
            BackgroundWork::Checkpoint => {
                failures.checkpoint += 1;
                "checkpoint"
            }
        };
        failures.last_error = Some(format!("{what}: {error}"));
    }

    /// Records a failure of index recovery, which counts as neither.
    pub(super) fn note_index_failure(&self, error: &Error) {
        self.failures.lock().last_error = Some(format!("index recovery: {error}"));
    }

    pub fn failures(&self) -> BackgroundFailures {
        self.failures.lock().clone()
    }

    /// Records a checkpoint taken; its callers hold the checkpointer, so
    /// checkpoints arrive here in the order they were taken and their
    /// sequence numbers only grow.
    pub(super) fn checkpoint_taken(&self, stats: &CheckpointStats) {
        let previous = self.last_checkpoint.lock().as_ref().map(|c| c.sequence);
        assert!(
            previous.is_none_or(|p| stats.sequence > p),
            "checkpoint sequence numbers only grow: {} after {previous:?}",
            stats.sequence
        );
        self.count_checkpoint();
        self.set_last_checkpoint(stats);
    }

    pub(super) fn count_checkpoint(&self) {
        self.checkpoints.fetch_add(1, Ordering::AcqRel);
    }

    pub(super) fn set_last_checkpoint(&self, stats: &CheckpointStats) {
        *self.last_checkpoint.lock() = Some(stats.clone());
    }

    pub fn checkpoints(&self) -> u64 {
        self.checkpoints.load(Ordering::Acquire)
    }

    pub fn last_checkpoint(&self) -> Option<CheckpointStats> {
        self.last_checkpoint.lock().clone()
    }

    pub fn gc_stats(&self) -> GcStats {
        let (writer_stalls, writer_stall_time) = self.store.write_stall().totals();
        GcStats {
            writer_stalls,
            writer_stall_time,
            ..self.collector.lock().stats()
        }
    }

    /// Claims a free session slot.
    pub fn claim_worker(&self) -> Result<usize> {
        let mut sessions = self.sessions.lock();
        let worker = sessions
            .iter()
            .position(|used| !used)
            .ok_or(Error::TooManySessions(MAX_SESSIONS))?;
        sessions[worker] = true;
        Ok(worker)
    }

    pub fn release_worker(&self, worker: usize) {
        let mut sessions = self.sessions.lock();
        assert!(
            sessions[worker],
            "a session slot is released once, by its holder: slot {worker} was free"
        );
        sessions[worker] = false;
    }

    /// Claims up to `n` free session slots for background readers.
    pub(super) fn reserve_workers(&self, n: usize) -> Vec<Option<usize>> {
        let mut sessions = self.sessions.lock();
        let mut workers = Vec::new();
        for (worker, used) in sessions.iter_mut().enumerate() {
            if workers.len() == n {
                break;
            }
            if !*used {
                *used = true;
                workers.push(Some(worker));
            }
        }
        workers
    }

    /// Gives back the slots `reserve_workers` claimed (a build's readers).
    pub(super) fn release_workers(&self, workers: &[Option<usize>]) {
        let mut sessions = self.sessions.lock();
        for &worker in workers.iter().flatten() {
            assert!(
                sessions[worker],
                "a build's session slots are released once: slot {worker} was free"
            );
            sessions[worker] = false;
        }
    }

    /// Test hook: makes the background thread panic at its next tick.
    pub fn request_background_panic(&self) {
        self.panic_requested.store(true, Ordering::Release);
    }
}

impl Engine {
    /// Serves `source` cold until it is loaded, in the background when
    /// asked (else at the first checkpoint, or when someone waits).
    pub(super) fn start_cold_load(self: &Arc<Self>, source: Box<dyn ColdLoad>, background: bool) {
        {
            let mut cold = self.cold.lock();
            assert!(
                cold.is_none() && !self.cold_finished.load(Ordering::Acquire),
                "a cold load is started once, at open"
            );
            *cold = Some(source);
        }
        if !background {
            return;
        }
        let engine = self.clone();
        self.indexes.primary_loading.store(true, Ordering::Release);
        let handle = std::thread::Builder::new()
            .name("rebound-index-load".into())
            .spawn(move || {
                let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    engine.finish_cold_load()
                }));
                engine
                    .indexes
                    .primary_loading
                    .store(false, Ordering::Release);
                if let Err(panic) = outcome {
                    engine.poison("rebound-index-load", panic.as_ref());
                }
            })
            .expect("spawn the index loader");
        *self.loader.lock() = Some(handle);
    }

    /// Loads what is left cold; concurrent callers wait for the one that
    /// loads.
    fn finish_cold_load(&self) {
        let mut pending = self.cold.lock();
        let Some(source) = pending.as_ref() else {
            return;
        };
        let cancelled = || self.cancel_load.load(Ordering::Acquire);
        let outcome = source.load(self, &cancelled);
        if cancelled() {
            return;
        }
        if outcome.is_ok() {
            *self.index_loaded_after.lock() = Some(self.open_started.elapsed());
        }
        // Read back as `pending` being empty: nothing loads again.
        let finished_before = self.cold_finished.swap(true, Ordering::AcqRel);
        assert!(!finished_before, "a cold load finishes at most once");
        *pending = None;
    }

    /// Blocks until every primary index is whole in DRAM.
    pub fn wait_for_indexes(&self) {
        let loader = self.loader.lock().take();
        if let Some(handle) = loader {
            let _ = handle.join();
        }
        if !self.cancel_load.load(Ordering::Acquire) {
            self.finish_cold_load();
        }
    }

    /// Whether a GC round is between relocating versions and retiring
    /// their blocks; a checkpoint that holds what the design's GC guard
    /// holds never sees it (`LogFree::take_checkpoint` asserts so).
    pub(super) fn gc_relocating(&self) -> bool {
        self.gc_relocating.load(Ordering::Acquire)
    }

    pub fn indexes_loaded_after(&self) -> Option<Duration> {
        *self.index_loaded_after.lock()
    }

    /// Stops accepting work and makes everything durable.
    pub fn close(&self) -> Result<()> {
        self.closed.store(true, Ordering::Release);
        self.store.write_stall().set(false);
        self.stop_index_recovery_thread();
        if let Some(background) = self.background.lock().take() {
            background.stop();
        }
        // A running fold (or snapshot thread) ends first: the last
        // checkpoint installs the fold, and nothing writes beside it.
        self.design.stop(self);
        if self.read_only {
            return Ok(());
        }
        // The next open ranks index rebuilds by these (SOFORT's WoPast).
        self.indexes.persist_usage(&self.store, true);
        self.design.close(self)?;
        self.store.medium().fence()
    }

    /// Stops and joins every background thread.
    fn stop_background(&self) {
        self.cancel_load.store(true, Ordering::Release);
        self.stop_index_recovery_thread();
        self.wait_for_indexes();
        if let Some(background) = self.background.lock().take() {
            background.stop();
        }
        self.design.stop(self);
    }

    fn stop_index_recovery_thread(&self) {
        self.indexes.cancel.store(true, Ordering::Release);
        if let Some(handle) = self.index_recovery.lock().take() {
            let _ = handle.join();
        }
    }

    pub(super) fn set_index_recovery_thread(&self, handle: std::thread::JoinHandle<()>) {
        *self.index_recovery.lock() = Some(handle);
    }

    /// Creates a table, empty; durable when this returns.
    /// Replay recreates the files' tables this way, read-only opens too.
    pub fn create_table(&self, name: &str, options: TableOptions) -> Result<Arc<TableRt>> {
        self.check_open()?;
        validate_table(name, &options)?;
        let _guard = self.create_lock.lock();
        if self.find_table(name).is_some() {
            return Err(Error::TableExists(name.to_owned()));
        }
        let store = &self.store;
        let id = store.table_count();
        if id >= MAX_TABLES {
            return Err(Error::TooManyTables(MAX_TABLES));
        }
        let def = table_def(id as u32, name, &options);
        let index = self.design.new_index();
        let heap = TableHeap::new(def.clone());
        catalog::create_table(store.medium(), &def)?;
        self.design.log_ddl(self, &mut |buf, ts| {
            crate::wal::record::encode_table(buf, ts, &super::wal::table_spec(&def));
        })?;
        let rt = Arc::new(TableRt::new(heap, index, store.instance()));
        rt.index().set_head_cache(store.head_cache());
        store.add_table(rt.clone());
        Ok(rt)
    }

    /// Drops the live table called `name`; durable when this returns.
    /// The name is free at once; the table's blocks return to the free
    /// space once no transaction or snapshot older than the drop runs
    /// (`reclaim_dropped`). On an error the drop may or may not survive a
    /// restart, like a commit whose sync failed.
    pub fn drop_table(&self, name: &str) -> Result<()> {
        self.check_writable()?;
        // A table served cold reads its checkpoint run until loaded.
        self.wait_for_indexes();
        let _guard = self.create_lock.lock();
        let table = self
            .find_table(name)
            .ok_or_else(|| Error::NoSuchTable(name.to_owned()))?;
        let store = &self.store;
        let id = table.heap.def.id;
        // The log-free design's commit point: a checkpoint that omits the
        // table must not be in force while its descriptor says created.
        catalog::drop_table(store.medium(), id)?;
        table.mark_dropped(store.clock().next(store.medium())?);
        // The `wal` design's commit point, after the table is hidden: a
        // snapshot at or after the record's timestamp lists it dropped.
        self.design.log_ddl(self, &mut |buf, ts| {
            crate::wal::record::encode_drop(buf, ts, &super::wal::table_spec(&table.heap.def));
        })?;
        // A build running now stops at its next batch (it sees the table
        // dropped); none starts on an index dropped under its lock, so
        // none reads the table once its blocks may go.
        for (_, index) in table.secondaries.iter() {
            let _building = index.build_lock.lock();
            index.set_state(crate::txn::DROPPED);
        }
        table.mark_reclaimable();
        Ok(())
    }

    /// Frees the blocks of dropped tables that no transaction or snapshot
    /// older than the drop can reach; returns how many tables it freed.
    pub fn reclaim_dropped(&self) -> Result<usize> {
        if self.store.tables().all(|t| t.awaiting_reclaim().is_none()) {
            return Ok(0);
        }
        let mut collector = self.collector.lock();
        // Leases are granted under the collector's lock: none starts
        // between this check and the frees.
        if self.design.reader_processes() > 0 {
            return Ok(0);
        }
        // No checkpoint reads the table's versions meanwhile (one that
        // starts later sees it dropped and passes it by).
        let _checkpoints = self.design.gc_guard();
        collector.reclaim_dropped(&self.store)
    }

    /// Runs `f` while no table or index is created or dropped: a
    /// snapshot's begin and the tables and indexes live then are what a
    /// copy through that snapshot holds, even if a table is dropped (and
    /// its name reused) while the copy runs.
    pub fn with_catalog_fixed<R>(&self, f: impl FnOnce() -> R) -> R {
        let _guard = self.create_lock.lock();
        f()
    }

    /// The live table called `name`.
    pub fn find_table(&self, name: &str) -> Option<Arc<TableRt>> {
        self.store
            .tables()
            .find(|t| t.heap.def.name == name && !t.is_dropped())
            .cloned()
    }
}

fn table_def(id: u32, name: &str, options: &TableOptions) -> TableDef {
    let (max_record_len, slots_per_block, block_size) = crate::heap::geometry(
        options.max_key_len,
        options.max_value_len,
        options.block_slots,
    );
    TableDef {
        id,
        name: name.to_owned(),
        max_key_len: options.max_key_len,
        max_value_len: options.max_value_len,
        max_record_len,
        slots_per_block,
        block_size,
        dropped: false,
    }
}

fn validate_table(name: &str, options: &TableOptions) -> Result<()> {
    if name.is_empty() || name.len() > MAX_NAME_LEN {
        return Err(Error::InvalidTable(format!(
            "name must be 1..={MAX_NAME_LEN} bytes"
        )));
    }
    if options.max_key_len == 0 || options.max_key_len as usize > MAX_KEY_LEN {
        return Err(Error::InvalidTable(format!(
            "max_key_len must be 1..={MAX_KEY_LEN}"
        )));
    }
    let slots = crate::heap::MIN_SLOTS_PER_BLOCK..=crate::heap::MAX_SLOTS_PER_BLOCK;
    if options.block_slots != 0 && !slots.contains(&options.block_slots) {
        return Err(Error::InvalidTable(format!(
            "block_slots must be 0 or {}..={}",
            slots.start(),
            slots.end()
        )));
    }
    if options.max_value_len > MAX_VALUE_BYTES {
        return Err(Error::InvalidTable(format!(
            "max_value_len must be at most {MAX_VALUE_BYTES}"
        )));
    }
    Ok(())
}

/// A GC round copies at most this fraction of the checkpoint trigger's
/// volume (see `Engine::maintain`).
pub const GC_COPY_SHARE: u64 = 8;

impl Engine {
    /// One round of maintenance: remove the index entries of settled
    /// deletions, flag long transactions and move idle ones, run GC when
    /// enough blocks qualify, then the design's part (a checkpoint when
    /// one is due). Rounds do not overlap. In the background thread
    /// (`background`), failures have nobody to go to, so they are counted
    /// in `Stats` with the last error.
    pub fn maintain(&self, background: bool) -> Result<()> {
        let mut history = self.clock_history.lock();
        // First, so that this round's reaping and GC no longer count them.
        if self.max_snapshot_lag > 0 {
            self.store.expire_snapshots_behind(self.max_snapshot_lag);
        }
        self.store.reap_deleted();
        secondary::maintain(self, &self.collector, background);
        history.push_back((Instant::now(), self.store.clock().peek()));
        while history.len() > 1 && history[1].0.elapsed() >= self.long_after {
            history.pop_front();
        }
        // The newest clock reading at least `long_after` old: transactions
        // announced below it have run at least that long.
        if let Some(&(at, cutoff)) = history.front() {
            if at.elapsed() >= self.long_after {
                self.store.flag_long_transactions(cutoff);
                self.store.move_idle_long_transactions();
            }
        }
        self.design.before_gc(self);
        // A reader process holding a lease reads blocks GC would free.
        let held = self.design.hold_for_readers(self);
        let gc = match self.gc.enabled && !held {
            true => self.gc_round(
                self.gc.batch_blocks.max(1),
                self.design.gc_copy_budget(),
                false,
            ),
            false => Ok(false),
        };
        self.gc_backlog
            .store(matches!(gc, Ok(true)), Ordering::Relaxed);
        if !matches!(gc, Ok(true)) {
            self.store.write_stall().set(false);
        }
        let reclaimed = match held {
            true => Ok(0),
            false => self.reclaim_dropped(),
        };
        let gc = gc.map(drop).and(reclaimed.map(drop));
        if let (true, Err(e)) = (background, &gc) {
            self.note_failure(BackgroundWork::Gc, e);
        }
        gc.and(self.design.maintain(self, background))
    }

    /// Runs `f` while no GC round runs: no block is freed (and its
    /// extent reused) under it.
    pub fn with_gc_paused<R>(&self, f: impl FnOnce() -> R) -> R {
        let _collector = self.collector.lock();
        f()
    }

    /// `HeldByReaders` while a reader process holds a lease (see
    /// `log_free::readers`): `work` would change what it reads.
    pub fn check_not_held_by_readers(&self, work: &str) -> Result<()> {
        match self.design.reader_processes() {
            0 => Ok(()),
            n => Err(Error::HeldByReaders(format!(
                "{work} waits while {n} read-only process(es) hold a lease on the database"
            ))),
        }
    }

    /// Runs one round of block GC now, whatever the batch size.
    pub fn collect_garbage(&self) -> Result<GcStats> {
        self.check_writable()?;
        self.check_not_held_by_readers("GC")?;
        self.reclaim_dropped()?;
        if !self.gc.enabled {
            return Err(Error::InvalidOption(
                "GC is off (it needs index checkpoints)".into(),
            ));
        }
        self.gc_round(1, u64::MAX, true)?;
        self.store.space().cool(self.store.medium());
        Ok(self.gc_stats())
    }

    /// One GC round: relocate if at least `min_candidates` blocks
    /// qualify (stopping after the block that brings the copies to
    /// `max_copies`), make the copies durable and unlink when blocks wait
    /// for it (at once when `now` or when candidates were left, else as
    /// the pacing allows), then free whatever no reader can reach. True if
    /// it retired blocks and left candidates for another round.
    fn gc_round(&self, min_candidates: usize, max_copies: u64, now: bool) -> Result<bool> {
        self.wait_for_indexes();
        let mut collector = self.collector.lock();
        // Leases are granted under the collector's lock: none starts
        // between this check and the end of the round.
        self.check_not_held_by_readers("GC")?;
        collector.release(&self.store);
        // No checkpoint may run between a relocation and the retirement of
        // its block: it could list the blocks without the retired one yet
        // hold an entry read before the copy.
        let mut guard = self.design.gc_guard();
        // The background thread may wait a little for older transactions;
        // an explicit call (perhaps from inside one) does not.
        let patience = match now {
            true => Duration::ZERO,
            false => Duration::from_millis(2),
        };
        if now {
            collector.forget_pending();
        }
        let limits = (min_candidates, max_copies);
        let (retired, left) = {
            // Relocation happens under the guard with the flag up; a
            // checkpoint asserts it down, so none runs amid a relocation.
            let _relocating = Relocating::start(&self.gc_relocating);
            collector.relocate(&self.store, &self.gc, limits, patience)?
        };
        // Only a round that got somewhere makes the next come sooner.
        let left = left && retired > 0;
        // Candidates left: the copies are made durable (and their blocks
        // unlinked) now rather than when the pacing allows, so that redo
        // after a crash stays at one round's copies.
        // Writers waiting for space: the blocks go now too.
        let behind = collector.over_bound();
        if collector.wants_checkpoint(&self.gc, now || left || behind) {
            guard.persist_copies(self)?;
            collector.checkpoint_done(&self.store)?;
        }
        drop(guard);
        // Writers wait only for a GC that frees something: one that can
        // only retire blocks a snapshot still reads would hold them for
        // nothing.
        let progress = collector.release(&self.store) > 0;
        self.store.write_stall().set(behind && progress);
        Ok(left || (behind && progress))
    }
}

/// Raises `Engine::gc_relocating` for a GC round's relocation and lowers
/// it when dropped (also when the relocation fails or panics).
struct Relocating<'a>(&'a AtomicBool);

impl<'a> Relocating<'a> {
    fn start(flag: &'a AtomicBool) -> Relocating<'a> {
        let before = flag.swap(true, Ordering::AcqRel);
        assert!(
            !before,
            "GC rounds do not overlap: one is relocating already"
        );
        Relocating(flag)
    }
}

impl Drop for Relocating<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

/// The maintenance thread (rounds of `Engine::maintain`) and the block
/// thread, which keeps blocks ready for growing tables.
struct Background {
    shared: Arc<(Mutex<bool>, Condvar)>,
    thread: Option<std::thread::JoinHandle<()>>,
    blocks: Option<std::thread::JoinHandle<()>>,
    engine: Weak<Engine>,
}

impl Background {
    fn start(engine: &Arc<Engine>) -> Background {
        let shared = Arc::new((Mutex::new(false), Condvar::new()));
        let weak = Arc::downgrade(engine);
        let tick = engine.design.tick();
        let stop = shared.clone();
        let thread = spawn_watched("rebound-background", weak.clone(), move |engine| {
            background_loop(engine, stop, tick)
        });
        let stop = shared.clone();
        let blocks = spawn_watched("rebound-blocks", weak.clone(), move |engine| {
            block_loop(engine, stop)
        });
        Background {
            shared,
            thread: Some(thread),
            blocks: Some(blocks),
            engine: weak,
        }
    }

    fn stop(mut self) {
        *self.shared.0.lock() = true;
        self.shared.1.notify_all();
        if let Some(engine) = self.engine.upgrade() {
            engine.store.space().wake_preparer();
        }
        for thread in [self.thread.take(), self.blocks.take()]
            .into_iter()
            .flatten()
        {
            let _ = thread.join();
        }
    }
}

/// Spawns a maintenance thread; a panic in it poisons the database.
pub fn spawn_watched(
    name: &str,
    engine: Weak<Engine>,
    body: impl FnOnce(Weak<Engine>) + Send + 'static,
) -> std::thread::JoinHandle<()> {
    let thread_name = name.to_string();
    std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            let watched = engine.clone();
            let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| body(engine)));
            if let (Err(panic), Some(engine)) = (outcome, watched.upgrade()) {
                engine.poison(&thread_name, panic.as_ref());
            }
        })
        .expect("spawn a maintenance thread")
}

/// How long the block thread sleeps when no table takes blocks; it wakes
/// at once when one does.
const BLOCK_THREAD_IDLE: Duration = Duration::from_millis(100);
/// A table that took no block for this long gives back the blocks it
/// holds ready.
const RESERVE_IDLE_AFTER: Duration = Duration::from_secs(5);

/// The block thread: whenever a table takes a ready block, makes the
/// next ones (see `heap/reserve.rs`).
fn block_loop(engine: Weak<Engine>, stop: Arc<(Mutex<bool>, Condvar)>) {
    loop {
        let Some(engine) = engine.upgrade() else {
            return;
        };
        if *stop.0.lock() {
            return;
        }
        let mut tiles_pending = false;
        let (medium, space) = (engine.store.medium(), engine.store.space());
        for table in engine.store.tables() {
            if table.is_dropped() {
                table.heap.release_reserve(medium, space);
                continue;
            }
            // A full medium fails here first: the table keeps no reserve
            // then, and the writer that needs a block meets (and reports)
            // the same error itself.
            if table
                .heap
                .prepare_blocks(medium, space, RESERVE_IDLE_AFTER)
                .is_err()
            {
                table.heap.release_reserve(medium, space);
            }
            // One chunk per table and round, so blocks stay first; not
            // while the primary index loads, which needs the cores more.
            if !table.is_loading() {
                tiles_pending |= table.heap.prepare_tiles_ahead();
            }
        }
        space.cool_idle(medium, RESERVE_IDLE_AFTER);
        // Off the workers: a worker that fills its index chunk takes this
        // one instead of waiting for the kernel to zero a new one.
        crate::index::prepare_spare_chunk();
        if !tiles_pending {
            space.wait_for_taken_blocks(BLOCK_THREAD_IDLE);
        }
    }
}

/// Every tick, one round of maintenance (`Engine::maintain`); after a
/// round that left GC a backlog, the next comes after a 25th of a tick.
fn background_loop(engine: Weak<Engine>, stop: Arc<(Mutex<bool>, Condvar)>, tick: Duration) {
    let mut pause = tick;
    loop {
        {
            let mut stopped = stop.0.lock();
            if !*stopped {
                stop.1.wait_for(&mut stopped, pause);
            }
            if *stopped {
                return;
            }
        }
        let Some(engine) = engine.upgrade() else {
            return;
        };
        if engine.panic_requested.swap(false, Ordering::AcqRel) {
            panic!("injected background panic");
        }
        // A poisoned database writes nothing more: its medium may have
        // failed a sync, or a thread died halfway through its work.
        if engine.poisoned_by().is_some() {
            pause = tick;
            continue;
        }
        // Failures are counted in `Stats` by the round itself.
        let _ = engine.maintain(true);
        engine.design.after_round(&engine);
        pause = match engine.gc_backlog.load(Ordering::Relaxed) {
            true => tick / 25,
            false => tick,
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_relocation_flag_is_up_only_while_relocating() {
        let flag = AtomicBool::new(false);
        {
            let _relocating = Relocating::start(&flag);
            assert!(flag.load(Ordering::Acquire));
        }
        assert!(!flag.load(Ordering::Acquire));
        let _again = Relocating::start(&flag);
    }

    #[test]
    #[should_panic(expected = "GC rounds do not overlap")]
    fn overlapping_relocations_panic() {
        let flag = AtomicBool::new(false);
        let _first = Relocating::start(&flag);
        let _second = Relocating::start(&flag);
    }

    #[test]
    #[should_panic(expected = "released once")]
    fn a_session_slot_released_twice_panics() {
        let db = crate::Database::open(
            "unused",
            crate::Options::default()
                .medium(crate::MediumChoice::Simulated(crate::SimDevice::new(
                    1 << 26,
                )))
                .background_thread(false),
        )
        .unwrap();
        let worker = db.engine().claim_worker().unwrap();
        db.engine().release_worker(worker);
        db.engine().release_worker(worker);
    }
}
