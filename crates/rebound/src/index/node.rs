//! Fixed-size 4 KiB nodes, their version lock, and (with `node_memory.rs`,
//! where nodes live) the index's only `unsafe`: turning a validated child
//! word or the root pointer back into a node reference, and freeing the
//! nodes when the tree is dropped.
//!
//! Everything an optimistic reader may touch while a writer changes it is an
//! atomic, so an optimistic read is never a data race. Every count, offset and
//! length read from node memory is clamped into the node before it is used as
//! an index, so a torn read yields garbage that version validation rejects but
//! never an out-of-bounds access or a panic. The one value whose garbage would
//! be dangerous, a child address, is only dereferenced after validation, and
//! that rule is enforced by the API: [`ReadGuard::child`] is the only way to
//! follow a child word, and it validates first.
#![allow(unsafe_code)]

use std::array;
use std::cmp::Ordering;
use std::ptr;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release, SeqCst};
use std::sync::atomic::{fence, AtomicU64};

use crossbeam_utils::Backoff;

use super::head_cache::{hash_words, HeadCache};
use super::key::{compare_stored, shortest_separator, tail_words, InlineKey, KeyWords};
use super::node_memory::OwnedNode;
use super::versions::{Entry, NodeVersions, Prepared};
use super::MAX_KEY_LEN;

pub(crate) const NODE_BYTES: usize = 4096;
const NODE_WORDS: usize = NODE_BYTES / 8;
/// version, header, leftmost, level.
const HEADER_WORDS: usize = 4;
/// Search hints (LeanStore's): the heads of evenly spaced slots, next to the
/// header, so a search first narrows to one sixteenth of the slots from two
/// cache lines instead of bisecting across the whole 4 KiB node.
pub(crate) const HINTS: usize = 16;
/// Below this many slots a node keeps no hints: bisecting is as cheap.
const HINTED_FROM: usize = 2 * (HINTS + 1);
/// update_time and gap_read_ts sit at the far end of the node, away from the
/// version word every reader polls, because writers bump update_time on every
/// node of their path and would otherwise keep invalidating that cache line.
const TRAILER_WORDS: usize = 2;
pub(crate) const BODY_WORDS: usize = NODE_WORDS - HEADER_WORDS - HINTS - TRAILER_WORDS;
/// head, meta, payload.
const SLOT_WORDS: usize = 3;
/// Up to this many slots a search counts the heads below the key instead
/// of bisecting: no branch on the data, and the slots' loads, independent
/// of each other, miss in parallel.
const LINEAR_FROM: usize = 16;
pub(crate) const MAX_SLOTS: usize = BODY_WORDS / SLOT_WORDS;
const MAX_ENTRY_WORDS: usize = SLOT_WORDS + tail_words(MAX_KEY_LEN);
const _: () = assert!(
    BODY_WORDS >= 4 * MAX_ENTRY_WORDS,
    "a node must hold four maximal keys"
);
const _: () = assert!(
    BODY_WORDS < 1 << 16 && MAX_KEY_LEN < 1 << 16,
    "16-bit fields"
);
const _: () = assert!(std::mem::size_of::<Node>() == NODE_BYTES);

const LEVEL_BITS: u32 = 8;
/// Levels a loaded node may claim: a path is at most `MAX_HEIGHT` deep.
const MAX_LEVEL: usize = super::MAX_HEIGHT;
const LEVEL_MASK: u64 = (1 << LEVEL_BITS) - 1;
/// Set in a child word (or the root word) that holds a node id, shifted
/// left by one, instead of an address: node addresses are 4096-aligned.
pub(crate) const ID_TAG: u64 = 1;

const OBSOLETE: u64 = 0b01;
const LOCKED: u64 = 0b10;
const VERSION_STEP: u64 = 0b100;

/// The optimistic read or lock attempt saw a concurrent change; start over.
#[derive(Debug)]
pub(crate) struct Restart;

/// The entry does not fit even after compaction; the node must be split.
#[derive(Debug)]
pub(crate) struct NoRoom;

#[repr(C, align(64))]
pub(crate) struct Node {
    version: AtomicU64,
    header: AtomicU64,
    /// Inner nodes: the child for keys below the first separator.
    leftmost: AtomicU64,
    /// Bits 0..8: the level, 0 for leaves, never changed. Bits 8..: the
    /// node id in a tree with node versions (`versions`), else 0. Atomic
    /// because a recycled node version is rewritten while stale optimistic
    /// readers may still load it.
    ident: AtomicU64,
    /// `hints[i]` = head of slot `hint_slot(i, count)` while count >= HINTED_FROM.
    hints: [AtomicU64; HINTS],
    body: [AtomicU64; BODY_WORDS],
    update_time: AtomicU64,
    gap_read_ts: AtomicU64,
}

/// The mutable bookkeeping word of a node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Header {
    count: usize,
    /// Body word where the key-tail heap starts; it grows down from the end.
    heap_start: usize,
    /// Heap words left behind by removed entries (and by split-off slots
    /// whose tails were not at the heap's low end), reclaimed by compaction.
    dead: usize,
}

impl Header {
    const EMPTY: Header = Header {
        count: 0,
        heap_start: BODY_WORDS,
        dead: 0,
    };

    /// Clamped so that any bit pattern, torn or not, decodes to in-bounds values.
    #[inline]
    fn decode(raw: u64) -> Self {
        let field = |shift: u32| (raw >> shift) as usize & 0xFFFF;
        Self {
            count: field(0).min(MAX_SLOTS),
            heap_start: field(16).min(BODY_WORDS),
            dead: field(32).min(BODY_WORDS),
        }
    }

    fn encode(self) -> u64 {
        self.count as u64 | (self.heap_start as u64) << 16 | (self.dead as u64) << 32
    }

    fn free_words(self) -> usize {
        self.heap_start.saturating_sub(self.count * SLOT_WORDS)
    }
}

fn encode_meta(len: usize, tail_offset: usize) -> u64 {
    len as u64 | (tail_offset as u64) << 16
}

/// Key length and tail offset, clamped so the tail always lies in the body.
#[inline]
fn decode_meta(raw: u64) -> (usize, usize) {
    let len = (raw as usize & 0xFFFF).min(MAX_KEY_LEN);
    let tail_offset = ((raw >> 16) as usize & 0xFFFF).min(BODY_WORDS - tail_words(len));
    (len, tail_offset)
}

/// Slot-array logic shared by live nodes (atomic words, possibly read
/// optimistically) and [`Page`]s (plain words, private to one thread).
trait SlotView {
    /// Body word `index`; callers keep `index < BODY_WORDS`.
    fn word(&self, index: usize) -> u64;
    fn header(&self) -> Header;

    #[inline]
    fn slot_word(&self, slot: usize, field: usize) -> u64 {
        self.word(slot.min(MAX_SLOTS - 1) * SLOT_WORDS + field)
    }

    #[inline]
    fn slot_head(&self, slot: usize) -> u64 {
        self.slot_word(slot, 0)
    }

    #[inline]
    fn slot_layout(&self, slot: usize) -> (usize, usize) {
        decode_meta(self.slot_word(slot, 1))
    }

    #[inline]
    fn slot_payload(&self, slot: usize) -> u64 {
        self.slot_word(slot, 2)
    }

    /// The slots `low..high` that can hold the first slot >= a key with head
    /// word `head`; nodes narrow it with their hints.
    #[inline]
    fn search_range(&self, count: usize, _head: u64) -> (usize, usize) {
        (0, count)
    }

    #[inline]
    fn compare_slot(&self, slot: usize, key: &impl KeyWords) -> Ordering {
        let head = self.slot_head(slot);
        if head != key.word(0) {
            return head.cmp(&key.word(0));
        }
        let (len, tail_offset) = self.slot_layout(slot);
        let word_at = |index: usize| match index {
            0 => head,
            _ => self.word(tail_offset + index - 1),
        };
        compare_stored(len, word_at, key)
    }

    /// First slot whose key is >= `key`, and whether it is equal.
    ///
    /// Once hints narrowed the range to a few slots, the first slot whose
    /// head is not below the key's is counted without branches on the
    /// data, and full keys decide only when that slot has the key's own
    /// head. Wider ranges (small nodes without hints, runs of keys sharing
    /// a head) are bisected.
    #[inline]
    fn find(&self, key: &impl KeyWords) -> (usize, bool) {
        let head = key.word(0);
        let (low, high) = self.search_range(self.header().count, head);
        if high - low > LINEAR_FROM {
            self.prefetch_slots(low, high);
            return self.bisect(low, high, key);
        }
        let at = low + self.heads_below(low, high, head);
        if at == high || self.slot_head(at) != head {
            return (at, false);
        }
        match self.compare_slot(at, key) {
            Ordering::Equal => (at, true),
            Ordering::Greater => (at, false),
            Ordering::Less => self.bisect(at + 1, high, key),
        }
    }

