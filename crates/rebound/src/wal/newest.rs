//! The newest logged version of each key among many log records (for
//! recovery and for delta snapshots), kept without an allocation per
//! version: keys and values stay where they are in mapped log segments,
//! or are copied into one arena, and the versions are sorted once, when
//! all are in.
#![deny(clippy::indexing_slicing, clippy::unwrap_used)]

use super::record::DELETED;
use crate::medium::FileView;
use std::ops::Range;
use std::sync::Arc;

/// Versions of keys, reduced by `settle` to the newest of each key, in
/// (table, key) order.
#[derive(Default)]
pub struct NewestVersions {
    /// Where keys and values are: the arena (source 0) and mapped files.
    arena: Vec<u8>,
    views: Vec<Arc<FileView>>,
    versions: Vec<Version>,
}

/// One version: its key and value are in one source, the value right
/// after the key.
#[derive(Debug, Clone, Copy)]
pub struct Version {
    pub table: u32,
    pub ts: u64,
    /// The key's first 8 bytes, big-endian, zero-padded: most comparisons
    /// end here, without reading the key.
    head: u64,
    /// 0: the arena; `i + 1`: view `i`.
    source: u32,
    at: usize,
    key_len: u32,
    /// `DELETED` for a deletion.
    value_len: u32,
}

impl NewestVersions {
    /// Versions whose keys and values lie in `view` (pushed with
    /// `push_in_view`).
    pub fn in_view(view: Arc<FileView>) -> NewestVersions {
        NewestVersions {
            views: vec![view],
            ..NewestVersions::default()
        }
    }

    /// Adds a version of `key` (`None`: deleted) committed at `ts`,
    /// copying it into the arena.
    pub fn push(&mut self, table: u32, ts: u64, key: &[u8], value: Option<&[u8]>) {
        let at = self.arena.len();
        self.arena.extend_from_slice(key);
        if let Some(value) = value {
            self.arena.extend_from_slice(value);
        }
        self.versions.push(version(table, ts, key, value, 0, at));
    }

    /// `push`, but a key and value that lie one after the other in the
    /// view are referred to where they are.
    pub fn push_in_view(&mut self, table: u32, ts: u64, key: &[u8], value: Option<&[u8]>) {
        let Some(view) = self.views.first() else {
            return self.push(table, ts, key, value);
        };
        let bytes = view.bytes();
        let key_at = span(bytes, key);
        let adjacent = match (&key_at, value) {
            (Some(k), Some(v)) => span(bytes, v).is_some_and(|v| v.start == k.end),
            (Some(_), None) => true,
            (None, _) => false,
        };
        match key_at {
            Some(k) if adjacent => self
                .versions
                .push(version(table, ts, key, value, 1, k.start)),
            _ => self.push(table, ts, key, value),
        }
    }

    /// Takes in the versions of `other`.
    pub fn append(&mut self, other: NewestVersions) {
        if self.versions.is_empty() && self.arena.is_empty() && self.views.is_empty() {
            *self = other;
            return;
        }
        let (shift, views) = (self.arena.len(), self.views.len() as u32);
        self.arena.extend_from_slice(&other.arena);
        self.views.extend(other.views);
        self.versions
            .extend(other.versions.into_iter().map(|v| match v.source {
                0 => Version {
                    at: v.at + shift,
                    ..v
                },
                source => Version {
                    source: source + views,
                    ..v
                },
            }));
    }

    fn bytes(&self, version: &Version) -> &[u8] {
        match version.source {
            0 => &self.arena,
            source => self
                .views
                .get(source as usize - 1)
                .map_or(&[], |view| view.bytes()),
        }
    }

    /// Keeps the newest version of each key, in (table, key) order.
    pub fn settle(&mut self) {
        let mut versions = std::mem::take(&mut self.versions);
        let key = |v: &Version| self.key(v);
        versions.sort_unstable_by(|a, b| {
            (a.table, a.head)
                .cmp(&(b.table, b.head))
                .then_with(|| key(a).cmp(key(b)))
                .then_with(|| b.ts.cmp(&a.ts))
        });
        // The first of each key is its newest.
        versions.dedup_by(|later, first| {
            (first.table, first.head) == (later.table, later.head) && key(first) == key(later)
        });
        self.versions = versions;
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
        self.bytes(version).get(version.at..end).unwrap_or_default()
    }

