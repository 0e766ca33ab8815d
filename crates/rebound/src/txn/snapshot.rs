//! Read-only transactions on a snapshot: no read marks, no gap marks, no
//! validation, so they never make a writer conflict and never conflict
//! themselves.
//!
//! A snapshot reads at a timestamp `at`: the newest version of a key whose
//! committed `begin` is below `at`. That is consistent only if every
//! transaction that may still commit below `at` has already made all of
//! its versions visible, which each scheme ensures its own way:
//!
//! * **MVTO** serializes by the timestamp taken at begin, and a running
//!   writer may still write (below `at`) a key the snapshot has read. So
//!   `at` is the low water of the running writers: every transaction below
//!   it has ended. That already includes every commit acknowledged before
//!   the snapshot began unless a transaction that wrote committed above a
//!   writer still running; then the snapshot waits (up to
//!   [`FRESH_PATIENCE`]) until the writers older than that commit have
//!   ended. One still running by then is not waited for longer, and the
//!   snapshot starts below it, at a consistent prefix of the serial order
//!   that may lack commits acknowledged just before (counted in
//!   `stale_snapshots`).
//! * **OCC** serializes by the commit id taken after the write set is
//!   locked, so `at` is a fresh timestamp: a transaction that has not
//!   locked a key yet commits above it. A version locked or pending under
//!   an id below `at` belongs to a commit that may land below it; the
//!   snapshot waits for that commit to finish (it is in its install phase,
//!   which never waits for user code) and reads again.
//!
//! GC must keep what a snapshot may reach: snapshots announce `at` (after
//! a bound below it while `at` is being chosen) in their own slots, which
//! `low_water` and `oldest_reader` count, and which the checkpoint redo
//! horizons, long-transaction flags and GC's wait for older writers do
//! not: a snapshot writes nothing, so it holds back neither checkpoints
//! nor relocation, only the release of retired blocks and the reaping of
//! tombstones newer than it. `Store::snapshot_lag` reports how far back.
//!
//! That hold is bounded by `Options::max_snapshot_lag`: a snapshot more
//! timestamps behind the clock than that is expired
//! (`Store::expire_snapshots_behind`, at the start of each maintenance
//! round), and its next read is `Error::SnapshotTooOld`. Every read of a
//! snapshot runs inside a `SnapshotOp`, which counts itself in the
//! worker's `snapshot_ops` and then checks that its slot still holds its
//! timestamp; expiry clears the slot and then waits until the count is
//! zero. Both sides store before they load (SeqCst), so either the read
//! sees the cleared slot and fails, or expiry sees the read and waits for
//! it: GC never frees what a read in progress reaches, and addresses a
//! read kept (a cursor's batch) are only used inside a later read, which
//! fails first.

use super::{Store, TableRt, TxnState, Visible};
use crate::error::{Error, Result};
use crate::heap::tile::{VersionHeader, ABORTED, LOCKED, PENDING, REAPED};
use crate::heap::Addr;
use crate::txn::Concurrency;
use std::sync::atomic::Ordering::{Acquire, Relaxed, SeqCst};
use std::sync::atomic::{AtomicU32, AtomicU64};
use std::time::{Duration, Instant};

/// An open snapshot's worker and how it opened (`TxnState::anchor`).
#[derive(Debug, Clone, Copy)]
pub struct Anchor {
    worker: usize,
    opened: Opened,
}

/// How a snapshot opened.
#[derive(Debug, Clone, Copy, Default)]
pub struct Opened {
    /// Where it reads.
    pub at: u64,
    /// Below a writer it would not wait for longer (MVTO): it may miss
    /// commits acknowledged before it began.
    pub stale: bool,
    /// The clock when it began, at or above `at`: a table dropped at a
    /// later timestamp was dropped after it began, and it still reads it.
    pub began: u64,
}

/// How long an MVTO snapshot waits for older writers before it starts
/// below them.
pub const FRESH_PATIENCE: Duration = Duration::from_millis(50);

/// How long a snapshot waits for one commit it must see to finish
/// installing: far beyond any install, so reaching it means a stalled
/// committer, reported as a conflict rather than waited for forever.
const INSTALL_PATIENCE: Duration = Duration::from_secs(2);

/// Announcement that holds GC back completely while a snapshot picks its
/// timestamp (a snapshot's timestamp is never below it).
const CHOOSING: u64 = 1;

impl Store {
    /// The oldest timestamp a running transaction or snapshot may read
    /// at, `None` when neither runs: what may still reach a version.
    pub fn oldest_reader(&self) -> Option<u64> {
        let snapshots = self.snapshots.iter().map(|s| s.load(SeqCst));
        self.oldest_running()
            .into_iter()
            .chain(snapshots.filter(|&at| at != 0))
            .min()
    }

    /// The oldest open snapshot's timestamp, `None` when none is open.
    pub(super) fn oldest_snapshot(&self) -> Option<u64> {
        self.snapshots
            .iter()
            .map(|s| s.load(SeqCst))
            .filter(|&at| at != 0)
            .min()
    }

