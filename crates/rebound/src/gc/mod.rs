//! Block garbage collection (FIR 4.5), crash-safe across its two stages.
//!
//! * **Choose.** A block whose obsolete bitmap has at least `threshold` of
//!   its slots set is a candidate (FIR's gc_array); half of them will do
//!   while its table holds more than `space_target` slots per live slot.
//!   The region's current block (and anything after it) is never one.
//! * **Stage 1: relocate.** Every slot of a candidate is classified. Dead:
//!   a hole, never written, left over from earlier use of the space, a
//!   reaped tombstone, its key gone from the index, or superseded by the
//!   index head (unless that head is a pending write over it). Live: the
//!   index head of its key; it is copied by a GC system
//!   transaction into the GC worker's region (FIR's gc_region), which
//!   repoints the index. Busy: touched by a running transaction; the block
//!   waits for a later round. Once the copies committed, the block is
//!   *retired*: checkpoints stop listing it.
//! * **Stage 2: release.** The first checkpoint that starts after the
//!   retirement does not list the block and points at the copies. When it
//!   is in force, the block is unlinked from its region's chain, and when
//!   every transaction that was running by then has ended (none can hold
//!   an address into it), its DRAM tile is dropped and its extent returns
//!   to the free space.
//!
//! # Across a crash
//! * Before that checkpoint completed, recovery starts from the previous
//!   one, which still lists the block: the block is back, its versions are
//!   superseded by the committed copies (redo finds them: they are younger
//!   than that checkpoint's `t_low`), and a later round redoes the GC.
//! * After it completed, recovery never learns of the block, so its space
//!   is free by construction (free space is rebuilt from what the
//!   checkpoint and chains reference); a link that still points at it is
//!   repaired by the first round after the restart.
//! * Obsolete bits only choose candidate blocks: each slot is judged by
//!   the index, so a damaged bit cannot make GC drop a newest version. A
//!   slot that fails its checks (txn word, checksum) or a block whose min
//!   txn fails its check stops the round with `Corrupt`; the block stays.
//!   A bit lost in a crash only delays.
//!
//! GC needs index checkpoints: without them (the full-scan design) nothing
//! would stop a scan from finding an older version of a key whose
//! tombstone was in a freed block, so GC does not run there and the
//! full-scan design refuses a file on which GC freed blocks.

use crate::catalog::{self, GC_WORKER};
use crate::error::{Error, Result};
use crate::heap::tile::{LOCKED, PENDING, REAPED};
use crate::heap::{self, Addr, Block, SlotWord, VersionHeader};
use crate::txn::{relocate, Store, TableRt, TxnState};
use std::sync::atomic::Ordering::Acquire;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Settings of block GC.
#[derive(Debug, Clone, Copy)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(default))]
#[non_exhaustive]
pub struct GcOptions {
    /// Collect blocks at all (only with index checkpoints).
    pub enabled: bool,
    /// A block becomes a candidate when this fraction of its slots is
    /// obsolete (FIR: 0.9).
    pub threshold: f64,
    /// When a table's blocks hold more than this many slots per live slot,
    /// blocks half obsolete are candidates too: under skewed updates FIR's
    /// 90 % rule leaves cold keys holding old blocks, and the file grows
    /// without bound.
    pub space_target: f64,
    /// While the store's tables hold more than this many versions per live
    /// one (plus a few blocks' slack each) and GC is freeing blocks,
    /// writers wait for it after their commits (at most a second each), as
    /// LSM engines stall writes when compaction lags; 0: never. While
    /// others wait too, writers take turns running beside GC, up to one
    /// fewer than the cores at once; a writer waiting alone stops. Above
    /// `space_target`, so that GC works harder first and writers wait only
    /// for a GC that could not keep up by itself.
    pub max_space: f64,
    /// A round starts when this many blocks are candidates (the length of
    /// FIR's gc_array that triggers the GC thread).
    pub batch_blocks: usize,
    /// At most this many blocks are relocated per round.
    pub max_blocks_per_round: usize,
    /// The background thread takes the checkpoint that lets retired blocks
    /// go at most this often (blocks keep being relocated meanwhile), so
    /// GC costs a bounded number of checkpoints, except while it works off
    /// more candidates than one round may copy: then every round ends with
    /// one (redo after a crash stays at one round's copies).
    pub min_checkpoint_interval: Duration,
}

