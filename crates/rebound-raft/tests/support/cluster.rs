//! An in-process cluster: every node's Raft in one router (a map of live
//! nodes) that the network implementation calls directly. A node that is
//! not in the router is unreachable, both as a target and, once shut
//! down, as a sender.

use openraft::error::{InstallSnapshotError, RPCError, RaftError, RemoteError, Unreachable};
use openraft::network::{Backoff, RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::storage::{RaftLogStorage, RaftStateMachine};
use openraft::{BasicNode, Config, RaftMetrics, ServerState, Snapshot};
use rebound_raft::{open_stores_with, KvReader, NodeId, Raft, StoreError, TypeConfig};
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tempfile::TempDir;

/// How long a test waits for a condition of the cluster before failing.
pub const PATIENCE: Duration = Duration::from_secs(20);

/// The live nodes, by id.
#[derive(Clone, Default)]
pub struct Router {
    nodes: Arc<Mutex<BTreeMap<NodeId, Raft>>>,
}

impl Router {
    pub fn get(&self, id: NodeId) -> Option<Raft> {
        self.nodes.lock().unwrap().get(&id).cloned()
    }

    fn insert(&self, id: NodeId, raft: Raft) {
        self.nodes.lock().unwrap().insert(id, raft);
    }

    fn remove(&self, id: NodeId) -> Option<Raft> {
        self.nodes.lock().unwrap().remove(&id)
    }

    pub fn live(&self) -> Vec<(NodeId, Raft)> {
        let nodes = self.nodes.lock().unwrap();
        nodes.iter().map(|(id, raft)| (*id, raft.clone())).collect()
    }

    /// The leader that some live node knows of, if it is live and itself
    /// says it leads.
    pub fn leader(&self) -> Option<(NodeId, Raft)> {
        let live = self.live();
        live.iter().find_map(|(_, raft)| {
            let leader = raft.metrics().borrow().current_leader?;
            let (_, leader_raft) = live.iter().find(|(id, _)| *id == leader)?;
            let leads = leader_raft.metrics().borrow().state == ServerState::Leader;
            leads.then(|| (leader, leader_raft.clone()))
        })
    }

    /// Waits (up to [`PATIENCE`]) for a live leader.
    pub async fn wait_for_leader(&self) -> (NodeId, Raft) {
        let deadline = Instant::now() + PATIENCE;
        loop {
            if let Some(found) = self.leader() {
                return found;
            }
            assert!(
                Instant::now() < deadline,
                "no leader elected within {PATIENCE:?}"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

impl RaftNetworkFactory<TypeConfig> for Router {
    type Network = Connection;

    async fn new_client(&mut self, target: NodeId, _node: &BasicNode) -> Connection {
        Connection {
            router: self.clone(),
            target,
        }
    }
}

/// A "connection" to one node: direct calls into its Raft.
pub struct Connection {
    router: Router,
    target: NodeId,
}

#[derive(Debug, thiserror::Error)]
#[error("node {0} is not running")]
struct Down(NodeId);

impl Connection {
    /// openraft's `RaftNetwork` fixes the error type, large as it is.
    #[allow(clippy::result_large_err)]
    fn target<E: std::error::Error>(&self) -> Result<Raft, RPCError<NodeId, BasicNode, E>> {
        self.router
            .get(self.target)
            .ok_or_else(|| RPCError::Unreachable(Unreachable::new(&Down(self.target))))
    }

    fn remote<E: std::error::Error>(&self, e: E) -> RPCError<NodeId, BasicNode, E> {
        RPCError::RemoteError(RemoteError::new(self.target, e))
    }
}

impl RaftNetwork<TypeConfig> for Connection {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        let raft = self.target()?;
        raft.append_entries(rpc).await.map_err(|e| self.remote(e))
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<
        InstallSnapshotResponse<NodeId>,
        RPCError<NodeId, BasicNode, RaftError<NodeId, InstallSnapshotError>>,
    > {
        let raft = self.target()?;
        raft.install_snapshot(rpc).await.map_err(|e| self.remote(e))
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        _option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        let raft = self.target()?;
        raft.vote(rpc).await.map_err(|e| self.remote(e))
    }

    /// Short, so that a restarted node is found again quickly.
    fn backoff(&self) -> Backoff {
        Backoff::new(std::iter::repeat(Duration::from_millis(20)))
    }
}

/// Timings for tests: short heartbeats and elections.
pub fn test_config() -> Config {
    Config {
        cluster_name: "rebound-raft-test".into(),
        heartbeat_interval: 50,
        election_timeout_min: 200,
        election_timeout_max: 400,
        ..Config::default()
    }
}

/// A cluster of nodes, each with its database in `root/node-<id>`.
pub struct Cluster {
    pub router: Router,
    config: Arc<Config>,
    /// How every node opens its database.
    options: rebound::Options,
    readers: BTreeMap<NodeId, KvReader>,
    root: TempDir,
}

impl Cluster {
    /// Starts nodes `1..=size` on Rebound's default design, makes them
    /// one cluster and waits for its leader.
    pub async fn start(size: u64, config: Config) -> Cluster {
        Cluster::start_with(size, config, rebound::Options::default()).await
    }

    /// [`Cluster::start`] with the nodes' databases opened with `options`.
    pub async fn start_with(size: u64, config: Config, options: rebound::Options) -> Cluster {
        let config = Arc::new(config.validate().expect("valid config"));
        let mut cluster = Cluster {
            router: Router::default(),
            config,
            options,
            readers: BTreeMap::new(),
            root: super::temp_dir("cluster"),
        };
        let members: BTreeSet<NodeId> = (1..=size).collect();
        for &id in &members {
            cluster.start_node(id).await;
        }
        let first = cluster.router.get(1).expect("node 1 runs");
        first
            .initialize(members)
            .await
            .expect("initialize the cluster");
        cluster.router.wait_for_leader().await;
        cluster
    }

    pub fn dir(&self, id: NodeId) -> PathBuf {
        self.root.path().join(format!("node-{id}"))
    }

    /// Opens node `id`'s stores from its directory and starts its Raft.
    /// Returns the last applied log index its state machine recovered.
    pub async fn start_node(&mut self, id: NodeId) -> Option<u64> {
        let (log_store, state_machine) = open_when_released(&self.dir(id), &self.options).await;
        let reader = state_machine.reader();
        let recovered = reader.contents().expect("read the recovered state").applied;
        let raft = Raft::new(
            id,
            self.config.clone(),
            self.router.clone(),
            log_store,
            state_machine,
        )
        .await
        .expect("start raft");
        self.router.insert(id, raft);
        self.readers.insert(id, reader);
        recovered.map(|log_id| log_id.index)
    }

    /// Takes node `id` out of the router and shuts its Raft down.
    pub async fn stop_node(&mut self, id: NodeId) {
        self.readers.remove(&id);
        let raft = self.router.remove(id).expect("the node runs");
        raft.shutdown().await.expect("shut down raft");
    }

    pub fn reader(&self, id: NodeId) -> &KvReader {
        &self.readers[&id]
    }

    pub fn raft(&self, id: NodeId) -> Raft {
        self.router.get(id).expect("the node runs")
    }

    pub fn metrics(&self, id: NodeId) -> RaftMetrics<NodeId, BasicNode> {
        self.raft(id).metrics().borrow().clone()
    }

    /// Waits until every live node has applied at least up to `index`.
    pub async fn wait_applied(&self, index: u64) {
        for (id, raft) in self.router.live() {
            raft.wait(Some(PATIENCE))
                .applied_index_at_least(Some(index), format!("node {id} applies up to {index}"))
                .await
                .expect("apply in time");
        }
    }

    /// The last log index in the stores of node `id`, which is stopped.
    pub async fn last_log_index_on_disk(&self, id: NodeId) -> u64 {
        let (mut log_store, _) = open_when_released(&self.dir(id), &self.options).await;
        let state = log_store.get_log_state().await.expect("read the log state");
        state.last_log_id.map_or(0, |log_id| log_id.index)
    }

    /// The current snapshot in the stores of node `id`, which is stopped.
    pub async fn current_snapshot_on_disk(&self, id: NodeId) -> Option<Snapshot<TypeConfig>> {
        let (_, mut state_machine) = open_when_released(&self.dir(id), &self.options).await;
        state_machine
            .get_current_snapshot()
            .await
            .expect("read the current snapshot")
    }

    /// Shuts every node down; the directories go with the cluster.
    pub async fn shutdown(mut self) {
        for (id, _) in self.router.live() {
            self.stop_node(id).await;
        }
    }
}

/// The stores of a node that was just shut down: its database may still
/// be held by tasks that are finishing, so `Locked` is retried for a while.
async fn open_when_released(
    dir: &std::path::Path,
    options: &rebound::Options,
) -> (rebound_raft::LogStore, rebound_raft::StateMachineStore) {
    let deadline = Instant::now() + PATIENCE;
    loop {
        match open_stores_with(dir, options.clone()) {
            Ok(stores) => return stores,
            Err(StoreError::Engine(rebound::Error::Locked)) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            Err(e) => panic!("open {}: {e}", dir.display()),
        }
    }
}
