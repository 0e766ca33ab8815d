//! The public API: databases, tables, sessions, transactions; secondary
//! indexes in `secondary`.

mod secondary;
mod wal;

pub use secondary::{Index, IndexOptions, IndexStats};
pub use wal::WalStats;

use crate::adaptive::{IndexManager, IndexRecovery};
use crate::catalog::{self, TableDef, MAX_NAME_LEN, MAX_SESSIONS, MAX_TABLES, MAX_WORKERS};
use crate::checkpoint::{
    load_cold, Chain, CheckpointMode, CheckpointStats, Checkpointer, ColdRun, FoldJob,
};
use crate::error::{Error, Result};
use crate::gc::{Collector, GcOptions, GcStats};
use crate::heap::{Addr, TableHeap};
use crate::index::{BTree, MAX_KEY_LEN};
use crate::medium::{Guarantee, Medium, SimDevice};
use crate::recovery::{self, Recovered, RecoveryReport};
use crate::txn::{
    owned_range, prefix_end, Capture, Committed, Cursor, PendingCommit, Store, TableRt, TxnState,
};
use crate::wal::FileSystem;
use parking_lot::Mutex;
use std::fs::{File, OpenOptions};
use std::ops::{Bound, ControlFlow, RangeBounds};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

// The heap sizes its read buffers by the index's key limit.
const _: () = assert!(crate::heap::MAX_KEY_BYTES == MAX_KEY_LEN);

/// Name of the data file inside a database directory.
pub const DATA_FILE: &str = "rebound.db";
/// Largest value a table may be defined to hold.
pub const MAX_VALUE_LEN: u32 = crate::heap::MAX_VALUE_BYTES;

/// How commits are made durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub enum Durability {
    /// Nothing is persisted; the database lives in anonymous memory.
    None,
    /// FIR's log-free time-ordered storage (the default).
    #[default]
    LogFree,
    /// Versions and indexes in DRAM, a redo log with group commit and
    /// snapshots that bound it (LeanStore's logging; FIR's "DRAM-DB
    /// (Log)"). Survives power loss on a disk file system, a process crash
    /// on tmpfs. Formats in `docs/DESIGN.md`, "The wal design".
    Wal,
}

/// Where the data lives.
#[derive(Clone, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub enum MediumChoice {
    /// Persistent-memory emulation on tmpfs/DAX, `msync` on other filesystems.
    #[default]
    Auto,
    /// Cache-line write-back and fences; the file should be on tmpfs or DAX.
    PersistentMemory,
    /// `msync` at commit (group commit coalesces concurrent committers).
    Disk,
    /// A simulated device for crash testing; the path is not used. It
    /// lives in memory, so it has no serialized form.
    #[cfg_attr(feature = "serde", serde(skip))]
    Simulated(SimDevice),
}

/// Settings for [`Database::open`].
#[derive(Clone)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(default))]
#[non_exhaustive]
pub struct Options {
    pub durability: Durability,
    pub medium: MediumChoice,
    /// Injected latency per persisted 256-byte line, emulating slower NVM.
    pub persist_latency_ns: u64,
    /// Create the directory and database when missing.
    pub create_if_missing: bool,
    /// Address space reserved for the data file; the file may grow to this.
    pub max_size: u64,
    /// Index checkpoints and the recovery design they imply.
    pub checkpoint: CheckpointMode,
    /// A checkpoint is taken when this much time has passed since the last
    /// one and something was written...
    pub checkpoint_interval: Duration,
    /// ...or when this many versions were written since the last one.
    pub checkpoint_after_versions: u64,
    /// With [`CheckpointMode::Chain`] or `Mirror`: once the chain in force holds this
    /// many images, its deltas are merged into one (3 to 63).
    pub checkpoint_chain_depth: usize,
    /// After a restart, move the checkpoint runs into the DRAM indexes in a
    /// background thread (default). When false they are served on demand
    /// and loaded at the first checkpoint or at close (useful for testing
    /// the on-demand path).
    pub load_indexes_in_background: bool,
    /// Block garbage collection (runs only with index checkpoints).
    pub gc: GcOptions,
    /// A transaction open longer than this moves its versions to its
    /// long-transaction region at its next call, so checkpoints stop
    /// waiting for it.
    pub long_transaction_after: Duration,
    /// Run the background thread (default). It wakes every 50 ms (or every
    /// `checkpoint_interval` if shorter) and does one round of maintenance:
    /// removes the index entries of settled deletions, flags transactions
    /// older than `long_transaction_after` and moves idle ones, runs a GC
    /// round when `gc.batch_blocks` blocks qualify, and takes a checkpoint
    /// when one is due. When false, no such thread runs and nothing of this
    /// happens unless the application calls [`Database::run_maintenance`];
    /// then every fence the engine issues is issued by a caller's thread,
    /// so a single-threaded workload replays exactly (crash testing).
    /// With it runs the block thread, which keeps blocks ready for growing
    /// tables (see `heap/reserve.rs`); without it writers make each new
    /// block themselves.
    pub background_thread: bool,
    /// How secondary indexes are rebuilt after a restart (SOFORT).
    pub index_recovery: IndexRecovery,
    /// Threads that rebuild secondary indexes after a restart; 0 means
    /// one per available core.
    pub index_recovery_threads: usize,
    /// With adaptive index recovery, start the rebuild threads at open
    /// (default). When false nothing is rebuilt until
    /// [`Database::wait_for_secondary_indexes`]; lookups meanwhile are
    /// answered by scans (useful for testing that path).
    pub index_recovery_in_background: bool,
    /// With [`Durability::Wal`]: about how much log recovery may have to
    /// replay. A snapshot is taken whenever half of it was written since
    /// the last one.
    pub wal_log_limit: u64,
    /// With [`Durability::Wal`]: the file system its files go to; a
    /// simulated one lives in memory (power-loss testing), so it has no
    /// serialized form.
    #[cfg_attr(feature = "serde", serde(skip))]
    pub file_system: FileSystem,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            durability: Durability::LogFree,
            medium: MediumChoice::Auto,
            persist_latency_ns: 0,
            create_if_missing: true,
            max_size: 1 << 40,
            checkpoint: CheckpointMode::Chain,
            checkpoint_interval: Duration::from_millis(25),
            checkpoint_after_versions: 1 << 16,
            checkpoint_chain_depth: 16,
            load_indexes_in_background: true,
            gc: GcOptions::default(),
            long_transaction_after: Duration::from_secs(1),
            background_thread: true,
            index_recovery: IndexRecovery::Adaptive,
            index_recovery_threads: 0,
            index_recovery_in_background: true,
            wal_log_limit: 16 << 20,
            file_system: FileSystem::Real,
        }
    }
}

setters!(Options {
    /// How commits are made durable (default: [`Durability::LogFree`]).
    durability: Durability,
    /// Where the data lives (default: [`MediumChoice::Auto`]).
    medium: MediumChoice,
    /// Injected latency per persisted 256-byte line, emulating slower NVM.
    persist_latency_ns: u64,
    /// Create the directory and database when missing (default: true).
    create_if_missing: bool,
    /// Address space reserved for the data file (default: 1 TiB).
    max_size: u64,
    /// Index checkpoints and the recovery design they imply (default:
    /// [`CheckpointMode::Chain`]).
    checkpoint: CheckpointMode,
    /// Time since the last checkpoint after which one is taken if
    /// something was written (default: 25 ms; FIR's leaf checkpoints cost
    /// the table's size each, so give them seconds).
    checkpoint_interval: Duration,
    /// Versions written since the last checkpoint after which one is taken
    /// (default: 65536).
    checkpoint_after_versions: u64,
    /// With [`CheckpointMode::Chain`] or `Mirror`: images in force after which the
    /// deltas are merged into one (default: 16; 3 to 63).
    checkpoint_chain_depth: usize,
    /// Load the checkpoint runs into the DRAM indexes in a background
    /// thread after a restart (default: true).
    load_indexes_in_background: bool,
    /// Block garbage collection settings.
    gc: GcOptions,
    /// Age after which a transaction moves its versions to its
    /// long-transaction region (default: 1 s).
    long_transaction_after: Duration,
    /// Run the background maintenance thread (default: true); see
    /// [`Options::background_thread`](Options#structfield.background_thread).
    background_thread: bool,
    /// How secondary indexes come back after a restart (default:
    /// [`IndexRecovery::Adaptive`]).
    index_recovery: IndexRecovery,
    /// Threads rebuilding secondary indexes after a restart (0: one per core).
    index_recovery_threads: usize,
    /// Start adaptive index recovery at open (default: true).
    index_recovery_in_background: bool,
    /// With [`Durability::Wal`], about how much log recovery may replay
    /// (default: 16 MiB; snapshots are deltas, so a small bound is cheap).
    wal_log_limit: u64,
    /// With [`Durability::Wal`], the file system of its files (default:
    /// the real one; [`FileSystem::Simulated`] for power-loss tests).
    file_system: FileSystem,
});

