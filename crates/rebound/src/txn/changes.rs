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
//!
//! With [`Capture::HeadTrees`] (HiEngine's MirrorIndex) a commit records
//! into one B+-tree per table instead, its *head tree*: key → address of
//! the newest committed version (`TOMBSTONE` for a deletion). The table's
//! live index plays the Mirror tree, which serves every read. A take
//! swaps in empty head trees and hands over the frozen ones, whose entries
//! are a delta in key order already. Commits of one key are ordered (a
//! writer meeting an unpublished version of its key conflicts, and
//! commits record before they publish), so the last record of a key is
//! its newest version. Each worker reaches the trees through its own
//! handle, locked while it records (one uncontended lock per commit, as
//! for the lists); a take replaces every handle under its lock, so a
//! frozen tree gets no record after the take. Past `MAX_HEAD_KEYS` keys
//! the trees stop growing and the log counts as overflowed, as the lists
//! do.

use crate::heap::{Addr, TOMBSTONE};
use crate::index::BTree;
use crossbeam_utils::CachePadded;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering::Relaxed, Ordering::SeqCst};
use std::sync::{Arc, OnceLock};

/// Entries a worker records before the log gives up (16 B each).
const MAX_PER_WORKER: usize = 1 << 22;
/// Keys the head trees hold together before the log gives up.
const MAX_HEAD_KEYS: u64 = 1 << 22;

/// Committed versions of one worker as (table id, address).
type WorkerChanges = parking_lot::Mutex<Vec<(u32, Addr)>>;

/// How commits record their versions for the next delta.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Capture {
    /// Not at all (no delta checkpoints).
    Off,
    /// Addresses appended to per-worker lists (ChainIndex).
    Log,
    /// Keys upserted into per-table head trees (MirrorIndex).
    HeadTrees,
}

/// A version a commit records: its table, address and key, and whether it
/// deletes the key (key and flag matter only to head trees; the log's
/// callers may leave them empty and false).
pub struct Committed<'k> {
    pub table: u32,
    pub addr: Addr,
    pub key: &'k [u8],
    pub deletes: bool,
}

/// One head tree per table id, made on a table's first record.
struct HeadTrees(Box<[OnceLock<BTree>]>);

impl HeadTrees {
    fn new() -> Arc<HeadTrees> {
        let trees = (0..crate::catalog::MAX_TABLES)
            .map(|_| OnceLock::new())
            .collect();
        Arc::new(HeadTrees(trees))
    }
}

/// Committed versions since the last take.
pub struct ChangeLog {
    capture: AtomicU8,
    /// Per worker, its handle on the head trees commits record into
    /// ([`Capture::HeadTrees`]); all handles share one set of trees.
    heads: Box<[CachePadded<parking_lot::Mutex<Arc<HeadTrees>>>]>,
    /// Keys in the head trees (see `MAX_HEAD_KEYS`).
    head_keys: AtomicU64,
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
    /// The frozen head trees, by table id (`None`: nothing recorded).
    Trees(Vec<Option<BTree>>),
    /// Some were not recorded: only a full read of the index is complete.
    Incomplete,
}

impl ChangeLog {
    pub fn new(workers: usize) -> ChangeLog {
        let trees = HeadTrees::new();
        ChangeLog {
            capture: AtomicU8::new(Capture::Off as u8),
            heads: (0..workers)
                .map(|_| CachePadded::new(parking_lot::Mutex::new(trees.clone())))
                .collect(),
            head_keys: AtomicU64::new(0),
            overflowed: AtomicBool::new(false),
            workers: (0..workers)
                .map(|_| CachePadded::new(parking_lot::Mutex::new(Vec::new())))
                .collect(),
            publishing: (0..workers)
                .map(|_| CachePadded::new(AtomicU64::new(0)))
                .collect(),
        }
    }

    /// Starts or stops recording (delta checkpoints on or off). A switch
    /// between the log and head trees makes the next take incomplete:
    /// what the other kind recorded is not taken.
    pub fn record(&self, capture: Capture) {
        let before = self.capture.swap(capture as u8, Relaxed);
        let off = Capture::Off as u8;
        if before != capture as u8 && before != off && capture as u8 != off {
            self.overflowed.store(true, Relaxed);
        }
    }

    pub fn capture(&self) -> Capture {
        match self.capture.load(Relaxed) {
            c if c == Capture::Log as u8 => Capture::Log,
            c if c == Capture::HeadTrees as u8 => Capture::HeadTrees,
            _ => Capture::Off,
        }
    }

