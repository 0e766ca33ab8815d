//! Node versions for HiEngine's IACoW (papers/003 §4.3): an indirection
//! array from node ids to nodes, and epoch-based copy-on-write, so that a
//! checkpoint can write the nodes changed in one epoch while writers go on.
//!
//! In a tree with node versions every child word (and the root word) holds
//! `id << 1 | ID_TAG` instead of an address; [`NodeVersions::resolve`]
//! turns it into the node's current version. A node that changes keeps its
//! id, so copying it never cascades to its ancestors (path copying would).
//!
//! # Epochs
//! * Every index write runs inside a writer epoch ([`NodeVersions::enter`]),
//!   counted per epoch parity.
//! * [`NodeVersions::freeze`] (one at a time) sets `freezing = E`, advances
//!   the epoch to `E + 1`, waits until no writer of epoch `E` is left, and
//!   then records the root and the id limit: the frozen state is the tree as
//!   the writers of epochs up to `E` left it.
//! * A writer of epoch `> E` that locks a node whose newest change is from
//!   an epoch `<= E` copies it first (waiting for the freeze to settle, so
//!   no writer of epoch `E` can still be changing the original), changes
//!   the copy, and publishes it under the same id; the original is kept in
//!   the entry for the freeze (and, once replaced, listed for recycling).
//!   The checkpoint reads the original, which nobody changes.
//! * Outside a freeze a node is changed in place and its entry's `dirty`
//!   raised to the writer's epoch: copies cost only while a checkpoint runs.
//! * When the freeze ends, the originals it kept are recycled for later
//!   copies. Stale optimistic readers may still load them: a recycled node is
//!   rewritten with atomic stores only and its version word keeps counting
//!   up, so a reader that read it before fails validation and restarts; and
//!   a reader that resolved an id to it before it was recycled, but reads
//!   its version only after it was reused for another node, sees that
//!   node's id in it and restarts (`ReadGuard::read_child`). Node memory is
//!   freed only with the tree.
//!
//! # Invariants
//! * Ids are dense from 1 and never reused; entry `id` holds the node's
//!   newest version, whose `ident` word carries `id`.
//! * `dirty` of an entry is the newest epoch whose writers changed that
//!   version; an id created in epoch `e` starts with `dirty = e`.
//! * For a freeze of epoch `E`: a node with `dirty <= E` in its entry is in
//!   the frozen state as it is; a node with `dirty > E` that existed at the
//!   freeze has its frozen version in its entry's `frozen`, tagged `E`.
#![allow(unsafe_code)]

use std::ptr;
use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, Release, SeqCst};
use std::sync::atomic::{AtomicPtr, AtomicU64};

use crossbeam_utils::{Backoff, CachePadded};
use parking_lot::Mutex;

use super::node::{Node, ID_TAG};
use super::node_memory::OwnedNode;

const SEGMENT_BITS: u32 = 14;
const SEGMENT_LEN: usize = 1 << SEGMENT_BITS;
/// 2^28 ids: a terabyte of 4 KiB nodes.
const SEGMENTS: usize = 1 << 14;
/// Ids are below this.
pub(crate) const MAX_IDS: u64 = (SEGMENTS * SEGMENT_LEN) as u64;

#[derive(Default)]
pub(crate) struct Entry {
    node: AtomicPtr<Node>,
    dirty: AtomicU64,
    /// The version the freeze of `frozen_for` keeps, and its `dirty`: set
    /// when a writer replaces it, before the copy is published.
    frozen: AtomicPtr<Node>,
    frozen_dirty: AtomicU64,
    frozen_for: AtomicU64,
}

/// A node version a freeze kept, recycled once that freeze ended.
struct Frozen {
    node: usize,
    for_epoch: u64,
}

pub(crate) struct NodeVersions {
    /// Each non-null pointer is a leaked `Box<[Entry]>` of `SEGMENT_LEN`.
    segments: Box<[AtomicPtr<Entry>]>,
    grow: Mutex<()>,
    next_id: AtomicU64,
    epoch: AtomicU64,
    /// The epoch being frozen, or 0.
    freezing: AtomicU64,
    /// The newest epoch whose writers are all done (see `freeze`).
    settled: AtomicU64,
    writers: [CachePadded<AtomicU64>; 2],
    frozen: Mutex<Vec<Frozen>>,
    recycled: Mutex<Vec<usize>>,
    /// (epoch of the change, root word), oldest first.
    roots: Mutex<Vec<(u64, u64)>>,
    one_freeze: Mutex<()>,
}

