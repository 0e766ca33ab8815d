//! Long transactions (FIR 4.2.2).
//!
//! A transaction that runs past the threshold would hold back the redo
//! horizon (`t_low`) of every checkpoint and pin the blocks its versions
//! sit in. When the background thread flags it, the transaction moves its
//! versions, at its next call, into its worker's long-transaction region:
//! each version is copied there, the index is pointed at the copy, and the
//! original becomes a hole; new versions go straight to the long region,
//! and its commit is recorded in that region's LCTT entry. From then on
//! checkpoints take `t_low` without it and record a separate, lower
//! horizon for the long regions, which are all that recovery redoes from
//! that far back.
//!
//! The originals keep their pending `begin`, so a reader that reached one
//! before the index moved waits and then reports a conflict rather than
//! deciding without this transaction.

use super::{TxnState, Write, LONG_MIGRATED, LONG_REQUESTED};
use crate::catalog;
use crate::error::{Error, Result};
use crate::heap::tile::PENDING;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release, SeqCst};

impl TxnState<'_> {
    /// Moves this transaction to its long region if it was flagged.
    pub(super) fn migrate_if_asked(&mut self) -> Result<()> {
        let store = self.store;
        if self.region != self.worker || store.long[self.worker].load(Acquire) != LONG_REQUESTED {
            return Ok(());
        }
        self.region = catalog::long_region(self.worker);
        for i in 0..self.writes.len() {
            let moved = self.move_version(&self.writes[i])?;
            self.writes[i].new = moved;
        }
        // The holes must be durable before checkpoints stop waiting for
        // this transaction: a later commit of the worker would otherwise
        // make the originals look committed.
        store.medium.fence()?;
        store.long[self.worker].store(LONG_MIGRATED, SeqCst);
        store.long_moved.fetch_add(1, Relaxed);
        Ok(())
    }

    /// Copies one pending version into the long region and repoints the
    /// index; returns the copy's address.
    fn move_version(&self, write: &Write) -> Result<crate::heap::Addr> {
        let store = self.store;
        let table = store.tables[write.table as usize].clone();
        let heap = &table.heap;
        let old = write.new;
        let slot = heap
            .decode_checked(&store.medium, old)
            .ok_or_else(|| Error::Corrupt(format!("pending version at {old:?} is damaged")))?;
        let mut buf = Vec::new();
        heap.encode(&mut buf, self.ts, &slot.key, &slot.value, slot.tombstone);
        let new = heap.append(&store.medium, &store.space, self.region, self.ts, &buf)?;
        let (old_header, new_header) = (self.version(&table, old)?, self.version(&table, new)?);
        new_header.end.store(0, Release);
        new_header.read.store(0, Release);
        new_header
            .prev
            .store(old_header.prev.load(Acquire), Release);
        new_header.begin.store(PENDING | self.ts, Release);
        table
            .index
            .compare_and_set(&slot.key, old.0, new.0, self.ts)
            .map_err(|_| Error::Corrupt("a pending index entry moved".into()))?;
        heap.make_hole(&store.medium, old, self.ts);
        Ok(new)
    }

    /// After a migrated transaction committed: its index changes carry its
    /// old timestamp, which incremental checkpoints may already treat as
    /// settled; re-marking the paths with the current time makes the next
    /// checkpoint read them.
    pub(super) fn touch_written_keys(&mut self) {
        let store = self.store;
        let now = store.clock.peek();
        for w in self.writes.drain(..) {
            let table = &store.tables[w.table as usize];
            let key = table.heap.read_key(&store.medium, w.new);
            let _ = table.index.compare_and_set(&key, w.new.0, w.new.0, now);
        }
    }
}
