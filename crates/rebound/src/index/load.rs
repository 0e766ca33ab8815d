//! Moving a sorted run into a live tree: one descent per leaf.
//!
//! After a restart the checkpoint run is moved into the DRAM index while
//! transactions already use it. Inserting entry by entry costs a full
//! descent each; here, one descent finds a leaf and its upper fence, and all
//! following entries below that fence go into the leaf under one lock. The
//! fence read during the validated descent stays a valid bound while the
//! leaf is locked: a leaf's range only shrinks, by its own split, which
//! needs that lock.

use super::iter::Fences;
use super::key::InlineKey;
use super::node::NoRoom;
use super::node::Restart;
use super::{key_to_store, step_down, BTree, WritePath};
use crossbeam_utils::Backoff;

impl BTree {
    /// Inserts entries sorted strictly ascending, skipping keys already
    /// present (they are newer) and ignoring gap marks (the entries are not
    /// new content, only content moving into DRAM). Returns how many went in.
    ///
    /// # Panics
    /// If a key is empty or longer than [`super::MAX_KEY_LEN`].
    pub fn insert_sorted_absent<K: AsRef<[u8]>>(&self, entries: &[(K, u64)]) -> usize {
        let backoff = Backoff::new();
        let (mut next, mut inserted) = (0, 0);
        while next < entries.len() {
            let first = key_to_store(entries[next].0.as_ref());
            let Ok((path, upper)) = self.descend_with_upper(&first) else {
                backoff.snooze();
                continue;
            };
            let Some(mut leaf) = path.leaf().upgrade() else {
                backoff.snooze();
                continue;
            };
            let mut full = false;
            while let Some((key, value)) = entries.get(next) {
                let key = key_to_store(key.as_ref());
                if upper.as_ref().is_some_and(|u| key >= *u) {
                    break;
                }
                let (slot, found) = leaf.search(&key);
                if !found {
                    if let Err(NoRoom) = self.insert_new(&mut leaf, slot, &key, *value) {
                        full = true;
                        break;
                    }
                    inserted += 1;
                }
                next += 1;
            }
            if full {
                self.split(&path, path.depth - 1, leaf, 0);
            }
        }
        inserted
    }

    /// Descends to the leaf covering `key`; returns the path and the leaf's
    /// upper fence (`None`: unbounded).
    fn descend_with_upper(
        &self,
        key: &InlineKey,
    ) -> Result<(WritePath<'_>, Option<InlineKey>), Restart> {
        let mut path = WritePath::new();
        let mut fences = Fences::default();
        let mut guard = self.root.read()?;
        while !guard.node().is_leaf() {
            let child = guard.node().child_index(Some(key));
            fences.narrow_upper(guard.node(), child);
            path.push(guard);
            guard = step_down(&guard, child)?;
        }
        path.push(guard);
        Ok((path, fences.upper))
    }
}
