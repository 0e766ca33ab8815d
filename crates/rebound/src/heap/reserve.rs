//! Blocks made ready ahead of need, off the writers' path.
//!
//! A region that fills a block needs the next at once. Making one ready
//! costs more than the writes into it: an extent from `Space` (backed
//! with real space again if it was given back to the file system), every
//! slot's txn word zeroed and written back if the space was used before,
//! and the first touch of its pages (a page fault each; the stores reach
//! every page that holds a slot's first word). A table that grows (a
//! region of it took its second block or a later one) keeps up to
//! [`RESERVE_BLOCKS`] such extents ready, made by the maintenance side
//! (`DbInner`'s block thread), so a writer only formats the header and
//! links the block; with the reserve empty it makes the extent itself, as
//! before. A table that takes no block for a while (the block thread
//! says how long) gives its reserve back, as it does when the medium has
//! less than [`SPARE_ROOM_BLOCKS`] blocks of room left; every table does
//! when a writer finds the medium full.
//!
//! Nothing here is persisted. A ready extent is linked nowhere, so after
//! a crash it is free space like any other unlinked extent; what makes it
//! ready (zeroed txn words) is written back and fenced by the thread that
//! made it, before any writer can take it (fences order only the calling
//! core's write-backs).

use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Extents a growing table keeps ready.
pub const RESERVE_BLOCKS: usize = 2;
/// Blocks' worth of room the medium must still have for a table to keep
/// blocks ready: when space runs short, it goes to writes and checkpoint
/// images, not to blocks nobody asked for yet.
pub const SPARE_ROOM_BLOCKS: u64 = 16;

#[derive(Default)]
pub struct Reserve {
    ready: Mutex<Vec<u64>>,
    growing: AtomicBool,
    /// When a block was last taken (a writer takes one per block, so a
    /// lock here costs nothing per write).
    last_take: Mutex<Option<Instant>>,
}

impl Reserve {
    /// A ready extent, if there is one, for a region's block number `seq`;
    /// a later block than a region's first marks the table as growing.
    pub fn take(&self, seq: u64) -> Option<u64> {
        if seq > 0 {
            self.growing.store(true, Ordering::Relaxed);
        }
        *self.last_take.lock() = Some(Instant::now());
        self.ready.lock().pop()
    }

    /// How many more extents the table should have ready.
    pub fn missing(&self) -> usize {
        match self.growing.load(Ordering::Relaxed) {
            true => RESERVE_BLOCKS.saturating_sub(self.ready.lock().len()),
            false => 0,
        }
    }

    /// Whether the table took no block for `after`.
    pub fn idle(&self, after: Duration) -> bool {
        self.last_take
            .lock()
            .is_some_and(|at| at.elapsed() >= after)
    }

    /// Holds a cleared and fenced extent ready. An extent held twice would
    /// become two blocks.
    pub fn put(&self, offset: u64) {
        let mut ready = self.ready.lock();
        assert!(
            offset.is_multiple_of(super::BLOCK_ALIGN) && !ready.contains(&offset),
            "an extent held ready is aligned and held once: {offset} in {ready:?}"
        );
        ready.push(offset);
    }

    /// Empties the reserve until the table grows again.
    pub fn drain(&self) -> Vec<u64> {
        self.growing.store(false, Ordering::Relaxed);
        std::mem::take(&mut *self.ready.lock())
    }

    /// Extents held ready (they count as used space).
    pub fn len(&self) -> usize {
        self.ready.lock().len()
    }
}