impl Default for GcOptions {
    fn default() -> Self {
        GcOptions {
            enabled: true,
            threshold: 0.9,
            space_target: 1.5,
            max_space: 1.7,
            batch_blocks: 4,
            max_blocks_per_round: 256,
            min_checkpoint_interval: Duration::from_millis(100),
        }
    }
}

setters!(GcOptions {
    /// Collect blocks at all (only with index checkpoints; default: true).
    enabled: bool,
    /// Obsolete fraction of its slots that makes a block a candidate
    /// (default 0.9, as in FIR).
    threshold: f64,
    /// Slots per live slot of a table past which half-obsolete blocks are
    /// collected too (default 1.5).
    space_target: f64,
    /// Versions per live version of a table past which writers wait for
    /// GC while it frees blocks (default 1.7; 0: never).
    max_space: f64,
    /// Candidates needed before a background round starts (default 4).
    batch_blocks: usize,
    /// Most blocks relocated per round (default 256).
    max_blocks_per_round: usize,
    /// Least time between the checkpoints GC takes to free blocks
    /// (default 100 ms: with delta checkpoints they are cheap).
    min_checkpoint_interval: Duration,
});

/// What GC did since the database was opened.
#[derive(Debug, Clone, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(default))]
#[non_exhaustive]
pub struct GcStats {
    /// Rounds that relocated at least one block.
    pub rounds: u64,
    /// Blocks whose space was returned to the free space.
    pub blocks_freed: u64,
    pub bytes_freed: u64,
    /// Live versions copied into the GC region.
    pub versions_relocated: u64,
    /// Blocks emptied and waiting for a checkpoint or for readers.
    pub blocks_pending: u64,
    /// Candidates put off because a running transaction touched them.
    pub blocks_postponed: u64,
    /// Time spent relocating, unlinking and freeing (checkpoints excluded).
    pub time: Duration,
    /// Dropped tables whose blocks were all freed (their blocks and bytes
    /// count in `blocks_freed` and `bytes_freed`).
    pub dropped_tables_reclaimed: u64,
    /// Commits that waited for GC because it fell behind (see
    /// `GcOptions::max_space`), and the time they waited in all.
    pub writer_stalls: u64,
    pub writer_stall_time: Duration,
}

/// A block GC works on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockId {
    pub table: u32,
    pub region: usize,
    pub seq: u32,
    pub offset: u64,
}

/// GC state; one round at a time (callers hold it locked).
#[derive(Default)]
pub struct Collector {
    /// Emptied; waiting for a checkpoint that does not list them.
    retired: Vec<BlockId>,
    /// Unlinked; freed once every transaction running at `.1` ended.
    releasing: Vec<(BlockId, u64)>,
    links_checked: bool,
    /// When GC last made a checkpoint happen.
    last_checkpoint: Option<Instant>,
    /// Candidates a round that retired blocks left untried, for the next
    /// round, which comes within a millisecond when the round was cut
    /// short (finding candidates reads every block's bitmap).
    pending: Vec<BlockId>,
    /// The last search for candidates found the tables past `max_space`.
    over_bound: bool,
    stats: GcStats,
}

/// How emptying a block ended, with the versions it copied (committed
/// batches count even when the block was not retired in the end).
enum Emptied {
    /// Its live versions were relocated; it is retired.
    Retired(u64),
    /// Some slot is being written; the block waits for a later round.
    Busy(u64),
    /// A transaction older than GC's kept running: the round stops.
    OlderTransactionRuns(u64),
}

/// A block being emptied, with what is read once for all its slots.
#[derive(Clone, Copy)]
struct Candidate<'b> {
    id: BlockId,
    block: &'b Block,
    min_txn: u64,
}

/// How one slot stands.
enum Slot {
    Dead,
    Live(Addr),
    Busy,
    /// Fails its checks: the block stays, and the round reports `Corrupt`.
    Damaged,
}

impl Collector {
    pub fn stats(&self) -> GcStats {
        GcStats {
            blocks_pending: (self.retired.len() + self.releasing.len()) as u64,
            ..self.stats.clone()
        }
    }