    /// First slot of `low..high` whose key is >= `key` (`high` if none),
    /// and whether it is equal.
    fn bisect(&self, mut low: usize, mut high: usize, key: &impl KeyWords) -> (usize, bool) {
        while low < high {
            let mid = (low + high) / 2;
            match self.compare_slot(mid, key) {
                Ordering::Less => low = mid + 1,
                Ordering::Greater => high = mid,
                Ordering::Equal => return (mid, true),
            }
        }
        (low, false)
    }

    /// Starts loading the lines of slots `low..high`, for a bisection's
    /// probes; nodes do.
    #[inline]
    fn prefetch_slots(&self, _low: usize, _high: usize) {}

    /// How many of the slots `low..high` have a head below `head`.
    #[inline]
    fn heads_below(&self, low: usize, high: usize, head: u64) -> usize {
        (low..high)
            .map(|slot| usize::from(self.slot_head(slot) < head))
            .sum()
    }

    fn key_at(&self, slot: usize) -> InlineKey {
        let (len, tail_offset) = self.slot_layout(slot);
        let tail = (0..tail_words(len)).map(|index| self.word(tail_offset + index));
        InlineKey::from_words(len, std::iter::once(self.slot_head(slot)).chain(tail))
    }

    fn entry_words(&self, slot: usize) -> usize {
        SLOT_WORDS + tail_words(self.slot_layout(slot).0)
    }

    fn words_before(&self, slot: usize) -> usize {
        (0..slot).map(|s| self.entry_words(s)).sum()
    }
}

/// A plain, thread-private image of a node's contents, used to build nodes
/// and to rewrite them wholesale (merges, inner-node splits, compaction).
#[derive(Clone)]
struct Page {
    header: Header,
    leftmost: u64,
    body: [u64; BODY_WORDS],
}

impl SlotView for Page {
    fn word(&self, index: usize) -> u64 {
        self.body[index]
    }

    fn header(&self) -> Header {
        self.header
    }
}

impl Page {
    fn empty(leftmost: u64) -> Self {
        Self {
            header: Header::EMPTY,
            leftmost,
            body: [0; BODY_WORDS],
        }
    }

    fn used_words(&self) -> usize {
        BODY_WORDS - self.header.free_words()
    }

    /// What the node built from this page keeps as hint `i`.
    fn hint(&self, i: usize) -> u64 {
        let count = self.header.count;
        match count >= HINTED_FROM {
            true => self.slot_head(hint_slot(i, count)),
            false => 0,
        }
    }

    fn push(
        &mut self,
        len: usize,
        head: u64,
        tail: impl ExactSizeIterator<Item = u64>,
        payload: u64,
    ) {
        let tail_len = tail.len();
        assert!(
            self.header.free_words() >= SLOT_WORDS + tail_len,
            "page overflow"
        );
        let tail_offset = self.header.heap_start - tail_len;
        for (dst, word) in self.body[tail_offset..].iter_mut().zip(tail) {
            *dst = word;
        }
        let first = self.header.count * SLOT_WORDS;
        self.body[first..first + SLOT_WORDS].copy_from_slice(&[
            head,
            encode_meta(len, tail_offset),
            payload,
        ]);
        self.header.count += 1;
        self.header.heap_start = tail_offset;
    }

    fn push_key(&mut self, key: &InlineKey, payload: u64) {
        self.push(key.len(), key.word(0), key.tail(), payload);
    }

    fn push_copy(&mut self, source: &Page, slot: usize) {
        self.push_copy_with(source, slot, source.slot_payload(slot));
    }

    /// `push_copy` with another payload.
    fn push_copy_with(&mut self, source: &Page, slot: usize, payload: u64) {
        let (len, tail_offset) = source.slot_layout(slot);
        let tail = source.body[tail_offset..tail_offset + tail_words(len)].iter();
        self.push(len, source.slot_head(slot), tail.copied(), payload);
    }
}

impl SlotView for Node {
    #[inline]
    fn word(&self, index: usize) -> u64 {
        self.body[index].load(Relaxed)
    }

    #[inline]
    fn header(&self) -> Header {
        Header::decode(self.header.load(Relaxed))
    }

    /// Hint `i` bounds the answer from below when its head is below `head`
    /// and from above when it is above; equal heads say nothing, as longer
    /// keys with the same head may sort either way. Hints are sorted because
    /// heads are, so a bisection without branches on the data finds how
    /// many lie below.
    #[inline]
    fn search_range(&self, count: usize, head: u64) -> (usize, usize) {
        if count < HINTED_FROM {
            return (0, count);
        }
        let hint = |i: usize| self.hints[i.min(HINTS - 1)].load(Relaxed);
        let mut below = 0;
        let mut step = HINTS / 2;
        while step > 0 {
            below += usize::from(hint(below + step - 1) < head) * step;
            step /= 2;
        }
        // The halving steps decide 0..=HINTS-1; the last hint decides HINTS.
        below += usize::from(hint(below) < head);
        // Equal heads (keys sharing their first 8 bytes) widen the range.
        let mut not_above = below;
        while not_above < HINTS && hint(not_above) == head {
            not_above += 1;
        }
        let low = match below {
            0 => 0,
            n => hint_slot(n - 1, count) + 1,
        };
        let high = match not_above {
            HINTS => count,
            n => hint_slot(n, count),
        };
        // Torn hints may disagree with the count; validation rejects the
        // answer then, but the range must stay inside the slots.
        let high = high.min(count);
        (low.min(high), high)
    }

    #[inline]
    fn prefetch_slots(&self, low: usize, high: usize) {
        let first = self
            .body
            .as_ptr()
            .wrapping_add(low * SLOT_WORDS)
            .cast::<u8>();
        let misalign = first.addr() % 64;
        let lines = ((high - low) * SLOT_WORDS * 8 + misalign).div_ceil(64);
        let mut line = first.wrapping_sub(misalign);
        for _ in 0..lines {
            crate::medium::prefetch(line);
            line = line.wrapping_add(64);
        }
    }

    /// The heads' loads do not depend on each other, so their misses
    /// overlap without prefetching.
    #[inline]
    fn heads_below(&self, low: usize, high: usize, head: u64) -> usize {
        let slots = self
            .body
            .get(low * SLOT_WORDS..high * SLOT_WORDS)
            .unwrap_or_default();
        slots
            .chunks_exact(SLOT_WORDS)
            .map(|slot| usize::from(slot[0].load(Relaxed) < head))
            .sum()
    }
}

/// Starts loading what a search reads first in a node: the lines holding
/// the version, the header and the hints.
#[inline]
fn prefetch_head(node: *const Node) {
    let bytes = node.cast::<u8>();
    for line in 0..(HEADER_WORDS + HINTS).div_ceil(8) {
        crate::medium::prefetch(bytes.wrapping_add(line * 64));
    }
}

/// The slot whose head hint `i` holds in a node of `count` slots.
#[inline]
fn hint_slot(i: usize, count: usize) -> usize {
    (i + 1) * count / (HINTS + 1)
}

/// Read accessors. Unless the caller holds the node's write lock, every result
/// is optimistic: meaningful only once the caller's [`ReadGuard`] validates.
impl Node {
    fn from_page(level: u64, page: &Page, update_time: u64, gap_read_ts: u64) -> OwnedNode {
        OwnedNode::new(Node {
            version: AtomicU64::new(0),
            header: AtomicU64::new(page.header.encode()),
            leftmost: AtomicU64::new(page.leftmost),
            ident: AtomicU64::new(level),
            hints: array::from_fn(|i| AtomicU64::new(page.hint(i))),
            body: array::from_fn(|index| AtomicU64::new(page.body[index])),
            update_time: AtomicU64::new(update_time),
            gap_read_ts: AtomicU64::new(gap_read_ts),
        })
    }

    /// A copy of a node the caller holds locked, with version word `version`.
    fn copy_of(source: &Node, version: u64) -> Node {
        Node {
            version: AtomicU64::new(version),
            header: AtomicU64::new(source.header.load(Relaxed)),
            leftmost: AtomicU64::new(source.leftmost.load(Relaxed)),
            ident: AtomicU64::new(source.ident.load(Relaxed)),
            hints: array::from_fn(|i| AtomicU64::new(source.hints[i].load(Relaxed))),
            body: array::from_fn(|i| AtomicU64::new(source.body[i].load(Relaxed))),
            update_time: AtomicU64::new(source.update_time.load(Relaxed)),
            // After the lock, as an inserter loads it (`mark_gap_and_validate`).
            gap_read_ts: AtomicU64::new(source.gap_read_ts.load(SeqCst)),
        }
    }

