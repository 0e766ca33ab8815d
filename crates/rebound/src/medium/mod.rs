//! The persistence medium: one byte-addressable space behind one type.
//!
//! Every layer above reaches persistent bytes only through [`Medium`]: word
//! loads and stores, `persist(range)` (start writing a range back) and
//! `fence()` (wait until everything persisted so far is durable). What
//! "durable" means depends on the backend:
//!
//! | backend | persist | fence | survives |
//! |---|---|---|---|
//! | [`Backend::PersistentMemory`] (file on tmpfs/DAX) | `clwb` per 64-byte line (`clflushopt`/`clflush` fallback) | `sfence` | process crash (tmpfs) / power loss (real DAX) |
//! | [`Backend::Disk`] (file on a block filesystem) | widen the dirty range | `msync` of the dirty range, coalesced across threads (group commit) | power loss |
//! | [`Backend::Disk`] over a [`SimDevice::disk`] | widen the dirty range | the same group commit, copying the dirty pages into the durable image | simulated power cuts with a seed |
//! | [`Backend::Simulated`] ([`SimDevice`]) | remember the lines | copy remembered lines into the durable image | simulated crashes with a seed |
//! | [`Backend::Volatile`] (anonymous memory) | nothing | nothing | nothing (the `none` design) |
//!
//! A failed sync (`msync`, or the `fsync` of a growth) is final: the kernel
//! may have dropped the dirty pages it could not write, or kept them
//! marked clean, so a later sync that succeeds proves nothing about them.
//! Every later `fence()` fails, and [`Medium::failure`] tells the database
//! to refuse work. Reopening recovers from what the file holds; pages
//! whose write failed may still be in the page cache, so after such a
//! failure the reliable copy is the one read after a restart of the
//! machine.
//!
//! # Assumptions about the medium
//! * An aligned 8-byte store is atomic with respect to crashes: after a crash
//!   a word holds either its old or its new value, never a mix. Wider stores
//!   may tear at 8-byte boundaries, and unfenced 64-byte lines may or may not
//!   have reached the medium, independently of each other and of program order.
//! * Everything persisted before a completed `fence()` survives a crash.
//!
//! The simulated backend enforces exactly these assumptions and nothing more,
//! so code that is correct on it is correct on any medium that keeps them.
//!
//! # Soundness
//! All access goes through relaxed (or stronger) atomic word operations on the
//! mapping, so concurrent readers and writers of the same bytes are never a
//! data race in Rust's sense. Offsets are bounds-checked against the mapped
//! length; a violation is an [`Error::Corrupt`]-style bug report from the
//! caller, surfaced as a panic-free `Err` by the `checked_*` helpers or as a
//! debug assertion in the hot-path variants that take already-validated offsets.
#![allow(unsafe_code)]

pub(crate) mod checksum;
mod dram;
mod file_view;
mod flush;
mod mapping;
mod sim;

pub(crate) use dram::{advise_huge_pages, HugeSlice, HUGE_PAGE_BYTES};
pub(crate) use file_view::FileView;
pub(crate) use mapping::on_tmpfs;
pub use sim::SimDevice;

use crate::error::{Error, Result};
use mapping::Mapping;
use parking_lot::{Condvar, Mutex};
use std::fs::File;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// Size of a cache line, the unit the hardware writes back.
pub const LINE: u64 = 64;
/// Size of an NVM write unit, the unit of injected latency.
pub const NVM_LINE: u64 = 256;

/// What a successful `fence()` protects against, reported to users.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Guarantee {
    /// Nothing is persisted (the `none` design).
    None,
    /// Survives a crash of the process; the file lives in memory (tmpfs),
    /// so power loss loses it unless it is real persistent memory (DAX).
    ProcessCrash,
    /// Survives power loss: data reached the disk with `msync`.
    PowerLoss,
    /// Survives simulated crashes of a [`SimDevice`].
    Simulated,
}

pub(crate) enum Backend {
    Volatile,
    PersistentMemory { file: File, flush: flush::Flusher },
    Disk { target: DiskTarget, sync: DiskSync },
    Simulated(SimDevice),
}

/// What a disk backend's sync rounds write to: a real file, or a
/// simulated disk whose power cuts lose what no round wrote.
pub(crate) enum DiskTarget {
    File(File),
    Simulated(SimDevice),
}

