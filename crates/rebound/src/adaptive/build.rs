//! Building one secondary index on several threads.
//!
//! Each round, every thread collects the entries of its part of the
//! primary keys and sorts them (`txn::index_build`); then the sorted runs
//! are cut at common secondary keys and each thread enters one slice of
//! the key space, ascending, so that a leaf takes many entries per descent
//! and no two threads fill the same leaves. Rounds bound the memory the
//! collected entries take (`ROUND_ROWS` keys per thread).

use super::{IndexManager, Priority, IDLE_POLL, LOAD_POLL};
use crate::error::{Error, Result};
use crate::parallel;
use crate::txn::{Collected, EntryRun, SecondaryRt, Store, TableRt};
use std::ops::Bound;
use std::sync::atomic::Ordering::{Acquire, Relaxed};
use std::time::Instant;

/// Primary keys one thread collects per round.
const ROUND_ROWS: usize = 1 << 20;
/// Entries entered between two looks at cancellation.
const ENTER_CHUNK: usize = 4096;
/// Entries each run contributes to the sample the cuts are chosen from.
const SAMPLE_PER_RUN: usize = 256;

/// A range of primary keys.
type KeyRange = (Bound<Vec<u8>>, Bound<Vec<u8>>);

/// A range of index entries between two cuts (`None`: unbounded).
type Slice<'k> = (Option<&'k [u8]>, Option<&'k [u8]>);

/// One thread's share of a round: its key range, its entries, whether
/// its range is exhausted, and the session slot it reads under.
struct Share<'r> {
    range: &'r mut KeyRange,
    run: &'r mut EntryRun,
    done: &'r mut bool,
    worker: Option<usize>,
}

impl IndexManager {
    /// Builds an index whose build lock the caller holds, splitting the
    /// table's key range over `workers` (one thread each; `None` means the
    /// calling thread's own transaction protects the reads).
    pub fn build_locked(
        &self,
        store: &Store,
        table: &TableRt,
        index: &SecondaryRt,
        workers: &[Option<usize>],
        priority: Priority,
    ) -> Result<()> {
        if workers.is_empty() {
            // Every session slot is taken: no reader slot to announce in.
            return Err(Error::TooManySessions(crate::catalog::MAX_SESSIONS));
        }
        // Each thread announces its reads in a session slot of its own:
        // two sharing one would hide the older reader from GC.
        assert!(
            workers
                .iter()
                .enumerate()
                .all(|(i, w)| { w.is_none_or(|w| !workers[..i].contains(&Some(w))) }),
            "a build's threads read under distinct session slots: {workers:?}"
        );
        // Dropped with its table before this build took the lock.
        if index.is_dropped() {
            return Ok(());
        }
        self.wait_for_primary(table);
        let started = Instant::now();
        index.build_progress.store(0, Relaxed);
        *index.build_started.lock() = Some(started);
        let cancelled = || self.pause_or_cancel(store, table, index, priority);
        let mut ranges = split_range(store, table, workers.len());
        let threads = ranges.len();
        let mut runs: Vec<EntryRun> = (0..threads).map(|_| EntryRun::default()).collect();
        let mut done = vec![false; threads];
        while !done.iter().all(|&d| d) {
            let state = (&mut ranges[..], &mut runs[..], &mut done[..]);
            if !build_round(store, (table, index), state, workers, &cancelled)? {
                return Ok(());
            }
        }
        let rows = (index.build_progress.load(Relaxed) / 2).max(1);
        let per_row = started.elapsed().as_nanos() as u64 * threads as u64 / rows;
        self.build_ns_per_row.store(per_row.max(1), Relaxed);
        self.publish(index);
        Ok(())
    }

    /// Waits while the background loader moves the table's checkpoint run
    /// into its primary index (SOFORT rebuilds secondary indexes once the
    /// primary ones are back). Read from the run instead, every batch of
    /// rows costs a search of the chain's images and their checksums, and
    /// the build takes the cores the load needs. Recovery picks indexes on
    /// warm tables first (`next_to_rebuild`), so this waits only when no
    /// other index is worth building.
    fn wait_for_primary(&self, table: &TableRt) {
        while self.waits_for_load(table) && !self.cancel.load(Acquire) {
            std::thread::sleep(LOAD_POLL);
        }
    }

    /// Between batches of a build: true if it must stop. A build the
    /// workload does not need waits here while the workload runs.
    fn pause_or_cancel(
        &self,
        store: &Store,
        table: &TableRt,
        index: &SecondaryRt,
        priority: Priority,
    ) -> bool {
        while priority == Priority::WhenIdle
            && !self.cancel.load(Acquire)
            && !self.hurry.load(Acquire)
            && self.rank(table, index) <= 0.0
            && index.waiting.load(Acquire) == 0
            && !self.workload_idle(store)
        {
            std::thread::sleep(IDLE_POLL);
        }
        // A drop waits for this build's lock: stop rather than copy a
        // table nobody can read.
        self.cancel.load(Acquire) || table.is_dropped()
    }
}