    /// The value, `None` for a deletion.
    pub fn value(&self, version: &Version) -> Option<&[u8]> {
        if version.value_len == DELETED {
            return None;
        }
        let at = version.at + version.key_len as usize;
        self.bytes(version).get(at..at + version.value_len as usize)
    }
}

fn version(
    table: u32,
    ts: u64,
    key: &[u8],
    value: Option<&[u8]>,
    source: u32,
    at: usize,
) -> Version {
    Version {
        table,
        ts,
        head: key_head(key),
        source,
        at,
        key_len: key.len() as u32,
        value_len: value.map_or(DELETED, |v| v.len() as u32),
    }
}

/// Where `part` lies within `whole`, if it does.
fn span(whole: &[u8], part: &[u8]) -> Option<Range<usize>> {
    let start = (part.as_ptr() as usize).checked_sub(whole.as_ptr() as usize)?;
    (start + part.len() <= whole.len()).then_some(start..start + part.len())
}

/// A key's first 8 bytes as a big-endian number, zero-padded: ordering
/// heads orders keys, except that keys with equal heads need a full
/// comparison (a shorter key is a prefix padded with zeros).
fn key_head(key: &[u8]) -> u64 {
    let mut head = [0u8; 8];
    let n = key.len().min(8);
    if let (Some(dst), Some(src)) = (head.get_mut(..n), key.get(..n)) {
        dst.copy_from_slice(src);
    }
    u64::from_be_bytes(head)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    /// Keys and values in the mapped segment are referred to in place;
    /// others (a group commit that spans frames is copied first) are
    /// copied into the arena; both read back alike, also once appended.
    #[test]
    fn versions_in_a_view_and_in_the_arena_read_back_alike() {
        let dir = tempfile::tempdir_in("/dev/shm").unwrap();
        let path = dir.path().join("segment");
        std::fs::write(&path, b"..key1value1..key2").unwrap();
        let view = Arc::new(FileView::open(&path).unwrap());
        let bytes = view.bytes();
        let mut newest = NewestVersions::in_view(view.clone());
        newest.push_in_view(1, 5, &bytes[2..6], Some(&bytes[6..12]));
        newest.push_in_view(1, 6, &bytes[14..18], None);
        let elsewhere = b"key3v3".to_vec();
        newest.push_in_view(1, 7, &elsewhere[..4], Some(&elsewhere[4..]));
        assert_eq!(newest.arena.len(), 6, "only the third is copied");
        let mut first = NewestVersions::default();
        first.push(0, 9, b"key0", Some(b"v0"));
        first.append(newest);
        first.settle();
        let got: Vec<_> = first
            .versions()
            .iter()
            .map(|v| {
                (
                    v.table,
                    first.key(v).to_vec(),
                    first.value(v).map(<[u8]>::to_vec),
                )
            })
            .collect();
        assert_eq!(
            got,
            vec![
                (0, b"key0".to_vec(), Some(b"v0".to_vec())),
                (1, b"key1".to_vec(), Some(b"value1".to_vec())),
                (1, b"key2".to_vec(), None),
                (1, b"key3".to_vec(), Some(b"v3".to_vec())),
            ]
        );
    }

    proptest! {
        /// Against a map that keeps the newest version of each key.
        #[test]
        fn settle_keeps_the_newest_version_of_each_key_in_order(
            pushes in proptest::collection::vec(
                (0u32..3, proptest::collection::vec(0u8..4, 1..3), any::<Option<u8>>()),
                0..200,
            )
        ) {
            // Two parts appended, as segments read apart are.
            let (mut newest, mut second) = (NewestVersions::default(), NewestVersions::default());
            let mut model = BTreeMap::new();
            // Timestamps out of order, as commits reach the log.
            for (i, (table, key, value)) in pushes.iter().enumerate() {
                let ts = (i as u64 * 7919) % 1009;
                let value = value.map(|v| vec![v; 3]);
                let part = if i % 3 == 0 { &mut second } else { &mut newest };
                part.push(*table, ts, key, value.as_deref());
                let kept = model.entry((*table, key.clone())).or_insert((ts, value.clone()));
                if kept.0 < ts {
                    *kept = (ts, value);
                }
            }
            newest.append(second);
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
