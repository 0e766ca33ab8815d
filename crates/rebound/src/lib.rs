//! Rebound: an embeddable OLTP storage engine with FIR's log-free,
//! time-ordered persistent storage, MVTO transactions and DRAM indexes.
//!
//! ```no_run
//! use rebound::{Database, Options, TableOptions};
//! let db = Database::open("/dev/shm/example", Options::default())?;
//! let accounts = db.create_table("accounts", TableOptions::default())?;
//! let mut session = db.session()?;
//! let mut tx = session.begin();
//! tx.insert(&accounts, b"alice", b"100")?;
//! tx.commit()?; // durable once this returns
//! # Ok::<(), rebound::Error>(())
//! ```
//!
//! Layers, bottom to top (a layer only calls the ones below it):
//! `medium` → `catalog` → `heap` → `index` → `wal` (the redo log of the
//! `wal` design) → `txn` → `checkpoint` → `gc`
//! → `adaptive` (secondary index recovery) → `design` (one folder per
//! durability design behind one seam, each with its own recovery) → `db`
//! (the public API).
#![deny(unsafe_code)]

/// Consuming builder setters, one per field and named after it: option
/// structs are `#[non_exhaustive]`, so callers outside the crate cannot
/// write struct literals, and new fields must not break them.
macro_rules! setters {
    ($ty:ident { $($(#[doc = $doc:expr])* $field:ident: $fty:ty,)* }) => {
        impl $ty {
            $(
                $(#[doc = $doc])*
                #[must_use]
                pub fn $field(mut self, $field: $fty) -> Self {
                    self.$field = $field;
                    self
                }
            )*
        }
    };
}

mod adaptive;
mod catalog;
mod checkpoint;
mod db;
mod design;
mod error;
#[cfg(test)]
mod fuzz_support;
mod gc;
mod heap;
mod index;
mod medium;
mod parallel;
mod txn;
mod wal;

pub use adaptive::IndexRecovery;
pub use checkpoint::{CheckpointMode, CheckpointStats};
pub use db::{
    BackupStats, Database, Durability, ExportStats, Index, IndexOptions, IndexStats,
    IntegrityReport, MediumChoice, Options, Session, SnapshotStats, Stats, Table, TableStats,
    Transaction, DATA_FILE, DEFAULT_MAX_VALUE_LEN, MAX_VALUE_LEN, MIN_MAX_SIZE,
};
pub use design::RecoveryReport;
pub use design::WalStats;
pub use error::{Error, Result};
pub use gc::{GcOptions, GcStats};
pub use heap::TableOptions;
pub use index::HeadCacheMode;
pub use medium::{Guarantee, SimDevice};
pub use txn::{Concurrency, Cursor, PendingCommit, FRESH_PATIENCE};
pub use wal::{FileSystem, SimFault, SimFs, SimOp};

/// The DRAM index on its own, for the index micro-benchmark
/// (`benches/index.rs`); not part of the supported API.
#[doc(hidden)]
pub mod bench_support {
    pub use crate::index::BTree;
}

/// The README's code blocks, compiled by `cargo test --doc` so that they
/// keep up with the API.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
pub struct ReadmeDoctests;
