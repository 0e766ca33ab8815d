//! Chains of checkpoint images (HiEngine's ChainIndex).
//!
//! A chain is a base image followed by delta images, each linked to its
//! predecessor by offset. A delta holds only the entries that changed
//! since its predecessor: new addresses, and `TOMBSTONE` for keys deleted
//! since. What a chain says of a key is what its newest image that holds
//! the key says; a tombstone there means the key is absent. Readers
//! therefore look newest first, and merges keep the newest entry of each
//! key and drop tombstones.

#![deny(clippy::indexing_slicing, clippy::unwrap_used)]

use super::image::{CheckpointImage, EntryReader, TableSection, MAX_CHAIN, TOMBSTONE};
use super::writer::RunWriter;
use crate::error::{Error, Result};
use crate::medium::Medium;
use std::ops::Bound;

/// The images of a chain, newest first; the last one is the base.
pub struct Chain {
    images: Vec<CheckpointImage>,
}

impl Chain {
    /// Opens the image at `root` and every predecessor. Each link must
    /// lead to an older image one step shallower, so a damaged link ends
    /// in `Corrupt`, never in a cycle.
    pub fn open(medium: &Medium, root: u64) -> Result<Chain> {
        let newest = CheckpointImage::open(medium, root)?;
        let mut images = Vec::with_capacity(newest.depth as usize);
        let mut link = newest.previous;
        images.push(newest);
        while link != 0 {
            let image = CheckpointImage::open(medium, link)?;
            let newer = images.last().ok_or_else(bad_link)?;
            if image.depth + 1 != newer.depth || image.sequence >= newer.sequence {
                return Err(bad_link());
            }
            link = image.previous;
            images.push(image);
        }
        match images.len() <= MAX_CHAIN as usize {
            true => Ok(Chain { images }),
            false => Err(bad_link()),
        }
    }

    /// The image recovery starts from: its horizons and block lists are
    /// the chain's.
    pub fn newest(&self) -> &CheckpointImage {
        // `open` always holds at least the root.
        self.images.first().unwrap_or_else(|| unreachable!())
    }

    pub fn images(&self) -> &[CheckpointImage] {
        &self.images
    }

    /// Checks every image's body checksum.
    pub fn verify(&self, medium: &Medium) -> Result<()> {
        self.images
            .iter()
            .try_for_each(|image| image.verify(medium))
    }

    /// The table's sections, newest first.
    pub fn sections(&self, table: u32) -> Vec<&TableSection> {
        self.images
            .iter()
            .filter_map(|image| image.table(table))
            .collect()
    }

    pub fn has_table(&self, table: u32) -> bool {
        self.images.iter().any(|image| image.table(table).is_some())
    }

    /// Entries of the table across the chain (keys in several images
    /// counted once per image): an upper bound of the keys it holds.
    pub fn entry_count(&self, table: u32) -> u64 {
        self.sections(table).iter().map(|s| s.entry_count).sum()
    }

    /// Sequential reader of the table's entries as the chain sees them.
    pub fn reader(&self, table: u32) -> ChainReader<'_> {
        let sections = self.sections(table);
        // Only a base holds no tombstones: its entries copy as they are.
        let base_alone = sections.len() == 1
            && self
                .images
                .last()
                .is_some_and(|base| base.table(table).is_some());
        ChainReader::new(sections, false, base_alone)
    }

    /// Sequential reader of what the deltas say of the table, newest entry
    /// of each key, tombstones kept: one delta on the base equal to them.
    pub fn deltas_reader(&self, table: u32) -> ChainReader<'_> {
        let deltas = self.images.len().saturating_sub(1);
        let sections = self.images.iter().take(deltas);
        ChainReader::new(
            sections.filter_map(|i| i.table(table)).collect(),
            true,
            true,
        )
    }

    /// The address the chain records for `key`, if any.
    pub fn find(&self, medium: &Medium, table: u32, key: &[u8]) -> Result<Option<u64>> {
        for section in self.sections(table) {
            if let Some(addr) = section.find(medium, key)? {
                return Ok((addr != TOMBSTONE).then_some(addr));
            }
        }
        Ok(None)
    }

    /// Up to `limit` entries of the range as the chain sees them, in
    /// `descending` order or not. Each image is read `limit` entries at a
    /// time; merged entries are final only up to the nearest last key of
    /// an image that may hold more, so a batch continues past it while
    /// tombstones left it short.
    pub fn range(
        &self,
        medium: &Medium,
        table: u32,
        (lower, upper): (Bound<&[u8]>, Bound<&[u8]>),
        limit: usize,
        descending: bool,
    ) -> Result<Vec<(Vec<u8>, u64)>> {
        let sections = self.sections(table);
        if let [only] = sections.as_slice() {
            return match descending {
                false => only.range(medium, lower, upper, limit),
                true => only.range_rev(medium, lower, upper, limit),
            };
        }
        let mut out = Vec::new();
        let (mut lower, mut upper) = (lower.map(<[u8]>::to_vec), upper.map(<[u8]>::to_vec));
        loop {
            let (lower_ref, upper_ref) = (as_ref(&lower), as_ref(&upper));
            let mut merged: Vec<(Vec<u8>, usize, u64)> = Vec::new();
            let mut cut: Option<Vec<u8>> = None;
            for (rank, section) in sections.iter().enumerate() {
                let batch = match descending {
                    false => section.range(medium, lower_ref, upper_ref, limit)?,
                    true => section.range_rev(medium, lower_ref, upper_ref, limit)?,
                };
                if batch.len() == limit {
                    let last = batch.last().map(|(k, _)| k.clone());
                    cut = match (cut, last) {
                        (Some(c), Some(l)) if descending => Some(c.max(l)),
                        (Some(c), Some(l)) => Some(c.min(l)),
                        (c, l) => c.or(l),
                    };
                }
                merged.extend(batch.into_iter().map(|(k, a)| (k, rank, a)));
            }
            merged.sort_unstable_by(|a, b| match descending {
                false => (&a.0, a.1).cmp(&(&b.0, b.1)),
                true => (&b.0, a.1).cmp(&(&a.0, b.1)),
            });
            merged.dedup_by(|later, first| later.0 == first.0);
            for (key, _, addr) in merged {
                let past_cut = cut.as_ref().is_some_and(|c| match descending {
                    false => key > *c,
                    true => key < *c,
                });
                if past_cut || out.len() == limit {
                    break;
                }
                if addr != TOMBSTONE {
                    out.push((key, addr));
                }
            }
            let Some(c) = cut.filter(|_| out.len() < limit) else {
                return Ok(out);
            };
            match descending {
                false => lower = Bound::Excluded(c),
                true => upper = Bound::Excluded(c),
            }
        }
    }
}

