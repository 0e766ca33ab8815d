//! The replicated application's requests and answers: a request is a
//! small transaction on one key space, a list of puts, deletes and reads
//! run in order (a read sees the request's earlier writes). A request
//! that breaks a limit is answered with a [`KvError`] and changes
//! nothing; the check depends on the request alone, so every node gives
//! the same answer.

use serde::{Deserialize, Serialize};
use std::fmt;

/// Longest key of the application's key space, in bytes.
pub const MAX_KEY_LEN: usize = 64;
/// Longest value, in bytes.
pub const MAX_VALUE_LEN: usize = 1024;
/// Most operations in one request.
pub const MAX_OPS: usize = 64;

/// One operation of a request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum KvOp {
    Put { key: Vec<u8>, value: Vec<u8> },
    Delete { key: Vec<u8> },
    Get { key: Vec<u8> },
}

impl KvOp {
    pub fn key(&self) -> &[u8] {
        match self {
            KvOp::Put { key, .. } | KvOp::Delete { key } | KvOp::Get { key } => key,
        }
    }
}

/// A transaction of the application, applied atomically on every node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KvRequest {
    pub ops: Vec<KvOp>,
}

impl KvRequest {
    pub fn put(key: impl Into<Vec<u8>>, value: impl Into<Vec<u8>>) -> KvRequest {
        KvRequest {
            ops: vec![KvOp::Put {
                key: key.into(),
                value: value.into(),
            }],
        }
    }

    pub fn get(key: impl Into<Vec<u8>>) -> KvRequest {
        KvRequest {
            ops: vec![KvOp::Get { key: key.into() }],
        }
    }

    pub fn delete(key: impl Into<Vec<u8>>) -> KvRequest {
        KvRequest {
            ops: vec![KvOp::Delete { key: key.into() }],
        }
    }

    /// Checks the request against the application's limits; what the
    /// state machine answers for a request that fails it. A client may
    /// call it before proposing, to fail early.
    pub fn validate(&self) -> Result<(), KvError> {
        if self.ops.is_empty() {
            return Err(KvError::EmptyRequest);
        }
        if self.ops.len() > MAX_OPS {
            return Err(KvError::TooManyOps {
                count: self.ops.len(),
                max: MAX_OPS,
            });
        }
        self.ops.iter().try_for_each(validate_op)
    }
}

fn validate_op(op: &KvOp) -> Result<(), KvError> {
    let key = op.key();
    if key.is_empty() || key.len() > MAX_KEY_LEN {
        return Err(KvError::KeyLength {
            len: key.len(),
            max: MAX_KEY_LEN,
        });
    }
    match op {
        KvOp::Put { value, .. } if value.len() > MAX_VALUE_LEN => Err(KvError::ValueTooLarge {
            len: value.len(),
            max: MAX_VALUE_LEN,
        }),
        _ => Ok(()),
    }
}

/// The answer to one operation, in the order of the request's operations.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum OpResult {
    Put { existed: bool },
    Delete { existed: bool },
    Get { value: Option<Vec<u8>> },
}

/// Why a request was refused. Nothing of a refused request is applied,
/// but it still occupies its log entry (every node refuses it alike).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum KvError {
    #[error("a request needs at least one operation")]
    EmptyRequest,
    #[error("{count} operations in one request; at most {max}")]
    TooManyOps { count: usize, max: usize },
    #[error("key of {len} bytes is outside 1..={max}")]
    KeyLength { len: usize, max: usize },
    #[error("value of {len} bytes exceeds {max}")]
    ValueTooLarge { len: usize, max: usize },
    /// The engine refused a write for a reason that depends on the
    /// request alone (the same on every node); its message.
    #[error("the request was refused by the storage engine: {0}")]
    Refused(String),
}

/// What the state machine answers for one log entry: the results of a
/// request's operations or why it was refused. Blank and membership
/// entries are answered with an empty list.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KvResponse {
    pub outcome: Result<Vec<OpResult>, KvError>,
}

impl KvResponse {
    pub(crate) fn empty() -> KvResponse {
        KvResponse {
            outcome: Ok(Vec::new()),
        }
    }
}

impl fmt::Display for KvRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "KvRequest({} ops)", self.ops.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_are_checked_per_operation() {
        assert_eq!(
            KvRequest { ops: vec![] }.validate(),
            Err(KvError::EmptyRequest)
        );
        let long_key = KvRequest::put(vec![b'k'; MAX_KEY_LEN + 1], "v");
        assert_eq!(
            long_key.validate(),
            Err(KvError::KeyLength {
                len: MAX_KEY_LEN + 1,
                max: MAX_KEY_LEN
            })
        );
        assert!(KvRequest::put(vec![b'k'; MAX_KEY_LEN], "v")
            .validate()
            .is_ok());
        let big = KvRequest::put("k", vec![0; MAX_VALUE_LEN + 1]);
        assert!(matches!(big.validate(), Err(KvError::ValueTooLarge { .. })));
        let many = KvRequest {
            ops: vec![KvOp::Get { key: b"k".to_vec() }; MAX_OPS + 1],
        };
        assert!(matches!(many.validate(), Err(KvError::TooManyOps { .. })));
        assert!(matches!(
            KvRequest::delete("").validate(),
            Err(KvError::KeyLength { len: 0, .. })
        ));
    }
}