    /// Overwrites every word but the version with those of a node the
    /// caller holds locked; only atomic stores, as stale readers may look.
    fn copy_words_from(&self, source: &Node) {
        self.header.store(source.header.load(Relaxed), Relaxed);
        self.leftmost.store(source.leftmost.load(Relaxed), Relaxed);
        self.ident.store(source.ident.load(Relaxed), Relaxed);
        for (to, from) in self.hints.iter().zip(&source.hints) {
            to.store(from.load(Relaxed), Relaxed);
        }
        for (to, from) in self.body.iter().zip(&source.body) {
            to.store(from.load(Relaxed), Relaxed);
        }
        self.update_time
            .store(source.update_time.load(Relaxed), Relaxed);
        self.gap_read_ts
            .store(source.gap_read_ts.load(SeqCst), SeqCst);
    }

    pub(crate) fn empty_leaf() -> OwnedNode {
        Self::from_page(0, &Page::empty(0), 0, 0)
    }

    /// Stable identity: nodes are never freed or moved while the tree is shared.
    pub(crate) fn id(&self) -> usize {
        ptr::from_ref(self).addr()
    }

    #[inline]
    pub(crate) fn is_leaf(&self) -> bool {
        self.level() == 0
    }

    #[inline]
    pub(crate) fn level(&self) -> usize {
        (self.ident.load(Relaxed) & LEVEL_MASK) as usize
    }

    /// The id a tree with node versions knows this node by (0: none).
    pub(crate) fn node_id(&self) -> u64 {
        self.ident.load(Relaxed) >> LEVEL_BITS
    }

    pub(crate) fn set_node_id(&self, id: u64) {
        self.ident
            .store(id << LEVEL_BITS | self.level() as u64, Relaxed);
    }

    #[inline]
    pub(crate) fn count(&self) -> usize {
        self.header().count
    }

    /// First slot whose key is >= `key`, and whether it is equal.
    #[inline]
    pub(crate) fn search(&self, key: &impl KeyWords) -> (usize, bool) {
        self.find(key)
    }

    /// The child covering `key` (`None` = below every key): 0 is the leftmost
    /// child, `i > 0` the child of slot `i - 1`.
    #[inline]
    pub(crate) fn child_index<K: KeyWords>(&self, key: Option<&K>) -> usize {
        key.map_or(0, |key| {
            let (slot, found) = self.find(key);
            slot + usize::from(found)
        })
    }

    /// The value of a leaf slot.
    #[inline]
    pub(crate) fn value(&self, slot: usize) -> u64 {
        self.slot_payload(slot)
    }

    pub(crate) fn key(&self, slot: usize) -> InlineKey {
        self.key_at(slot)
    }

    #[inline]
    pub(crate) fn compare_key(&self, slot: usize, key: &impl KeyWords) -> Ordering {
        self.compare_slot(slot, key)
    }

    /// Appends the slot's key bytes to `out` without building an [`InlineKey`].
    pub(crate) fn append_key(&self, slot: usize, out: &mut Vec<u8>) {
        let (len, tail_offset) = self.slot_layout(slot);
        let start = out.len();
        out.extend_from_slice(&self.slot_head(slot).to_be_bytes());
        for index in 0..tail_words(len) {
            out.extend_from_slice(&self.word(tail_offset + index).to_be_bytes());
        }
        out.truncate(start + len);
    }

    pub(crate) fn update_time(&self) -> u64 {
        self.update_time.load(Acquire)
    }

    /// Path marking. The plain load first avoids dirtying the cache line of
    /// hot upper nodes when a concurrent writer already raised the mark.
    #[inline]
    pub(crate) fn mark_update_time(&self, ut: u64) {
        if self.update_time.load(Relaxed) < ut {
            self.update_time.fetch_max(ut, Relaxed);
        }
    }

    #[cfg(test)]
    pub(crate) fn gap_read_ts(&self) -> u64 {
        self.gap_read_ts.load(SeqCst)
    }

    /// Starts an optimistic read, waiting out a writer that holds the lock.
    #[inline]
    pub(crate) fn read_lock(&self) -> Result<ReadGuard<'_>, Restart> {
        let backoff = Backoff::new();
        loop {
            let version = self.version.load(Acquire);
            if version & OBSOLETE != 0 {
                return Err(Restart);
            }
            if version & LOCKED == 0 {
                return Ok(ReadGuard {
                    node: self,
                    version,
                });
            }
            backoff.snooze();
        }
    }

    /// Child addresses of an inner node that nobody else can see any more.
    fn owned_children(&mut self) -> Vec<*mut Node> {
        self.child_words()
            .into_iter()
            .map(|raw| ptr::with_exposed_provenance_mut(raw as usize))
            .collect()
    }
}

/// Turns an owned node into the word stored in a parent slot. Ownership moves
/// into the tree; [`RootCell`]'s `Drop` takes it back.
fn into_child_word(node: OwnedNode) -> u64 {
    node.into_raw().expose_provenance() as u64
}

/// An optimistic read of one node: the version seen when the read began.
/// Only [`Node::read_lock`] creates one, so `version` is always a version the
/// node really had while unlocked.
#[derive(Clone, Copy)]
pub(crate) struct ReadGuard<'a> {
    node: &'a Node,
    version: u64,
}

impl<'a> ReadGuard<'a> {
    #[inline]
    pub(crate) fn node(&self) -> &'a Node {
        self.node
    }

    /// Succeeds iff no writer locked the node since the read began, so every
    /// value read from it in between was a consistent snapshot.
    #[inline]
    pub(crate) fn validate(&self) -> Result<(), Restart> {
        // Orders the preceding relaxed reads of node words before the recheck.
        fence(Acquire);
        if self.node.version.load(Relaxed) == self.version {
            Ok(())
        } else {
            Err(Restart)
        }
    }

    /// Whether both read the same node at the same version.
    pub(crate) fn same_read(&self, other: &ReadGuard<'_>) -> bool {
        std::ptr::eq(self.node, other.node) && self.version == other.version
    }

    /// Records `reader_ts` as having read this leaf's gaps, then validates.
    ///
    /// Pairs with an inserter, which locks (a SeqCst CAS on the version) and
    /// then loads gap_read_ts (SeqCst). In the single order of SeqCst
    /// operations either our fetch_max precedes the inserter's load, so the
    /// inserter sees our mark, or the inserter's lock precedes our version
    /// load, so validation fails and we redo the read.
    pub(crate) fn mark_gap_and_validate(&self, reader_ts: u64) -> Result<(), Restart> {
        self.node.gap_read_ts.fetch_max(reader_ts, SeqCst);
        fence(Acquire);
        if self.node.version.load(SeqCst) == self.version {
            Ok(())
        } else {
            Err(Restart)
        }
    }

    /// Follows child `index` (see [`Node::child_index`]) of this inner node
    /// of the tree `cell` owns and starts an optimistic read of it.
    #[inline]
    pub(crate) fn read_child(
        &self,
        index: usize,
        cell: &'a RootCell,
    ) -> Result<ReadGuard<'a>, Restart> {
        // A stale index could name a slot past the end, whose word holds no
        // child; and a recycled node version (`versions`) may have become a
        // leaf since the caller saw an inner node.
        if index > self.node.count() || self.node.is_leaf() {
            return Err(Restart);
        }
        let raw = match index {
            0 => self.node.leftmost.load(Relaxed),
            _ => self.node.slot_payload(index - 1),
        };
        // Before validating: the child's first lines (version, header,
        // hints) start loading while the parent is checked; locating a torn
        // word loads atomics only, and a prefetch of a torn address is
        // harmless.
        let child = cell.locate(raw);
        prefetch_head(child);
        self.validate()?;
        if child.is_null() {
            return Err(Restart);
        }
        // SAFETY: `raw` was read between observing `version` unlocked (Acquire
        // load in `read_lock`) and observing it unchanged after an Acquire
        // fence (`validate`). Writers set the lock bit and issue a Release
        // fence before changing any word, so had any writer changed the node
        // in between, validation would have failed (seqlock argument): `raw`
        // is the leftmost word or a payload word of slot < count of an inner
        // node as a completed writer left it. Those words only ever hold
        // addresses exposed from `OwnedNode::into_raw` of a fully built node
        // (`into_child_word`, or moves of such words between nodes by splits,
        // which never duplicate or drop them), or in a tree with node
        // versions the tagged id of a node whose entry (loaded with Acquire,
        // published with Release after the node was built) holds a version
        // the tree owns. The Acquire version load synchronized with the
        // Release unlock of the writer that published the word, so the
        // child's initialization is visible. Nodes are freed only by
        // `RootCell::drop`, which needs exclusive access, while `'a` borrows
        // the tree shared; a recycled version is rewritten only through
        // atomics (`versions`).
        let child = unsafe { &*child }.read_lock()?;
        // The entry named a version of the child when it was loaded, but
        // that version may since have been replaced, recycled and reused
        // for another node whose version this read saw first: its id tells.
        if raw & ID_TAG != 0 && child.node.node_id() != raw >> 1 {
            return Err(Restart);
        }
        Ok(child)
    }

    /// Takes the write lock if the node is still at the version this read saw.
    /// Never waits, so lock order cannot deadlock.
    #[inline]
    pub(crate) fn upgrade(&self) -> Option<WriteGuard<'a>> {
        self.node
            .version
            .compare_exchange(self.version, self.version | LOCKED, SeqCst, Relaxed)
            .ok()?;
        // Keeps the word writes that follow from becoming visible before the
        // lock bit (see `validate`).
        fence(Release);
        Some(WriteGuard {
            node: self.node,
            version: self.version,
            dirty: false,
            link: None,
            replaces: None,
            heads: None,
        })
    }
}

