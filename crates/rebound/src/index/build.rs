//! Bottom-up bulk loading: leaves filled left to right, then each inner level
//! built from the level below. O(n), no splits, no locking (the tree is not
//! shared until it is returned).

use super::key::{shortest_separator, InlineKey};
use super::node::{InnerBuilder, LeafBuilder, BODY_WORDS};
use super::node_memory::OwnedNode;
use super::{key_to_store, BTree};

/// Leave ~10% free so the first inserts after loading do not split at once.
const FILL_WORDS: usize = BODY_WORDS * 9 / 10;

/// A finished node, with the separator routing to it from its left neighbour
/// (`None` for the first node of a level).
type Built = (Option<InlineKey>, OwnedNode);

impl BTree {
    /// Bottom-up build from entries sorted strictly ascending by key: fills
    /// leaves left to right (fill factor ~90%), then builds each inner level
    /// from the level below. O(n), no splits.
    ///
    /// # Panics
    /// If keys are not strictly ascending, or one is empty or longer than
    /// [`MAX_KEY_LEN`](super::MAX_KEY_LEN).
    pub fn bulk_load<K: AsRef<[u8]>>(entries: impl IntoIterator<Item = (K, u64)>) -> Self {
        let (mut level, len) = build_leaves(entries);
        let mut nodes = level.len();
        while level.len() > 1 {
            level = build_inner_level(level);
            nodes += level.len();
        }
        let (_, root) = level.pop().expect("a level is never empty");
        Self::from_root(root, len, nodes)
    }
}

impl BTree {
    /// [`bulk_load`](Self::bulk_load) with the leaves of `parts` contiguous
    /// key ranges built on their own threads (the inner levels, a few
    /// hundredths of the nodes, are built after them).
    ///
    /// # Panics
    /// As `bulk_load`.
    pub fn bulk_load_parallel<K: AsRef<[u8]> + Sync>(entries: &[(K, u64)], parts: usize) -> Self {
        let per_part = entries.len().div_ceil(parts.max(1)).max(1);
        let chunks: Vec<&[(K, u64)]> = entries.chunks(per_part).collect();
        if chunks.len() < 2 {
            return Self::bulk_load(entries.iter().map(|(k, v)| (k.as_ref(), *v)));
        }
        let built: Vec<(Vec<Built>, usize)> = std::thread::scope(|scope| {
            let handles: Vec<_> = chunks
                .iter()
                .map(|chunk| {
                    scope.spawn(move || build_leaves(chunk.iter().map(|(k, v)| (k.as_ref(), *v))))
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("a leaf builder panicked"))
                .collect()
        });
        let (mut level, mut len) = (Vec::new(), 0);
        for (i, (mut leaves, n)) in built.into_iter().enumerate() {
            // The first leaf of a later range is routed to by the
            // separator between its range's first key and the last key
            // before it.
            if let (Some(before), Some(first)) = (
                i.checked_sub(1).and_then(|p| chunks[p].last()),
                chunks[i].first(),
            ) {
                let (before, first) = (
                    key_to_store(before.0.as_ref()),
                    key_to_store(first.0.as_ref()),
                );
                assert!(before < first, "bulk_load needs strictly ascending keys");
                leaves[0].0 = Some(shortest_separator(&before, &first));
            }
            level.extend(leaves);
            len += n;
        }
        let mut nodes = level.len();
        while level.len() > 1 {
            level = build_inner_level(level);
            nodes += level.len();
        }
        let (_, root) = level.pop().expect("a level is never empty");
        Self::from_root(root, len, nodes)
    }
}

fn build_leaves<K: AsRef<[u8]>>(
    entries: impl IntoIterator<Item = (K, u64)>,
) -> (Vec<Built>, usize) {
    let mut built = Vec::new();
    let mut leaf = LeafBuilder::new();
    let mut leaf_separator = None;
    let mut previous: Option<InlineKey> = None;
    let mut len = 0;
    for (key, value) in entries {
        let key = key_to_store(key.as_ref());
        if let Some(previous) = &previous {
            assert!(
                previous < &key,
                "bulk_load needs strictly ascending keys: {previous:?} then {key:?}"
            );
            if !leaf.fits(&key, FILL_WORDS) {
                let full = std::mem::replace(&mut leaf, LeafBuilder::new());
                built.push((leaf_separator.take(), full.finish()));
                leaf_separator = Some(shortest_separator(previous, &key));
            }
        }
        leaf.push(&key, value);
        previous = Some(key);
        len += 1;
    }
    built.push((leaf_separator, leaf.finish()));
    (built, len)
}

fn build_inner_level(children: Vec<Built>) -> Vec<Built> {
    let mut built = Vec::new();
    let mut children = children.into_iter();
    let (first_separator, first) = children.next().expect("a level is never empty");
    let mut inner = InnerBuilder::new(first);
    let mut inner_separator = first_separator;
    for (separator, child) in children {
        let separator = separator.expect("only the first node of a level lacks a separator");
        if inner.fits(&separator, FILL_WORDS) {
            inner.push(separator, child);
        } else {
            let full = std::mem::replace(&mut inner, InnerBuilder::new(child));
            built.push((inner_separator, full.finish()));
            inner_separator = Some(separator);
        }
    }
    built.push((inner_separator, inner.finish()));
    built
}
