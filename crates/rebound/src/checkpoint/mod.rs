//! Index leaf checkpoints (FIR 4.3) with HiEngine's correctness rules.
//!
//! A checkpoint is one sorted run per table of `key → logical address of
//! the newest committed version`, plus each region's block list and a redo
//! low-water mark `t_low`. Recovery loads the runs, redoes only versions
//! with txn id ≥ `t_low`, and bulk-loads the indexes bottom-up.
//!
//! # Why it is correct although not transaction-consistent
//! * `t_low` is taken before the index is read and is at or below the
//!   timestamp of every transaction running then or later. Any version the
//!   scan did not see as committed belongs to such a transaction, so redo
//!   from `t_low` finds it.
//! * Entries of running transactions are traced back to their last
//!   committed version (FIR 4.3.2); tombstones and keys with no committed
//!   version are left out (deletes are index tombstones until clean-up,
//!   HiEngine's deferred deletion, so a deleted key can never be missing
//!   from the checkpoint while its tombstone is not yet committed).
//! * Incremental checkpoints skip a subtree whose update time (the largest
//!   txn id that wrote below it) is below the previous checkpoint's
//!   `t_low`: every write the previous checkpoint can have missed comes from
//!   a transaction with a timestamp at or above it, so a skipped subtree
//!   holds exactly what the previous checkpoint recorded, which is copied.
//! * The image is written to a fresh extent and fenced before the root
//!   pointer switches to it, so a crash mid-checkpoint leaves the previous
//!   checkpoint in force; its extent is freed only after the switch.
//!
//! # Chains (HiEngine's ChainIndex, `CheckpointMode::Chain`, and
//! MirrorIndex, `CheckpointMode::Mirror`)
//! A delta image holds only the keys committed since its predecessor,
//! found from a change log filled at commit (`txn::ChangeLog`: a list of
//! addresses per worker, or with MirrorIndex a head tree of keys per
//! table), not from a walk of the index: a checkpoint costs what changed.
//! The chain's view of a key is its newest image's entry; `chain` reads
//! chains, `fold` keeps them short. Horizons and block lists are the
//! newest image's.
//!
//! # Node images (HiEngine's IACoW, `CheckpointMode::IaCow`)
//! The same images with magic `RBCKPN05` hold, per table, the images of
//! the index nodes changed since the predecessor instead of entries: see
//! `nodes` for the protocol and the node part's layout.
//!
//! # Image layout (little-endian, at a 4096-aligned extent)
//! ```text
//! 0   [u8; 8]  magic "RBCKPT06"
//! 8   u64      sequence number
//! 16  u64      t_low: recovery redoes versions with txn id ≥ t_low
//! 24  u64      image length in bytes
//! 32  u32      table count          36  u32  crc32c of bytes 576..length
//! 40  u32      crc32c of bytes 0..40 ++ 44..576
//! 44  u32      depth: images in the chain this one ends (1: a base)
//! 48  u64      long_t_low: long-transaction regions are redone from here
//! 56  u64      previous: the image this is a delta of (0 for a base)
//! 64  [u64; 64] per long-transaction region: its newest commit the
//!     checkpoint includes (recovery does not redo commits up to it)
//! 576 per table:
//!       head: u32 table id, u32 meta crc, u64 entry count, u64 entry
//!       bytes, MAX_WORKERS × u64 block count;
//!       block lists: every listed block as (u64 sequence number, u64
//!       offset), region by region, sequence numbers strictly ascending
//!       (blocks GC emptied are not listed);
//!       entries, strictly ascending by key, in groups of 64, each
//!       (see `entry`): varint shared: the longest prefix the key shares
//!       with the previous key of its group (0 for a group's first);
//!       varint suffix length; the key's bytes after the shared ones;
//!       varint address tag: 0 for a tombstone (in a delta: deleted since
//!       the predecessor), else 1 + zigzag(address − the group's previous
//!       live address, 0 before its first), wrapping;
//!       fences, one per group: u64 offset (relative to the entries) of
//!       its first entry, u32 crc32c of the group's bytes, u32 reserved.
//!     meta crc = crc32c(head with that field zero ++ lists); fences are
//!     read on demand and never trusted (each group's crc is checked)
//! varint: LEB128, 7 bits a byte, low first, at most 10 bytes.
//! ```
//! Header, meta and group checksums are verified before what they cover
//! is used (see `image`), so a damaged image is `Corrupt`, never a block
//! list, an allocation size or an answer.