/// Group commit for `msync`: a fence that arrives while a sync is running
/// waits for the next one instead of issuing its own.
pub(crate) struct DiskSync {
    /// Bytes persisted since a round last took them. One lock for both
    /// ends: a round must take every persist's whole range or none of it
    /// (with an atomic per end, a round between a persist's two updates
    /// took its low end without its high end and synced nothing for it).
    dirty: Mutex<DirtyRange>,
    state: Mutex<SyncState>,
    done: Condvar,
    /// Set with `SyncState::failed`, so that every transaction's check for
    /// a failure is one load.
    has_failed: AtomicBool,
}

#[derive(Clone, Copy)]
struct DirtyRange {
    lo: u64,
    hi: u64,
}

impl DirtyRange {
    const EMPTY: DirtyRange = DirtyRange {
        lo: u64::MAX,
        hi: 0,
    };
}

#[derive(Default)]
struct SyncState {
    running: bool,
    completed_rounds: u64,
    /// The first failed round's error. Never cleared: see the module
    /// header on why a failed sync is final.
    failed: Option<String>,
}

impl DiskSync {
    fn new() -> Self {
        DiskSync {
            dirty: Mutex::new(DirtyRange::EMPTY),
            state: Mutex::new(SyncState::default()),
            done: Condvar::new(),
            has_failed: AtomicBool::new(false),
        }
    }

    fn note_dirty(&self, first: u64, end: u64) {
        debug_assert!(first < end, "an empty dirty range");
        let mut dirty = self.dirty.lock();
        dirty.lo = dirty.lo.min(first);
        dirty.hi = dirty.hi.max(end);
    }

    fn take_dirty(&self) -> DirtyRange {
        std::mem::replace(&mut *self.dirty.lock(), DirtyRange::EMPTY)
    }

    fn failure(&self) -> Option<String> {
        if !self.has_failed.load(Ordering::Acquire) {
            return None;
        }
        self.state.lock().failed.clone()
    }

    /// Records a failed sync; the first one is kept for good.
    fn fail(&self, error: &dyn std::fmt::Display) {
        let mut state = self.state.lock();
        self.record_failure(&mut state, error);
    }

    fn record_failure(&self, state: &mut SyncState, error: &dyn std::fmt::Display) {
        state.failed.get_or_insert_with(|| error.to_string());
        self.has_failed.store(true, Ordering::Release);
    }
}

/// The persistence medium. Cheap to share behind an `Arc`.
pub struct Medium {
    map: Arc<Mapping>,
    backend: Backend,
    latency_ns_per_line: u64,
    grow_lock: Mutex<()>,
}

impl Medium {
    /// Anonymous memory: fast, nothing survives.
    pub(crate) fn volatile(reserve: u64, initial: u64) -> Result<Self> {
        let map = Mapping::anonymous(reserve, initial)?;
        Ok(Self::with(Arc::new(map), Backend::Volatile, 0))
    }

    /// A private copy-on-write image of `file`: reads come from the file,
    /// writes stay in this process, nothing is ever persisted (a
    /// read-only open recovers in it without touching the file).
    pub(crate) fn private_copy(file: &File) -> Result<Self> {
        let map = Mapping::private_copy(file)?;
        Ok(Self::with(Arc::new(map), Backend::Volatile, 0))
    }

    /// A file mapping persisted with cache-line write-back (tmpfs or DAX).
    pub(crate) fn persistent_memory(file: File, reserve: u64, latency: u64) -> Result<Self> {
        let map = Mapping::file(&file, reserve)?;
        let flush = flush::Flusher::detect();
        Ok(Self::with(
            Arc::new(map),
            Backend::PersistentMemory { file, flush },
            latency,
        ))
    }

    /// A file mapping persisted with `msync` (a disk filesystem).
    pub(crate) fn disk(file: File, reserve: u64) -> Result<Self> {
        let map = Mapping::file(&file, reserve)?;
        let backend = Backend::Disk {
            target: DiskTarget::File(file),
            sync: DiskSync::new(),
        };
        Ok(Self::with(Arc::new(map), backend, 0))
    }

    /// The working image of a simulated device: persistent memory, or a
    /// disk behind the same group commit as a real one.
    pub(crate) fn simulated(device: SimDevice) -> Self {
        let map = device.working_mapping();
        let backend = if device.is_disk() {
            Backend::Disk {
                target: DiskTarget::Simulated(device),
                sync: DiskSync::new(),
            }
        } else {
            Backend::Simulated(device)
        };
        Self::with(map, backend, 0)
    }