// SAFETY: the raw node pointers are owned by the structure (as an
// `OwnedNode` would be) and nodes are made of atomics.
unsafe impl Send for NodeVersions {}
// SAFETY: as above; every shared access goes through atomics or mutexes.
unsafe impl Sync for NodeVersions {}

// A panic under one of the mutexes (none of their critical sections calls
// out) leaves each list whole, as the atomics are; as before node versions,
// a tree is safe to observe after a caught panic.
impl std::panic::RefUnwindSafe for NodeVersions {}
impl std::panic::UnwindSafe for NodeVersions {}

/// What a writer that locked a node must do; see [`NodeVersions::prepare_write`].
pub(crate) enum Prepared<'a> {
    InPlace,
    /// Change a copy, which replaces the node in this entry; the original
    /// is kept for the freeze of this epoch.
    Copy(&'a Entry, u64),
    /// Unlock and retry: the freeze still waits for writers of its epoch.
    NotYet,
}

/// Membership of one index write in an epoch; see [`NodeVersions::enter`].
pub(crate) struct WriterEpoch<'a> {
    versions: &'a NodeVersions,
    pub(crate) epoch: u64,
}

impl Drop for WriterEpoch<'_> {
    fn drop(&mut self) {
        self.versions.writers[(self.epoch & 1) as usize].fetch_sub(1, Release);
    }
}

/// What [`NodeVersions::freeze`] froze; ends the freeze when dropped.
pub(crate) struct FreezeState<'a> {
    versions: &'a NodeVersions,
    _one: parking_lot::MutexGuard<'a, ()>,
    pub(crate) epoch: u64,
    pub(crate) root: u64,
    pub(crate) id_limit: u64,
}

impl Drop for FreezeState<'_> {
    fn drop(&mut self) {
        self.versions.end_freeze(self.epoch);
    }
}

impl NodeVersions {
    pub(crate) fn new() -> Self {
        Self {
            segments: (0..SEGMENTS).map(|_| AtomicPtr::default()).collect(),
            grow: Mutex::new(()),
            next_id: AtomicU64::new(1),
            epoch: AtomicU64::new(1),
            freezing: AtomicU64::new(0),
            settled: AtomicU64::new(0),
            writers: Default::default(),
            frozen: Mutex::new(Vec::new()),
            recycled: Mutex::new(Vec::new()),
            roots: Mutex::new(Vec::new()),
            one_freeze: Mutex::new(()),
        }
    }

