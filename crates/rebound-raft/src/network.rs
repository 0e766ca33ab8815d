//! openraft's network over HTTP: each RPC is a `POST /raft/<name>` of the
//! request's JSON to the target's address, answered with the JSON of the
//! target's `Result`. The blocking HTTP client runs on Tokio's blocking
//! pool, so an RPC never holds a runtime worker.

use crate::{NodeId, TypeConfig};
use openraft::error::{
    InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, Unreachable,
};
use openraft::network::{Backoff, RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::BasicNode;
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::time::Duration;

/// Makes connections to peers; one `ureq::Agent` (a pool of kept-alive
/// connections) serves them all.
#[derive(Clone)]
pub struct HttpNetwork {
    agent: ureq::Agent,
}

impl HttpNetwork {
    pub fn new() -> HttpNetwork {
        HttpNetwork {
            agent: ureq::AgentBuilder::new()
                .timeout_connect(Duration::from_millis(500))
                .build(),
        }
    }
}

impl Default for HttpNetwork {
    fn default() -> HttpNetwork {
        HttpNetwork::new()
    }
}

impl RaftNetworkFactory<TypeConfig> for HttpNetwork {
    type Network = PeerConnection;

    async fn new_client(&mut self, target: NodeId, node: &BasicNode) -> PeerConnection {
        PeerConnection {
            agent: self.agent.clone(),
            target,
            addr: node.addr.clone(),
        }
    }
}

/// RPCs to one peer.
pub struct PeerConnection {
    agent: ureq::Agent,
    target: NodeId,
    addr: String,
}

/// Why an RPC got no answer from the peer's Raft.
#[derive(Debug, thiserror::Error)]
enum Transport {
    #[error("cannot reach node {0}: {1}")]
    Unreachable(NodeId, String),
    #[error("RPC to node {0} failed: {1}")]
    Failed(NodeId, String),
}

impl PeerConnection {
    /// Posts `request` to `/raft/<name>` and decodes the peer's `Result`.
    async fn call<Req, Resp, E>(
        &self,
        name: &str,
        request: &Req,
        option: &RPCOption,
    ) -> Result<Resp, RPCError<NodeId, BasicNode, E>>
    where
        Req: Serialize,
        Resp: DeserializeOwned + Send + 'static,
        E: std::error::Error + DeserializeOwned + Send + 'static,
    {
        let body = serde_json::to_vec(request).map_err(|e| network_error(&e))?;
        let request = self
            .agent
            .post(&format!("http://{}/raft/{name}", self.addr))
            .timeout(option.hard_ttl());
        let target = self.target;
        let answer = tokio::task::spawn_blocking(move || post(request, &body, target))
            .await
            .map_err(|e| network_error(&e))?;
        match answer {
            Ok(bytes) => decode_answer(&bytes, target),
            Err(e @ Transport::Unreachable(..)) => Err(RPCError::Unreachable(Unreachable::new(&e))),
            Err(e) => Err(network_error(&e)),
        }
    }
}

fn post(request: ureq::Request, body: &[u8], target: NodeId) -> Result<Vec<u8>, Transport> {
    let response = request.send_bytes(body).map_err(|e| match e {
        ureq::Error::Transport(t) if t.kind() == ureq::ErrorKind::ConnectionFailed => {
            Transport::Unreachable(target, t.to_string())
        }
        other => Transport::Failed(target, other.to_string()),
    })?;
    let mut bytes = Vec::new();
    std::io::Read::read_to_end(&mut response.into_reader(), &mut bytes)
        .map_err(|e| Transport::Failed(target, e.to_string()))?;
    Ok(bytes)
}

// openraft's `RaftNetwork` fixes the error type, large as it is.
#[allow(clippy::result_large_err)]
fn decode_answer<Resp, E>(
    bytes: &[u8],
    target: NodeId,
) -> Result<Resp, RPCError<NodeId, BasicNode, E>>
where
    Resp: DeserializeOwned,
    E: std::error::Error + DeserializeOwned,
{
    let answer: Result<Resp, E> = serde_json::from_slice(bytes).map_err(|e| network_error(&e))?;
    answer.map_err(|e| RPCError::RemoteError(RemoteError::new(target, e)))
}

fn network_error<E>(error: &(impl std::error::Error + 'static)) -> RPCError<NodeId, BasicNode, E>
where
    E: std::error::Error,
{
    RPCError::Network(NetworkError::new(error))
}

impl RaftNetwork<TypeConfig> for PeerConnection {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        self.call("append", &rpc, &option).await
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<
        InstallSnapshotResponse<NodeId>,
        RPCError<NodeId, BasicNode, RaftError<NodeId, InstallSnapshotError>>,
    > {
        self.call("snapshot", &rpc, &option).await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        self.call("vote", &rpc, &option).await
    }

    /// Short and steady, so that a restarted peer is found again quickly.
    fn backoff(&self) -> Backoff {
        Backoff::new(std::iter::repeat(Duration::from_millis(50)))
    }
}