mod chain;
mod cold;
mod cost;
mod entry;
mod fold;
#[cfg(test)]
mod fuzz_tests;
mod image;
mod nodes;
mod writer;

pub use chain::Chain;
pub use cold::{load_cold, ColdRun};
pub use fold::{FoldJob, Folded};

pub use cost::CostModel;
pub use image::{CheckpointImage, TableSection, MAX_CHAIN, TOMBSTONE};
pub use writer::RunWriter;

use crate::catalog;
use crate::error::Result;
use crate::heap::tile::PENDING;
use crate::heap::Addr;
use crate::index::BTree;
use crate::medium::Medium;
use crate::txn::{Capture, Changes, Store, TableRt};
use std::ops::Bound;
use std::sync::atomic::Ordering::Acquire;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

/// The range of `Options::checkpoint_chain_depth`: a merge needs two
/// deltas above a base, and a chain may hold at most `MAX_CHAIN` images.
pub const MIN_CHAIN_DEPTH: usize = 3;
pub const MAX_CHAIN_DEPTH: usize = MAX_CHAIN as usize - 1;

/// Which index checkpoints to take.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub enum CheckpointMode {
    /// No index checkpoints: recovery scans every version (Zen-style).
    Off,
    /// Always all leaf entries.
    Full,
    /// Changed leaves merged with the previous checkpoint (full when there is none).
    Incremental,
    /// Full or incremental per checkpoint, by FIR's time-cost model.
    CostModel,
    /// Only the keys committed since the previous checkpoint, as a delta
    /// image linked to it (HiEngine's ChainIndex, the default). Deltas are
    /// merged once the chain is `checkpoint_chain_depth` long, and folded
    /// into a new base (in the background) once they hold half as many
    /// entries as the base.
    #[default]
    Chain,
    /// Delta images as with `Chain`, recorded as HiEngine's MirrorIndex
    /// does: every commit also upserts its keys into a per-table head
    /// tree (a second B+-tree), which a checkpoint freezes and writes in
    /// key order. The live index is the Mirror tree that serves reads.
    Mirror,
    /// HiEngine's IACoW: primary indexes keep node ids and versions, and a
    /// checkpoint writes the images of the nodes changed since the previous
    /// one (epoch-based copy-on-write keeps them as they were when it
    /// began); recovery loads the newest image of every node, with no
    /// index build. See `checkpoint::nodes`.
    IaCow,
}

impl CheckpointMode {
    /// Whether checkpoints are deltas linked into a chain.
    pub fn chains(self) -> bool {
        self.capture() != Capture::Off
    }

    /// How commits record their versions for the next delta.
    pub(crate) fn capture(self) -> Capture {
        match self {
            CheckpointMode::Chain => Capture::Log,
            CheckpointMode::Mirror => Capture::HeadTrees,
            _ => Capture::Off,
        }
    }
}