    /// Whether retired blocks wait for a checkpoint (stage 2) and, unless
    /// `now` is asked for, the pacing allows one.
    pub fn wants_checkpoint(&self, options: &GcOptions, now: bool) -> bool {
        !self.retired.is_empty()
            && (now
                || self
                    .last_checkpoint
                    .is_none_or(|t| t.elapsed() >= options.min_checkpoint_interval))
    }

    /// Stage 1: relocates the live versions of candidate blocks and
    /// retires them, if at least `min_candidates` exist (the previous
    /// round's untried ones, checked again, while enough of them remain).
    /// Stops once `max_copies` versions were copied (every copy is redo
    /// work for recovery until the next checkpoint) or
    /// `max_blocks_per_round` blocks were tried; returns the blocks retired
    /// and whether one of those two limits left candidates untried.
    /// `patience`: how long to wait for older transactions to end. A
    /// damaged slot or a failed copy stops the round with its error (the
    /// block stays as it is).
    pub fn relocate(
        &mut self,
        store: &Store,
        options: &GcOptions,
        (min_candidates, max_copies): (usize, u64),
        patience: Duration,
    ) -> Result<(usize, bool)> {
        let started = Instant::now();
        if !self.links_checked {
            self.links_checked = repair_links(store).is_ok();
        }
        let pending: Vec<BlockId> = std::mem::take(&mut self.pending)
            .into_iter()
            .filter(|id| still_candidate(store, id))
            .collect();
        let candidates = match pending.len() >= min_candidates.max(1) {
            true => pending,
            false => {
                let (found, over) = candidates(store, options);
                self.over_bound = over;
                found
            }
        };
        if candidates.is_empty() || candidates.len() < min_candidates {
            return Ok((0, false));
        }
        let (mut retired, mut copies, mut cut_short) = (0, 0, false);
        let mut tried = 0;
        for &id in candidates.iter().take(options.max_blocks_per_round) {
            if copies >= max_copies {
                cut_short = true;
                break;
            }
            let emptied = empty_block(store, id, patience);
            let moved = match &emptied {
                Ok(Emptied::Retired(m) | Emptied::Busy(m) | Emptied::OlderTransactionRuns(m)) => *m,
                Err(_) => 0,
            };
            self.stats.versions_relocated += moved;
            copies += moved;
            match emptied {
                Ok(Emptied::Retired(_)) => {
                    self.retired.push(id);
                    retired += 1;
                }
                // The block goes first next time.
                Ok(Emptied::OlderTransactionRuns(_)) => {
                    self.stats.blocks_postponed += 1;
                    break;
                }
                Ok(Emptied::Busy(_)) => self.stats.blocks_postponed += 1,
                Err(e) => {
                    self.stats.time += started.elapsed();
                    return Err(e);
                }
            }
            tried += 1;
        }
        cut_short |= tried == options.max_blocks_per_round && candidates.len() > tried;
        // Kept only after progress: the next round then comes soon, and the
        // list is no staler than that.
        if retired > 0 {
            self.pending = candidates.get(tried..).unwrap_or_default().to_vec();
        }
        self.stats.rounds += (retired > 0) as u64;
        self.stats.time += started.elapsed();
        Ok((retired, cut_short))
    }

    /// Whether the last search for candidates found the store's tables
    /// holding more than `max_space` versions per live one.
    pub fn over_bound(&self) -> bool {
        self.over_bound
    }

    /// Makes the next round look for candidates afresh rather than take
    /// up what a round cut short left (an explicit collection wants them
    /// all).
    pub fn forget_pending(&mut self) {
        self.pending.clear();
    }

    /// Stage 2, after a checkpoint that started after the retirements is in
    /// force: unlinks the retired blocks from their chains.
    pub fn checkpoint_done(&mut self, store: &Store) -> Result<()> {
        if self.retired.is_empty() {
            return Ok(());
        }
        let started = Instant::now();
        catalog::set_gc_freed(store.medium())?;
        self.retired.sort_by_key(|b| (b.table, b.region, b.seq));
        for id in &self.retired {
            let block = store.table(id.table).heap.regions[id.region].get(id.seq as usize);
            assert!(
                block.is_some_and(|b| b.is_retired() && b.offset() == id.offset),
                "only retired blocks are unlinked: {id:?}"
            );
            unlink(store, *id);
        }
        store.medium().fence()?;
        let now = store.clock().peek();
        self.releasing
            .extend(self.retired.drain(..).map(|id| (id, now)));
        self.last_checkpoint = Some(Instant::now());
        self.stats.time += started.elapsed();
        Ok(())
    }

