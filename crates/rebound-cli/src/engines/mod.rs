//! The storage engines the workloads run on: Rebound and other embedded
//! engines behind one small transactional key-value interface.
//!
//! The workload drivers are generic over [`Engine`] (monomorphised per
//! engine), so Rebound's own path pays no dynamic dispatch: its adapter
//! implements the traits directly on `rebound::Database`, `Session` and
//! `Transaction`, and every call forwards to the inherent method.
//!
//! A "table" is whatever the engine offers to keep key spaces apart: a
//! Rebound table, an LMDB named database, a redb table, an SQLite table,
//! a fjall partition, a RocksDB column family.

pub mod fjall;
pub mod index;
pub mod lmdb;
pub mod rebound_engine;
pub mod redb;
#[cfg(feature = "rocksdb")]
pub mod rocksdb;
pub mod sqlite;

use clap::{Args, ValueEnum};
pub use index::{Index, IndexMode, IndexRow, IndexSpec};
use serde::{Deserialize, Serialize};
use std::ops::{ControlFlow, RangeBounds};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

/// What a durable commit survives once `commit` has returned.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Guarantee {
    /// The commit reached the disk (fsync/fdatasync/msync).
    PowerLoss,
    /// The commit reached the kernel (page cache, tmpfs): a killed process
    /// loses nothing, a power cut may.
    ProcessCrash,
    /// Commits may be lost even when only the process dies.
    None,
}

impl Guarantee {
    pub fn as_str(self) -> &'static str {
        match self {
            Guarantee::PowerLoss => "power-loss",
            Guarantee::ProcessCrash => "process-crash",
            Guarantee::None => "none",
        }
    }

    /// The class of an engine that syncs (or not) files under `dir`: a
    /// sync on tmpfs keeps data only as long as the machine runs.
    pub fn of_files(dir: &Path, synced: bool, survives_process_crash: bool) -> Guarantee {
        match (synced, survives_process_crash) {
            (true, _) if is_memory_fs(dir) => Guarantee::ProcessCrash,
            (true, _) => Guarantee::PowerLoss,
            (false, true) => Guarantee::ProcessCrash,
            (false, false) => Guarantee::None,
        }
    }
}

impl std::fmt::Display for Guarantee {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// True when `dir` lives on tmpfs or ramfs, judged by the longest mount
/// point of /proc/mounts that contains it (false when that is unknown).
pub fn is_memory_fs(dir: &Path) -> bool {
    let dir = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    let Ok(mounts) = std::fs::read_to_string("/proc/mounts") else {
        return false;
    };
    mounts
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let (_, point, fs) = (f.next()?, f.next()?, f.next()?);
            dir.starts_with(point).then_some((point.len(), fs))
        })
        .max_by_key(|&(len, _)| len)
        .is_some_and(|(_, fs)| fs == "tmpfs" || fs == "ramfs")
}

/// The engines the tool knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum EngineKind {
    Rebound,
    Lmdb,
    Redb,
    Sqlite,
    Fjall,
    /// Only in builds with the `rocksdb` feature.
    Rocksdb,
    /// A local cluster of `rebound-raft` nodes (`ycsb` only, with `--nodes`).
    Raft,
}

impl EngineKind {
    pub fn name(self) -> &'static str {
        match self {
            EngineKind::Rebound => "rebound",
            EngineKind::Lmdb => "lmdb",
            EngineKind::Redb => "redb",
            EngineKind::Sqlite => "sqlite",
            EngineKind::Fjall => "fjall",
            EngineKind::Rocksdb => "rocksdb",
            EngineKind::Raft => "raft",
        }
    }

    /// Engines that admit one write transaction at a time: every
    /// transaction here is a write transaction, so they run one at a time.
    pub fn single_writer(self) -> bool {
        !matches!(self, EngineKind::Rebound | EngineKind::Rocksdb)
    }

    /// The engines of this build, in the order of the comparison.
    pub fn all() -> Vec<EngineKind> {
        let mut v = vec![
            EngineKind::Rebound,
            EngineKind::Lmdb,
            EngineKind::Redb,
            EngineKind::Sqlite,
            EngineKind::Fjall,
        ];
        if cfg!(feature = "rocksdb") {
            v.push(EngineKind::Rocksdb);
        }
        v
    }
}