/// The write lock on a node. Dropping it unlocks: with a new version if
/// anything changed, with the old version if nothing did, so optimistic
/// readers that overlapped a lock taken in vain need not restart.
pub(crate) struct WriteGuard<'a> {
    node: &'a Node,
    version: u64,
    dirty: bool,
    /// In a tree with node versions: where new nodes get ids, and the
    /// writer's epoch.
    link: Option<(&'a NodeVersions, u64)>,
    /// The version `node`, a copy, replaces when the guard drops.
    replaces: Option<Replaced<'a>>,
    /// The tree's head cache, kept true by every change of a value.
    heads: Option<&'a HeadCache>,
}

struct Replaced<'a> {
    original: &'a Node,
    version: u64,
    entry: &'a Entry,
    /// The freeze that keeps the original.
    for_epoch: u64,
}

impl Drop for WriteGuard<'_> {
    fn drop(&mut self) {
        let next = self.unlocked_version();
        self.node.version.store(next, Release);
        if let (Some(replaced), Some((versions, epoch))) = (self.replaces.take(), self.link) {
            versions.publish(replaced.entry, ptr::from_ref(self.node).cast_mut(), epoch);
            // Readers of the original restart, and find the copy by its id.
            let retired = replaced.version.wrapping_add(VERSION_STEP) | OBSOLETE;
            replaced.original.version.store(retired, Release);
            versions.retire(replaced.original, replaced.for_epoch);
        }
    }
}

/// The right half of a split node and the key that routes to it.
pub(crate) struct SplitOff {
    separator: InlineKey,
    right: OwnedNode,
}

impl<'a> WriteGuard<'a> {
    /// The version unlocking gives the node: a new one if anything changed.
    fn unlocked_version(&self) -> u64 {
        if self.dirty || self.replaces.is_some() {
            self.version.wrapping_add(VERSION_STEP)
        } else {
            self.version
        }
    }