    /// Frees the unlinked blocks no running transaction or snapshot can
    /// reach.
    pub fn release(&mut self, store: &Store) -> usize {
        self.free_dead_extents(store);
        if self.releasing.is_empty() {
            return 0;
        }
        let started = Instant::now();
        let oldest = store.oldest_reader();
        let (ready, waiting): (Vec<_>, Vec<_>) = self
            .releasing
            .drain(..)
            .partition(|&(_, after)| oldest.is_none_or(|o| o > after));
        self.releasing = waiting;
        for &(id, after) in &ready {
            let table = store.table(id.table);
            let block = table.heap.regions[id.region].get(id.seq as usize);
            assert!(
                block.is_some_and(|b| b.is_retired() && b.offset() == id.offset)
                    && oldest.is_none_or(|o| o > after),
                "only retired blocks below every running transaction are freed: {id:?} unlinked at {after}, oldest {oldest:?}"
            );
            let size = table.heap.def.block_size as u64;
            let extents = block.map_or(0, |b| {
                table
                    .heap
                    .free_extents(store.medium(), store.space(), id.region, b)
            });
            table.heap.vacate(id.region, id.seq as usize);
            store.space().free(store.medium(), id.offset, size);
            self.stats.bytes_freed += size + extents;
        }
        self.stats.blocks_freed += ready.len() as u64;
        self.stats.time += started.elapsed();
        ready.len()
    }
}

impl Collector {
    /// Frees the extents of obsolete versions no running transaction or
    /// snapshot can read: out-of-line values are freed as their versions
    /// die, not when their block is collected (a block of pointers may
    /// outlive thousands of them). A failed fence leaves them for the
    /// next round.
    fn free_dead_extents(&mut self, store: &Store) {
        let oldest = store.oldest_reader();
        for table in store.tables() {
            if table.is_loading() || table.is_damaged() || table.is_dropped() {
                continue;
            }
            let heap = &table.heap;
            for (region_no, region) in heap.regions.iter().enumerate() {
                for block in region.present() {
                    if !heap.holds_extents(store.medium(), block) || block.is_retired() {
                        continue;
                    }
                    let obsolete = heap.obsolete_in(store.medium(), block);
                    if obsolete == 0 || !block.note_swept(obsolete) {
                        continue;
                    }
                    let unreachable = |addr: Addr, header: &VersionHeader| {
                        is_unreachable(store, table, oldest, addr, header)
                    };
                    let freed = heap.free_dead_extents(
                        store.medium(),
                        store.space(),
                        region_no,
                        block,
                        unreachable,
                    );
                    match freed {
                        Ok((bytes, true)) => self.stats.bytes_freed += bytes,
                        Ok((bytes, false)) => {
                            self.stats.bytes_freed += bytes;
                            block.forget_sweep();
                        }
                        Err(_) => block.forget_sweep(),
                    }
                }
            }
        }
    }

    /// Frees every block of each table whose drop is durable and older
    /// than every running transaction and snapshot (none can reach its
    /// versions, and none can write to it); returns how many tables it
    /// freed. No checkpoint may run meanwhile (the caller holds them off).
    /// A dropped table has no section in an image taken since the drop,
    /// and recovery reads neither its chains nor its sections, so its
    /// blocks are free across a crash too: the region heads are cleared
    /// only so that nothing walks into space another table reuses.
    pub fn reclaim_dropped(&mut self, store: &Store) -> Result<usize> {
        let oldest = store.oldest_reader();
        let ready: Vec<&Arc<TableRt>> = store
            .tables()
            .filter(|t| {
                t.awaiting_reclaim()
                    .is_some_and(|dropped| oldest.is_none_or(|o| o > dropped))
            })
            .collect();
        for table in &ready {
            self.free_table(store, table)?;
        }
        Ok(ready.len())
    }