    /// Joins the current epoch for one index write.
    pub(crate) fn enter(&self) -> WriterEpoch<'_> {
        loop {
            let epoch = self.epoch.load(SeqCst);
            let writers = &self.writers[(epoch & 1) as usize];
            writers.fetch_add(1, SeqCst);
            // A freeze that advanced the epoch in between may already have
            // found this parity's writers gone.
            if self.epoch.load(SeqCst) == epoch {
                return WriterEpoch {
                    versions: self,
                    epoch,
                };
            }
            writers.fetch_sub(1, Release);
        }
    }

    fn entry(&self, id: u64) -> Option<&Entry> {
        let segment = self.segments.get((id >> SEGMENT_BITS) as usize)?;
        let base = segment.load(Acquire);
        if base.is_null() {
            return None;
        }
        // SAFETY: a non-null segment pointer is a leaked `Box<[Entry]>` of
        // SEGMENT_LEN entries, published with Release after it was built and
        // freed only by `drop` (`&mut self`); the index is masked below
        // SEGMENT_LEN.
        Some(unsafe { &*base.add(id as usize & (SEGMENT_LEN - 1)) })
    }

    fn entry_or_grow(&self, id: u64) -> &Entry {
        if let Some(entry) = self.entry(id) {
            return entry;
        }
        let _grow = self.grow.lock();
        let slot = &self.segments[(id >> SEGMENT_BITS) as usize];
        if slot.load(Acquire).is_null() {
            let segment: Box<[Entry]> = (0..SEGMENT_LEN).map(|_| Entry::default()).collect();
            slot.store(Box::into_raw(segment).cast::<Entry>(), Release);
        }
        self.entry(id).expect("segment just made")
    }

    /// The current version of the node a tagged word names, or null for a
    /// word that names no node.
    #[inline]
    pub(crate) fn resolve(&self, word: u64) -> *const Node {
        debug_assert!(word & ID_TAG != 0);
        self.entry(word >> 1)
            .map_or(ptr::null(), |entry| entry.node.load(Acquire))
    }

    /// The node a tagged word names, in a structure nobody else uses yet.
    pub(crate) fn loaded(&self, word: u64) -> Option<&Node> {
        if word & ID_TAG == 0 {
            return None;
        }
        let node = self.resolve(word);
        // SAFETY: a non-null entry holds a version this structure owns,
        // alive until `drop`, which needs `&mut self`.
        (!node.is_null()).then(|| unsafe { &*node })
    }

    /// Gives a new node an id, changed in `epoch`; returns its tagged word.
    pub(crate) fn register(&self, node: OwnedNode, epoch: u64) -> u64 {
        let id = self.next_id.fetch_add(1, Relaxed);
        assert!(
            id < (SEGMENTS * SEGMENT_LEN) as u64,
            "index node ids exhausted"
        );
        self.place(id, node, epoch);
        id << 1 | ID_TAG
    }

    pub(crate) fn is_placed(&self, id: u64) -> bool {
        self.entry(id)
            .is_some_and(|entry| !entry.node.load(Relaxed).is_null())
    }

    /// Puts `node` at a known id (loading a checkpoint); false if taken.
    /// Loaders may place concurrently; the first of two with one id wins.
    pub(crate) fn place_loaded(&self, id: u64, node: OwnedNode) -> bool {
        if id == 0 || id >= (SEGMENTS * SEGMENT_LEN) as u64 {
            return false;
        }
        node.set_node_id(id);
        let entry = self.entry_or_grow(id);
        let raw = node.into_raw();
        if let Err(_taken) = entry
            .node
            .compare_exchange(ptr::null_mut(), raw, AcqRel, Acquire)
        {
            // SAFETY: `raw` came from `into_raw` just above and was not
            // published, so ownership comes straight back.
            drop(unsafe { OwnedNode::from_raw(raw) });
            return false;
        }
        self.next_id.fetch_max(id + 1, Relaxed);
        true
    }

    fn place(&self, id: u64, node: OwnedNode, epoch: u64) {
        node.set_node_id(id);
        let entry = self.entry_or_grow(id);
        entry.dirty.store(epoch, SeqCst);
        entry.node.store(node.into_raw(), Release);
    }

    pub(crate) fn id_limit(&self) -> u64 {
        self.next_id.load(SeqCst)
    }

    /// Records a new root word, set by a writer of `epoch`.
    pub(crate) fn record_root(&self, epoch: u64, word: u64) {
        self.roots.lock().push((epoch, word));
    }

    /// Called under the write lock of `node` (its newest version), by a
    /// writer of `epoch`: marks the node changed in place, or tells the
    /// writer to change a copy instead (see the module docs).
    pub(crate) fn prepare_write(&self, node: &Node, epoch: u64) -> Prepared<'_> {
        let entry = self
            .entry(node.node_id())
            .expect("a versioned node has an entry");
        let dirty = entry.dirty.load(SeqCst);
        let freezing = self.freezing.load(SeqCst);
        if freezing != 0 && epoch > freezing && dirty <= freezing {
            // A writer of the frozen epoch may be waiting for this very
            // lock: waiting here for it to finish could never end.
            if self.settled.load(SeqCst) < freezing {
                return Prepared::NotYet;
            }
            entry.frozen.store(ptr::from_ref(node).cast_mut(), SeqCst);
            entry.frozen_dirty.store(dirty, SeqCst);
            entry.frozen_for.store(freezing, SeqCst);
            return Prepared::Copy(entry, freezing);
        }
        if dirty < epoch {
            entry.dirty.store(epoch, SeqCst);
        }
        Prepared::InPlace
    }

    /// Memory for a copy: a recycled version (with its version word, which
    /// must keep counting) or a new node.
    pub(crate) fn recycled(&self) -> Option<&Node> {
        let address = self.recycled.lock().pop()?;
        // SAFETY: recycled addresses are versions this structure owns that
        // no freeze needs any more; they stay allocated until `drop`.
        Some(unsafe { &*ptr::with_exposed_provenance::<Node>(address) })
    }

    /// Makes `copy` the newest version of `entry`'s node, changed in `epoch`.
    pub(crate) fn publish(&self, entry: &Entry, copy: *mut Node, epoch: u64) {
        // `dirty` first: a freeze that reads the new node then reads a
        // `dirty` above its epoch, and takes the entry's frozen version.
        entry.dirty.store(epoch, SeqCst);
        entry.node.store(copy, SeqCst);
    }

    /// Lists `original`, replaced (published and marked obsolete) by a
    /// writer's copy, for recycling once the freeze of `for_epoch` ended.
    /// Only now: listed before it was replaced, a freeze ending meanwhile
    /// would recycle a node still in use.
    pub(crate) fn retire(&self, original: &Node, for_epoch: u64) {
        self.frozen.lock().push(Frozen {
            node: ptr::from_ref(original).addr(),
            for_epoch,
        });
    }

    /// Advances the epoch and waits for the writers of the old one.
    pub(crate) fn freeze(&self) -> FreezeState<'_> {
        let one = self.one_freeze.lock();
        let epoch = self.epoch.load(SeqCst);
        self.freezing.store(epoch, SeqCst);
        self.epoch.store(epoch + 1, SeqCst);
        let backoff = Backoff::new();
        while self.writers[(epoch & 1) as usize].load(SeqCst) != 0 {
            backoff.snooze();
        }
        self.settled.store(epoch, SeqCst);
        let root = {
            let roots = self.roots.lock();
            let (_, word) = roots
                .iter()
                .rev()
                .find(|(changed, _)| *changed <= epoch)
                .copied()
                .expect("the first root is recorded at epoch 0");
            word >> 1
        };
        FreezeState {
            versions: self,
            _one: one,
            epoch,
            root,
            id_limit: self.id_limit(),
        }
    }

    /// The version of `id` in the freeze of `epoch` and the epoch of its
    /// last change; `None` if the node did not exist then.
    pub(crate) fn frozen_version(&self, id: u64, epoch: u64) -> Option<(&Node, u64)> {
        let entry = self.entry(id)?;
        let node = entry.node.load(SeqCst);
        let dirty = entry.dirty.load(SeqCst);
        let (node, dirty) = if dirty <= epoch {
            (node, dirty)
        } else if entry.frozen_for.load(SeqCst) == epoch {
            // Written before the copy was published, so before `dirty`.
            (entry.frozen.load(SeqCst), entry.frozen_dirty.load(SeqCst))
        } else {
            // Made after the freeze.
            return None;
        };
        if node.is_null() {
            return None;
        }
        // SAFETY: the pointer is a version this structure owns; a frozen
        // one is recycled only when its freeze ends, which needs the
        // `FreezeState` the caller borrows.
        Some((unsafe { &*node }, dirty))
    }

    fn end_freeze(&self, epoch: u64) {
        self.freezing.store(0, SeqCst);
        let mut frozen = self.frozen.lock();
        let mut recycled = self.recycled.lock();
        frozen.retain(|f| {
            let done = f.for_epoch <= epoch;
            if done {
                recycled.push(f.node);
            }
            !done
        });
        let mut roots = self.roots.lock();
        let in_force = roots.iter().rposition(|(changed, _)| *changed <= epoch);
        if let Some(first_kept) = in_force {
            roots.drain(..first_kept);
        }
    }

    /// Every node this structure owns, for `Drop`.
    fn owned_nodes(&mut self) -> Vec<*mut Node> {
        let mut nodes: Vec<*mut Node> = Vec::new();
        for id in 1..*self.next_id.get_mut() {
            if let Some(entry) = self.entry(id) {
                let node = entry.node.load(Relaxed);
                if !node.is_null() {
                    nodes.push(node);
                }
            }
        }
        let frozen = std::mem::take(self.frozen.get_mut());
        let recycled = std::mem::take(self.recycled.get_mut());
        nodes.extend(
            frozen
                .iter()
                .map(|f| f.node)
                .chain(recycled)
                .map(ptr::with_exposed_provenance_mut),
        );
        nodes
    }
}

impl Drop for NodeVersions {
    fn drop(&mut self) {
        for node in self.owned_nodes() {
            // SAFETY: every version this structure holds came from
            // `OwnedNode::into_raw` (`place`, or a copy made for a writer) and
            // sits in exactly one place: an entry, the frozen list or the
            // recycled list (a copy leaves the frozen list only for the
            // recycled one, and a recycled node is reused only by becoming
            // an entry's while its old place, the recycled list, drops it).
            drop(unsafe { OwnedNode::from_raw(node) });
        }
        for segment in self.segments.iter_mut() {
            let base = *segment.get_mut();
            if !base.is_null() {
                // SAFETY: made by `Box::into_raw` of a `Box<[Entry]>` of
                // SEGMENT_LEN entries in `entry_or_grow`, freed once here.
                drop(unsafe { Box::from_raw(ptr::slice_from_raw_parts_mut(base, SEGMENT_LEN)) });
            }
        }
    }
}