/// What one checkpoint did.
#[derive(Debug, Clone, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(default))]
#[non_exhaustive]
pub struct CheckpointStats {
    pub sequence: u64,
    pub incremental: bool,
    /// A delta image linked to the previous checkpoint (ChainIndex).
    pub delta: bool,
    /// Images in the chain in force afterwards (1 for a base alone).
    pub chain_length: u32,
    /// Deltas merged into one after this checkpoint (0 if none were).
    pub deltas_merged: u32,
    /// The chain was folded into a new base right after this checkpoint
    /// (inline folds only; background folds are installed by a later one).
    pub folded: bool,
    pub t_low: u64,
    pub duration: Duration,
    pub entries: u64,
    /// Entries read from the live index (resolved through version chains).
    pub entries_resolved: u64,
    /// Entries copied from the previous checkpoint for skipped subtrees.
    pub entries_copied: u64,
    pub subtrees_skipped: u64,
    pub bytes: u64,
    /// Time spent collecting entries (traversal, resolution, merge).
    pub collect_time: Duration,
    /// Index entries of deleted keys removed after the checkpoint.
    pub tombstones_removed: u64,
    /// FIR's skew coefficient α of the sampled updates (eq. 2).
    pub alpha: f64,
    pub predicted_full_ns: f64,
    pub predicted_incremental_ns: f64,
}

/// The durable checkpoint currently in force.
#[derive(Debug, Clone)]
pub struct Durable {
    /// The newest image: the root.
    pub offset: u64,
    pub sequence: u64,
    pub t_low: u64,
    /// Every image of the chain as (offset, extent length), newest first.
    pub extents: Vec<(u64, u64)>,
    /// Entries in the base image and in the deltas after it.
    pub base_entries: u64,
    pub delta_entries: u64,
    /// Tables the chain has sections for.
    pub tables: Vec<u32>,
    /// What the next checkpoint may build on this chain.
    pub extend: Extend,
    /// The chain's images hold node images (IACoW), not entries.
    pub nodes: bool,
}

/// What a checkpoint may build on the chain in force.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Extend {
    /// Nothing: the next checkpoint is full. After recovery in the leaf
    /// modes, whose incremental walk would miss the redone versions (the
    /// DRAM index built for them carries no update times).
    Nothing,
    /// Deltas only, until the next full checkpoint: after recovery in
    /// chain mode, where the change log starts seeded with the redone
    /// versions (so a delta covers them) but an incremental walk would
    /// still miss them.
    DeltasOnly,
    Anything,
}

/// Takes checkpoints one at a time and remembers the one in force.
pub struct Checkpointer {
    mode: CheckpointMode,
    /// Images in a chain after which its deltas are merged.
    compact_depth: usize,
    /// Folds run on a thread of the caller's (`fold_job`), not inline.
    background_folds: bool,
    /// The top image of the chain a running fold reads.
    folding: Option<u64>,
    /// A fold's outcome, installed by the next checkpoint.
    folded: Option<Result<Folded>>,
    /// Extents of chains replaced while a fold still reads them.
    free_after_fold: Vec<(u64, u64)>,
    current: Option<Durable>,
    cost: CostModel,
    /// The chain recovery serves cold lookups from, while anyone may still
    /// read it, and its extents: freeing one of those waits until nobody
    /// holds the chain (a reader would find a hole or another image).
    pinned: Option<(Weak<Chain>, Vec<u64>)>,
    /// Extents of the pinned chain that are free once it is unpinned.
    deferred: Vec<(u64, u64)>,
    /// Per table (IACoW): node ids the next checkpoint writes although
    /// they may not change (`nodes`).
    revisit: nodes::Revisits,
    /// The next IACoW checkpoint writes a base: one failed after its
    /// freezes had moved the epochs on, so changes of theirs may be in no
    /// image.
    rebase: bool,
    /// The long regions' published marks of the last image this process
    /// wrote from the store's horizons (they only grow).
    published: Vec<u64>,
}

impl Checkpointer {
    pub fn new(
        mode: CheckpointMode,
        compact_depth: usize,
        current: Option<Durable>,
    ) -> Checkpointer {
        Checkpointer {
            mode,
            compact_depth: compact_depth.clamp(MIN_CHAIN_DEPTH, MAX_CHAIN_DEPTH),
            background_folds: false,
            folding: None,
            folded: None,
            free_after_fold: Vec::new(),
            current,
            cost: CostModel::default(),
            pinned: None,
            deferred: Vec::new(),
            revisit: nodes::Revisits::default(),
            rebase: false,
            published: Vec::new(),
        }
    }