fn as_ref(bound: &Bound<Vec<u8>>) -> Bound<&[u8]> {
    bound.as_ref().map(Vec::as_slice)
}

fn bad_link() -> Error {
    Error::Corrupt("checkpoint: chain links out of order".into())
}

/// Reads a table's entries across a chain in key order, newest entry of
/// each key, tombstones dropped (callers verify the bodies first).
pub struct ChainReader<'a> {
    /// Newest first: a reader, its section's entry count, entries read.
    readers: Vec<(EntryReader<'a>, u64, u64)>,
    /// The key being merged, so other readers can be compared with it.
    scratch: Vec<u8>,
    keep_tombstones: bool,
    /// One image whose entries are all to be copied: copy them encoded.
    copy_encoded: bool,
}

impl<'a> ChainReader<'a> {
    fn new(
        sections: Vec<&'a TableSection>,
        keep_tombstones: bool,
        copy_encoded: bool,
    ) -> ChainReader<'a> {
        ChainReader {
            readers: sections
                .into_iter()
                .map(|s| (s.reader(), s.entry_count, 0))
                .collect(),
            scratch: Vec::new(),
            keep_tombstones,
            copy_encoded,
        }
    }

    /// The reader holding the smallest next key (the newest on a tie).
    fn smallest(&mut self, medium: &Medium) -> Option<usize> {
        for (reader, _, _) in &mut self.readers {
            reader.peek_entry(medium);
        }
        let mut best: Option<(usize, &[u8])> = None;
        for (i, (reader, _, _)) in self.readers.iter().enumerate() {
            if let Some((key, _)) = reader.peeked() {
                if best.is_none_or(|(_, b)| key < b) {
                    best = Some((i, key));
                }
            }
        }
        best.map(|(i, _)| i)
    }

    /// Moves every reader past `key`'s entries except reader `keep`.
    fn skip_others(&mut self, medium: &Medium, keep: usize, key: &[u8]) {
        for (i, (reader, _, read)) in self.readers.iter_mut().enumerate() {
            if i != keep && reader.peeked().is_some_and(|(k, _)| k == key) {
                reader.advance(medium);
                *read += 1;
            }
        }
    }

    /// Positions at the next live entry; returns its reader.
    fn next_live(&mut self, medium: &Medium) -> Option<usize> {
        loop {
            let i = self.smallest(medium)?;
            let (key, addr) = self.readers.get(i)?.0.peeked()?;
            if self.readers.len() > 1 {
                let mut key_copy = std::mem::take(&mut self.scratch);
                key_copy.clear();
                key_copy.extend_from_slice(key);
                self.skip_others(medium, i, &key_copy);
                self.scratch = key_copy;
            }
            if addr != TOMBSTONE || self.keep_tombstones {
                return Some(i);
            }
            let (reader, _, read) = self.readers.get_mut(i)?;
            reader.advance(medium);
            *read += 1;
        }
    }

    pub fn peek_key(&mut self, medium: &Medium) -> Option<&[u8]> {
        let i = self.next_live(medium)?;
        self.readers.get(i)?.0.peeked().map(|(k, _)| k)
    }

    pub fn advance(&mut self, medium: &Medium) {
        if let Some((reader, _, read)) =
            self.next_live(medium).and_then(|i| self.readers.get_mut(i))
        {
            reader.advance(medium);
            *read += 1;
        }
    }

    /// The next live entry, or `None` at the end of the chain.
    pub fn next_entry(&mut self, medium: &Medium) -> Option<(&[u8], u64)> {
        let i = self.next_live(medium)?;
        let (reader, _, read) = self.readers.get_mut(i)?;
        *read += 1;
        reader.next_entry(medium)
    }

    /// Copies the live entries with keys below `upper` (all for `None`)
    /// into `run`; returns how many went in.
    pub fn copy_until(
        &mut self,
        medium: &Medium,
        upper: Option<&[u8]>,
        run: &mut RunWriter,
    ) -> u64 {
        if let ([(reader, _, _)], true) = (self.readers.as_mut_slice(), self.copy_encoded) {
            return reader.copy_until(medium, upper, run);
        }
        let mut copied = 0;
        while let Some(i) = self.next_live(medium) {
            let Some((reader, _, read)) = self.readers.get_mut(i) else {
                break;
            };
            let Some((key, addr)) = reader.peeked() else {
                break;
            };
            if upper.is_some_and(|u| key >= u) {
                break;
            }
            copied += run.push(key, addr) as u64;
            reader.advance(medium);
            *read += 1;
        }
        copied
    }

    /// True when every image's entries were read to their end, each
    /// image yielding exactly the count its section records.
    pub fn complete(&self) -> bool {
        self.readers
            .iter()
            .all(|(reader, count, read)| reader.at_end() && count == read)
    }
}
