//! What opening reports, and the fresh store every design starts from
//! when there is nothing to recover.

use crate::catalog;
use crate::error::Result;
use crate::heap::Space;
use crate::medium::Medium;
use crate::txn::{Clock, Store};
use std::time::{Duration, Instant};

/// What recovery did and how long each phase took.
#[derive(Debug, Clone, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(default))]
#[non_exhaustive]
pub struct RecoveryReport {
    /// True when the medium was freshly formatted (nothing to recover).
    pub fresh: bool,
    /// True when an index checkpoint was the starting point.
    pub from_checkpoint: bool,
    /// Sequence number of that checkpoint.
    pub checkpoint_sequence: u64,
    /// Versions with txn ids from here on were redone.
    pub redo_from_txn: u64,
    /// Superblock, catalog, LCTT, checkpoint image. `wal`: reading and
    /// verifying the snapshot and the log (analysis).
    pub metadata: Duration,
    /// Scanning regions: redo of committed versions and undo of the tails.
    /// `wal`: applying the log after the snapshot (redo).
    pub undo_redo: Duration,
    /// Merging checkpoint runs with redo and bulk-loading the indexes.
    /// `wal`: loading the snapshot's rows, building the primary indexes
    /// bottom-up and the secondary ones.
    pub index_build: Duration,
    /// From the start of `open` until transactions are accepted.
    pub total: Duration,
    pub tables: usize,
    pub blocks: u64,
    pub versions_scanned: u64,
    pub versions_committed: u64,
    pub versions_undone: u64,
    pub checkpoint_entries: u64,
    pub index_entries: u64,
}

/// Formats a zeroed medium of at least `DATA_START` bytes.
pub fn format(medium: &Medium) -> Result<()> {
    catalog::format(medium, unix_now())
}

/// Builds an empty store on a freshly formatted medium.
pub fn fresh(medium: Medium, instance: u64, first_ts: u64) -> Result<(Store, RecoveryReport)> {
    let start = Instant::now();
    let clock = Clock::recover(&medium, first_ts)?;
    let store = Store::new(
        medium,
        Space::new(catalog::DATA_START, Vec::new(), catalog::DATA_START),
        clock,
        boxcar::Vec::new(),
        instance,
    );
    let report = RecoveryReport {
        fresh: true,
        total: start.elapsed(),
        ..Default::default()
    };
    Ok((store, report))
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}