    fn free_table(&mut self, store: &Store, table: &TableRt) -> Result<()> {
        let started = Instant::now();
        let (medium, id) = (store.medium(), table.heap.def.id);
        // Its blocks in GC's lists are freed below with the rest.
        self.retired.retain(|b| b.table != id);
        self.releasing.retain(|(b, _)| b.table != id);
        self.pending.retain(|b| b.table != id);
        for region in 0..table.heap.regions.len() {
            catalog::set_region_head(medium, id, region, 0);
        }
        medium.fence()?;
        let size = table.heap.def.block_size as u64;
        for (region_no, region) in table.heap.regions.iter().enumerate() {
            let blocks: Vec<(u32, u64)> = region.present().map(|b| (b.seq, b.offset())).collect();
            for (seq, offset) in blocks {
                let extents = region.get(seq as usize).map_or(0, |b| {
                    table.heap.free_extents(medium, store.space(), region_no, b)
                });
                table.heap.vacate(region_no, seq as usize);
                store.space().free(medium, offset, size);
                self.stats.blocks_freed += 1;
                self.stats.bytes_freed += size + extents;
            }
        }
        table.heap.release_reserve(medium, store.space());
        table.set_reclaimed();
        self.stats.dropped_tables_reclaimed += 1;
        self.stats.time += started.elapsed();
        Ok(())
    }
}

/// Blocks' worth of versions past `max_space` a table may hold before
/// writers wait for GC.
const STALL_SLACK_BLOCKS: u64 = 16;

/// Below this obsolete fraction a block is never collected: relocating
/// more live versions than it frees would cost more than it returns.
const SPACE_THRESHOLD: f64 = 0.5;

/// Blocks past the threshold, most obsolete first. A table whose blocks
/// hold more than `space_target` slots per live slot uses the lower
/// `SPACE_THRESHOLD`.
/// Also says whether the store's blocks hold more than `max_space`
/// versions per live one (with each table's slack): the bound is on the
/// store's space, so a small table that GC empties every round (TPC-C's
/// districts) does not stop the writers of all the others.
fn candidates(store: &Store, options: &GcOptions) -> (Vec<BlockId>, bool) {
    let mut found = Vec::new();
    let mut sum = Versions::default();
    for table in store.tables() {
        if table.is_loading() || table.is_damaged() || table.is_dropped() {
            continue;
        }
        let (table_found, versions) = table_candidates(store, table, options);
        found.extend(table_found);
        sum.total += versions.total;
        sum.live += versions.live;
        sum.slack += versions.slack;
    }
    found.sort_by_key(|&(obsolete, _)| std::cmp::Reverse(obsolete));
    let over = options.max_space > 0.0
        && sum.total as f64 > options.max_space * sum.live.max(1) as f64 + sum.slack as f64;
    (found.into_iter().map(|(_, id)| id).collect(), over)
}

/// Versions in a table's blocks before their region's current one, and
/// how many past `max_space` it may hold before writers wait for GC.
#[derive(Default)]
struct Versions {
    total: u64,
    live: u64,
    slack: u64,
}