    /// Keeps the extents of `chain` from being freed while any reader
    /// holds it (cold lookups and scans after a restart).
    pub fn pin(&mut self, chain: &Arc<Chain>) {
        let offsets = chain.images().iter().map(|i| i.offset).collect();
        self.pinned = Some((Arc::downgrade(chain), offsets));
    }

    /// Returns an extent of a replaced image to the free space, or keeps
    /// it for later while the pinned chain it belongs to is still read.
    pub(super) fn release(&mut self, store: &Store, (offset, len): (u64, u64)) {
        let pinned = self
            .pinned
            .as_ref()
            .filter(|(chain, offsets)| chain.strong_count() > 0 && offsets.contains(&offset));
        match pinned {
            Some(_) => self.deferred.push((offset, len)),
            None => store.space().free(store.medium(), offset, len),
        }
    }

    /// Frees what waited for the pinned chain once nobody holds it.
    fn release_deferred(&mut self, store: &Store) {
        if self
            .pinned
            .as_ref()
            .is_some_and(|(chain, _)| chain.strong_count() > 0)
        {
            return;
        }
        self.pinned = None;
        for (offset, len) in std::mem::take(&mut self.deferred) {
            store.space().free(store.medium(), offset, len);
        }
    }

    pub fn mode(&self) -> CheckpointMode {
        self.mode
    }

    /// Leaves folds to the caller's thread (see `fold_job`); otherwise a
    /// checkpoint that makes the chain want one folds it at once.
    pub fn fold_in_background(&mut self, on: bool) {
        self.background_folds = on;
    }

    /// Takes one checkpoint of every table and makes it the one in force.
    pub fn take(&mut self, store: &Store) -> Result<CheckpointStats> {
        let taken = self.take_once(store);
        if taken.is_err() {
            // The changes it took may not be in any image.
            store.changes().lose();
            self.rebase = true;
        }
        taken
    }

