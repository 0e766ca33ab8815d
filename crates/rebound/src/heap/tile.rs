//! DRAM version headers, one per slot, grouped in a tile per block.
//!
//! A zeroed header means "committed before this process started, no
//! successor, never read": recovery therefore only has to allocate tiles,
//! never fill them, and new versions overwrite all fields before the version
//! is published through the index.
//!
//! Field encodings (all `AtomicU64`):
//! * `begin`: the writer's txn id; `PENDING` bit set until it committed,
//!   `ABORTED` once it aborted; 0 for versions recovered from the medium.
//! * `end`: 0 = no successor; `LOCKED | ts` while a transaction with
//!   timestamp `ts` holds the write lock; `ts` once that successor committed;
//!   `REAPED` for a tombstone whose index entry was removed (readers and
//!   writers that still meet it look the key up again).
//! * `read`: largest timestamp of a transaction that read this version.
//! * `prev`: logical address + 1 of the previous version, 0 = none.

use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;

pub const PENDING: u64 = 1 << 63;
pub const ABORTED: u64 = u64::MAX;
pub const LOCKED: u64 = 1 << 63;
/// `end` of a tombstone whose index entry was removed: locked for good.
pub const REAPED: u64 = u64::MAX;

/// Zeroable: a tile starts as all-zero headers (see the module doc).
#[derive(Default, bytemuck::Zeroable)]
pub struct VersionHeader {
    pub begin: AtomicU64,
    pub end: AtomicU64,
    pub read: AtomicU64,
    pub prev: AtomicU64,
}

impl VersionHeader {
    /// Back to the zeroed state, for a recycled tile.
    pub fn clear(&self) {
        for field in [&self.begin, &self.end, &self.read, &self.prev] {
            field.store(0, Relaxed);
        }
    }
}
