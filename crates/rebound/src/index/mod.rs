//! The in-memory index: a concurrent ordered map from byte-string keys
//! (`memcmp` order, 1..=[`MAX_KEY_LEN`] bytes) to `u64` values, built as a
//! B+-tree synchronized with optimistic lock coupling (Leis, Scheibner,
//! Kemper, Neumann: "The ART of practical synchronization", DaMoN 2016).
//!
//! It is our own structure, rather than a crate, because checkpointing needs
//! its internals: per-node update times, leaf-order traversal and skipping of
//! unchanged subtrees ([`BTree::walk`]), and per-leaf gap read timestamps for
//! phantom protection under MVTO.
//!
//! # Node layout
//!
//! Every node, inner or leaf, is 4096 bytes aligned to 64, made of 512
//! native-endian 64-bit words (`node.rs`). Nodes are carved from 2 MiB
//! chunks advised for transparent huge pages (`node_memory.rs`), so that
//! reaching a leaf costs a cache miss but no page walk:
//!
//! | bytes       | word      | field                                                        |
//! |-------------|-----------|--------------------------------------------------------------|
//! | 0..8        | 0         | `version`: bit 0 obsolete, bit 1 locked, bits 2.. counter     |
//! | 8..16       | 1         | header: bits 0..16 slot count, 16..32 `heap_start` (body word index), 32..48 dead heap words, 48..64 zero |
//! | 16..24      | 2         | inner: address of the leftmost child (keys below the first separator); leaf: 0 |
//! | 24..32      | 3         | bits 0..8 level: 0 for leaves, parent = child + 1; bits 8..64 node id (trees with node versions, else 0) |
//! | 32..160     | 4..20     | 16 search hints: hint `i` is the head word of slot `(i + 1) * count / 17` (meaningless while count < 34) |
//! | 160..4080   | 20..510   | body: 490 words, slots from the front, key-tail heap from the back |
//! | 4080..4088  | 510       | `update_time` (max `ut` of writes routed through the node)    |
//! | 4088..4096  | 511       | `gap_read_ts` (leaves; 0 and unused in inner nodes)           |
//!
//! Slot `i` occupies body words `3i..3i+3`, slots sorted by key:
//! * head: the first 8 key bytes as a big-endian word, zero-padded, so most
//!   comparisons (all of them for keys up to 8 bytes) are one `u64` compare;
//! * meta: bits 0..16 key length, bits 16..32 body word index of the tail;
//! * payload: the value (leaf) or the child word (inner: the child for
//!   keys from this slot's key up to the next slot's key): the child's
//!   address, or in a tree with node versions its id shifted left by one
//!   with bit 0 set.
//!
//! A search first bisects the hints without branching on the data (they
//! share the header's cache lines), which narrows the slots that can hold
//! the answer to about one seventeenth, then bisects those; hints equal to
//! the probe's head bound nothing, as keys sharing a head may sort either
//! way. Writers rewrite the hints under the node lock after every change
//! of the slots, so a reader whose version validates used hints that
//! matched the slots; torn hints can only narrow the range wrongly in a
//! read that then fails validation, and the range is clamped to the slots.
//! Search keys are borrowed (`key::ProbeKey`), not copied into a buffer.
//!
//! A key of `len` bytes keeps bytes 8.. as `(len - 1) / 8` big-endian,
//! zero-padded tail words in the heap, which grows down from the end of the
//! body (`heap_start`). An entry thus needs 3 + (len - 1) / 8 words: 3 for an
//! 8-byte key (163 per node), at most 66 for a 512-byte key (7 per node, more
//! than the 4 required). Removal shifts the slots down and leaves the tail as
//! a dead hole; an insert that does not fit contiguously compacts the node in
//! place first and splits only if the live entries really fill it. Splits cut
//! by bytes, not entry count, so both halves always fit. Leaf splits push up
//! the shortest prefix of the right half's first key that still exceeds the
//! left half's last key (suffix truncation); inner splits push up their middle
//! separator. A split leaf keeps its lower slots where they are (its count
//! drops; the tails of the slots that moved go back to the free space when
//! they are the heap's low end, else they become dead words); only the
//! upper part is copied, into the new node.
//!
//! # Version lock protocol
//!
//! * Optimistic read: load `version` (Acquire), waiting while it is locked and
//!   restarting if obsolete; read node words with Relaxed atomic loads; then
//!   `validate`: an Acquire fence and a reload that must equal the first load.
//!   Node words are atomics, so a racing read is never a data race, and every
//!   count, offset and length read optimistically is clamped into the node, so
//!   torn data can never index out of bounds or panic; results are used only
//!   once validation confirms them.
//! * Coupling: going down, a reader follows child `i` only after validating
//!   the parent (that is what makes the child address trustworthy), takes the
//!   child's version, and validates the parent again, so the child version
//!   belongs to a moment when the child was linked where the reader found it.
//!   The root pointer is re-read after taking the root's version, because a
//!   root split shrinks the old root's key range without the reader's key
//!   being able to tell.
//! * Writers lock only what they modify, by CAS from the version their
//!   optimistic read saw (SeqCst, never waiting, so no lock order can
//!   deadlock), then issue a Release fence before touching words. Unlocking
//!   adds 4 to the locked version (clearing the lock bit) if anything changed,
//!   and restores the old version if nothing did, so readers that overlapped
//!   a lock taken in vain need not restart.
//! * A point write locks only its leaf. A split additionally locks the parent
//!   (or, for the root, publishes a new root before unlocking); if the parent
//!   has no room for the separator, both locks are released untouched and the
//!   parent is split first. Every failed attempt restarts from the root.
//! * The obsolete bit is part of the protocol but never set today: nodes are
//!   never unlinked (see below).
//!
//! # Phantom protection (`gap_read_ts`)
//!
//! A reader that finds a key absent, or scans a range, does `fetch_max` of its
//! timestamp on each leaf it read and only then validates that leaf; an
//! inserter takes the leaf's write lock and only then loads `gap_read_ts`,
//! refusing with [`InsertError::Phantom`] if it exceeds the writer's
//! timestamp. All four operations are SeqCst, so either the inserter sees the
//! mark or the reader sees the lock and reads again (finding the new key). A
//! split copies the leaf's `gap_read_ts` to the new right half under the lock.
//! Marks are per leaf, so they over-approximate the gap that was read.
//!
//! # Update times
//!
//! Every write does `fetch_max(ut)` on every node of its root-to-leaf path,
//! top-down, before it locks the leaf (so also when it then fails, e.g. with
//! `Exists`); a split raises the node to `ut` and gives the new half the same
//! time; a new root takes the old root's time. Hence once a write returns,
//! every node whose key range contains its key has `update_time >= ut`, and
//! whenever a leaf snapshot includes a write, the leaf and the nodes on the
//! path to it already had `update_time >= ut`. A walk that skips subtrees
//! whose update time is below `T` therefore misses no write with `ut >= T`
//! that completed before the walk started. (Writes concurrent with the walk
//! may or may not be seen; the checkpoint protocol must cover them.)
//!
//! # Node versions (HiEngine's IACoW)
//!
//! A tree made with [`BTree::with_node_versions`] reaches its nodes through
//! an indirection array of node ids and copies a node before changing it
//! while a checkpoint's freeze still needs it (`versions.rs`; frozen states
//! and node images in `snapshot.rs`). The copy replaces the node under its
//! id, so no ancestor changes; the original is marked obsolete, which
//! restarts its optimistic readers, and is recycled once the freeze ends.
//! Everything below about nodes holds for node ids in such a tree.
//!
//! # Reclamation
//!
//! Nodes are never replaced or unlinked (but see node versions above): splits happen in place (the node
//! keeps its lower half and a new node takes the upper half), the old root
//! stays as the new root's leftmost child, and removal never merges or frees
//! nodes (leaves may become underfull or empty; scans simply find nothing in
//! them). A node reference therefore stays valid as long as the tree is
//! borrowed, and all nodes are freed by `Drop`, which has exclusive access
//! (their memory goes to a process-wide free list that later trees reuse).
//! No epoch scheme is needed because nothing is retired while the tree is
//! shared. The cost is that memory of emptied key ranges is only reused by
//! later inserts into the same ranges.
//!
//! # Iteration
//!
//! Leaves are not linked. [`BTree::scan`] and [`BTree::walk`] visit one leaf
//! per descent and resume from the leaf's upper fence key (the separator to
//! the right of the path, copied during the validated descent), so concurrent
//! splits can neither hide nor repeat keys, and no sibling pointers need
//! maintaining.
//!
//! # Invariants (when no writer holds a lock)
//!
//! * Keys within a node are strictly ascending; every key in the subtree of
//!   inner-node child `i` lies in `[separator(i-1), separator(i))`, bounds
//!   inherited from the parent at the ends.
//! * All leaves are at level 0, and every child has its parent's level - 1.
//! * `heap_start >= 3 * count`, and tails of live slots lie in
//!   `heap_start..490`, disjoint from one another.
//! * While `count >= 34`, hint `i` equals the head of slot
//!   `(i + 1) * count / 17`.
//! * Every node is referenced exactly once: by the root cell or by one slot of
//!   one parent.
//! * A node's key range never grows; it only shrinks when the node splits.
//! * `update_time` of a node is >= that of every write routed through it;
//!   `gap_read_ts` of a leaf is >= the timestamp of every gap read of its keys.

