//! Rebound as the storage under openraft 0.9 (storage-v2): a log store
//! ([`LogStore`]) and a replicated key-value state machine
//! ([`StateMachineStore`]) that share one Rebound database per node.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let (log_store, state_machine) = rebound_raft::open_stores("/dev/shm/node-1")?;
//! let reader = state_machine.reader();
//! // Hand both stores to `openraft::Raft::new`, then read applied state:
//! let value = reader.get(b"some-key")?;
//! # let _ = (log_store, value); Ok(()) }
//! ```
//!
//! The layout of the tables, the snapshot format and the guarantees are
//! described in the crate's README.

pub mod client;
mod error;
pub mod http_api;
mod kv;
pub mod linearizability;
mod log_store;
mod network;
pub mod node;
mod rows;
mod snapshot_format;
mod state_machine;
mod storage;

pub use error::StoreError;
pub use kv::{KvError, KvOp, KvRequest, KvResponse, OpResult, MAX_KEY_LEN, MAX_OPS, MAX_VALUE_LEN};
pub use log_store::{LogStore, MAX_ENTRY_BYTES};
pub use network::HttpNetwork;
pub use snapshot_format::SnapshotFormatError;
pub use state_machine::{AppliedState, KvReader, SnapshotBuilder, StateMachineStore};
pub use storage::NodeStorage;

use std::io::Cursor;
use std::path::Path;

openraft::declare_raft_types!(
    /// The openraft type configuration of a Rebound-backed key-value node.
    pub TypeConfig:
        D = KvRequest,
        R = KvResponse,
        NodeId = NodeId,
        Node = openraft::BasicNode,
        Entry = openraft::Entry<TypeConfig>,
        SnapshotData = Cursor<Vec<u8>>,
        AsyncRuntime = openraft::TokioRuntime,
);

/// Node ids are plain numbers.
pub type NodeId = u64;
/// The Raft instance these stores serve.
pub type Raft = openraft::Raft<TypeConfig>;

/// Opens (or creates) the database of one node in `dir`, with Rebound's
/// default, log-free durability, and returns its two stores.
pub fn open_stores(dir: impl AsRef<Path>) -> Result<(LogStore, StateMachineStore), StoreError> {
    open_stores_with(dir, rebound::Options::default())
}

/// [`open_stores`] with the database's options chosen by the caller (a
/// `Durability::Wal` database on a disk, for instance).
pub fn open_stores_with(
    dir: impl AsRef<Path>,
    options: rebound::Options,
) -> Result<(LogStore, StateMachineStore), StoreError> {
    let storage = NodeStorage::open(dir.as_ref(), options)?;
    let state_machine = StateMachineStore::open(storage.clone())?;
    Ok((LogStore::new(storage), state_machine))
}
