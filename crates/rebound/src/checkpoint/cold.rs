//! Serving and loading a checkpoint run after a restart.
//!
//! Recovery builds the DRAM index from the redone versions only; the
//! checkpoint run of each table is installed as the table's cold entries.
//! Lookups that miss the DRAM index binary-search the run (through its
//! fence array) and materialize what they find, so the index is available
//! at once; a background loader then moves the whole run into the DRAM
//! index and retires it.

use super::Chain;
use crate::error::{Error, Result};
use crate::heap::{Addr, BlockSet};
use crate::index::key_prefix;
use crate::medium::Medium;
use crate::parallel;
use crate::txn::{ColdEntries, Store, TableRt};
use parking_lot::Mutex;
use std::ops::Bound;
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

/// One table's run in the checkpoint chain in force.
pub struct ColdRun {
    chain: Arc<Chain>,
    table: u32,
}

impl ColdRun {
    pub fn new(chain: Arc<Chain>, table: u32) -> ColdRun {
        ColdRun { chain, table }
    }
}

impl ColdEntries for ColdRun {
    fn len(&self) -> u64 {
        self.chain.entry_count(self.table)
    }

    fn split_keys(&self, medium: &Medium, parts: usize) -> Vec<Vec<u8>> {
        self.chain.split_keys(medium, self.table, parts)
    }

    fn find(&self, medium: &Medium, key: &[u8]) -> Result<Option<u64>> {
        self.chain.find(medium, self.table, key)
    }

    fn range(
        &self,
        medium: &Medium,
        lower: Bound<&[u8]>,
        upper: Bound<&[u8]>,
        limit: usize,
    ) -> Result<Vec<(Vec<u8>, u64)>> {
        self.chain
            .range(medium, self.table, (lower, upper), limit, false)
    }

    fn range_rev(
        &self,
        medium: &Medium,
        lower: Bound<&[u8]>,
        upper: Bound<&[u8]>,
        limit: usize,
    ) -> Result<Vec<(Vec<u8>, u64)>> {
        self.chain
            .range(medium, self.table, (lower, upper), limit, true)
    }
}

/// Moves every table's run into its DRAM index, in parallel: each run is
/// cut into key ranges that the loader threads take in turn, so a single
/// large table loads on every core. A table whose run turns out damaged
/// is marked so and refuses transactions.
pub fn load_cold(
    store: &Store,
    chain: &Chain,
    cancelled: &(dyn Fn() -> bool + Sync),
) -> Result<()> {
    let threads = parallel::cores().min(MAX_THREADS);
    let verified = chain.verify_parallel(store.medium(), threads);
    let mut loads: Vec<TableLoad> = store
        .tables()
        .filter(|t| t.is_loading())
        .cloned()
        .map(|table| TableLoad::new(store.medium(), chain, table, threads))
        .collect();
    // Smallest first: a table serves lookups at full speed once its whole
    // run is in, and this makes that happen to most tables soonest.
    loads.sort_by_key(|load| load.counts.iter().sum::<u64>());
    if let Err(e) = verified {
        if cancelled() {
            return Ok(());
        }
        for load in &loads {
            load.table.mark_damaged();
            load.table.finish_cold();
        }
        return Err(Error::Corrupt(e.to_string()));
    }
    let tasks: Vec<(&TableLoad, usize)> = loads
        .iter()
        .flat_map(|load| (0..load.ranges.len()).map(move |r| (load, r)))
        .collect();
    let next = AtomicUsize::new(0);
    let work = || {
        while let Some(&(load, range)) = tasks.get(next.fetch_add(1, Relaxed)) {
            if cancelled() {
                return;
            }
            // A table found damaged is settled without reading the rest.
            if load.failed() {
                load.range_done(range, Err(load.bad("another range failed")));
                continue;
            }
            let outcome = load_range(store.medium(), chain, load, range, cancelled);
            if cancelled() {
                return;
            }
            load.range_done(range, outcome);
        }
    };
    parallel::map(0..threads.min(tasks.len()).max(1), |_| work());
    loads.iter().try_for_each(TableLoad::outcome)
}

/// Loader threads at most.
const MAX_THREADS: usize = 8;
/// Entries a key range holds at least, so that seeking and the per-range
/// bookkeeping stay small against the range's work.
const RANGE_ENTRIES_MIN: u64 = 1 << 16;
/// Ranges per thread and table: more than one, so that threads that drew
/// short ranges take further ones.
const RANGES_PER_THREAD: u64 = 4;

