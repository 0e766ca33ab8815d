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

#[cfg(test)]
use super::image::FENCE_EVERY;
use super::image::{CheckpointImage, EntryReader, TableSection, MAX_CHAIN, TOMBSTONE};
use super::writer::RunWriter;
use crate::error::{Error, Result};
use crate::index::key_prefix;
use crate::medium::Medium;
use crate::parallel;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::ops::Bound;
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering::Relaxed;

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
            let image = CheckpointImage::open_predecessor(medium, link)?;
            let newer = images.last().ok_or_else(bad_link)?;
            if image.depth + 1 != newer.depth || image.sequence >= newer.sequence {
                return Err(bad_link());
            }
            link = image.previous;
            images.push(image);
        }
        if images.len() > MAX_CHAIN as usize {
            return Err(bad_link());
        }
        // What the link checks above promise: the newest image counts the
        // chain's images, and the walk ended at a base.
        let (newest, base) = (images.first(), images.last());
        assert!(
            newest.is_some_and(|n| n.depth as usize == images.len())
                && base.is_some_and(|b| b.depth == 1 && b.previous == 0),
            "a checkpoint chain's depth counts its images down to a base"
        );
        Ok(Chain { images })
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
        self.verify_newest(medium, self.images.len())
    }

    /// `verify` on up to `threads` threads: every body is cut into pieces
    /// whose checksums are combined, so that a large base is read on all
    /// of them.
    pub fn verify_parallel(&self, medium: &Medium, threads: usize) -> Result<()> {
        self.verify_in_pieces(medium, threads, VERIFY_PIECE)
    }

    fn verify_in_pieces(&self, medium: &Medium, threads: usize, piece: u64) -> Result<()> {
        let pieces: Vec<(usize, (u64, u64))> = self
            .images
            .iter()
            .enumerate()
            .flat_map(|(i, image)| image.body_pieces(piece).map(move |p| (i, p)))
            .collect();
        let next = AtomicUsize::new(0);
        let work = || {
            let mut done = Vec::new();
            loop {
                let at = next.fetch_add(1, Relaxed);
                let Some(&(_, piece)) = pieces.get(at) else {
                    return done;
                };
                done.push((at, CheckpointImage::piece_crc(medium, piece)));
            }
        };
        let mut crcs = vec![0u32; pieces.len()];
        let threads = threads.clamp(1, pieces.len().max(1));
        for (at, crc) in parallel::map(0..threads, |_| work()).into_iter().flatten() {
            if let Some(slot) = crcs.get_mut(at) {
                *slot = crc;
            }
        }
        let mut combined = vec![0u32; self.images.len()];
        for (&(image, (_, len)), crc) in pieces.iter().zip(crcs) {
            if let Some(sum) = combined.get_mut(image) {
                *sum = crc32c::crc32c_combine(*sum, crc, len as usize);
            }
        }
        self.images
            .iter()
            .zip(combined)
            .try_for_each(|(image, crc)| image.check_body(crc))
    }

    /// Checks the body checksums of the `newest` images.
    pub fn verify_newest(&self, medium: &Medium, newest: usize) -> Result<()> {
        self.images
            .iter()
            .take(newest)
            .try_for_each(|image| image.verify(medium))
    }

    /// Entries of each image (all tables), newest first.
    pub fn sizes(&self) -> Vec<u64> {
        self.images
            .iter()
            .map(|i| i.sections().iter().map(|s| s.entry_count).sum())
            .collect()
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

    /// Keys that cut the table's entries across the chain into about
    /// `parts` parts of similar size (unverified: only for splitting
    /// work). Every image is sampled, each sample weighing the entries it
    /// stands for: keys only newer images hold, such as rows appended
    /// after the base, would otherwise all fall in the last part.
    pub fn split_keys(&self, medium: &Medium, table: u32, parts: usize) -> Vec<Vec<u8>> {
        if parts < 2 {
            return Vec::new();
        }
        let mut samples: Vec<(Vec<u8>, u64)> = self
            .sections(table)
            .iter()
            .flat_map(|s| s.key_samples(medium, parts * SAMPLES_PER_PART))
            .collect();
        samples.sort_unstable();
        let total: u64 = samples.iter().map(|(_, entries)| entries).sum();
        let mut cuts = Vec::with_capacity(parts - 1);
        let mut before = 0;
        for (key, entries) in samples {
            let boundary = (cuts.len() as u128 + 1) * total as u128 / parts as u128;
            if cuts.len() + 1 < parts && before as u128 >= boundary {
                cuts.push(key);
            }
            before += entries;
        }
        cuts
    }

    /// Sequential reader of the table's entries as the chain sees them.
    pub fn reader(&self, table: u32) -> ChainReader<'_> {
        let base_alone = self.base_alone(table);
        ChainReader::new(self.sections(table), false, base_alone)
    }

    /// True when the base is the only image holding the table. Only a
    /// base holds no tombstones, so only then may its entries be copied
    /// as they are; a table created after the base has a delta as its
    /// oldest section, whose tombstones must still be dropped.
    fn base_alone(&self, table: u32) -> bool {
        self.sections(table).len() == 1
            && self
                .images
                .last()
                .is_some_and(|base| base.table(table).is_some())
    }

    /// Sequential reader of the table's entries with keys in
    /// `[lower, upper)` (`None`: unbounded), for loading a run in parallel
    /// key ranges. Each image's reader stops before its first key ≥
    /// `upper`, so the entries of adjacent ranges' readers add up to the
    /// image's count (`ChainReader::reads`).
    pub fn range_reader(
        &self,
        medium: &Medium,
        table: u32,
        (lower, upper): (Option<&[u8]>, Option<&[u8]>),
    ) -> ChainReader<'_> {
        let mut reader = self.reader(table);
        if let Some(lower) = lower {
            let sections = self.sections(table);
            for (reader, section) in reader.readers.iter_mut().zip(sections) {
                reader.entries = section.reader_from(medium, lower);
            }
        }
        reader.upper = upper.map(|u| (key_prefix(u), u.to_vec()));
        // Copying a lone base wholesale would not stop at `upper`.
        reader.copy_straight = false;
        reader
    }

    /// Sequential reader of what the `newest` images say of the table,
    /// newest entry of each key, tombstones kept: one delta equal to them.
    pub fn newest_reader(&self, table: u32, newest: usize) -> ChainReader<'_> {
        let sections = self.images.iter().take(newest);
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
        if let ([only], true) = (sections.as_slice(), self.base_alone(table)) {
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

/// Key samples per part and image when cutting a chain into parts: more
/// than one, so that a part boundary falls within a few groups of where
/// it should.
const SAMPLES_PER_PART: usize = 8;
/// Bytes of an image body checksummed as one piece by `verify_parallel`.
const VERIFY_PIECE: u64 = 8 << 20;

fn bad_link() -> Error {
    Error::Corrupt("checkpoint: chain links out of order".into())
}

/// Reads a table's entries across a chain in key order, newest entry of
/// each key, tombstones dropped (callers verify the bodies first).
///
/// Most entries usually come from the oldest image (the base), so it is
/// kept apart: the newer images' next keys sit in a heap, and a base entry
/// costs one comparison with the heap's top; an entry from a newer image
/// costs O(log images). Older entries of a key come right after its newest
/// one (ties go to the newest image), so they are recognised by equality
/// with the key last returned or dropped, and skipped one by one.
pub struct ChainReader<'a> {
    /// Newest first; the last one is the oldest image.
    readers: Vec<Reader<'a>>,
    /// The next key of every newer reader that has one, with its rank
    /// (index in `readers`): the smallest key, newest on a tie, on top.
    heap: BinaryHeap<Reverse<HeapKey>>,
    /// The key last returned or dropped as a tombstone (`last_head` is its
    /// `key_prefix`), if any: entries of it that follow are older.
    last: Option<Vec<u8>>,
    last_head: u64,
    /// The image `last` came from: only older images' entries of it are
    /// skipped, so a key repeated inside one image still reaches the
    /// caller's order check.
    last_rank: usize,
    /// The heap's top names an entry `next_entry` returned: its reader's
    /// next key replaces it at the next call.
    stale_top: bool,
    /// Key buffers of entries that left the heap, for reuse.
    spare: Vec<Vec<u8>>,
    keep_tombstones: bool,
    /// One image whose entries are all to be copied: copy them from its
    /// reader, without the merge.
    copy_straight: bool,
    /// The heap holds the newer readers' first keys.
    filled: bool,
    /// Keys from here on are left unread (`None`: read to the end), with
    /// its head, which settles the check for all but the last few keys.
    upper: Option<(u64, Vec<u8>)>,
}