    fn take_once(&mut self, store: &Store) -> Result<CheckpointStats> {
        if self.mode == CheckpointMode::IaCow {
            return nodes::checkpoint(self, store);
        }
        let started = Instant::now();
        self.release_deferred(store);
        self.install_fold(store)?;
        let (t_low, long_t_low, long_published) = store.checkpoint_horizon();
        // A chain found at its longest (a file may hold one; this process
        // merges before) takes no delta: one more image would be one more
        // than a reader accepts. The next image replaces it.
        let mut base = self.current.clone().filter(|c| {
            c.extend != Extend::Nothing && !c.nodes && c.extents.len() < MAX_CHAIN as usize
        });
        let samples: Vec<_> = store.tables().map(|t| t.drain_sample()).collect();
        let mut stats = CheckpointStats {
            t_low,
            ..Default::default()
        };
        // After the horizons: every version older than them was published
        // and recorded by now (a delta needs that), and before any walk
        // (which then covers what this take drops).
        store.changes().record(self.mode.capture());
        let changes = store.changes().take(store.table_count());
        // A commit recorded before this take must be published before the
        // walk below, which skips versions not yet committed: otherwise
        // neither this image nor the next delta (whose record we just
        // took) would hold it.
        store.changes().wait_for_publishing();
        let kind = match (base.as_ref().map(|b| b.extend), &changes) {
            (Some(extend), Changes::Complete(_) | Changes::Trees(_)) => {
                match self.choose(store, &samples, &mut stats) {
                    Kind::Delta => Kind::Delta,
                    _ if extend == Extend::DeltasOnly => Kind::Full,
                    other => other,
                }
            }
            (Some(Extend::Anything), Changes::Incomplete) => Kind::Incremental,
            _ => Kind::Full,
        };
        stats.incremental = kind == Kind::Incremental;
        stats.delta = kind == Kind::Delta;
        // A copying checkpoint merges two images rather than many.
        if kind == Kind::Incremental && base.as_ref().is_some_and(|b| b.extents.len() > 2) {
            stats.deltas_merged = self.compact(store)?;
            base = self.current.clone();
        }
        let previous = match (kind, &base) {
            (Kind::Incremental, Some(b)) => {
                let chain = Chain::open(store.medium(), b.offset)?;
                chain.verify(store.medium())?;
                Some(chain)
            }
            _ => None,
        };
        let horizons = self.next_horizons((t_low, long_t_low, long_published));
        let link = match (kind, &base) {
            (Kind::Delta, Some(b)) => b.next_link(),
            _ => writer::Link::BASE,
        };
        let collect_start = Instant::now();
        let mut image = writer::Builder::new(&horizons, link);
        let mut deleted = Vec::new();
        let mut tables = Vec::new();
        // A dropped table's descriptor says so before it is hidden: no
        // image in force omits a table recovery would look for.
        for table in store.tables().filter(|t| !t.is_dropped()) {
            let id = table.heap.def.id;
            tables.push(id);
            let mut run = image.begin_table(table);
            let mut collect = Collect {
                run: &mut run,
                stats: &mut stats,
                deleted: Vec::new(),
            };
            let delta = match (kind, &base, &changes) {
                (Kind::Delta, Some(b), Changes::Complete(by_table)) if b.tables.contains(&id) => {
                    by_table.get(id as usize).map(|changed| Delta::Log(changed))
                }
                (Kind::Delta, Some(b), Changes::Trees(by_table)) if b.tables.contains(&id) => Some(
                    Delta::Tree(by_table.get(id as usize).and_then(Option::as_ref)),
                ),
                _ => None,
            };
            match (delta, &base, &previous) {
                (Some(Delta::Log(changed)), _, _) => {
                    write_delta(store.medium(), table, changed, &mut collect)
                }
                (Some(Delta::Tree(head)), _, _) => write_head_tree(head, &mut collect),
                (None, Some(b), Some(chain)) if chain.has_table(id) => {
                    write_incremental(store.medium(), table, chain, b.t_low, &mut collect)
                }
                _ => write_full(store.medium(), table, &mut collect),
            }
            deleted.push((table.clone(), std::mem::take(&mut collect.deleted)));
            run.finish();
        }
        stats.collect_time = collect_start.elapsed();
        let bytes = image.finish();
        stats.bytes = bytes.len() as u64;
        stats.sequence = horizons.sequence;
        stats.entries = stats.entries_resolved + stats.entries_copied;
        let delta_of = base.filter(|_| stats.delta);
        // After every entry is resolved, and made durable by this image's
        // fence before it is in force (see `Store::write_back_obsolete_bits`).
        store.write_back_obsolete_bits();
        let written = self.write(store, (&bytes, false), &horizons, delta_of)?;
        let written = Durable {
            tables,
            ..written.counting(stats.entries)
        };
        stats.tombstones_removed = reap(store, deleted);
        if !stats.delta {
            self.cost.observe(&stats);
        }
        self.current = Some(written);
        if self
            .current
            .as_ref()
            .is_some_and(|c| c.extents.len() >= self.compact_depth)
        {
            stats.deltas_merged += self.compact(store)?;
        }
        if !self.background_folds {
            if let Some(job) = self.fold_job() {
                let outcome = job.run(store);
                self.fold_done(outcome);
                self.install_fold(store)?;
                stats.folded = true;
            }
        }
        stats.chain_length = self.current.as_ref().map_or(0, |c| c.extents.len() as u32);
        stats.duration = started.elapsed();
        Ok(stats)
    }