    fn with(map: Arc<Mapping>, backend: Backend, latency_ns_per_line: u64) -> Self {
        Medium {
            map,
            backend,
            latency_ns_per_line,
            grow_lock: Mutex::new(()),
        }
    }

    pub fn guarantee(&self) -> Guarantee {
        match self.backend {
            Backend::Volatile => Guarantee::None,
            Backend::PersistentMemory { .. } => Guarantee::ProcessCrash,
            Backend::Disk {
                target: DiskTarget::File(_),
                ..
            } => Guarantee::PowerLoss,
            Backend::Disk {
                target: DiskTarget::Simulated(_),
                ..
            }
            | Backend::Simulated(_) => Guarantee::Simulated,
        }
    }

    /// Current usable length in bytes.
    pub fn len(&self) -> u64 {
        self.map.len()
    }

    /// The length the medium may grow to (its reserved size).
    pub fn capacity(&self) -> u64 {
        self.map.reserved()
    }

    /// Grows the usable length to at least `new_len`, reserving real space so
    /// that a full disk is an error here and never a SIGBUS later.
    pub fn grow(&self, new_len: u64) -> Result<()> {
        let _guard = self.grow_lock.lock();
        if new_len <= self.len() {
            return Ok(());
        }
        if new_len > self.map.reserved() {
            return Err(Error::OutOfSpace(format!(
                "medium would exceed its reserved size of {} bytes",
                self.map.reserved()
            )));
        }
        match &self.backend {
            Backend::Volatile => {}
            Backend::PersistentMemory { file, .. } => mapping::allocate(file, new_len)?,
            Backend::Disk { target, sync } => match target {
                DiskTarget::File(file) => {
                    mapping::allocate(file, new_len)?;
                    // A full `fsync` writes the mapping's dirty pages too:
                    // its failure is a failed sync round's.
                    if let Err(e) = file.sync_all() {
                        sync.fail(&e);
                        return Err(e.into());
                    }
                }
                DiskTarget::Simulated(dev) => dev.grow(new_len),
            },
            Backend::Simulated(dev) => dev.grow(new_len),
        }
        self.map.set_len(new_len);
        Ok(())
    }

    /// Cuts a file-backed medium down to `new_len` (never below what it
    /// holds: the caller knows nothing past `new_len` is referenced), so a
    /// closed file does not keep the growth step reserved past its data.
    /// The usable length drops first: nothing in this process reaches the
    /// cut bytes. A later `grow` reserves real space again. Other media
    /// keep their length. Returns the length now in force.
    pub fn shrink_to(&self, new_len: u64) -> Result<u64> {
        let _guard = self.grow_lock.lock();
        if new_len >= self.len() {
            return Ok(self.len());
        }
        let file = match &self.backend {
            Backend::PersistentMemory { file, .. }
            | Backend::Disk {
                target: DiskTarget::File(file),
                ..
            } => file,
            _ => return Ok(self.len()),
        };
        self.map.set_len(new_len);
        file.set_len(new_len)?;
        Ok(new_len)
    }

    /// Gives the storage behind a free extent back: to the file system
    /// (a hole) or, for anonymous memory, to the system. The extent then
    /// reads as zeros, or keeps its bytes where holes are not supported
    /// (and on the simulated device, whose crash model needs no holes);
    /// users of free extents must expect arbitrary bytes either way.
    /// Call it only on extents nobody can reach, before they can be
    /// allocated again; `refill` must run before they are written.
    pub fn discard(&self, off: u64, len: u64) {
        if len == 0 || off + len > self.len() {
            return;
        }
        match &self.backend {
            Backend::Volatile => self.map.drop_pages(off, len),
            Backend::PersistentMemory { file, .. }
            | Backend::Disk {
                target: DiskTarget::File(file),
                ..
            } => {
                mapping::punch_hole(file, off, len);
            }
            Backend::Disk { .. } | Backend::Simulated(_) => {}
        }
    }

    /// Backs an extent `discard` may have emptied with real space again,
    /// so that a full file system is an error here, not a SIGBUS later.
    pub fn refill(&self, off: u64, len: u64) -> Result<()> {
        match &self.backend {
            Backend::PersistentMemory { file, .. }
            | Backend::Disk {
                target: DiskTarget::File(file),
                ..
            } => mapping::refill_hole(file, off, len),
            Backend::Volatile | Backend::Disk { .. } | Backend::Simulated(_) => Ok(()),
        }
    }

