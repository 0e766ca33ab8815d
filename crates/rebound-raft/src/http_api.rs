//! The JSON bodies of the node's HTTP API, shared by the server
//! ([`crate::node`]) and the client ([`crate::client`]).
//!
//! Keys and values travel as UTF-8 strings so that a person can type a
//! request into curl; inside the cluster they are the bytes of those
//! strings ([`KvRequest`]).

use crate::{KvError, KvOp, KvRequest, NodeId, OpResult};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// `POST /api/txn`: operations run in order as one transaction.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TxnRequest {
    pub ops: Vec<TxnOp>,
}

/// One operation of a [`TxnRequest`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub enum TxnOp {
    Put { key: String, value: String },
    Delete { key: String },
    Get { key: String },
}

/// The answer to a [`TxnRequest`]: one result per operation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TxnResponse {
    pub results: Vec<TxnResult>,
    /// The node that ran the request (the leader).
    pub served_by: NodeId,
    /// True when the request only read and was answered through a read
    /// index (no log entry).
    pub read_index: bool,
}

/// The result of one [`TxnOp`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum TxnResult {
    Put { existed: bool },
    Delete { existed: bool },
    Get { value: Option<String> },
}

/// `POST /cluster/init`: every first member's id and HTTP address.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InitRequest {
    pub members: BTreeMap<NodeId, String>,
}

/// `POST /cluster/add-learner`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AddLearnerRequest {
    pub id: NodeId,
    pub addr: String,
}

/// `POST /cluster/change-membership`: the voters from now on (each must
/// already be a member or a learner).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChangeMembershipRequest {
    pub members: Vec<NodeId>,
}

/// The body of every error answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

/// What went wrong: `kind` is a stable word a program can match on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorDetail {
    pub kind: String,
    pub message: String,
    /// For `not_leader`: the leader this node knows of, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leader_id: Option<NodeId>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leader_addr: Option<String>,
}

impl ErrorBody {
    pub fn new(kind: &str, message: impl Into<String>) -> ErrorBody {
        ErrorBody {
            error: ErrorDetail {
                kind: kind.to_owned(),
                message: message.into(),
                leader_id: None,
                leader_addr: None,
            },
        }
    }
}

/// The `kind` word of a refused request's error.
pub fn kv_error_kind(error: &KvError) -> &'static str {
    match error {
        KvError::EmptyRequest => "empty_request",
        KvError::TooManyOps { .. } => "too_many_ops",
        KvError::KeyLength { .. } => "key_length",
        KvError::ValueTooLarge { .. } => "value_too_large",
        KvError::Refused(_) => "refused",
    }
}

impl TxnRequest {
    pub fn is_read_only(&self) -> bool {
        self.ops.iter().all(|op| matches!(op, TxnOp::Get { .. }))
    }

    pub fn to_kv(&self) -> KvRequest {
        let ops = self.ops.iter().map(TxnOp::to_kv).collect();
        KvRequest { ops }
    }
}

impl TxnOp {
    fn to_kv(&self) -> KvOp {
        match self {
            TxnOp::Put { key, value } => KvOp::Put {
                key: key.as_bytes().to_vec(),
                value: value.as_bytes().to_vec(),
            },
            TxnOp::Delete { key } => KvOp::Delete {
                key: key.as_bytes().to_vec(),
            },
            TxnOp::Get { key } => KvOp::Get {
                key: key.as_bytes().to_vec(),
            },
        }
    }
}

impl From<OpResult> for TxnResult {
    fn from(result: OpResult) -> TxnResult {
        match result {
            OpResult::Put { existed } => TxnResult::Put { existed },
            OpResult::Delete { existed } => TxnResult::Delete { existed },
            // Only strings are written over HTTP; bytes written by an
            // embedding program that are not UTF-8 come back mended.
            OpResult::Get { value } => TxnResult::Get {
                value: value.map(|v| String::from_utf8_lossy(&v).into_owned()),
            },
        }
    }
}