impl std::fmt::Display for EngineKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// How to open an engine: which one, and its durability.
#[derive(Args, Clone, Debug, Serialize, Deserialize)]
pub struct EngineArgs {
    /// Storage engine.
    #[arg(long, value_enum, default_value = "rebound")]
    pub engine: EngineKind,
    /// Commit without waiting for the disk (other engines' no-sync
    /// setting; Rebound runs its `none` design).
    #[arg(long)]
    #[serde(default)]
    pub no_sync: bool,
    /// Rebound: at most this many transactions run at once, the others
    /// wait at begin (`Options::max_running_transactions`; 0: no limit).
    #[arg(long, default_value_t = 0)]
    #[serde(default)]
    pub max_running: usize,
    /// Rebound: versions per live one past which GC takes half-obsolete
    /// blocks (`GcOptions::space_target`; default: the engine's).
    #[arg(long)]
    #[serde(default)]
    pub gc_space_target: Option<f64>,
    /// Rebound: versions per live one past which writers are slowed for
    /// GC (`GcOptions::max_space`; 0: never; default: the engine's).
    #[arg(long)]
    #[serde(default)]
    pub gc_max_space: Option<f64>,
    /// Rebound: when a table's primary index answers point reads from its
    /// head cache (`Options::head_cache`; default: the engine's, `auto`).
    #[arg(long, value_enum)]
    #[serde(default)]
    pub head_cache: Option<HeadCache>,
}

/// `Options::head_cache` as the tool names it.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum HeadCache {
    /// Once a table's tree outgrows the CPU's caches.
    Auto,
    /// From the first read.
    Always,
    /// Never: every point read descends the tree.
    Off,
}

impl EngineArgs {
    /// The settings of a run with Rebound design `design`.
    pub fn settings(&self, design: &str) -> Settings {
        Settings {
            max_running: self.max_running,
            gc_space_target: self.gc_space_target,
            gc_max_space: self.gc_max_space,
            head_cache: self.head_cache,
            ..Settings::new(!self.no_sync, design)
        }
    }

    /// The name of the contender: Rebound's design, or the engine's name
    /// (with `-nosync` when commits do not wait for the disk).
    pub fn label(&self, design: &str) -> String {
        match (self.engine, self.no_sync) {
            (EngineKind::Rebound, false) => design.to_owned(),
            (EngineKind::Rebound, true) => "none".to_owned(),
            (kind, false) => kind.name().to_owned(),
            (kind, true) => format!("{}-nosync", kind.name()),
        }
    }
}

/// Everything an adapter needs to open its store.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Wait for the medium at commit (the engine's own durable setting).
    pub durable: bool,
    /// Rebound's durability design (see `rebound compare --help`).
    pub design: String,
    /// Rebound's `Options::max_running_transactions`.
    pub max_running: usize,
    /// Rebound's `GcOptions::space_target` and `max_space`, when not the
    /// engine's defaults.
    pub gc_space_target: Option<f64>,
    pub gc_max_space: Option<f64>,
    /// Rebound's `Options::head_cache`, when not the engine's default.
    pub head_cache: Option<HeadCache>,
}

impl Settings {
    pub fn new(durable: bool, design: &str) -> Settings {
        Settings {
            durable,
            design: design.to_owned(),
            max_running: 0,
            gc_space_target: None,
            gc_max_space: None,
            head_cache: None,
        }
    }
}

/// Errors of every engine, in the few kinds the workloads tell apart.
#[derive(Debug)]
pub enum Error {
    /// A serialisation conflict or lock timeout: abort and retry.
    Conflict,
    /// `insert` of a key that is present.
    DuplicateKey,
    /// A row the workload needs is missing.
    KeyNotFound,
    /// Any other error of Rebound.
    Rebound(::rebound::Error),
    /// Any other error of another engine (or, with engine "tpcc", a row
    /// the TPC-C driver cannot read as its layout says).
    Backend {
        engine: &'static str,
        message: String,
    },
    /// The engine cannot do what was asked (or is not in this build).
    Unsupported(String),
}

pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    /// True when running the same transaction again may succeed.
    pub fn is_retryable(&self) -> bool {
        matches!(self, Error::Conflict)
    }

    pub fn backend(engine: &'static str, e: impl std::fmt::Display) -> Error {
        Error::Backend {
            engine,
            message: e.to_string(),
        }
    }
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::Conflict => f.write_str("serialization conflict; retry the transaction"),
            Error::DuplicateKey => f.write_str("key already exists"),
            Error::KeyNotFound => f.write_str("key not found"),
            Error::Rebound(e) => write!(f, "{e}"),
            Error::Backend { engine, message } => write!(f, "{engine}: {message}"),
            Error::Unsupported(what) => write!(f, "unsupported: {what}"),
        }
    }
}

impl std::error::Error for Error {}

impl From<::rebound::Error> for Error {
    fn from(e: ::rebound::Error) -> Error {
        match e {
            ::rebound::Error::Conflict => Error::Conflict,
            ::rebound::Error::DuplicateKey => Error::DuplicateKey,
            ::rebound::Error::KeyNotFound => Error::KeyNotFound,
            e => Error::Rebound(e),
        }
    }
}

/// An open store.
pub trait Engine: Sync + Sized {
    /// A handle of one table, cheap to clone and shared by the threads.
    type Table: Clone + Send + Sync;
    /// One thread's connection.
    type Session: Session<Table = Self::Table>;

    /// Opens (creating if missing) the store in `dir`.
    fn open(dir: &Path, settings: &Settings) -> Result<Self>;
    fn kind(&self) -> EngineKind;
    /// What a commit survives with the settings it was opened with.
    fn guarantee(&self) -> Guarantee;
    /// Opens table `name`, creating it if missing. `shape` sizes Rebound's
    /// slots; the other engines store any length.
    fn open_table(&self, name: &str, shape: &::rebound::TableOptions) -> Result<Self::Table>;
    /// Table `name` if it exists.
    fn find_table(&self, name: &str) -> Result<Option<Self::Table>>;
    /// Opens (creating if missing) secondary index `spec` of `table`.
    /// `IndexMode::Index` asks for the engine's own index where it has
    /// one; otherwise, and by default, the index is a lookup table that
    /// the transactions keep (see [`index`]), to be opened before rows
    /// are inserted into `table`.
    fn open_index(
        &self,
        table: &Self::Table,
        spec: &IndexSpec,
        mode: IndexMode,
    ) -> Result<Index<Self::Table>> {
        let _ = (table, mode);
        index::open_lookup(self, spec)
    }
    /// Secondary index `spec.name` of `table` if it exists, of whichever
    /// kind it was created.
    fn find_index(
        &self,
        table: &Self::Table,
        spec: &IndexSpec,
    ) -> Result<Option<Index<Self::Table>>> {
        let _ = table;
        index::find_lookup(self, spec)
    }
    fn session(&self) -> Result<Self::Session>;
    /// Rows in `table` (an estimate where the engine only has one).
    fn approximate_len(&self, table: &Self::Table) -> Result<u64>;
    /// Bytes of storage in use, where cheap to know (else 0).
    fn medium_size(&self) -> u64 {
        0
    }
    /// Writes a consistent copy of the open store into directory
    /// `target` (created), while it stays usable; with `threads` copying
    /// threads where the engine can (0: its default).
    fn backup_to(&self, target: &Path, threads: usize) -> Result<()> {
        let _ = (target, threads);
        Err(Error::Unsupported(format!(
            "{:?} has no online backup here",
            self.kind()
        )))
    }
    /// Flushes and closes the store.
    fn close(self) -> Result<()>;
    /// The Rebound database behind this engine, for Rebound's own reports
    /// (recovery phases, checkpoints).
    fn rebound(&self) -> Option<&::rebound::Database> {
        None
    }
}

/// One thread's connection to an engine.
pub trait Session {
    type Table;
    type Tx<'s>: Tx<Table = Self::Table>
    where
        Self: 's;

    /// Begins a read-write transaction.
    fn begin(&mut self) -> Result<Self::Tx<'_>>;

    /// Begins a transaction that only reads, on a snapshot where the
    /// engine has them (Rebound); the others run it as `begin` does.
    fn begin_read_only(&mut self) -> Result<Self::Tx<'_>> {
        self.begin()
    }
}