    /// Unlocks, and hands back the node as read at the version the unlock
    /// gave it: whoever changed the node knows exactly what it holds there.
    pub(crate) fn release(self) -> ReadGuard<'a> {
        let read = ReadGuard {
            node: self.node,
            version: self.unlocked_version(),
        };
        drop(self);
        read
    }

    /// Joins the locked node to its tree's node versions for a writer of
    /// `epoch`: if a freeze needs the node as it is, the guard moves to a
    /// copy that replaces it when the guard drops. `None` (unlocked
    /// untouched): retry, the freeze still waits for older writers.
    pub(crate) fn with_versions(mut self, versions: &'a NodeVersions, epoch: u64) -> Option<Self> {
        self.link = Some((versions, epoch));
        let (entry, for_epoch) = match versions.prepare_write(self.node, epoch) {
            Prepared::InPlace => return Some(self),
            Prepared::NotYet => return None,
            Prepared::Copy(entry, for_epoch) => (entry, for_epoch),
        };
        let (copy, version) = match versions.recycled() {
            Some(recycled) => {
                let version = recycled.version.load(Relaxed) & !(OBSOLETE | LOCKED);
                let version = version.wrapping_add(VERSION_STEP);
                recycled.version.store(version | LOCKED, Relaxed);
                // Stale readers of the recycled node see the lock first.
                fence(Release);
                recycled.copy_words_from(self.node);
                (recycled, version)
            }
            None => {
                let fresh = OwnedNode::new(Node::copy_of(self.node, LOCKED)).into_raw();
                // SAFETY: just built; ownership passes to the node versions
                // when the guard publishes it, and its memory lives as long
                // as the tree that `'a` borrows.
                (unsafe { &*fresh }, 0)
            }
        };
        self.replaces = Some(Replaced {
            original: self.node,
            version: self.version,
            entry,
            for_epoch,
        });
        self.node = copy;
        self.version = version;
        Some(self)
    }

    /// Turns a new node into the word a parent (or the root cell) stores.
    fn link_node(&self, node: OwnedNode) -> u64 {
        match self.link {
            Some((versions, epoch)) => versions.register(node, epoch),
            None => into_child_word(node),
        }
    }

    fn begin_write(&mut self) -> &'a Node {
        self.dirty = true;
        self.node
    }

    fn assert_leaf(&self) {
        assert!(self.node.is_leaf(), "entries live in leaves only");
    }

    /// Loaded after the lock was taken; see [`ReadGuard::mark_gap_and_validate`].
    pub(crate) fn gap_read_ts(&self) -> u64 {
        self.node.gap_read_ts.load(SeqCst)
    }

    /// Raises the gap timestamp under the lock (an entry that readers saw
    /// is about to become a gap).
    pub(crate) fn raise_gap_read_ts(&self, ts: u64) {
        self.node.gap_read_ts.fetch_max(ts, SeqCst);
    }

    pub(crate) fn search(&self, key: &impl KeyWords) -> (usize, bool) {
        self.node.find(key)
    }

    /// Whether `slot` holds `key`: a check of one slot, where `search`
    /// looks through the leaf.
    pub(crate) fn holds_at(&self, slot: usize, key: &impl KeyWords) -> bool {
        slot < self.node.count() && self.node.compare_slot(slot, key) == Ordering::Equal
    }

    pub(crate) fn value(&self, slot: usize) -> u64 {
        self.node.slot_payload(slot)
    }

    /// Joins the locked leaf to its tree's head cache (`head_cache.rs`).
    pub(crate) fn with_heads(mut self, heads: Option<&'a HeadCache>) -> Self {
        self.heads = heads;
        self
    }

    pub(crate) fn set_value(&mut self, slot: usize, value: u64) {
        self.assert_leaf();
        assert!(slot < self.node.count());
        let node = self.begin_write();
        node.body[slot * SLOT_WORDS + 2].store(value, Relaxed);
        if let Some(heads) = self.heads.filter(|heads| heads.is_active()) {
            heads.replaced(self.slot_hash(slot), Some(value));
        }
    }

    /// The head-cache hash of the key in `slot`, from its node words.
    fn slot_hash(&self, slot: usize) -> u64 {
        let (len, tail_offset) = self.node.slot_layout(slot);
        let tail = (0..tail_words(len)).map(|index| self.node.word(tail_offset + index));
        hash_words(len, std::iter::once(self.node.slot_head(slot)).chain(tail))
    }

    pub(crate) fn insert_entry(
        &mut self,
        slot: usize,
        key: &impl KeyWords,
        value: u64,
    ) -> Result<(), NoRoom> {
        self.assert_leaf();
        self.insert_slot(slot, key, value)
    }

    /// Merges keys sorted strictly ascending, all inside this leaf's range,
    /// into it with one rewrite, where inserting them one by one would
    /// shift the slot array once per key. Keys the leaf has are skipped.
    /// Takes keys from the front while they fit; returns how many it
    /// consumed, how many of those went in, and whether the first key it
    /// could not take sorts after nine tenths of the leaf (a split should
    /// then leave room at the end: `SplitBias::Append`).
    /// With `overwrite`, keys the leaf has take the batch's values instead.
    /// Where a key the leaf has comes with another value, the value that
    /// loses (the leaf's with `overwrite`, else the batch's) goes into
    /// `displaced`.
    pub(crate) fn merge_sorted<K: KeyWords>(
        &mut self,
        keys: &[(K, u64)],
        overwrite: bool,
        displaced: &mut Vec<u64>,
    ) -> Merged {
        self.assert_leaf();
        if let Some(appended) = self.append_sorted(keys) {
            return appended;
        }
        if overwrite {
            if let Some(replaced) = self.replace_sorted(keys, displaced) {
                return replaced;
            }
        }
        let old = self.snapshot();
        let count = old.header.count;
        let mut old_left: usize = (0..count).map(|slot| old.entry_words(slot)).sum();
        let mut fresh = Page::empty(old.leftmost);
        let (mut slot, mut consumed, mut added, mut replaced) = (0, 0, 0, 0);
        while let Some((key, payload)) = keys.get(consumed) {
            let order = match slot < count {
                true => old.compare_slot(slot, key),
                false => Ordering::Greater,
            };
            match order {
                Ordering::Less => {
                    old_left -= old.entry_words(slot);
                    fresh.push_copy(&old, slot);
                    slot += 1;
                }
                Ordering::Equal if overwrite => {
                    old_left -= old.entry_words(slot);
                    displace(old.slot_payload(slot), *payload, displaced);
                    fresh.push_copy_with(&old, slot, *payload);
                    slot += 1;
                    consumed += 1;
                    replaced += 1;
                }
                Ordering::Equal => {
                    displace(*payload, old.slot_payload(slot), displaced);
                    consumed += 1;
                }
                Ordering::Greater => {
                    let needed = SLOT_WORDS + tail_words(key.len()) + old_left;
                    if fresh.header.free_words() < needed {
                        break;
                    }
                    fresh.push(key.len(), key.word(0), key.tail(), *payload);
                    consumed += 1;
                    added += 1;
                }
            }
        }
        // The keys still to come sort after what is left of the leaf's own
        // keys: few of those (a tenth of the leaf) means a split should keep
        // the left leaf nine tenths full, as for appends. Sorted loads into
        // a tree holding scattered keys (the redone ones) otherwise leave
        // every leaf half full.
        let near_end = 10 * old_left <= fresh.used_words() + old_left;
        let insert_at = fresh.header.count;
        if added > 0 || replaced > 0 {
            for slot in slot..count {
                fresh.push_copy(&old, slot);
            }
            self.store_page(&fresh);
        }
        Merged {
            consumed,
            added,
            near_end,
            insert_at,
        }
    }

    /// `merge_sorted` with `overwrite` where the leaf has every key: their
    /// values are set in place, where a merge rewrites the leaf. `None`
    /// when a key is missing (nothing changed then).
    fn replace_sorted<K: KeyWords>(
        &mut self,
        keys: &[(K, u64)],
        displaced: &mut Vec<u64>,
    ) -> Option<Merged> {
        let mut slots = Vec::with_capacity(keys.len());
        for (key, _) in keys {
            match self.node.find(key) {
                (slot, true) => slots.push(slot),
                (_, false) => return None,
            }
        }
        for (slot, (_, value)) in slots.into_iter().zip(keys) {
            displace(self.value(slot), *value, displaced);
            self.set_value(slot, *value);
        }
        Some(Merged {
            consumed: keys.len(),
            added: 0,
            near_end: false,
            insert_at: 0,
        })
    }

    /// `merge_sorted` where every key sorts after the leaf's own and no
    /// removal or split left dead words, the usual case of a sorted load: the keys
    /// are written after the leaf's slots in place, where a merge copies
    /// the leaf out and back. `None` when that does not apply. Checking the
    /// first key suffices, the batch being strictly ascending. Dead words
    /// would make this call the leaf full where a merge compacts them away,
    /// and the caller would split a leaf that may hold fewer than the two
    /// entries a split needs.
    fn append_sorted<K: KeyWords>(&mut self, keys: &[(K, u64)]) -> Option<Merged> {
        let header = self.node.header();
        let (first, _) = keys.first()?;
        let after_all = match header.count.checked_sub(1) {
            None => true,
            Some(last) => self.node.compare_slot(last, first) == Ordering::Less,
        };
        if header.dead != 0 || !after_all {
            return None;
        }
        let fits = |count: usize, heap_start: usize, key: &K| {
            heap_start.saturating_sub(count * SLOT_WORDS) >= SLOT_WORDS + tail_words(key.len())
        };
        let (mut count, mut heap_start) = (header.count, header.heap_start);
        if !fits(count, heap_start, first) {
            // Before `begin_write`: a leaf left as it was keeps its version,
            // so its optimistic readers need not restart.
            return Some(Merged {
                consumed: 0,
                added: 0,
                near_end: true,
                insert_at: count,
            });
        }
        let node = self.begin_write();
        for (key, payload) in keys {
            if !fits(count, heap_start, key) {
                break;
            }
            let tail_offset = heap_start - tail_words(key.len());
            for (index, word) in key.tail().enumerate() {
                node.body[tail_offset + index].store(word, Relaxed);
            }
            let at = count * SLOT_WORDS;
            node.body[at].store(key.word(0), Relaxed);
            node.body[at + 1].store(encode_meta(key.len(), tail_offset), Relaxed);
            node.body[at + 2].store(*payload, Relaxed);
            count += 1;
            heap_start = tail_offset;
        }
        let added = count - header.count;
        let header = Header {
            count,
            heap_start,
            ..header
        };
        node.header.store(header.encode(), Relaxed);
        self.refresh_hints();
        Some(Merged {
            consumed: added,
            added,
            near_end: true,
            insert_at: count,
        })
    }

    pub(crate) fn remove_entry(&mut self, slot: usize) -> u64 {
        self.assert_leaf();
        let header = self.node.header();
        assert!(slot < header.count);
        let value = self.node.slot_payload(slot);
        let (len, _) = self.node.slot_layout(slot);
        if let Some(heads) = self.heads.filter(|heads| heads.is_active()) {
            heads.replaced(self.slot_hash(slot), None);
        }
        let node = self.begin_write();
        for word in slot * SLOT_WORDS..(header.count - 1) * SLOT_WORDS {
            node.body[word].store(node.body[word + SLOT_WORDS].load(Relaxed), Relaxed);
        }
        let header = match header.count - 1 {
            0 => Header::EMPTY,
            count => Header {
                count,
                dead: header.dead + tail_words(len),
                ..header
            },
        };
        node.header.store(header.encode(), Relaxed);
        self.refresh_hints();
        value
    }

    /// Rewrites the hints after the slots moved; under the lock, so readers
    /// never act on hints that disagree with the slots they validated.
    fn refresh_hints(&mut self) {
        let node = self.begin_write();
        let count = node.count();
        if count < HINTED_FROM {
            return;
        }
        for (i, hint) in node.hints.iter().enumerate() {
            hint.store(node.slot_head(hint_slot(i, count)), Relaxed);
        }
    }

    /// Whether `key` fits, counting space that compaction would reclaim.
    pub(crate) fn has_room_for(&self, key: &impl KeyWords) -> bool {
        let header = self.node.header();
        header.free_words() + header.dead >= SLOT_WORDS + tail_words(key.len())
    }

    fn insert_slot(
        &mut self,
        slot: usize,
        key: &impl KeyWords,
        payload: u64,
    ) -> Result<(), NoRoom> {
        if !self.has_room_for(key) {
            return Err(NoRoom);
        }
        let tail_len = tail_words(key.len());
        if self.node.header().free_words() < SLOT_WORDS + tail_len {
            self.compact();
        }
        let header = self.node.header();
        assert!(slot <= header.count);
        let node = self.begin_write();
        let body = &node.body;
        let first = slot * SLOT_WORDS;
        for word in (first..header.count * SLOT_WORDS).rev() {
            body[word + SLOT_WORDS].store(body[word].load(Relaxed), Relaxed);
        }
        let tail_offset = header.heap_start - tail_len;
        for (index, word) in key.tail().enumerate() {
            body[tail_offset + index].store(word, Relaxed);
        }
        body[first].store(key.word(0), Relaxed);
        body[first + 1].store(encode_meta(key.len(), tail_offset), Relaxed);
        body[first + 2].store(payload, Relaxed);
        let header = Header {
            count: header.count + 1,
            heap_start: tail_offset,
            ..header
        };
        node.header.store(header.encode(), Relaxed);
        self.refresh_hints();
        Ok(())
    }

    fn snapshot(&self) -> Page {
        Page {
            header: self.node.header(),
            leftmost: self.node.leftmost.load(Relaxed),
            body: array::from_fn(|index| self.node.body[index].load(Relaxed)),
        }
    }

    fn store_page(&mut self, page: &Page) {
        let node = self.begin_write();
        let slots_end = page.header.count * SLOT_WORDS;
        let heap_start = page.header.heap_start;
        let live = (0..slots_end).chain(heap_start..BODY_WORDS);
        for index in live {
            node.body[index].store(page.body[index], Relaxed);
        }
        node.leftmost.store(page.leftmost, Relaxed);
        node.header.store(page.header.encode(), Relaxed);
        self.refresh_hints();
    }

    /// Drops the slots from `len` on (`page` is this node's snapshot).
    /// Their key tails go back to the free space when they are the heap's
    /// low end, as in a leaf filled in slot order (tails are disjoint, so
    /// spanning exactly their total from `heap_start` means covering it);
    /// otherwise they stay behind as dead words, which would keep
    /// `append_sorted` from the leaf until a compaction.
    fn truncate(&mut self, page: &Page, len: usize) {
        let mut header = page.header;
        let (mut dropped, mut lowest, mut end) = (0, BODY_WORDS, 0);
        for slot in len..header.count {
            let (key_len, offset) = page.slot_layout(slot);
            let words = tail_words(key_len);
            if words > 0 {
                dropped += words;
                lowest = lowest.min(offset);
                end = end.max(offset + words);
            }
        }
        match dropped > 0 && lowest == header.heap_start && end - lowest == dropped {
            true => header.heap_start += dropped,
            false => header.dead += dropped,
        }
        header.count = len;
        self.begin_write().header.store(header.encode(), Relaxed);
        self.refresh_hints();
    }

    /// Squeezes out the heap holes that removals left.
    fn compact(&mut self) {
        let old = self.snapshot();
        let mut fresh = Page::empty(old.leftmost);
        for slot in 0..old.header.count {
            fresh.push_copy(&old, slot);
        }
        self.store_page(&fresh);
    }

    /// Splits the node in place if `accept` approves the separator (the caller
    /// checks that the parent has room for it): the node keeps the lower half,
    /// the returned new node gets the upper half. Both halves carry the node's
    /// update time raised to `ut`, and the leaf gap mark.
    pub(crate) fn split_if(
        &mut self,
        ut: u64,
        bias: SplitBias,
        accept: impl FnOnce(&InlineKey) -> bool,
    ) -> Option<SplitOff> {
        let page = self.snapshot();
        let plan = SplitPlan::choose(&page, self.node.is_leaf(), bias);
        if !accept(&plan.separator) {
            return None;
        }
        let is_leaf = self.node.is_leaf();
        let right = plan.right_half(&page, is_leaf);
        self.node.mark_update_time(ut);
        let right = Node::from_page(
            self.node.level() as u64,
            &right,
            self.node.update_time(),
            self.gap_read_ts(),
        );
        match is_leaf {
            // A leaf's lower part is a prefix of its slots: it stays where
            // it is (a sorted load splits every leaf it fills, keeping nine
            // tenths, and rewriting those cost as much as filling them).
            true => self.truncate(&page, plan.left_len),
            false => self.store_page(&plan.left_half(&page)),
        }
        Some(SplitOff {
            separator: plan.separator,
            right,
        })
    }

    /// Links the right half of a split child into this inner node.
    pub(crate) fn insert_child(&mut self, half: SplitOff) {
        assert_eq!(
            half.right.level() + 1,
            self.node.level(),
            "child one level down"
        );
        assert!(self.has_room_for(&half.separator), "caller checked room");
        let (slot, found) = self.node.find(&half.separator);
        assert!(!found, "separators are unique");
        let right = self.link_node(half.right);
        self.insert_slot(slot, &half.separator, right)
            .expect("room was checked");
    }
}