/// A newer reader's next key in the heap. Fields compare in order: the
/// head (`key_prefix`: the first 8 bytes, big-endian, zero-padded) settles most
/// comparisons without reading the key; the newest reader wins a tie.
#[derive(PartialEq, Eq, PartialOrd, Ord)]
struct HeapKey {
    head: u64,
    key: Vec<u8>,
    rank: usize,
}

/// One image's entries and how many were read.
struct Reader<'a> {
    entries: EntryReader<'a>,
    read: u64,
}

impl<'a> ChainReader<'a> {
    fn new(
        sections: Vec<&'a TableSection>,
        keep_tombstones: bool,
        copy_straight: bool,
    ) -> ChainReader<'a> {
        ChainReader {
            readers: sections
                .into_iter()
                .map(|s| Reader {
                    entries: s.reader(),
                    read: 0,
                })
                .collect(),
            heap: BinaryHeap::new(),
            last: None,
            last_head: 0,
            last_rank: 0,
            stale_top: false,
            spare: Vec::new(),
            keep_tombstones,
            copy_straight,
            filled: false,
            upper: None,
        }
    }

    /// Loads every newer reader's first key into the heap, once.
    fn fill(&mut self, medium: &Medium) {
        if std::mem::replace(&mut self.filled, true) {
            return;
        }
        for rank in 0..self.oldest() {
            if let Some(reader) = self.readers.get_mut(rank) {
                reader.entries.peek_entry(medium);
            }
            self.heap_push(rank);
        }
    }

    fn oldest(&self) -> usize {
        self.readers.len().saturating_sub(1)
    }

    fn key_of(&self, i: usize) -> Option<&[u8]> {
        self.readers.get(i)?.entries.peeked().map(|(k, _)| k)
    }

    /// Puts newer reader `rank`'s next key (if any) into the heap.
    fn heap_push(&mut self, rank: usize) {
        let Some(reader) = self.readers.get_mut(rank) else {
            return;
        };
        // The medium is only needed to refill the buffer, done by the
        // caller's `peek_entry`; `peeked` reads what is buffered.
        let Some((key, _)) = reader.entries.peeked() else {
            return;
        };
        let mut owned = self.spare.pop().unwrap_or_default();
        owned.clear();
        owned.extend_from_slice(key);
        self.heap.push(Reverse(HeapKey {
            head: key_prefix(&owned),
            key: owned,
            rank,
        }));
    }

    /// Consumes reader `i`'s next entry and loads the one after it; a newer
    /// reader's entry must be the heap's top.
    fn step(&mut self, medium: &Medium, i: usize) {
        if let Some(reader) = self.readers.get_mut(i) {
            reader.entries.advance(medium);
            reader.read += 1;
            reader.entries.peek_entry(medium);
        }
        if i != self.oldest() {
            self.refresh_top();
        }
    }

    /// Notes reader `i`'s next key as the one whose older entries follow
    /// (none do the oldest image's).
    fn remember(&mut self, i: usize) {
        if i == self.oldest() {
            return;
        }
        let Some((key, _)) = self.readers.get(i).and_then(|r| r.entries.peeked()) else {
            return;
        };
        let last = self.last.get_or_insert_with(Vec::new);
        last.clear();
        last.extend_from_slice(key);
        self.last_head = key_prefix(key);
        self.last_rank = i;
    }

    /// Whether reader `i`'s next key is the one last returned or dropped.
    fn repeats_last(&self, i: usize) -> bool {
        if i <= self.last_rank {
            return false;
        }
        match (&self.last, self.key_of(i)) {
            (Some(last), Some(key)) => key_prefix(key) == self.last_head && key == last.as_slice(),
            _ => false,
        }
    }

    /// Replaces the heap's top by its reader's next key (peeked already),
    /// or removes it at the reader's end: one sift instead of a pop and a
    /// push.
    fn refresh_top(&mut self) {
        let Some(mut top) = self.heap.peek_mut() else {
            return;
        };
        let next = self
            .readers
            .get(top.0.rank)
            .and_then(|r| r.entries.peeked());
        match next {
            Some((key, _)) => {
                let top = &mut top.0;
                top.key.clear();
                top.key.extend_from_slice(key);
                top.head = key_prefix(key);
            }
            None => {
                let Reverse(gone) = std::collections::binary_heap::PeekMut::pop(top);
                self.spare.push(gone.key);
            }
        }
    }

    /// Replaces the heap's top by its reader's next key after `next_entry`
    /// returned the top's entry (it could not while the entry was lent).
    fn settle(&mut self, medium: &Medium) {
        if std::mem::take(&mut self.stale_top) {
            let rank = self.heap.peek().map(|Reverse(top)| top.rank);
            if let Some(reader) = rank.and_then(|r| self.readers.get_mut(r)) {
                reader.entries.peek_entry(medium);
            }
            self.refresh_top();
        }
    }

    /// The reader holding the smallest next key (the newest on a tie).
    fn smallest(&mut self, medium: &Medium) -> Option<usize> {
        self.fill(medium);
        self.settle(medium);
        let oldest = self.oldest();
        self.readers.get_mut(oldest)?.entries.peek_entry(medium);
        let newer = self.heap.peek().map(|Reverse(top)| top);
        let (key, reader) = match (newer, self.key_of(oldest)) {
            (None, None) => return None,
            (None, Some(old)) => (old, oldest),
            (Some(top), None) => (top.key.as_slice(), top.rank),
            (Some(top), Some(old)) => {
                match (top.head, top.key.as_slice()) <= (key_prefix(old), old) {
                    true => (top.key.as_slice(), top.rank),
                    false => (old, oldest),
                }
            }
        };
        match &self.upper {
            Some((head, upper)) if (key_prefix(key), key) >= (*head, upper.as_slice()) => None,
            _ => Some(reader),
        }
    }

    /// Positions at the next live entry; returns its reader.
    fn next_live(&mut self, medium: &Medium) -> Option<usize> {
        loop {
            let i = self.smallest(medium)?;
            if self.repeats_last(i) {
                self.step(medium, i);
                continue;
            }
            let (_, addr) = self.readers.get(i)?.entries.peeked()?;
            if addr != TOMBSTONE || self.keep_tombstones {
                return Some(i);
            }
            self.remember(i);
            self.step(medium, i);
        }
    }

    pub fn peek_key(&mut self, medium: &Medium) -> Option<&[u8]> {
        let i = self.next_live(medium)?;
        self.key_of(i)
    }

    pub fn advance(&mut self, medium: &Medium) {
        if let Some(i) = self.next_live(medium) {
            self.remember(i);
            self.step(medium, i);
        }
    }

    /// The next live entry, or `None` at the end of the chain.
    pub fn next_entry(&mut self, medium: &Medium) -> Option<(&[u8], u64)> {
        let i = self.next_live(medium)?;
        self.remember(i);
        if i != self.oldest() {
            // Its next key replaces it at the next call, once the entry
            // returned here is no longer borrowed.
            self.stale_top = true;
        }
        let reader = self.readers.get_mut(i)?;
        reader.read += 1;
        reader.entries.next_entry(medium)
    }

    /// Copies the live entries with keys below `upper` (all for `None`)
    /// into `run`; returns how many went in.
    pub fn copy_until(
        &mut self,
        medium: &Medium,
        upper: Option<&[u8]>,
        run: &mut RunWriter,
    ) -> u64 {
        if let ([only], true) = (self.readers.as_mut_slice(), self.copy_straight) {
            return only.entries.copy_until(medium, upper, run);
        }
        let mut copied = 0;
        while let Some(i) = self.next_live(medium) {
            let Some((key, addr)) = self.readers.get(i).and_then(|r| r.entries.peeked()) else {
                break;
            };
            if upper.is_some_and(|u| key >= u) {
                break;
            }
            copied += run.push(key, addr) as u64;
            self.remember(i);
            self.step(medium, i);
        }
        copied
    }

    /// How many entries were read from each image, newest first. Older
    /// entries of the last key returned are consumed by the next call, so
    /// the counts are whole once the reader has returned `None`.
    pub fn reads(&self) -> Vec<u64> {
        self.readers.iter().map(|r| r.read).collect()
    }

    /// True when every image's entries were read to their end (see
    /// `reads` for when that can be known).
    pub fn at_end(&self) -> bool {
        self.readers.iter().all(|r| r.entries.at_end())
    }
}

