//! The engine's errors as Python exceptions: one class per kind of
//! `rebound::Error`, all deriving from `ReboundError`, so a program can
//! catch exactly what it reacts to. Two groups keep one name for related
//! kinds: `InvalidArgumentError` (a bad key, value, definition or handle)
//! and `TransactionClosedError` (a transaction that can do nothing more).
//! Every class has `retryable`, true where retrying the transaction may
//! succeed (the engine's `Error::is_retryable`).

use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::types::PyType;
use rebound::Error;

create_exception!(
    rebound_db,
    ReboundError,
    PyException,
    "Any error of the engine."
);
create_exception!(
    rebound_db,
    InvalidArgumentError,
    ReboundError,
    "A key, value, table or index definition, option or handle the engine refuses."
);
create_exception!(
    rebound_db,
    TransactionClosedError,
    ReboundError,
    "The transaction was committed or aborted, or can only be aborted."
);

create_exception!(
    rebound_db,
    ConflictError,
    ReboundError,
    "A serialization conflict: abort and retry the transaction (retryable)."
);
create_exception!(
    rebound_db,
    NotADatabaseError,
    ReboundError,
    "The file or directory was not created by this engine."
);
create_exception!(
    rebound_db,
    CorruptError,
    ReboundError,
    "The database files are damaged (bad checksum, impossible offsets, truncation)."
);
create_exception!(
    rebound_db,
    UnsupportedVersionError,
    ReboundError,
    "The files have a format version this build cannot read."
);
create_exception!(
    rebound_db,
    LockedError,
    ReboundError,
    "Another process (or handle) has the database open."
);
create_exception!(
    rebound_db,
    NoSuchTableError,
    InvalidArgumentError,
    "No table of that name."
);
create_exception!(
    rebound_db,
    TableExistsError,
    InvalidArgumentError,
    "A table of that name exists."
);
create_exception!(
    rebound_db,
    InvalidTableError,
    InvalidArgumentError,
    "A table definition outside the engine's limits."
);
create_exception!(
    rebound_db,
    KeyLengthError,
    InvalidArgumentError,
    "A key that is empty or longer than the table allows."
);
create_exception!(
    rebound_db,
    ValueTooLargeError,
    InvalidArgumentError,
    "A value longer than the table allows."
);
create_exception!(
    rebound_db,
    DuplicateKeyError,
    ReboundError,
    "insert of a key that exists."
);
create_exception!(
    rebound_db,
    KeyNotFoundError,
    ReboundError,
    "update of a key that does not exist."
);
create_exception!(
    rebound_db,
    UniqueViolationError,
    ReboundError,
    "A write (or a unique index's creation) that would give two live rows one key of a unique index."
);
create_exception!(
    rebound_db,
    NoSuchIndexError,
    InvalidArgumentError,
    "No index of that name on the table."
);
create_exception!(
    rebound_db,
    IndexExistsError,
    InvalidArgumentError,
    "An index of that name exists on the table."
);
create_exception!(
    rebound_db,
    InvalidIndexError,
    InvalidArgumentError,
    "An index definition outside the engine's limits."
);
create_exception!(
    rebound_db,
    ForeignTableError,
    InvalidArgumentError,
    "A table or index handle of another database."
);
create_exception!(
    rebound_db,
    TransactionPoisonedError,
    TransactionClosedError,
    "The transaction hit an error earlier and can only be aborted."
);
create_exception!(
    rebound_db,
    TooManySessionsError,
    ReboundError,
    "Every engine session is in use."
);
create_exception!(
    rebound_db,
    TooManyTablesError,
    ReboundError,
    "The catalog is full."
);
create_exception!(
    rebound_db,
    OutOfSpaceError,
    ReboundError,
    "The database reached its size limit or the medium is full."
);
create_exception!(
    rebound_db,
    ClosedError,
    ReboundError,
    "The database was closed."
);
create_exception!(
    rebound_db,
    PoisonedError,
    ReboundError,
    "A background thread failed: reopen the database (nothing acknowledged is lost)."
);
create_exception!(
    rebound_db,
    InvalidOptionError,
    InvalidArgumentError,
    "An option outside the engine's limits."
);
create_exception!(
    rebound_db,
    ReadOnlyError,
    ReboundError,
    "A write in a read-only (snapshot) transaction."
);
create_exception!(
    rebound_db,
    SnapshotTooOldError,
    ReboundError,
    "A snapshot expired for lagging more than max_snapshot_lag: begin a new one."
);
create_exception!(
    rebound_db,
    HeldByReadersError,
    ReboundError,
    "GC or a checkpoint waits while a read-only process holds a lease on the database."
);
create_exception!(
    rebound_db,
    IoError,
    ReboundError,
    "An operating-system I/O error."
);

