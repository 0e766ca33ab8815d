//! Blocks made ready ahead of need, off the writers' path.
//!
//! A region that fills a block needs the next at once. Making one ready
//! costs more than the writes into it: an extent from `Space` (backed
//! with real space again if it was given back to the file system), every
//! slot's txn word zeroed and written back if the space was used before,
//! and the first touch of every page (a page fault each). A table that
//! grows keeps up to [`RESERVE_BLOCKS`] such extents ready, made by the
//! maintenance side (`DbInner`'s block thread), so a writer only formats
//! the header and links the block; with the reserve empty it makes the
//! extent itself, as before.
//!
//! Nothing here is persisted. A ready extent is linked nowhere, so after
//! a crash it is free space like any other unlinked extent; what makes it
//! ready (zeroed txn words) is written back and fenced by the thread that
//! made it, before any writer can take it (fences order only the calling
//! core's write-backs).

use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

/// Extents a growing table keeps ready.
pub const RESERVE_BLOCKS: usize = 2;

#[derive(Default)]
pub struct Reserve {
    ready: Mutex<Vec<u64>>,
    /// Set once the table added a block: tables that never grow keep no
    /// reserve (it would be space nobody uses).
    growing: AtomicBool,
}

impl Reserve {
    /// A ready extent, if there is one; marks the table as growing.
    pub fn take(&self) -> Option<u64> {
        self.growing.store(true, Ordering::Relaxed);
        self.ready.lock().pop()
    }

    /// How many more extents the table should have ready.
    pub fn missing(&self) -> usize {
        match self.growing.load(Ordering::Relaxed) {
            true => RESERVE_BLOCKS.saturating_sub(self.ready.lock().len()),
            false => 0,
        }
    }

    pub fn put(&self, offset: u64) {
        self.ready.lock().push(offset);
    }

    /// Extents held ready (they count as used space).
    pub fn len(&self) -> usize {
        self.ready.lock().len()
    }
}
