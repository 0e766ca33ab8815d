//! Options of [`Database::open`](crate::Database::open), checked and
//! turned into the design layer's [`Config`]: an option that only
//! another design reads must stay at its default, so that no combination
//! opens a database that silently ignores part of what it was asked.

use crate::adaptive::IndexRecovery;
use crate::checkpoint::CheckpointMode;
use crate::design::{Config, DesignConfig, LogFreeConfig, MediumKind, WalConfig};
use crate::error::{Error, Result};
use crate::gc::GcOptions;
use crate::index::HeadCacheMode;
use crate::medium::SimDevice;
use crate::txn::Concurrency;
use crate::wal::FileSystem;
use std::time::Duration;

pub use crate::design::MAX_PERSIST_LATENCY_NS;

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
    /// How transactions are kept serializable.
    pub concurrency: Concurrency,
    /// When tables' point reads go through a head cache.
    pub head_cache: HeadCacheMode,
    /// At most this many transactions run at once (0: no limit); others
    /// wait at `begin` (at most 10 ms, then they run regardless).
    pub max_running_transactions: usize,
    /// Without `max_running_transactions`, under MVTO: when transactions
    /// conflict while more of them run than there are cores, admit fewer
    /// (down to the cores), and more again as they commit (see
    /// `txn/admission.rs`).
    pub adaptive_admission: bool,
    pub medium: MediumChoice,
    /// Injected latency per persisted 256-byte line, emulating slower NVM.
    pub persist_latency_ns: u64,
    /// Create the directory and database when missing.
    pub create_if_missing: bool,
    /// Open without writing to the database's files: every transaction
    /// is a snapshot (writes are `Error::ReadOnly`), nothing is created,
    /// and no background thread runs. A log-free database is recovered in
    /// a private copy-on-write mapping of its file: with no writer, held
    /// with a shared lock (a writer cannot open it meanwhile); beside a
    /// writer process, under a read lease that writer grants (as of a
    /// horizon every earlier commit is below; `Locked` if none comes in
    /// 10 s). A `wal` database is read beside a writer process, as of
    /// what its log held when the open read it.
    pub read_only: bool,
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
    /// A snapshot ([`Session::begin_read_only`](crate::Session::begin_read_only))
    /// more than this many timestamps (transactions begun since) behind
    /// the clock is expired at the next maintenance round: GC no longer
    /// keeps what it reads, and its next read is
    /// [`Error::SnapshotTooOld`]. What a snapshot holds back is then
    /// bounded by what that many transactions write. 0 (the default): no
    /// bound, a snapshot keeps what it reads however long it is open, as
    /// an LMDB or redb reader does.
    pub max_snapshot_lag: u64,
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
    /// With [`Durability::Wal`]: acknowledge commits by epochs of this
    /// length (FOEDUS's decentralized logging: one log sync per epoch,
    /// whatever the commit rate; a commit waits up to an epoch longer).
    /// Zero (the default): each commit once its group's frame is durable.
    pub wal_epoch: Duration,
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
            concurrency: Concurrency::Mvto,
            head_cache: HeadCacheMode::Auto,
            max_running_transactions: 0,
            adaptive_admission: true,
            medium: MediumChoice::Auto,
            persist_latency_ns: 0,
            create_if_missing: true,
            read_only: false,
            max_size: 1 << 40,
            checkpoint: CheckpointMode::Chain,
            checkpoint_interval: Duration::from_millis(25),
            checkpoint_after_versions: 1 << 16,
            checkpoint_chain_depth: 16,
            load_indexes_in_background: true,
            gc: GcOptions::default(),
            long_transaction_after: Duration::from_secs(1),
            max_snapshot_lag: 0,
            background_thread: true,
            index_recovery: IndexRecovery::Adaptive,
            index_recovery_threads: 0,
            index_recovery_in_background: true,
            wal_log_limit: 16 << 20,
            wal_epoch: Duration::ZERO,
            file_system: FileSystem::Real,
        }
    }
}