/// Limits of a table; slots are fixed-size, so these size its storage.
#[derive(Debug, Clone, Copy)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(default))]
#[non_exhaustive]
pub struct TableOptions {
    pub max_key_len: u32,
    pub max_value_len: u32,
    /// Slots per block (4..=2048), the unit of allocation and, later, of
    /// garbage collection; 0 chooses blocks of about 1 MiB.
    pub block_slots: u32,
}

impl Default for TableOptions {
    fn default() -> Self {
        TableOptions {
            max_key_len: 64,
            max_value_len: 1024,
            block_slots: 0,
        }
    }
}

setters!(TableOptions {
    /// Longest key, in bytes (1..=512; default 64).
    max_key_len: u32,
    /// Longest value, in bytes (at most [`MAX_VALUE_LEN`]; default 1024).
    max_value_len: u32,
    /// Slots per block (4..=2048), or 0 for blocks of about 1 MiB.
    block_slots: u32,
});

/// What the database holds and has done since it was opened.
#[derive(Debug, Clone, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(default))]
#[non_exhaustive]
pub struct Stats {
    pub commits: u64,
    /// Transactions that hit a serialization conflict.
    pub conflicts: u64,
    /// Versions written by committed transactions.
    pub versions_written: u64,
    pub checkpoints: u64,
    /// Size of the medium (the data file) in bytes.
    pub medium_bytes: u64,
    pub tables: Vec<TableStats>,
    pub gc: GcStats,
    /// Transactions that ran past `long_transaction_after` and moved their
    /// versions to a long-transaction region.
    pub long_transactions: u64,
    /// Background GC rounds that failed (the error is in `last_error`).
    pub gc_failures: u64,
    /// Background checkpoints that failed.
    pub checkpoint_failures: u64,
    /// The most recent background failure, if any.
    pub last_error: Option<String>,
    /// Why the database is poisoned (a background thread panicked), if it is.
    pub poisoned: Option<String>,
    /// The log of the `wal` design (`None` for the other designs).
    pub wal: Option<WalStats>,
}

/// Background work whose failures are counted.
#[derive(Clone, Copy)]
enum BackgroundWork {
    Gc,
    Checkpoint,
}

/// Failures of background work, which has no caller to return them to.
#[derive(Default)]
struct BackgroundFailures {
    gc: u64,
    checkpoint: u64,
    last_error: Option<String>,
}

/// Storage of one table. Versions are fixed-size slots; an obsolete version
/// has a committed successor (or is a hole left by an abort, or a deleted
/// key's tombstone nobody needs) and is what garbage collection reclaims.
#[derive(Debug, Clone)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub struct TableStats {
    pub name: String,
    pub index_entries: u64,
    pub blocks: u64,
    /// Regions holding at least one block. Each keeps its current block,
    /// which GC never takes, until that region writes again.
    #[cfg_attr(feature = "serde", serde(default))]
    pub regions: u64,
    pub block_bytes: u64,
    pub versions: u64,
    pub obsolete_versions: u64,
    pub live_bytes: u64,
    pub obsolete_bytes: u64,
    /// DRAM tiles of version headers allocated (recycled when GC frees a
    /// block, so bounded by the blocks alive at once).
    pub tiles: u64,
    /// Blocks from the medium whose slots are still verified on every read:
    /// the background scrub has not reached them yet, they are their
    /// region's last block, or they hold a damaged slot. Blocks this
    /// process formatted never count.
    pub unverified_blocks: u64,
    /// Extents held ready for the table's next blocks (at most two, while
    /// it grows; given back when it stops, or when the medium is full):
    /// space in use that holds no versions yet.
    #[cfg_attr(feature = "serde", serde(default))]
    pub reserved_blocks: u64,
}

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
        self.rt.index.len()
    }
}

/// An open database; cheap to clone and share between threads. When the
/// last handle (sessions hold one too) is dropped, background work stops.
pub struct Database {
    inner: Arc<DbInner>,
}

impl Clone for Database {
    fn clone(&self) -> Self {
        self.inner.handles.fetch_add(1, Ordering::AcqRel);
        Database {
            inner: self.inner.clone(),
        }
    }
}

impl Drop for Database {
    fn drop(&mut self) {
        if self.inner.handles.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.inner.stop_background();
        }
    }
}

/// What the tables serve cold after a restart, until the background
/// loader has moved it into DRAM.
enum ColdSource {
    /// The checkpoint chain in force: its runs name slots of the heap.
    Chain(Arc<Chain>),
    /// The `wal` design's log after the newest snapshot over the snapshot
    /// chain: rows, copied into the heap as read.
    Recovered(Arc<crate::wal::snapshot::Recovered>),
}

struct DbInner {
    store: Store,
    /// User-visible handles (`Database` values, including sessions').
    handles: std::sync::atomic::AtomicUsize,
    cancel_load: AtomicBool,
    /// Loads the checkpoint runs into the indexes after a restart.
    loader: Mutex<Option<std::thread::JoinHandle<()>>>,
    /// The checkpoint still to be loaded; held locked while it loads.
    cold_image: Mutex<Option<ColdSource>>,
    /// When the last checkpoint started, and the versions written by then;
    /// the background trigger counts from here, whoever took it.
    checkpointed_at: Mutex<(Instant, u64)>,
    checkpoints: AtomicU64,
    open_started: Instant,
    index_loaded_after: Mutex<Option<Duration>>,
    checkpointer: Mutex<Checkpointer>,
    /// Folds the checkpoint chain into a new base off the checkpoint path.
    folder: Mutex<Option<std::thread::JoinHandle<()>>>,
    collector: Mutex<Collector>,
    gc: GcOptions,
    last_checkpoint: Mutex<Option<CheckpointStats>>,
    background: Mutex<Option<Background>>,
    maintenance: Mutex<Maintenance>,
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
    /// The last GC round stopped at its copy budget with candidates left:
    /// the background thread comes back sooner than a tick.
    gc_backlog: AtomicBool,
    report: RecoveryReport,
    durability: Durability,
    /// Secondary index recovery and statistics.
    indexes: IndexManager,
    /// Rebuilds secondary indexes in the background after a restart.
    index_recovery: Mutex<Option<std::thread::JoinHandle<()>>>,
    /// The log and snapshots of the `wal` design, once replayed.
    wal: std::sync::OnceLock<wal::WalState>,
    /// What opening a `wal` database did (it replaces `report`).
    wal_report: std::sync::OnceLock<RecoveryReport>,
    _lock: Option<File>,
}

static INSTANCES: AtomicU64 = AtomicU64::new(1);

