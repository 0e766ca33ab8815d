//! Ordered traversal: range scans and the checkpoint walk.
//!
//! Both visit one leaf per descent from the root. The descent copies the
//! leaf's upper fence (the nearest separator right of the path) from the
//! validated inner nodes; the leaf's entries are copied and validated, and
//! the next descent resumes at the fence. A node's key range only ever
//! shrinks (splits keep the lower half in place), so the leaf found for the
//! fence always starts exactly at the fence: no key is skipped or repeated,
//! whatever splits happen in between.
//!
//! A reverse scan mirrors this: the descent steers towards the keys below
//! its current end and copies the leaf's lower fence, and the next descent
//! ends there. The leaf found for keys below a fence always ends at or
//! above it (its lower half stays in place when it splits, so the part
//! below the fence is still in it or in the new node found instead).

use std::ops::Bound;

use super::key::InlineKey;
use super::node::{Node, ReadGuard, Restart};
use super::{retry, step_down, BTree, MAX_KEY_LEN};

/// Where a scan starts, normalized so every key is a legal stored key.
enum Start {
    First,
    AtOrAfter(InlineKey),
    After(InlineKey),
}

impl Start {
    fn new(bound: Bound<&[u8]>) -> Self {
        match bound {
            Bound::Unbounded => Self::First,
            // Every stored key is nonempty, so it sorts above "".
            Bound::Included([]) | Bound::Excluded([]) => Self::First,
            Bound::Included(key) if key.len() <= MAX_KEY_LEN => Self::AtOrAfter(legal(key)),
            // A stored key exceeds a longer key iff it exceeds its 512-byte prefix.
            Bound::Included(key) | Bound::Excluded(key) => {
                Self::After(legal(&key[..key.len().min(MAX_KEY_LEN)]))
            }
        }
    }

    fn key(&self) -> Option<&InlineKey> {
        match self {
            Self::First => None,
            Self::AtOrAfter(key) | Self::After(key) => Some(key),
        }
    }

    /// Whether the key in `slot` of a leaf is at or past the start.
    fn admits_slot(&self, leaf: &Node, slot: usize) -> bool {
        match self {
            Self::First => true,
            Self::AtOrAfter(key) => leaf.compare_key(slot, key).is_ge(),
            Self::After(key) => leaf.compare_key(slot, key).is_gt(),
        }
    }

    /// Whether some key below `fence` may be at or past the start.
    fn admits_below(&self, fence: &InlineKey) -> bool {
        self.key().is_none_or(|key| key < fence)
    }

    fn first_slot(&self, leaf: &Node) -> usize {
        match self {
            Self::First => 0,
            Self::AtOrAfter(key) => leaf.search(key).0,
            Self::After(key) => {
                let (slot, found) = leaf.search(key);
                slot + usize::from(found)
            }
        }
    }
}

/// Where a scan ends, normalized like [`Start`].
enum End {
    Last,
    Before(InlineKey),
    AtOrBefore(InlineKey),
    /// No key can satisfy the bound.
    Nothing,
}

impl End {
    fn new(bound: Bound<&[u8]>) -> Self {
        match bound {
            Bound::Unbounded => Self::Last,
            Bound::Included([]) | Bound::Excluded([]) => Self::Nothing,
            Bound::Excluded(key) if key.len() <= MAX_KEY_LEN => Self::Before(legal(key)),
            // A stored key is below a longer key iff it is <= its 512-byte prefix.
            Bound::Included(key) | Bound::Excluded(key) => {
                Self::AtOrBefore(legal(&key[..key.len().min(MAX_KEY_LEN)]))
            }
        }
    }

    fn admits(&self, key: &InlineKey) -> bool {
        match self {
            Self::Last => true,
            Self::Before(end) => key < end,
            Self::AtOrBefore(end) => key <= end,
            Self::Nothing => false,
        }
    }

    /// In an inner node, the child holding the last keys before the end; in
    /// a leaf, one past the last slot before the end.
    fn slot_after(&self, node: &Node) -> usize {
        match self {
            Self::Last => node.count(),
            Self::Before(end) => node.search(end).0,
            Self::AtOrBefore(end) => node.child_index(Some(end)),
            Self::Nothing => 0,
        }
    }

