//! GC's system transactions: relocating live versions (FIR 4.5).
//!
//! A relocation is an ordinary MVTO write of the same content through the
//! GC worker's region, so durability, visibility and recovery need no rule
//! of their own: the copy commits like any version and the original gets
//! a committed successor (and its obsolete bit) at publish. GC runs its
//! transactions only when every other running transaction is younger
//! (`gc::empty_block`), writers that meet its locks wait for it as long as
//! it runs, and a writer whose head GC copied after its lookup looks again,
//! so a copy's timestamp never makes a user transaction conflict.

use super::{LockedHead, TableRt, TxnState};
use crate::error::Result;
use crate::heap::tile::{LOCKED, PENDING};
use crate::heap::Addr;
use std::sync::atomic::Ordering::{Acquire, SeqCst};

/// Copies `head`, the index head of its key, into the region of `txn`
/// (GC's system transaction). `Ok(false)` when that cannot be done now:
/// the head moved or is being written. Unlike a user write it may go
/// under younger readers' marks, since the content does not change.
pub fn relocate(txn: &mut TxnState<'_>, table: &TableRt, head: Addr) -> Result<bool> {
    txn.check_usable()?;
    let store = txn.store;
    let mut set = store.write_sets[txn.worker].lock();
    let medium = &txn.store.medium;
    let Some(slot) = table.heap.decode_checked(medium, head) else {
        return Ok(false);
    };
    // The index decides whether this is still the head (classify may have
    // trusted the DRAM header), and the leaf found here is where the copy
    // is entered: one descent for both.
    let Some((found, hint)) = table.index.get_for_update(&slot.key, txn.ts) else {
        return Ok(false);
    };
    if found != head.0 {
        return Ok(false);
    }
    let header = txn.version(table, head)?;
    let begin = header.begin.load(Acquire);
    if begin & PENDING != 0 || begin > txn.ts {
        return Ok(false);
    }
    if header
        .end
        .compare_exchange(0, LOCKED | txn.ts, SeqCst, SeqCst)
        .is_err()
    {
        return Ok(false);
    }
    let value = (!slot.tombstone).then_some(slot.value.as_slice());
    // Younger readers of the original read this very content, so the
    // copy may sit below them in the serial order; their marks move
    // with it. Marks made after our lock cannot exist: such readers
    // wait for us and then read the copy.
    let read = header.read.load(SeqCst);
    let locked = LockedHead {
        head,
        hint: Some(&hint),
        header,
        deleted: slot.tombstone,
    };
    let copied = txn.append_successor(table, &slot.key, value, locked, read, &mut set)?;
    if copied {
        // The copy is the original's content under a newer timestamp,
        // written over it (checked again once committed: `gc`).
        let copy = set.writes.last().map(|w| (w.new, w.prev));
        let Some((new, prev)) = copy else {
            unreachable!("a relocation that succeeded recorded its copy")
        };
        assert_eq!(prev, Some(head), "a relocated version's copy supersedes it");
        assert!(
            begin < txn.ts,
            "a relocated version's copy is newer than it: {begin} !< {}",
            txn.ts
        );
        assert!(
            table.heap.read_key(medium, new) == slot.key
                && table.heap.tombstone(medium, new) == Some(slot.tombstone),
            "a relocated version keeps its key and kind ({head:?} -> {new:?})"
        );
    }
    Ok(copied)
}