    fn word(&self, off: u64) -> &AtomicU64 {
        self.map.word(off)
    }

    /// Loads an aligned word with acquire ordering.
    #[inline]
    pub fn load(&self, off: u64) -> u64 {
        self.word(off).load(Ordering::Acquire)
    }

    /// Loads the two aligned words at `off` with acquire ordering, bounds
    /// checked once (a record header is two words, read on every read).
    #[inline]
    pub fn load_pair(&self, off: u64) -> [u64; 2] {
        match self.map.words(off, 2) {
            [first, second] => [
                first.load(Ordering::Acquire),
                second.load(Ordering::Acquire),
            ],
            _ => unreachable!("a run of two words"),
        }
    }

    /// Stores an aligned word with release ordering; crash-atomic.
    #[inline]
    pub fn store(&self, off: u64, value: u64) {
        self.word(off).store(value, Ordering::Release)
    }

    /// Replaces the bits of an aligned word that `mask` selects with those
    /// of `value`, in one atomic step: the other bits keep whatever a
    /// concurrent writer stores there (two fields sharing a word).
    #[inline]
    pub fn store_bits(&self, off: u64, mask: u64, value: u64) {
        let replace = |old: u64| Some((old & !mask) | (value & mask));
        let _ = self
            .word(off)
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, replace);
    }

    /// Sets bits in an aligned word.
    #[inline]
    pub fn fetch_or(&self, off: u64, bits: u64) -> u64 {
        self.word(off).fetch_or(bits, Ordering::AcqRel)
    }

    /// Atomically clears `bits` in the word at `off`; returns the old word.
    pub fn fetch_and_not(&self, off: u64, bits: u64) -> u64 {
        self.word(off).fetch_and(!bits, Ordering::AcqRel)
    }

    /// Copies bytes in at an 8-aligned offset; the tail word is zero-padded.
    pub fn write_bytes(&self, off: u64, data: &[u8]) {
        if data.is_empty() {
            return;
        }
        // Bounds-checked once for the run: this is the write path of every
        // slot.
        let words = self.map.words(off, data.len().div_ceil(8));
        let mut chunks = data.chunks_exact(8);
        let mut words = words.iter();
        for (chunk, word) in (&mut chunks).zip(&mut words) {
            let value = u64::from_le_bytes(chunk.try_into().expect("chunk of 8"));
            word.store(value, Ordering::Relaxed);
        }
        let rest = chunks.remainder();
        if let Some(word) = words.next() {
            let mut tail = [0u8; 8];
            tail[..rest.len()].copy_from_slice(rest);
            word.store(u64::from_le_bytes(tail), Ordering::Relaxed);
        }
    }

    /// Copies a run of bytes that nothing else reads or writes until the
    /// caller publishes them (an extent being filled). A file-backed
    /// medium takes them with one `pwrite`: the shared mapping sees the
    /// same page cache, and the file system fills its pages without
    /// faulting and zeroing each through the mapping first (a 16 MiB
    /// value is 4,096 page faults otherwise). Made durable by `persist`
    /// like any write.
    pub fn write_unshared(&self, off: u64, data: &[u8]) -> Result<()> {
        let fits = off
            .checked_add(data.len() as u64)
            .is_some_and(|end| end <= self.len());
        assert!(
            fits,
            "bulk write at {off} of {} bytes outside 0..{}",
            data.len(),
            self.len()
        );
        match &self.backend {
            Backend::PersistentMemory { file, .. }
            | Backend::Disk {
                target: DiskTarget::File(file),
                ..
            } => {
                std::os::unix::fs::FileExt::write_all_at(file, data, off)?;
                Ok(())
            }
            _ => {
                self.write_bytes(off, data);
                Ok(())
            }
        }
    }

    /// Copies `out.len()` bytes out from an 8-aligned offset.
    pub fn read_bytes(&self, off: u64, out: &mut [u8]) {
        let mut at = off;
        let mut chunks = out.chunks_exact_mut(8);
        for chunk in &mut chunks {
            chunk.copy_from_slice(&self.word(at).load(Ordering::Relaxed).to_le_bytes());
            at += 8;
        }
        let rest = chunks.into_remainder();
        if !rest.is_empty() {
            let word = self.word(at).load(Ordering::Relaxed).to_le_bytes();
            rest.copy_from_slice(&word[..rest.len()]);
        }
    }

    /// Starts loading the cache lines of `[off, off + len)` so that the
    /// misses of a later read overlap with other work. Out-of-range
    /// offsets are ignored: a hint, never an access.
    #[inline]
    pub fn prefetch(&self, off: u64, len: u64) {
        if off.saturating_add(len) > self.len() {
            return;
        }
        let first = off & !(LINE - 1);
        let mut line = first;
        while line < off + len {
            prefetch(self.map.line_ptr(line));
            line += LINE;
        }
    }

    /// Copies `out.len()` bytes out from any offset. Whole words are
    /// copied as whole words: this is the read path of every value.
    ///
    /// The words between the first and the last go to `out` as unaligned
    /// 8-byte stores, four per step; the partial first and last words are
    /// stored in fixed-size pieces. A value behind a 12-byte record header
    /// starts 4 bytes into a word, and a variable-length `copy_from_slice`
    /// there is a call to `memcpy` at each end (a 100-byte value took 151
    /// instructions with those calls and one word a step, 36 this way).
    #[inline]
    pub fn read_at(&self, off: u64, out: &mut [u8]) {
        if out.is_empty() {
            return;
        }
        let first = off & !7;
        let skip = (off - first) as usize;
        let count = (skip + out.len()).div_ceil(8);
        let words = self.map.words(first, count);
        let Some((first_word, rest_words)) = words.split_first() else {
            return;
        };
        let (head, rest) = out.split_at_mut((8 - skip).min(out.len()));
        store_prefix(head, first_word.load(Ordering::Relaxed) >> (8 * skip));
        // `rest` starts at the second word: its whole words, then what is
        // left of the last one.
        let whole = rest.len() / 8;
        let (body, tail) = rest.split_at_mut(whole * 8);
        let (body_words, tail_words) = rest_words.split_at(whole.min(rest_words.len()));
        copy_words(body, body_words);
        if let Some(word) = tail_words.first() {
            store_prefix(tail, word.load(Ordering::Relaxed));
        }
    }

    /// Whether the bytes at `off` are `expected`, compared in place a word
    /// at a time (a key checked before its row is read: no copy, no
    /// `memcmp` call).
    #[inline]
    pub fn equals_at(&self, off: u64, expected: &[u8]) -> bool {
        let first = off & !7;
        let skip = (off - first) as usize;
        let count = (skip + expected.len()).div_ceil(8);
        let mut rest = expected;
        let mut shift = 8 * skip;
        for word in self.map.words(first, count) {
            let take = (8 - shift / 8).min(rest.len());
            let (part, after) = rest.split_at(take);
            let mask = match take {
                8 => u64::MAX,
                _ => (1 << (8 * take)) - 1,
            };
            if (word.load(Ordering::Relaxed) >> shift) & mask != load_prefix(part) {
                return false;
            }
            rest = after;
            shift = 0;
        }
        rest.is_empty()
    }

    /// Zeroes an 8-aligned range whose length is a multiple of 8.
    pub fn zero(&self, off: u64, len: u64) {
        let mut at = off;
        while at < off + len {
            self.word(at).store(0, Ordering::Relaxed);
            at += 8;
        }
    }

    /// Starts writing `[off, off+len)` back to the medium. Not durable until
    /// the next `fence()` on this thread returns.
    pub fn persist(&self, off: u64, len: u64) {
        if len == 0 {
            return;
        }
        let first = off & !(LINE - 1);
        let end = off + len;
        match &self.backend {
            Backend::Volatile => {}
            Backend::PersistentMemory { flush, .. } => {
                let mut line = first;
                while line < end {
                    flush.write_back(self.map.line_ptr(line));
                    line += LINE;
                }
                self.inject_latency(first, end);
            }
            Backend::Disk { sync, .. } => sync.note_dirty(first, end),
            Backend::Simulated(dev) => dev.note_persist(first, end),
        }
    }

    /// `persist` of several ranges, writing back a line that adjacent
    /// ranges share only once. Ranges in ascending order merge (a
    /// transaction's slots in one block are); others are written back
    /// apart. A second write-back of a line is not free: on CPUs whose
    /// write-back evicts, it waits for the line to come back first.
    pub fn persist_all(&self, ranges: impl IntoIterator<Item = (u64, u64)>) {
        let mut run: Option<(u64, u64)> = None;
        for (off, len) in ranges.into_iter().filter(|&(_, len)| len > 0) {
            let (first, end) = (off & !(LINE - 1), off + len);
            run = match run {
                Some((lo, hi)) if first >= lo && first <= hi.next_multiple_of(LINE) => {
                    Some((lo, hi.max(end)))
                }
                Some((lo, hi)) => {
                    self.persist(lo, hi - lo);
                    Some((first, end))
                }
                None => Some((first, end)),
            };
        }
        if let Some((lo, hi)) = run {
            self.persist(lo, hi - lo);
        }
    }

    fn inject_latency(&self, first: u64, end: u64) {
        if self.latency_ns_per_line == 0 {
            return;
        }
        let lines = (end - first).div_ceil(NVM_LINE);
        let until = std::time::Instant::now()
            + std::time::Duration::from_nanos(lines.saturating_mul(self.latency_ns_per_line));
        while std::time::Instant::now() < until {
            std::hint::spin_loop();
        }
    }

    /// Waits until everything this thread persisted is durable.
    pub fn fence(&self) -> Result<()> {
        match &self.backend {
            Backend::Volatile => Ok(()),
            Backend::PersistentMemory { flush, .. } => {
                flush.fence();
                Ok(())
            }
            Backend::Disk { sync, .. } => self.disk_fence(sync),
            Backend::Simulated(dev) => {
                dev.fence(&self.map);
                Ok(())
            }
        }
    }

    /// `persist` + `fence` of one range.
    pub fn persist_now(&self, off: u64, len: u64) -> Result<()> {
        self.persist(off, len);
        self.fence()
    }

    fn disk_fence(&self, sync: &DiskSync) -> Result<()> {
        let mut state = sync.state.lock();
        // A round that started before our persist may not cover it: wait for
        // the running one and then make sure one more round completes.
        let target = state.completed_rounds + if state.running { 2 } else { 1 };
        loop {
            if let Some(failed) = &state.failed {
                return Err(sync_failed(failed));
            }
            if state.completed_rounds >= target {
                return Ok(());
            }
            if state.running {
                sync.done.wait(&mut state);
                continue;
            }
            state.running = true;
            drop(state);
            let round = RoundGuard(sync);
            let outcome = self.sync_dirty_range(sync);
            std::mem::forget(round);
            state = sync.state.lock();
            assert!(state.running, "a sync round ended that was not running");
            state.running = false;
            state.completed_rounds += 1;
            if let Err(e) = outcome {
                sync.record_failure(&mut state, &e);
            }
            sync.done.notify_all();
        }
    }

    fn sync_dirty_range(&self, sync: &DiskSync) -> std::io::Result<()> {
        let Backend::Disk { target, .. } = &self.backend else {
            unreachable!("sync rounds run on disk backends only");
        };
        let DirtyRange { lo, hi } = sync.take_dirty();
        let hi = hi.min(self.len());
        match target {
            DiskTarget::File(_) if lo >= hi => Ok(()),
            DiskTarget::File(_) => self.map.msync(lo, hi),
            DiskTarget::Simulated(dev) => dev.sync_pages(lo, hi),
        }
    }

    /// Why the medium refuses to make anything durable any more (a failed
    /// sync), if it does; the database then refuses work until reopened.
    pub fn failure(&self) -> Option<String> {
        match &self.backend {
            Backend::Disk { sync, .. } => sync.failure(),
            _ => None,
        }
    }

    /// Reports whether `[off, off+len)` lies inside the usable length.
    pub fn contains(&self, off: u64, len: u64) -> bool {
        off.checked_add(len).is_some_and(|end| end <= self.len())
    }
}