    fn admits_slot(&self, leaf: &Node, slot: usize) -> bool {
        match self {
            Self::Last => true,
            Self::Before(end) => leaf.compare_key(slot, end).is_lt(),
            Self::AtOrBefore(end) => leaf.compare_key(slot, end).is_le(),
            Self::Nothing => false,
        }
    }
}

fn legal(key: &[u8]) -> InlineKey {
    InlineKey::new(key).expect("bounds are normalized to legal key lengths")
}

/// Entries copied out of one leaf, so that callbacks run only after the copy
/// has been validated and while no lock is held.
#[derive(Default)]
struct Batch {
    keys: Vec<u8>,
    /// End offset of each key in `keys`, and its value.
    entries: Vec<(usize, u64)>,
}

thread_local! {
    /// The last scan's batch, kept for its capacity: a scan then allocates
    /// nothing once this thread has scanned a leaf as full.
    static SPARE_BATCH: std::cell::Cell<Option<Batch>> = const { std::cell::Cell::new(None) };
}

/// A batch borrowed from this thread's spare, returned when dropped (a
/// scan nested in another's callback gets a new one).
struct PooledBatch(Option<Batch>);

impl PooledBatch {
    fn take() -> PooledBatch {
        PooledBatch(Some(SPARE_BATCH.take().unwrap_or_default()))
    }
}

impl std::ops::Deref for PooledBatch {
    type Target = Batch;
    fn deref(&self) -> &Batch {
        self.0.as_ref().expect("present until dropped")
    }
}

impl std::ops::DerefMut for PooledBatch {
    fn deref_mut(&mut self) -> &mut Batch {
        self.0.as_mut().expect("present until dropped")
    }
}

impl Drop for PooledBatch {
    fn drop(&mut self) {
        if let Some(mut batch) = self.0.take() {
            batch.clear();
            // Gone while the thread exits: the batch is simply freed.
            let _ = SPARE_BATCH.try_with(|spare| spare.set(Some(batch)));
        }
    }
}

impl Batch {
    fn clear(&mut self) {
        self.keys.clear();
        self.entries.clear();
    }

    fn push(&mut self, leaf: &Node, slot: usize) {
        leaf.append_key(slot, &mut self.keys);
        self.entries.push((self.keys.len(), leaf.value(slot)));
    }

    fn iter(&self) -> impl Iterator<Item = (&[u8], u64)> {
        let mut start = 0;
        self.entries.iter().map(move |&(end, value)| {
            let key = &self.keys[start..end];
            start = end;
            (key, value)
        })
    }
}

/// Key range of the node a descent has reached, from the separators around
/// the path: `[lower, upper)`, `None` meaning unbounded.
#[derive(Default)]
pub(super) struct Fences {
    lower: Option<InlineKey>,
    pub(super) upper: Option<InlineKey>,
}

impl Fences {
    /// Narrows to child `child` of `parent`; validated when the descent moves on.
    fn narrow(&mut self, parent: &Node, child: usize) {
        if child > 0 {
            self.lower = Some(parent.key(child - 1));
        }
        self.narrow_upper(parent, child);
    }

    pub(super) fn narrow_upper(&mut self, parent: &Node, child: usize) {
        if child < parent.count() {
            self.upper = Some(parent.key(child));
        }
    }
}

impl BTree {
    /// Visits entries with `lower <= key < upper` (`Bound` semantics) in
    /// ascending order until `visit` returns false.
    ///
    /// With `reader_ts`, every leaf read gets `gap_read_ts` raised to it
    /// before its copy is validated, so no writer with an older timestamp can
    /// later insert into the scanned range. Each leaf's entries are a
    /// validated snapshot; `visit` runs on a copy, never under a lock. Keys
    /// present throughout the scan are visited exactly once; keys inserted or
    /// removed concurrently may or may not be.
    pub fn scan(
        &self,
        lower: Bound<&[u8]>,
        upper: Bound<&[u8]>,
        reader_ts: Option<u64>,
        mut visit: impl FnMut(&[u8], u64) -> bool,
    ) {
        let end = End::new(upper);
        if matches!(end, End::Nothing) {
            return;
        }
        let mut start = Start::new(lower);
        let mut batch = PooledBatch::take();
        loop {
            let next = retry(|| self.scan_leaf(&start, &end, reader_ts, &mut batch));
            if !batch.iter().all(|(key, value)| visit(key, value)) {
                return;
            }
            match next {
                Some(fence) => start = Start::AtOrAfter(fence),
                None => return,
            }
        }
    }

