//! Python bindings for the rebound engine: databases, tables, sessions and
//! transactions, with the engine's errors as Python exceptions and its
//! reports as dicts. See README.md for usage.

mod convert;
mod errors;
mod txn;

use pyo3::prelude::*;
use pyo3::types::PyDict;
use rebound::{CheckpointMode, Durability, Options, TableOptions};

use convert::to_dict;
use errors::to_py;

/// An open database (`rebound::Database`).
#[pyclass(name = "Database", module = "rebound_db", frozen)]
struct PyDatabase {
    db: rebound::Database,
}

#[pymethods]
impl PyDatabase {
    /// Opens (or creates) the database in directory `path`.
    #[new]
    #[pyo3(signature = (path, *, durability = "log-free", checkpoint = "chain", background_thread = true, create_if_missing = true))]
    fn new(
        path: &str,
        durability: &str,
        checkpoint: &str,
        background_thread: bool,
        create_if_missing: bool,
    ) -> PyResult<Self> {
        let options = Options::default()
            .durability(parse_durability(durability)?)
            .checkpoint(parse_checkpoint(checkpoint)?)
            .background_thread(background_thread)
            .create_if_missing(create_if_missing);
        let db = rebound::Database::open(path, options).map_err(to_py)?;
        Ok(PyDatabase { db })
    }

    /// Creates a table; durable when this returns.
    #[pyo3(signature = (name, *, max_key_len = 64, max_value_len = 1024))]
    fn create_table(&self, name: &str, max_key_len: u32, max_value_len: u32) -> PyResult<PyTable> {
        let options = TableOptions::default()
            .max_key_len(max_key_len)
            .max_value_len(max_value_len);
        let table = self.db.create_table(name, options).map_err(to_py)?;
        Ok(PyTable { table })
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

    /// Takes an index checkpoint now; returns what it did, as a dict.
    fn checkpoint<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let stats = self.db.checkpoint().map_err(to_py)?;
        to_dict(py, &stats)
    }

    /// Stops accepting work and makes everything durable.
    fn close(&self) -> PyResult<()> {
        self.db.close().map_err(to_py)
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

#[pymodule]
fn rebound_db(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyDatabase>()?;
    m.add_class::<PyTable>()?;
    m.add_class::<txn::PySession>()?;
    m.add_class::<txn::PyTransaction>()?;
    errors::register(m)
}