/// The Python exception for an engine error.
pub fn to_py(error: Error) -> PyErr {
    let message = error.to_string();
    match error {
        Error::Conflict => ConflictError::new_err(message),
        Error::NotADatabase(_) => NotADatabaseError::new_err(message),
        Error::Corrupt(_) => CorruptError::new_err(message),
        Error::UnsupportedVersion { .. } => UnsupportedVersionError::new_err(message),
        Error::Locked => LockedError::new_err(message),
        Error::NoSuchTable(_) => NoSuchTableError::new_err(message),
        Error::TableExists(_) => TableExistsError::new_err(message),
        Error::InvalidTable(_) => InvalidTableError::new_err(message),
        Error::KeyLength { .. } => KeyLengthError::new_err(message),
        Error::ValueTooLarge { .. } => ValueTooLargeError::new_err(message),
        Error::DuplicateKey => DuplicateKeyError::new_err(message),
        Error::KeyNotFound => KeyNotFoundError::new_err(message),
        Error::UniqueViolation(_) => UniqueViolationError::new_err(message),
        Error::NoSuchIndex(_) => NoSuchIndexError::new_err(message),
        Error::IndexExists(_) => IndexExistsError::new_err(message),
        Error::InvalidIndex(_) => InvalidIndexError::new_err(message),
        Error::ForeignTable => ForeignTableError::new_err(message),
        Error::TransactionPoisoned => TransactionPoisonedError::new_err(message),
        Error::TooManySessions(_) => TooManySessionsError::new_err(message),
        Error::TooManyTables(_) => TooManyTablesError::new_err(message),
        Error::OutOfSpace(_) => OutOfSpaceError::new_err(message),
        Error::Closed => ClosedError::new_err(message),
        Error::Poisoned(_) => PoisonedError::new_err(message),
        Error::InvalidOption(_) => InvalidOptionError::new_err(message),
        Error::ReadOnly => ReadOnlyError::new_err(message),
        Error::SnapshotTooOld => SnapshotTooOldError::new_err(message),
        Error::HeldByReaders(_) => HeldByReadersError::new_err(message),
        Error::Io(_) => IoError::new_err(message),
        // A kind newer than these bindings.
        _ => ReboundError::new_err(message),
    }
}

/// An option the bindings themselves refuse.
pub fn invalid(message: String) -> PyErr {
    InvalidOptionError::new_err(message)
}

/// Use of a transaction that has ended.
pub fn closed() -> PyErr {
    TransactionClosedError::new_err("the transaction has already ended")
}

/// Adds every exception class to the module; `retryable` is false on the
/// base and set where the engine says retrying helps.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    let classes = [
        py.get_type::<ReboundError>(),
        py.get_type::<InvalidArgumentError>(),
        py.get_type::<TransactionClosedError>(),
        py.get_type::<ConflictError>(),
        py.get_type::<NotADatabaseError>(),
        py.get_type::<CorruptError>(),
        py.get_type::<UnsupportedVersionError>(),
        py.get_type::<LockedError>(),
        py.get_type::<NoSuchTableError>(),
        py.get_type::<TableExistsError>(),
        py.get_type::<InvalidTableError>(),
        py.get_type::<KeyLengthError>(),
        py.get_type::<ValueTooLargeError>(),
        py.get_type::<DuplicateKeyError>(),
        py.get_type::<KeyNotFoundError>(),
        py.get_type::<UniqueViolationError>(),
        py.get_type::<NoSuchIndexError>(),
        py.get_type::<IndexExistsError>(),
        py.get_type::<InvalidIndexError>(),
        py.get_type::<ForeignTableError>(),
        py.get_type::<TransactionPoisonedError>(),
        py.get_type::<TooManySessionsError>(),
        py.get_type::<TooManyTablesError>(),
        py.get_type::<OutOfSpaceError>(),
        py.get_type::<ClosedError>(),
        py.get_type::<PoisonedError>(),
        py.get_type::<InvalidOptionError>(),
        py.get_type::<ReadOnlyError>(),
        py.get_type::<SnapshotTooOldError>(),
        py.get_type::<HeldByReadersError>(),
        py.get_type::<IoError>(),
    ];
    for class in &classes {
        m.add(class.name()?, class)?;
    }
    mark_retryable(&py.get_type::<ReboundError>(), false)?;
    mark_retryable(
        &py.get_type::<ConflictError>(),
        Error::Conflict.is_retryable(),
    )
}

fn mark_retryable(class: &Bound<'_, PyType>, retryable: bool) -> PyResult<()> {
    class.setattr("retryable", retryable)
}
