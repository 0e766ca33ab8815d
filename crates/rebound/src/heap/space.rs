//! Allocation of block-sized extents in the medium.
//!
//! Nothing about free space is persisted: recovery rebuilds it from the set
//! of blocks reachable from the catalog, so an extent allocated but never
//! linked before a crash is simply free again. An extent beyond everything
//! the file held when it was opened is fresh (the file grew into it, so it
//! is zero); any other extent may hold arbitrary old bytes (old slots,
//! checkpoint images), and `allocate` says which kind it handed out.
//!
//! A freed extent is given back to the file system (a hole, see
//! `Medium::discard`), so the file occupies about what is live even though
//! its length keeps its high-water mark; reusing an extent backs it with
//! real space first (`Medium::refill`), so a full disk is an error at
//! allocation, never a SIGBUS at the first write. A planned shutdown cuts
//! the file back to its last extent in use (`give_back_tail`): the growth
//! step reserved past it, and free extents at its end, are not kept.
//!
//! Up to [`WARM_BYTES`] of freed extents no larger than
//! [`WARM_EXTENT_MAX`] (blocks, not large values) stay backed instead,
//! *warm*, and are the first reused: GC frees blocks in batches while
//! writers take new ones, and a hole punched, backed again, zeroed by the
//! kernel and faulted in page by page cost each of those blocks a system
//! call, 64 page faults and a cleared page each (TPC-C New-Order + Payment
//! at two threads: the block thread alone took 5 % of the CPU). Warm
//! extents go back to the file system once none was taken for a while
//! (`cool_idle`), at an explicit collection and before the file is cut
//! back (`cool`).

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
/// Freed bytes kept backed for reuse: 64 blocks of the default size.
pub const WARM_BYTES: u64 = 16 << 20;
/// Largest freed extent kept warm.
pub const WARM_EXTENT_MAX: u64 = 1 << 20;

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
    /// Free extents still backed (not in `free`), the latest freed last.
    warm: Vec<(u64, u64)>,
    /// Their total length, at most `WARM_BYTES`.
    warm_bytes: u64,
    /// When a warm extent was last freed or taken.
    warm_used: Option<std::time::Instant>,
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
                warm: Vec::new(),
                warm_bytes: 0,
                warm_used: None,
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
        debug_assert_eq!(
            ext.warm_bytes,
            ext.warm.iter().map(|&(_, l)| l).sum::<u64>()
        );
        ext.free_bytes + ext.warm_bytes + medium.capacity().saturating_sub(ext.end)
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
        if let Some(offset) = ext.take_warm(len) {
            return Ok((offset, false));
        }
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
        ext.cool(medium);
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

    /// Returns an extent nobody references any more; it stays warm (see
    /// the module docs) or goes back to the file system.
    pub fn free(&self, medium: &Medium, offset: u64, len: u64) {
        let mut ext = self.inner.lock();
        if len <= WARM_EXTENT_MAX && ext.warm_bytes + len <= WARM_BYTES {
            ext.warm.push((offset, len));
            ext.warm_bytes += len;
            ext.warm_used = Some(std::time::Instant::now());
            return;
        }
        drop(ext);
        // Before the extent is listed: once it is, it may be reused.
        medium.discard(offset, len);
        self.inner.lock().list_free(offset, len);
    }

    /// Gives every warm extent back to the file system (an explicit
    /// collection wants the space now).
    pub fn cool(&self, medium: &Medium) {
        self.inner.lock().cool(medium);
    }

    /// Gives the warm extents back once none was freed or taken for
    /// `idle_after`: a store that stopped writing keeps no slack.
    pub fn cool_idle(&self, medium: &Medium, idle_after: std::time::Duration) {
        let mut ext = self.inner.lock();
        if ext
            .warm_used
            .is_some_and(|used| used.elapsed() >= idle_after)
        {
            ext.cool(medium);
        }
    }

    /// Bytes of freed extents kept backed.
    pub fn warm_bytes(&self) -> u64 {
        self.inner.lock().warm_bytes
    }
}