/// A table's candidates, with their obsolete slots, and its versions.
fn table_candidates(
    store: &Store,
    table: &TableRt,
    options: &GcOptions,
) -> (Vec<(u64, BlockId)>, Versions) {
    let (heap, medium) = (&table.heap, store.medium());
    let mut blocks = Vec::new();
    for (region_no, region) in heap.regions.iter().enumerate() {
        let current = region.cursor.lock().block;
        for block in region.present() {
            if block.seq >= current || block.is_retired() {
                continue;
            }
            let id = BlockId {
                table: heap.def.id,
                region: region_no,
                seq: block.seq,
                offset: block.offset(),
            };
            let entries = heap.entries_in(medium, block);
            let obsolete = heap.obsolete_in(medium, block).min(entries);
            blocks.push((obsolete, entries, id, block));
        }
    }
    let total: u64 = blocks.iter().map(|b| b.1).sum();
    let live = total - blocks.iter().map(|b| b.0).sum::<u64>();
    let threshold = match total as f64 > options.space_target * live.max(1) as f64 {
        true => options.threshold.min(SPACE_THRESHOLD),
        false => options.threshold,
    };
    // A few blocks' worth of slack: a small table updated without pause
    // (TPC-C's warehouse rows) holds many versions per live one between
    // rounds, and waiting for GC would buy nothing there.
    let slack = STALL_SLACK_BLOCKS * total / blocks.len().max(1) as u64;
    let by_bytes_threshold = threshold.min(SPACE_THRESHOLD);
    let mut found = Vec::new();
    for (obsolete, entries, id, block) in blocks {
        // Blocks hold as many versions as fit: each is judged by its own.
        let by_count = obsolete >= (threshold * entries as f64).ceil().max(1.0) as u64;
        // Out-of-line values make a few versions most of a block's bytes:
        // such a block is judged by the bytes its obsolete versions hold,
        // and taken once they are at least half (it copies no more than
        // it frees).
        let by_bytes = || {
            if obsolete == 0 || !heap.holds_extents(medium, block) {
                return false;
            }
            if let Some(enough) = block.bytes_verdict(obsolete) {
                return enough;
            }
            let usage = heap.block_usage(medium, id.region, block);
            let enough = usage.obsolete_bytes as f64 >= by_bytes_threshold * usage.bytes as f64;
            block.note_bytes_verdict(obsolete, enough);
            enough
        };
        if by_count || by_bytes() {
            found.push((obsolete, id));
        }
    }
    (found, Versions { total, live, slack })
}

/// Whether a block found as a candidate earlier is still one GC may
/// empty: present at the same place, not retired, and before its
/// region's current block.
fn still_candidate(store: &Store, id: &BlockId) -> bool {
    let Some(table) = store.get_table(id.table) else {
        return false;
    };
    if table.is_loading() || table.is_damaged() {
        return false;
    }
    let Some(region) = table.heap.regions.get(id.region) else {
        return false;
    };
    let current = region.cursor.lock().block;
    region.get(id.seq as usize).is_some_and(|block| {
        block.seq == id.seq
            && block.seq < current
            && !block.is_vacant()
            && !block.is_retired()
            && block.offset() == id.offset
    })
}

/// Versions relocated per system transaction: few enough that user
/// writers rarely meet a key GC holds locked.
const RELOCATIONS_PER_TXN: usize = 32;

/// Relocates every live version of a block and retires it. Slots are
/// classified before any is locked, and the copies commit in small
/// transactions, so GC holds each key only for a moment.
fn empty_block(store: &Store, id: BlockId, patience: Duration) -> Result<Emptied> {
    let table = store.table(id.table).clone();
    let Some(block) = table.heap.regions[id.region].get(id.seq as usize) else {
        return Ok(Emptied::Busy(0));
    };
    // Slots below the min txn count as dead: a damaged word must stop GC.
    let min_txn = table.heap.min_txn(store.medium(), block).ok_or_else(|| {
        Error::Corrupt(format!(
            "table {} region {} block {}: min txn fails its check",
            id.table, id.region, id.seq
        ))
    })?;
    let candidate = Candidate { id, block, min_txn };
    let damaged = |slot: u32| {
        Error::Corrupt(format!(
            "table {} region {} block {} slot {slot} fails its checks",
            id.table, id.region, id.seq
        ))
    };
    let (entries, end) = table.heap.directory(store.medium(), block);
    if let heap::DirectoryEnd::Damaged { slot } = end {
        return Err(damaged(slot));
    }
    let mut live = Vec::new();
    for slot in entries.iter().map(|entry| entry.slot) {
        match classify(store, &table, &candidate, slot, true) {
            Slot::Dead => {}
            Slot::Busy => return Ok(Emptied::Busy(0)),
            Slot::Live(addr) => live.push(addr),
            Slot::Damaged => return Err(damaged(slot)),
        }
    }
    let mut copied = 0;
    for batch in live.chunks(RELOCATIONS_PER_TXN) {
        let txn = TxnState::begin(store, GC_WORKER);
        let running = GcTxn::announce(store, txn.id());
        // Ends the transaction (commit or rollback) before GC stops
        // announcing it: writers that meet its keys wait while it runs.
        let outcome = relocate_batch(store, &table, &candidate, batch, txn, patience);
        drop(running);
        match outcome? {
            Batch::Committed => copied += batch.len() as u64,
            Batch::OlderTransactionRuns => return Ok(Emptied::OlderTransactionRuns(copied)),
            Batch::Busy => return Ok(Emptied::Busy(copied)),
        }
    }
    let current = table.heap.regions[id.region].cursor.lock().block;
    assert!(
        block.seq < current && !block.is_retired(),
        "GC retires only blocks before their region's current one, once: block {} of {current}",
        block.seq
    );
    block.retire();
    Ok(Emptied::Retired(copied))
}

