//! The versions committed since the last checkpoint, for delta checkpoints
//! (HiEngine's ChainIndex): a delta resolves just these keys instead of
//! reading the index, so its cost follows the changes, not the table.
//!
//! Each worker appends its committed write set to its own list (one
//! uncontended lock per commit); a checkpoint takes all lists at once. A
//! list that would outgrow `MAX_PER_WORKER` stops recording and marks the
//! log overflowed: the next checkpoint then reads the whole index instead.
//! A commit records and then publishes inside a `PublishWindow`; every
//! checkpoint waits for the windows open at its take, so a walk never skips
//! a version whose record it took.

use crate::heap::Addr;
use crossbeam_utils::CachePadded;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed, Ordering::SeqCst};

/// Entries a worker records before the log gives up (16 B each).
const MAX_PER_WORKER: usize = 1 << 22;

/// Committed versions of one worker as (table id, address).
type WorkerChanges = parking_lot::Mutex<Vec<(u32, Addr)>>;

/// Committed versions, per worker.
pub struct ChangeLog {
    recording: AtomicBool,
    overflowed: AtomicBool,
    /// Each on its own cache line: workers append on every commit.
    workers: Box<[CachePadded<WorkerChanges>]>,
    /// Per worker, odd while a commit is between recording its versions
    /// and publishing them (see `wait_for_publishing`).
    publishing: Box<[CachePadded<AtomicU64>]>,
}

/// A commit between recording its versions and publishing them; see
/// [`ChangeLog::wait_for_publishing`].
pub struct PublishWindow<'a>(Option<&'a AtomicU64>);

impl Drop for PublishWindow<'_> {
    fn drop(&mut self) {
        if let Some(counter) = self.0 {
            counter.fetch_add(1, SeqCst);
        }
    }
}

/// What a checkpoint took from the log.
pub enum Changes {
    /// Every version committed since the previous take, by table id.
    Complete(Vec<Vec<Addr>>),
    /// Some were not recorded: only a full read of the index is complete.
    Incomplete,
}

impl ChangeLog {
    pub fn new(workers: usize) -> ChangeLog {
        ChangeLog {
            recording: AtomicBool::new(false),
            overflowed: AtomicBool::new(false),
            workers: (0..workers)
                .map(|_| CachePadded::new(parking_lot::Mutex::new(Vec::new())))
                .collect(),
            publishing: (0..workers)
                .map(|_| CachePadded::new(AtomicU64::new(0)))
                .collect(),
        }
    }

    /// Starts or stops recording (delta checkpoints on or off).
    pub fn record(&self, on: bool) {
        self.recording.store(on, Relaxed);
    }

    /// Records versions that are already published (the redone ones, at
    /// open); a commit records through `add_publishing`.
    pub fn add(&self, worker: usize, versions: impl ExactSizeIterator<Item = (u32, Addr)>) {
        if !self.recording.load(Relaxed) {
            return;
        }
        let Some(list) = self.workers.get(worker) else {
            return;
        };
        let mut list = list.lock();
        if list.len() + versions.len() > MAX_PER_WORKER {
            self.overflowed.store(true, Relaxed);
            return;
        }
        list.extend(versions);
    }

    /// Records a committing write set whose versions are about to be
    /// published; the returned window closes (dropped) once they are,
    /// also if publishing panics, so no checkpoint waits for it forever.
    pub fn add_publishing(
        &self,
        worker: usize,
        versions: impl ExactSizeIterator<Item = (u32, Addr)>,
    ) -> PublishWindow<'_> {
        let counter = self.publishing.get(worker).map(|c| &**c);
        if let Some(counter) = counter {
            counter.fetch_add(1, SeqCst);
        }
        self.add(worker, versions);
        PublishWindow(counter)
    }

    /// Returns once every commit that recorded its versions before the
    /// call has published them. A checkpoint that walks the index skips
    /// versions not yet committed; without this wait, a commit recorded
    /// before the checkpoint's `take` but published after its walk would
    /// be in neither that image nor the next delta.
    pub fn wait_for_publishing(&self) {
        let backoff = crossbeam_utils::Backoff::new();
        for counter in self.publishing.iter() {
            let seen = counter.load(SeqCst);
            if seen % 2 == 0 {
                continue;
            }
            while counter.load(SeqCst) == seen {
                backoff.snooze();
            }
        }
    }

    /// Makes the next `take` incomplete: what was taken was not written.
    pub fn lose(&self) {
        self.overflowed.store(true, Relaxed);
    }

    /// Takes everything recorded so far, grouped by table id, in the order
    /// each worker recorded it.
    pub fn take(&self, tables: usize) -> Changes {
        let mut by_table = vec![Vec::new(); tables];
        for list in self.workers.iter() {
            let taken = std::mem::take(&mut *list.lock());
            for (table, addr) in taken {
                if let Some(addrs) = by_table.get_mut(table as usize) {
                    addrs.push(addr);
                }
            }
        }
        // Read after the lists: a write set refused before they were
        // taken set the flag before that.
        match self.overflowed.swap(false, Relaxed) {
            true => Changes::Incomplete,
            false => Changes::Complete(by_table),
        }
    }
}
