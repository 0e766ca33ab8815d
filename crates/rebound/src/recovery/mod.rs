//! Restart: turn whatever the medium holds into a consistent store (FIR 4.4).
//!
//! Two designs share this code:
//! * **From an index checkpoint** (default): load each table's sorted run
//!   from the newest complete checkpoint, redo only versions with txn id ≥
//!   the checkpoint's `t_low` (found by binary search on the blocks' min
//!   txn, so work is proportional to the versions written since), undo the
//!   uncommitted tails, merge, and bulk-load each index bottom-up.
//! * **Full scan** (`CheckpointMode::Off`, the Zen-style design and a
//!   cross-check): every region is walked from its first block.
//!
//! A slot is committed iff `min_txn(block) ≤ txn ≤ LCTT[worker]` and it is
//! not a hole. The first slot that is not (and is not a hole) starts the
//! region's tail; every written slot after it is cleared, and a committed
//! slot after it means the medium broke the prefix invariant: `Corrupt`.
//! Tables are recovered in parallel.

use crate::catalog::{self, TableDef, MAX_TXN_ID, MAX_WORKERS};
use crate::checkpoint::{Chain, CheckpointImage, Durable, Extend, TableSection};
use crate::error::{Error, Result};
use crate::heap::{Addr, Block, Cursor, SlotWord, Space, TableHeap};
use crate::index::{key_prefix, BTree, TreeLoader, MAX_KEY_LEN};
use crate::medium::Medium;
use crate::parallel;
use crate::txn::{Clock, SecondaryRt, Store, TableRt};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What recovery did and how long each phase took.
#[derive(Debug, Clone, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(default))]
#[non_exhaustive]
pub struct RecoveryReport {
    /// True when the medium was freshly formatted (nothing to recover).
    pub fresh: bool,
    /// True when an index checkpoint was the starting point.
    pub from_checkpoint: bool,
    /// Sequence number of that checkpoint.
    pub checkpoint_sequence: u64,
    /// Versions with txn ids from here on were redone.
    pub redo_from_txn: u64,
    /// Superblock, catalog, LCTT, checkpoint image. `wal`: reading and
    /// verifying the snapshot and the log (analysis).
    pub metadata: Duration,
    /// Scanning regions: redo of committed versions and undo of the tails.
    /// `wal`: applying the log after the snapshot (redo).
    pub undo_redo: Duration,
    /// Merging checkpoint runs with redo and bulk-loading the indexes.
    /// `wal`: loading the snapshot's rows, building the primary indexes
    /// bottom-up and the secondary ones.
    pub index_build: Duration,
    /// From the start of `open` until transactions are accepted.
    pub total: Duration,
    pub tables: usize,
    pub blocks: u64,
    pub versions_scanned: u64,
    pub versions_committed: u64,
    pub versions_undone: u64,
    pub checkpoint_entries: u64,
    pub index_entries: u64,
}

/// A committed version found by the scan; its key is in `Redo::keys`.
struct Found {
    /// First 8 key bytes, big-endian, zero padded: settles most comparisons.
    prefix: u64,
    key_at: usize,
    key_len: u16,
    txn: u64,
    addr: Addr,
    tombstone: bool,
}

/// Committed versions found by the scan, keys packed in one arena so that
/// redo allocates nothing per version.
#[derive(Default)]
struct Redo {
    keys: Vec<u8>,
    found: Vec<Found>,
}

/// Counts one region scan contributes to the report.
#[derive(Default)]
struct ScanCounts {
    blocks: u64,
    scanned: u64,
    committed: u64,
    undone: u64,
}

/// Formats a zeroed medium of at least `DATA_START` bytes.
pub fn format(medium: &Medium) -> Result<()> {
    catalog::format(medium, unix_now())
}