/// How one system transaction of relocations ended.
enum Batch {
    Committed,
    OlderTransactionRuns,
    Busy,
}

/// Relocates `batch` in `txn` and commits it; drops it (rolling back)
/// when that cannot be done now.
fn relocate_batch(
    store: &Store,
    table: &Arc<TableRt>,
    candidate: &Candidate<'_>,
    batch: &[Addr],
    mut txn: TxnState<'_>,
    patience: Duration,
) -> Result<Batch> {
    if !others_younger_than(store, txn.id(), patience) {
        return Ok(Batch::OlderTransactionRuns);
    }
    let ts = txn.id();
    let mut copied = Vec::with_capacity(batch.len());
    for &addr in batch {
        // A head that moved since it was classified was written by
        // someone else: the old version is dead now, or the block
        // waits (a pending write over it may still abort).
        if relocate(&mut txn, table, addr)? {
            copied.push(addr);
        } else if !matches!(
            classify(store, table, candidate, addr.slot(), false),
            Slot::Dead
        ) {
            return Ok(Batch::Busy);
        }
    }
    txn.commit()?;
    for addr in copied {
        assert_superseded(store, table, addr, ts);
    }
    Ok(Batch::Committed)
}

/// Checks that a version GC copied is dead once the copy committed: its
/// DRAM header names the copy's commit as its successor, and its
/// obsolete bit is set (the block can go once every slot is dead).
fn assert_superseded(store: &Store, table: &TableRt, addr: Addr, ts: u64) {
    let end = table.heap.header(addr).map(|h| h.end.load(Acquire));
    assert_eq!(
        end,
        Some(ts),
        "a relocated version is superseded by its committed copy ({addr:?})"
    );
    assert!(
        table.heap.is_obsolete(store.medium(), addr),
        "a relocated version is obsolete after its copy committed ({addr:?})"
    );
}

/// Publishes the running GC transaction's timestamp for its lifetime.
struct GcTxn<'s>(&'s Store);

impl<'s> GcTxn<'s> {
    fn announce(store: &'s Store, ts: u64) -> GcTxn<'s> {
        store.begin_gc_txn(ts);
        GcTxn(store)
    }
}

impl Drop for GcTxn<'_> {
    fn drop(&mut self) {
        self.0.end_gc_txn();
    }
}

