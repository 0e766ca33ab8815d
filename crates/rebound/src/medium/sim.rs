//! A simulated persistence medium for crash testing.
//!
//! It keeps the *working* image (what the program sees) apart from the
//! *durable* image (what would survive a crash). `persist` remembers lines;
//! `fence` copies the remembered lines into the durable image. A crash builds
//! a new device from the durable image plus, for every line whose working
//! content differs, a seeded choice: lose the line, keep it, or tear it at
//! 8-byte granularity. That is exactly the freedom real hardware has with
//! unfenced stores, so a seed reproduces one possible crash outcome.
//!
//! A device made with [`SimDevice::disk`] is a disk instead: the medium
//! runs its real group commit over it, each sync round copies the dirty
//! 4 KiB pages into the durable image, and a power cut gives every page
//! that differs a seeded fate: lost, kept, or torn at 512-byte sectors
//! (a disk writes sectors whole). The page cache may write a dirty page
//! back at any time, so a page never synced may survive too. Its "fences"
//! are the sync rounds, and [`SimDevice::fail_next_sync`] makes one fail.
//!
//! A crash can be requested now ([`SimDevice::crash`]) or armed to happen at
//! the n-th fence ([`SimDevice::arm_crash_at_fence`]); in the latter case the
//! image is captured just before that fence takes effect and the program
//! keeps running, so a test can drive a workload to completion and then
//! recover from the captured image.

use super::mapping::Mapping;
use parking_lot::Mutex;
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// A simulated device; clones share the same device.
#[derive(Clone)]
pub struct SimDevice {
    inner: Arc<SimInner>,
}

struct SimInner {
    model: Model,
    /// Set by `fail_next_sync`; taken by the next sync round.
    fail_sync: std::sync::atomic::AtomicBool,
    working: Arc<Mapping>,
    durable: Mutex<Vec<u8>>,
    pending: Mutex<BTreeSet<u64>>,
    fences: AtomicU64,
    armed: Mutex<Option<Armed>>,
    captured: Mutex<Option<Vec<u8>>>,
}

/// What kind of device is simulated, and so how a crash treats what
/// was never made durable.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Model {
    /// Persistent memory: 64-byte lines, torn at 8-byte words.
    Memory,
    /// A disk: 4 KiB pages, torn at 512-byte sectors.
    Disk,
}

/// A disk's write-back unit and its atomic unit.
const PAGE: u64 = 4096;
const SECTOR: u64 = 512;

#[derive(Clone, Copy)]
struct Armed {
    at_fence: u64,
    seed: u64,
}

/// What happened to one line at a simulated crash.
#[derive(Clone, Copy)]
enum LineFate {
    Lost,
    Kept,
    Torn,
}

impl SimDevice {
    /// An empty device that can grow to `capacity` bytes.
    pub fn new(capacity: u64) -> Self {
        Self::from_image(Vec::new(), capacity, Model::Memory)
    }

    /// An empty simulated disk that can grow to `capacity` bytes: the
    /// database persists to it with the group commit of a file on disk.
    pub fn disk(capacity: u64) -> Self {
        Self::from_image(Vec::new(), capacity, Model::Disk)
    }

    /// Whether this device simulates a disk (see [`SimDevice::disk`]).
    pub fn is_disk(&self) -> bool {
        self.inner.model == Model::Disk
    }

    /// Makes the next sync round of a simulated disk fail with an I/O
    /// error, writing nothing (as a failing disk may).
    pub fn fail_next_sync(&self) {
        self.inner.fail_sync.store(true, Ordering::Release);
    }

    fn from_image(image: Vec<u8>, capacity: u64, model: Model) -> Self {
        let capacity = capacity.max(image.len() as u64);
        let working = Mapping::anonymous(capacity, image.len() as u64)
            .expect("anonymous mapping for a simulated device");
        let mut at = 0u64;
        for chunk in image.chunks_exact(8) {
            working.word(at).store(
                u64::from_le_bytes(chunk.try_into().unwrap()),
                Ordering::Relaxed,
            );
            at += 8;
        }
        SimDevice {
            inner: Arc::new(SimInner {
                model,
                fail_sync: std::sync::atomic::AtomicBool::new(false),
                working: Arc::new(working),
                durable: Mutex::new(image),
                pending: Mutex::new(BTreeSet::new()),
                fences: AtomicU64::new(0),
                armed: Mutex::new(None),
                captured: Mutex::new(None),
            }),
        }
    }

