//! openraft's storage conformance suite against the Rebound stores, on
//! the default log-free design and on the `wal` design: each case gets a
//! fresh database in its own temporary directory.

mod support;

use openraft::testing::{StoreBuilder, Suite};
use openraft::StorageError;
use rebound::{Durability, Options};
use rebound_raft::{open_stores_with, LogStore, NodeId, StateMachineStore, TypeConfig};
use tempfile::TempDir;

struct FreshStores(Durability);

impl StoreBuilder<TypeConfig, LogStore, StateMachineStore, TempDir> for FreshStores {
    async fn build(&self) -> Result<(TempDir, LogStore, StateMachineStore), StorageError<NodeId>> {
        let dir = support::temp_dir("suite");
        let options = Options::default().durability(self.0);
        let (log_store, state_machine) =
            open_stores_with(dir.path(), options).expect("open fresh stores");
        Ok((dir, log_store, state_machine))
    }
}

#[test]
fn openraft_storage_suite_passes() {
    Suite::test_all(FreshStores(Durability::LogFree)).expect("the storage suite");
}

#[test]
fn openraft_storage_suite_passes_on_the_wal_design() {
    Suite::test_all(FreshStores(Durability::Wal)).expect("the storage suite");
}