/// Where to cut a node: slots `..left_len` stay, slots `right_start..` move.
/// For inner nodes the slot in between moves up as the separator and its child
/// becomes the right node's leftmost child.
struct SplitPlan {
    left_len: usize,
    right_start: usize,
    separator: InlineKey,
}

/// What `WriteGuard::merge_sorted` did.
pub(crate) struct Merged {
    pub consumed: usize,
    pub added: usize,
    pub near_end: bool,
    /// The slot the first key it could not take sorts before.
    pub insert_at: usize,
}

/// Notes `loser` unless it is the value that stays.
fn displace(loser: u64, kept: u64, displaced: &mut Vec<u64>) {
    if loser != kept {
        displaced.push(loser);
    }
}

/// Where a full node is cut.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SplitBias {
    /// In the middle: room on both sides for keys arriving anywhere.
    Middle,
    /// Near the end of a leaf that ascending keys are appended to, or that a
    /// sorted load fills up to its last tenth: the left leaf stays nine
    /// tenths full instead of half, and the following keys fill the right.
    Append,
    /// Before slot `n` of a leaf a sorted load goes on filling: its next key
    /// sorts between slots `n - 1` and `n`, so the left leaf keeps what is
    /// below it when that is at least half the leaf (else `Middle`); the
    /// load then fills it and splits it near its end.
    Before(usize),
}

impl SplitPlan {
    /// Cuts by bytes, not entry count, so both halves fit whatever the key sizes.
    fn choose(page: &Page, is_leaf: bool, bias: SplitBias) -> Self {
        let count = page.header.count;
        let total: usize = (0..count).map(|slot| page.entry_words(slot)).sum();
        let keep_tenths = match (bias, is_leaf) {
            (SplitBias::Append, true) => 9,
            _ => 5,
        };
        let mut running = 0;
        let middle = (0..count)
            .position(|slot| {
                running += page.entry_words(slot);
                10 * running >= keep_tenths * total
            })
            .unwrap_or(0);
        if is_leaf {
            assert!(count >= 2, "a full leaf has several entries");
            let left_len = match bias {
                SplitBias::Before(at) if at < count && 2 * page.words_before(at) >= total => at,
                _ => (middle + 1).clamp(1, count - 1),
            };
            let separator = shortest_separator(&page.key_at(left_len - 1), &page.key_at(left_len));
            Self {
                left_len,
                right_start: left_len,
                separator,
            }
        } else {
            assert!(count >= 1, "a full inner node has separators");
            let left_len = middle.min(count - 1);
            Self {
                left_len,
                right_start: left_len + 1,
                separator: page.key_at(left_len),
            }
        }
    }

    fn left_half(&self, page: &Page) -> Page {
        let mut left = Page::empty(page.leftmost);
        for slot in 0..self.left_len {
            left.push_copy(page, slot);
        }
        left
    }

    fn right_half(&self, page: &Page, is_leaf: bool) -> Page {
        let right_leftmost = if is_leaf {
            0
        } else {
            page.slot_payload(self.left_len)
        };
        let mut right = Page::empty(right_leftmost);
        for slot in self.right_start..page.header.count {
            right.push_copy(page, slot);
        }
        right
    }
}

/// Node images (IACoW checkpoints): the node's 512 words, little-endian,
/// with the version word and the gap mark zero (both mean nothing after a
/// restart) unless the caller puts something of its own in word 0.
pub const IMAGE_BYTES: usize = NODE_BYTES;
const IMAGE_HEADER_WORD: usize = 1;
const IMAGE_LEFTMOST_WORD: usize = 2;
const IMAGE_IDENT_WORD: usize = 3;
const IMAGE_HINTS: usize = HEADER_WORDS;
const IMAGE_BODY: usize = HEADER_WORDS + HINTS;
const IMAGE_UPDATE_TIME_WORD: usize = NODE_WORDS - 2;
const _: () = assert!(IMAGE_BODY + BODY_WORDS == IMAGE_UPDATE_TIME_WORD);
// An image is the node's memory: the fields in this order, no padding.
const _: () = assert!(
    std::mem::offset_of!(Node, leftmost) == 8 * IMAGE_LEFTMOST_WORD
        && std::mem::offset_of!(Node, ident) == 8 * IMAGE_IDENT_WORD
        && std::mem::offset_of!(Node, hints) == 8 * IMAGE_HINTS
        && std::mem::offset_of!(Node, body) == 8 * IMAGE_BODY
        && std::mem::offset_of!(Node, update_time) == 8 * IMAGE_UPDATE_TIME_WORD
);

impl Node {
    /// Appends this node's image; the caller makes sure nobody changes it.
    pub(crate) fn write_image(&self, out: &mut Vec<u8>) {
        out.reserve(IMAGE_BYTES);
        let mut put = |word: u64| out.extend_from_slice(&word.to_le_bytes());
        put(0);
        put(self.header.load(Relaxed));
        put(self.leftmost.load(Relaxed));
        put(self.ident.load(Relaxed));
        self.hints.iter().for_each(|hint| put(hint.load(Relaxed)));
        self.body.iter().for_each(|word| put(word.load(Relaxed)));
        put(self.update_time.load(Relaxed));
        put(0);
    }

    /// A node from the image `read` writes into its memory (returning
    /// false if it cannot); any bytes make a node that reads without
    /// panicking (every field is clamped on use), and `check_loaded` then
    /// judges it. The version word and the gap mark start at zero.
    pub(crate) fn from_image_with(read: impl FnOnce(&mut [u8]) -> bool) -> Option<OwnedNode> {
        OwnedNode::from_bytes(|bytes| {
            if !read(bytes) {
                return false;
            }
            // Images are little-endian; node words are native.
            #[cfg(target_endian = "big")]
            bytes.chunks_exact_mut(8).for_each(<[u8]>::reverse);
            bytes[..8].fill(0);
            bytes[IMAGE_BYTES - 8..].fill(0);
            true
        })
    }

    /// [`from_image_with`](Self::from_image_with) of an image in memory;
    /// `None` if it is not one node long.
    pub(crate) fn from_image(image: &[u8]) -> Option<OwnedNode> {
        Self::from_image_with(|bytes| match image.len() == bytes.len() {
            true => {
                bytes.copy_from_slice(image);
                true
            }
            false => false,
        })
    }