    pub(crate) fn working_mapping(&self) -> Arc<Mapping> {
        self.inner.working.clone()
    }

    /// Number of fences issued on this device so far.
    pub fn fences(&self) -> u64 {
        self.inner.fences.load(Ordering::Acquire)
    }

    /// Captures a crash image just before fence number `at_fence` (counted
    /// from the device's creation, starting at 1) takes effect.
    pub fn arm_crash_at_fence(&self, at_fence: u64, seed: u64) {
        *self.inner.armed.lock() = Some(Armed { at_fence, seed });
        *self.inner.captured.lock() = None;
    }

    /// The device as it would be found after the armed crash, once it fired.
    pub fn take_crash(&self) -> Option<SimDevice> {
        let image = self.inner.captured.lock().take()?;
        Some(self.like(image))
    }

    /// The device as it would be found after a crash right now.
    pub fn crash(&self, seed: u64) -> SimDevice {
        let image = self.crash_image(seed);
        self.like(image)
    }

    /// A device of this one's model and capacity holding `image`.
    fn like(&self, image: Vec<u8>) -> SimDevice {
        Self::from_image(image, self.inner.working.reserved(), self.inner.model)
    }

    /// The device after a clean power-off: everything written survives.
    pub fn clean_copy(&self) -> SimDevice {
        self.like(self.image())
    }

    /// The bytes the program sees, as a data file would hold them: the
    /// image of a device from [`crash`](Self::crash), written to a file,
    /// opens as the database found after that crash.
    pub fn image(&self) -> Vec<u8> {
        let len = self.inner.working.len();
        (0..len / 8)
            .flat_map(|w| {
                self.inner
                    .working
                    .word(w * 8)
                    .load(Ordering::Acquire)
                    .to_le_bytes()
            })
            .collect()
    }

