//! The design layer: one place per durability design, behind one seam.
//!
//! A design decides how a commit becomes durable, what opening a
//! database must recover, which background work keeps recovery short,
//! and what a checkpoint is. Each lives in a folder of its own:
//!
//! * `log_free/`: FIR's log-free, time-ordered heap on persistent
//!   memory or a disk file, with HiEngine's index checkpoints (and, on a
//!   volatile medium, the `none` baseline: the same heap, nothing kept);
//! * `wal/`: LeanStore-style redo logging with snapshots, versions and
//!   indexes in DRAM;
//! * the next design (FOEDUS's OCC with dual pages) takes a folder beside
//!   them and an arm in [`open`].
//!
//! What every design shares (the MVTO store, sessions, the maintenance
//! thread, secondary indexes, the loading of what a restart serves cold)
//! is [`Engine`], in this file and `engine.rs`. The API layer (`db`) holds
//! an `Arc<Engine>` and never asks which design runs: [`open`] is the one
//! place that picks, from a [`Config`] whose variants cannot name an
//! option another design would ignore.

mod engine;
mod log_free;
mod report;
mod secondary;
mod wal;

pub use engine::Engine;
pub use log_free::MAX_PERSIST_LATENCY_NS;
pub use secondary::{build_all as build_secondary_indexes, create_index};
pub use wal::{WalStats, WAL_LOCK_FILE};

use crate::adaptive::IndexRecovery;
use crate::checkpoint::{CheckpointMode, CheckpointStats};
use crate::error::{Error, Result};
use crate::gc::GcOptions;
use crate::index::BTree;
use crate::medium::{Guarantee, SimDevice};
use crate::wal::FileSystem;
pub use report::RecoveryReport;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Name of the data file inside a log-free database directory.
pub const DATA_FILE: &str = "rebound.db";

/// What opening needs, checked: settings every design reads, and the
/// chosen design's own.
pub struct Config {
    pub create_if_missing: bool,
    /// Nothing is written to the database's files (`Options::read_only`).
    pub read_only: bool,
    /// Address space reserved for the medium (the data file, or the
    /// volatile heap of `wal` and `none`).
    pub max_size: u64,
    pub background_thread: bool,
    pub load_indexes_in_background: bool,
    pub gc: GcOptions,
    pub long_transaction_after: Duration,
    /// Expire snapshots this far behind the clock (0: never).
    pub max_snapshot_lag: u64,
    pub index_recovery: IndexRecovery,
    pub index_recovery_threads: usize,
    pub index_recovery_in_background: bool,
    pub concurrency: crate::txn::Concurrency,
    pub head_cache: crate::index::HeadCacheMode,
    pub max_running_transactions: usize,
    pub adaptive_admission: bool,
    pub design: DesignConfig,
}

impl Config {
    /// How many user transactions may run at once: a fixed number if
    /// asked, else (under MVTO) adaptive down to the cores, else no
    /// limit. An optimistic transaction holds nothing while it executes,
    /// only its write set's locks during its commit, so one descheduled
    /// stalls others only rarely (32 threads kept 0.85× of the best
    /// thread count without a limit, and a limit cost it at 8).
    pub fn admission_limit(&self) -> crate::txn::AdmissionLimit {
        use crate::txn::{AdmissionLimit, Concurrency};
        let mvto = self.concurrency == Concurrency::Mvto;
        match (self.max_running_transactions, self.adaptive_admission) {
            (0, true) if mvto => AdmissionLimit::Adaptive {
                floor: std::thread::available_parallelism().map_or(1, usize::from),
            },
            (0, _) => AdmissionLimit::Open,
            (n, _) => AdmissionLimit::Fixed(n),
        }
    }
}

/// The design to run, with the settings only it reads.
pub enum DesignConfig {
    /// FIR's heap on a medium that keeps it.
    LogFree(LogFreeConfig),
    /// FIR's heap in anonymous memory: nothing survives the process.
    Volatile {
        checkpoint: CheckpointMode,
    },
    Wal(WalConfig),
}

/// Settings of the log-free design.
pub struct LogFreeConfig {
    pub medium: MediumKind,
    pub persist_latency_ns: u64,
    pub checkpoint: CheckpointMode,
    pub checkpoint_interval: Duration,
    pub checkpoint_after_versions: u64,
    pub checkpoint_chain_depth: usize,
}