    /// Copies the in-range entries of the leaf covering `start` into `batch`;
    /// returns where the next leaf starts, if the range goes on past it.
    fn scan_leaf(
        &self,
        start: &Start,
        end: &End,
        reader_ts: Option<u64>,
        batch: &mut Batch,
    ) -> Result<Option<InlineKey>, Restart> {
        batch.clear();
        let mut fences = Fences::default();
        let leaf = self.descend(start.key(), |guard, child| {
            if let Some(child) = child {
                fences.narrow_upper(guard.node(), child);
            }
        })?;
        let node = leaf.node();
        let count = node.count();
        let mut slot = start.first_slot(node);
        while slot < count && end.admits_slot(node, slot) {
            batch.push(node, slot);
            slot += 1;
        }
        match reader_ts {
            Some(reader_ts) => leaf.mark_gap_and_validate(reader_ts)?,
            None => leaf.validate()?,
        }
        let stopped_at_end = slot < count;
        Ok(match stopped_at_end {
            true => None,
            false => fences.upper.filter(|fence| end.admits(fence)),
        })
    }

    /// Like [`scan`](Self::scan), in descending key order: visits entries
    /// with `lower <= key < upper` from the top until `visit` returns
    /// false, with the same gap marking and guarantees.
    pub fn scan_rev(
        &self,
        lower: Bound<&[u8]>,
        upper: Bound<&[u8]>,
        reader_ts: Option<u64>,
        mut visit: impl FnMut(&[u8], u64) -> bool,
    ) {
        let start = Start::new(lower);
        let mut end = End::new(upper);
        let mut batch = PooledBatch::take();
        while !matches!(end, End::Nothing) {
            let next = retry(|| self.scan_leaf_rev(&start, &end, reader_ts, &mut batch));
            if !batch.iter().all(|(key, value)| visit(key, value)) {
                return;
            }
            end = next.map_or(End::Nothing, End::Before);
        }
    }

    /// Copies the in-range entries of the leaf holding the last keys before
    /// `end` into `batch`, descending; returns the leaf's lower fence if
    /// the range goes on below it.
    fn scan_leaf_rev(
        &self,
        start: &Start,
        end: &End,
        reader_ts: Option<u64>,
        batch: &mut Batch,
    ) -> Result<Option<InlineKey>, Restart> {
        batch.clear();
        let mut fences = Fences::default();
        let mut guard = self.root.read()?;
        while !guard.node().is_leaf() {
            let child = end.slot_after(guard.node());
            fences.narrow(guard.node(), child);
            guard = step_down(&self.root, &guard, child)?;
        }
        let node = guard.node();
        // An optimistic read may be torn; validation below catches that,
        // the clamp keeps the loop inside the node meanwhile.
        let mut slot = end.slot_after(node).min(node.count());
        while slot > 0 && start.admits_slot(node, slot - 1) {
            slot -= 1;
            batch.push(node, slot);
        }
        match reader_ts {
            Some(reader_ts) => guard.mark_gap_and_validate(reader_ts)?,
            None => guard.validate()?,
        }
        let stopped_at_start = slot > 0;
        Ok(match stopped_at_start {
            true => None,
            false => fences.lower.filter(|fence| start.admits_below(fence)),
        })
    }

    /// All entries in key order (for tests and cross-checks).
    #[allow(dead_code)] // part of the index's interface; used by its tests
    pub fn to_vec(&self) -> Vec<(Vec<u8>, u64)> {
        let mut entries = Vec::with_capacity(self.len());
        self.scan(Bound::Unbounded, Bound::Unbounded, None, |key, value| {
            entries.push((key.to_vec(), value));
            true
        });
        entries
    }

    /// The lower bounds of the root's children but the first: keys that
    /// cut the tree into parts of similar size (none while the root is a
    /// leaf), for work split across threads.
    pub fn root_separators(&self) -> Vec<Vec<u8>> {
        let mut separators = Vec::new();
        let mut first = true;
        self.walk(
            |lower, _, _, _| {
                if std::mem::take(&mut first) {
                    return true;
                }
                if let Some(lower) = lower {
                    separators.push(lower.to_vec());
                }
                false
            },
            |_, _| {},
        );
        separators
    }