/// The first 8 bytes of `key`, big-endian, zero padded: orders keys as
/// their bytes do, up to ties that only the full keys settle.
pub fn key_prefix(key: &[u8]) -> u64 {
    // Most keys have 8 bytes or more: one load, no copy of a variable length.
    if let Some(head) = key.first_chunk::<8>() {
        return u64::from_be_bytes(*head);
    }
    let shift = 8 * (8 - key.len() as u32);
    key.iter()
        .fold(0u64, |word, &byte| word << 8 | u64::from(byte))
        .checked_shl(shift)
        .unwrap_or(0)
}

mod build;
mod head_cache;
mod iter;
mod key;
mod load;
mod node;
mod node_memory;
mod snapshot;
#[cfg(test)]
mod tests;
mod versions;

pub use node::rewrite_leaf_image;
pub use node::IMAGE_BYTES as NODE_IMAGE_BYTES;
pub use snapshot::{NodeSnapshot, TreeLoader};

use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering::Relaxed;

use crossbeam_utils::Backoff;

use head_cache::HeadCache;
pub use head_cache::HeadCacheMode;
use key::{InlineKey, KeyWords, ProbeKey};
use node::{NoRoom, Node, ReadGuard, Restart, RootCell, SplitBias, WriteGuard};
pub(crate) use node_memory::prepare_spare_chunk;
use node_memory::OwnedNode;
use versions::{NodeVersions, WriterEpoch};