impl Database {
    /// Opens (or creates) the database in directory `path`.
    pub fn open(path: impl AsRef<Path>, options: Options) -> Result<Database> {
        let started = Instant::now();
        validate_options(&options)?;
        let instance = INSTANCES.fetch_add(1, Ordering::Relaxed);
        let wal_found = match options.durability {
            Durability::Wal => Some(wal::read_directory(
                &options.file_system,
                path.as_ref(),
                options.create_if_missing,
            )?),
            _ => None,
        };
        let (medium, lock, existing) = open_medium(path.as_ref(), &options)?;
        let use_checkpoint = options.checkpoint != CheckpointMode::Off;
        let recovered = if existing {
            let node_versions = options.checkpoint == CheckpointMode::IaCow;
            recovery::recover(medium, instance, started, (use_checkpoint, node_versions))?
        } else {
            let first_ts = wal_found.as_ref().map_or(1, |f| f.next_ts());
            let (store, report) = recovery::fresh(medium, instance, first_ts)?;
            Recovered {
                store,
                report,
                durable: None,
                cold: None,
                redone: Vec::new(),
            }
        };
        let Recovered {
            store,
            report,
            durable,
            cold,
            redone,
        } = recovered;
        // Only the log-free design takes index checkpoints; elsewhere the
        // records would pile up untaken.
        if options.checkpoint.chains() && options.durability == Durability::LogFree {
            // Before any commit: the first delta after a restart must hold
            // the redone versions and everything committed from now on.
            store.changes.record(options.checkpoint.capture());
            record_redone(&store, &redone, options.checkpoint);
        }
        let path = (!matches!(options.medium, MediumChoice::Simulated(_))
            && options.durability != Durability::None)
            .then(|| path.as_ref().to_path_buf());
        // Only the log-free design keeps anything in the medium.
        let persistent = options.durability == Durability::LogFree;
        let threads = match options.index_recovery_threads {
            0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
            n => n,
        };
        let indexes = IndexManager::new(options.index_recovery, threads, started, &store.medium);
        // Recovered from node images (IACoW), the indexes are whole already.
        let whole_from_nodes = report.from_checkpoint && durable.as_ref().is_some_and(|d| d.nodes);
        let inner = DbInner {
            store,
            checkpointer: Mutex::new({
                let mut checkpointer =
                    Checkpointer::new(options.checkpoint, options.checkpoint_chain_depth, durable);
                checkpointer.fold_in_background(options.background_thread);
                checkpointer
            }),
            folder: Mutex::new(None),
            collector: Mutex::new(Collector::default()),
            gc: GcOptions {
                enabled: options.gc.enabled && options.checkpoint != CheckpointMode::Off,
                ..options.gc
            },
            loader: Mutex::new(None),
            cold_image: Mutex::new(None),
            checkpointed_at: Mutex::new((Instant::now(), 0)),
            checkpoints: AtomicU64::new(0),
            open_started: started,
            index_loaded_after: Mutex::new(whole_from_nodes.then(|| started.elapsed())),
            handles: std::sync::atomic::AtomicUsize::new(1),
            cancel_load: AtomicBool::new(false),
            last_checkpoint: Mutex::new(None),
            background: Mutex::new(None),
            maintenance: Mutex::new(Maintenance::new(&options, persistent)),
            path,
            sessions: Mutex::new(vec![false; MAX_SESSIONS]),
            create_lock: Mutex::new(()),
            closed: AtomicBool::new(false),
            poisoned: Arc::default(),
            failures: Mutex::new(BackgroundFailures::default()),
            panic_requested: AtomicBool::new(false),
            gc_backlog: AtomicBool::new(false),
            report,
            durability: options.durability,
            indexes,
            index_recovery: Mutex::new(None),
            wal: std::sync::OnceLock::new(),
            wal_report: std::sync::OnceLock::new(),
            _lock: lock,
        };
        let db = Database {
            inner: Arc::new(inner),
        };
        if let Some(found) = wal_found {
            let report = db.open_wal(found, &options, started)?;
            let _ = db.inner.wal_report.set(report);
        }
        if let Some(image) = cold {
            // Until the last cold reader is gone, no checkpoint may free
            // the images it reads.
            db.inner.checkpointer.lock().pin(&image);
            for (_, table) in db.inner.store.tables.iter() {
                if image.has_table(table.heap.def.id) {
                    table.set_cold(Arc::new(ColdRun::new(image.clone(), table.heap.def.id)));
                }
            }
            db.start_index_load(ColdSource::Chain(image), options.load_indexes_in_background);
        }
        db.start_secondary_recovery(options.index_recovery_in_background)?;
        if options.background_thread {
            *db.inner.background.lock() = Some(Background::start(&db.inner));
        }
        Ok(db)
    }