    /// Depth-first, pre-order walk for checkpointing.
    ///
    /// `on_subtree(min, max, update_time, is_leaf)` is called once per node
    /// reached, before anything below it, with the node's key range
    /// `[min, max)` (`None` = unbounded) and its update time; returning false
    /// skips the node's whole subtree. `on_entry(key, value)` is called for
    /// the entries of every leaf not skipped.
    ///
    /// It may run concurrently with writers, and guarantees:
    /// * entries come in strictly ascending key order, each key at most once;
    /// * every entry present for the whole walk is reported, unless a subtree
    ///   containing it was skipped;
    /// * the entries of one leaf are one validated snapshot of that leaf, and
    ///   that leaf's reported `update_time` is >= the `ut` of every write the
    ///   snapshot contains (writers mark before they modify the leaf, and the
    ///   time is read at the snapshot's version). Inner nodes are reported
    ///   before their leaves are read, so their times can predate writes that
    ///   land meanwhile; skipping on them can only miss writes concurrent
    ///   with the walk. Every write that completed before the walk started is
    ///   reflected in the times of all nodes covering its key;
    /// * there is no snapshot across leaves: entries written concurrently may
    ///   or may not appear;
    /// * `min`/`max` are the node's range when it was reached, validated
    ///   against its ancestors. Each node is reported at most once. A node
    ///   created by a concurrent split is reported only if its range reaches
    ///   past the walk's position, then with its full range, whose lower part
    ///   the walk has already covered via the node it split from.
    pub fn walk(
        &self,
        mut on_subtree: impl FnMut(Option<&[u8]>, Option<&[u8]>, u64, bool) -> bool,
        mut on_entry: impl FnMut(&[u8], u64),
    ) {
        let mut walker = Walker::default();
        loop {
            let next = retry(|| walker.step(self, &mut on_subtree));
            for (key, value) in walker.batch.iter() {
                on_entry(key, value);
            }
            match next {
                Some(fence) => walker.position = Some(fence),
                None => return,
            }
        }
    }
}

#[derive(Default)]
struct Walker {
    /// Everything below this key has been walked; `None` before the start.
    position: Option<InlineKey>,
    /// Ids of reported nodes whose range may still contain `position`: the
    /// previous path, plus nodes reported by attempts that then restarted.
    /// Ranges only shrink, so a node that left the path is never reached again.
    reported: Vec<usize>,
    batch: Batch,
}

impl Walker {
    /// One descent to the leaf containing `position`: reports the nodes not
    /// reported yet, copies the leaf into `batch`, returns where to resume.
    fn step(
        &mut self,
        tree: &BTree,
        on_subtree: &mut impl FnMut(Option<&[u8]>, Option<&[u8]>, u64, bool) -> bool,
    ) -> Result<Option<InlineKey>, Restart> {
        self.batch.clear();
        let mut fences = Fences::default();
        let mut path = Vec::new();
        let mut guard = tree.root.read()?;
        loop {
            let node = guard.node();
            path.push(node.id());
            if !self.reported.contains(&node.id()) && !self.report(&guard, &fences, on_subtree)? {
                self.reported = path;
                return Ok(fences.upper);
            }
            if node.is_leaf() {
                self.copy_leaf(&guard)?;
                self.reported = path;
                return Ok(fences.upper);
            }
            let child = node.child_index(self.position.as_ref());
            fences.narrow(node, child);
            guard = step_down(&tree.root, &guard, child)?;
        }
    }

    /// Calls `on_subtree` for a validated node; false means skip the subtree.
    fn report(
        &mut self,
        guard: &ReadGuard<'_>,
        fences: &Fences,
        on_subtree: &mut impl FnMut(Option<&[u8]>, Option<&[u8]>, u64, bool) -> bool,
    ) -> Result<bool, Restart> {
        let node = guard.node();
        let update_time = node.update_time();
        guard.validate()?;
        self.reported.push(node.id());
        let lower = fences.lower.as_ref().map(InlineKey::as_bytes);
        let upper = fences.upper.as_ref().map(InlineKey::as_bytes);
        Ok(on_subtree(lower, upper, update_time, node.is_leaf()))
    }

    fn copy_leaf(&mut self, leaf: &ReadGuard<'_>) -> Result<(), Restart> {
        let node = leaf.node();
        let first = self.position.as_ref().map_or(0, |key| node.search(key).0);
        for slot in first..node.count() {
            self.batch.push(node, slot);
        }
        leaf.validate()
    }
}
