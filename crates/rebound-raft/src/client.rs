//! A blocking client of the node's HTTP API (used by the tests and the
//! benchmark tool). It tells apart the failures after which a request
//! certainly changed nothing (it may be sent again) from those whose
//! outcome is unknown, which a caller must not retry blindly: a retried
//! write could apply twice.

use crate::http_api::{
    AddLearnerRequest, ChangeMembershipRequest, ErrorBody, ErrorDetail, InitRequest, TxnRequest,
    TxnResponse,
};
use crate::NodeId;
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::collections::BTreeMap;
use std::io::Read;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// How a call failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum CallError {
    /// No node's Raft saw the request (the connection was refused, or
    /// the node knew no leader to propose it to): nothing changed.
    #[error("not delivered: {0}")]
    NotDelivered(String),
    /// The request may or may not have taken effect.
    #[error("outcome unknown: {0}")]
    Unknown(String),
    /// The node answered with an error.
    #[error("HTTP {status}: {} ({})", error.message, error.kind)]
    Refused { status: u16, error: ErrorDetail },
}

impl CallError {
    /// The error's `kind` word when a node answered.
    pub fn kind(&self) -> Option<&str> {
        match self {
            CallError::Refused { error, .. } => Some(&error.kind),
            _ => None,
        }
    }
}

/// A client of a cluster, given every node's address; it sends to the
/// node that last answered, which forwards to the leader if need be.
pub struct Client {
    agent: ureq::Agent,
    nodes: Vec<String>,
    current: AtomicUsize,
}

impl Client {
    pub fn new(nodes: Vec<String>) -> Client {
        Client {
            agent: ureq::AgentBuilder::new()
                .timeout_connect(Duration::from_millis(500))
                .timeout(Duration::from_secs(30))
                .build(),
            nodes,
            current: AtomicUsize::new(0),
        }
    }

    /// Runs a transaction, moving on to the next node while the request
    /// is certainly not delivered, until `patience` has passed; a failure
    /// of unknown outcome is returned at once.
    pub fn txn(&self, request: &TxnRequest, patience: Duration) -> Result<TxnResponse, CallError> {
        let deadline = Instant::now() + patience;
        loop {
            let node = self.current.load(Ordering::Relaxed) % self.nodes.len();
            match self.txn_at(&self.nodes[node], request) {
                Err(CallError::NotDelivered(reason)) if Instant::now() < deadline => {
                    let _ = reason;
                    self.current.store(node + 1, Ordering::Relaxed);
                    std::thread::sleep(Duration::from_millis(20));
                }
                other => return other,
            }
        }
    }

    /// Sends a transaction to the node at `addr`, once.
    pub fn txn_at(&self, addr: &str, request: &TxnRequest) -> Result<TxnResponse, CallError> {
        self.post(addr, "/api/txn", request)
    }

    pub fn init(
        &self,
        addr: &str,
        members: BTreeMap<NodeId, String>,
    ) -> Result<serde_json::Value, CallError> {
        self.post(addr, "/cluster/init", &InitRequest { members })
    }

    pub fn add_learner(
        &self,
        addr: &str,
        id: NodeId,
        learner_addr: &str,
    ) -> Result<serde_json::Value, CallError> {
        let request = AddLearnerRequest {
            id,
            addr: learner_addr.to_owned(),
        };
        self.post(addr, "/cluster/add-learner", &request)
    }

    pub fn change_membership(
        &self,
        addr: &str,
        members: Vec<NodeId>,
    ) -> Result<serde_json::Value, CallError> {
        self.post(
            addr,
            "/cluster/change-membership",
            &ChangeMembershipRequest { members },
        )
    }

    /// openraft's metrics of the node at `addr`, as JSON.
    pub fn metrics(&self, addr: &str) -> Result<serde_json::Value, CallError> {
        let answer = self
            .agent
            .get(&format!("http://{addr}/cluster/metrics"))
            .call();
        decode(answer)
    }

    /// Sends raw bytes as the body of `POST path` and returns the status
    /// and the JSON answer, whatever the status (for tests of bad input).
    pub fn post_raw(
        &self,
        addr: &str,
        path: &str,
        body: &[u8],
    ) -> Result<(u16, serde_json::Value), CallError> {
        let response = match self
            .agent
            .post(&format!("http://{addr}{path}"))
            .send_bytes(body)
        {
            Ok(response) | Err(ureq::Error::Status(_, response)) => response,
            Err(e) => return Err(CallError::Unknown(e.to_string())),
        };
        let status = response.status();
        let bytes = self::body(response)?;
        let json = serde_json::from_slice(&bytes)
            .map_err(|e| CallError::Unknown(format!("undecodable answer: {e}")))?;
        Ok((status, json))
    }

    fn post<T: DeserializeOwned>(
        &self,
        addr: &str,
        path: &str,
        body: &impl Serialize,
    ) -> Result<T, CallError> {
        let bytes = serde_json::to_vec(body).map_err(|e| CallError::NotDelivered(e.to_string()))?;
        decode(
            self.agent
                .post(&format!("http://{addr}{path}"))
                .send_bytes(&bytes),
        )
    }
}

fn decode<T: DeserializeOwned>(
    answer: Result<ureq::Response, ureq::Error>,
) -> Result<T, CallError> {
    match answer {
        Ok(response) => {
            let bytes = body(response)?;
            serde_json::from_slice(&bytes)
                .map_err(|e| CallError::Unknown(format!("undecodable answer: {e}")))
        }
        Err(ureq::Error::Status(status, response)) => Err(refused(status, response)),
        Err(ureq::Error::Transport(t)) if t.kind() == ureq::ErrorKind::ConnectionFailed => {
            Err(CallError::NotDelivered(t.to_string()))
        }
        Err(e) => Err(CallError::Unknown(e.to_string())),
    }
}

fn body(response: ureq::Response) -> Result<Vec<u8>, CallError> {
    let mut bytes = Vec::new();
    response
        .into_reader()
        .read_to_end(&mut bytes)
        .map_err(|e| CallError::Unknown(format!("answer cut off: {e}")))?;
    Ok(bytes)
}

/// An error answer; "no leader" and "leader unreachable" are answered
/// before anything is proposed, so they count as not delivered.
fn refused(status: u16, response: ureq::Response) -> CallError {
    let bytes = match body(response) {
        Ok(bytes) => bytes,
        Err(e) => return e,
    };
    let error = match serde_json::from_slice::<ErrorBody>(&bytes) {
        Ok(body) => body.error,
        Err(_) => ErrorBody::new("unknown", String::from_utf8_lossy(&bytes)).error,
    };
    match error.kind.as_str() {
        "no_leader" | "leader_unreachable" => CallError::NotDelivered(error.message),
        _ => CallError::Refused { status, error },
    }
}