    fn choose(
        &self,
        store: &Store,
        samples: &[crate::txn::Sample],
        stats: &mut CheckpointStats,
    ) -> Kind {
        match self.mode {
            CheckpointMode::Full | CheckpointMode::Off | CheckpointMode::IaCow => Kind::Full,
            CheckpointMode::Incremental => Kind::Incremental,
            CheckpointMode::Chain | CheckpointMode::Mirror => Kind::Delta,
            CheckpointMode::CostModel => {
                let prediction = self.cost.predict(store, samples);
                stats.alpha = prediction.alpha;
                stats.predicted_full_ns = prediction.full_ns;
                stats.predicted_incremental_ns = prediction.incremental_ns;
                match prediction.incremental_ns < prediction.full_ns {
                    true => Kind::Incremental,
                    false => Kind::Full,
                }
            }
        }
    }

    /// The horizons the next image records, `store.checkpoint_horizon()`'s.
    fn next_horizons(
        &self,
        (t_low, long_t_low, long_published): (u64, u64, Vec<u64>),
    ) -> writer::Horizons {
        writer::Horizons {
            sequence: self.current.as_ref().map_or(1, |c| c.sequence + 1),
            t_low,
            long_t_low,
            long_published,
        }
    }

    /// Writes the image (of node images, if `nodes`) to a new extent and
    /// switches the root to it. A delta extends `delta_of`'s chain; any
    /// other image replaces the chain in force, whose extents are freed.
    fn write(
        &mut self,
        store: &Store,
        (bytes, nodes): (&[u8], bool),
        horizons: &writer::Horizons,
        delta_of: Option<Durable>,
    ) -> Result<Durable> {
        // Horizons of images this process writes: numbered upwards, a
        // delta after the image it extends, t_low no later than the clock,
        // and the long regions' published marks never back.
        let last = self.current.as_ref().map_or(0, |c| c.sequence);
        let of = delta_of.as_ref().map_or(0, |c| c.sequence);
        assert!(
            horizons.sequence > last && horizons.sequence > of,
            "checkpoint sequence numbers ascend, a delta's above its predecessor's: {} after {last} (delta of {of})",
            horizons.sequence
        );
        assert!(
            horizons.long_t_low <= horizons.t_low && horizons.t_low <= store.clock().peek(),
            "checkpoint redo horizons: long_t_low {} <= t_low {} <= clock",
            horizons.long_t_low,
            horizons.t_low
        );
        for (i, (&now, &before)) in horizons
            .long_published
            .iter()
            .zip(&self.published)
            .enumerate()
        {
            assert!(
                now >= before,
                "a long region's published mark never moves back: region {i} {before} -> {now}"
            );
        }
        self.published.clone_from(&horizons.long_published);
        let (offset, len) = install(store, bytes)?;
        let mut written = Durable {
            offset,
            sequence: horizons.sequence,
            t_low: horizons.t_low,
            extents: vec![(offset, len)],
            base_entries: 0,
            delta_entries: 0,
            tables: Vec::new(),
            extend: delta_of
                .as_ref()
                .map_or(Extend::Anything, |chain| chain.extend),
            nodes,
        };
        match delta_of {
            Some(chain) => {
                written.extents.extend_from_slice(&chain.extents);
                written.base_entries = chain.base_entries;
                written.delta_entries = chain.delta_entries;
            }
            None => {
                let old: Vec<(u64, u64)> = self
                    .current
                    .iter()
                    .flat_map(|c| c.extents.clone())
                    .collect();
                match self.folding {
                    Some(_) => self.free_after_fold.extend(old),
                    None => old
                        .into_iter()
                        .for_each(|extent| self.release(store, extent)),
                }
            }
        }
        Ok(written)
    }
}

/// Writes an image to a new extent, fenced, and makes it the root; returns
/// the extent. A crash before the root switch leaves the previous root.
fn install(store: &Store, bytes: &[u8]) -> Result<(u64, u64)> {
    let len = (bytes.len() as u64).next_multiple_of(crate::heap::BLOCK_ALIGN);
    let (offset, _) = store.space().allocate(store.medium(), len)?;
    store.medium().write_bytes(offset, bytes);
    store.medium().persist_now(offset, bytes.len() as u64)?;
    image::assert_reads_back(store.medium(), offset, bytes);
    catalog::set_checkpoint_root(store.medium(), offset)?;
    Ok((offset, len))
}