/// Ends a sync round that unwound: it counts as failed, so that the
/// fences waiting for it return instead of waiting for a round that never
/// completes.
struct RoundGuard<'a>(&'a DiskSync);

impl Drop for RoundGuard<'_> {
    fn drop(&mut self) {
        let mut state = self.0.state.lock();
        state.running = false;
        self.0.record_failure(&mut state, &"a sync round panicked");
        self.0.done.notify_all();
    }
}

fn sync_failed(why: &str) -> Error {
    Error::Io(std::io::Error::other(format!(
        "an earlier sync failed ({why}); nothing is made durable until the database is reopened"
    )))
}

/// Stores the low `dst.len()` (at most 8) bytes of `word` in
/// little-endian order, in fixed-size pieces rather than a call to
/// `memcpy`.
#[inline]
fn store_prefix(dst: &mut [u8], word: u64) {
    let bytes = word.to_le_bytes();
    if let Ok(whole) = <&mut [u8; 8]>::try_from(&mut *dst) {
        *whole = bytes;
        return;
    }
    let mut at = 0;
    for piece in [4, 2, 1] {
        if dst.len() & piece != 0 {
            dst[at..at + piece].copy_from_slice(&bytes[at..at + piece]);
            at += piece;
        }
    }
}

/// The little-endian word whose first bytes are `src` (at most 8), zero
/// above them; in fixed-size pieces, as `store_prefix`.
fn load_prefix(src: &[u8]) -> u64 {
    if let Ok(whole) = <[u8; 8]>::try_from(src) {
        return u64::from_le_bytes(whole);
    }
    let mut bytes = [0; 8];
    let mut at = 0;
    for piece in [4, 2, 1] {
        if src.len() & piece != 0 {
            bytes[at..at + piece].copy_from_slice(&src[at..at + piece]);
            at += piece;
        }
    }
    u64::from_le_bytes(bytes)
}