    /// (open snapshots, how many timestamps the oldest is behind the
    /// clock, snapshots that started below a writer they would not wait
    /// for): what snapshots hold back.
    pub fn snapshot_lag(&self) -> (usize, u64, u64) {
        let open = self.snapshots.iter().filter(|s| s.load(Relaxed) != 0);
        let behind = self
            .oldest_snapshot()
            .map_or(0, |at| self.clock.peek().saturating_sub(at));
        (open.count(), behind, self.stale_snapshots.load(Relaxed))
    }

    /// The newest timestamp of a committed transaction that wrote.
    fn newest_write(&self) -> u64 {
        self.last_writes
            .iter()
            .map(|w| w.load(SeqCst))
            .max()
            .unwrap_or(0)
    }

    /// Enters a read of `worker`'s snapshot at `at`: `SnapshotTooOld` if
    /// it was expired.
    pub(super) fn enter_snapshot_op(&self, worker: usize, at: u64) -> Result<SnapshotOp<'_>> {
        let ops = &self.snapshot_ops[worker];
        ops.fetch_add(1, SeqCst);
        let op = SnapshotOp { ops };
        match self.snapshots[worker].load(SeqCst) == at {
            true => Ok(op),
            false => Err(Error::SnapshotTooOld),
        }
    }

    /// Expires every snapshot more than `max_lag` timestamps behind the
    /// clock, once no read of it is in progress; returns how many.
    pub fn expire_snapshots_behind(&self, max_lag: u64) -> usize {
        let now = self.clock.peek();
        let mut expired = 0;
        for (worker, slot) in self.snapshots.iter().enumerate() {
            let at = slot.load(SeqCst);
            if at <= CHOOSING || now.saturating_sub(at) <= max_lag {
                continue;
            }
            if slot.compare_exchange(at, 0, SeqCst, SeqCst).is_err() {
                continue;
            }
            // Reads are short (a key, a cursor's batch): this wait ends.
            while self.snapshot_ops[worker].load(SeqCst) != 0 {
                std::thread::yield_now();
            }
            expired += 1;
        }
        self.expired_snapshots.fetch_add(expired as u64, Relaxed);
        expired
    }

    /// Snapshots expired so far for holding GC back too far.
    pub fn expired_snapshots(&self) -> u64 {
        self.expired_snapshots.load(Relaxed)
    }

    /// Announces that `worker`'s snapshot ended.
    pub(super) fn close_snapshot(&self, worker: usize) {
        self.snapshots[worker].store(0, SeqCst);
    }

    /// Chooses `worker`'s snapshot timestamp and announces it; with it,
    /// whether the snapshot starts stale (below a writer it would not wait
    /// for longer, so it may miss commits acknowledged before it began).
    fn open_snapshot(&self, worker: usize) -> Result<Opened> {
        let slot = &self.snapshots[worker];
        slot.store(CHOOSING, SeqCst);
        let began = self.clock.peek();
        let at = match self.concurrency {
            Concurrency::Occ => self.clock.next(&self.medium).map(|at| (at, false)),
            Concurrency::Mvto => Ok(self.mvto_snapshot_timestamp()),
        };
        match at {
            Ok((at, _)) => {
                assert!(
                    (CHOOSING..=self.clock.peek()).contains(&at),
                    "a snapshot reads at an issued timestamp at or above its bound: {at}"
                );
                slot.store(at, SeqCst)
            }
            Err(_) => slot.store(0, SeqCst),
        }
        at.map(|(at, stale)| Opened {
            at,
            stale,
            began: began.max(at),
        })
    }

    /// The low water of the running writers once it is above every
    /// transaction that committed a write before the call: at once if
    /// none committed above the oldest one running, else once those
    /// older ones have ended, or at [`FRESH_PATIENCE`].
    ///
    /// Below the returned timestamp every transaction has ended: the low
    /// water counts each writer from before it takes its timestamp. GC
    /// cannot have freed anything visible there: until the caller
    /// announces it, its `CHOOSING` announcement holds GC below it, and GC
    /// acted before that only on a lower low water (it never falls).
    /// A commit acknowledged before the call stored its timestamp in
    /// `last_writes` before it was acknowledged, so the check sees it.
    fn mvto_snapshot_timestamp(&self) -> (u64, bool) {
        let wanted = self.clock.peek();
        let deadline = Instant::now() + FRESH_PATIENCE;
        loop {
            let low = self.low_water_of_writers();
            if low >= wanted || low > self.newest_write() {
                return (low, false);
            }
            if Instant::now() >= deadline {
                self.stale_snapshots.fetch_add(1, Relaxed);
                return (low, true);
            }
            std::thread::yield_now();
        }
    }
}

/// A read of a snapshot in progress: expiry waits until it is dropped.
pub(super) struct SnapshotOp<'s> {
    ops: &'s AtomicU32,
}

impl Drop for SnapshotOp<'_> {
    fn drop(&mut self) {
        self.ops.fetch_sub(1, SeqCst);
    }
}