/// What a checkpoint writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// Every entry, from the live index.
    Full,
    /// Every entry: changed subtrees from the live index, the rest copied
    /// from the chain in force (which it replaces).
    Incremental,
    /// Only what changed since the chain in force, linked to it.
    Delta,
}

impl Durable {
    /// The link of an image that is a delta of this chain.
    fn next_link(&self) -> writer::Link {
        writer::Link {
            previous: self.offset,
            depth: self.extents.len() as u32 + 1,
        }
    }

    /// Deltas holding half as many entries as their base cost lookups and
    /// restarts more than one copying checkpoint costs.
    fn wants_fold(&self) -> bool {
        2 * self.delta_entries > self.base_entries
    }

    /// Adds a new image's entries to the base or the deltas.
    fn counting(mut self, entries: u64) -> Durable {
        match self.extents.len() {
            1 => self.base_entries = entries,
            _ => self.delta_entries += entries,
        }
        self
    }
}

/// Per table, deleted keys and their tombstone heads.
type DeletedKeys = Vec<(std::sync::Arc<TableRt>, Vec<(Vec<u8>, Addr)>)>;

/// Where collected entries go: the run, the counters, and the deleted keys
/// whose index entries can be removed once the checkpoint is in force.
struct Collect<'r, 'w> {
    run: &'r mut RunWriter<'w>,
    stats: &'r mut CheckpointStats,
    deleted: Vec<(Vec<u8>, Addr)>,
}

impl Collect<'_, '_> {
    /// Resolves a live entry into the run, or remembers a committed deletion.
    fn live(&mut self, medium: &Medium, table: &TableRt, key: &[u8], head: u64) {
        match table.committed_version(medium, Addr(head)) {
            Some(addr) => self.stats.entries_resolved += self.run.push(key, addr.0) as u64,
            None => self.deleted.push((key.to_vec(), Addr(head))),
        }
    }
}

/// All leaf entries, each resolved to its newest committed version.
fn write_full(medium: &Medium, table: &TableRt, out: &mut Collect) {
    table
        .index()
        .scan(Bound::Unbounded, Bound::Unbounded, None, |key, head| {
            out.live(medium, table, key, head);
            true
        });
}

/// Changed leaves from the live index, unchanged subtrees copied from the
/// previous run, merged in key order as the walk proceeds.
fn write_incremental(
    medium: &Medium,
    table: &TableRt,
    previous: &Chain,
    base_t_low: u64,
    out: &mut Collect,
) {
    let state = std::cell::RefCell::new((out, previous.reader(table.heap.def.id)));
    table.index().walk(
        |lower, upper, update_time, _is_leaf| {
            if update_time >= base_t_low {
                return true;
            }
            let (out, old) = &mut *state.borrow_mut();
            out.stats.subtrees_skipped += 1;
            while old
                .peek_key(medium)
                .is_some_and(|k| lower.is_some_and(|l| k < l))
            {
                old.advance(medium);
            }
            out.stats.entries_copied += old.copy_until(medium, upper, out.run);
            false
        },
        |key, head| {
            let (out, _) = &mut *state.borrow_mut();
            out.live(medium, table, key, head);
        },
    );
}