/// Builds an empty store on a freshly formatted medium.
pub fn fresh(medium: Medium, instance: u64, first_ts: u64) -> Result<(Store, RecoveryReport)> {
    let start = Instant::now();
    let clock = Clock::recover(&medium, first_ts)?;
    let store = Store::new(
        medium,
        Space::new(catalog::DATA_START, Vec::new(), catalog::DATA_START),
        clock,
        boxcar::Vec::new(),
        instance,
    );
    let report = RecoveryReport {
        fresh: true,
        total: start.elapsed(),
        ..Default::default()
    };
    Ok((store, report))
}

/// What recovery hands to the database.
pub struct Recovered {
    pub store: Store,
    pub report: RecoveryReport,
    /// The checkpoint in force, if any.
    pub durable: Option<Durable>,
    /// The checkpoint whose runs still have to be loaded into the indexes.
    pub cold: Option<Arc<Chain>>,
    /// The versions redone from the medium (each key's newest since the
    /// checkpoint), by table id: what a first delta must hold.
    pub redone: Vec<(u32, Addr)>,
}

/// Recovers a store from a medium that holds a database.
pub fn recover(
    medium: Medium,
    instance: u64,
    started: Instant,
    (use_checkpoint, node_versions): (bool, bool),
) -> Result<Recovered> {
    let mut report = RecoveryReport::default();
    let phase = Instant::now();
    catalog::validate_superblock(&medium)?;
    if !use_checkpoint && catalog::gc_freed(&medium)? {
        return Err(Error::InvalidOption(
            "GC has freed blocks of this database; the full-scan design cannot \
             open it (use index checkpoints)"
                .into(),
        ));
    }
    let defs = catalog::read_tables(&medium)?;
    validate_defs(&defs)?;
    let lctt = (0..MAX_WORKERS)
        .map(|w| catalog::last_commit(&medium, w))
        .collect::<Result<Vec<_>>>()?;
    let lease = catalog::txn_lease(&medium)?;
    if lctt.iter().any(|&t| t >= lease.max(1)) {
        return Err(Error::Corrupt(
            "a committed txn id is not below the txn-id lease".into(),
        ));
    }
    let chain = match catalog::checkpoint_root(&medium)? {
        0 => None,
        root => Some(Chain::open(&medium, root)?),
    };
    let base = chain.as_ref().filter(|_| use_checkpoint).map(Chain::newest);
    let node_chain = chain
        .as_ref()
        .filter(|c| use_checkpoint && c.newest().nodes);
    if chain
        .as_ref()
        .is_some_and(|c| c.images().iter().any(|i| i.nodes != c.newest().nodes))
    {
        return Err(Error::Corrupt(
            "checkpoint: a chain mixes node images and entries".into(),
        ));
    }
    if let Some(chain) = &chain {
        check_sections(chain, &defs)?;
    }
    report.from_checkpoint = base.is_some();
    report.checkpoint_sequence = base.map_or(0, |i| i.sequence);
    report.redo_from_txn = base.map_or(0, |i| i.t_low);
    report.metadata = phase.elapsed();
    report.tables = defs.len();

    let indexes = IndexSource {
        node_chain,
        node_versions: node_versions || node_chain.is_some(),
    };
    let results = recover_tables(&medium, defs, &lctt, base, (instance, indexes))?;
    let mut extents = Vec::new();
    let tables = boxcar::Vec::new();
    let mut redone = Vec::new();
    for (table, counts, times, redone_here) in results {
        let id = table.heap.def.id;
        redone.extend(redone_here.into_iter().map(|addr| (id, addr)));
        for region in table.heap.regions.iter() {
            extents.extend(
                region
                    .present()
                    .map(|b| (b.offset(), table.heap.def.block_size as u64)),
            );
        }
        report.blocks += counts.blocks;
        report.versions_scanned += counts.scanned;
        report.versions_committed += counts.committed;
        report.versions_undone += counts.undone;
        report.undo_redo = report.undo_redo.max(times.0);
        report.index_build = report.index_build.max(times.1);
        report.checkpoint_entries += base.map_or(0, |_| {
            chain
                .as_ref()
                .map_or(0, |c| c.entry_count(table.heap.def.id))
        });
        report.index_entries += table.index.len() as u64;
        attach_secondary_indexes(&medium, &table)?;
        tables.push(table);
    }
    let table_ids: Vec<u32> = tables.iter().map(|(_, t)| t.heap.def.id).collect();
    let durable = chain
        .as_ref()
        .map(|chain| recovered_chain(&medium, chain, &table_ids, use_checkpoint));
    for (offset, len) in durable.iter().flat_map(|d| d.extents.iter()) {
        extents.push((*offset, *len));
    }
    // Node images are in the DRAM indexes already: nothing is cold.
    let cold = chain
        .filter(|c| use_checkpoint && !c.newest().nodes)
        .map(Arc::new);
    medium.fence()?;
    let clock = Clock::recover(&medium, lease)?;
    let space = Space::new(catalog::DATA_START, extents, medium.len());
    let store = Store::new(medium, space, clock, tables, instance);
    store.publish_recovered(&lctt);
    report.total = started.elapsed();
    Ok(Recovered {
        store,
        report,
        durable,
        cold,
        redone,
    })
}

