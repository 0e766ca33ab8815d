//! The newest logged version of each key among many log records (for
//! recovery's redo and for delta snapshots), kept without an allocation
//! per version: keys and values are copied into one arena, and the
//! versions are sorted once, when all are in.
#![deny(clippy::indexing_slicing, clippy::unwrap_used)]

use super::record::DELETED;

/// Versions of keys, reduced by `settle` to the newest of each key, in
/// (table, key) order.
#[derive(Default)]
pub struct NewestVersions {
    arena: Vec<u8>,
    versions: Vec<Version>,
}

/// One version: its key and value are in the arena, the value right
/// after the key.
#[derive(Debug, Clone, Copy)]
pub struct Version {
    pub table: u32,
    pub ts: u64,
    at: usize,
    key_len: u32,
    /// `DELETED` for a deletion.
    value_len: u32,
}

impl NewestVersions {
    /// Adds a version of `key` (`None`: deleted) committed at `ts`.
    pub fn push(&mut self, table: u32, ts: u64, key: &[u8], value: Option<&[u8]>) {
        let at = self.arena.len();
        self.arena.extend_from_slice(key);
        let value_len = match value {
            Some(value) => {
                self.arena.extend_from_slice(value);
                value.len() as u32
            }
            None => DELETED,
        };
        self.versions.push(Version {
            table,
            ts,
            at,
            key_len: key.len() as u32,
            value_len,
        });
    }

    /// Keeps the newest version of each key, in (table, key) order.
    pub fn settle(&mut self) {
        let arena = &self.arena;
        let key = |v: &Version| {
            arena
                .get(v.at..v.at + v.key_len as usize)
                .unwrap_or_default()
        };
        self.versions.sort_unstable_by(|a, b| {
            a.table
                .cmp(&b.table)
                .then_with(|| key(a).cmp(key(b)))
                .then_with(|| b.ts.cmp(&a.ts))
        });
        // The first of each key is its newest.
        self.versions
            .dedup_by(|later, first| first.table == later.table && key(first) == key(later));
    }

    /// Versions kept (after `settle`: keys).
    pub fn len(&self) -> usize {
        self.versions.len()
    }

    /// After `settle`: the versions of each table, one slice per table.
    pub fn by_table(&self) -> impl Iterator<Item = &[Version]> {
        self.versions.chunk_by(|a, b| a.table == b.table)
    }

    /// All versions, in (table, key) order after `settle`.
    pub fn versions(&self) -> &[Version] {
        &self.versions
    }

    pub fn key(&self, version: &Version) -> &[u8] {
        let end = version.at + version.key_len as usize;
        self.arena.get(version.at..end).unwrap_or_default()
    }

    /// The value, `None` for a deletion.
    pub fn value(&self, version: &Version) -> Option<&[u8]> {
        if version.value_len == DELETED {
            return None;
        }
        let at = version.at + version.key_len as usize;
        self.arena.get(at..at + version.value_len as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    proptest! {
        /// Against a map that keeps the newest version of each key.
        #[test]
        fn settle_keeps_the_newest_version_of_each_key_in_order(
            pushes in proptest::collection::vec(
                (0u32..3, proptest::collection::vec(0u8..4, 1..3), any::<Option<u8>>()),
                0..200,
            )
        ) {
            let mut newest = NewestVersions::default();
            let mut model = BTreeMap::new();
            // Timestamps out of order, as commits reach the log.
            for (i, (table, key, value)) in pushes.iter().enumerate() {
                let ts = (i as u64 * 7919) % 1009;
                let value = value.map(|v| vec![v; 3]);
                newest.push(*table, ts, key, value.as_deref());
                let kept = model.entry((*table, key.clone())).or_insert((ts, value.clone()));
                if kept.0 < ts {
                    *kept = (ts, value);
                }
            }
            newest.settle();
            let got: Vec<_> = newest
                .versions()
                .iter()
                .map(|v| ((v.table, newest.key(v).to_vec()), (v.ts, newest.value(v).map(<[u8]>::to_vec))))
                .collect();
            let expected: Vec<_> = model.into_iter().collect();
            prop_assert_eq!(got, expected);
        }
    }
}
