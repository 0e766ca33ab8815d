//! Sessions and transactions.
//!
//! An engine transaction borrows its session mutably for its whole life,
//! which a Python object (owned by the interpreter, without a lifetime)
//! cannot express. A running transaction therefore owns the engine session
//! it runs on (a self-referential pair built by `ouroboros`) and gives it
//! back to its Python session when it ends; a transaction dropped without
//! ending aborts and frees its engine session instead.

use std::ops::Bound as Edge;
use std::sync::{Mutex, MutexGuard};

use ouroboros::self_referencing;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::errors::{closed, to_py};
use crate::PyTable;

type Entries = Vec<(Vec<u8>, Vec<u8>)>;

/// Locks `mutex`; a panic elsewhere while it was held leaves nothing half
/// done that these bindings rely on.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A thread's connection to the database; `begin()` starts a transaction.
#[pyclass(name = "Session", module = "rebound_db", frozen)]
pub struct PySession {
    db: rebound::Database,
    /// The engine session, while no transaction runs on it.
    idle: Mutex<Option<rebound::Session>>,
}

impl PySession {
    pub fn new(db: &rebound::Database) -> PyResult<PySession> {
        let session = db.session().map_err(to_py)?;
        Ok(PySession {
            db: db.clone(),
            idle: Mutex::new(Some(session)),
        })
    }
}

#[pymethods]
impl PySession {
    /// Starts a transaction. If one is still running on this session,
    /// the new one gets an engine session of its own.
    fn begin(slf: &Bound<'_, Self>) -> PyResult<PyTransaction> {
        let this = slf.get();
        let session = match lock(&this.idle).take() {
            Some(session) => session,
            None => this.db.session().map_err(to_py)?,
        };
        let running = RunningBuilder {
            session,
            txn_builder: |session| Some(session.begin()),
        }
        .build();
        Ok(PyTransaction {
            running: Mutex::new(Some(running)),
            home: slf.clone().unbind(),
        })
    }
}

#[self_referencing]
struct Running {
    session: rebound::Session,
    #[borrows(mut session)]
    #[not_covariant]
    txn: Option<rebound::Transaction<'this>>,
}

/// A serializable transaction. Use it as a context manager (commit on
/// success, abort on an exception) or call `commit()` / `abort()`.
/// Dropping it without either aborts it.
#[pyclass(name = "Transaction", module = "rebound_db", frozen)]
pub struct PyTransaction {
    running: Mutex<Option<Running>>,
    home: Py<PySession>,
}

impl PyTransaction {
    /// Runs `op` on the transaction if it is still running.
    fn with_txn<T>(
        &self,
        op: impl FnOnce(&mut rebound::Transaction<'_>) -> rebound::Result<T>,
    ) -> PyResult<T> {
        let mut running = lock(&self.running);
        let running = running.as_mut().ok_or_else(closed)?;
        running.with_txn_mut(|txn| match txn {
            Some(txn) => op(txn).map_err(to_py),
            None => Err(closed()),
        })
    }

    /// Ends the transaction with `outcome` and gives its engine session
    /// back to the Python session (unless that has one again already).
    fn end(
        &self,
        outcome: impl FnOnce(rebound::Transaction<'_>) -> rebound::Result<()>,
    ) -> PyResult<()> {
        let mut running = lock(&self.running).take().ok_or_else(closed)?;
        let result = running.with_txn_mut(|txn| match txn.take() {
            Some(txn) => outcome(txn).map_err(to_py),
            None => Err(closed()),
        });
        let session = running.into_heads().session;
        let _ = lock(&self.home.get().idle).get_or_insert(session);
        result
    }
}

/// At most `limit` entries of `cursor`, ascending or descending.
fn collect(
    cursor: rebound::Cursor<'_, '_>,
    limit: Option<usize>,
    reverse: bool,
) -> rebound::Result<Entries> {
    let limit = limit.unwrap_or(usize::MAX);
    match reverse {
        false => cursor.take(limit).collect(),
        true => cursor.rev().take(limit).collect(),
    }
}

/// Entries as a list of `(bytes, bytes)` tuples.
fn to_pairs<'py>(
    py: Python<'py>,
    entries: Entries,
) -> Vec<(Bound<'py, PyBytes>, Bound<'py, PyBytes>)> {
    entries
        .into_iter()
        .map(|(key, value)| (PyBytes::new(py, &key), PyBytes::new(py, &value)))
        .collect()
}

#[pymethods]
impl PyTransaction {
    /// This transaction's timestamp (its id).
    #[getter]
    fn id(&self) -> PyResult<u64> {
        self.with_txn(|txn| Ok(txn.id()))
    }