    /// Loads what the tables serve cold (their checkpoint runs, or the
    /// rows of a `wal` snapshot) into DRAM in the background.
    fn start_index_load(&self, source: ColdSource, in_background: bool) {
        *self.inner.cold_image.lock() = Some(source);
        if !in_background {
            return;
        }
        let inner = self.inner.clone();
        self.inner
            .indexes
            .primary_loading
            .store(true, Ordering::Release);
        let handle = std::thread::Builder::new()
            .name("rebound-index-load".into())
            .spawn(move || {
                let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    inner.finish_index_load()
                }));
                inner
                    .indexes
                    .primary_loading
                    .store(false, Ordering::Release);
                if let Err(panic) = outcome {
                    inner.poison("rebound-index-load", panic.as_ref());
                }
            })
            .expect("spawn the index loader");
        *self.inner.loader.lock() = Some(handle);
    }

    /// Blocks until every index is fully in DRAM after a restart; returns
    /// the time from the start of `open` until that happened.
    pub fn wait_for_indexes(&self) -> Option<Duration> {
        self.inner.wait_for_indexes();
        *self.inner.index_loaded_after.lock()
    }

    /// When every primary index was fully in DRAM after a restart, from
    /// the start of `open`, without waiting for it. `None` while the load
    /// runs, when there was no checkpoint to load, when the load failed
    /// (the table is then damaged), or, with background loading off,
    /// until [`wait_for_indexes`](Self::wait_for_indexes) has loaded them.
    pub fn indexes_loaded_after(&self) -> Option<Duration> {
        *self.inner.index_loaded_after.lock()
    }

    /// Takes an index checkpoint now (the background thread also takes them).
    /// With [`Durability::Wal`] this writes a snapshot and recycles the
    /// log it covers (`entries` are its rows).
    pub fn checkpoint(&self) -> Result<CheckpointStats> {
        self.check_open()?;
        if self.inner.durability == Durability::Wal {
            return self.inner.snapshot_as_checkpoint();
        }
        self.inner.take_checkpoint()
    }

    /// Runs one round of block GC now, whatever the batch size, and its
    /// checkpoint; blocks still reachable by running transactions are
    /// freed by a later round or by the background thread.
    pub fn collect_garbage(&self) -> Result<GcStats> {
        self.check_open()?;
        if !self.inner.gc.enabled {
            return Err(Error::InvalidOption(
                "GC is off (it needs index checkpoints)".into(),
            ));
        }
        self.inner.gc_round(1, u64::MAX, true).map(drop)?;
        Ok(self.inner.collector.lock().stats())
    }

    /// Does one round of the background thread's work now, in the calling
    /// thread (see [`Options::background_thread`](Options#structfield.background_thread)): reaps settled
    /// deletions, flags and moves long transactions, runs a GC round if
    /// enough blocks qualify, and takes a checkpoint if one is due. Every
    /// step runs; the first error is returned.
    pub fn run_maintenance(&self) -> Result<()> {
        self.check_open()?;
        self.inner.maintain(false)
    }

    /// Statistics of the most recent checkpoint of this process.
    pub fn last_checkpoint(&self) -> Option<CheckpointStats> {
        self.inner.last_checkpoint.lock().clone()
    }

    /// Creates a table; durable when this returns.
    pub fn create_table(&self, name: &str, options: TableOptions) -> Result<Table> {
        let node_versions = self.inner.checkpointer.lock().mode() == CheckpointMode::IaCow;
        self.create_table_with(name, options, |def| {
            let index = BTree::new();
            let index = match node_versions {
                true => index.with_node_versions(),
                false => index,
            };
            Ok((TableHeap::new(def), index))
        })
    }

    /// Creates a table whose heap and index `build` makes from its
    /// definition (empty, or loaded by recovery).
    fn create_table_with(
        &self,
        name: &str,
        options: TableOptions,
        build: impl FnOnce(TableDef) -> Result<(TableHeap, BTree)>,
    ) -> Result<Table> {
        self.check_open()?;
        validate_table(name, &options)?;
        let _guard = self.inner.create_lock.lock();
        if self.find(name).is_some() {
            return Err(Error::TableExists(name.to_owned()));
        }
        let store = &self.inner.store;
        let id = store.tables.count();
        if id >= MAX_TABLES {
            return Err(Error::TooManyTables(MAX_TABLES));
        }
        let (slot_size, slots_per_block, block_size) = crate::heap::geometry(
            options.max_key_len,
            options.max_value_len,
            options.block_slots,
        );
        let def = TableDef {
            id: id as u32,
            name: name.to_owned(),
            max_key_len: options.max_key_len,
            max_value_len: options.max_value_len,
            slot_size,
            slots_per_block,
            block_size,
        };
        let (heap, index) = build(def.clone())?;
        catalog::create_table(&store.medium, &def)?;
        self.inner.log_ddl(|buf, ts| {
            crate::wal::record::encode_table(buf, ts, &wal::table_spec(&def));
        })?;
        let rt = Arc::new(TableRt::new(heap, index, store.instance));
        store.tables.push(rt.clone());
        Ok(Table { rt })
    }

    /// The table called `name`, if it exists; `Corrupt` if its recovered
    /// data was found damaged (never presented as empty or absent).
    pub fn table(&self, name: &str) -> Result<Option<Table>> {
        self.check_open()?;
        let Some(rt) = self.find(name) else {
            return Ok(None);
        };
        rt.check_damaged()?;
        Ok(Some(Table { rt }))
    }

    /// Names of all tables, in creation order.
    pub fn table_names(&self) -> Vec<String> {
        self.inner
            .store
            .tables
            .iter()
            .map(|(_, t)| t.heap.def.name.clone())
            .collect()
    }

    fn find(&self, name: &str) -> Option<Arc<TableRt>> {
        self.inner
            .store
            .tables
            .iter()
            .find(|(_, t)| t.heap.def.name == name)
            .map(|(_, t)| t.clone())
    }

    /// A session for the calling thread, bound to its own region.
    pub fn session(&self) -> Result<Session> {
        self.check_open()?;
        let mut sessions = self.inner.sessions.lock();
        let worker = sessions
            .iter()
            .position(|used| !used)
            .ok_or(Error::TooManySessions(MAX_SESSIONS))?;
        sessions[worker] = true;
        Ok(Session {
            db: self.clone(),
            worker,
        })
    }

    /// Counters and storage figures; walks every block's obsolete bitmap.
    pub fn stats(&self) -> Stats {
        let store = &self.inner.store;
        let (commits, conflicts) = store.outcomes();
        let gc = self.inner.collector.lock().stats();
        let failures = self.inner.failures.lock();
        Stats {
            gc_failures: failures.gc,
            checkpoint_failures: failures.checkpoint,
            last_error: failures.last_error.clone(),
            poisoned: self.inner.poisoned_by(),
            commits,
            conflicts,
            versions_written: store.versions_written(),
            checkpoints: self.inner.checkpoints.load(Ordering::Acquire),
            medium_bytes: store.medium.len(),
            tables: store
                .tables
                .iter()
                .map(|(_, t)| table_stats(&store.medium, t))
                .collect(),
            gc,
            long_transactions: store.long_moved.load(Ordering::Acquire),
            wal: self.inner.wal_stats(),
        }
    }

    /// What a successful commit survives.
    pub fn guarantee(&self) -> Guarantee {
        self.inner
            .wal_guarantee()
            .unwrap_or_else(|| self.inner.store.medium.guarantee())
    }

    pub fn durability(&self) -> Durability {
        self.inner.durability
    }

    /// What the last open had to do, phase by phase.
    pub fn recovery_report(&self) -> &RecoveryReport {
        self.inner.wal_report.get().unwrap_or(&self.inner.report)
    }

    /// Size of the medium in bytes; with [`Durability::Wal`], of the log
    /// segments and the snapshot in force.
    pub fn medium_size(&self) -> u64 {
        self.inner
            .wal_bytes()
            .unwrap_or_else(|| self.inner.store.medium.len())
    }

    pub fn path(&self) -> Option<&Path> {
        self.inner.path.as_deref()
    }

    /// Stops accepting work and makes everything durable. Sessions still
    /// held afterwards get [`Error::Closed`].
    pub fn close(&self) -> Result<()> {
        self.inner.closed.store(true, Ordering::Release);
        self.inner.stop_secondary_recovery();
        if let Some(background) = self.inner.background.lock().take() {
            background.stop();
        }
        // The last checkpoint installs a running fold: reopening then
        // reads two images, not a long chain.
        self.inner.join_fold();
        // A planned shutdown leaves a fresh checkpoint, so the next open
        // redoes nothing (HiEngine 5.2.4); every commit is already durable.
        // The next open ranks index rebuilds by these (SOFORT's WoPast).
        self.inner.indexes.persist_usage(&self.inner.store, true);
        let mode = self.inner.checkpointer.lock().mode();
        if mode != CheckpointMode::Off && self.inner.durability == Durability::LogFree {
            self.inner.take_checkpoint()?;
        }
        self.inner.close_wal()?;
        self.inner.store.medium.fence()
    }

    fn check_open(&self) -> Result<()> {
        if let Some(why) = self.inner.poisoned_by() {
            return Err(Error::Poisoned(why));
        }
        if self.inner.closed.load(Ordering::Acquire) {
            return Err(Error::Closed);
        }
        Ok(())
    }

    /// Test hook: makes the background thread panic at its next tick, to
    /// check that the database then refuses work with `Error::Poisoned`.
    #[doc(hidden)]
    pub fn inject_background_panic(&self) {
        self.inner.panic_requested.store(true, Ordering::Release);
    }
}

/// A thread's connection to the database, owning one region per table.
pub struct Session {
    db: Database,
    worker: usize,
}

impl Session {
    /// Starts a transaction; one at a time per session.
    pub fn begin(&mut self) -> Transaction<'_> {
        let mut state = TxnState::begin(&self.db.inner.store, self.worker);
        if let Err(e) = self.db.check_open() {
            state.poison(e);
        }
        Transaction {
            state,
            db: &self.db.inner,
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
        self.db.inner.sessions.lock()[self.worker] = false;
    }
}

/// A serializable transaction. Dropping it without `commit` aborts it.
pub struct Transaction<'s> {
    state: TxnState<'s>,
    db: &'s DbInner,
}