setters!(Options {
    /// How commits are made durable (default: [`Durability::LogFree`]).
    durability: Durability,
    /// How transactions are kept serializable (default:
    /// [`Concurrency::Mvto`]; [`Concurrency::Occ`] is FOEDUS's optimistic
    /// scheme).
    concurrency: Concurrency,
    /// When a table's point reads look up their row's chain head in a
    /// hash-addressed cache before descending its tree (default:
    /// [`HeadCacheMode::Auto`], once the tree's nodes take more than
    /// 8 MiB). The cache takes 16 to 32 bytes of DRAM per key while on.
    head_cache: HeadCacheMode,
    /// At most this many transactions run at once; the others wait at
    /// `Session::begin`, blocked, up to 10 ms (default: 0, no limit).
    /// About the number of cores suits a thread pool larger than that:
    /// a descheduled transaction then stalls no running one.
    max_running_transactions: usize,
    /// Without a fixed `max_running_transactions`, under MVTO, admit
    /// fewer transactions while many conflict (default: true).
    adaptive_admission: bool,
    /// Where the data lives (default: [`MediumChoice::Auto`]).
    medium: MediumChoice,
    /// Injected latency per persisted 256-byte line, emulating slower NVM.
    persist_latency_ns: u64,
    /// Create the directory and database when missing (default: true).
    create_if_missing: bool,
    /// Open without writing anything (default: false); see
    /// [`Options::read_only`](Options#structfield.read_only).
    read_only: bool,
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
    /// Expire snapshots this many timestamps behind the clock (default: 0,
    /// never); see
    /// [`Options::max_snapshot_lag`](Options#structfield.max_snapshot_lag).
    max_snapshot_lag: u64,
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
    /// With [`Durability::Wal`], acknowledge commits by epochs of this
    /// length (FOEDUS: 20 ms; default: zero, by group commit).
    wal_epoch: Duration,
    /// With [`Durability::Wal`], the file system of its files (default:
    /// the real one; [`FileSystem::Simulated`] for power-loss tests).
    file_system: FileSystem,
});

/// The smallest `max_size` accepted: the metadata area. A size below it
/// is refused at `open`; above it, growth past the size is `OutOfSpace`.
pub const MIN_MAX_SIZE: u64 = crate::catalog::DATA_START;

impl Options {
    /// Options that open the existing database in `dir` with its own
    /// design (told by its files), without creating anything: what a tool
    /// that inspects a database it did not create needs. A directory that
    /// holds no database is `NotADatabase`.
    pub fn for_existing(dir: impl AsRef<std::path::Path>) -> Result<Options> {
        let dir = dir.as_ref();
        let durability = if dir.join(crate::design::DATA_FILE).is_file() {
            Durability::LogFree
        } else if dir.join(crate::design::WAL_LOCK_FILE).is_file() {
            Durability::Wal
        } else {
            return Err(Error::NotADatabase(format!(
                "{} holds no rebound database",
                dir.display()
            )));
        };
        Ok(Options::default()
            .durability(durability)
            .create_if_missing(false))
    }

    /// These options for a copy of the database on files (a backup): the
    /// same design, on the default medium and file system, writable; a
    /// volatile database is copied to the default durable design.
    pub(super) fn for_copy(mut self) -> Options {
        self.medium = MediumChoice::Auto;
        self.file_system = FileSystem::default();
        self.create_if_missing = true;
        // A read-only database is copied into a writable one.
        self.read_only = false;
        if self.durability == Durability::None {
            self.durability = Durability::default();
        }
        self
    }

    /// Checks the options and picks the design they name: the one place
    /// above the design layer that reads `durability`.
    pub(crate) fn into_config(self) -> Result<Config> {
        validate_options(&self)?;
        let design = match self.durability {
            Durability::LogFree => {
                self.refuse_for("log-free", WAL_ONLY)?;
                DesignConfig::LogFree(self.log_free_config())
            }
            Durability::None => {
                self.refuse_for("none", &[WAL_ONLY, MEDIUM_ONLY, INDEX_CHECKPOINTS].concat())?;
                DesignConfig::Volatile {
                    checkpoint: self.checkpoint,
                }
            }
            Durability::Wal => {
                let log_free = [MEDIUM_ONLY, INDEX_CHECKPOINTS, &["checkpoint"]].concat();
                self.refuse_for("wal", &log_free)?;
                DesignConfig::Wal(WalConfig {
                    log_limit: self.wal_log_limit,
                    epoch: (!self.wal_epoch.is_zero()).then_some(self.wal_epoch),
                    file_system: self.file_system.clone(),
                })
            }
        };
        Ok(Config {
            create_if_missing: self.create_if_missing && !self.read_only,
            read_only: self.read_only,
            max_size: self.max_size,
            background_thread: self.background_thread && !self.read_only,
            load_indexes_in_background: self.load_indexes_in_background,
            gc: self.gc,
            long_transaction_after: self.long_transaction_after,
            max_snapshot_lag: self.max_snapshot_lag,
            index_recovery: self.index_recovery,
            index_recovery_threads: self.index_recovery_threads,
            index_recovery_in_background: self.index_recovery_in_background,
            concurrency: self.concurrency,
            head_cache: self.head_cache,
            max_running_transactions: self.max_running_transactions,
            adaptive_admission: self.adaptive_admission,
            design,
        })
    }