#[cfg(test)]
#[allow(clippy::indexing_slicing, clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::catalog::MAX_WORKERS;
    use crate::checkpoint::writer::{Builder, Horizons, Link};
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    const TABLE: u32 = 3;
    /// What the images a table was created after hold instead.
    const OTHER_TABLE: u32 = 4;

    /// Writes `images` (oldest first; `None` is a tombstone) as a chain;
    /// returns the medium and the newest image's offset.
    fn write_chain(images: &[BTreeMap<Vec<u8>, Option<u64>>]) -> (Medium, u64) {
        write_chain_from(images, 0)
    }

    /// `write_chain` where the first `absent` images hold another table
    /// instead of `TABLE`: a table created after the base, whose first
    /// section is a delta that may hold tombstones.
    fn write_chain_from(images: &[BTreeMap<Vec<u8>, Option<u64>>], absent: usize) -> (Medium, u64) {
        let medium = Medium::volatile(1 << 26, 1 << 26).unwrap();
        let (mut at, mut previous) = (4096u64, 0u64);
        for (i, entries) in images.iter().enumerate() {
            let horizons = Horizons {
                sequence: i as u64 + 1,
                t_low: 1,
                long_t_low: 1,
                long_published: Vec::new(),
            };
            let link = Link {
                previous,
                depth: i as u32 + 1,
            };
            let mut image = Builder::new(&horizons, link);
            let lists = vec![Vec::new(); MAX_WORKERS];
            if i < absent {
                let mut run = image.begin_section(OTHER_TABLE, &lists);
                run.push(b"other", 1);
                run.finish();
            } else {
                let mut run = image.begin_section(TABLE, &lists);
                for (key, addr) in entries {
                    run.push(key, addr.unwrap_or(TOMBSTONE));
                }
                run.finish();
            }
            let bytes = image.finish();
            medium.write_bytes(at, &bytes);
            previous = at;
            at = (at + bytes.len() as u64).next_multiple_of(4096);
        }
        (medium, previous)
    }

    /// What the chain says: newest entry of each key, tombstones dropped.
    fn view(images: &[BTreeMap<Vec<u8>, Option<u64>>]) -> BTreeMap<Vec<u8>, u64> {
        let mut merged = BTreeMap::new();
        for entries in images {
            merged.extend(entries.iter().map(|(k, a)| (k.clone(), *a)));
        }
        merged
            .into_iter()
            .filter_map(|(k, a)| Some((k, a?)))
            .collect()
    }

    /// Entries each image's section holds, newest first.
    fn section_counts(chain: &Chain) -> Vec<u64> {
        chain
            .sections(TABLE)
            .iter()
            .map(|s| s.entry_count)
            .collect()
    }

    /// Images of up to `max` entries with keys drawn from `key`; a delta's
    /// entries may be tombstones.
    fn images_of(
        key: impl Strategy<Value = Vec<u8>> + Clone,
        max: usize,
        deltas: std::ops::Range<usize>,
    ) -> impl Strategy<Value = Vec<BTreeMap<Vec<u8>, Option<u64>>>> {
        let image = move |tombstones: bool| {
            let addr = (1u64..1000).prop_map(Some);
            let entry = match tombstones {
                true => prop_oneof![3 => addr, 1 => Just(None)].boxed(),
                false => addr.boxed(),
            };
            proptest::collection::btree_map(key.clone(), entry, 0..max)
        };
        (image(false), proptest::collection::vec(image(true), deltas))
            .prop_map(|(base, deltas)| std::iter::once(base).chain(deltas).collect())
    }

    /// Short keys over a small alphabet: images of one or two fence groups
    /// that share most keys.
    fn chain_strategy() -> impl Strategy<Value = Vec<BTreeMap<Vec<u8>, Option<u64>>>> {
        images_of(proptest::collection::vec(0u8..4, 1..4), 150, 0..6)
    }

    /// Chains of up to 4 images of up to 2,000 two-byte keys each (tens
    /// of fence groups).
    fn wide_chain_strategy() -> impl Strategy<Value = Vec<BTreeMap<Vec<u8>, Option<u64>>>> {
        images_of(
            (0u16..4000).prop_map(|k| k.to_be_bytes().to_vec()),
            2000,
            0..4,
        )
    }

    /// Entries read in key order, and the entries read from each image.
    type RangesRead = (Vec<(Vec<u8>, u64)>, Vec<u64>);

    /// Reads the chain with one range reader per interval between `cuts`
    /// (sorted), checking each reader's bounds; returns the entries in
    /// order and the entries read from each image, summed.
    fn read_in_ranges(
        medium: &Medium,
        chain: &Chain,
        cuts: &[Vec<u8>],
    ) -> std::result::Result<RangesRead, TestCaseError> {
        let mut read = Vec::new();
        let mut reads = vec![0; chain.sections(TABLE).len()];
        for i in 0..=cuts.len() {
            let lower = i
                .checked_sub(1)
                .and_then(|j| cuts.get(j))
                .map(Vec::as_slice);
            let upper = cuts.get(i).map(Vec::as_slice);
            let mut reader = chain.range_reader(medium, TABLE, (lower, upper));
            while let Some((key, addr)) = reader.next_entry(medium) {
                prop_assert!(lower.is_none_or(|l| l <= key) && upper.is_none_or(|u| key < u));
                read.push((key.to_vec(), addr));
            }
            for (sum, n) in reads.iter_mut().zip(reader.reads()) {
                *sum += n;
            }
            prop_assert!(upper.is_some() || reader.at_end());
        }
        Ok((read, reads))
    }

    fn bound(key: Option<Vec<u8>>, inclusive: bool) -> Bound<Vec<u8>> {
        match (key, inclusive) {
            (None, _) => Bound::Unbounded,
            (Some(k), true) => Bound::Included(k),
            (Some(k), false) => Bound::Excluded(k),
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Sequential reads, point lookups and batched ranges in both
        /// directions say what the images say, newest first.
        #[test]
        fn a_chain_reads_like_its_images_merged_newest_first(
            images in chain_strategy(),
            absent in prop_oneof![2 => Just(0usize), 1 => 1usize..4],
            probes in proptest::collection::vec(proptest::collection::vec(0u8..4, 1..4), 1..20),
            lower in proptest::option::of(proptest::collection::vec(0u8..4, 0..4)),
            upper in proptest::option::of(proptest::collection::vec(0u8..4, 0..4)),
            inclusive in any::<(bool, bool)>(),
            limit in 1usize..40,
        ) {
            let absent = absent.min(images.len() - 1);
            let (medium, root) = write_chain_from(&images, absent);
            let chain = Chain::open(&medium, root).unwrap();
            chain.verify(&medium).unwrap();
            let images = &images[absent..];
            let want = view(images);

            let mut reader = chain.reader(TABLE);
            let mut read = Vec::new();
            while let Some((key, addr)) = reader.next_entry(&medium) {
                read.push((key.to_vec(), addr));
            }
            prop_assert!(reader.at_end());
            prop_assert_eq!(reader.reads(), section_counts(&chain));
            prop_assert_eq!(&read, &want.clone().into_iter().collect::<Vec<_>>());

            // The same keys when peeks and advances mix with whole entries.
            let mut reader = chain.reader(TABLE);
            let mut keys = Vec::new();
            for step in 0.. {
                let next = match step % 3 {
                    0 => reader.next_entry(&medium).map(|(k, _)| k.to_vec()),
                    _ => reader.peek_key(&medium).map(<[u8]>::to_vec).inspect(|_| reader.advance(&medium)),
                };
                let Some(key) = next else { break };
                keys.push(key);
            }
            prop_assert_eq!(keys, want.keys().cloned().collect::<Vec<_>>());

            for key in &probes {
                prop_assert_eq!(chain.find(&medium, TABLE, key).unwrap(), want.get(key).copied());
            }

            let range = (bound(lower, inclusive.0), bound(upper, inclusive.1));
            let in_range: Vec<(Vec<u8>, u64)> = want
                .iter()
                .filter(|(k, _)| std::ops::RangeBounds::contains(&range, *k))
                .map(|(k, a)| (k.clone(), *a))
                .collect();
            let refs = (as_ref(&range.0), as_ref(&range.1));
            let forward = chain.range(&medium, TABLE, refs, limit, false).unwrap();
            prop_assert_eq!(&forward[..], &in_range[..limit.min(in_range.len())]);
            let backward = chain.range(&medium, TABLE, refs, limit, true).unwrap();
            let mut reversed = in_range.clone();
            reversed.reverse();
            prop_assert_eq!(&backward[..], &reversed[..limit.min(reversed.len())]);
        }

        /// Readers of adjacent key ranges read, together, what one reader
        /// of the whole chain reads, and each image's entries exactly once.
        #[test]
        fn range_readers_partition_the_chain(
            images in chain_strategy(),
            absent in prop_oneof![2 => Just(0usize), 1 => 1usize..4],
            cuts in proptest::collection::btree_set(proptest::collection::vec(0u8..4, 1..4), 0..6),
        ) {
            let absent = absent.min(images.len() - 1);
            let (medium, root) = write_chain_from(&images, absent);
            let chain = Chain::open(&medium, root).unwrap();
            chain.verify(&medium).unwrap();
            let want: Vec<(Vec<u8>, u64)> = view(&images[absent..]).into_iter().collect();
            let cuts: Vec<Vec<u8>> = cuts.into_iter().collect();
            let (read, reads) = read_in_ranges(&medium, &chain, &cuts)?;
            prop_assert_eq!(read, want);
            prop_assert_eq!(reads, section_counts(&chain));
        }

        /// The same with images of many fence groups, so that each range
        /// reader's seek binary-searches the fences.
        #[test]
        fn range_readers_partition_chains_of_many_groups(
            images in wide_chain_strategy(),
            cuts in proptest::collection::btree_set(0u16..4000, 0..8),
        ) {
            let (medium, root) = write_chain(&images);
            let chain = Chain::open(&medium, root).unwrap();
            chain.verify(&medium).unwrap();
            let want: Vec<(Vec<u8>, u64)> = view(&images).into_iter().collect();
            let cuts: Vec<Vec<u8>> = cuts.into_iter().map(|c| c.to_be_bytes().to_vec()).collect();
            let (read, reads) = read_in_ranges(&medium, &chain, &cuts)?;
            prop_assert_eq!(read, want);
            prop_assert_eq!(reads, section_counts(&chain));
        }

        /// Checksums taken in pieces on several threads and combined agree
        /// with the whole-body check, and still find a damaged byte.
        #[test]
        fn checksums_in_pieces_agree_with_the_whole_body(
            images in wide_chain_strategy(),
            piece in 1u64..5000,
            threads in 1usize..4,
            damage in any::<prop::sample::Index>(),
        ) {
            let (medium, root) = write_chain(&images);
            let chain = Chain::open(&medium, root).unwrap();
            chain.verify(&medium).unwrap();
            chain.verify_in_pieces(&medium, threads, piece).unwrap();
            let bodies: Vec<(u64, u64)> = chain
                .images()
                .iter()
                .flat_map(|image| image.body_pieces(u64::MAX))
                .filter(|&(_, len)| len > 0)
                .collect();
            let (at, len) = bodies[damage.index(bodies.len())];
            // Whole words: the medium writes nothing smaller.
            let byte = at + damage.index(len as usize) as u64;
            let word = byte / 8 * 8;
            let mut bytes = [0u8; 8];
            medium.read_at(word, &mut bytes);
            bytes[(byte - word) as usize] ^= 0x10;
            medium.write_bytes(word, &bytes);
            prop_assert!(chain.verify(&medium).is_err());
            prop_assert!(chain.verify_in_pieces(&medium, threads, piece).is_err());
        }

        /// Split keys partition the chain, and into parts of similar size
        /// when newer images hold keys the base does not reach (rows
        /// appended after it).
        #[test]
        fn split_keys_balance_keys_only_newer_images_hold(
            base_rows in 1000u16..3000,
            appended in 1000u16..3000,
            parts in 2usize..6,
        ) {
            let base: BTreeMap<Vec<u8>, Option<u64>> =
                (0..base_rows).map(|k| (k.to_be_bytes().to_vec(), Some(1))).collect();
            let delta: BTreeMap<Vec<u8>, Option<u64>> = (base_rows..base_rows + appended)
                .map(|k| (k.to_be_bytes().to_vec(), Some(2)))
                .collect();
            let images = [base, delta];
            let (medium, root) = write_chain(&images);
            let chain = Chain::open(&medium, root).unwrap();
            let cuts = chain.split_keys(&medium, TABLE, parts);
            prop_assert!(cuts.is_sorted() && cuts.len() < parts);
            let (read, _) = read_in_ranges(&medium, &chain, &cuts)?;
            prop_assert_eq!(read, view(&images).into_iter().collect::<Vec<_>>());
            let total = u64::from(base_rows + appended);
            let mut bounds = vec![None];
            bounds.extend(cuts.iter().map(|c| Some(c.as_slice())));
            bounds.push(None);
            for pair in bounds.windows(2) {
                let mut reader = chain.range_reader(&medium, TABLE, (pair[0], pair[1]));
                let mut n = 0u64;
                while reader.next_entry(&medium).is_some() {
                    n += 1;
                }
                // One part may be off by the entries of one sample on
                // each side (a fence group per image here).
                prop_assert!(n <= total / parts as u64 + 4 * FENCE_EVERY, "{n} of {total} in one of {parts} parts");
            }
        }

        /// Merging the newest images keeps their tombstones: laid on what
        /// is below them, the merged delta says what they said.
        #[test]
        fn merged_newest_images_keep_their_tombstones(images in chain_strategy(), cut in 0usize..6) {
            let (medium, root) = write_chain(&images);
            let chain = Chain::open(&medium, root).unwrap();
            let newest = cut.min(images.len() - 1);
            let mut reader = chain.newest_reader(TABLE, newest);
            let mut merged = BTreeMap::new();
            while let Some((key, addr)) = reader.next_entry(&medium) {
                merged.insert(key.to_vec(), (addr != TOMBSTONE).then_some(addr));
            }
            let below = images.len() - newest;
            let mut relaid = images[..below].to_vec();
            relaid.push(merged);
            prop_assert_eq!(view(&relaid), view(&images));
        }
    }
}
