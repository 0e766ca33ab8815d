//! The crate's error type, and its translation into openraft's
//! `StorageError` (which openraft treats as fatal for the node).

use crate::snapshot_format::SnapshotFormatError;
use crate::NodeId;
use openraft::{StorageError, StorageIOError};

/// Why a store operation failed. Application-level failures of a request
/// are not errors here: they are answers ([`crate::KvError`]).
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error(transparent)]
    Engine(#[from] rebound::Error),
    #[error("log entry {index} encodes to {len} bytes; a log entry may hold at most {max}")]
    EntryTooLarge { index: u64, len: usize, max: usize },
    #[error("cannot encode or decode {what}: {source}")]
    Codec {
        what: &'static str,
        source: serde_json::Error,
    },
    #[error("stored {what} is damaged: {reason}")]
    Damaged { what: String, reason: String },
    #[error(transparent)]
    Snapshot(#[from] SnapshotFormatError),
    /// A table of the database was created with smaller limits (key
    /// length, value length) than this version of the crate needs.
    #[error("table {name:?} allows (key, value) lengths of {found:?}; {wanted:?} are needed")]
    IncompatibleTable {
        name: String,
        found: (u32, u32),
        wanted: (u32, u32),
    },
    /// Every snapshot begun for this long started below a writer older
    /// than this node's newest commit, so none saw that commit.
    #[error("no snapshot saw this node's newest commit within {0:?}")]
    StaleRead(std::time::Duration),
    #[error("snapshot data describes {found} but was offered as {offered}")]
    SnapshotMismatch { found: String, offered: String },
}

impl StoreError {
    pub(crate) fn codec(what: &'static str) -> impl FnOnce(serde_json::Error) -> StoreError {
        move |source| StoreError::Codec { what, source }
    }

    pub(crate) fn is_conflict(&self) -> bool {
        matches!(self, StoreError::Engine(e) if e.is_retryable())
    }
}

/// Which openraft operation failed, so that the `StorageError` names it.
#[derive(Clone, Copy)]
pub(crate) enum Failed {
    ReadLogs,
    WriteLogs,
    ReadVote,
    WriteVote,
    ReadStateMachine,
    WriteStateMachine,
    ReadSnapshot,
    WriteSnapshot,
}

impl Failed {
    pub(crate) fn of(self, error: StoreError) -> StorageError<NodeId> {
        let io = match self {
            Failed::ReadLogs => StorageIOError::read_logs(&error),
            Failed::WriteLogs => StorageIOError::write_logs(&error),
            Failed::ReadVote => StorageIOError::read_vote(&error),
            Failed::WriteVote => StorageIOError::write_vote(&error),
            Failed::ReadStateMachine => StorageIOError::read_state_machine(&error),
            Failed::WriteStateMachine => StorageIOError::write_state_machine(&error),
            Failed::ReadSnapshot => StorageIOError::read_snapshot(None, &error),
            Failed::WriteSnapshot => StorageIOError::write_snapshot(None, &error),
        };
        io.into()
    }
}

/// `result.map_err(Failed::X.of)` reads better as `result.or_fail(X)`.
/// openraft's traits fix the error type, large as it is.
#[allow(clippy::result_large_err)]
pub(crate) trait OrFail<T> {
    fn or_fail(self, failed: Failed) -> Result<T, StorageError<NodeId>>;
}

impl<T, E: Into<StoreError>> OrFail<T> for Result<T, E> {
    fn or_fail(self, failed: Failed) -> Result<T, StorageError<NodeId>> {
        self.map_err(|e| failed.of(e.into()))
    }
}