/// The chain in force as the checkpointer takes it over. Recovered from
/// it, the DRAM index is the chain plus the redone versions, so deltas
/// that start from those versions may extend it; recovered by a full
/// scan, the next checkpoint replaces it.
fn recovered_chain(
    medium: &Medium,
    chain: &Chain,
    table_ids: &[u32],
    recovered_from_it: bool,
) -> Durable {
    let newest = chain.newest();
    let extents: Vec<(u64, u64)> = chain
        .images()
        .iter()
        .map(|img| {
            (
                img.offset,
                img.len.next_multiple_of(crate::heap::BLOCK_ALIGN),
            )
        })
        .collect();
    let nodes = chain.newest().nodes;
    let sizes: Vec<u64> = match nodes {
        true => chain
            .images()
            .iter()
            .map(|image| {
                let parts = image.sections().iter().map(|s| s.node_part(medium));
                parts.map(|p| p.map_or(0, |p| p.count)).sum()
            })
            .collect(),
        false => chain.sizes(),
    };
    let (base_entries, delta_entries) = match sizes.split_last() {
        Some((base, deltas)) => (*base, deltas.iter().sum()),
        None => (0, 0),
    };
    Durable {
        offset: newest.offset,
        sequence: newest.sequence,
        t_low: newest.t_low,
        extents,
        base_entries,
        delta_entries,
        tables: table_ids
            .iter()
            .copied()
            .filter(|&id| chain.has_table(id))
            .collect(),
        extend: match (recovered_from_it, nodes) {
            // The loaded nodes carry their ids: deltas of them extend it.
            (true, true) => Extend::Anything,
            (true, false) => Extend::DeltasOnly,
            (false, _) => Extend::Nothing,
        },
        nodes,
    }
}

/// Where a recovered table's primary index comes from, besides redo.
#[derive(Clone, Copy)]
struct IndexSource<'c> {
    /// A chain of node images (IACoW) to load the index from.
    node_chain: Option<&'c Chain>,
    /// The index keeps node ids and versions (IACoW).
    node_versions: bool,
}