    /// Length of the medium in bytes.
    pub fn len(&self) -> u64 {
        self.inner.working.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Flips bits in both images, for corruption tests.
    pub fn corrupt(&self, offset: u64, xor_mask: u64) {
        let word = self.inner.working.word(offset & !7);
        let new = word.load(Ordering::Acquire) ^ xor_mask;
        word.store(new, Ordering::Release);
        let mut durable = self.inner.durable.lock();
        let at = (offset & !7) as usize;
        durable[at..at + 8].copy_from_slice(&new.to_le_bytes());
    }

    pub(crate) fn grow(&self, new_len: u64) {
        self.inner.durable.lock().resize(new_len as usize, 0);
    }

    pub(crate) fn note_persist(&self, first_line: u64, end: u64) {
        let mut pending = self.inner.pending.lock();
        let mut line = first_line;
        while line < end {
            pending.insert(line);
            line += super::LINE;
        }
    }

    pub(crate) fn fence(&self, working: &Mapping) {
        debug_assert!(!self.is_disk(), "a disk is made durable by sync rounds");
        self.count_fence();
        // The image is locked before the lines are taken: a fence must not
        // return while lines noted before it are still on their way, also
        // when a concurrent fence took them first (that one copies them
        // before it lets go of the image). Taking first let a fence return
        // early, and a crash then kept a later write (a checkpoint root)
        // without the earlier one it depends on (the image it points to),
        // which no real medium does after `sfence`.
        let mut durable = self.inner.durable.lock();
        let lines = std::mem::take(&mut *self.inner.pending.lock());
        for line in lines {
            copy_line(working, &mut durable, line);
        }
    }

    /// Counts a fence (a sync round on a disk) and captures the armed
    /// crash image if this is its fence, before the fence takes effect.
    fn count_fence(&self) {
        let number = self.inner.fences.fetch_add(1, Ordering::AcqRel) + 1;
        let armed = *self.inner.armed.lock();
        if let Some(armed) = armed.filter(|a| a.at_fence == number) {
            let image = self.crash_image(armed.seed);
            *self.inner.captured.lock() = Some(image);
        }
    }

    /// A sync round of a simulated disk: copies the pages of `[lo, hi)`
    /// into the durable image (nothing when the range is empty).
    pub(crate) fn sync_pages(&self, lo: u64, hi: u64) -> std::io::Result<()> {
        assert!(self.is_disk(), "only a disk has sync rounds");
        self.count_fence();
        if self.inner.fail_sync.swap(false, Ordering::AcqRel) {
            return Err(std::io::Error::other("simulated sync failure"));
        }
        if lo >= hi {
            return Ok(());
        }
        let working = &self.inner.working;
        let mut durable = self.inner.durable.lock();
        let end = hi.min(durable.len() as u64).min(working.len());
        let mut page = lo / PAGE * PAGE;
        while page < end {
            let page_end = (page + PAGE).min(end);
            copy_words(working, &mut durable, page, page_end, |_| true);
            page = page_end;
        }
        Ok(())
    }

    /// The durable image's word at `off` (what a power cut now keeps for
    /// sure, whatever its seed).
    #[cfg(test)]
    fn durable_word(&self, off: u64) -> u64 {
        let durable = self.inner.durable.lock();
        let at = off as usize;
        u64::from_le_bytes(durable[at..at + 8].try_into().expect("a word"))
    }

    fn crash_image(&self, seed: u64) -> Vec<u8> {
        let working = &self.inner.working;
        // Held to the end, so that no fence completes meanwhile: a line
        // taken from the working image below was written after every fence
        // its writer had completed, and all of those are in this image.
        // (Released early, a line written after a later fence could join
        // an image that lacks what that fence made durable.)
        let durable = self.inner.durable.lock();
        // Growth resizes the durable image before the working one: a
        // crash in between has only what both hold.
        let mut image = durable.clone();
        image.truncate(working.len() as usize);
        let mut rng = SplitMix64(seed);
        let (unit, atom) = match self.inner.model {
            Model::Memory => (super::LINE, 8),
            Model::Disk => (PAGE, SECTOR),
        };
        let len = image.len() as u64;
        let mut line = 0;
        while line < len {
            let end = (line + unit).min(len);
            if line_differs(working, &image, line, end) {
                match rng.fate() {
                    LineFate::Lost => {}
                    LineFate::Kept => copy_words(working, &mut image, line, end, |_| true),
                    // Persistent memory draws per word (as it always did,
                    // so that listed seeds replay); a disk per sector.
                    LineFate::Torn if atom == 8 => {
                        copy_words(working, &mut image, line, end, |_| rng.next() & 1 == 1)
                    }
                    LineFate::Torn => {
                        let sectors = rng.next();
                        copy_words(working, &mut image, line, end, |at| {
                            sectors >> ((at - line) / atom) & 1 == 1
                        })
                    }
                }
            }
            line = end;
        }
        drop(durable);
        image
    }
}

fn line_differs(working: &Mapping, image: &[u8], line: u64, end: u64) -> bool {
    (line..end).step_by(8).any(|at| {
        let now = working.word(at).load(Ordering::Acquire);
        now.to_le_bytes() != image[at as usize..at as usize + 8]
    })
}

fn copy_words(
    working: &Mapping,
    image: &mut [u8],
    line: u64,
    end: u64,
    mut take: impl FnMut(u64) -> bool,
) {
    for at in (line..end).step_by(8) {
        if take(at) {
            let now = working.word(at).load(Ordering::Acquire);
            image[at as usize..at as usize + 8].copy_from_slice(&now.to_le_bytes());
        }
    }
}

fn copy_line(working: &Mapping, durable: &mut [u8], line: u64) {
    let end = (line + super::LINE)
        .min(durable.len() as u64)
        .min(working.len());
    copy_words(working, durable, line, end, |_| true);
}

/// Small deterministic generator so a seed fully determines a crash.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn fate(&mut self) -> LineFate {
        match self.next() % 3 {
            0 => LineFate::Lost,
            1 => LineFate::Kept,
            _ => LineFate::Torn,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::SimDevice;
    use crate::medium::Medium;
    use std::sync::atomic::{AtomicBool, Ordering};

    /// Merged ranges must still cover every line of every range: ascending
    /// ranges that share or adjoin lines, a gap, and one that goes back.
    #[test]
    fn persist_all_writes_back_every_line_of_every_range_once_merged() {
        let device = SimDevice::new(1 << 16);
        let medium = Medium::simulated(device.clone());
        medium.grow(1 << 16).unwrap();
        let ranges = [(8, 100), (112, 56), (192, 8), (4096, 200), (1024, 24)];
        for &(off, len) in &ranges {
            for word in (off..off + len).step_by(8) {
                medium.store(word, word + 1);
            }
        }
        medium.persist_all(ranges);
        medium.fence().unwrap();
        for seed in 1..=32 {
            let crashed = Medium::simulated(device.crash(seed));
            for &(off, len) in &ranges {
                for word in (off..off + len).step_by(8) {
                    assert_eq!(crashed.load(word), word + 1, "seed {seed}: word {word}");
                }
            }
        }
    }

    /// Each writer fences a data word, then writes and fences a flag with
    /// the same round number: no crash may keep a flag without its data,
    /// however the writers' fences interleave (each takes the lines the
    /// others noted too).
    #[test]
    fn a_fence_returns_only_once_the_lines_noted_before_it_are_durable() {
        const WRITERS: u64 = 3;
        let device = SimDevice::new(1 << 20);
        let medium = Medium::simulated(device.clone());
        medium.grow(WRITERS * 4096).unwrap();
        let stop = AtomicBool::new(false);
        std::thread::scope(|scope| {
            for w in 0..WRITERS {
                let (medium, stop) = (&medium, &stop);
                scope.spawn(move || {
                    let (data, flag) = (w * 4096, w * 4096 + 2048);
                    let mut round = 0;
                    while !stop.load(Ordering::Acquire) {
                        round += 1;
                        medium.store(data, round);
                        medium.persist(data, 8);
                        medium.fence().unwrap();
                        medium.store(flag, round);
                        medium.persist(flag, 8);
                        medium.fence().unwrap();
                    }
                });
            }
            // Stops the writers however the checks end.
            struct Stop<'a>(&'a AtomicBool);
            impl Drop for Stop<'_> {
                fn drop(&mut self) {
                    self.0.store(true, Ordering::Release);
                }
            }
            let _stop = Stop(&stop);
            for seed in 1..=3_000 {
                let crashed = Medium::simulated(device.crash(seed));
                for w in 0..WRITERS {
                    let (data, flag) = (crashed.load(w * 4096), crashed.load(w * 4096 + 2048));
                    assert!(
                        data >= flag,
                        "seed {seed}: writer {w}'s flag {flag} survived without its data ({data})"
                    );
                }
            }
        });
    }

    /// Group commit on a disk: once `fence()` returns, what the thread
    /// persisted before it is in the durable image, however the threads'
    /// persists and sync rounds interleave. More threads than cores, so
    /// that a thread is preempted between noting its range and fencing.
    #[test]
    fn a_disk_fence_returns_only_once_a_sync_round_wrote_the_range() {
        const THREADS: u64 = 8;
        const ROUNDS: u64 = 1_000_000;
        let device = SimDevice::disk(1 << 20);
        let medium = Medium::simulated(device.clone());
        medium.grow(THREADS * 4096 * 2).unwrap();
        std::thread::scope(|scope| {
            for t in 0..THREADS {
                let (medium, device) = (&medium, &device);
                scope.spawn(move || {
                    // Every other page, so that no sync of a neighbour's
                    // page covers this one by accident.
                    let at = t * 2 * 4096 + 8 * t;
                    for round in 1..=ROUNDS {
                        medium.store(at, round);
                        medium.persist(at, 8);
                        medium.fence().unwrap();
                        let durable = device.durable_word(at);
                        assert!(
                            durable >= round,
                            "thread {t}: fence returned with round {round} not synced (durable: {durable})"
                        );
                    }
                });
            }
        });
    }

    /// A failed sync is final: the fence that waited for it fails, and so
    /// does every later one, even when the later rounds would succeed.
    #[test]
    fn a_failed_disk_sync_fails_every_later_fence() {
        let device = SimDevice::disk(1 << 20);
        let medium = Medium::simulated(device.clone());
        medium.grow(8192).unwrap();
        medium.store(0, 1);
        medium.persist_now(0, 8).unwrap();
        device.fail_next_sync();
        medium.store(0, 2);
        assert!(medium.persist_now(0, 8).is_err(), "the failed round");
        assert_eq!(device.durable_word(0), 1, "the failed round wrote nothing");
        medium.store(4096, 3);
        let later = medium.persist_now(4096, 8);
        assert!(
            later.is_err(),
            "a fence after a failed sync returned {later:?}"
        );
        assert!(medium.failure().is_some());
    }
}