    /// The value of `key`, or None.
    fn get<'py>(
        &self,
        py: Python<'py>,
        table: &PyTable,
        key: &[u8],
    ) -> PyResult<Option<Bound<'py, PyBytes>>> {
        let value = self.with_txn(|txn| txn.get(&table.table, key))?;
        Ok(value.map(|value| PyBytes::new(py, &value)))
    }

    /// Inserts a new key; DuplicateKeyError if it exists.
    fn insert(&self, table: &PyTable, key: &[u8], value: &[u8]) -> PyResult<()> {
        self.with_txn(|txn| txn.insert(&table.table, key, value))
    }

    /// Replaces the value of an existing key; KeyNotFoundError otherwise.
    fn update(&self, table: &PyTable, key: &[u8], value: &[u8]) -> PyResult<()> {
        self.with_txn(|txn| txn.update(&table.table, key, value))
    }

    /// Inserts or replaces; returns whether the key existed.
    fn put(&self, table: &PyTable, key: &[u8], value: &[u8]) -> PyResult<bool> {
        self.with_txn(|txn| txn.put(&table.table, key, value))
    }

    /// Deletes a key; returns whether it existed.
    fn delete(&self, table: &PyTable, key: &[u8]) -> PyResult<bool> {
        self.with_txn(|txn| txn.delete(&table.table, key))
    }

    /// Live `(key, value)` pairs with `start <= key < end` (None: no
    /// bound), ascending or with `reverse=True` descending, at most `limit`.
    #[pyo3(signature = (table, start = None, end = None, *, limit = None, reverse = false))]
    fn scan<'py>(
        &self,
        py: Python<'py>,
        table: &PyTable,
        start: Option<&[u8]>,
        end: Option<&[u8]>,
        limit: Option<usize>,
        reverse: bool,
    ) -> PyResult<Vec<(Bound<'py, PyBytes>, Bound<'py, PyBytes>)>> {
        let start = start.map_or(Edge::Unbounded, Edge::Included);
        let end = end.map_or(Edge::Unbounded, Edge::Excluded);
        let entries = self.with_txn(|txn| {
            collect(
                txn.range::<&[u8]>(&table.table, (start, end))?,
                limit,
                reverse,
            )
        })?;
        Ok(to_pairs(py, entries))
    }

    /// Live `(key, value)` pairs whose keys start with `prefix`.
    #[pyo3(signature = (table, prefix, *, limit = None, reverse = false))]
    fn prefix<'py>(
        &self,
        py: Python<'py>,
        table: &PyTable,
        prefix: &[u8],
        limit: Option<usize>,
        reverse: bool,
    ) -> PyResult<Vec<(Bound<'py, PyBytes>, Bound<'py, PyBytes>)>> {
        let entries =
            self.with_txn(|txn| collect(txn.prefix(&table.table, prefix)?, limit, reverse))?;
        Ok(to_pairs(py, entries))
    }

    /// Makes the transaction durable, then visible.
    fn commit(&self) -> PyResult<()> {
        self.end(|txn| txn.commit())
    }

    /// Rolls the transaction back.
    fn abort(&self) -> PyResult<()> {
        self.end(|txn| {
            txn.abort();
            Ok(())
        })
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    /// Commits when the block succeeded, aborts when it raised; a
    /// transaction already ended inside the block is left alone.
    fn __exit__(
        &self,
        exc_type: Option<&Bound<'_, PyAny>>,
        _exc_value: Option<&Bound<'_, PyAny>>,
        _traceback: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        if lock(&self.running).is_none() {
            return Ok(false);
        }
        match exc_type {
            None => self.commit()?,
            Some(_) => self.abort()?,
        }
        Ok(false)
    }
}