/// The index the newest node images of `table` in `chain` form.
fn load_node_tree(medium: &Medium, chain: &Chain, table: u32) -> Result<BTree> {
    let bad = |why: String| Error::Corrupt(format!("checkpoint: table {table}'s nodes: {why}"));
    let parts = chain
        .sections(table)
        .into_iter()
        .map(|section| section.node_part(medium))
        .collect::<Result<Vec<_>>>()?;
    let newest = parts.first().ok_or_else(|| bad("no section".into()))?;
    // Ids are dense below the newest limit, each in some image of the chain.
    let images: u64 = parts.iter().map(|p| p.count).sum();
    if newest.id_limit > images.saturating_add(1) {
        return Err(bad("the id limit exceeds the images".into()));
    }
    let loader = TreeLoader::new(newest.id_limit);
    // Newest image first (an id's older images are then skipped); the
    // images of one part have distinct ids and load on all cores.
    for part in &parts {
        // A thread is worth it for 64 images, not for one.
        let per_thread = part.count.div_ceil(parallel::cores() as u64).max(64);
        let firsts = (0..part.count).step_by(per_thread as usize);
        parallel::map(firsts, |first| {
            for i in first..(first + per_thread).min(part.count) {
                let read = |node: &mut [u8]| part.read(medium, i, node);
                match loader.add_read(read) {
                    Ok(Some(_)) => {}
                    Ok(None) => return Err(bad("a node image fails its checksum".into())),
                    Err(e) => return Err(bad(format!("{e:?}"))),
                }
            }
            Ok(())
        })
        .into_iter()
        .collect::<Result<()>>()?;
    }
    loader
        .finish(newest.root_id)
        .map_err(|e| bad(format!("{e:?}")))
}

/// Every leaf value of loaded node images must name a slot of a block
/// the heap holds: a node passes its checksum and structure checks with
/// any 64-bit payload, and an address naming no block would otherwise
/// surface at the first read as a retryable `Conflict` that no retry
/// clears. One pass over the index in DRAM; slots are not read.
fn check_node_addresses(heap: &TableHeap, index: &BTree) -> Result<()> {
    let unknown = std::cell::Cell::new(None);
    index.walk(
        |_, _, _, _| unknown.get().is_none(),
        |_, addr| {
            if unknown.get().is_none() && heap.block(Addr(addr)).is_none() {
                unknown.set(Some(addr));
            }
        },
    );
    match unknown.get() {
        None => Ok(()),
        Some(addr) => Err(Error::Corrupt(format!(
            "checkpoint: table {}'s nodes name {:?}, in no block",
            heap.def.id,
            Addr(addr)
        ))),
    }
}

/// A recovered table, its scan counts, its phase times and checkpoint
/// entries, and the addresses of its redone versions.
type TableResult = (
    Arc<TableRt>,
    ScanCounts,
    (Duration, Duration, u64),
    Vec<Addr>,
);