/// Keys from the first up to (not including) the second; `None`: unbounded.
type KeyRange = (Option<Vec<u8>>, Option<Vec<u8>>);

/// One table's load: its key ranges and what their readers found.
struct TableLoad {
    table: Arc<TableRt>,
    /// Range `i` holds keys in `[cuts[i-1], cuts[i])`, unbounded at the ends.
    ranges: Vec<KeyRange>,
    /// Entries each image's section holds, newest first.
    counts: Vec<u64>,
    /// The blocks the run's addresses may name: every block that exists
    /// when the load starts (GC leaves loading tables alone, and blocks
    /// made later are in no run).
    blocks: BlockSet,
    state: Mutex<LoadState>,
}

#[derive(Default)]
struct LoadState {
    ranges_done: usize,
    /// Entries read from each image, summed over the ranges done.
    reads: Vec<u64>,
    /// The last range's readers reached the end of every image.
    ended: bool,
    failure: Option<Error>,
    outcome: Option<Result<()>>,
}

impl TableLoad {
    fn new(medium: &Medium, chain: &Chain, table: Arc<TableRt>, threads: usize) -> TableLoad {
        let id = table.heap.def.id;
        let entries = chain.entry_count(id);
        let parts = (entries / RANGE_ENTRIES_MIN).clamp(1, threads as u64 * RANGES_PER_THREAD);
        let mut cuts = chain.split_keys(medium, id, parts as usize);
        cuts.sort();
        cuts.dedup();
        let mut ranges = Vec::with_capacity(cuts.len() + 1);
        let mut lower = None;
        for cut in cuts {
            ranges.push((lower, Some(cut.clone())));
            lower = Some(cut);
        }
        ranges.push((lower, None));
        TableLoad {
            counts: chain.sections(id).iter().map(|s| s.entry_count).collect(),
            blocks: table.heap.block_set(),
            table,
            ranges,
            state: Mutex::new(LoadState::default()),
        }
    }

    fn bad(&self, why: &str) -> Error {
        Error::Corrupt(format!(
            "checkpoint run of table {:?}: {why}",
            self.table.heap.def.name
        ))
    }

    /// Records a range's outcome; the last range to finish settles the
    /// table: every image's entries must add up to its count.
    fn range_done(&self, range: usize, outcome: Result<RangeRead>) {
        let mut state = self.state.lock();
        state.ranges_done += 1;
        match outcome {
            Ok(read) => {
                if state.reads.len() < read.reads.len() {
                    state.reads.resize(read.reads.len(), 0);
                }
                for (sum, n) in state.reads.iter_mut().zip(&read.reads) {
                    *sum += n;
                }
                state.ended |= range + 1 == self.ranges.len() && read.at_end;
            }
            Err(e) => {
                state.failure.get_or_insert(e);
            }
        }
        if state.ranges_done < self.ranges.len() {
            return;
        }
        let outcome = match state.failure.take() {
            Some(e) => Err(e),
            None if !state.ended || state.reads != self.counts => {
                Err(self.bad("entry count does not match"))
            }
            None => Ok(()),
        };
        if outcome.is_err() {
            self.table.mark_damaged();
        }
        self.table.finish_cold();
        state.outcome = Some(outcome);
    }

    /// Whether a range of the table failed already.
    fn failed(&self) -> bool {
        self.state.lock().failure.is_some()
    }

    /// The table's result; `Ok` if cancellation left it unsettled.
    fn outcome(&self) -> Result<()> {
        self.state.lock().outcome.take().unwrap_or(Ok(()))
    }
}

/// What one range's readers consumed.
struct RangeRead {
    reads: Vec<u64>,
    at_end: bool,
}

/// Moves one key range of a table's run into its DRAM index.
fn load_range(
    medium: &Medium,
    chain: &Chain,
    load: &TableLoad,
    range: usize,
    cancelled: &(dyn Fn() -> bool + Sync),
) -> Result<RangeRead> {
    let mut superseded = Superseded::default();
    let read = read_range(medium, chain, load, range, cancelled, &mut superseded);
    // Whether or not the range was whole: the bits set are durable.
    superseded.make_durable(medium)?;
    read
}