impl<'s> TxnState<'s> {
    /// Enters one read (see `SnapshotOp`); nothing for a transaction that
    /// is not a snapshot.
    pub(super) fn snapshot_op(&self) -> Result<Option<SnapshotOp<'s>>> {
        match self.snapshot {
            true => {
                let store: &'s Store = self.store;
                store.enter_snapshot_op(self.worker, self.ts).map(Some)
            }
            false => Ok(None),
        }
    }

    /// A read-only transaction on a snapshot (see the module's docs).
    pub fn begin_snapshot(store: &'s Store, worker: usize) -> Self {
        let opened = store.open_snapshot(worker);
        TxnState::snapshot_at(store, worker, opened)
    }

    /// Where this snapshot reads: another thread may open one beside it.
    pub fn anchor(&self) -> Anchor {
        Anchor {
            worker: self.worker,
            opened: self.snapshot_opened,
        }
    }

    /// A second snapshot at `anchor`'s timestamp, for another thread: the
    /// same state. The anchoring snapshot, still open (checked), keeps GC
    /// below that timestamp until this one is announced too.
    pub fn begin_snapshot_beside(store: &'s Store, worker: usize, anchor: Anchor) -> Self {
        let open = store.snapshots[anchor.worker].load(SeqCst);
        let at = anchor.opened.at;
        let opened = match open == at && at != 0 {
            true => {
                store.snapshots[worker].store(at, SeqCst);
                Ok(anchor.opened)
            }
            false => Err(Error::TransactionPoisoned),
        };
        TxnState::snapshot_at(store, worker, opened)
    }

    fn snapshot_at(store: &'s Store, worker: usize, opened: Result<Opened>) -> Self {
        let (opened, poisoned) = match opened {
            Ok(opened) => (opened, None),
            Err(e) => (Opened::default(), Some(e)),
        };
        let (buf, spares) = {
            let mut set = store.write_sets[worker].lock();
            let spares = std::mem::take(&mut set.spares);
            (std::mem::take(&mut set.spare_buf), spares)
        };
        let mut txn = TxnState::idle(store, worker, opened.at, (buf, spares));
        txn.poisoned = poisoned;
        txn.snapshot = true;
        txn.snapshot_opened = opened;
        txn
    }

    pub fn is_snapshot(&self) -> bool {
        self.snapshot
    }

    /// A snapshot that started below a writer it would not wait for
    /// longer than `FRESH_PATIENCE` (MVTO only).
    pub fn is_stale_snapshot(&self) -> bool {
        self.snapshot_opened.stale
    }

    /// Reads `key` as of the snapshot.
    pub(super) fn snapshot_read_key(
        &self,
        table: &TableRt,
        key: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<bool> {
        let medium = &self.store.medium;
        loop {
            let Some(head) = table.lookup(medium, key)? else {
                return Ok(false);
            };
            let found = table.heap.find_version(medium, Addr(head));
            match self.snapshot_visible(table, Addr(head), found.map(|f| f.header))? {
                Visible::Retry => continue,
                Visible::Absent => return Ok(false),
                Visible::Version(addr) => return self.read_chosen(table, found, addr, out),
            }
        }
    }

    /// The version of the chain from `head` that the snapshot sees;
    /// `head_header` is the head's header if the caller found it already.
    pub(super) fn snapshot_visible(
        &self,
        table: &TableRt,
        head: Addr,
        head_header: Option<&VersionHeader>,
    ) -> Result<Visible> {
        let at = self.ts;
        let mut addr = head;
        loop {
            let header = match head_header.filter(|_| addr == head) {
                Some(header) => header,
                None => self.version(table, addr)?,
            };
            let begin = header.begin.load(Acquire);
            if begin != ABORTED && begin & PENDING != 0 {
                if begin & !PENDING < at {
                    self.wait_for_install(&header.begin, begin)?;
                    continue;
                }
            } else if begin != ABORTED && begin < at {
                self.newest_read.set(self.newest_read.get().max(begin));
                let end = header.end.load(Acquire);
                if end == REAPED {
                    // Reaped below every reader: the key is gone for us too.
                    return Ok(Visible::Absent);
                }
                if end == 0 || end & !LOCKED >= at {
                    return Ok(Visible::Version(addr));
                }
                // A successor below us: committed since the head was
                // found (read it), or being installed by an optimistic
                // commit that may land below us (read what it leaves).
                if end & LOCKED != 0 {
                    self.wait_for_install(&header.end, end)?;
                }
                return Ok(Visible::Retry);
            }
            match header.prev.load(Acquire) {
                0 => return Ok(Visible::Absent),
                prev => addr = Addr(prev - 1),
            }
        }
    }

    /// Waits until `word` changes from `seen`: a commit finishing.
    fn wait_for_install(&self, word: &AtomicU64, seen: u64) -> Result<()> {
        let deadline = Instant::now() + INSTALL_PATIENCE;
        let mut spins = 0u32;
        while word.load(Acquire) == seen {
            if spins < 256 {
                std::hint::spin_loop();
                spins += 1;
            } else if Instant::now() < deadline {
                std::thread::yield_now();
            } else {
                return Err(Error::Conflict);
            }
        }
        Ok(())
    }
}
