//! The engine's one error type.

/// Everything that can go wrong, as a value the caller can match on.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A serialization conflict: abort and retry the transaction.
    #[error("serialization conflict; retry the transaction")]
    Conflict,
    /// The file or directory was not created by this engine.
    #[error("not a rebound database: {0}")]
    NotADatabase(String),
    /// The files are damaged (bad checksum, impossible offsets, truncation).
    #[error("database is corrupt: {0}")]
    Corrupt(String),
    /// The file was written by an incompatible format version. Data moves
    /// between format versions through an export stream: export with the
    /// build that wrote the file, import with this one.
    #[error(
        "unsupported format version {found} (this build reads {supported}); to migrate, \
         export with the build that wrote it (`rebound export DIR > FILE`, \
         `Database::export`) and import with this one (`rebound import NEWDIR < FILE`)"
    )]
    UnsupportedVersion { found: u32, supported: u32 },
    /// Another process (or handle) has the database open.
    #[error("database is locked by another user")]
    Locked,
    #[error("no table named {0:?}")]
    NoSuchTable(String),
    #[error("table {0:?} already exists")]
    TableExists(String),
    #[error("invalid table definition: {0}")]
    InvalidTable(String),
    #[error("key of {len} bytes is outside 1..={max}")]
    KeyLength { len: usize, max: usize },
    #[error("value of {len} bytes exceeds the table's limit of {max}")]
    ValueTooLarge { len: usize, max: usize },
    #[error("key already exists")]
    DuplicateKey,
    #[error("key not found")]
    KeyNotFound,
    /// The write would give two live rows the same key in this unique
    /// secondary index; nothing was written.
    #[error("unique index {0:?} already has a row with this key")]
    UniqueViolation(String),
    #[error("no index named {0:?} on this table")]
    NoSuchIndex(String),
    #[error("index {0:?} already exists on this table")]
    IndexExists(String),
    #[error("invalid index definition: {0}")]
    InvalidIndex(String),
    /// The handle belongs to another database or the table was not found in it.
    #[error("table handle does not belong to this database")]
    ForeignTable,
    /// The transaction hit an error earlier and can only be aborted.
    #[error("transaction can no longer commit after an earlier error")]
    TransactionPoisoned,
    #[error("all {0} sessions are in use")]
    TooManySessions(usize),
    #[error("the catalog is full ({0} tables)")]
    TooManyTables(usize),
    #[error("out of space: {0}")]
    OutOfSpace(String),
    #[error("database is closed")]
    Closed,
    /// A background thread of the engine panicked; the database refuses
    /// further work until it is reopened (nothing acknowledged is lost).
    #[error("database is poisoned by a failed background thread: {0}; reopen it")]
    Poisoned(String),
    /// A write in a read-only transaction (a snapshot).
    #[error("the transaction is read-only")]
    ReadOnly,
    #[error("invalid option: {0}")]
    InvalidOption(String),
    /// The work asked for would change what another process reading the
    /// database (a read-only open holding a lease) still reads: a GC
    /// round or an index checkpoint of a log-free database. It runs again
    /// once that reader has closed.
    #[error("busy: {0}")]
    HeldByReaders(String),
    /// A snapshot held GC back by more than `Options::max_snapshot_lag`
    /// and was expired: it reads nothing more. Begin a new one.
    #[error("the snapshot is too old: it was expired for holding back garbage collection")]
    SnapshotTooOld,
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
}

impl Error {
    /// True when retrying the same transaction may succeed.
    pub fn is_retryable(&self) -> bool {
        matches!(self, Error::Conflict)
    }
}

pub type Result<T> = std::result::Result<T, Error>;