fn read_range(
    medium: &Medium,
    chain: &Chain,
    load: &TableLoad,
    range: usize,
    cancelled: &(dyn Fn() -> bool + Sync),
    superseded: &mut Superseded,
) -> Result<RangeRead> {
    let table = &load.table;
    let (lower, upper) = load
        .ranges
        .get(range)
        .ok_or_else(|| load.bad("no such range"))?;
    let bounds = (lower.as_deref(), upper.as_deref());
    let mut reader = chain.range_reader(medium, table.heap.def.id, bounds);
    let mut chunk = Chunk::default();
    while let Some((key, addr)) = reader.next_entry(medium) {
        let in_order = match chunk.last_key() {
            Some(last) => (key_prefix(last), last) < (key_prefix(key), key),
            None => lower.as_deref().is_none_or(|l| l <= key),
        };
        if !in_order || !(1..=table.heap.def.max_key_len as usize).contains(&key.len()) {
            return Err(load.bad("keys out of order or of a bad length"));
        }
        if !load.blocks.contains(Addr(addr)) {
            return Err(load.bad("address of a slot that does not exist"));
        }
        chunk.push(key, addr);
        if chunk.len() == CHUNK_ENTRIES {
            superseded.adopt(table, medium, &chunk.entries());
            chunk.clear_keeping_last();
            if cancelled() {
                break;
            }
        }
    }
    superseded.adopt(table, medium, &chunk.entries());
    Ok(RangeRead {
        reads: reader.reads(),
        at_end: reader.at_end(),
    })
}

/// The run's versions whose keys the index held with a newer version
/// (redone, or written since the restart): superseded, so their obsolete
/// bits are set. Commits leave such bits to the next checkpoint, and a
/// crash before it loses them; this sets them again (`txn::obsolete_bits`).
/// Made durable before the load ends, so before any later checkpoint (which
/// waits for the load) can be in force and stop redoing their successors.
#[derive(Default)]
struct Superseded {
    addrs: Vec<u64>,
    any: bool,
}

impl Superseded {
    fn adopt(&mut self, table: &TableRt, medium: &Medium, entries: &[(&[u8], u64)]) {
        self.addrs.clear();
        table.adopt_sorted(entries, &mut self.addrs);
        // Noted in the entries' order: one pass finds each one's key.
        let mut keys = entries.iter();
        for &addr in &self.addrs {
            let Some(&(key, _)) = keys.find(|&&(_, a)| a == addr) else {
                break;
            };
            if table.head_supersedes(key, Addr(addr)) {
                table.heap.set_obsolete(medium, Addr(addr));
                self.any = true;
            }
        }
    }

    /// Fences this thread's write-backs.
    fn make_durable(&self, medium: &Medium) -> Result<()> {
        match self.any {
            true => medium.fence(),
            false => Ok(()),
        }
    }
}

/// Entries moved into an index per descent batch.
const CHUNK_ENTRIES: usize = 4096;

/// A batch of run entries with their keys packed in one buffer.
#[derive(Default)]
struct Chunk {
    keys: Vec<u8>,
    spans: Vec<(usize, usize, u64)>,
    /// The last key of the batch before the last clear (keys are never
    /// empty, so empty means none).
    last: Vec<u8>,
}

impl Chunk {
    fn push(&mut self, key: &[u8], addr: u64) {
        let at = self.keys.len();
        self.keys.extend_from_slice(key);
        self.spans.push((at, key.len(), addr));
    }

    fn last_key(&self) -> Option<&[u8]> {
        match self.spans.last() {
            Some(&(at, len, _)) => self.keys.get(at..at + len),
            None => (!self.last.is_empty()).then_some(self.last.as_slice()),
        }
    }

    fn len(&self) -> usize {
        self.spans.len()
    }

    fn entries(&self) -> Vec<(&[u8], u64)> {
        self.spans
            .iter()
            .map(|&(at, len, addr)| (&self.keys[at..at + len], addr))
            .collect()
    }

    /// Empties the batch; the last key stays for the order check.
    fn clear_keeping_last(&mut self) {
        if let Some(&(at, len, _)) = self.spans.last() {
            self.last.clear();
            self.last
                .extend_from_slice(self.keys.get(at..at + len).unwrap_or_default());
        }
        self.keys.clear();
        self.spans.clear();
    }
}
