//! The log-free design's restart: turn whatever the medium holds into a
//! consistent store (FIR 4.4).
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
//! Each region is recovered by the heap (`TableHeap::recover_region`),
//! which knows the slot layout and decides each slot's fate from the
//! region's LCTT entry and the checkpoint's horizons; recovery collects
//! the committed versions to redo, counts, and checks the fates against
//! its invariants. Tables are recovered in parallel.

use super::super::report::RecoveryReport;
use crate::catalog::{self, TableDef, MAX_WORKERS};
use crate::checkpoint::{Chain, CheckpointImage, Durable, Extend, TableSection};
use crate::error::{Error, Result};
use crate::heap::{
    Addr, Held, RegionBlocks, RegionHorizon, RegionVisitor, SeqGapBudget, SlotFate, Space,
    TableHeap,
};
use crate::index::{key_prefix, BTree, TreeLoader, MAX_KEY_LEN};
use crate::medium::Medium;
use crate::parallel;
use crate::txn::{Clock, SecondaryRt, Store, TableRt};
use std::sync::Arc;
use std::time::{Duration, Instant};

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
    /// The largest txn id of a committed version the scan met.
    newest_committed: u64,
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

/// Recovers a store from a medium that holds a database. With
/// `readers_horizon` (a read-only open beside a writer, `readers.rs`),
/// the medium is a private image of a file the writer still appends to,
/// and the view is the database as of that horizon.
pub fn recover(
    medium: Medium,
    instance: u64,
    started: Instant,
    (use_checkpoint, node_versions): (bool, bool),
    readers_horizon: Option<u64>,
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
    // Beside a writer, what is above the horizon is a tail still being
    // written: uncommitted, as far as this view goes.
    let lctt: Vec<u64> = match readers_horizon {
        Some(horizon) => lctt.iter().map(|&t| t.min(horizon)).collect(),
        None => lctt,
    };
    let committed = Committed {
        lctt: &lctt,
        lease,
        readers_horizon,
    };
    let results = recover_tables(&medium, defs, committed, base, (instance, indexes))?;
    let mut newest_committed = 0;
    let mut extents = Vec::new();
    let tables = boxcar::Vec::new();
    let mut redone = Vec::new();
    for (table, counts, times, redone_here) in results {
        let id = table.heap.def.id;
        redone.extend(redone_here.into_iter().map(|addr| (id, addr)));
        for (worker, region) in table.heap.regions.iter().enumerate() {
            for block in region.present() {
                extents.push((block.offset(), table.heap.def.block_size as u64));
                extents.extend(table.heap.owned_extents(&medium, worker, block));
            }
        }
        report.blocks += counts.blocks;
        report.versions_scanned += counts.scanned;
        report.versions_committed += counts.committed;
        report.versions_undone += counts.undone;
        newest_committed = newest_committed.max(counts.newest_committed);
        report.undo_redo = report.undo_redo.max(times.0);
        report.index_build = report.index_build.max(times.1);
        report.checkpoint_entries += base.map_or(0, |_| {
            chain
                .as_ref()
                .map_or(0, |c| c.entry_count(table.heap.def.id))
        });
        report.index_entries += table.index().len() as u64;
        if !table.is_dropped() {
            attach_secondary_indexes(&medium, &table)?;
        }
        tables.push(table);
    }
    let table_ids: Vec<u32> = tables
        .iter()
        .filter(|(_, t)| !t.is_dropped())
        .map(|(_, t)| t.heap.def.id)
        .collect();
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
    // Every id the new clock hands out is above every committed one.
    assert!(
        lctt.iter().all(|&t| t < clock.peek()) && newest_committed < clock.peek(),
        "the recovered clock starts at {} with commits up to {newest_committed}",
        clock.peek()
    );
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

/// What the catalog says was committed: each region's LCTT entry, and
/// the txn-id lease, validated above all of them; for a reader beside a
/// writer, the lease's horizon (every entry is lowered to it).
#[derive(Clone, Copy)]
struct Committed<'l> {
    lctt: &'l [u64],
    lease: u64,
    readers_horizon: Option<u64>,
}