pub const MAX_KEY_LEN: usize = 512;

/// A path is at most this deep. Inner nodes that split keep at least three
/// children each, so a tree this tall would hold over 3^22 nodes of 4 KiB
/// (over 10^14 bytes) on one level alone. Kept small because every write's
/// descent records its path in an array of this length.
const MAX_HEIGHT: usize = 24;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InsertError {
    /// The key is present, with this value.
    Exists(u64),
    /// A reader with a later timestamp has read the gap this key would fill.
    Phantom,
}

/// Concurrent ordered map from byte-string keys to `u64` values; see the
/// module documentation.
pub struct BTree {
    root: RootCell,
    /// Changed under the leaf lock of the insert or removal, so it is exact
    /// whenever no write is in flight.
    len: AtomicUsize,
    /// Nodes allocated; exact whenever no split is in flight, since nodes are
    /// only freed with the tree.
    nodes: AtomicUsize,
    /// Point reads' shortcut past the descent (`head_cache.rs`); a table's
    /// primary tree has one.
    heads: Option<HeadCache>,
}

impl Default for BTree {
    fn default() -> Self {
        Self::new()
    }
}

/// What a leaf operation did under the leaf lock.
enum LeafOutcome<T> {
    Done(T),
    /// The leaf must split before the operation can proceed.
    Full,
}

use LeafOutcome::{Done, Full};

impl BTree {
    pub fn new() -> Self {
        Self::from_root(Node::empty_leaf(), 0, 1)
    }

    fn from_root(root: OwnedNode, len: usize, nodes: usize) -> Self {
        Self::from_cell(RootCell::new(root), len, nodes)
    }

    fn from_cell(root: RootCell, len: usize, nodes: usize) -> Self {
        Self {
            root,
            len: AtomicUsize::new(len),
            nodes: AtomicUsize::new(nodes),
            heads: None,
        }
    }

    /// Gives the tree a head cache: point reads fill it, every change of a
    /// value keeps it true, and [`cached`](Self::cached) answers from it.
    pub fn cache_heads(&mut self) {
        self.heads = Some(HeadCache::default());
    }