/// One round: each thread collects and sorts the entries of its share of
/// the primary keys, then enters one slice of all of them. False if
/// cancelled.
fn build_round(
    store: &Store,
    build: (&TableRt, &SecondaryRt),
    (ranges, runs, done): (&mut [KeyRange], &mut [EntryRun], &mut [bool]),
    workers: &[Option<usize>],
    cancelled: &(dyn Fn() -> bool + Sync),
) -> Result<bool> {
    let shares = ranges
        .iter_mut()
        .zip(runs.iter_mut())
        .zip(done.iter_mut())
        .zip(workers)
        .map(|(((range, run), done), &worker)| Share {
            range,
            run,
            done,
            worker,
        });
    for outcome in parallel::map(shares, |share| collect(store, build, share, cancelled)) {
        if outcome? == Collected::Cancelled {
            return Ok(false);
        }
    }
    let slices = slices(runs, runs.len());
    let entered = parallel::map(slices, |slice| enter(build.1, runs, slice, cancelled));
    Ok(!entered.contains(&false))
}

/// One thread's collection of a round, sorted.
fn collect(
    store: &Store,
    build: (&TableRt, &SecondaryRt),
    share: Share<'_>,
    cancelled: &(dyn Fn() -> bool + Sync),
) -> Result<Collected> {
    share.run.clear();
    if *share.done {
        return Ok(Collected::Done);
    }
    let bounds = (&mut share.range.0, &share.range.1);
    let outcome = share
        .run
        .collect(store, build, share.worker, bounds, ROUND_ROWS, cancelled)?;
    *share.done = outcome == Collected::Done;
    share.run.sort_dedup();
    Ok(outcome)
}

/// Enters the entries of all runs between the slice's cuts, ascending;
/// false if cancelled.
fn enter(
    index: &SecondaryRt,
    runs: &[EntryRun],
    (from, to): Slice<'_>,
    cancelled: &(dyn Fn() -> bool + Sync),
) -> bool {
    // Each run's part is sorted; entering them one after the other costs
    // less than merging them first (the second fills the leaves the first
    // made). Runs cover disjoint primary keys, so no entry repeats.
    let mut part: Vec<(&[u8], u64)> = Vec::new();
    for run in runs {
        let start = from.map_or(0, |cut| run.position(cut));
        let end = to.map_or(run.len(), |cut| run.position(cut));
        part.clear();
        part.extend(run.entries(start..end));
        for chunk in part.chunks(ENTER_CHUNK) {
            if cancelled() {
                return false;
            }
            // Entries a writer made meanwhile are newer and stay; gap
            // marks do not apply: the rows existed before anyone looked.
            index.tree.insert_sorted_absent(chunk);
            index.build_progress.fetch_add(chunk.len() as u64, Relaxed);
        }
    }
    true
}

/// Cuts the secondary keys of the sorted runs into at most `parts`
/// slices of similar size: (from, to), `None` meaning unbounded.
fn slices(runs: &[EntryRun], parts: usize) -> Vec<Slice<'_>> {
    let mut sample: Vec<&[u8]> = Vec::new();
    for run in runs.iter().filter(|run| !run.is_empty()) {
        let step = (run.len() / SAMPLE_PER_RUN).max(1);
        sample.extend((0..run.len()).step_by(step).map(|i| run.entry(i).0));
    }
    sample.sort_unstable();
    let mut cuts: Vec<&[u8]> = (1..parts)
        .filter_map(|i| sample.get(i * sample.len() / parts).copied())
        .collect();
    cuts.dedup();
    let mut slices = Vec::with_capacity(cuts.len() + 1);
    let mut from = None;
    for cut in cuts {
        slices.push((from, Some(cut)));
        from = Some(cut);
    }
    slices.push((from, None));
    slices
}

/// Cuts the table's key range into at most `parts` ranges.
fn split_range(store: &Store, table: &TableRt, parts: usize) -> Vec<KeyRange> {
    let mut cuts = table.split_keys(store.medium(), parts);
    cuts.sort();
    cuts.dedup();
    let mut ranges = Vec::with_capacity(parts);
    let mut lower = Bound::Unbounded;
    for cut in cuts {
        ranges.push((lower, Bound::Excluded(cut.clone())));
        lower = Bound::Included(cut);
    }
    ranges.push((lower, Bound::Unbounded));
    ranges
}