impl Extents {
    /// The latest freed warm extent that holds `len` bytes; the rest of
    /// it stays warm.
    fn take_warm(&mut self, len: u64) -> Option<u64> {
        let i = self.warm.iter().rposition(|&(_, l)| l >= len)?;
        let (offset, warm_len) = self.warm[i];
        match warm_len == len {
            true => {
                self.warm.remove(i);
            }
            false => self.warm[i] = (offset + len, warm_len - len),
        }
        self.warm_bytes -= len;
        self.warm_used = Some(std::time::Instant::now());
        Some(offset)
    }

    fn cool(&mut self, medium: &Medium) {
        for (offset, len) in std::mem::take(&mut self.warm) {
            medium.discard(offset, len);
            self.list_free(offset, len);
        }
        self.warm_bytes = 0;
        self.warm_used = None;
    }

    fn list_free(&mut self, offset: u64, len: u64) {
        let at = self.free.partition_point(|&(o, _)| o < offset);
        self.free.insert(at, (offset, len));
        self.free_bytes += len;
        merge_neighbours(&mut self.free, at);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::DATA_START;
    use std::time::Duration;

    const BLOCK: u64 = 256 << 10;

    /// A volatile medium discards by dropping pages: a discarded extent
    /// reads as zeros, a warm one keeps its bytes.
    fn space_with_blocks(blocks: u64) -> (Medium, Space, Vec<u64>) {
        let medium = Medium::volatile(1 << 30, DATA_START).expect("a volatile medium");
        let space = Space::new(DATA_START, Vec::new(), DATA_START);
        let offsets: Vec<u64> = (0..blocks)
            .map(|_| space.allocate(&medium, BLOCK).unwrap().0)
            .collect();
        for &offset in &offsets {
            medium.store(offset, offset);
        }
        (medium, space, offsets)
    }

    #[test]
    fn freed_blocks_stay_backed_up_to_the_bound_and_are_reused_first() {
        let warm_blocks = WARM_BYTES / BLOCK;
        let (medium, space, offsets) = space_with_blocks(warm_blocks + 2);
        let room = space.room(&medium);
        for &offset in &offsets {
            space.free(&medium, offset, BLOCK);
        }
        assert_eq!(space.warm_bytes(), WARM_BYTES);
        assert_eq!(space.room(&medium), room + offsets.len() as u64 * BLOCK);
        let (kept, discarded) = offsets.split_at(warm_blocks as usize);
        assert!(
            kept.iter().all(|&o| medium.load(o) == o),
            "a warm block was discarded"
        );
        assert!(
            discarded.iter().all(|&o| medium.load(o) == 0),
            "a block past the bound kept its space"
        );
        // The latest freed warm block first, its bytes as they were.
        let (offset, fresh) = space.allocate(&medium, BLOCK).unwrap();
        assert_eq!((offset, fresh), (*kept.last().unwrap(), false));
        assert_eq!(space.warm_bytes(), WARM_BYTES - BLOCK);
    }

    #[test]
    fn large_extents_go_back_at_once() {
        let medium = Medium::volatile(1 << 30, DATA_START).expect("a volatile medium");
        let space = Space::new(DATA_START, Vec::new(), DATA_START);
        let (offset, _) = space.allocate(&medium, 2 * WARM_EXTENT_MAX).unwrap();
        medium.store(offset, 7);
        space.free(&medium, offset, 2 * WARM_EXTENT_MAX);
        assert_eq!(space.warm_bytes(), 0);
        assert_eq!(medium.load(offset), 0);
    }

    #[test]
    fn warm_blocks_go_back_when_idle_or_asked() {
        let (medium, space, offsets) = space_with_blocks(4);
        space.free(&medium, offsets[0], BLOCK);
        space.free(&medium, offsets[1], BLOCK);
        space.cool_idle(&medium, Duration::from_secs(3600));
        assert_eq!(space.warm_bytes(), 2 * BLOCK, "cooled before its time");
        space.cool_idle(&medium, Duration::ZERO);
        assert_eq!(space.warm_bytes(), 0);
        assert_eq!((medium.load(offsets[0]), medium.load(offsets[1])), (0, 0));
        space.free(&medium, offsets[2], BLOCK);
        space.cool(&medium);
        assert_eq!((space.warm_bytes(), medium.load(offsets[2])), (0, 0));
        // Cooled extents are free ones: reused (backed again) as before.
        let (offset, fresh) = space.allocate(&medium, BLOCK).unwrap();
        assert!(offsets[..3].contains(&offset) && !fresh);
    }
}