    /// When the head cache turns on (`cache_heads` made one).
    pub fn set_head_cache(&self, mode: HeadCacheMode) {
        if let Some(heads) = &self.heads {
            heads.set_mode(mode);
        }
    }

    /// The value the head cache holds under `key`'s hash: `key`'s value
    /// or another key's (the caller tells them apart), never a value
    /// replaced before this call began, except by a write it overlaps.
    #[inline]
    pub fn cached(&self, key: &[u8]) -> Option<u64> {
        self.heads.as_ref()?.get(&ProbeKey::new(key)?)
    }

    /// Number of entries; exact when no insert or removal is in flight.
    pub fn len(&self) -> usize {
        self.len.load(Relaxed)
    }

    #[allow(dead_code)] // part of the index's interface; used by its tests
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Levels from root to leaves; 1 for a tree that is a single leaf.
    #[allow(dead_code)] // part of the index's interface; used by its tests
    pub fn height(&self) -> usize {
        self.root.height()
    }

    /// Number of nodes; exact when no split is in flight (nodes are never
    /// freed before the tree is dropped, so empty leaves still count).
    pub fn node_count(&self) -> usize {
        self.nodes.load(Relaxed)
    }

    pub fn get(&self, key: &[u8]) -> Option<u64> {
        self.lookup(key, None, false)
    }

    /// [`get`](Self::get) for a point read, which fills the head cache
    /// (other lookups, such as a validation's or GC's, would only fill it
    /// with keys nobody reads by key).
    pub fn get_for_read(&self, key: &[u8]) -> Option<u64> {
        self.lookup(key, None, true)
    }

    /// Like [`get`](Self::get); when the key is absent, records `reader_ts`
    /// into the covering leaf's gap_read_ts.
    pub fn get_marking_gap(&self, key: &[u8], reader_ts: u64) -> Option<u64> {
        self.lookup(key, Some(reader_ts), true)
    }

    fn lookup(&self, key: &[u8], gap_reader: Option<u64>, fill: bool) -> Option<u64> {
        // A key of illegal length can never be inserted, so no gap needs marking.
        let key = ProbeKey::new(key)?;
        retry(|| {
            let leaf = self.descend(Some(&key), |_, _| {})?;
            let (slot, found) = leaf.node().search(&key);
            if found {
                let value = leaf.node().value(slot);
                leaf.validate()?;
                if let Some(heads) = self.heads.as_ref().filter(|_| fill) {
                    heads.activate_for(self.node_count() * node::NODE_BYTES);
                    heads.fill(&key, value, || leaf.validate().is_ok());
                    heads.grow_for(self.len());
                }
                return Ok(Some(value));
            }
            match gap_reader {
                Some(reader_ts) => leaf.mark_gap_and_validate(reader_ts)?,
                None => leaf.validate()?,
            }
            Ok(None)
        })
    }

    /// Like [`get`](Self::get), for a caller about to replace the value: the
    /// path is marked with `ut` as a write's is, and the returned hint lets
    /// [`compare_and_set_hinted`](Self::compare_and_set_hinted) lock the
    /// leaf without descending again while nobody changed it.
    pub fn get_for_update(&self, key: &[u8], ut: u64) -> Option<(u64, UpdateHint<'_>)> {
        match self.probe_for_write(key, ut)? {
            (Some(value), hint) => Some((value, hint)),
            (None, _) => None,
        }
    }

    /// [`get_for_update`](Self::get_for_update) that also hands back the
    /// leaf of a key it finds absent, for
    /// [`insert_if_absent_hinted`](Self::insert_if_absent_hinted); `None`
    /// only for a key no index can hold.
    pub fn probe_for_write(&self, key: &[u8], ut: u64) -> Option<(Option<u64>, UpdateHint<'_>)> {
        let key = ProbeKey::new(key)?;
        Some(retry(|| {
            let leaf = self.descend(Some(&key), |guard, _| guard.node().mark_update_time(ut))?;
            let (slot, found) = leaf.node().search(&key);
            let value = leaf.node().value(slot);
            leaf.validate()?;
            if let Some(heads) = self.heads.as_ref().filter(|_| found) {
                heads.prefetch(&key);
            }
            let found_at = found.then_some(slot);
            Ok((found.then_some(value), UpdateHint { leaf, found_at }))
        }))
    }

