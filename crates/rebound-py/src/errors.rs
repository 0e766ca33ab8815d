//! The engine's errors as Python exceptions. All derive from `ReboundError`;
//! the ones a program reacts to have their own class.

use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use rebound::Error;

create_exception!(
    rebound_db,
    ReboundError,
    PyException,
    "Any error of the engine."
);
create_exception!(
    rebound_db,
    ConflictError,
    ReboundError,
    "A serialization conflict: abort and retry the transaction."
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
    InvalidArgumentError,
    ReboundError,
    "A key, value, table definition or option outside the engine's limits."
);
create_exception!(
    rebound_db,
    CorruptError,
    ReboundError,
    "Damaged or foreign files, or a format this build cannot read."
);
create_exception!(
    rebound_db,
    TransactionClosedError,
    ReboundError,
    "The transaction was committed or aborted, or can only be aborted."
);

/// The Python exception for an engine error.
pub fn to_py(error: Error) -> PyErr {
    let message = error.to_string();
    match error {
        Error::Conflict => ConflictError::new_err(message),
        Error::DuplicateKey => DuplicateKeyError::new_err(message),
        Error::KeyNotFound => KeyNotFoundError::new_err(message),
        Error::KeyLength { .. }
        | Error::ValueTooLarge { .. }
        | Error::InvalidTable(_)
        | Error::InvalidOption(_)
        | Error::NoSuchTable(_)
        | Error::TableExists(_)
        | Error::ForeignTable => InvalidArgumentError::new_err(message),
        Error::Corrupt(_) | Error::NotADatabase(_) | Error::UnsupportedVersion { .. } => {
            CorruptError::new_err(message)
        }
        Error::TransactionPoisoned => TransactionClosedError::new_err(message),
        _ => ReboundError::new_err(message),
    }
}

/// An argument the bindings themselves refuse.
pub fn invalid(message: String) -> PyErr {
    InvalidArgumentError::new_err(message)
}

/// Use of a transaction that has ended.
pub fn closed() -> PyErr {
    TransactionClosedError::new_err("the transaction has already ended")
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("ReboundError", py.get_type::<ReboundError>())?;
    m.add("ConflictError", py.get_type::<ConflictError>())?;
    m.add("DuplicateKeyError", py.get_type::<DuplicateKeyError>())?;
    m.add("KeyNotFoundError", py.get_type::<KeyNotFoundError>())?;
    m.add(
        "InvalidArgumentError",
        py.get_type::<InvalidArgumentError>(),
    )?;
    m.add("CorruptError", py.get_type::<CorruptError>())?;
    m.add(
        "TransactionClosedError",
        py.get_type::<TransactionClosedError>(),
    )?;
    Ok(())
}
