//! Python bindings for the rebound engine: databases, tables, secondary
//! indexes, sessions and transactions, with the engine's errors as Python
//! exceptions and its reports as dicts. See README.md for usage.
//!
//! Every call that can block (open, DDL, commit, reads that may wait for
//! an index build, checkpoints, close) runs with the GIL released, so
//! other Python threads run meanwhile; such a call takes its locks only
//! after releasing the GIL, so a thread waiting for one never holds it.

mod convert;
mod errors;
mod txn;

use pyo3::prelude::*;
use pyo3::types::PyDict;
use rebound::{CheckpointMode, Concurrency, Durability, IndexOptions, Options, TableOptions};

use convert::to_dict;
use errors::to_py;

/// An open database (`rebound::Database`).
#[pyclass(name = "Database", module = "rebound_db", frozen)]
struct PyDatabase {
    db: rebound::Database,
}

#[pymethods]
impl PyDatabase {
    /// Opens (or creates) the database in directory `path`; with
    /// `read_only=True`, without writing to its files (every transaction
    /// is a snapshot). `max_snapshot_lag=n` expires snapshots more than
    /// `n` transactions behind (their next read raises
    /// `SnapshotTooOldError`); 0, the default, never.
    #[new]
    #[pyo3(signature = (path, *, durability = "log-free", checkpoint = "chain", background_thread = true, create_if_missing = true, max_size = None, concurrency = "mvto", read_only = false, max_snapshot_lag = 0))]
    fn new(
        py: Python<'_>,
        path: &str,
        durability: &str,
        checkpoint: &str,
        background_thread: bool,
        create_if_missing: bool,
        max_size: Option<u64>,
        concurrency: &str,
        read_only: bool,
        max_snapshot_lag: u64,
    ) -> PyResult<Self> {
        let mut options = Options::default()
            .durability(parse_durability(durability)?)
            .concurrency(parse_concurrency(concurrency)?)
            .checkpoint(parse_checkpoint(checkpoint)?)
            .background_thread(background_thread)
            .create_if_missing(create_if_missing)
            .read_only(read_only)
            .max_snapshot_lag(max_snapshot_lag);
        if let Some(max_size) = max_size {
            options = options.max_size(max_size);
        }
        let db = py
            .detach(|| rebound::Database::open(path, options))
            .map_err(to_py)?;
        Ok(PyDatabase { db })
    }

    /// Creates a table; durable when this returns.
    #[pyo3(signature = (name, *, max_key_len = 64, max_value_len = rebound::DEFAULT_MAX_VALUE_LEN))]
    fn create_table(
        &self,
        py: Python<'_>,
        name: &str,
        max_key_len: u32,
        max_value_len: u32,
    ) -> PyResult<PyTable> {
        let options = TableOptions::default()
            .max_key_len(max_key_len)
            .max_value_len(max_value_len);
        let table = py
            .detach(|| self.db.create_table(name, options))
            .map_err(to_py)?;
        Ok(PyTable { table })
    }

    /// Creates a secondary index on `table` and builds it; durable when
    /// this returns. `parts` is a list of `("key" | "value", start, end)`
    /// byte ranges whose concatenation is the index key.
    #[pyo3(signature = (table, name, parts, *, unique = false))]
    fn create_index(
        &self,
        py: Python<'_>,
        table: &PyTable,
        name: &str,
        parts: Vec<(String, usize, usize)>,
        unique: bool,
    ) -> PyResult<PyIndex> {
        let mut options = IndexOptions::default().unique(unique);
        for (source, start, end) in parts {
            options = match source.as_str() {
                "key" => options.key_bytes(start..end),
                "value" => options.value_bytes(start..end),
                _ => {
                    return Err(errors::invalid(format!(
                        "an index part comes from 'key' or 'value', not {source:?}"
                    )))
                }
            };
        }
        let index = py
            .detach(|| self.db.create_index(&table.table, name, options))
            .map_err(to_py)?;
        Ok(PyIndex { index })
    }

    /// The index `name` of `table`, or None.
    fn index(&self, table: &PyTable, name: &str) -> PyResult<Option<PyIndex>> {
        let index = self.db.index(&table.table, name).map_err(to_py)?;
        Ok(index.map(|index| PyIndex { index }))
    }

    /// Builds every secondary index not rebuilt yet after a restart;
    /// returns the seconds from the start of open until all were ready.
    fn wait_for_secondary_indexes(&self, py: Python<'_>) -> PyResult<Option<f64>> {
        let ready = py
            .detach(|| self.db.wait_for_secondary_indexes())
            .map_err(to_py)?;
        Ok(ready.map(|after| after.as_secs_f64()))
    }

    /// Drops the table called `name`; durable when this returns. Its name
    /// is free at once; handles to it raise NoSuchTable.
    fn drop_table(&self, py: Python<'_>, name: &str) -> PyResult<()> {
        py.detach(|| self.db.drop_table(name)).map_err(to_py)
    }

    /// The table called `name`, or None.
    fn table(&self, name: &str) -> PyResult<Option<PyTable>> {
        let table = self.db.table(name).map_err(to_py)?;
        Ok(table.map(|table| PyTable { table }))
    }

    fn table_names(&self) -> Vec<String> {
        self.db.table_names()
    }

