//! Allocation of block-sized extents in the medium.
//!
//! Nothing about free space is persisted: recovery rebuilds it from the set
//! of blocks reachable from the catalog, so an extent allocated but never
//! linked before a crash is simply free again. An extent beyond everything
//! the file held when it was opened is fresh (the file grew into it, so it
//! is zero); any other extent may hold arbitrary old bytes (old slots,
//! checkpoint images), and `allocate` says which kind it handed out.
//!
//! A freed extent is given back to the file system at once (a hole, see
//! `Medium::discard`), so the file occupies about what is live even though
//! its length keeps its high-water mark; reusing an extent backs it with
//! real space first (`Medium::refill`), so a full disk is an error at
//! allocation, never a SIGBUS at the first write. A planned shutdown cuts
//! the file back to its last extent in use (`give_back_tail`): the growth
//! step reserved past it, and free extents at its end, are not kept.

use super::BLOCK_ALIGN;
use crate::error::Result;
use crate::medium::Medium;
use parking_lot::{Condvar, Mutex};

/// Growth step of the medium, so that small databases stay small.
const MIN_GROWTH: u64 = 1 << 20;
/// The medium grows by at least this fraction of its length, so that a
/// growing database extends the file (and reserves its space, a sync on a
/// disk) a logarithmic number of times. The space past the last extent is
/// reserved but unused: at a quarter it was a fifth of the file's
/// occupied space in a small, busy database.
const GROWTH_DIVISOR: u64 = 8;

pub struct Space {
    inner: Mutex<Extents>,
    /// Set when a table took a block, so whoever keeps blocks ready
    /// (see `reserve.rs`) makes the next ones.
    blocks_wanted: Mutex<bool>,
    blocks_taken: Condvar,
}

struct Extents {
    /// First byte after the last allocated extent.
    end: u64,
    /// From here on the medium was zero when this process opened it.
    fresh_from: u64,
    /// Free extents below `end`, as (offset, length), first fit.
    free: Vec<(u64, u64)>,
    /// Their total length.
    free_bytes: u64,
}

impl Space {
    /// Everything from `end` on is free; `used` lists the live extents below
    /// it; `fresh_from` is the medium's length when it was opened.
    pub fn new(data_start: u64, mut used: Vec<(u64, u64)>, fresh_from: u64) -> Space {
        used.sort_unstable();
        let mut free = Vec::new();
        let mut at = data_start;
        for (offset, len) in used {
            if offset > at {
                free.push((at, offset - at));
            }
            at = at.max(offset + len);
        }
        Space {
            inner: Mutex::new(Extents {
                end: at,
                fresh_from,
                free_bytes: free.iter().map(|&(_, len)| len).sum(),
                free,
            }),
            blocks_wanted: Mutex::new(false),
            blocks_taken: Condvar::new(),
        }
    }

    /// Bytes still to be had: free extents, and what the medium may still
    /// grow by (a file system can hold less; allocation then reports it).
    pub fn room(&self, medium: &Medium) -> u64 {
        let ext = self.inner.lock();
        debug_assert_eq!(
            ext.free_bytes,
            ext.free.iter().map(|&(_, l)| l).sum::<u64>()
        );
        ext.free_bytes + medium.capacity().saturating_sub(ext.end)
    }

    /// Tells whoever keeps blocks ready that a table took one.
    pub fn wake_preparer(&self) {
        *self.blocks_wanted.lock() = true;
        self.blocks_taken.notify_one();
    }

    /// Waits up to `timeout` for a table to take a block.
    pub fn wait_for_taken_blocks(&self, timeout: std::time::Duration) {
        let mut wanted = self.blocks_wanted.lock();
        if !*wanted {
            self.blocks_taken.wait_for(&mut wanted, timeout);
        }
        *wanted = false;
    }

    /// Allocates `len` bytes (a multiple of BLOCK_ALIGN); returns the offset
    /// and whether the extent is fresh (all zero) rather than reused.
    pub fn allocate(&self, medium: &Medium, len: u64) -> Result<(u64, bool)> {
        debug_assert_eq!(len % BLOCK_ALIGN, 0);
        let mut ext = self.inner.lock();
        if let Some(i) = ext.free.iter().position(|&(_, l)| l >= len) {
            let (offset, free_len) = ext.free[i];
            medium.refill(offset, len)?;
            ext.free_bytes -= len;
            if free_len == len {
                ext.free.remove(i);
            } else {
                ext.free[i] = (offset + len, free_len - len);
            }
            return Ok((offset, false));
        }
        let offset = ext.end;
        let needed = offset + len;
        if needed > medium.len() {
            let grown = needed.max(medium.len() + (medium.len() / GROWTH_DIVISOR).max(MIN_GROWTH));
            medium
                .grow(grown.next_multiple_of(BLOCK_ALIGN))
                .or_else(|_| medium.grow(needed))?;
        }
        ext.end = needed;
        Ok((offset, offset >= ext.fresh_from))
    }

    /// Cuts the medium back to its last allocated extent (free extents at
    /// the end and the unused growth step go), for a planned shutdown:
    /// a closed file then takes what it holds. Under the allocation lock,
    /// so no extent can be handed out past the cut meanwhile. Returns the
    /// medium's length afterwards.
    pub fn give_back_tail(&self, medium: &Medium) -> Result<u64> {
        let mut ext = self.inner.lock();
        let end = match ext.free.last() {
            Some(&(offset, len)) if offset + len == ext.end => offset,
            _ => ext.end,
        };
        let len = medium.shrink_to(end)?;
        // A medium that keeps its length keeps its old bytes there too:
        // the free extent stays listed, as extents that are not fresh.
        if len == end && end < ext.end {
            let (_, freed) = ext.free.pop().unwrap_or_default();
            ext.free_bytes -= freed;
        }
        if len == end {
            ext.end = end;
            // The file reads as zeros past the cut once it grows again.
            ext.fresh_from = ext.fresh_from.min(end);
        }
        Ok(len)
    }

    /// Returns an extent nobody references any more, and its storage to
    /// the file system.
    pub fn free(&self, medium: &Medium, offset: u64, len: u64) {
        // Before the extent is listed: once it is, it may be reused.
        medium.discard(offset, len);
        let mut ext = self.inner.lock();
        let at = ext.free.partition_point(|&(o, _)| o < offset);
        ext.free.insert(at, (offset, len));
        ext.free_bytes += len;
        merge_neighbours(&mut ext.free, at);
    }
}

/// Coalesces the extent at `at` with adjacent free extents.
fn merge_neighbours(free: &mut Vec<(u64, u64)>, at: usize) {
    if at + 1 < free.len() && free[at].0 + free[at].1 == free[at + 1].0 {
        free[at].1 += free[at + 1].1;
        free.remove(at + 1);
    }
    if at > 0 && free[at - 1].0 + free[at - 1].1 == free[at].0 {
        free[at - 1].1 += free[at].1;
        free.remove(at);
    }
}