/// The entries of the keys written by the versions in `changed`: each
/// key's newest recorded version (its address, or `TOMBSTONE` for a
/// deletion). They were all durable when recorded, and every version
/// older than this checkpoint's horizons was recorded by now.
///
/// A version replaced since is still written when its successor was
/// recorded after `changed` was taken: the successor is then in the next
/// delta (or redone after a crash, being younger than these horizons), and
/// the version's block cannot be freed before a checkpoint that has the
/// successor, since versions are recorded before anyone sees them.
/// Ties of timestamp (a transaction writing a key twice) go to the later
/// record.
fn write_delta(medium: &Medium, table: &TableRt, changed: &[Addr], out: &mut Collect) {
    assert!(
        u32::try_from(changed.len()).is_ok(),
        "a delta's record order fits 32 bits: the change lists are bounded far below"
    );
    let mut keys = Vec::new();
    let mut found: Vec<ChangedKey> = Vec::with_capacity(changed.len());
    for (order, &addr) in changed.iter().enumerate() {
        let Some(header) = table.heap.header(addr) else {
            continue;
        };
        let at = keys.len();
        let len = table.heap.read_key_into(medium, addr, &mut keys);
        let deleted = table.heap.tombstone(medium, addr) != Some(false);
        found.push(ChangedKey {
            prefix: crate::index::key_prefix(&keys[at..at + len]),
            newest_first: !(header.begin.load(Acquire) & !PENDING),
            at,
            len: len as u32,
            later_first: !(order as u32),
            addr: match deleted {
                true => TOMBSTONE,
                false => addr.0,
            },
        });
    }
    let key = |c: &ChangedKey| &keys[c.at..c.at + c.len as usize];
    // Keys of up to 8 bytes are ordered by their zero-padded prefix and
    // then their length (a shorter one is a prefix of a longer one): most
    // comparisons, hot keys' repeats included, touch no key bytes. The
    // sort took most of a checkpoint's time (a YCSB-A delta of 5 K
    // versions: 130 instructions a comparison with the key slices).
    found.sort_unstable_by(|a, b| {
        (a.prefix.cmp(&b.prefix))
            .then_with(|| match a.len <= 8 && b.len <= 8 {
                true => a.len.cmp(&b.len),
                false => key(a).cmp(key(b)),
            })
            .then(a.newest_first.cmp(&b.newest_first))
            .then(a.later_first.cmp(&b.later_first))
    });
    found.dedup_by(|later, newest| later.prefix == newest.prefix && key(later) == key(newest));
    for entry in &found {
        out.stats.entries_resolved += out.run.push(key(entry), entry.addr) as u64;
    }
}

/// Where a delta's entries come from.
enum Delta<'c> {
    /// Addresses recorded by commits (ChainIndex).
    Log(&'c [Addr]),
    /// A frozen head tree (MirrorIndex); `None` if nothing was recorded.
    Tree(Option<&'c BTree>),
}

/// A frozen head tree's entries, already one per key, in key order, with
/// the newest recorded version (or `TOMBSTONE`) of each: what
/// `write_delta` derives from the log by reading and sorting keys. The
/// same reasoning makes it complete.
fn write_head_tree(head: Option<&BTree>, out: &mut Collect) {
    let Some(head) = head else {
        return;
    };
    head.scan(Bound::Unbounded, Bound::Unbounded, None, |key, value| {
        out.stats.entries_resolved += out.run.push(key, value) as u64;
        true
    });
}

/// A key a delta records, in the packed key buffer.
struct ChangedKey {
    /// First 8 key bytes, big-endian, zero padded: settles most comparisons.
    prefix: u64,
    /// Sorts the newest version of a key first: complemented timestamp,
    /// then (`later_first`) complemented record order.
    newest_first: u64,
    at: usize,
    len: u32,
    later_first: u32,
    addr: u64,
}

/// Removes the index entries of deleted keys that nobody can see any more
/// (`reap_tombstone` re-checks each: committed tombstone, older than every
/// running transaction, still the head).
fn reap(store: &Store, deleted: DeletedKeys) -> u64 {
    let low_water = store.low_water();
    let ut = store.clock().peek();
    let mut removed = 0;
    for (table, keys) in deleted {
        for (key, head) in keys {
            removed += table.reap_tombstone(store.medium(), &key, head, low_water, ut) as u64;
        }
    }
    if removed > 0 {
        // The reaped tombstones' obsolete bits.
        let _ = store.medium().fence();
    }
    removed
}