impl<'s> Transaction<'s> {
    /// This transaction's timestamp (its id).
    pub fn id(&self) -> u64 {
        self.state.id()
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
        self.state.commit()
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

fn table_stats(medium: &Medium, table: &TableRt) -> TableStats {
    let heap = &table.heap;
    let versions: u64 = (0..MAX_WORKERS).map(|w| heap.used_slots(w)).sum();
    let (mut blocks, mut obsolete, mut unverified) = (0u64, 0u64, 0u64);
    let mut regions = 0;
    for region in heap.regions.iter() {
        regions += u64::from(region.present().next().is_some());
        for block in region.present() {
            blocks += 1;
            obsolete += heap.obsolete_in(medium, block);
            unverified += u64::from(!block.is_trusted());
        }
    }
    let slot = heap.def.slot_size as u64;
    TableStats {
        name: heap.def.name.clone(),
        index_entries: table.index.len() as u64,
        blocks,
        regions,
        block_bytes: blocks * heap.def.block_size as u64,
        versions,
        obsolete_versions: obsolete,
        live_bytes: versions.saturating_sub(obsolete) * slot,
        obsolete_bytes: obsolete * slot,
        tiles: heap.tiles.allocated() as u64,
        unverified_blocks: unverified,
        reserved_blocks: heap.reserved_blocks() as u64,
    }
}

/// The smallest `max_size` accepted: the metadata area. A size below it
/// is refused at `open`; above it, growth past the size is `OutOfSpace`.
pub const MIN_MAX_SIZE: u64 = catalog::DATA_START;
/// The largest injected latency per line: a second already models no
/// medium, and the bound keeps the latency arithmetic from overflowing.
pub const MAX_PERSIST_LATENCY_NS: u64 = 1_000_000_000;

/// Refuses options no database can run with, naming the option, so that
/// nothing is created or recovered with them.
fn validate_options(options: &Options) -> Result<()> {
    let invalid = |what: String| Err(Error::InvalidOption(what));
    if options.max_size < MIN_MAX_SIZE {
        return invalid(format!(
            "max_size {} is below the minimum of {MIN_MAX_SIZE} bytes",
            options.max_size
        ));
    }
    if options.persist_latency_ns > MAX_PERSIST_LATENCY_NS {
        return invalid(format!(
            "persist_latency_ns {} is above {MAX_PERSIST_LATENCY_NS}",
            options.persist_latency_ns
        ));
    }
    if options.checkpoint_interval.is_zero() {
        return invalid("checkpoint_interval must be above zero".into());
    }
    if options.checkpoint_after_versions == 0 {
        return invalid("checkpoint_after_versions must be above zero".into());
    }
    let depths = crate::checkpoint::MIN_CHAIN_DEPTH..=crate::checkpoint::MAX_CHAIN_DEPTH;
    if !depths.contains(&options.checkpoint_chain_depth) {
        return invalid(format!(
            "checkpoint_chain_depth {} is outside {}..={}",
            options.checkpoint_chain_depth,
            depths.start(),
            depths.end()
        ));
    }
    if options.wal_log_limit == 0 {
        return invalid("wal_log_limit must be above zero".into());
    }
    validate_gc(&options.gc)
}

fn validate_gc(gc: &GcOptions) -> Result<()> {
    let fraction = |x: f64| x > 0.0 && x <= 1.0;
    if !fraction(gc.threshold) {
        return Err(Error::InvalidOption(format!(
            "gc threshold {} is outside (0, 1]",
            gc.threshold
        )));
    }
    if gc.space_target.is_nan() || gc.space_target < 1.0 {
        return Err(Error::InvalidOption(format!(
            "gc space_target {} is below 1",
            gc.space_target
        )));
    }
    Ok(())
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
    if options.max_value_len > MAX_VALUE_LEN {
        return Err(Error::InvalidTable(format!(
            "max_value_len must be at most {MAX_VALUE_LEN}"
        )));
    }
    Ok(())
}

/// Opens the medium the options ask for; returns it, the lock file, and
/// whether it already holds a database. A new medium comes back formatted.
fn open_medium(path: &Path, options: &Options) -> Result<(Medium, Option<File>, bool)> {
    let initial = catalog::DATA_START;
    match (&options.medium, options.durability) {
        (_, Durability::None | Durability::Wal) => {
            let medium = Medium::volatile(options.max_size.min(1 << 38), initial)?;
            recovery::format(&medium)?;
            Ok((medium, None, false))
        }
        (MediumChoice::Simulated(device), _) => {
            let medium = Medium::simulated(device.clone());
            // A device whose format never completed is as good as empty.
            if catalog::is_unformatted(&medium) {
                medium.grow(initial)?;
                medium.zero(0, initial);
                medium.persist_now(0, initial)?;
                recovery::format(&medium)?;
                return Ok((medium, None, false));
            }
            Ok((medium, None, true))
        }
        (choice, Durability::LogFree) => open_file_medium(path, choice, options),
    }
}

fn open_file_medium(
    dir: &Path,
    choice: &MediumChoice,
    options: &Options,
) -> Result<(Medium, Option<File>, bool)> {
    ensure_directory(dir, options.create_if_missing)?;
    // Locked before anything in it is looked at: two first opens must not
    // both create (one would truncate or replace the other's mapped file).
    let lock = lock_directory(dir)?;
    let file_path = prepare_directory(dir)?;
    let existing = file_path.exists();
    if !existing {
        create_data_file(dir, &file_path, choice, options)?;
    }
    let file = OpenOptions::new().read(true).write(true).open(&file_path)?;
    // The file's own lock too, for a process that locks only the file.
    if file.try_lock().is_err() {
        return Err(Error::Locked);
    }
    Ok((map_file(dir, file, choice, options)?, Some(lock), existing))
}

/// Takes the directory's exclusive lock (`flock` on the directory
/// itself, so the directory holds nothing but the data file); it is held
/// for as long as the returned handle lives.
fn lock_directory(dir: &Path) -> Result<File> {
    let handle = File::open(dir)?;
    match handle.try_lock() {
        Ok(()) => Ok(handle),
        Err(std::fs::TryLockError::WouldBlock) => Err(Error::Locked),
        Err(std::fs::TryLockError::Error(e)) => Err(e.into()),
    }
}

fn map_file(dir: &Path, file: File, choice: &MediumChoice, options: &Options) -> Result<Medium> {
    let pmem = match choice {
        MediumChoice::PersistentMemory => true,
        MediumChoice::Disk => false,
        _ => crate::medium::on_tmpfs(dir),
    };
    if pmem {
        Medium::persistent_memory(file, options.max_size, options.persist_latency_ns)
    } else {
        Medium::disk(file, options.max_size)
    }
}

#[cfg(test)]
thread_local! {
    /// Test hook: the next fold thread this thread starts fails to spawn.
    static FAIL_NEXT_FOLD_SPAWN: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

fn spawn_fold_thread(
    fold: impl FnOnce() + Send + 'static,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    #[cfg(test)]
    if FAIL_NEXT_FOLD_SPAWN.with(|fail| fail.replace(false)) {
        return Err(std::io::Error::other("simulated spawn failure"));
    }
    std::thread::Builder::new()
        .name("rebound-fold".into())
        .spawn(fold)
}

/// Formats a new data file under a temporary name and renames it into
/// place, so `rebound.db` always holds a complete superblock.
fn create_data_file(
    dir: &Path,
    file_path: &Path,
    choice: &MediumChoice,
    options: &Options,
) -> Result<()> {
    let temp_path = dir.join(format!("{DATA_FILE}.creating"));
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&temp_path)?;
    let medium = map_file(dir, file.try_clone()?, choice, options)?;
    medium.grow(catalog::DATA_START)?;
    recovery::format(&medium)?;
    file.sync_all()?;
    drop(medium);
    std::fs::rename(&temp_path, file_path)?;
    File::open(dir)?.sync_all()?;
    Ok(())
}

/// Makes sure the locked directory `dir` is one we may use; returns the
/// data file path.
fn prepare_directory(dir: &Path) -> Result<PathBuf> {
    let file_path = dir.join(DATA_FILE);
    if file_path.exists() && !file_path.is_file() {
        return Err(Error::NotADatabase(format!(
            "{} is not a regular file",
            file_path.display()
        )));
    }
    let _ = std::fs::remove_file(dir.join(format!("{DATA_FILE}.creating")));
    if !file_path.exists() && std::fs::read_dir(dir)?.next().is_some() {
        return Err(Error::NotADatabase(format!(
            "{} holds other files and no {DATA_FILE}",
            dir.display()
        )));
    }
    Ok(file_path)
}

/// Checks that `dir` is a directory, creating it if it is missing and
/// `create` allows; what the directory must hold is the design's business.
fn ensure_directory(dir: &Path, create: bool) -> Result<()> {
    if dir.exists() && !dir.is_dir() {
        return Err(Error::NotADatabase(format!(
            "{} is not a directory",
            dir.display()
        )));
    }
    if !dir.exists() {
        if !create {
            return Err(Error::NotADatabase(format!(
                "{} does not exist",
                dir.display()
            )));
        }
        std::fs::create_dir_all(dir)?;
    }
    Ok(())
}

impl DbInner {
    /// Why the database refuses work, if it does: a background thread
    /// panicked, or the medium failed a sync (after which nothing written
    /// can be trusted to reach it; reopening recovers what did).
    fn poisoned_by(&self) -> Option<String> {
        let mut poisoned = self.poisoned.lock();
        if poisoned.is_none() {
            *poisoned = self.store.medium.failure();
        }
        poisoned.clone()
    }

    /// Records a panic of a background thread; from now on the database
    /// refuses work. What was acknowledged is durable already.
    fn poison(&self, thread: &str, panic: &(dyn std::any::Any + Send)) {
        let message = panic
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown panic".into());
        self.poisoned
            .lock()
            .get_or_insert(format!("{thread} panicked: {message}"));
    }

    /// Records a failure of background work that has nobody to report to.
    fn note_failure(&self, work: BackgroundWork, error: &Error) {
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

    /// Loads what is left of the checkpoint runs; concurrent callers wait
    /// for the one that loads.
    fn finish_index_load(&self) {
        let mut pending = self.cold_image.lock();
        let Some(image) = pending.as_ref() else {
            return;
        };
        let cancelled = || self.cancel_load.load(Ordering::Acquire);
        let outcome = match image {
            ColdSource::Chain(chain) => load_cold(&self.store, chain, &cancelled),
            ColdSource::Recovered(rows) => self.load_snapshot_rows(rows, &cancelled),
        };
        if cancelled() {
            return;
        }
        if outcome.is_ok() {
            *self.index_loaded_after.lock() = Some(self.open_started.elapsed());
        }
        *pending = None;
    }

    fn wait_for_indexes(&self) {
        let loader = self.loader.lock().take();
        if let Some(handle) = loader {
            let _ = handle.join();
        }
        if !self.cancel_load.load(Ordering::Acquire) {
            self.finish_index_load();
        }
    }

    /// A checkpoint reads the DRAM indexes, so it waits until they are whole.
    fn take_checkpoint(&self) -> Result<CheckpointStats> {
        self.wait_for_indexes();
        let mut checkpointer = self.checkpointer.lock();
        self.checkpoint_with(&mut checkpointer)
    }

    fn checkpoint_with(&self, checkpointer: &mut Checkpointer) -> Result<CheckpointStats> {
        if checkpointer.mode() == CheckpointMode::Off {
            return Err(Error::InvalidOption("index checkpoints are off".into()));
        }
        *self.checkpointed_at.lock() = (Instant::now(), self.store.versions_written());
        let stats = checkpointer.take(&self.store)?;
        self.checkpoints.fetch_add(1, Ordering::AcqRel);
        *self.last_checkpoint.lock() = Some(stats.clone());
        Ok(stats)
    }
}

impl DbInner {
    /// One GC round: relocate if at least `min_candidates` blocks
    /// qualify (stopping after the block that brings the copies to
    /// `max_copies`), checkpoint and unlink when blocks wait for it (at
    /// once when `now` or when candidates were left, else as the pacing
    /// allows), then free whatever no reader can reach. True if it retired
    /// blocks and left candidates for another round.
    fn gc_round(&self, min_candidates: usize, max_copies: u64, now: bool) -> Result<bool> {
        self.wait_for_indexes();
        let mut collector = self.collector.lock();
        collector.release(&self.store);
        // No checkpoint may run between a relocation and the retirement of
        // its block: it could list the blocks without the retired one yet
        // hold an entry read before the copy.
        let mut checkpointer = self.checkpointer.lock();
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
        let (retired, left) = collector.relocate(&self.store, &self.gc, limits, patience)?;
        // Only a round that got somewhere makes the next come sooner.
        let left = left && retired > 0;
        // Candidates left: the copies are checkpointed (and their blocks
        // unlinked) now rather than when the pacing allows, so that redo
        // after a crash stays at one round's copies.
        if collector.wants_checkpoint(&self.gc, now || left) {
            if self.durability == Durability::LogFree {
                self.checkpoint_with(&mut checkpointer)?;
            }
            collector.checkpoint_done(&self.store)?;
        }
        drop(checkpointer);
        collector.release(&self.store);
        Ok(left)
    }

    /// Starts folding the checkpoint chain into a new base on a thread of
    /// its own when the chain wants it; the next checkpoint installs it.
    fn start_fold(&self, this: &Arc<DbInner>) {
        let mut folder = self.folder.lock();
        if folder.as_ref().is_some_and(|f| !f.is_finished()) {
            return;
        }
        let Some(job) = self.checkpointer.lock().fold_job() else {
            return;
        };
        let inner = this.clone();
        match spawn_fold_thread(move || inner.run_fold(job)) {
            Ok(handle) => *folder = Some(handle),
            // The fold counts as failed: the next checkpoint clears it, and
            // a later one is tried (else the chain never folds again).
            Err(e) => self.checkpointer.lock().fold_done(Err(e.into())),
        }
    }

    fn run_fold(&self, job: FoldJob) {
        let outcome =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| job.run(&self.store)));
        match outcome {
            Ok(outcome) => self.checkpointer.lock().fold_done(outcome),
            Err(panic) => self.poison("rebound-fold", panic.as_ref()),
        }
    }

    /// Waits for a running fold, so that the next checkpoint installs it.
    fn join_fold(&self) {
        let folder = self.folder.lock().take();
        if let Some(handle) = folder {
            let _ = handle.join();
        }
    }

    /// Stops and joins the index loader and the checkpoint thread.
    fn stop_background(&self) {
        self.cancel_load.store(true, Ordering::Release);
        self.stop_secondary_recovery();
        self.wait_for_indexes();
        if let Some(background) = self.background.lock().take() {
            background.stop();
        }
        self.join_fold();
        self.stop_snapshot_thread();
    }
}

/// The checkpoint thread: wakes up periodically and takes a checkpoint when
/// enough time has passed or enough versions were written.
struct Background {
    shared: Arc<(Mutex<bool>, parking_lot::Condvar)>,
    thread: Option<std::thread::JoinHandle<()>>,
    /// Keeps blocks ready for growing tables (see `heap/reserve.rs`).
    blocks: Option<std::thread::JoinHandle<()>>,
    db: std::sync::Weak<DbInner>,
}

impl Background {
    fn start(inner: &Arc<DbInner>) -> Background {
        let shared = Arc::new((Mutex::new(false), parking_lot::Condvar::new()));
        let weak = Arc::downgrade(inner);
        let tick = inner
            .maintenance
            .lock()
            .trigger
            .map_or(Duration::from_millis(50), |(interval, _)| {
                interval.min(Duration::from_millis(50))
            });
        let stop = shared.clone();
        let thread = spawn_watched("rebound-background", weak.clone(), move |db| {
            background_loop(db, stop, tick)
        });
        let stop = shared.clone();
        let blocks = spawn_watched("rebound-blocks", weak.clone(), move |db| {
            block_loop(db, stop)
        });
        Background {
            shared,
            thread: Some(thread),
            blocks: Some(blocks),
            db: weak,
        }
    }