    /// Checks a node loaded from an image (nobody else sees it yet) as
    /// writers would have left it: header and slot fields in range without
    /// clamping, key tails inside the heap and disjoint, dead words
    /// counted exactly, keys strictly ascending within `[lower, upper)`, a
    /// leaf's leftmost word zero; then rewrites its hints from its slots.
    /// Garbage that passed the image's checksum thus never reaches a
    /// writer's assertions.
    pub(crate) fn check_loaded(
        &self,
        lower: Option<&InlineKey>,
        upper: Option<&InlineKey>,
    ) -> bool {
        let raw = self.header.load(Relaxed);
        let header = Header::decode(raw);
        if header.encode() != raw || header.count * SLOT_WORDS > header.heap_start {
            return false;
        }
        if self.is_leaf() && self.leftmost.load(Relaxed) != 0 || self.level() > MAX_LEVEL {
            return false;
        }
        let mut tails = Vec::with_capacity(header.count);
        for slot in 0..header.count {
            let meta = self.slot_word(slot, 1);
            let (len, tail_offset) = decode_meta(meta);
            if len == 0 || encode_meta(len, tail_offset) != meta {
                return false;
            }
            let words = tail_words(len);
            if words > 0 && tail_offset < header.heap_start {
                return false;
            }
            tails.push((tail_offset, words));
        }
        tails.retain(|&(_, words)| words > 0);
        tails.sort_unstable();
        let disjoint = tails.windows(2).all(|w| w[0].0 + w[0].1 <= w[1].0);
        let live: usize = tails.iter().map(|&(_, words)| words).sum();
        if !disjoint || live + header.dead != BODY_WORDS - header.heap_start {
            return false;
        }
        // Heads settle every comparison of keys that differ in their first
        // 8 bytes without building a key.
        let ascending = (1..header.count).all(|slot| {
            let (before, head) = (self.slot_head(slot - 1), self.slot_head(slot));
            before < head
                || before == head && self.compare_slot(slot - 1, &self.key_at(slot)).is_lt()
        });
        let last = header.count.checked_sub(1);
        let within = lower.is_none_or(|l| header.count == 0 || !self.compare_slot(0, l).is_lt())
            && upper.is_none_or(|u| last.is_none_or(|s| self.compare_slot(s, u).is_lt()));
        if !ascending || !within {
            return false;
        }
        for (i, hint) in self.hints.iter().enumerate() {
            let value = match header.count >= HINTED_FROM {
                true => self.slot_head(hint_slot(i, header.count)),
                false => 0,
            };
            hint.store(value, Relaxed);
        }
        true
    }

    /// Child words of an inner node (leftmost first); empty for a leaf.
    pub(crate) fn child_words(&self) -> Vec<u64> {
        if self.is_leaf() {
            return Vec::new();
        }
        std::iter::once(self.leftmost.load(Relaxed))
            .chain((0..self.count()).map(|slot| self.slot_payload(slot)))
            .collect()
    }
}

fn image_words(image: &[u8]) -> Option<[u64; NODE_WORDS]> {
    if image.len() != IMAGE_BYTES {
        return None;
    }
    let mut words = [0u64; NODE_WORDS];
    for (word, bytes) in words.iter_mut().zip(image.chunks_exact(8)) {
        *word = u64::from_le_bytes(bytes.try_into().expect("8 bytes"));
    }
    Some(words)
}

/// The node id and level an image carries.
pub(crate) fn image_ident(image: &[u8]) -> Option<(u64, usize)> {
    let ident = image_words(image)?[IMAGE_IDENT_WORD];
    Some((ident >> LEVEL_BITS, (ident & LEVEL_MASK) as usize))
}

/// Rewrites a leaf image's values: `value(v)` gives the value to keep, or
/// `None` to drop the entry; `ahead(v)` first sees every value, so that
/// what `value` will read can be prefetched. Returns the dropped entries
/// as (key, value), or `None` (image unchanged) for an inner node. Values
/// are replaced in place; only a dropped entry rebuilds the node.
pub fn rewrite_leaf_image(
    image: &mut [u8],
    mut ahead: impl FnMut(u64),
    mut value: impl FnMut(u64) -> Option<u64>,
) -> Option<Vec<(Vec<u8>, u64)>> {
    let words = image_words(image)?;
    if words[IMAGE_IDENT_WORD] & LEVEL_MASK != 0 {
        return None;
    }
    let count = Header::decode(words[IMAGE_HEADER_WORD]).count;
    let payload_word = |slot: usize| IMAGE_BODY + slot * SLOT_WORDS + 2;
    (0..count).for_each(|slot| ahead(words[payload_word(slot)]));
    let kept: Vec<Option<u64>> = (0..count)
        .map(|slot| value(words[payload_word(slot)]))
        .collect();
    if kept.iter().all(Option::is_some) {
        for (slot, kept) in kept.into_iter().enumerate() {
            let at = payload_word(slot) * 8;
            image[at..at + 8].copy_from_slice(&kept.unwrap_or_default().to_le_bytes());
        }
        return Some(Vec::new());
    }
    let old = Page {
        header: Header::decode(words[IMAGE_HEADER_WORD]),
        leftmost: 0,
        body: array::from_fn(|i| words[IMAGE_BODY + i]),
    };
    let mut dropped = Vec::new();
    let mut fresh = Page::empty(0);
    for (slot, kept) in kept.into_iter().enumerate() {
        let Some(kept) = kept else {
            dropped.push((old.key_at(slot).as_bytes().to_vec(), old.slot_payload(slot)));
            continue;
        };
        fresh.push_copy_with(&old, slot, kept);
    }
    let mut out = words;
    out[IMAGE_HEADER_WORD] = fresh.header.encode();
    for i in 0..HINTS {
        out[IMAGE_HINTS + i] = fresh.hint(i);
    }
    out[IMAGE_BODY..IMAGE_BODY + BODY_WORDS].copy_from_slice(&fresh.body);
    for (bytes, word) in image.chunks_exact_mut(8).zip(out) {
        bytes.copy_from_slice(&word.to_le_bytes());
    }
    Some(dropped)
}

/// Fills one leaf for bulk loading; entries must come in ascending order.
pub(crate) struct LeafBuilder {
    page: Page,
}

impl LeafBuilder {
    pub(crate) fn new() -> Self {
        Self {
            page: Page::empty(0),
        }
    }

    /// Whether `key` fits without filling the node past `fill_words`.
    pub(crate) fn fits(&self, key: &InlineKey, fill_words: usize) -> bool {
        self.page.used_words() + SLOT_WORDS + tail_words(key.len()) <= fill_words
    }

    pub(crate) fn push(&mut self, key: &InlineKey, value: u64) {
        self.page.push_key(key, value);
    }

    pub(crate) fn finish(self) -> OwnedNode {
        Node::from_page(0, &self.page, 0, 0)
    }
}

/// Fills one inner node for bulk loading. Children stay owned boxes until
/// `finish`, so an unfinished builder frees them instead of leaking.
pub(crate) struct InnerBuilder {
    level: u64,
    leftmost: OwnedNode,
    children: Vec<(InlineKey, OwnedNode)>,
    used_words: usize,
}

impl InnerBuilder {
    pub(crate) fn new(leftmost: OwnedNode) -> Self {
        Self {
            level: leftmost.level() as u64 + 1,
            leftmost,
            children: Vec::new(),
            used_words: 0,
        }
    }

    pub(crate) fn fits(&self, separator: &InlineKey, fill_words: usize) -> bool {
        self.used_words + SLOT_WORDS + tail_words(separator.len()) <= fill_words
    }

    /// `separator` must exceed every key under the children pushed so far.
    pub(crate) fn push(&mut self, separator: InlineKey, child: OwnedNode) {
        assert_eq!(
            child.level() as u64 + 1,
            self.level,
            "children share a level"
        );
        self.used_words += SLOT_WORDS + tail_words(separator.len());
        self.children.push((separator, child));
    }

    pub(crate) fn finish(self) -> OwnedNode {
        let mut page = Page::empty(into_child_word(self.leftmost));
        for (separator, child) in self.children {
            page.push_key(&separator, into_child_word(child));
        }
        Node::from_page(self.level, &page, 0, 0)
    }
}

/// Owner of the whole node graph: the root word, and through it every node
/// (or, in a tree with node versions, through their indirection array).
pub(crate) struct RootCell {
    /// The root's address, or its tagged id in a tree with node versions.
    root: AtomicU64,
    versions: Option<Box<NodeVersions>>,
}

impl RootCell {
    pub(crate) fn new(root: OwnedNode) -> Self {
        Self {
            root: AtomicU64::new(into_child_word(root)),
            versions: None,
        }
    }

    /// A cell over nodes already placed in `versions`, rooted at `word`.
    pub(crate) fn with_versions(versions: NodeVersions, word: u64) -> Self {
        versions.record_root(0, word);
        Self {
            root: AtomicU64::new(word),
            versions: Some(Box::new(versions)),
        }
    }

    pub(crate) fn versions(&self) -> Option<&NodeVersions> {
        self.versions.as_deref()
    }

    /// The node a child or root word names, or null; loads atomics only, so
    /// it may be called on a word that is not validated yet.
    #[inline]
    pub(crate) fn locate(&self, word: u64) -> *const Node {
        if word & ID_TAG == 0 {
            return ptr::with_exposed_provenance(word as usize);
        }
        match &self.versions {
            Some(versions) => versions.resolve(word),
            None => ptr::null(),
        }
    }