/// Where a log-free heap lives.
pub enum MediumKind {
    /// Persistent-memory emulation on tmpfs/DAX, `msync` elsewhere.
    Auto,
    PersistentMemory,
    Disk,
    Simulated(SimDevice),
}

/// Settings of the `wal` design.
pub struct WalConfig {
    pub log_limit: u64,
    /// Acknowledge commits by epochs of this length (`wal::log`).
    pub epoch: Option<std::time::Duration>,
    pub file_system: FileSystem,
}

/// The seam: what the engine asks of the design that runs. Every method
/// gets the engine's shared state; a design keeps only its own.
pub trait Design: Send + Sync {
    /// The design's own type, for the design's own threads and tests.
    fn as_any(&self) -> &dyn std::any::Any;

    /// What the last open had to do, phase by phase.
    fn report(&self) -> &RecoveryReport;

    /// What a successful commit survives.
    fn guarantee(&self, engine: &Engine) -> Guarantee;

    /// Bytes the design keeps on its medium or files.
    fn bytes(&self, engine: &Engine) -> u64;

    /// An empty primary index as the design's checkpoints need it.
    fn new_index(&self) -> BTree;

    /// Makes a created table or index durable where the design keeps its
    /// catalog beyond the medium (the log); `encode` writes the record.
    fn log_ddl(&self, engine: &Engine, encode: &mut dyn FnMut(&mut Vec<u8>, u64)) -> Result<()>;

    /// A checkpoint now (an index checkpoint, or a snapshot).
    fn checkpoint(&self, engine: &Engine) -> Result<CheckpointStats>;

    /// Held across a GC round: what must not run between a relocation
    /// and the retirement of its block, and what makes the copies durable.
    fn gc_guard(&self) -> Box<dyn GcGuard + '_>;

    /// The most a GC round may copy before it stops.
    fn gc_copy_budget(&self) -> u64;

    /// The design's part of a maintenance round before GC: verification
    /// of recovered blocks.
    fn before_gc(&self, engine: &Engine);

    /// The design's part of a maintenance round after GC: a checkpoint
    /// when one is due.
    fn maintain(&self, engine: &Engine, background: bool) -> Result<()>;

    /// After a background round: work the design runs on threads of its
    /// own (a fold of the checkpoint chain).
    fn after_round(&self, engine: &Arc<Engine>);

    /// How often the maintenance thread wakes at most.
    fn tick(&self) -> Duration;

    /// At close, after background work and the design's own threads
    /// stopped: what leaves the next open nothing to redo. Every commit is
    /// durable already.
    fn close(&self, engine: &Engine) -> Result<()>;

    /// When the last handle goes: stops and joins the design's threads.
    fn stop(&self, engine: &Engine);

    /// Figures of the `wal` design's log, for `Stats`.
    /// Called at the start of each maintenance round: true while other
    /// processes read the database under leases that hold GC back (the
    /// log-free design's read-only opens beside a writer).
    fn hold_for_readers(&self, _engine: &Engine) -> bool {
        false
    }

    /// Reader processes holding a lease, as of the last round.
    fn reader_processes(&self) -> usize {
        0
    }

    fn wal_stats(&self) -> Option<WalStats> {
        None
    }
}

/// See [`Design::gc_guard`].
pub trait GcGuard {
    /// Makes a GC round's copies durable before their blocks are unlinked.
    fn persist_copies(&mut self, engine: &Engine) -> Result<()>;
}

static INSTANCES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// Opens (or creates) the database in `path` with the design `config`
/// names: the one place that branches on the design.
pub fn open(path: &Path, config: Config) -> Result<Arc<Engine>> {
    let started = Instant::now();
    let instance = INSTANCES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let engine = match &config.design {
        DesignConfig::LogFree(design) => log_free::open(path, &config, design, instance, started)?,
        DesignConfig::Volatile { checkpoint } => {
            log_free::open_volatile(&config, *checkpoint, instance, started)?
        }
        DesignConfig::Wal(design) => wal::open(path, &config, design, instance, started)?,
    };
    if let Err(e) = engine.start(&config) {
        // The design's threads (a loader holds the engine, and with it
        // the directory's lock) must not outlive a failed open.
        engine.drop_handle();
        return Err(e);
    }
    Ok(engine)
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