    /// [`compare_and_set`](Self::compare_and_set) starting from the leaf a
    /// [`get_for_update`](Self::get_for_update) of the same key found; if
    /// that leaf changed since, from the root.
    ///
    /// Set from the hint, the answer says how it left the leaf, for the
    /// hints taken from the leaf before to follow ([`UpdateHint::follow`]):
    /// a commit that sets several keys of one leaf then descends for none.
    pub fn compare_and_set_hinted<'a>(
        &'a self,
        hint: &UpdateHint<'a>,
        key: &[u8],
        expected: u64,
        new: u64,
        ut: u64,
    ) -> Result<Option<LeafMoved<'a>>, Option<u64>> {
        let epoch = self.writer_epoch();
        let Some(mut leaf) = self.lock(&hint.leaf, epoch.as_ref()) else {
            drop(epoch);
            return self.compare_and_set(key, expected, new, ut).map(|()| None);
        };
        let key = probe_to_store(key);
        // Locked at the version the lookup validated, the leaf holds the
        // same words (a node version copies them): the key is where the
        // lookup found it, without searching again.
        let slot = match hint.found_at {
            Some(slot) => {
                assert!(
                    leaf.holds_at(slot, &key),
                    "a leaf locked at the version a lookup validated holds the key where it was found"
                );
                slot
            }
            None => match leaf.search(&key) {
                (slot, true) => slot,
                (_, false) => return Err(None),
            },
        };
        let current = leaf.value(slot);
        if current != expected {
            return Err(Some(current));
        }
        leaf.set_value(slot, new);
        Ok(Some(LeafMoved {
            before: hint.leaf,
            after: leaf.release(),
            shifted: false,
        }))
    }

    /// Inserts when absent. `Err(Exists(v))` if present; `Err(Phantom)` if the
    /// covering leaf's gap_read_ts > `writer_ts`.
    ///
    /// # Panics
    /// If the key is empty or longer than [`MAX_KEY_LEN`].
    pub fn insert_if_absent(
        &self,
        key: &[u8],
        value: u64,
        writer_ts: u64,
        ut: u64,
    ) -> Result<(), InsertError> {
        self.insert_or_else(key, value, (writer_ts, ut), |leaf, slot| {
            Err(InsertError::Exists(leaf.value(slot)))
        })
    }

    /// [`insert_if_absent`](Self::insert_if_absent) into the leaf where a
    /// [`probe_for_write`](Self::probe_for_write) of the same key found it
    /// absent, without descending again while nobody changed that leaf:
    /// leaves never merge, so an unchanged leaf still covers the key. From
    /// the root if it changed, or is full (a split needs the path).
    /// Inserted from the hint, the answer says how it left the leaf, for
    /// the hints taken from the leaf before to follow
    /// ([`UpdateHint::follow`]).
    ///
    /// # Panics
    /// As `insert_if_absent`.
    pub fn insert_if_absent_hinted<'a>(
        &'a self,
        hint: &UpdateHint<'a>,
        key: &[u8],
        value: u64,
        (writer_ts, ut): (u64, u64),
    ) -> Result<Option<LeafMoved<'a>>, InsertError> {
        let epoch = self.writer_epoch();
        if let Some(mut leaf) = self.lock(&hint.leaf, epoch.as_ref()) {
            let key = probe_to_store(key);
            let (slot, found) = leaf.search(&key);
            if found {
                return Err(InsertError::Exists(leaf.value(slot)));
            }
            if leaf.gap_read_ts() > writer_ts {
                return Err(InsertError::Phantom);
            }
            if self.insert_new(&mut leaf, slot, &key, value).is_ok() {
                return Ok(Some(LeafMoved {
                    before: hint.leaf,
                    after: leaf.release(),
                    shifted: true,
                }));
            }
        }
        drop(epoch);
        self.insert_if_absent(key, value, writer_ts, ut)
            .map(|()| None)
    }

    /// Inserts `key` with `value`, or raises an existing entry's value to
    /// at least `value` (secondary index entries carry the newest writer's
    /// timestamp). `Err(Phantom)` as `insert_if_absent` when the key is new
    /// and the covering leaf's gap_read_ts > `writer_ts`.
    ///
    /// # Panics
    /// If the key is empty or longer than [`MAX_KEY_LEN`].
    pub fn insert_or_raise(
        &self,
        key: &[u8],
        value: u64,
        writer_ts: u64,
        ut: u64,
    ) -> Result<(), InsertError> {
        self.insert_or_else(key, value, (writer_ts, ut), |leaf, slot| {
            if leaf.value(slot) < value {
                leaf.set_value(slot, value);
            }
            Ok(())
        })
    }

    /// Inserts a new `key` through the gap check (`Err(Phantom)` when the
    /// covering leaf's gap_read_ts > `writer_ts`); for a key already there,
    /// answers with `present` applied to its locked leaf and slot.
    fn insert_or_else(
        &self,
        key: &[u8],
        value: u64,
        (writer_ts, ut): (u64, u64),
        mut present: impl FnMut(&mut WriteGuard<'_>, usize) -> Result<(), InsertError>,
    ) -> Result<(), InsertError> {
        let key = probe_to_store(key);
        self.modify_leaf(&key, ut, |leaf| {
            let (slot, found) = leaf.search(&key);
            if found {
                return Done(present(leaf, slot));
            }
            if leaf.gap_read_ts() > writer_ts {
                return Done(Err(InsertError::Phantom));
            }
            match self.insert_new(leaf, slot, &key, value) {
                Ok(()) => Done(Ok(())),
                Err(NoRoom) => Full,
            }
        })
    }

    /// Replaces the value of an existing key only if it currently equals
    /// `expected`. `Err(current)` otherwise (`None` if absent).
    ///
    /// # Panics
    /// If the key is empty or longer than [`MAX_KEY_LEN`].
    pub fn compare_and_set(
        &self,
        key: &[u8],
        expected: u64,
        new: u64,
        ut: u64,
    ) -> Result<(), Option<u64>> {
        let key = probe_to_store(key);
        self.modify_leaf(&key, ut, |leaf| {
            let (slot, found) = leaf.search(&key);
            if !found {
                return Done(Err(None));
            }
            let current = leaf.value(slot);
            if current != expected {
                return Done(Err(Some(current)));
            }
            leaf.set_value(slot, new);
            Done(Ok(()))
        })
    }

    /// Unconditional upsert (MirrorIndex's head trees, tests); ignores gap
    /// marks. Returns the previous value.
    ///
    /// # Panics
    /// If the key is empty or longer than [`MAX_KEY_LEN`].
    pub fn upsert(&self, key: &[u8], value: u64, ut: u64) -> Option<u64> {
        let key = probe_to_store(key);
        self.modify_leaf(&key, ut, |leaf| {
            let (slot, found) = leaf.search(&key);
            if found {
                let previous = leaf.value(slot);
                leaf.set_value(slot, value);
                return Done(Some(previous));
            }
            match self.insert_new(leaf, slot, &key, value) {
                Ok(()) => Done(None),
                Err(NoRoom) => Full,
            }
        })
    }

    /// Removes the key, returning its value. Leaves are never merged.
    ///
    /// # Panics
    /// If the key is empty or longer than [`MAX_KEY_LEN`].
    pub fn remove(&self, key: &[u8], ut: u64) -> Option<u64> {
        let key = probe_to_store(key);
        self.modify_leaf(&key, ut, |leaf| {
            let (slot, found) = leaf.search(&key);
            if !found {
                return Done(None);
            }
            let value = leaf.remove_entry(slot);
            self.len.fetch_sub(1, Relaxed);
            Done(Some(value))
        })
    }

    /// Removes `key` only while its value is `expected`, first raising the
    /// leaf's gap timestamp to `gap_ts`: the gap that replaces the entry keeps
    /// protecting what readers of the entry saw against older inserters.
    pub fn remove_if(&self, key: &[u8], expected: u64, gap_ts: u64, ut: u64) -> bool {
        let key = probe_to_store(key);
        self.modify_leaf(&key, ut, |leaf| {
            let (slot, found) = leaf.search(&key);
            if !found || leaf.value(slot) != expected {
                return Done(false);
            }
            leaf.raise_gap_read_ts(gap_ts);
            leaf.remove_entry(slot);
            self.len.fetch_sub(1, Relaxed);
            Done(true)
        })
    }

    fn insert_new(
        &self,
        leaf: &mut WriteGuard<'_>,
        slot: usize,
        key: &impl KeyWords,
        value: u64,
    ) -> Result<(), NoRoom> {
        leaf.insert_entry(slot, key, value)?;
        // Under the leaf lock, so a removal of this key cannot decrement first.
        self.len.fetch_add(1, Relaxed);
        Ok(())
    }

    /// Runs `apply` on the locked leaf covering `key`, after marking the path
    /// with `ut`; splits and retries while `apply` reports the leaf full.
    fn modify_leaf<T>(
        &self,
        key: &impl KeyWords,
        ut: u64,
        mut apply: impl FnMut(&mut WriteGuard<'_>) -> LeafOutcome<T>,
    ) -> T {
        let backoff = Backoff::new();
        let epoch = self.writer_epoch();
        loop {
            let Ok(path) = self.descend_for_write(key, ut) else {
                backoff.snooze();
                continue;
            };
            let Some(mut leaf) = self.lock(&path.leaf(), epoch.as_ref()) else {
                backoff.snooze();
                continue;
            };
            match apply(&mut leaf) {
                Done(result) => return result,
                Full => self.split(
                    &path,
                    path.depth - 1,
                    leaf,
                    (ut, SplitBias::Middle, epoch.as_ref()),
                ),
            }
        }
    }

    /// Turns this tree (held exclusively) into one whose nodes have ids and
    /// versions, for HiEngine's IACoW checkpoints; see `versions`.
    pub fn with_node_versions(mut self) -> Self {
        self.root.adopt_versions();
        self
    }

    pub fn has_node_versions(&self) -> bool {
        self.root.versions().is_some()
    }

    /// The epoch membership a write to a tree with node versions runs in.
    fn writer_epoch(&self) -> Option<WriterEpoch<'_>> {
        self.root.versions().map(NodeVersions::enter)
    }

    /// Write-locks a node read optimistically, copying it first if a
    /// checkpoint's freeze still needs it as it is.
    #[inline]
    fn lock<'a>(
        &'a self,
        read: &ReadGuard<'a>,
        epoch: Option<&WriterEpoch<'_>>,
    ) -> Option<WriteGuard<'a>> {
        let guard = read.upgrade()?.with_heads(self.heads.as_ref());
        match (self.root.versions(), epoch) {
            (Some(versions), Some(epoch)) => guard.with_versions(versions, epoch.epoch),
            _ => Some(guard),
        }
    }

    /// Splits the locked node at `path[depth]`, splitting ancestors first
    /// where they lack room for the separator. Gives up silently when a lock
    /// cannot be had; the caller retries from the root either way.
    fn split(
        &self,
        path: &WritePath<'_>,
        depth: usize,
        mut node: WriteGuard<'_>,
        (ut, bias, epoch): (u64, SplitBias, Option<&WriterEpoch<'_>>),
    ) {
        if depth == 0 {
            if self.root.grow(node, ut) {
                self.nodes.fetch_add(2, Relaxed);
            }
            return;
        }
        let parent_read = path.at(depth - 1);
        let Some(mut parent) = self.lock(&parent_read, epoch) else {
            return;
        };
        match node.split_if(ut, bias, |separator| parent.has_room_for(separator)) {
            Some(half) => {
                parent.insert_child(half);
                self.nodes.fetch_add(1, Relaxed);
            }
            None => {
                // Both unlock untouched, keeping their versions, so the path
                // is still valid for splitting the parent.
                drop(node);
                drop(parent);
                if let Some(parent) = self.lock(&parent_read, epoch) {
                    self.split(path, depth - 1, parent, (ut, SplitBias::Middle, epoch));
                }
            }
        }
    }

    fn descend_for_write(&self, key: &impl KeyWords, ut: u64) -> Result<WritePath<'_>, Restart> {
        let mut path = WritePath::new();
        self.descend(Some(key), |guard, _| {
            guard.node().mark_update_time(ut);
            path.push(*guard);
        })?;
        Ok(path)
    }

    /// Optimistic lock coupling from the root to the leaf covering `key`
    /// (`None`: the leftmost leaf). `visit` sees each node with the child
    /// index about to be followed (`None` at the leaf); whatever it reads from
    /// an inner node is validated when the descent moves on.
    fn descend<'a, K: KeyWords>(
        &'a self,
        key: Option<&K>,
        mut visit: impl FnMut(&ReadGuard<'a>, Option<usize>),
    ) -> Result<ReadGuard<'a>, Restart> {
        let mut guard = self.root.read()?;
        while !guard.node().is_leaf() {
            let child = guard.node().child_index(key);
            visit(&guard, Some(child));
            guard = step_down(&self.root, &guard, child)?;
        }
        visit(&guard, None);
        Ok(guard)
    }
}

