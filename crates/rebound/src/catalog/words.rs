//! Words with a check byte, each stored with one crash-atomic store:
//! `(check8 << 56) | n`, where `check8` is the low byte of crc32c(n) and
//! 0 means "none". One flipped bit anywhere in such a word fails the check
//! (crc32c's low byte changes with every single-bit change of `n`), so it
//! is reported as `Corrupt` and never read as another value.
//!
//! ```text
//! 64             txn-id lease: no id ≥ n has been handed out
//! 128            checkpoint root: offset of the newest complete image
//! 192            GC mark: pack(1) once GC has freed a block
//! 4096 + 64·w    LCTT entry of worker w: its last committed txn id
//! ```
#![deny(clippy::indexing_slicing, clippy::unwrap_used)]

use super::{LCTT_ENTRY, LCTT_OFFSET, MAX_TXN_ID};
use crate::error::{Error, Result};
use crate::medium::Medium;

pub const LEASE_OFFSET: u64 = 64;

/// The durable txn-id lease; 1 for a fresh file.
pub fn txn_lease(medium: &Medium) -> Result<u64> {
    unpack_checked(medium.load(LEASE_OFFSET))
        .ok_or_else(|| Error::Corrupt("txn-id lease fails its check".into()))
}

/// Raises the lease to `n` and makes it durable.
pub fn set_txn_lease(medium: &Medium, n: u64) -> Result<()> {
    medium.store(LEASE_OFFSET, pack(n));
    medium.persist_now(LEASE_OFFSET, 8)
}

/// A 56-bit number with a check byte, stored with one crash-atomic store.
pub fn pack(n: u64) -> u64 {
    debug_assert!(n <= MAX_TXN_ID);
    if n == 0 {
        0
    } else {
        (check8(n) << 56) | n
    }
}

/// The number in a `pack`ed word, `None` if its check byte is wrong.
pub fn unpack_checked(word: u64) -> Option<u64> {
    let n = word & MAX_TXN_ID;
    (word == 0 || word >> 56 == check8(n)).then_some(n)
}

pub const CHECKPOINT_ROOT_OFFSET: u64 = 128;

/// Offset of the newest complete checkpoint, 0 if none.
pub fn checkpoint_root(medium: &Medium) -> Result<u64> {
    unpack_checked(medium.load(CHECKPOINT_ROOT_OFFSET))
        .ok_or_else(|| Error::Corrupt("checkpoint root fails its check".into()))
}

/// Points the root at a complete, durable checkpoint and makes that durable.
pub fn set_checkpoint_root(medium: &Medium, offset: u64) -> Result<()> {
    medium.store(CHECKPOINT_ROOT_OFFSET, pack(offset));
    medium.persist_now(CHECKPOINT_ROOT_OFFSET, 8)
}

fn lctt_entry(worker: usize) -> u64 {
    LCTT_OFFSET + LCTT_ENTRY * worker as u64
}

fn check8(txn: u64) -> u64 {
    (crc32c::crc32c(&txn.to_le_bytes()) & 0xFF) as u64
}

/// Records `txn` as worker `worker`'s last committed transaction and starts
/// writing it back; the caller fences.
pub fn set_last_commit(medium: &Medium, worker: usize, txn: u64) {
    medium.store(lctt_entry(worker), pack(txn));
    medium.persist(lctt_entry(worker), 8);
}

/// Starts loading `worker`'s LCTT line, which the write-back of its last
/// commit may have evicted.
pub fn prefetch_last_commit(medium: &Medium, worker: usize) {
    medium.prefetch(lctt_entry(worker), 8);
}

/// The last committed transaction of `worker`, 0 if none.
pub fn last_commit(medium: &Medium, worker: usize) -> Result<u64> {
    unpack_checked(medium.load(lctt_entry(worker)))
        .ok_or_else(|| Error::Corrupt(format!("LCTT entry of worker {worker} fails its check")))
}

pub const GC_FREED_OFFSET: u64 = 192;

/// Records, before GC frees its first block, that the block chains may
/// skip collected blocks whose tombstones mattered: the full-scan design
/// then refuses the file (it could resurrect deleted keys).
pub fn set_gc_freed(medium: &Medium) -> Result<()> {
    if medium.load(GC_FREED_OFFSET) == pack(1) {
        return Ok(());
    }
    medium.store(GC_FREED_OFFSET, pack(1));
    medium.persist_now(GC_FREED_OFFSET, 8)
}

/// Whether GC ever freed a block of this database.
pub fn gc_freed(medium: &Medium) -> Result<bool> {
    match unpack_checked(medium.load(GC_FREED_OFFSET)) {
        Some(0) => Ok(false),
        Some(1) => Ok(true),
        _ => Err(Error::Corrupt("GC mark fails its check".into())),
    }
}