/// Waits up to `patience` until every other running transaction began
/// after `ts`:
/// a copy then never has a timestamp above a transaction that may still
/// write its key (which would have to fail with a conflict). False if an
/// older one keeps running; the block waits for a later round.
fn others_younger_than(store: &Store, ts: u64, patience: Duration) -> bool {
    let deadline = Instant::now() + patience;
    loop {
        if store
            .oldest_running_except(GC_WORKER)
            .is_none_or(|o| o >= ts)
        {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::yield_now();
    }
}

/// How a slot of a candidate stands, judged by the index (obsolete bits
/// only chose the block); a slot that fails its checks is `Damaged`.
fn classify(
    store: &Store,
    table: &Arc<TableRt>,
    candidate: &Candidate,
    slot: u32,
    trust_header: bool,
) -> Slot {
    let Candidate { id, block, min_txn } = *candidate;
    let medium = store.medium();
    let heap = &table.heap;
    let addr = Addr::new(id.region, id.seq, slot);
    let txn = match heap.slot_word(medium, addr) {
        SlotWord::Written { txn, hole: false } if txn >= min_txn => txn,
        SlotWord::Invalid => return Slot::Damaged,
        _ => return Slot::Dead,
    };
    let header = &heap.tile(block)[slot as usize];
    if header.begin.load(Acquire) & PENDING != 0 {
        return Slot::Busy;
    }
    let end = header.end.load(Acquire);
    if end == REAPED {
        return Slot::Dead;
    }
    if end & LOCKED != 0 {
        return Slot::Busy;
    }
    if end != 0 {
        // A successor committed in this process: the index moved on to it.
        // The DRAM header says so without the checksum and index lookup
        // below (most slots of a candidate block end here).
        return Slot::Dead;
    }
    if trust_header && store.clock().issued_here(txn) {
        // Written in this process and never superseded, so its header
        // would know of a successor: the head of its key. This can only
        // call a slot live, never dead, and the relocation checks the
        // index before it copies (and asks again here, untrusting, when
        // the head is another).
        return Slot::Live(addr);
    }
    // The obsolete bit chose the block; the index decides about the slot,
    // so one damaged bit can never make GC drop a key's newest version.
    // The key is enough (a dead version's extent may be freed already).
    let Some(key) = heap.verified_key(medium, addr) else {
        return Slot::Damaged;
    };
    if header.end.load(Acquire) != end {
        return Slot::Busy;
    }
    let Some(head) = table.index().get(&key) else {
        return Slot::Dead;
    };
    if head == addr.0 {
        return Slot::Live(addr);
    }
    // Not the head: dead, unless the head is a pending write over this
    // version that may still abort and make it the head again.
    match heap.header(Addr(head)) {
        Some(h) if h.begin.load(Acquire) & PENDING == 0 => Slot::Dead,
        Some(h) if h.prev.load(Acquire) != addr.0 + 1 => Slot::Dead,
        _ => Slot::Busy,
    }
}

/// Whether no running or later reader can read the version at `addr`:
/// a successor committed (in this process, at `end`) below every running
/// reader, or (for a version recovered from the medium, whose header
/// knows nothing) the index's head of its key is another, committed
/// version, so its successor committed before the process began.
fn is_unreachable(
    store: &Store,
    table: &TableRt,
    oldest: Option<u64>,
    addr: Addr,
    header: &VersionHeader,
) -> bool {
    let end = header.end.load(Acquire);
    if end == REAPED || end & LOCKED != 0 || header.begin.load(Acquire) & PENDING != 0 {
        return false;
    }
    if end != 0 {
        return oldest.is_none_or(|o| o > end);
    }
    let Some(key) = table.heap.verified_key(store.medium(), addr) else {
        return false;
    };
    match table.index().get(&key) {
        Some(head) if head == addr.0 => false,
        Some(head) => table
            .heap
            .header(Addr(head))
            .is_some_and(|h| h.begin.load(Acquire) & PENDING == 0),
        None => false,
    }
}

/// Takes a retired block out of its region's chain (the caller fences).
fn unlink(store: &Store, id: BlockId) {
    let medium = store.medium();
    let table = store.table(id.table);
    let region = &table.heap.regions[id.region];
    // The chain as the DRAM block table has it, not the medium's link
    // (links of listed blocks are not validated at recovery): the next
    // block that stays. Every retired block is unlinked in this batch.
    let next = region
        .present()
        .find(|b| b.seq > id.seq && !b.is_retired())
        .map_or(0, |b| b.offset());
    let prev = region
        .present()
        .filter(|b| b.seq < id.seq && !b.is_retired())
        .last();
    match prev {
        Some(prev) => heap::set_next(medium, prev.offset(), next),
        None => catalog::set_region_head(medium, id.table, id.region, next),
    }
}

/// Makes every chain run through exactly the blocks the store has: a
/// crash between a checkpoint and the unlinking fence leaves a link to a
/// block that recovery already treats as free.
fn repair_links(store: &Store) -> Result<()> {
    let medium = store.medium();
    for table in store.tables() {
        for (region_no, region) in table.heap.regions.iter().enumerate() {
            let blocks: Vec<_> = region.present().filter(|b| !b.is_retired()).collect();
            let Some(first) = blocks.first() else {
                continue;
            };
            if catalog::region_head(medium, table.heap.def.id, region_no).ok()
                != Some(first.offset())
            {
                catalog::set_region_head(medium, table.heap.def.id, region_no, first.offset());
            }
            for pair in blocks.windows(2) {
                if heap::next_of(medium, pair[0].offset()) != Some(pair[1].offset()) {
                    heap::set_next(medium, pair[0].offset(), pair[1].offset());
                }
            }
        }
    }
    medium.fence()
}
