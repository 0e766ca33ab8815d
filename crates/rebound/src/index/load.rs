//! Moving a sorted run into a live tree: one descent per leaf.
//!
//! After a restart the checkpoint run is moved into the DRAM index while
//! transactions already use it. Inserting entry by entry costs a full
//! descent each; here, one descent finds a leaf and its upper fence, and all
//! following entries below that fence are merged into the leaf under one
//! lock, in one rewrite of it (the leaf already holds the keys redone or
//! written since the checkpoint, so most entries land between them). The
//! fence read during the validated descent stays a valid bound while the
//! leaf is locked: a leaf's range only shrinks, by its own split, which
//! needs that lock.

use super::iter::Fences;
use super::key::{compare_stored, InlineKey};
use super::node::{Restart, SplitBias, MAX_SLOTS};
use super::{key_to_store, probe_to_store, step_down, BTree, WritePath};
use crossbeam_utils::Backoff;
use std::sync::atomic::Ordering::Relaxed;

impl BTree {
    /// Inserts entries sorted strictly ascending, skipping keys already
    /// present (they are newer) and ignoring gap marks (the entries are not
    /// new content, only content moving into DRAM). Returns how many went in.
    ///
    /// # Panics
    /// If a key is empty or longer than [`super::MAX_KEY_LEN`].
    pub fn insert_sorted_absent<K: AsRef<[u8]>>(&self, entries: &[(K, u64)]) -> usize {
        self.merge_sorted_entries(entries, false, &mut Vec::new())
    }

    /// `insert_sorted_absent`, noting in `skipped` the value of every entry
    /// whose key was present with another value (a checkpoint's version a
    /// newer one replaced).
    pub fn insert_sorted_absent_noting<K: AsRef<[u8]>>(
        &self,
        entries: &[(K, u64)],
        skipped: &mut Vec<u64>,
    ) -> usize {
        self.merge_sorted_entries(entries, false, skipped)
    }

    /// Upserts entries sorted strictly ascending, leaf by leaf (redo on
    /// top of a tree loaded from node images); ignores gap marks. Returns
    /// how many keys were new, and notes in `replaced` every value an entry
    /// replaced with another.
    ///
    /// # Panics
    /// If a key is empty or longer than [`super::MAX_KEY_LEN`].
    pub fn upsert_sorted_noting<K: AsRef<[u8]>>(
        &self,
        entries: &[(K, u64)],
        replaced: &mut Vec<u64>,
    ) -> usize {
        self.merge_sorted_entries(entries, true, replaced)
    }

    fn merge_sorted_entries<K: AsRef<[u8]>>(
        &self,
        entries: &[(K, u64)],
        overwrite: bool,
        displaced: &mut Vec<u64>,
    ) -> usize {
        debug_assert!(entries.is_sorted_by(|a, b| a.0.as_ref() < b.0.as_ref()));
        let backoff = Backoff::new();
        let epoch = self.writer_epoch();
        let (mut next, mut inserted) = (0, 0);
        let mut batch = Vec::new();
        while next < entries.len() {
            let first = key_to_store(entries[next].0.as_ref());
            let Ok((path, upper)) = self.descend_with_upper(&first) else {
                backoff.snooze();
                continue;
            };
            let Some(mut leaf) = self.lock(&path.leaf(), epoch.as_ref()) else {
                backoff.snooze();
                continue;
            };
            batch.clear();
            for (key, value) in &entries[next..] {
                let key = probe_to_store(key.as_ref());
                let below_upper = upper
                    .as_ref()
                    .is_none_or(|u| compare_stored(u.len(), |i| u.word(i), &key).is_gt());
                if !below_upper || batch.len() == MAX_SLOTS {
                    break;
                }
                batch.push((key, *value));
            }
            let merged = leaf.merge_sorted(&batch, overwrite, displaced);
            // Under the leaf lock, so a removal of these keys cannot decrement first.
            self.len.fetch_add(merged.added, Relaxed);
            next += merged.consumed;
            inserted += merged.added;
            if merged.consumed < batch.len() {
                // The following entries sort after the ones it took.
                let bias = match merged.near_end {
                    true => SplitBias::Append,
                    false => SplitBias::Before(merged.insert_at),
                };
                self.split(&path, path.depth - 1, leaf, (0, bias, epoch.as_ref()));
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
            guard = step_down(&self.root, &guard, child)?;
        }
        path.push(guard);
        Ok((path, fences.upper))
    }
}
