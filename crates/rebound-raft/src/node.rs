//! A node you can run: one Raft over one Rebound database, served over
//! HTTP/1.1 (the client API, the cluster API and the Raft RPCs between
//! nodes on one listener). The HTTP server is synchronous: a pool of
//! plain threads takes requests and waits on openraft's Tokio runtime
//! for each answer. Routes and bodies are in the crate's README.

use crate::http_api::{
    kv_error_kind, AddLearnerRequest, ChangeMembershipRequest, ErrorBody, InitRequest, TxnRequest,
    TxnResponse, TxnResult,
};
use crate::network::HttpNetwork;
use crate::{open_stores_with, KvReader, KvRequest, NodeId, OpResult, Raft, StoreError};
use openraft::error::{
    ChangeMembershipError, CheckIsLeaderError, ClientWriteError, ForwardToLeader, InitializeError,
    RaftError,
};
use openraft::{BasicNode, Config};
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::io::Read;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::thread::JoinHandle;

/// Threads that take requests off the listener and hand each to a
/// thread of the runtime's blocking pool, which waits for its answer.
const ACCEPTOR_THREADS: usize = 2;
/// Requests served at once. A request holds a thread while it waits
/// (for a commit, a read index, the leader it was forwarded to); with
/// few threads, a follower busy with forwarded requests could not take
/// the leader's RPCs that those requests wait for.
const MAX_REQUESTS_IN_FLIGHT: usize = 512;
/// How long a follower waits for the leader's answer to a forwarded
/// request.
const FORWARD_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);
/// The largest request body accepted; a Raft RPC carries up to
/// `max_payload_entries` log entries or a snapshot chunk as JSON.
const MAX_BODY: u64 = 64 << 20;
/// Marks a request one node forwarded to the leader, so that it is
/// forwarded at most once.
const FORWARDED_HEADER: &str = "X-Rebound-Forwarded";

/// Rebound's durability design for the node's database.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Design {
    LogFree,
    Wal,
}

/// Everything a node needs to start.
#[derive(Debug, Clone)]
pub struct NodeConfig {
    pub id: NodeId,
    /// Where to listen; port 0 picks a free port ([`Node::addr`]).
    pub listen: String,
    pub dir: PathBuf,
    pub design: Design,
}