fn step_down<'a>(
    cell: &'a RootCell,
    parent: &ReadGuard<'a>,
    child: usize,
) -> Result<ReadGuard<'a>, Restart> {
    let child = parent.read_child(child, cell)?;
    // The child's version must be one it had while still linked where we found it.
    parent.validate()?;
    Ok(child)
}

fn retry<T>(mut attempt: impl FnMut() -> Result<T, Restart>) -> T {
    let backoff = Backoff::new();
    loop {
        if let Ok(value) = attempt() {
            return value;
        }
        backoff.snooze();
    }
}

fn key_to_store(key: &[u8]) -> InlineKey {
    InlineKey::new(key).unwrap_or_else(|| illegal_key(key))
}

/// Like [`key_to_store`], without copying: for one write.
fn probe_to_store(key: &[u8]) -> ProbeKey<'_> {
    ProbeKey::new(key).unwrap_or_else(|| illegal_key(key))
}

fn illegal_key(key: &[u8]) -> ! {
    panic!(
        "index keys must be 1..={MAX_KEY_LEN} bytes long, got {}",
        key.len()
    )
}

/// Where a key was found for an update (see [`BTree::get_for_update`]):
/// its leaf, at the version the lookup validated.
pub struct UpdateHint<'a> {
    leaf: ReadGuard<'a>,
    /// The key's slot, if the lookup found it there: valid while the leaf
    /// keeps the version `leaf` validated.
    found_at: Option<usize>,
}