    /// Records versions that are already published (the redone ones, at
    /// open); a commit records through `add_publishing`.
    pub fn add<'k>(&self, worker: usize, versions: impl ExactSizeIterator<Item = Committed<'k>>) {
        match self.capture() {
            Capture::Off => {}
            Capture::Log => self.append(worker, versions.map(|v| (v.table, v.addr))),
            Capture::HeadTrees => self.upsert(worker, versions),
        }
    }

    /// Upserts each version into its table's head tree.
    fn upsert<'k>(&self, worker: usize, versions: impl Iterator<Item = Committed<'k>>) {
        let Some(handle) = self.heads.get(worker) else {
            return;
        };
        let trees = handle.lock();
        for version in versions {
            let Some(tree) = trees.0.get(version.table as usize) else {
                continue;
            };
            if self.head_keys.load(Relaxed) >= MAX_HEAD_KEYS || version.key.is_empty() {
                self.overflowed.store(true, Relaxed);
                return;
            }
            let value = match version.deletes {
                true => TOMBSTONE,
                false => version.addr.0,
            };
            // Head trees are never checkpointed by walks, so their leaves'
            // update times mean nothing: 0.
            if tree
                .get_or_init(BTree::new)
                .upsert(version.key, value, 0)
                .is_none()
            {
                self.head_keys.fetch_add(1, Relaxed);
            }
        }
    }

    fn append(&self, worker: usize, versions: impl ExactSizeIterator<Item = (u32, Addr)>) {
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
    pub fn add_publishing<'k>(
        &self,
        worker: usize,
        versions: impl ExactSizeIterator<Item = Committed<'k>>,
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

    /// Takes everything recorded so far, grouped by table id: the lists in
    /// the order each worker recorded them, or the head trees (replaced in
    /// every worker's handle, so no commit records into them any more).
    pub fn take(&self, tables: usize) -> Changes {
        if self.capture() == Capture::HeadTrees {
            let fresh = HeadTrees::new();
            let mut frozen = None;
            for handle in self.heads.iter() {
                frozen = Some(std::mem::replace(&mut *handle.lock(), fresh.clone()));
            }
            self.head_keys.store(0, Relaxed);
            // Every handle held a clone of the same trees, and no commit
            // holds one outside its handle's lock: this is the last one.
            let trees = frozen.and_then(|f| Arc::try_unwrap(f).ok());
            // Read after the swap, as for the lists below.
            let overflowed = self.overflowed.swap(false, Relaxed);
            return match trees {
                Some(HeadTrees(trees)) if !overflowed => Changes::Trees(
                    (trees.into_vec().into_iter().take(tables))
                        .map(OnceLock::into_inner)
                        .collect(),
                ),
                _ => Changes::Incomplete,
            };
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn committed(table: u32, addr: u64, key: &[u8], deletes: bool) -> Committed<'_> {
        Committed {
            table,
            addr: Addr(addr),
            key,
            deletes,
        }
    }

    #[test]
    fn head_trees_hold_each_keys_last_record_in_key_order_until_taken() {
        let log = ChangeLog::new(2);
        log.record(Capture::HeadTrees);
        log.add(
            0,
            [committed(1, 10, b"b", false), committed(1, 11, b"a", false)].into_iter(),
        );
        let window = log.add_publishing(
            1,
            [committed(1, 12, b"b", true), committed(0, 13, b"z", false)].into_iter(),
        );
        drop(window);
        let Changes::Trees(trees) = log.take(3) else {
            panic!("head trees were recording");
        };
        assert_eq!(trees.len(), 3);
        let table = |id: usize| trees[id].as_ref().map(BTree::to_vec);
        assert_eq!(table(0), Some(vec![(b"z".to_vec(), 13)]));
        assert_eq!(
            table(1),
            Some(vec![(b"a".to_vec(), 11), (b"b".to_vec(), TOMBSTONE)])
        );
        assert_eq!(table(2), None, "a table nothing recorded for has no tree");
        // The take started empty trees.
        log.add(0, [committed(2, 14, b"c", false)].into_iter());
        let Changes::Trees(trees) = log.take(3) else {
            panic!("head trees were recording");
        };
        assert!(trees[1].is_none());
        assert_eq!(
            trees[2].as_ref().map(BTree::to_vec),
            Some(vec![(b"c".to_vec(), 14)])
        );
    }

    #[test]
    fn a_record_head_trees_cannot_hold_or_a_switch_of_kind_makes_the_take_incomplete() {
        let log = ChangeLog::new(1);
        log.record(Capture::HeadTrees);
        log.add(0, [committed(0, 1, b"", false)].into_iter());
        assert!(matches!(log.take(1), Changes::Incomplete));
        assert!(matches!(log.take(1), Changes::Trees(_)), "only one take");
        log.add(0, [committed(0, 2, b"k", false)].into_iter());
        log.record(Capture::Log);
        assert!(matches!(log.take(1), Changes::Incomplete));
    }

    #[test]
    fn the_log_keeps_addresses_by_table_in_record_order() {
        let log = ChangeLog::new(2);
        log.record(Capture::Log);
        log.add(1, [committed(1, 20, b"x", false)].into_iter());
        log.add(
            0,
            [committed(1, 21, b"x", true), committed(0, 22, b"y", false)].into_iter(),
        );
        let Changes::Complete(by_table) = log.take(2) else {
            panic!("the log was recording");
        };
        assert_eq!(by_table[0], vec![Addr(22)]);
        assert_eq!(by_table[1], vec![Addr(21), Addr(20)]);
        log.record(Capture::Off);
        log.add(0, [committed(0, 23, b"y", false)].into_iter());
        let Changes::Complete(by_table) = log.take(2) else {
            panic!("an empty log is complete");
        };
        assert!(by_table.iter().all(Vec::is_empty));
    }
}