    fn signal_stop(&self) {
        *self.shared.0.lock() = true;
        self.shared.1.notify_all();
        if let Some(inner) = self.db.upgrade() {
            inner.store.space.wake_preparer();
        }
    }

    fn stop(mut self) {
        self.signal_stop();
        for thread in [self.thread.take(), self.blocks.take()]
            .into_iter()
            .flatten()
        {
            let _ = thread.join();
        }
    }
}

/// Spawns a maintenance thread; a panic in it poisons the database.
fn spawn_watched(
    name: &str,
    db: std::sync::Weak<DbInner>,
    body: impl FnOnce(std::sync::Weak<DbInner>) + Send + 'static,
) -> std::thread::JoinHandle<()> {
    let thread_name = name.to_string();
    std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            let watched = db.clone();
            let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| body(db)));
            if let (Err(panic), Some(inner)) = (outcome, watched.upgrade()) {
                inner.poison(&thread_name, panic.as_ref());
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

/// Records the versions recovery redid in the change log, as their
/// commits would have; head trees need their keys, read from the slots
/// (a slot without a key makes the next take incomplete).
fn record_redone(store: &Store, redone: &[(u32, Addr)], mode: CheckpointMode) {
    let as_logged = |&(table, addr): &(u32, Addr)| Committed {
        table,
        addr,
        key: &[],
        deletes: false,
    };
    if mode.capture() != Capture::HeadTrees {
        store.changes.add(0, redone.iter().map(as_logged));
        return;
    }
    let mut keys = Vec::new();
    let mut found = Vec::with_capacity(redone.len());
    for &(table, addr) in redone {
        let heap = &store.tables[table as usize].heap;
        let at = keys.len();
        let len = heap.read_key_into(&store.medium, addr, &mut keys);
        let deletes = heap.tombstone(&store.medium, addr) != Some(false);
        found.push((table, addr, at..at + len, deletes));
    }
    let versions = found.iter().map(|(table, addr, key, deletes)| Committed {
        table: *table,
        addr: *addr,
        key: keys.get(key.clone()).unwrap_or_default(),
        deletes: *deletes,
    });
    store.changes.add(0, versions);
}

/// The block thread: whenever a table takes a ready block, makes the
/// next ones (see `heap/reserve.rs`).
fn block_loop(db: std::sync::Weak<DbInner>, stop: Arc<(Mutex<bool>, parking_lot::Condvar)>) {
    loop {
        let Some(inner) = db.upgrade() else { return };
        if *stop.0.lock() {
            return;
        }
        let mut tiles_pending = false;
        for (_, table) in inner.store.tables.iter() {
            // A full medium fails here first: the table keeps no reserve
            // then, and the writer that needs a block meets (and reports)
            // the same error itself.
            let (medium, space) = (&inner.store.medium, &inner.store.space);
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
        // Off the workers: a worker that fills its index chunk takes this
        // one instead of waiting for the kernel to zero a new one.
        crate::index::prepare_spare_chunk();
        if !tiles_pending {
            inner.store.space.wait_for_taken_blocks(BLOCK_THREAD_IDLE);
        }
    }
}

/// A GC round copies at most this fraction of the checkpoint trigger's
/// volume (see `DbInner::maintain`).
const GC_COPY_SHARE: u64 = 8;

/// What maintenance rounds need from options and from earlier rounds.
struct Maintenance {
    /// When a checkpoint is due (interval, versions); `None` without
    /// index checkpoints.
    trigger: Option<(Duration, u64)>,
    long_after: Duration,
    /// Clock readings of earlier rounds, oldest first.
    clock_history: std::collections::VecDeque<(Instant, u64)>,
    /// Where the scrub of blocks from the medium resumes.
    scrub: ScrubCursor,
}

/// Position of the background scrub: (table, region, block seq).
#[derive(Default)]
struct ScrubCursor {
    table: usize,
    region: usize,
    seq: usize,
    /// Blocks left untrusted in the pass so far (damaged, or a region's
    /// last block); another pass follows while that number shrinks.
    left: usize,
    left_by_last_pass: Option<usize>,
    finished: bool,
}

/// Blocks one maintenance round verifies at most: 4 MiB of slots with the
/// default block size, a few milliseconds of checksums every tick.
const SCRUB_BLOCKS_PER_ROUND: usize = 4;

impl Maintenance {
    fn new(options: &Options, persistent: bool) -> Maintenance {
        let checkpoints = persistent && options.checkpoint != CheckpointMode::Off;
        Maintenance {
            trigger: checkpoints.then_some((
                options.checkpoint_interval,
                options.checkpoint_after_versions,
            )),
            long_after: options.long_transaction_after,
            clock_history: std::collections::VecDeque::new(),
            scrub: ScrubCursor::default(),
        }
    }
}

impl DbInner {
    /// One round of maintenance: remove the index entries of settled
    /// deletions, flag long transactions and move idle ones, run GC when
    /// enough blocks qualify, and take a checkpoint when the trigger
    /// (interval, versions) says one is due. Rounds do not overlap.
    /// In the background thread (`background`), failures have nobody to
    /// go to, so they are counted in `Stats` with the last error.
    fn maintain(&self, background: bool) -> Result<()> {
        let mut m = self.maintenance.lock();
        self.store.reap_deleted();
        self.maintain_secondaries(background);
        m.clock_history
            .push_back((Instant::now(), self.store.clock.peek()));
        while m.clock_history.len() > 1 && m.clock_history[1].0.elapsed() >= m.long_after {
            m.clock_history.pop_front();
        }
        // The newest clock reading at least `long_after` old: transactions
        // announced below it have run at least that long.
        if let Some(&(at, cutoff)) = m.clock_history.front() {
            if at.elapsed() >= m.long_after {
                self.store.flag_long_transactions(cutoff);
                self.store.move_idle_long_transactions();
            }
        }
        self.scrub_step(&mut m.scrub);
        // GC's copies are versions too: until the next checkpoint, a crash
        // leaves them to redo before the first transaction. So a round
        // copies an eighth of the checkpoint trigger's volume at most; a
        // round that left candidates behind checkpoints at once and is
        // followed by the next after a short pause (`gc_backlog`).
        let max_copies = m
            .trigger
            .map_or(u64::MAX, |(_, volume)| (volume / GC_COPY_SHARE).max(1));
        let gc = match self.gc.enabled {
            true => self.gc_round(self.gc.batch_blocks.max(1), max_copies, false),
            false => Ok(false),
        };
        self.gc_backlog
            .store(matches!(gc, Ok(true)), Ordering::Relaxed);
        let gc = gc.map(drop);
        if let (true, Err(e)) = (background, &gc) {
            self.note_failure(BackgroundWork::Gc, e);
        }
        let Some((interval, volume)) = m.trigger else {
            return gc;
        };
        // The mark first: a checkpoint of another thread may move it past
        // a count read before it (the count only grows, so read after, it
        // is at least the mark).
        let (last_time, last_versions) = *self.checkpointed_at.lock();
        let written = self.store.versions_written();
        assert!(
            written >= last_versions,
            "versions written went back from {last_versions} to {written}"
        );
        let due = written - last_versions >= volume
            || (written > last_versions && last_time.elapsed() >= interval);
        let checkpoint = match due {
            true => self.take_checkpoint().map(drop),
            false => Ok(()),
        };
        if let (true, Err(e)) = (background, &checkpoint) {
            self.note_failure(BackgroundWork::Checkpoint, e);
        }
        gc.and(checkpoint)
    }
}

impl DbInner {
    /// Verifies a few blocks that came from the medium, so that reads of
    /// them stop computing checksums (`TableHeap::scrub_block`). Passes
    /// repeat while blocks are left untrusted: a region's last block is
    /// trusted once it is no longer last; a damaged block never is, and
    /// reads of it keep verifying and reporting the damage.
    fn scrub_step(&self, cursor: &mut ScrubCursor) {
        if cursor.finished {
            return;
        }
        let tables = &self.store.tables;
        let mut budget = SCRUB_BLOCKS_PER_ROUND;
        while budget > 0 {
            let Some(table) = tables.get(cursor.table) else {
                let left = cursor.left;
                *cursor = ScrubCursor {
                    left_by_last_pass: Some(left),
                    finished: left == 0 || cursor.left_by_last_pass == Some(left),
                    ..ScrubCursor::default()
                };
                return;
            };
            let heap = &table.heap;
            let Some(region) = heap.regions.get(cursor.region) else {
                (cursor.table, cursor.region, cursor.seq) = (cursor.table + 1, 0, 0);
                continue;
            };
            if cursor.seq >= region.len() {
                (cursor.region, cursor.seq) = (cursor.region + 1, 0);
                continue;
            }
            let unverified = region
                .get(cursor.seq)
                .is_some_and(|b| !b.is_vacant() && !b.is_trusted());
            if unverified {
                if !heap.scrub_block(&self.store.medium, cursor.region, cursor.seq) {
                    cursor.left += 1;
                }
                budget -= 1;
            }
            cursor.seq += 1;
        }
    }
}

/// Every tick, one round of maintenance (`DbInner::maintain`); after a
/// round that left GC a backlog, the next comes after a 25th of a tick.
fn background_loop(
    db: std::sync::Weak<DbInner>,
    stop: Arc<(Mutex<bool>, parking_lot::Condvar)>,
    tick: Duration,
) {
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
        let Some(inner) = db.upgrade() else { return };
        if inner.panic_requested.swap(false, Ordering::AcqRel) {
            panic!("injected background panic");
        }
        // A poisoned database writes nothing more: its medium may have
        // failed a sync, or a thread died halfway through its work.
        if inner.poisoned_by().is_some() {
            pause = tick;
            continue;
        }
        // Failures are counted in `Stats` by the round itself.
        let _ = inner.maintain(true);
        inner.start_fold(&inner);
        pause = match inner.gc_backlog.load(Ordering::Relaxed) {
            true => tick / 25,
            false => tick,
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A simulated medium and no background thread: replayable.
    fn simulated(device: &SimDevice) -> Options {
        Options::default()
            .medium(MediumChoice::Simulated(device.clone()))
            .background_thread(false)
    }

    /// Blocks made ready ahead are linked nowhere until a writer takes
    /// one: only a growing table gets them, writers use them, extents
    /// from space GC freed (old slots in it) are cleared like any reused
    /// space, and a crash (unfenced writes lost) reopens to exactly the
    /// committed rows, with the extents still held ready free again.
    #[test]
    fn blocks_made_ready_ahead_serve_writers_and_leave_nothing_after_a_crash() {
        let device = SimDevice::new(1 << 28);
        let options = simulated;
        let db = Database::open("unused", options(&device)).unwrap();
        let table_options = TableOptions::default()
            .max_key_len(8)
            .max_value_len(8)
            .block_slots(16);
        let growing = db.create_table("growing", table_options).unwrap();
        let idle = db.create_table("idle", table_options).unwrap();
        let store = &db.inner.store;
        let prepare = |table: &Table| {
            let idle_after = Duration::from_secs(3600);
            table
                .rt
                .heap
                .prepare_blocks(&store.medium, &store.space, idle_after)
        };
        let blocks = |name: &str| {
            let stats = db.stats();
            let table = stats.tables.iter().find(|t| t.name == name).unwrap();
            (table.blocks, table.reserved_blocks)
        };
        let mut session = db.session().unwrap();
        let mut model = std::collections::BTreeMap::new();
        let mut write = |key: u64, value: u64| {
            let mut tx = session.begin();
            tx.put(&growing, &key.to_be_bytes(), &value.to_le_bytes())
                .unwrap();
            tx.commit().unwrap();
            model.insert(key.to_be_bytes().to_vec(), value.to_le_bytes().to_vec());
        };
        for key in 0..16 {
            write(key, key);
        }
        assert_eq!(prepare(&growing).unwrap(), 0, "one block is no growth");
        write(16, 16);
        assert_eq!(prepare(&idle).unwrap(), 0, "an idle table keeps none");
        assert_eq!(prepare(&growing).unwrap(), 2);
        assert_eq!(blocks("growing"), (2, 2));
        for key in 17..=32 {
            write(key, key);
        }
        assert_eq!(blocks("growing"), (3, 1), "the third block came ready");
        // Garbage, then GC: freed blocks hold old slots, and the next
        // extents made ready come from them.
        for round in 1..=6 {
            for key in 0..=32 {
                write(key, round * 100 + key);
            }
        }
        let freed = (0..4)
            .map(|_| db.collect_garbage().unwrap().blocks_freed)
            .max()
            .unwrap();
        assert!(freed > 0, "GC freed blocks");
        let length = store.medium.len();
        for key in 33..100 {
            write(key, key);
            prepare(&growing).unwrap();
        }
        assert_eq!(store.medium.len(), length, "the reserve reused freed space");
        assert_eq!(blocks("growing").1, 2);
        assert_eq!(blocks("idle"), (0, 0));
        let heap = &growing.rt.heap;
        heap.prepare_blocks(&store.medium, &store.space, Duration::ZERO)
            .unwrap();
        assert_eq!(
            blocks("growing").1,
            0,
            "a table that stopped growing gives its reserve back"
        );
        write(100, 100);
        let expected: Vec<_> = model.into_iter().collect();
        drop(session);
        let crashed = device.crash(7);
        drop(db);
        let db = Database::open("unused", options(&crashed)).unwrap();
        let growing = db.table("growing").unwrap().unwrap();
        let mut session = db.session().unwrap();
        let mut tx = session.begin();
        let rows = tx.scan::<&[u8]>(&growing, .., usize::MAX).unwrap();
        assert_eq!(rows, expected);
        tx.commit().unwrap();
        drop(session);
        let stats = db.stats();
        let table = stats.tables.iter().find(|t| t.name == "growing").unwrap();
        assert_eq!(
            table.reserved_blocks, 0,
            "nothing is held ready after a crash"
        );
    }

    /// A fold still running when a copying checkpoint replaces the chain
    /// reads images no longer in force; the new chain must still merge
    /// its deltas, or it grows past the 64 images a chain may have and
    /// its root no longer opens.
    #[test]
    fn a_replaced_chain_merges_while_a_stale_fold_runs() {
        let device = SimDevice::new(1 << 28);
        let options = |device: &SimDevice| {
            simulated(device)
                .checkpoint(CheckpointMode::Chain)
                .checkpoint_chain_depth(4)
        };
        let db = Database::open("unused", options(&device)).unwrap();
        let table_options = TableOptions::default().max_key_len(8).max_value_len(8);
        let t = db.create_table("t", table_options).unwrap();
        db.inner.checkpointer.lock().fold_in_background(true);
        let mut session = db.session().unwrap();
        let mut write = |key: u64, value: u64| {
            let mut tx = session.begin();
            tx.put(&t, &key.to_be_bytes(), &value.to_le_bytes())
                .unwrap();
            tx.commit().unwrap();
        };
        for key in 0..10 {
            write(key, 0);
        }
        db.checkpoint().unwrap();
        // Deltas as large as the base make the chain want a fold; it is
        // handed out but left running.
        let job = (1..)
            .find_map(|round| {
                (0..10).for_each(|key| write(key, round));
                db.checkpoint().unwrap();
                db.inner.checkpointer.lock().fold_job()
            })
            .unwrap();
        // What the next take holds was not recorded whole: it copies.
        db.inner.store.changes.lose();
        write(0, 1000);
        assert!(!db.checkpoint().unwrap().delta);
        for round in 0..100 {
            write(round % 10, 2000 + round);
            let stats = db.checkpoint().unwrap();
            assert!(
                stats.chain_length <= 4,
                "round {round}: chain of {} images",
                stats.chain_length
            );
        }
        let outcome = job.run(&db.inner.store);
        db.inner.checkpointer.lock().fold_done(outcome);
        db.checkpoint().unwrap();
        drop(t);
        db.close().unwrap();
        let db = Database::open("unused", options(&device.clean_copy())).unwrap();
        let t = db.table("t").unwrap().unwrap();
        let mut tx = db.session().unwrap();
        let mut tx = tx.begin();
        for key in 0..10u64 {
            let value = tx.get(&t, &key.to_be_bytes()).unwrap();
            assert_eq!(
                value,
                Some((2090 + key).to_le_bytes().to_vec()),
                "key {key}"
            );
        }
    }

    /// A fold thread that fails to spawn must not leave the chain marked
    /// as folding: the failure is reported by the next checkpoint and a
    /// later fold starts (before, no fold ever started again).
    #[test]
    fn a_fold_that_fails_to_spawn_is_tried_again() {
        let device = SimDevice::new(1 << 28);
        let options = simulated(&device)
            .checkpoint(CheckpointMode::Chain)
            .checkpoint_chain_depth(4);
        let db = Database::open("unused", options).unwrap();
        let table_options = TableOptions::default().max_key_len(8).max_value_len(8);
        let t = db.create_table("t", table_options).unwrap();
        db.inner.checkpointer.lock().fold_in_background(true);
        let mut session = db.session().unwrap();
        let mut round = 0u64;
        // A round of updates as large as the base, a checkpoint, and a
        // chance for a fold to start; the checkpoint that installs the
        // failed fold reports it.
        let mut next_round = || {
            round += 1;
            for key in 0..10u64 {
                let mut tx = session.begin();
                tx.put(&t, &key.to_be_bytes(), &round.to_le_bytes())
                    .unwrap();
                tx.commit().unwrap();
            }
            match db.checkpoint() {
                Ok(_) => {}
                Err(Error::Io(e)) if e.to_string().contains("simulated spawn failure") => {}
                Err(e) => panic!("round {round}: checkpoint failed: {e}"),
            }
            db.inner.start_fold(&db.inner);
        };
        FAIL_NEXT_FOLD_SPAWN.with(|fail| fail.set(true));
        let failed = (0..100).any(|_| {
            next_round();
            !FAIL_NEXT_FOLD_SPAWN.with(|fail| fail.get())
        });
        assert!(failed, "no fold was started in 100 rounds");
        assert!(
            db.inner.folder.lock().is_none(),
            "the failed spawn left a handle"
        );
        let started = (0..100).any(|_| {
            next_round();
            db.inner.folder.lock().is_some()
        });
        assert!(started, "no fold started again after a failed spawn");
        db.inner.join_fold();
    }
}