impl<'a> UpdateHint<'a> {
    /// Carries this hint over an insert or a value set in its leaf (in
    /// place: the leaf covers the keys it covered) if it was taken from
    /// the leaf at the version that change started from. A writer whose
    /// changes go to one leaf one after the other, as a commit's do, then
    /// descends once.
    pub fn follow(&mut self, moved: &LeafMoved<'a>) {
        if self.leaf.same_read(&moved.before) {
            self.leaf = moved.after;
            // An insert moves the slots after its own; a value set none.
            if moved.shifted {
                self.found_at = None;
            }
        }
    }
}

/// A leaf a hinted insert or compare-and-set changed in place: as the
/// hint had it, and as the change left it.
pub struct LeafMoved<'a> {
    before: ReadGuard<'a>,
    after: ReadGuard<'a>,
    /// Whether slots moved (an insert), or only a value changed.
    shifted: bool,
}

impl<'a> LeafMoved<'a> {
    /// The moves so far with the next change's: as one where they chain
    /// ([`then`](Self::then)), else the next alone; a change made from
    /// the root (`None`) leaves nothing to follow.
    pub fn chain(earlier: Option<Self>, next: Option<Self>) -> Option<Self> {
        match (earlier, next) {
            (Some(earlier), Some(next)) => Some(earlier.then(next)),
            (_, next) => next,
        }
    }