/// Copies `words` into `out` (8 bytes each, as many as both hold), four
/// words a step.
#[inline]
fn copy_words(out: &mut [u8], words: &[AtomicU64]) {
    let mut chunks = out.chunks_exact_mut(32);
    let mut quads = words.chunks_exact(4);
    for (chunk, quad) in (&mut chunks).zip(&mut quads) {
        for (piece, word) in chunk.chunks_exact_mut(8).zip(quad) {
            piece.copy_from_slice(&word.load(Ordering::Relaxed).to_le_bytes());
        }
    }
    let rest = chunks.into_remainder().chunks_exact_mut(8);
    for (piece, word) in rest.zip(quads.remainder()) {
        piece.copy_from_slice(&word.load(Ordering::Relaxed).to_le_bytes());
    }
}

/// Starts loading the cache line holding `at` into all cache levels; a
/// hint with no effect on memory, so any address (even a dangling or
/// unmapped one) is harmless.
#[inline]
pub(crate) fn prefetch<T>(at: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: PREFETCHT0 never faults and neither reads nor writes memory
    // as far as the program can observe; it only moves a line into cache.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(at.cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = at;
}

#[cfg(test)]
mod tests {
    use super::Medium;

    /// Every offset within a word and every length up to a few words, at
    /// both ends of the medium: the same bytes as a copy byte by byte, and
    /// nothing written outside `out`.
    #[test]
    fn read_at_copies_exactly_the_bytes_asked_for() {
        let len = 4096u64;
        let medium = Medium::volatile(len, len).unwrap();
        let pattern: Vec<u8> = (0..len).map(|i| (i * 7 + 3) as u8).collect();
        medium.write_bytes(0, &pattern);
        for start in (0..80).chain(len - 80..len) {
            for n in 0..=(len - start).min(80) as usize {
                let mut out = vec![0xEEu8; n + 2];
                medium.read_at(start, &mut out[1..=n]);
                let want = &pattern[start as usize..start as usize + n];
                assert_eq!(&out[1..=n], want, "read_at({start}, {n})");
                assert_eq!((out[0], out[n + 1]), (0xEE, 0xEE), "read_at({start}, {n})");
            }
        }
    }

    /// Every offset within a word and every length up to a few words:
    /// the bytes there are equal, and a change of any one byte (first,
    /// inner, last) is not.
    #[test]
    fn equals_at_tells_every_differing_byte() {
        let len = 4096u64;
        let medium = Medium::volatile(len, len).unwrap();
        let pattern: Vec<u8> = (0..len).map(|i| (i * 7 + 3) as u8).collect();
        medium.write_bytes(0, &pattern);
        for start in (0..40).chain(len - 40..len) {
            for n in 0..=(len - start).min(40) as usize {
                let mut bytes = pattern[start as usize..start as usize + n].to_vec();
                assert!(medium.equals_at(start, &bytes), "equals_at({start}, {n})");
                for at in [0, n / 2, n.saturating_sub(1)]
                    .into_iter()
                    .filter(|&at| at < n)
                {
                    bytes[at] ^= 0x40;
                    assert!(
                        !medium.equals_at(start, &bytes),
                        "byte {at} of {n} at {start}"
                    );
                    bytes[at] ^= 0x40;
                }
            }
        }
    }
}