/// What `Tx::scan_with` calls with each row (key, value).
pub type VisitRow<'a> = dyn FnMut(&[u8], &[u8]) -> ControlFlow<()> + 'a;

/// A read-write transaction; dropping it without `commit` aborts it.
pub trait Tx {
    type Table;

    /// A number that names this transaction: larger for later
    /// transactions of the same store (Rebound: its timestamp; others: a
    /// counter drawn at begin, after any writer lock).
    fn id(&self) -> u64;
    fn get(&mut self, table: &Self::Table, key: &[u8]) -> Result<Option<Vec<u8>>>;
    /// Reads `key`'s value into `out`; false if absent. Engines that can
    /// fill a buffer the caller keeps avoid an allocation per read.
    fn get_into(&mut self, table: &Self::Table, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        let value = self.get(table, key)?;
        let found = value.is_some();
        *out = value.unwrap_or_default();
        Ok(found)
    }
    /// Writes `key` whether or not it is present.
    fn put(&mut self, table: &Self::Table, key: &[u8], value: &[u8]) -> Result<()>;
    /// Writes an existing key; the workloads only update rows they know
    /// exist, so engines without a cheaper form simply write it.
    fn update(&mut self, table: &Self::Table, key: &[u8], value: &[u8]) -> Result<()> {
        self.put(table, key, value)
    }
    /// Writes a new key; `Error::DuplicateKey` if it is present.
    fn insert(&mut self, table: &Self::Table, key: &[u8], value: &[u8]) -> Result<()>;
    /// Removes `key`; true if it was present.
    fn delete(&mut self, table: &Self::Table, key: &[u8]) -> Result<bool>;
    /// Up to `limit` rows of `range` in ascending key order.
    fn scan<K: AsRef<[u8]>>(
        &mut self,
        table: &Self::Table,
        range: impl RangeBounds<K>,
        limit: usize,
    ) -> Result<Vec<(Vec<u8>, Vec<u8>)>>;
    /// Calls `visit` with each of up to `limit` rows of `range`, in
    /// ascending key order, until it returns `Break`; returns how many rows
    /// it saw. Engines that can lend rows from reused buffers avoid an
    /// allocation per row; the default collects them with `scan`.
    fn scan_with<K: AsRef<[u8]>>(
        &mut self,
        table: &Self::Table,
        range: impl RangeBounds<K>,
        limit: usize,
        visit: &mut VisitRow<'_>,
    ) -> Result<usize> {
        let mut seen = 0;
        for (key, value) in self.scan(table, range, limit)? {
            seen += 1;
            if visit(&key, &value).is_break() {
                break;
            }
        }
        Ok(seen)
    }
    /// Tells `index` that the row `key` → `value` was just inserted into
    /// its table: a lookup table gets its entry; an engine's own index
    /// has it already.
    fn index_insert(&mut self, index: &Index<Self::Table>, key: &[u8], value: &[u8]) -> Result<()> {
        index::lookup_insert(self, index.lookup()?, key, value)
    }
    /// The rows whose secondary key starts with `prefix`, ordered by
    /// (secondary key, primary key); serializable like `scan`.
    fn index_prefix(&mut self, index: &Index<Self::Table>, prefix: &[u8]) -> Result<Vec<IndexRow>> {
        index::lookup_prefix(self, index.lookup()?, prefix)
    }
    fn commit(self) -> Result<()>;
    /// Commits without waiting for durability where the engine can
    /// (Rebound's `wal` design: the log's flush overlaps the caller's next
    /// transaction); the commit counts as acknowledged once the returned
    /// [`Ack`] is waited for. The other engines commit durably here.
    fn commit_deferred(self) -> Result<Ack>
    where
        Self: Sized,
    {
        self.commit().map(|()| Ack::durable())
    }
    fn abort(self);
}

/// A commit still waiting to be acknowledged (see [`Tx::commit_deferred`]).
#[must_use = "a deferred commit is acknowledged only once it is waited for"]
pub struct Ack(Option<::rebound::PendingCommit>);