    #[inline]
    fn load(&self) -> (*const Node, &Node) {
        let root = self.locate(self.root.load(Acquire));
        // SAFETY: the cell always holds the word of a fully built node
        // (`new`, `grow`, `adopt_versions`, `with_versions`), published with a
        // Release store that this Acquire load synchronizes with, and a
        // versioned root's entry always holds a version (entries are never
        // emptied). A replaced root stays linked as the new root's leftmost
        // child, and nodes are freed only by `drop`, which needs `&mut self`,
        // while the result borrows `&self`.
        (root, unsafe { &*root })
    }

    /// Starts an optimistic read of the current root.
    #[inline]
    pub(crate) fn read(&self) -> Result<ReadGuard<'_>, Restart> {
        let (root, node) = self.load();
        let guard = node.read_lock()?;
        // A root that split after we loaded it covers only the lower half of
        // the key space; its version says nothing about that, the word does
        // (and with node versions, which version the root's id names).
        if self.locate(self.root.load(Acquire)) != root {
            return Err(Restart);
        }
        Ok(guard)
    }

    pub(crate) fn height(&self) -> usize {
        self.load().1.level() + 1
    }

    /// Whether the locked `node` (or the original its copy replaces) is the root.
    fn holds_root(&self, node: &WriteGuard<'_>) -> bool {
        let word = self.root.load(Acquire);
        match &node.replaces {
            _ if word & ID_TAG != 0 => word >> 1 == node.node.node_id(),
            Some(replaced) => ptr::eq(self.locate(word), replaced.original),
            None => ptr::eq(self.locate(word), node.node),
        }
    }

    /// Splits the locked root and puts a new root above both halves. Returns
    /// false if `old_root` is no longer the root.
    pub(crate) fn grow(&self, mut old_root: WriteGuard<'_>, ut: u64) -> bool {
        if !self.holds_root(&old_root) {
            return false;
        }
        let current = self.root.load(Acquire);
        let Some(half) = old_root.split_if(ut, SplitBias::Middle, |_| true) else {
            return false;
        };
        let mut page = Page::empty(current);
        page.push_key(&half.separator, old_root.link_node(half.right));
        let update_time = old_root.node.update_time();
        let level = old_root.node.level() as u64 + 1;
        let new_root = old_root.link_node(Node::from_page(level, &page, update_time, 0));
        // Published before `old_root` unlocks, so a reader that sees the
        // shrunken old root also sees that it is no longer the root.
        self.root.store(new_root, Release);
        if let Some((versions, epoch)) = old_root.link {
            versions.record_root(epoch, new_root);
        }
        true
    }

    /// Gives every node of this (exclusively held) tree an id and rewrites
    /// child words and the root word to ids; see `versions`.
    pub(crate) fn adopt_versions(&mut self) {
        if self.versions.is_some() {
            return;
        }
        let versions = NodeVersions::new();
        let root = adopt(&versions, *self.root.get_mut());
        versions.record_root(0, root);
        *self.root.get_mut() = root;
        self.versions = Some(Box::new(versions));
    }
}

/// Registers the subtree at the address `word`, children first; returns
/// its root's tagged id.
fn adopt(versions: &NodeVersions, word: u64) -> u64 {
    // SAFETY: `word` is the address of a node that `adopt_versions`' caller
    // owns exclusively (reached through the root word or one parent slot
    // of a tree without versions); ownership moves into `versions`.
    let node = unsafe { OwnedNode::from_raw(ptr::with_exposed_provenance_mut(word as usize)) };
    if !node.is_leaf() {
        let leftmost = adopt(versions, node.leftmost.load(Relaxed));
        node.leftmost.store(leftmost, Relaxed);
        for slot in 0..node.count() {
            let child = adopt(versions, node.slot_payload(slot));
            node.body[slot * SLOT_WORDS + 2].store(child, Relaxed);
        }
    }
    versions.register(node, 0)
}

impl Drop for RootCell {
    fn drop(&mut self) {
        if self.versions.is_some() {
            // The node versions own every node and free them.
            return;
        }
        let mut pending = vec![ptr::with_exposed_provenance_mut(
            *self.root.get_mut() as usize
        )];
        while let Some(raw) = pending.pop() {
            // SAFETY: every pointer in `pending` came from `OwnedNode::into_raw` and
            // is referenced exactly once in the tree (the root cell or a single
            // parent slot: splits move child words, never copy them), so each
            // node is freed exactly once. `&mut self` means no reader or writer
            // still borrows the tree.
            let mut node = unsafe { OwnedNode::from_raw(raw) };
            pending.extend(node.owned_children());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_is_one_page_with_room_for_long_keys() {
        assert_eq!(std::mem::size_of::<Node>(), 4096);
        assert_eq!(std::mem::align_of::<Node>(), 64);
        const { assert!(BODY_WORDS / MAX_ENTRY_WORDS >= 7) };
    }

    #[test]
    fn any_header_or_meta_word_decodes_in_bounds() {
        for raw in [0, u64::MAX, 0xFFFF_FFFF, 0x1234_5678_9ABC_DEF0] {
            let header = Header::decode(raw);
            assert!(header.count <= MAX_SLOTS && header.heap_start <= BODY_WORDS);
            let (len, tail_offset) = decode_meta(raw);
            assert!(len <= MAX_KEY_LEN && tail_offset + tail_words(len) <= BODY_WORDS);
        }
    }

    #[test]
    fn garbage_slots_read_without_panicking() {
        let mut page = Page::empty(0);
        page.header = Header::decode(u64::MAX);
        page.body = [u64::MAX; BODY_WORDS];
        let key = InlineKey::new(&[0xFF; MAX_KEY_LEN]).unwrap();
        let _ = page.find(&key);
        let _ = page.key_at(MAX_SLOTS + 10);
    }

    /// The hinted search must agree with a plain scan of the sorted keys for
    /// every probe, present or absent, also when many keys share a head word
    /// (same first 8 bytes), at every fill from empty to full.
    #[test]
    fn hinted_search_agrees_with_a_scan() {
        let mut keys: Vec<Vec<u8>> = (0..110u64)
            .map(|i| (i * 7919 % 1000 * 4 + 2).to_be_bytes().to_vec())
            .collect();
        keys.extend((0..30u8).map(|i| [b"sharedhd".as_slice(), &[i * 3 + 1]].concat()));
        let root = RootCell::new(Node::empty_leaf());
        let (_, node) = root.load();
        let mut sorted: Vec<Vec<u8>> = Vec::new();
        for key in &keys {
            let stored = InlineKey::new(key).unwrap();
            let mut leaf = node.read_lock().unwrap().upgrade().unwrap();
            let (slot, found) = leaf.search(&stored);
            assert!(!found);
            leaf.insert_entry(slot, &stored, 0).unwrap();
            drop(leaf);
            sorted.insert(sorted.partition_point(|k| k < key), key.clone());
            let probes = sorted.iter().flat_map(|k| {
                let mut below = k.clone();
                *below.last_mut().unwrap() -= 1;
                let mut above = k.clone();
                above.push(0);
                [k.clone(), below, above]
            });
            for probe in probes.chain([vec![0xFF; 9], vec![0]]) {
                let expected = sorted.partition_point(|k| *k < probe);
                let found = sorted.get(expected) == Some(&probe);
                let probe = InlineKey::new(&probe).unwrap();
                assert_eq!(node.search(&probe), (expected, found), "{probe:?}");
            }
        }
        assert!(node.count() >= HINTED_FROM, "the hints were exercised");
    }

    #[test]
    fn removal_holes_are_compacted_away() {
        let root = RootCell::new(Node::empty_leaf());
        let (_, node) = root.load();
        let guard = node.read_lock().unwrap();
        let mut leaf = guard.upgrade().unwrap();
        let long_key = |i: u8| InlineKey::new(&[i; MAX_KEY_LEN]).unwrap();
        // A permanent entry keeps the leaf from resetting to empty, so holes pile up.
        let anchor = InlineKey::new(&[0xFF]).unwrap();
        leaf.insert_entry(0, &anchor, 1).unwrap();
        let fits = (BODY_WORDS - SLOT_WORDS) / MAX_ENTRY_WORDS;
        for round in 0..20u8 {
            for i in 0..fits as u8 {
                leaf.insert_entry(usize::from(i), &long_key(i), u64::from(round))
                    .unwrap();
            }
            assert!(leaf.insert_entry(0, &long_key(200), 0).is_err());
            for _ in 0..fits {
                leaf.remove_entry(0);
            }
        }
        assert!(node.header().dead > 0);
        leaf.insert_entry(0, &long_key(3), 9).unwrap();
        drop(leaf);
        assert_eq!(node.key(0), long_key(3));
        assert_eq!(node.value(0), 9);
        assert_eq!(node.key(1), anchor);
    }
}