/// Why a node could not start.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    #[error("cannot open the database: {0}")]
    Store(#[from] StoreError),
    #[error("cannot start raft: {0}")]
    Raft(String),
    #[error("cannot listen on {addr}: {reason}")]
    Listen { addr: String, reason: String },
    #[error("cannot start the async runtime: {0}")]
    Runtime(#[from] std::io::Error),
}

/// A running node. Dropping it leaves the threads serving; [`Node::wait`]
/// serves until the process ends.
pub struct Node {
    addr: SocketAddr,
    service: Arc<Service>,
    workers: Vec<JoinHandle<()>>,
    _runtime: tokio::runtime::Runtime,
}

impl Node {
    /// Opens the database in `config.dir`, starts Raft and the HTTP server.
    pub fn start(config: &NodeConfig) -> Result<Node, NodeError> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .max_blocking_threads(MAX_REQUESTS_IN_FLIGHT)
            .enable_all()
            .build()?;
        let (log_store, state_machine) = open_stores_with(&config.dir, options(config.design))?;
        let reader = state_machine.reader();
        let raft_config = Arc::new(raft_config()?);
        let raft = runtime
            .block_on(Raft::new(
                config.id,
                raft_config,
                HttpNetwork::new(),
                log_store,
                state_machine,
            ))
            .map_err(|e| NodeError::Raft(e.to_string()))?;
        let server = listen(&config.listen).map_err(|reason| NodeError::Listen {
            addr: config.listen.clone(),
            reason,
        })?;
        let addr = server
            .server_addr()
            .to_ip()
            .ok_or_else(|| NodeError::Listen {
                addr: config.listen.clone(),
                reason: "not an IP address".into(),
            })?;
        let service = Arc::new(Service {
            id: config.id,
            raft,
            reader,
            runtime: runtime.handle().clone(),
            forwarder: ureq::AgentBuilder::new().timeout(FORWARD_TIMEOUT).build(),
        });
        let workers = spawn_acceptors(Arc::new(server), &service);
        Ok(Node {
            addr,
            service,
            workers,
            _runtime: runtime,
        })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn raft(&self) -> &Raft {
        &self.service.raft
    }

    /// Serves until the process is ended.
    pub fn wait(self) {
        for worker in self.workers {
            let _ = worker.join();
        }
    }
}

/// A server on a listener whose connections send small writes at once.
fn listen(addr: &str) -> Result<tiny_http::Server, String> {
    let addr = std::net::ToSocketAddrs::to_socket_addrs(addr)
        .map_err(|e| format!("not an address: {e}"))?
        .next()
        .ok_or("the name has no address")?;
    let socket = socket2::Socket::new(
        socket2::Domain::for_address(addr),
        socket2::Type::STREAM,
        None,
    )
    .map_err(|e| e.to_string())?;
    socket.set_reuse_address(true).map_err(|e| e.to_string())?;
    socket.set_tcp_nodelay(true).map_err(|e| e.to_string())?;
    socket.bind(&addr.into()).map_err(|e| e.to_string())?;
    socket.listen(1024).map_err(|e| e.to_string())?;
    let listener: std::net::TcpListener = socket.into();
    tiny_http::Server::from_listener(listener, None).map_err(|e| e.to_string())
}

fn options(design: Design) -> rebound::Options {
    let durability = match design {
        Design::LogFree => rebound::Durability::LogFree,
        Design::Wal => rebound::Durability::Wal,
    };
    rebound::Options::default().durability(durability)
}

/// Heartbeats and elections a little slower than openraft's defaults, so
/// that three nodes and a benchmark sharing two cores do not call
/// elections that no failure caused.
fn raft_config() -> Result<Config, NodeError> {
    Config {
        cluster_name: "rebound-raft".into(),
        heartbeat_interval: 100,
        election_timeout_min: 300,
        election_timeout_max: 600,
        ..Config::default()
    }
    .validate()
    .map_err(|e| NodeError::Raft(e.to_string()))
}

fn spawn_acceptors(server: Arc<tiny_http::Server>, service: &Arc<Service>) -> Vec<JoinHandle<()>> {
    (0..ACCEPTOR_THREADS)
        .map(|_| {
            let (server, service) = (server.clone(), service.clone());
            std::thread::spawn(move || {
                while let Ok(request) = server.recv() {
                    let service = service.clone();
                    service
                        .runtime
                        .clone()
                        .spawn_blocking(move || service.serve(request));
                }
            })
        })
        .collect()
}

/// What a route answers: a status and a JSON body, or "not the leader"
/// (which the caller may forward).
enum Reply {
    Json(u16, Vec<u8>),
    NotLeader(ForwardToLeader<NodeId, BasicNode>),
}

type Answer = Result<Reply, Reply>;

fn json(status: u16, body: &impl Serialize) -> Reply {
    match serde_json::to_vec(body) {
        Ok(bytes) => Reply::Json(status, bytes),
        Err(e) => error(500, "internal", format!("cannot encode the answer: {e}")),
    }
}

fn error(status: u16, kind: &str, message: impl Into<String>) -> Reply {
    json(status, &ErrorBody::new(kind, message))
}

fn parse<T: DeserializeOwned>(body: &[u8]) -> Result<T, Reply> {
    serde_json::from_slice(body)
        .map_err(|e| error(400, "bad_request", format!("malformed request body: {e}")))
}

/// The node's handlers.
struct Service {
    id: NodeId,
    raft: Raft,
    reader: KvReader,
    runtime: tokio::runtime::Handle,
    forwarder: ureq::Agent,
}

impl Service {
    fn serve(&self, mut request: tiny_http::Request) {
        let reply = match read_body(&mut request) {
            Ok(body) => {
                let path = request
                    .url()
                    .split('?')
                    .next()
                    .unwrap_or_default()
                    .to_owned();
                let reply = self.route(request.method(), &path, &body);
                self.forward_if_follower(reply, &request, &path, &body)
            }
            Err(reply) => reply,
        };
        let (status, bytes) = reply.into_parts(self.id);
        let content_type = tiny_http::Header::from_bytes("Content-Type", "application/json")
            .expect("valid header");
        let response = tiny_http::Response::from_data(bytes)
            .with_status_code(status)
            .with_header(content_type);
        // A client that went away takes its answer with it.
        let _ = request.respond(response);
    }

    fn route(&self, method: &tiny_http::Method, path: &str, body: &[u8]) -> Reply {
        use tiny_http::Method::{Get, Post};
        let answer = match (method, path) {
            (Post, "/api/txn") => self.txn(body),
            (Post, "/cluster/init") => self.init(body),
            (Post, "/cluster/add-learner") => self.add_learner(body),
            (Post, "/cluster/change-membership") => self.change_membership(body),
            (Get, "/cluster/metrics") => Ok(json(200, &*self.raft.metrics().borrow())),
            (Post, "/raft/append") => {
                self.rpc(
                    body,
                    |raft, rpc| async move { raft.append_entries(rpc).await },
                )
            }
            (Post, "/raft/vote") => self.rpc(body, |raft, rpc| async move { raft.vote(rpc).await }),
            (Post, "/raft/snapshot") => {
                self.rpc(
                    body,
                    |raft, rpc| async move { raft.install_snapshot(rpc).await },
                )
            }
            _ => Err(error(404, "not_found", format!("no route {method} {path}"))),
        };
        answer.unwrap_or_else(|reply| reply)
    }

    fn txn(&self, body: &[u8]) -> Answer {
        let request: TxnRequest = parse(body)?;
        let kv = request.to_kv();
        kv.validate()
            .map_err(|e| error(400, kv_error_kind(&e), e.to_string()))?;
        let (results, read_index) = if request.is_read_only() {
            (self.read(&kv)?, true)
        } else {
            (self.write(kv)?, false)
        };
        let results = results.into_iter().map(TxnResult::from).collect();
        Ok(json(
            200,
            &TxnResponse {
                results,
                served_by: self.id,
                read_index,
            },
        ))
    }

    /// Proposes a request through the log and waits until it is applied.
    fn write(&self, request: KvRequest) -> Result<Vec<OpResult>, Reply> {
        let response = self
            .runtime
            .block_on(self.raft.client_write(request))
            .map_err(|e| match e {
                RaftError::APIError(ClientWriteError::ForwardToLeader(to)) => Reply::NotLeader(to),
                other => error(503, "raft", other.to_string()),
            })?;
        response
            .data
            .outcome
            .map_err(|e| error(400, kv_error_kind(&e), e.to_string()))
    }

    /// Confirms leadership with a quorum (a read index), waits until the
    /// state machine has applied up to it, then reads locally: no log
    /// entry for a read.
    fn read(&self, request: &KvRequest) -> Result<Vec<OpResult>, Reply> {
        self.runtime
            .block_on(self.raft.ensure_linearizable())
            .map_err(|e| match e {
                RaftError::APIError(CheckIsLeaderError::ForwardToLeader(to)) => {
                    Reply::NotLeader(to)
                }
                other => error(503, "raft", other.to_string()),
            })?;
        request
            .ops
            .iter()
            .map(|op| {
                let value = self
                    .reader
                    .get(op.key())
                    .map_err(|e| error(500, "storage", e.to_string()))?;
                Ok(OpResult::Get { value })
            })
            .collect()
    }

    fn init(&self, body: &[u8]) -> Answer {
        let request: InitRequest = parse(body)?;
        let members: BTreeMap<NodeId, BasicNode> = request
            .members
            .into_iter()
            .map(|(id, addr)| (id, BasicNode::new(addr)))
            .collect();
        match self.runtime.block_on(self.raft.initialize(members)) {
            Ok(()) => Ok(json(200, &serde_json::json!({ "initialized": true }))),
            Err(RaftError::APIError(InitializeError::NotAllowed(e))) => {
                Err(error(409, "already_initialized", e.to_string()))
            }
            Err(RaftError::APIError(InitializeError::NotInMembers(e))) => {
                Err(error(400, "not_a_member", e.to_string()))
            }
            Err(e) => Err(error(503, "raft", e.to_string())),
        }
    }

    fn add_learner(&self, body: &[u8]) -> Answer {
        let request: AddLearnerRequest = parse(body)?;
        let node = BasicNode::new(request.addr);
        let answer = self
            .runtime
            .block_on(self.raft.add_learner(request.id, node, true));
        membership_answer(answer.map(|r| r.log_id))
    }

    fn change_membership(&self, body: &[u8]) -> Answer {
        let request: ChangeMembershipRequest = parse(body)?;
        let members: BTreeSet<NodeId> = request.members.into_iter().collect();
        let answer = self
            .runtime
            .block_on(self.raft.change_membership(members, false));
        membership_answer(answer.map(|r| r.log_id))
    }

    /// A Raft RPC from a peer: the body is openraft's request, the answer
    /// the JSON of the local Raft's `Result`.
    fn rpc<Req, Resp, Fut>(&self, body: &[u8], call: impl FnOnce(Raft, Req) -> Fut) -> Answer
    where
        Req: DeserializeOwned,
        Resp: Serialize,
        Fut: Future<Output = Resp>,
    {
        let request: Req = parse(body)?;
        let answer = self.runtime.block_on(call(self.raft.clone(), request));
        Ok(json(200, &answer))
    }

    /// A "not the leader" reply becomes the leader's answer to the same
    /// request when this node knows the leader's address and the request
    /// was not forwarded already; otherwise a 421 naming the leader.
    fn forward_if_follower(
        &self,
        reply: Reply,
        request: &tiny_http::Request,
        path: &str,
        body: &[u8],
    ) -> Reply {
        let Reply::NotLeader(to) = reply else {
            return reply;
        };
        let forwarded = request
            .headers()
            .iter()
            .any(|h| h.field.equiv(FORWARDED_HEADER));
        match (&to.leader_node, forwarded) {
            (Some(leader), false) => self.forward(&leader.addr, path, body),
            _ => Reply::NotLeader(to),
        }
    }

    fn forward(&self, leader_addr: &str, path: &str, body: &[u8]) -> Reply {
        let answer = self
            .forwarder
            .post(&format!("http://{leader_addr}{path}"))
            .set(FORWARDED_HEADER, "1")
            .send_bytes(body);
        match answer {
            Ok(response) | Err(ureq::Error::Status(_, response)) => relay(response),
            Err(ureq::Error::Transport(t)) if t.kind() == ureq::ErrorKind::ConnectionFailed => {
                error(
                    503,
                    "leader_unreachable",
                    format!("the leader at {leader_addr} is not reachable: {t}"),
                )
            }
            Err(e) => error(
                502,
                "forward_failed",
                format!(
                    "forwarding to the leader at {leader_addr} failed; the outcome is unknown: {e}"
                ),
            ),
        }
    }
}

fn relay(response: ureq::Response) -> Reply {
    let status = response.status();
    let mut bytes = Vec::new();
    match response
        .into_reader()
        .take(MAX_BODY)
        .read_to_end(&mut bytes)
    {
        Ok(_) => Reply::Json(status, bytes),
        Err(e) => error(
            502,
            "forward_failed",
            format!("the leader's answer was cut off: {e}"),
        ),
    }
}

fn not_leader(to: &ForwardToLeader<NodeId, BasicNode>, id: NodeId) -> Reply {
    let (kind, message) = match to.leader_id {
        Some(leader) => ("not_leader", format!("node {id} is not the leader; node {leader} is")),
        None => (
            "no_leader",
            format!("node {id} knows no leader: an election is under way, or the node is not a member of an initialized cluster"),
        ),
    };
    let mut body = ErrorBody::new(kind, message);
    body.error.leader_id = to.leader_id;
    body.error.leader_addr = to.leader_node.as_ref().map(|n| n.addr.clone());
    json(if to.leader_id.is_some() { 421 } else { 503 }, &body)
}

impl Reply {
    fn into_parts(self, id: NodeId) -> (u16, Vec<u8>) {
        match self {
            Reply::Json(status, bytes) => (status, bytes),
            Reply::NotLeader(to) => not_leader(&to, id).into_parts(id),
        }
    }
}

fn membership_answer<T: Serialize>(
    answer: Result<T, RaftError<NodeId, ClientWriteError<NodeId, BasicNode>>>,
) -> Answer {
    match answer {
        Ok(log_id) => Ok(json(200, &serde_json::json!({ "log_id": log_id }))),
        Err(RaftError::APIError(ClientWriteError::ForwardToLeader(to))) => {
            Err(Reply::NotLeader(to))
        }
        Err(RaftError::APIError(ClientWriteError::ChangeMembershipError(e))) => {
            Err(error(status_of(&e).0, status_of(&e).1, e.to_string()))
        }
        Err(e) => Err(error(503, "raft", e.to_string())),
    }
}

fn status_of(error: &ChangeMembershipError<NodeId>) -> (u16, &'static str) {
    match error {
        ChangeMembershipError::LearnerNotFound(_) => (400, "not_a_member"),
        ChangeMembershipError::EmptyMembership(_) => (400, "empty_membership"),
        ChangeMembershipError::InProgress(_) => (409, "membership_change_in_progress"),
    }
}

fn read_body(request: &mut tiny_http::Request) -> Result<Vec<u8>, Reply> {
    let mut body = Vec::new();
    request
        .as_reader()
        .take(MAX_BODY + 1)
        .read_to_end(&mut body)
        .map_err(|e| error(400, "bad_request", format!("cannot read the body: {e}")))?;
    if body.len() as u64 > MAX_BODY {
        return Err(error(
            413,
            "too_large",
            format!("bodies are limited to {MAX_BODY} bytes"),
        ));
    }
    Ok(body)
}

/// Parses `--id N --listen ADDR --dir DIR [--design log-free|wal]`.
pub fn parse_args(args: impl IntoIterator<Item = String>) -> Result<NodeConfig, String> {
    let mut args = args.into_iter();
    let (mut id, mut listen, mut dir, mut design) = (None, None, None, Design::LogFree);
    while let Some(flag) = args.next() {
        let mut value = || args.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--id" => id = Some(value()?.parse().map_err(|e| format!("--id: {e}"))?),
            "--listen" => listen = Some(value()?),
            "--dir" => dir = Some(PathBuf::from(value()?)),
            "--design" => design = parse_design(&value()?)?,
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok(NodeConfig {
        id: id.ok_or("--id is required")?,
        listen: listen.ok_or("--listen is required")?,
        dir: dir.ok_or("--dir is required")?,
        design,
    })
}

fn parse_design(word: &str) -> Result<Design, String> {
    match word {
        "log-free" => Ok(Design::LogFree),
        "wal" => Ok(Design::Wal),
        other => Err(format!("--design: {other:?} is neither log-free nor wal")),
    }
}

/// The usage line of the node binary.
pub const USAGE: &str =
    "usage: rebound-raft --id N --listen ADDR --dir DIR [--design log-free|wal]";

#[cfg(test)]
mod tests {
    use super::*;

    fn args(words: &str) -> Vec<String> {
        words.split_whitespace().map(str::to_owned).collect()
    }

    #[test]
    fn arguments_name_the_node_and_refuse_what_is_missing_or_unknown() {
        let config = parse_args(args("--id 2 --listen 127.0.0.1:0 --dir /d --design wal")).unwrap();
        assert_eq!((config.id, config.listen.as_str()), (2, "127.0.0.1:0"));
        assert_eq!(
            (config.dir, config.design),
            (PathBuf::from("/d"), Design::Wal)
        );
        let default = parse_args(args("--id 1 --listen a:1 --dir d")).unwrap();
        assert_eq!(default.design, Design::LogFree);
        assert_eq!(
            parse_args(args("--listen a:1 --dir d")).unwrap_err(),
            "--id is required"
        );
        assert!(parse_args(args("--id x --listen a:1 --dir d"))
            .unwrap_err()
            .starts_with("--id"));
        assert!(parse_args(args("--id 1 --listen a:1 --dir d --design none")).is_err());
        assert!(parse_args(args("--id 1 --listen a:1 --dir d --port 3")).is_err());
        assert_eq!(
            parse_args(args("--id 1 --listen")).unwrap_err(),
            "--listen needs a value"
        );
    }

    #[test]
    fn a_listen_address_is_resolved_and_nonsense_refused() {
        assert!(listen("no port").is_err());
        assert!(listen("localhost:0").is_ok());
        let server = listen("127.0.0.1:0").expect("a free port");
        assert!(server.server_addr().to_ip().is_some_and(|a| a.port() != 0));
    }
}