impl Ack {
    /// A commit that is durable already.
    pub fn durable() -> Ack {
        Ack(None)
    }

    pub fn pending(commit: ::rebound::PendingCommit) -> Ack {
        Ack(Some(commit))
    }

    /// Returns once the commit is durable.
    pub fn wait(self) -> Result<()> {
        match self.0 {
            Some(commit) => Ok(commit.wait()?),
            None => Ok(()),
        }
    }
}

/// Transaction ids of the engines without their own: microseconds since
/// the epoch at open, then one more per transaction, so ids grow across a
/// crash and reopen as long as a store ran under one transaction per µs.
#[derive(Debug)]
pub struct IdSource(AtomicU64);

impl IdSource {
    pub fn new() -> IdSource {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_micros() as u64)
            .unwrap_or(0);
        IdSource(AtomicU64::new(now))
    }

    pub fn next(&self) -> u64 {
        self.0.fetch_add(1, Ordering::Relaxed)
    }
}

/// Borrowed bounds of a range, for the engines that take `Bound<&[u8]>`.
pub fn bounds<'a, K: AsRef<[u8]> + 'a>(
    range: &'a impl RangeBounds<K>,
) -> (std::ops::Bound<&'a [u8]>, std::ops::Bound<&'a [u8]>) {
    (bytes(range.start_bound()), bytes(range.end_bound()))
}

fn bytes<K: AsRef<[u8]>>(b: std::ops::Bound<&K>) -> std::ops::Bound<&[u8]> {
    use std::ops::Bound;
    match b {
        Bound::Included(k) => Bound::Included(k.as_ref()),
        Bound::Excluded(k) => Bound::Excluded(k.as_ref()),
        Bound::Unbounded => Bound::Unbounded,
    }
}

/// True when no key lies between `lo` and `hi` (some engines panic or
/// misbehave on an inverted range, so adapters answer it themselves).
pub fn is_empty_range(lo: std::ops::Bound<&[u8]>, hi: std::ops::Bound<&[u8]>) -> bool {
    use std::ops::Bound::{Excluded, Included};
    match (lo, hi) {
        (Included(a), Included(b)) => a > b,
        (Included(a) | Excluded(a), Included(b) | Excluded(b)) => a >= b,
        _ => false,
    }
}

/// True when `key` is past the upper bound `end`.
#[cfg(feature = "rocksdb")]
pub fn past_end(key: &[u8], end: std::ops::Bound<&[u8]>) -> bool {
    match end {
        std::ops::Bound::Included(e) => key > e,
        std::ops::Bound::Excluded(e) => key >= e,
        std::ops::Bound::Unbounded => false,
    }
}

/// Runs `$body` with the type alias `$E` naming the engine type of
/// `$kind`: the body is compiled once per engine.
macro_rules! with_engine {
    ($kind:expr, |$E:ident| $body:expr) => {
        match $kind {
            $crate::engines::EngineKind::Rebound => {
                type $E = ::rebound::Database;
                $body
            }
            $crate::engines::EngineKind::Lmdb => {
                type $E = $crate::engines::lmdb::Lmdb;
                $body
            }
            $crate::engines::EngineKind::Redb => {
                type $E = $crate::engines::redb::Redb;
                $body
            }
            $crate::engines::EngineKind::Sqlite => {
                type $E = $crate::engines::sqlite::Sqlite;
                $body
            }
            $crate::engines::EngineKind::Fjall => {
                type $E = $crate::engines::fjall::Fjall;
                $body
            }
            #[cfg(feature = "rocksdb")]
            $crate::engines::EngineKind::Rocksdb => {
                type $E = $crate::engines::rocksdb::Rocks;
                $body
            }
            #[cfg(not(feature = "rocksdb"))]
            $crate::engines::EngineKind::Rocksdb => Err($crate::engines::Error::Unsupported(
                "this build has no RocksDB: build with --features rocksdb".into(),
            )
            .into()),
            $crate::engines::EngineKind::Raft => Err($crate::engines::Error::Unsupported(
                "the raft engine runs only under `ycsb` (a cluster behind HTTP, no embedded handle)".into(),
            )
            .into()),
        }
    };
}
pub(crate) use with_engine;

#[cfg(test)]
mod conformance;
