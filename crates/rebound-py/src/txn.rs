//! Sessions and transactions.
//!
//! An engine transaction borrows its session mutably for its whole life,
//! which a Python object (owned by the interpreter, without a lifetime)
//! cannot express. A running transaction therefore owns the engine session
//! it runs on (a self-referential pair built by `ouroboros`) and gives it
//! back to its Python session when it ends; a transaction dropped without
//! ending aborts and frees its engine session instead.
//!
//! Every operation runs with the GIL released and locks the transaction
//! only then: a second Python thread using the same transaction waits for
//! the lock without the GIL, so the first can take the GIL back.

use std::ops::Bound as Edge;
use std::sync::{Mutex, MutexGuard};

use ouroboros::self_referencing;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::errors::{closed, to_py};
use crate::{PyIndex, PyTable};

type Entries = Vec<(Vec<u8>, Vec<u8>)>;
type Pairs<'py> = Vec<(Bound<'py, PyBytes>, Bound<'py, PyBytes>)>;

/// Entries a scan returns unless its `limit` says otherwise: a scan of a
/// large range by mistake costs a bounded amount of memory and time.
/// `limit=None` asks for every entry.
pub const DEFAULT_SCAN_LIMIT: usize = 1000;

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
    /// Starts a transaction; with `read_only=True`, one on a snapshot
    /// (it never conflicts, and writes raise `ReadOnlyError`). If one is
    /// still running on this session, the new one gets an engine session
    /// of its own.
    #[pyo3(signature = (*, read_only = false))]
    fn begin(slf: &Bound<'_, Self>, read_only: bool) -> PyResult<PyTransaction> {
        let this = slf.get();
        let session = match lock(&this.idle).take() {
            Some(session) => session,
            None => this.db.session().map_err(to_py)?,
        };
        let running = RunningBuilder {
            session,
            txn_builder: |session| match read_only {
                true => Some(session.begin_read_only()),
                false => Some(session.begin()),
            },
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
    /// Runs `op` on the transaction, if it is still running, with the GIL
    /// released.
    fn with_txn<T: Send>(
        &self,
        py: Python<'_>,
        op: impl FnOnce(&mut rebound::Transaction<'_>) -> rebound::Result<T> + Send,
    ) -> PyResult<T> {
        py.detach(|| {
            let mut running = lock(&self.running);
            let running = running.as_mut().ok_or_else(closed)?;
            running.with_txn_mut(|txn| match txn {
                Some(txn) => op(txn).map_err(to_py),
                None => Err(closed()),
            })
        })
    }

    /// Ends the transaction with `outcome` (the GIL released) and gives
    /// its engine session back to the Python session (unless that has one
    /// again already).
    fn end<T: Send>(
        &self,
        py: Python<'_>,
        outcome: impl FnOnce(rebound::Transaction<'_>) -> rebound::Result<T> + Send,
    ) -> PyResult<T> {
        py.detach(|| {
            let mut running = lock(&self.running).take().ok_or_else(closed)?;
            let result = running.with_txn_mut(|txn| match txn.take() {
                Some(txn) => outcome(txn).map_err(to_py),
                None => Err(closed()),
            });
            let session = running.into_heads().session;
            let _ = lock(&self.home.get().idle).get_or_insert(session);
            result
        })
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
fn to_pairs(py: Python<'_>, entries: Entries) -> Pairs<'_> {
    entries
        .into_iter()
        .map(|(key, value)| (PyBytes::new(py, &key), PyBytes::new(py, &value)))
        .collect()
}

/// `start <= key < end`, None meaning no bound.
fn bounds<'a>(start: Option<&'a [u8]>, end: Option<&'a [u8]>) -> (Edge<&'a [u8]>, Edge<&'a [u8]>) {
    (
        start.map_or(Edge::Unbounded, Edge::Included),
        end.map_or(Edge::Unbounded, Edge::Excluded),
    )
}

/// A commit made visible whose durability `wait()` awaits.
#[pyclass(name = "PendingCommit", module = "rebound_db", frozen)]
pub struct PyPendingCommit {
    pending: Mutex<Option<rebound::PendingCommit>>,
}

#[pymethods]
impl PyPendingCommit {
    /// Returns once the commit is durable (the GIL released meanwhile).
    fn wait(&self, py: Python<'_>) -> PyResult<()> {
        py.detach(|| match lock(&self.pending).take() {
            Some(pending) => pending.wait().map_err(to_py),
            None => Ok(()),
        })
    }
}

#[pymethods]
impl PyTransaction {
    /// This transaction's timestamp (its id).
    #[getter]
    fn id(&self, py: Python<'_>) -> PyResult<u64> {
        self.with_txn(py, |txn| Ok(txn.id()))
    }

    /// The value of `key`, or None.
    fn get<'py>(
        &self,
        py: Python<'py>,
        table: &PyTable,
        key: &[u8],
    ) -> PyResult<Option<Bound<'py, PyBytes>>> {
        let value = self.with_txn(py, |txn| txn.get(&table.table, key))?;
        Ok(value.map(|value| PyBytes::new(py, &value)))
    }

    /// Inserts a new key; DuplicateKeyError if it exists.
    fn insert(&self, py: Python<'_>, table: &PyTable, key: &[u8], value: &[u8]) -> PyResult<()> {
        self.with_txn(py, |txn| txn.insert(&table.table, key, value))
    }

    /// Replaces the value of an existing key; KeyNotFoundError otherwise.
    fn update(&self, py: Python<'_>, table: &PyTable, key: &[u8], value: &[u8]) -> PyResult<()> {
        self.with_txn(py, |txn| txn.update(&table.table, key, value))
    }

    /// Inserts or replaces; returns whether the key existed.
    fn put(&self, py: Python<'_>, table: &PyTable, key: &[u8], value: &[u8]) -> PyResult<bool> {
        self.with_txn(py, |txn| txn.put(&table.table, key, value))
    }

    /// Deletes a key; returns whether it existed.
    fn delete(&self, py: Python<'_>, table: &PyTable, key: &[u8]) -> PyResult<bool> {
        self.with_txn(py, |txn| txn.delete(&table.table, key))
    }

    /// Deletes every key with `start <= key < end` (None: no bound);
    /// returns how many there were.
    #[pyo3(signature = (table, start = None, end = None))]
    fn delete_range(
        &self,
        py: Python<'_>,
        table: &PyTable,
        start: Option<&[u8]>,
        end: Option<&[u8]>,
    ) -> PyResult<u64> {
        let range = bounds(start, end);
        self.with_txn(py, |txn| txn.delete_range::<&[u8]>(&table.table, range))
    }

    /// Live `(key, value)` pairs with `start <= key < end` (None: no
    /// bound), ascending or with `reverse=True` descending: the first
    /// `limit` of them, `DEFAULT_SCAN_LIMIT` unless given, every one with
    /// `limit=None`.
    #[pyo3(signature = (table, start = None, end = None, *, limit = Some(DEFAULT_SCAN_LIMIT), reverse = false))]
    fn scan<'py>(
        &self,
        py: Python<'py>,
        table: &PyTable,
        start: Option<&[u8]>,
        end: Option<&[u8]>,
        limit: Option<usize>,
        reverse: bool,
    ) -> PyResult<Pairs<'py>> {
        let range = bounds(start, end);
        let entries = self.with_txn(py, |txn| {
            collect(txn.range::<&[u8]>(&table.table, range)?, limit, reverse)
        })?;
        Ok(to_pairs(py, entries))
    }

    /// Live `(key, value)` pairs whose keys start with `prefix`, bounded
    /// as `scan` is.
    #[pyo3(signature = (table, prefix, *, limit = Some(DEFAULT_SCAN_LIMIT), reverse = false))]
    fn prefix<'py>(
        &self,
        py: Python<'py>,
        table: &PyTable,
        prefix: &[u8],
        limit: Option<usize>,
        reverse: bool,
    ) -> PyResult<Pairs<'py>> {
        let entries = self.with_txn(py, |txn| {
            collect(txn.prefix(&table.table, prefix)?, limit, reverse)
        })?;
        Ok(to_pairs(py, entries))
    }

    /// The first row `(key, value)` whose index key is `index_key`, or None.
    fn index_get<'py>(
        &self,
        py: Python<'py>,
        index: &PyIndex,
        index_key: &[u8],
    ) -> PyResult<Option<(Bound<'py, PyBytes>, Bound<'py, PyBytes>)>> {
        let row = self.with_txn(py, |txn| txn.index_get(&index.index, index_key))?;
        Ok(to_pairs(py, row.into_iter().collect()).pop())
    }

    /// Rows `(key, value)` whose index key lies in `start <= k < end`, in
    /// index-key order, bounded as `scan` is.
    #[pyo3(signature = (index, start = None, end = None, *, limit = Some(DEFAULT_SCAN_LIMIT)))]
    fn index_scan<'py>(
        &self,
        py: Python<'py>,
        index: &PyIndex,
        start: Option<&[u8]>,
        end: Option<&[u8]>,
        limit: Option<usize>,
    ) -> PyResult<Pairs<'py>> {
        let range = bounds(start, end);
        let limit = limit.unwrap_or(usize::MAX);
        let rows = self.with_txn(py, |txn| {
            txn.index_scan::<&[u8]>(&index.index, range, limit)
        })?;
        Ok(to_pairs(py, rows))
    }

    /// Makes the transaction durable, then visible.
    fn commit(&self, py: Python<'_>) -> PyResult<()> {
        self.end(py, |txn| txn.commit())
    }

    /// Makes the transaction visible now; the returned `PendingCommit`'s
    /// `wait()` returns once it is durable (in the `wal` design the log
    /// flushes meanwhile; in the others it is durable already).
    fn commit_deferred(&self, py: Python<'_>) -> PyResult<PyPendingCommit> {
        let pending = self.end(py, |txn| txn.commit_deferred())?;
        Ok(PyPendingCommit {
            pending: Mutex::new(Some(pending)),
        })
    }

    /// Rolls the transaction back.
    fn abort(&self, py: Python<'_>) -> PyResult<()> {
        self.end(py, |txn| {
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
        py: Python<'_>,
        exc_type: Option<&Bound<'_, PyAny>>,
        _exc_value: Option<&Bound<'_, PyAny>>,
        _traceback: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        if py.detach(|| lock(&self.running).is_none()) {
            return Ok(false);
        }
        match exc_type {
            None => self.commit(py)?,
            Some(_) => self.abort(py)?,
        }
        Ok(false)
    }
}