/// Recovers every table, in parallel.
fn recover_tables(
    medium: &Medium,
    defs: Vec<TableDef>,
    lctt: &[u64],
    base: Option<&CheckpointImage>,
    (instance, indexes): (u64, IndexSource<'_>),
) -> Result<Vec<TableResult>> {
    parallel::map(defs, |def| {
        let section = base.and_then(|img| img.table(def.id));
        let horizons = base.map_or(Horizons::default(), Horizons::of);
        recover_table(medium, def, lctt, section, horizons, (instance, indexes))
    })
    .into_iter()
    .collect()
}

/// Which committed versions the checkpoint already holds.
#[derive(Default, Clone)]
struct Horizons {
    t_low: u64,
    long_t_low: u64,
    /// Per long region: its commits up to here are in the checkpoint.
    long_published: Vec<u64>,
}

impl Horizons {
    fn of(image: &CheckpointImage) -> Horizons {
        Horizons {
            t_low: image.t_low,
            long_t_low: image.long_t_low,
            long_published: image.long_published.clone(),
        }
    }

    /// The redo range of a region: (redo from, committed versions below
    /// this and at or below the published mark are in the checkpoint).
    fn of_region(&self, worker: usize) -> RedoRange {
        if !catalog::is_long_region(worker) {
            return RedoRange {
                from: self.t_low,
                covered_below: self.t_low,
                covered_up_to: u64::MAX,
            };
        }
        let published = self
            .long_published
            .get(worker - catalog::LONG_REGIONS)
            .copied()
            .unwrap_or(0);
        RedoRange {
            from: self.long_t_low,
            covered_below: self.t_low,
            covered_up_to: published,
        }
    }
}

/// Versions from `from` on are redone, except committed ones below
/// `covered_below` with a txn id up to `covered_up_to`, which the
/// checkpoint holds (or superseded): redone, they could shadow newer ones.
#[derive(Clone, Copy)]
struct RedoRange {
    from: u64,
    covered_below: u64,
    covered_up_to: u64,
}

impl RedoRange {
    fn in_checkpoint(&self, txn: u64) -> bool {
        txn < self.from || (txn < self.covered_below && txn <= self.covered_up_to)
    }
}

fn recover_table(
    medium: &Medium,
    def: TableDef,
    lctt: &[u64],
    section: Option<&TableSection>,
    horizons: Horizons,
    (instance, indexes): (u64, IndexSource<'_>),
) -> Result<TableResult> {
    let t_low = horizons.t_low;
    let phase = Instant::now();
    let heap = TableHeap::new(def);
    let lists = section.map(|s| &s.block_lists);
    let mut counts = ScanCounts::default();
    let mut found = Redo::default();
    let mut vacancies = crate::heap::MAX_SEQ_GAP;
    for (worker, &last_commit) in lctt.iter().enumerate() {
        let listed = lists.map_or(&[][..], |l| l[worker].as_slice());
        load_blocks(medium, &heap, (worker, &mut vacancies), listed)?;
        counts.blocks += heap.regions[worker].present().count() as u64;
        scan_region(
            medium,
            &heap,
            worker,
            last_commit,
            horizons.of_region(worker),
            &mut found,
            &mut counts,
        )?;
    }
    let undo_redo = phase.elapsed();
    let phase = Instant::now();
    let checkpoint_entries = section.map_or(0, |s| s.entry_count);
    // From a checkpoint, tombstones stay in the index: they shadow the
    // run's older entries until clean-up (deferred deletion).
    let Newest {
        newest,
        tombstones,
        superseded,
    } = newest_versions(&mut found, t_low > 0);
    // A tombstone reaped before the crash had its bit set; it is its key's
    // head again now, and its bit would make GC nominate its block.
    for addr in tombstones {
        heap.clear_obsolete(medium, addr);
    }
    // A commit leaves its predecessors' bits to the next checkpoint: the
    // ones redone with their successors are set again here, the ones in
    // the checkpoint as the image is loaded (`txn::obsolete_bits`).
    for addr in superseded {
        heap.set_obsolete(medium, addr);
    }
    let redone = newest.iter().map(|&(_, addr)| Addr(addr)).collect();
    let id = heap.def.id;
    let index = match indexes.node_chain.filter(|chain| chain.has_table(id)) {
        Some(chain) => {
            let index = load_node_tree(medium, chain, id)?;
            check_node_addresses(&heap, &index)?;
            // Redone versions are newer than the images' (which hold only
            // versions committed by the checkpoint's end), and the image
            // versions they replace are superseded: their bits may have
            // waited for a checkpoint that never came (`txn::obsolete_bits`).
            // Key ranges go in on all cores.
            let per_thread = newest.len().div_ceil(parallel::cores()).max(1024);
            parallel::map(newest.chunks(per_thread), |range| {
                let mut replaced = Vec::new();
                index.upsert_sorted_noting(range, &mut replaced);
                for &addr in &replaced {
                    heap.set_obsolete(medium, Addr(addr));
                }
                // This thread's write-backs; recovery's fence is another's.
                match replaced.is_empty() {
                    true => Ok(()),
                    false => medium.fence(),
                }
            })
            .into_iter()
            .collect::<Result<()>>()?;
            index
        }
        None if indexes.node_versions => BTree::bulk_load(newest).with_node_versions(),
        None => BTree::bulk_load(newest),
    };
    let table = Arc::new(TableRt::new(heap, index, instance));
    Ok((
        table,
        counts,
        (undo_redo, phase.elapsed(), checkpoint_entries),
        redone,
    ))
}

/// Gives a recovered table its secondary index definitions, unbuilt: they
/// live in DRAM only and are rebuilt by the strategy `open` chose. A
/// definition `create_index` would refuse for this table is damage.
fn attach_secondary_indexes(medium: &Medium, table: &TableRt) -> Result<()> {
    let def = &table.heap.def;
    for index in catalog::read_indexes(medium, def.id)? {
        let fits = index.parts.iter().all(|p| {
            let limit = match p.source {
                catalog::Source::PrimaryKey => def.max_key_len,
                catalog::Source::Value => def.max_value_len,
            };
            p.start.saturating_add(p.len) <= limit
        }) && index.key_len() + def.max_key_len as usize <= MAX_KEY_LEN;
        let repeated = table
            .secondaries
            .iter()
            .any(|(_, other)| other.def.name == index.name);
        // A failed `create_index` leaves its number unused.
        while table.secondaries.count() < index.number as usize {
            table.secondaries.push(Arc::new(SecondaryRt::placeholder()));
        }
        if !fits || repeated || index.number as usize != table.secondaries.count() {
            return Err(Error::Corrupt(format!(
                "index slot {} of table {:?} does not fit the table",
                index.number, def.name
            )));
        }
        table
            .secondaries
            .push(Arc::new(SecondaryRt::new(index, false)));
    }
    Ok(())
}

/// Every section of an image names a created table, once: a section
/// that names another id would leave its table's entries in no image
/// (its rows below the horizon silently gone), and a table named twice
/// would have one of its sections ignored.
fn check_sections(chain: &Chain, defs: &[TableDef]) -> Result<()> {
    for image in chain.images() {
        let mut ids: Vec<u32> = image.sections().iter().map(|s| s.table).collect();
        let known = ids.iter().all(|&id| defs.iter().any(|d| d.id == id));
        let count = ids.len();
        ids.sort_unstable();
        ids.dedup();
        if !known || ids.len() != count {
            return Err(Error::Corrupt(format!(
                "checkpoint at {}: sections of unknown or repeated tables",
                image.offset
            )));
        }
    }
    Ok(())
}

/// Table limits are checked against what `create_table` accepts before
/// anything is sized by them.
fn validate_defs(defs: &[TableDef]) -> Result<()> {
    for (i, def) in defs.iter().enumerate() {
        if def.max_value_len > crate::heap::MAX_VALUE_BYTES
            || def.max_key_len as usize > MAX_KEY_LEN
        {
            return Err(Error::Corrupt(format!(
                "table {:?} has impossible limits",
                def.name
            )));
        }
        let (slot, slots, block) =
            crate::heap::geometry(def.max_key_len, def.max_value_len, def.slots_per_block);
        let sane = def.id as usize == i
            && (1..=MAX_KEY_LEN).contains(&(def.max_key_len as usize))
            && (crate::heap::MIN_SLOTS_PER_BLOCK..=crate::heap::MAX_SLOTS_PER_BLOCK)
                .contains(&def.slots_per_block)
            && (slot, slots, block) == (def.slot_size, def.slots_per_block, def.block_size);
        if !sane {
            return Err(Error::Corrupt(format!(
                "table {:?} has an impossible geometry",
                def.name
            )));
        }
    }
    Ok(())
}

/// Registers a region's blocks: those listed by the checkpoint (bounds
/// checked only; headers are validated when scanned), then the chain that
/// continues from the last of them (or from the region head), validated.
/// Sequence numbers may skip (collected blocks) but always ascend, and
/// the numbers skipped are charged to `vacancies`, the table's budget:
/// each costs an entry in the block table, so a file that skips 4 Mi
/// numbers at every block of every region cannot make recovery allocate
/// without bound.
fn load_blocks(
    medium: &Medium,
    heap: &TableHeap,
    (worker, vacancies): (usize, &mut u64),
    listed: &[(u64, u64)],
) -> Result<()> {
    let region = &heap.regions[worker];
    let mut charge = |seq: u64| -> Result<()> {
        *vacancies = vacancies
            .checked_sub(region.vacancies_before(seq))
            .ok_or_else(|| {
                Error::Corrupt(format!(
                    "table {} skips more than {} block sequence numbers",
                    heap.def.id,
                    crate::heap::MAX_SEQ_GAP
                ))
            })?;
        Ok(())
    };
    let block_size = heap.def.block_size as u64;
    for &(seq, offset) in listed {
        if !crate::heap::block::in_data_area(medium, offset, block_size) {
            return Err(Error::Corrupt(format!(
                "checkpoint lists a block outside the medium at {offset}"
            )));
        }
        charge(seq)?;
        region.push(Block::new(offset, seq as u32))?;
    }
    let (mut min_seq, mut offset) = match listed.last() {
        None => (0, catalog::region_head(medium, heap.def.id, worker)?),
        Some(&(seq, at)) => (seq + 1, heap.validate_block(medium, at, worker, seq)?.0),
    };
    let max_blocks = medium.len() / block_size;
    let mut chained = 0;
    while offset != 0 {
        if chained >= max_blocks {
            return Err(Error::Corrupt(format!(
                "block chain of table {} region {worker} loops",
                heap.def.id
            )));
        }
        let (seq, next, _) = heap.validate_chained(medium, offset, worker, min_seq)?;
        charge(seq)?;
        region.push(Block::new(offset, seq as u32))?;
        offset = next;
        min_seq = seq + 1;
        chained += 1;
    }
    Ok(())
}

/// Position (among the region's present blocks) of the first block that
/// can hold a slot with txn id ≥ `t_low`: the block before the first one
/// allocated at or after `t_low`.
fn first_block_from(
    medium: &Medium,
    heap: &TableHeap,
    worker: usize,
    blocks: &[&Block],
    t_low: u64,
) -> Result<usize> {
    let (mut lo, mut hi) = (0usize, blocks.len());
    while lo < hi {
        let mid = (lo + hi) / 2;
        let block = &blocks[mid];
        let (_, min_txn) = heap.validate_block(medium, block.offset(), worker, block.seq as u64)?;
        if min_txn < t_low {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    Ok(lo.saturating_sub(1))
}

/// Redo (collect committed versions the checkpoint lacks) and undo
/// (clear the tail) of one region.
fn scan_region(
    medium: &Medium,
    heap: &TableHeap,
    worker: usize,
    last_commit: u64,
    range: RedoRange,
    found: &mut Redo,
    counts: &mut ScanCounts,
) -> Result<()> {
    let t_low = range.from;
    let region = &heap.regions[worker];
    let capacity = heap.def.slots_per_block;
    let blocks: Vec<&Block> = region.present().collect();
    let first = if t_low == 0 {
        0
    } else {
        first_block_from(medium, heap, worker, &blocks, t_low)?
    };
    let mut tail: Option<Cursor> = None;
    let mut buf = Vec::new();
    for block in &blocks[first.min(blocks.len())..] {
        let b = block.seq as usize;
        let (_, min_txn) = heap.validate_block(medium, block.offset(), worker, b as u64)?;
        for s in 0..capacity {
            let addr = Addr::new(worker, b as u32, s);
            let word = heap.slot_txn(medium, addr);
            let (txn, hole) = match SlotWord::decode(word) {
                SlotWord::Empty => (0, false),
                SlotWord::Written { txn, hole } => (txn, hole),
                SlotWord::Invalid => {
                    return Err(Error::Corrupt(format!(
                        "slot {addr:?} of table {} has a damaged txn word",
                        heap.def.id
                    )))
                }
            };
            let current = word != 0 && txn >= min_txn;
            let committed = current && !hole && txn <= last_commit;
            if tail.is_some() {
                if committed {
                    return Err(Error::Corrupt(format!(
                        "committed version after the uncommitted tail at {addr:?}"
                    )));
                }
                undo(medium, heap, addr, word, current, counts);
                continue;
            }
            if (current && hole && txn < t_low) || (committed && range.in_checkpoint(txn)) {
                continue;
            }
            counts.scanned += current as u64;
            if current && hole {
                continue;
            }
            if !committed {
                tail = Some(Cursor {
                    block: b as u32,
                    slot: s,
                });
                undo(medium, heap, addr, word, current, counts);
                continue;
            }
            let (key_len, tombstone) =
                heap.verify_into(medium, addr, &mut buf).ok_or_else(|| {
                    Error::Corrupt(format!("committed version at {addr:?} fails its checksum"))
                })?;
            counts.committed += 1;
            let key_at = found.keys.len();
            found.keys.extend_from_slice(&buf[12..12 + key_len]);
            found.found.push(Found {
                prefix: key_prefix(&buf[12..12 + key_len]),
                key_at,
                key_len: key_len as u16,
                txn,
                addr,
                tombstone,
            });
        }
    }
    if let Some(tail) = tail {
        unstamp_blocks_after(medium, &blocks, tail.block);
    }
    *region.cursor.lock() = tail.unwrap_or(match blocks.last() {
        Some(last) => Cursor {
            block: last.seq,
            slot: capacity,
        },
        None => Cursor::default(),
    });
    Ok(())
}

/// Blocks after the tail's block were linked by a transaction that did
/// not survive; the region will continue in them after filling the tail's
/// block. Redo finds its start by the blocks' min txn, which must never be
/// below a slot of the block before, so until a transaction writes into
/// them (and stamps its own id) they carry the largest id: nothing in them
/// counts, and a later redo always starts at or before the tail's block.
fn unstamp_blocks_after(medium: &Medium, blocks: &[&Block], tail_block: u32) {
    for block in blocks.iter().filter(|b| b.seq > tail_block) {
        let at = block.offset() + crate::heap::MIN_TXN_AT;
        medium.store(at, catalog::pack(MAX_TXN_ID));
        medium.persist(at, 8);
    }
}

fn undo(
    medium: &Medium,
    heap: &TableHeap,
    addr: Addr,
    word: u64,
    current: bool,
    counts: &mut ScanCounts,
) {
    // The slot will be written again and must not inherit a bit: an abort
    // cut short can leave a hole's bit without the hole (or the slot).
    heap.clear_obsolete(medium, addr);
    if word != 0 {
        heap.clear_slot(medium, addr);
        counts.undone += current as u64;
    }
}

/// What redo keeps of the committed versions it found.
struct Newest<'k> {
    /// The newest version per key, in key order (tombstones only when asked).
    newest: Vec<(&'k [u8], u64)>,
    /// The tombstones among them.
    tombstones: Vec<Addr>,
    /// Every other version found: a newer one of its key was found too.
    superseded: Vec<Addr>,
}

fn newest_versions(redo: &mut Redo, keep_tombstones: bool) -> Newest<'_> {
    let Redo { keys, found } = redo;
    let key = |f: &Found| &keys[f.key_at..f.key_at + f.key_len as usize];
    found.sort_unstable_by(|a, b| {
        a.prefix
            .cmp(&b.prefix)
            .then_with(|| key(a).cmp(key(b)))
            .then(a.txn.cmp(&b.txn))
    });
    let mut kept = Newest {
        newest: Vec::with_capacity(found.len()),
        tombstones: Vec::new(),
        superseded: Vec::new(),
    };
    for (i, f) in found.iter().enumerate() {
        // The last version of each run of equal keys is the newest.
        let newest = found.get(i + 1).is_none_or(|next| key(next) != key(f));
        if !newest {
            kept.superseded.push(f.addr);
        } else if keep_tombstones || !f.tombstone {
            kept.newest.push((key(f), f.addr.0));
            if f.tombstone {
                kept.tombstones.push(f.addr);
            }
        }
    }
    kept
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}