    /// The two moves as one, if `next` started where this one left the
    /// leaf: hints taken before this one then follow both.
    pub fn then(self, next: LeafMoved<'a>) -> LeafMoved<'a> {
        match next.before.same_read(&self.after) {
            true => LeafMoved {
                before: self.before,
                after: next.after,
                shifted: self.shifted || next.shifted,
            },
            false => next,
        }
    }
}

/// The optimistic reads of one root-to-leaf descent, kept so that a split
/// can lock the parents at exactly the versions the descent validated.
struct WritePath<'a> {
    guards: [Option<ReadGuard<'a>>; MAX_HEIGHT],
    depth: usize,
}

impl<'a> WritePath<'a> {
    fn new() -> Self {
        Self {
            guards: [None; MAX_HEIGHT],
            depth: 0,
        }
    }

    fn push(&mut self, guard: ReadGuard<'a>) {
        assert!(self.depth < MAX_HEIGHT, "tree deeper than MAX_HEIGHT");
        self.guards[self.depth] = Some(guard);
        self.depth += 1;
    }

    fn at(&self, depth: usize) -> ReadGuard<'a> {
        self.guards[depth].expect("within the recorded path")
    }

    fn leaf(&self) -> ReadGuard<'a> {
        self.at(self.depth - 1)
    }
}