/// Recovers every table, in parallel.
fn recover_tables(
    medium: &Medium,
    defs: Vec<TableDef>,
    committed: Committed<'_>,
    base: Option<&CheckpointImage>,
    (instance, indexes): (u64, IndexSource<'_>),
) -> Result<Vec<TableResult>> {
    parallel::map(defs, |def| {
        let section = base.and_then(|img| img.table(def.id));
        let horizons = base.map_or(Horizons::default(), Horizons::of);
        recover_table(
            medium,
            def,
            committed,
            section,
            horizons,
            (instance, indexes),
        )
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
    Committed {
        lctt,
        lease,
        readers_horizon,
    }: Committed<'_>,
    section: Option<&TableSection>,
    horizons: Horizons,
    (instance, indexes): (u64, IndexSource<'_>),
) -> Result<TableResult> {
    if def.dropped {
        // Its blocks are free: no chain or image of it is read.
        let table = TableRt::recovered_dropped(TableHeap::new(def), BTree::new(), instance);
        let no_time = (Duration::ZERO, Duration::ZERO, 0);
        return Ok((Arc::new(table), ScanCounts::default(), no_time, Vec::new()));
    }
    let t_low = horizons.t_low;
    let phase = Instant::now();
    let heap = TableHeap::new(def);
    let lists = section.map(|s| &s.block_lists);
    let mut counts = ScanCounts::default();
    let mut found = Redo::default();
    let mut budget = SeqGapBudget::default();
    for (worker, &last_commit) in lctt.iter().enumerate() {
        let listed = lists.map_or(&[][..], |l| l[worker].as_slice());
        let range = horizons.of_region(worker);
        let mut region = RegionRedo::new(last_commit, lease, range, &mut found, &mut counts);
        let blocks = heap.recover_region(
            medium,
            worker,
            RegionBlocks {
                listed,
                budget: &mut budget,
                stop_above: readers_horizon,
            },
            RegionHorizon {
                last_commit,
                redo_from: range.from,
            },
            &mut region,
        )?;
        counts.blocks += blocks;
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
            && (slot, slots, block) == (def.max_record_len, def.slots_per_block, def.block_size);
        if !sane {
            return Err(Error::Corrupt(format!(
                "table {:?} has an impossible geometry",
                def.name
            )));
        }
    }
    Ok(())
}

/// Recovery's side of one region's recovery: collects the committed
/// versions the checkpoint lacks, counts for the report, and checks each
/// fate the heap decided against the invariants (DESIGN.md, Invariants 1;
/// Recovery 2). Everything checked here was decided from validated words,
/// so a failure is a bug, never damage.
struct RegionRedo<'r> {
    /// The region's LCTT entry, validated below the lease.
    last_commit: u64,
    /// Where the recovered clock restarts: the txn-id lease (at least 1).
    clock_start: u64,
    range: RedoRange,
    found: &'r mut Redo,
    counts: &'r mut ScanCounts,
    /// The last slot visited: slots come in address order.
    last: Option<Addr>,
    /// The tail started: nothing committed may follow.
    in_tail: bool,
}

impl<'r> RegionRedo<'r> {
    fn new(
        last_commit: u64,
        lease: u64,
        range: RedoRange,
        found: &'r mut Redo,
        counts: &'r mut ScanCounts,
    ) -> RegionRedo<'r> {
        let clock_start = lease.max(1);
        assert!(
            last_commit < clock_start,
            "LCTT entry validated below the lease"
        );
        RegionRedo {
            last_commit,
            clock_start,
            range,
            found,
            counts,
            last: None,
            in_tail: false,
        }
    }
}

impl RegionVisitor for RegionRedo<'_> {
    fn in_checkpoint(&self, txn: u64) -> bool {
        self.range.in_checkpoint(txn)
    }

    fn visit(&mut self, fate: SlotFate<'_>) {
        let addr = fate.addr();
        // Time order (invariant 1): one region's slots, each once, in order,
        // committed ones (and holes) a prefix, the tail after it.
        assert!(
            self.last.is_none_or(|last| last < addr),
            "slot {addr:?} visited out of order"
        );
        self.last = Some(addr);
        let counts = &mut *self.counts;
        match fate {
            SlotFate::Redo(version) => {
                // Redo: a version redone is committed, the checkpoint
                // lacks it, and its ts is below the recovered clock.
                assert!(!self.in_tail, "committed version redone after the tail");
                assert!(
                    version.txn <= self.last_commit
                        && version.txn < self.clock_start
                        && !self.range.in_checkpoint(version.txn),
                    "redone version {addr:?} of txn {} is not committed after the \
                     checkpoint (LCTT {}, clock from {})",
                    version.txn,
                    self.last_commit,
                    self.clock_start
                );
                counts.scanned += 1;
                counts.committed += 1;
                counts.newest_committed = counts.newest_committed.max(version.txn);
                let found = &mut *self.found;
                let key_at = found.keys.len();
                found.keys.extend_from_slice(version.key);
                found.found.push(Found {
                    prefix: key_prefix(version.key),
                    key_at,
                    key_len: version.key.len() as u16,
                    txn: version.txn,
                    addr,
                    tombstone: version.tombstone,
                });
            }
            SlotFate::InCheckpoint { txn, .. } => {
                assert!(!self.in_tail && txn <= self.last_commit && self.range.in_checkpoint(txn));
                counts.newest_committed = counts.newest_committed.max(txn);
            }
            SlotFate::Hole { txn, .. } => {
                assert!(!self.in_tail, "hole kept after the tail's start");
                counts.scanned += (txn >= self.range.from) as u64;
            }
            SlotFate::Undone {
                held, starts_tail, ..
            } => {
                // Undo: the tail starts once, and a slot cleared held no
                // committed version.
                assert_eq!(
                    starts_tail, !self.in_tail,
                    "the tail starts once, at {addr:?}"
                );
                self.in_tail = true;
                if let Held::Uncommitted { txn } = held {
                    assert!(
                        txn > self.last_commit,
                        "cleared a committed version at {addr:?}"
                    );
                }
                let current = held.is_current() as u64;
                counts.scanned += current * starts_tail as u64;
                counts.undone += current;
            }
        }
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