    /// A session: one transaction at a time, for one thread.
    fn session(&self) -> PyResult<txn::PySession> {
        txn::PySession::new(&self.db)
    }

    /// Counters and storage figures, as a dict.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        to_dict(py, &self.db.stats())
    }

    /// What the last open had to do, phase by phase, as a dict.
    fn recovery_report<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        to_dict(py, self.db.recovery_report())
    }

    /// Runs one round of the background thread's maintenance now (reaping,
    /// snapshot expiry, GC, a checkpoint when due).
    fn run_maintenance(&self, py: Python<'_>) -> PyResult<()> {
        py.detach(|| self.db.run_maintenance()).map_err(to_py)
    }

    /// Takes an index checkpoint now; returns what it did, as a dict.
    fn checkpoint<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let stats = py.detach(|| self.db.checkpoint()).map_err(to_py)?;
        to_dict(py, &stats)
    }

    /// Writes a consistent copy of the open database into directory
    /// `target` (which must not exist) while transactions go on; returns
    /// what it copied, as a dict.
    fn backup_to<'py>(&self, py: Python<'py>, target: &str) -> PyResult<Bound<'py, PyDict>> {
        let stats = py.detach(|| self.db.backup_to(target)).map_err(to_py)?;
        let dict = PyDict::new(py);
        dict.set_item("tables", stats.tables)?;
        dict.set_item("indexes", stats.indexes)?;
        dict.set_item("rows", stats.rows)?;
        dict.set_item("bytes", stats.bytes)?;
        dict.set_item("at", stats.at)?;
        dict.set_item("seconds", stats.elapsed.as_secs_f64())?;
        Ok(dict)
    }

    /// Verifies every checksum and index invariant it can reach; returns
    /// the list of damaged places (empty: intact).
    fn check_integrity(&self, py: Python<'_>) -> PyResult<Vec<String>> {
        let report = py.detach(|| self.db.check_integrity()).map_err(to_py)?;
        Ok(report.problems)
    }

    /// Stops accepting work and makes everything durable.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        py.detach(|| self.db.close()).map_err(to_py)
    }

    /// Test hook: makes the background thread panic at its next round,
    /// after which every call raises `PoisonedError`.
    fn _inject_background_panic(&self) {
        self.db.inject_background_panic();
    }
}

fn parse_durability(name: &str) -> PyResult<Durability> {
    match name {
        "log-free" => Ok(Durability::LogFree),
        "none" => Ok(Durability::None),
        "wal" => Ok(Durability::Wal),
        _ => Err(errors::invalid(format!(
            "durability must be 'log-free', 'wal' or 'none', not {name:?}"
        ))),
    }
}

fn parse_concurrency(name: &str) -> PyResult<Concurrency> {
    match name {
        "mvto" => Ok(Concurrency::Mvto),
        "occ" => Ok(Concurrency::Occ),
        _ => Err(errors::invalid(format!(
            "concurrency must be 'mvto' or 'occ', not {name:?}"
        ))),
    }
}

fn parse_checkpoint(name: &str) -> PyResult<CheckpointMode> {
    match name {
        "chain" => Ok(CheckpointMode::Chain),
        "mirror" => Ok(CheckpointMode::Mirror),
        "iacow" => Ok(CheckpointMode::IaCow),
        "cost-model" => Ok(CheckpointMode::CostModel),
        "full" => Ok(CheckpointMode::Full),
        "incremental" => Ok(CheckpointMode::Incremental),
        "off" => Ok(CheckpointMode::Off),
        _ => Err(errors::invalid(format!(
            "checkpoint must be 'chain', 'mirror', 'iacow', 'cost-model', 'full', 'incremental' or 'off', not {name:?}"
        ))),
    }
}

/// A table handle (`rebound::Table`).
#[pyclass(name = "Table", module = "rebound_db", frozen)]
pub(crate) struct PyTable {
    pub(crate) table: rebound::Table,
}

#[pymethods]
impl PyTable {
    #[getter]
    fn name(&self) -> String {
        self.table.name().to_owned()
    }

    fn __repr__(&self) -> String {
        format!("Table({:?})", self.table.name())
    }
}

/// A secondary index handle (`rebound::Index`).
#[pyclass(name = "Index", module = "rebound_db", frozen)]
pub(crate) struct PyIndex {
    pub(crate) index: rebound::Index,
}

#[pymethods]
impl PyIndex {
    #[getter]
    fn name(&self) -> String {
        self.index.name().to_owned()
    }

    #[getter]
    fn unique(&self) -> bool {
        self.index.is_unique()
    }

    fn __repr__(&self) -> String {
        format!(
            "Index({:?} on {:?})",
            self.index.name(),
            self.index.table_name()
        )
    }
}

#[pymodule]
fn rebound_db(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyDatabase>()?;
    m.add_class::<PyTable>()?;
    m.add_class::<PyIndex>()?;
    m.add_class::<txn::PyPendingCommit>()?;
    m.add("DEFAULT_SCAN_LIMIT", txn::DEFAULT_SCAN_LIMIT)?;
    m.add_class::<txn::PySession>()?;
    m.add_class::<txn::PyTransaction>()?;
    errors::register(m)
}
