//! Long transactions (FIR 4.2.2).
//!
//! A transaction that runs past the threshold would hold back the redo
//! horizon (`t_low`) of every checkpoint and pin the blocks its versions
//! sit in. Once the background thread flags it, its versions are moved
//! into its worker's long-transaction region: by the background thread
//! itself while the transaction is idle (it takes the worker's write set,
//! which the transaction holds whenever it writes, commits or rolls back),
//! or else by the transaction at its next call. Each version is copied
//! there, the index is pointed at the copy, and the original becomes a
//! hole; new versions go straight to the long region, and the commit is
//! recorded in that region's LCTT entry. From then on checkpoints take
//! `t_low` without it and record a separate, lower horizon for the long
//! regions, which are all that recovery redoes from that far back.
//!
//! The originals keep their pending `begin`, so a reader that reached one
//! before the index moved waits and then reports a conflict rather than
//! deciding without this transaction; the transaction itself reads the
//! same content through either address.

use super::{Store, Write, WriteSet, LONG_MIGRATED, LONG_REQUESTED};
use crate::catalog;
use crate::error::{Error, Result};
use crate::heap::tile::PENDING;
use crate::heap::Addr;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release, SeqCst};

/// Moves `worker`'s running transaction to its long region if it was
/// flagged.
pub(super) fn migrate_if_asked(store: &Store, worker: usize) -> Result<()> {
    if store.long[worker].load(Acquire) != LONG_REQUESTED {
        return Ok(());
    }
    let mut set = store.write_sets[worker].lock();
    move_to_long_region(store, worker, &mut set).map(|_| ())
}

/// After a moved transaction committed: its index changes carry its
/// old timestamp, which incremental checkpoints may already treat as
/// settled; re-marking the paths with the current time makes the next
/// checkpoint read them.
pub(super) fn touch_written_keys(store: &Store, set: &WriteSet) {
    let now = store.clock.peek();
    for w in &set.writes {
        let table = &store.tables[w.table as usize];
        let key = table.heap.read_key(&store.medium, w.new);
        let _ = table.index.compare_and_set(&key, w.new.0, w.new.0, now);
    }
}

/// Moves a flagged transaction's versions; false if it was not (or no
/// longer) flagged or had moved already.
pub(super) fn move_to_long_region(
    store: &Store,
    worker: usize,
    set: &mut WriteSet,
) -> Result<bool> {
    // The flag is re-read under the write set: the transaction may have
    // ended (and the flag been cleared) before the lock was taken.
    if store.long[worker].load(Acquire) != LONG_REQUESTED || set.region != worker {
        return Ok(false);
    }
    set.region = catalog::long_region(worker);
    for i in 0..set.writes.len() {
        let moved = move_version(store, set, &set.writes[i])?;
        set.writes[i].new = moved;
    }
    // The holes must be durable before checkpoints stop waiting for this
    // transaction: a later commit of the worker would otherwise make the
    // originals look committed.
    store.medium.fence()?;
    store.long[worker].store(LONG_MIGRATED, SeqCst);
    store.long_moved.fetch_add(1, Relaxed);
    Ok(true)
}

/// Copies one pending version into the long region and repoints the
/// index; returns the copy's address.
fn move_version(store: &Store, set: &WriteSet, write: &Write) -> Result<Addr> {
    let table = store.tables[write.table as usize].clone();
    let heap = &table.heap;
    let old = write.new;
    let slot = heap
        .decode_checked(&store.medium, old)
        .ok_or_else(|| Error::Corrupt(format!("pending version at {old:?} is damaged")))?;
    let mut buf = Vec::new();
    heap.encode(&mut buf, set.ts, &slot.key, &slot.value, slot.tombstone);
    let new = heap.append(&store.medium, &store.space, set.region, set.ts, &buf)?;
    let gone = || Error::Corrupt("a pending version's block vanished".into());
    let (old_header, new_header) = (
        heap.header(old).ok_or_else(gone)?,
        heap.header(new).ok_or_else(gone)?,
    );
    new_header.end.store(0, Release);
    new_header.read.store(0, Release);
    new_header
        .prev
        .store(old_header.prev.load(Acquire), Release);
    new_header.begin.store(PENDING | set.ts, Release);
    table
        .index
        .compare_and_set(&slot.key, old.0, new.0, set.ts)
        .map_err(|_| Error::Corrupt("a pending index entry moved".into()))?;
    heap.make_hole(&store.medium, old, set.ts);
    Ok(new)
}
