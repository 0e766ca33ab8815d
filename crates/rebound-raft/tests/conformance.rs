//! openraft's storage conformance suite against the Rebound stores: each
//! case gets a fresh database in its own temporary directory.

mod support;

use openraft::testing::{StoreBuilder, Suite};
use openraft::StorageError;
use rebound_raft::{open_stores, LogStore, NodeId, StateMachineStore, TypeConfig};
use tempfile::TempDir;

struct FreshStores;

impl StoreBuilder<TypeConfig, LogStore, StateMachineStore, TempDir> for FreshStores {
    async fn build(&self) -> Result<(TempDir, LogStore, StateMachineStore), StorageError<NodeId>> {
        let dir = support::temp_dir("suite");
        let (log_store, state_machine) = open_stores(dir.path()).expect("open fresh stores");
        Ok((dir, log_store, state_machine))
    }
}

#[test]
fn openraft_storage_suite_passes() {
    Suite::test_all(FreshStores).expect("the storage suite");
}