    fn log_free_config(&self) -> LogFreeConfig {
        LogFreeConfig {
            medium: match &self.medium {
                MediumChoice::Auto => MediumKind::Auto,
                MediumChoice::PersistentMemory => MediumKind::PersistentMemory,
                MediumChoice::Disk => MediumKind::Disk,
                MediumChoice::Simulated(device) => MediumKind::Simulated(device.clone()),
            },
            persist_latency_ns: self.persist_latency_ns,
            checkpoint: self.checkpoint,
            checkpoint_interval: self.checkpoint_interval,
            checkpoint_after_versions: self.checkpoint_after_versions,
            checkpoint_chain_depth: self.checkpoint_chain_depth,
        }
    }

    /// `InvalidOption` naming the first of `options` that is set away
    /// from its default although `design` does not read it.
    fn refuse_for(&self, design: &str, options: &[&str]) -> Result<()> {
        let default = Options::default();
        let set = |name: &str| match name {
            "medium" => !matches!(self.medium, MediumChoice::Auto),
            "persist_latency_ns" => self.persist_latency_ns != default.persist_latency_ns,
            "checkpoint" => self.checkpoint != default.checkpoint,
            "checkpoint_interval" => self.checkpoint_interval != default.checkpoint_interval,
            "checkpoint_after_versions" => {
                self.checkpoint_after_versions != default.checkpoint_after_versions
            }
            "checkpoint_chain_depth" => {
                self.checkpoint_chain_depth != default.checkpoint_chain_depth
            }
            "wal_log_limit" => self.wal_log_limit != default.wal_log_limit,
            "wal_epoch" => self.wal_epoch != default.wal_epoch,
            "file_system" => !matches!(self.file_system, FileSystem::Real),
            other => unreachable!("no option {other}"),
        };
        match options.iter().find(|name| set(name)) {
            Some(name) => Err(Error::InvalidOption(format!(
                "{name} does not apply to durability {design}"
            ))),
            None => Ok(()),
        }
    }
}

/// Options only the `wal` design reads.
const WAL_ONLY: &[&str] = &["wal_log_limit", "wal_epoch", "file_system"];
/// Options only a log-free heap on a file or device reads.
const MEDIUM_ONLY: &[&str] = &["medium", "persist_latency_ns"];
/// Options of the background trigger of index checkpoints, which only a
/// log-free heap that persists takes.
const INDEX_CHECKPOINTS: &[&str] = &[
    "checkpoint_interval",
    "checkpoint_after_versions",
    "checkpoint_chain_depth",
];

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
    if options.wal_epoch > Duration::from_secs(10) {
        return invalid("wal_epoch must be at most 10 s (zero: no epochs)".into());
    }
    if options.wal_log_limit == 0 {
        return invalid("wal_log_limit must be above zero".into());
    }
    if options.read_only && options.durability == Durability::None {
        return invalid("read_only: a volatile database has nothing to read".into());
    }
    if options.read_only && matches!(options.medium, MediumChoice::Simulated(_)) {
        return invalid("read_only needs a database in files, not a simulated device".into());
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
    // Below one version per live one every table is "over": writers
    // would wait on every round that frees a block.
    if !(gc.max_space == 0.0 || gc.max_space >= 1.0) {
        return Err(Error::InvalidOption(format!(
            "gc max_space {} is neither 0 (never wait) nor at least 1",
            gc.max_space
        )));
    }
    Ok(())
}
