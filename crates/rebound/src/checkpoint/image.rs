//! Encoding and decoding of checkpoint images (layout in the module above).
//!
//! Images are read from the medium on demand: opening one reads only its
//! header, table headers, block lists and fence arrays (about 1/64 of the
//! entries), so a lookup can binary-search a run right after a restart
//! without first copying or checksumming the whole image.
//!
//! Nothing is used before a checksum vouches for it: the header has its
//! own; each section's head and block lists have one (verified at open,
//! before recovery registers a block); each group of `FENCE_EVERY`
//! entries has one in its fence (verified by every on-demand lookup and
//! range read before it trusts an entry); the body checksum is verified by
//! whoever reads the image sequentially. Fences themselves are read on
//! demand and only steer searches, so opening an image reads no entry
//! and no fence; its block lists (16 bytes per block) are parsed only for
//! the newest image of a chain (`open_predecessor`).

#![deny(clippy::indexing_slicing, clippy::unwrap_used)]

use super::entry::{Decoder, MAX_ENTRY};
use super::writer::RunWriter;
use crate::catalog::MAX_WORKERS;
use crate::error::{Error, Result};
use crate::medium::Medium;
use std::ops::Bound;

pub(super) const MAGIC: [u8; 8] = *b"RBCKPT06";
/// An image whose table sections hold node images (IACoW) instead of
/// entries; see [`NodePart`].
pub(super) const NODES_MAGIC: [u8; 8] = *b"RBCKPN05";
/// Bytes before a section's node images: root id, id limit, node count.
pub(super) const NODE_PART_HEAD: u64 = 24;
/// Bytes of one node image.
pub(super) const NODE_IMAGE: u64 = crate::index::NODE_IMAGE_BYTES as u64;
/// The address a delta image records for a key deleted since its
/// predecessor (the heap's, so that the change log below can name it).
pub use crate::heap::TOMBSTONE;
/// Image sequence numbers are below this (one per checkpoint, they never
/// get near it), so the next one is never out of range.
pub const MAX_SEQUENCE: u64 = 1 << 56;
/// Images a chain may hold; a longer one is damage, not a chain.
pub const MAX_CHAIN: u32 = 64;
/// Where the long regions' published marks start in the header.
pub(super) const LONG_PUBLISHED_AT: usize = 64;
const LONG_REGION_COUNT: usize = MAX_WORKERS - crate::catalog::LONG_REGIONS;
/// Header bytes: the fixed fields and the long regions' published marks.
pub(super) const HEADER: u64 = (LONG_PUBLISHED_AT + 8 * LONG_REGION_COUNT) as u64;
/// Every `FENCE_EVERY`-th entry's offset is recorded for binary search.
pub const FENCE_EVERY: u64 = 64;
/// Bytes read at a time when a run is read sequentially.
const CHUNK: usize = 1 << 18;
/// Bytes of a section head: table id, meta checksum, entry count, entry
/// bytes, then one block count per region.
const SECTION_HEAD: u64 = 24 + 8 * MAX_WORKERS as u64;
/// Bytes per fence: u64 offset of the group's first entry, u32 crc32c of
/// the group's entries, u32 reserved.
const FENCE_BYTES: u64 = 16;

/// crc32c of the header with its checksum field (40..44) left out.
pub(super) fn header_crc(header: &[u8]) -> u32 {
    let crc = crc32c::crc32c(header.get(0..40).unwrap_or_default());
    crc32c::crc32c_append(crc, header.get(44..HEADER as usize).unwrap_or_default())
}

/// A checkpoint in the medium whose structure has been validated.
pub struct CheckpointImage {
    pub offset: u64,
    pub sequence: u64,
    pub t_low: u64,
    /// Long-transaction regions are redone from here (≤ t_low).
    pub long_t_low: u64,
    /// Per long region: commits up to this one are in the checkpoint.
    pub long_published: Vec<u64>,
    pub len: u64,
    /// Offset of the image this one is a delta of; 0 for a base image.
    pub previous: u64,
    /// Images in the chain this one ends (1 for a base image).
    pub depth: u32,
    /// Its sections hold node images (IACoW), not entries.
    pub nodes: bool,
    body_crc: u32,
    sections: Vec<TableSection>,
}

/// One table's part of an image.
pub struct TableSection {
    pub table: u32,
    pub entry_count: u64,
    /// Each region's blocks as (sequence number, medium offset), ascending.
    /// Empty in an image opened as a predecessor (`open_predecessor`):
    /// only a chain's newest image describes the heap, so read its lists.
    pub block_lists: Vec<Vec<(u64, u64)>>,
    /// Medium offset and length of the entries.
    entries_at: u64,
    entries_len: u64,
    /// Where the fences are: per FENCE_EVERY-th entry, its offset
    /// (relative to `entries_at`) and the crc32c of the group it starts.
    /// Read on demand and never trusted: a group is used only when its
    /// checksum matches and its neighbours bracket what was searched.
    fences_at: u64,
    fence_count: usize,
}

fn corrupt(why: &str) -> Error {
    Error::Corrupt(format!("checkpoint: {why}"))
}

impl CheckpointImage {
    /// Reads and validates the header and section structure.
    pub fn open(medium: &Medium, offset: u64) -> Result<CheckpointImage> {
        Self::open_with(medium, offset, Lists::Parse)
    }

    /// Opens an image below the newest one of a chain: its block lists are
    /// checked against their checksum but not parsed, as only the newest
    /// image's lists describe the heap (a restart of a table with 16 M
    /// rows reads 16 images' lists).
    pub fn open_predecessor(medium: &Medium, offset: u64) -> Result<CheckpointImage> {
        Self::open_with(medium, offset, Lists::ChecksumOnly)
    }

    fn open_with(medium: &Medium, offset: u64, lists: Lists) -> Result<CheckpointImage> {
        if !medium.contains(offset, HEADER) || !offset.is_multiple_of(8) {
            return Err(corrupt("root points outside the medium"));
        }
        let mut header = [0u8; HEADER as usize];
        medium.read_bytes(offset, &mut header);
        let nodes = header[0..8] == NODES_MAGIC;
        if (header[0..8] != MAGIC && !nodes) || header_crc(&header) != u32_at(&header, 40) {
            return Err(corrupt("bad header"));
        }
        let len = u64_at(&header, 24);
        if len < HEADER || !medium.contains(offset, len) {
            return Err(corrupt("length outside the medium"));
        }
        let (previous, depth) = (u64_at(&header, 56), u32_at(&header, 44));
        if !(1..=MAX_CHAIN).contains(&depth) || (depth == 1) != (previous == 0) {
            return Err(corrupt("bad chain link"));
        }
        // The next checkpoint is numbered one higher.
        if u64_at(&header, 8) >= MAX_SEQUENCE {
            return Err(corrupt("sequence number out of range"));
        }
        let sections = read_sections(medium, (offset, len), u32_at(&header, 32), lists)?;
        Ok(CheckpointImage {
            offset,
            sequence: u64_at(&header, 8),
            t_low: u64_at(&header, 16),
            long_t_low: u64_at(&header, 48).min(u64_at(&header, 16)),
            long_published: (0..LONG_REGION_COUNT)
                .map(|i| u64_at(&header, LONG_PUBLISHED_AT + 8 * i))
                .collect(),
            len,
            previous,
            depth,
            nodes,
            body_crc: u32_at(&header, 36),
            sections,
        })
    }

    /// Reads the whole body once and checks its checksum.
    pub fn verify(&self, medium: &Medium) -> Result<()> {
        self.check_body(crc_of_range(
            medium,
            self.offset + HEADER,
            self.len - HEADER,
            0,
        ))
    }

    /// The body cut into pieces of `piece` bytes (the last one shorter),
    /// as (offset, length), for checksumming on several threads.
    pub fn body_pieces(&self, piece: u64) -> impl Iterator<Item = (u64, u64)> + use<> {
        let (start, len) = (self.offset + HEADER, self.len - HEADER);
        let piece = piece.max(1);
        (0..len.div_ceil(piece)).map(move |i| (start + i * piece, piece.min(len - i * piece)))
    }

    /// The checksum of one piece of the body.
    pub fn piece_crc(medium: &Medium, (at, len): (u64, u64)) -> u32 {
        crc_of_range(medium, at, len, 0)
    }

    /// Checks the body against `crc`, its checksum as read.
    pub fn check_body(&self, crc: u32) -> Result<()> {
        if crc != self.body_crc {
            return Err(corrupt("body checksum mismatch"));
        }
        Ok(())
    }

    pub fn sections(&self) -> &[TableSection] {
        &self.sections
    }

    pub fn table(&self, id: u32) -> Option<&TableSection> {
        self.sections.iter().find(|s| s.table == id)
    }
}

/// Reads back the image just written at `offset` from `bytes` and checks
/// that its header and section count say what the builder wrote: the
/// writer and the reader agree on the layout before the image can be put
/// in force. Engine-written bytes, so a mismatch is a bug, not damage.
pub(super) fn assert_reads_back(medium: &Medium, offset: u64, bytes: &[u8]) {
    let image = match CheckpointImage::open_predecessor(medium, offset) {
        Ok(image) => image,
        Err(e) => panic!("a checkpoint image reads back as written at {offset:#x}: {e}"),
    };
    let written = (
        bytes.len() as u64,
        u64_at(bytes, 8),
        u64_at(bytes, 16),
        u32_at(bytes, 44),
        u64_at(bytes, 56),
        u32_at(bytes, 32) as usize,
    );
    let read = (
        image.len,
        image.sequence,
        image.t_low,
        image.depth,
        image.previous,
        image.sections.len(),
    );
    assert_eq!(
        read, written,
        "a checkpoint image's header and counts read back as written at {offset:#x}"
    );
}

/// Whether opening an image parses its block lists.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Lists {
    Parse,
    ChecksumOnly,
}

fn read_sections(
    medium: &Medium,
    (offset, len): (u64, u64),
    count: u32,
    lists: Lists,
) -> Result<Vec<TableSection>> {
    let end = offset + len;
    let mut at = offset + HEADER;
    let mut sections = Vec::new();
    for _ in 0..count {
        let (section, section_end) = read_section(medium, at, end, lists)?;
        sections.push(section);
        at = section_end;
    }
    if at != end {
        return Err(corrupt("trailing bytes"));
    }
    Ok(sections)
}

/// Reads and verifies the section at `at` (the image ends at `end`);
/// returns it and where the next one starts. Sizes read from the head
/// are checked against the (verified) image length, and the head, lists
/// and fences against the meta checksum, before anything is allocated
/// for or parsed from them.
fn read_section(medium: &Medium, at: u64, end: u64, lists: Lists) -> Result<(TableSection, u64)> {
    if at + SECTION_HEAD > end {
        return Err(corrupt("truncated table section"));
    }
    let mut head = vec![0u8; SECTION_HEAD as usize];
    medium.read_at(at, &mut head);
    let entry_count = u64_at(&head, 8);
    let entries_len = u64_at(&head, 16);
    let counts: Vec<u64> = (0..MAX_WORKERS)
        .map(|w| u64_at(&head, 24 + 8 * w))
        .collect();
    let space = end - at;
    let blocks = counts
        .iter()
        .try_fold(0u64, |a, &c| a.checked_add(c))
        .filter(|&b| b <= space / 16)
        .ok_or_else(|| corrupt("block counts"))?;
    let lists_at = at + SECTION_HEAD;
    let entries_at = lists_at + 16 * blocks;
    let fence_count = entry_count.div_ceil(FENCE_EVERY);
    let fences_at = entries_at
        .checked_add(entries_len)
        .filter(|&f| f <= end)
        .ok_or_else(|| corrupt("entries beyond the image"))?;
    let section_end = fence_count
        .checked_mul(FENCE_BYTES)
        .and_then(|b| fences_at.checked_add(b))
        .filter(|&e| e <= end)
        .ok_or_else(|| corrupt("fences beyond the image"))?;
    let stored = u32_at(&head, 4);
    put_zero(&mut head, 4..8);
    let lists_len = 16 * blocks;
    let crc = crc_of_range(medium, lists_at, lists_len, crc32c::crc32c(&head));
    if crc != stored {
        return Err(corrupt("section head or block lists fail their checksum"));
    }
    let block_lists = match lists {
        Lists::Parse => {
            let len = usize::try_from(lists_len).map_err(|_| corrupt("block counts"))?;
            let mut bytes = vec![0u8; len];
            medium.read_at(lists_at, &mut bytes);
            parse_lists(&bytes, &counts)?
        }
        Lists::ChecksumOnly => Vec::new(),
    };
    let fence_count =
        usize::try_from(fence_count).map_err(|_| corrupt("fences beyond the image"))?;
    let section = TableSection {
        table: u32_at(&head, 0),
        entry_count,
        block_lists,
        entries_at,
        entries_len,
        fences_at,
        fence_count,
    };
    Ok((section, section_end))
}

/// The node images of a table section in a node image (IACoW), found in
/// the place of its entries (whose count is then 0, so it has no fences).
pub struct NodePart {
    pub root_id: u64,
    pub id_limit: u64,
    pub count: u64,
    images_at: u64,
}

impl TableSection {
    /// Reads the node part's head; its size must fill the entries' place.
    pub fn node_part(&self, medium: &Medium) -> Result<NodePart> {
        if self.entry_count != 0 || self.entries_len < NODE_PART_HEAD {
            return Err(corrupt("node part too short"));
        }
        let mut head = [0u8; NODE_PART_HEAD as usize];
        medium.read_at(self.entries_at, &mut head);
        let count = u64_at(&head, 16);
        let fits = count
            .checked_mul(NODE_IMAGE)
            .and_then(|b| b.checked_add(NODE_PART_HEAD))
            == Some(self.entries_len);
        if !fits {
            return Err(corrupt("node count does not fill the node part"));
        }
        Ok(NodePart {
            root_id: u64_at(&head, 0),
            id_limit: u64_at(&head, 8),
            count,
            images_at: self.entries_at + NODE_PART_HEAD,
        })
    }
}

impl NodePart {
    /// Reads node image `i` into `image`; false if its checksum (word 0:
    /// crc32c of the other 4088 bytes) fails.
    pub fn read(&self, medium: &Medium, i: u64, image: &mut [u8]) -> bool {
        if i >= self.count || image.len() as u64 != NODE_IMAGE {
            return false;
        }
        medium.read_at(self.images_at + i * NODE_IMAGE, image);
        let stored = image.get(..8).map_or(0, |b| u64_at(b, 0));
        let body = image.get(8..).unwrap_or_default();
        if u64::from(crc32c::crc32c(body)) != stored {
            return false;
        }
        put_zero(image, 0..8);
        true
    }
}

/// Continues `crc` over `len` medium bytes from `at`, a chunk at a time.
fn crc_of_range(medium: &Medium, mut at: u64, len: u64, mut crc: u32) -> u32 {
    let mut buf = vec![0u8; (len as usize).min(CHUNK)];
    let end = at + len;
    while at < end {
        let n = ((end - at) as usize).min(CHUNK);
        let Some(chunk) = buf.get_mut(..n) else {
            break;
        };
        medium.read_at(at, chunk);
        crc = crc32c::crc32c_append(crc, chunk);
        at += n as u64;
    }
    crc
}

/// Parses the (seq, offset) block lists, region by region; sequence
/// numbers must ascend.
fn parse_lists(bytes: &[u8], counts: &[u64]) -> Result<Vec<Vec<(u64, u64)>>> {
    let mut rest = bytes;
    counts
        .iter()
        .map(|&count| {
            let (region, after) = rest
                .split_at_checked(16 * count as usize)
                .ok_or_else(|| corrupt("block lists beyond their section"))?;
            rest = after;
            let list: Vec<(u64, u64)> = region
                .chunks_exact(16)
                .map(|pair| (u64_at(pair, 0), u64_at(pair, 8)))
                .collect();
            if list.windows(2).any(|w| matches!(w, [a, b] if a.0 >= b.0))
                || list.last().is_some_and(|l| l.0 >= u32::MAX as u64)
            {
                return Err(corrupt("block list out of sequence"));
            }
            Ok(list)
        })
        .collect()
}

impl TableSection {
    /// Fence `g`: the offset of its group's first entry and the group's
    /// checksum, as stored (unverified).
    fn fence(&self, medium: &Medium, g: usize) -> Option<(u64, u32)> {
        if g >= self.fence_count {
            return None;
        }
        let mut bytes = [0u8; FENCE_BYTES as usize];
        medium.read_at(self.fences_at + FENCE_BYTES * g as u64, &mut bytes);
        Some((u64_at(&bytes, 0), u32_at(&bytes, 8)))
    }

    /// The key of the group's first entry at `rel`, unverified: only
    /// steers the search for a group, whose checksum is verified before
    /// any answer.
    fn key_at(&self, medium: &Medium, rel: u64) -> Option<Vec<u8>> {
        let mut probe = Decoder::new();
        self.key_at_into(medium, rel, &mut probe)
            .then(|| probe.entry().0.to_vec())
    }

    /// `key_at` into `probe`; false if no first entry decodes at `rel`.
    /// `rel` comes from an unverified fence, so it is checked against
    /// the entries' length before anything is read.
    fn key_at_into(&self, medium: &Medium, rel: u64, probe: &mut Decoder) -> bool {
        let Some(room) = self.entries_len.checked_sub(rel) else {
            return false;
        };
        let mut bytes = [0u8; MAX_ENTRY];
        let Some(window) = bytes.get_mut(..room.min(MAX_ENTRY as u64) as usize) else {
            return false;
        };
        medium.read_at(self.entries_at + rel, window);
        probe.restart();
        probe.decode(window).is_some()
    }

    /// First keys of about `samples` groups spread evenly over the run,
    /// each with the number of entries from it to the next sample
    /// (unverified: only for splitting work, never for answers).
    pub fn key_samples(&self, medium: &Medium, samples: usize) -> Vec<(Vec<u8>, u64)> {
        let groups = self.fence_count;
        let step = groups.div_ceil(samples.max(1)).max(1);
        (0..groups)
            .step_by(step)
            .filter_map(|g| {
                let key = self
                    .fence(medium, g)
                    .and_then(|f| self.key_at(medium, f.0))?;
                let entries = (g + step).min(groups) as u64 * FENCE_EVERY;
                Some((key, entries.min(self.entry_count) - g as u64 * FENCE_EVERY))
            })
            .collect()
    }

    /// Index of the last group whose first key is ≤ `key` (0 if none is).
    fn group_for(&self, medium: &Medium, key: &[u8]) -> usize {
        let (mut lo, mut hi) = (0usize, self.fence_count);
        let mut probe = Decoder::new();
        while lo + 1 < hi {
            let mid = (lo + hi) / 2;
            let read = self
                .fence(medium, mid)
                .is_some_and(|f| self.key_at_into(medium, f.0, &mut probe));
            match read && probe.entry().0 <= key {
                true => lo = mid,
                false => hi = mid,
            }
        }
        lo
    }

    /// The entries of group `g`, verified against its checksum; `None`
    /// past the last group.
    fn group(&self, medium: &Medium, g: usize) -> Result<Option<Entries>> {
        let mut bytes = Vec::new();
        if !self.group_bytes(medium, g, &mut bytes)? {
            return Ok(None);
        }
        let (mut entries, mut out) = (GroupEntries::new(&bytes), Vec::new());
        while let Some(entry) = entries.next_entry() {
            let (key, addr) = entry?;
            out.push((key.to_vec(), addr));
        }
        Ok(Some(out))
    }

    /// Reads group `g`'s bytes into `bytes` and verifies them against its
    /// checksum; false past the last group.
    fn group_bytes(&self, medium: &Medium, g: usize, bytes: &mut Vec<u8>) -> Result<bool> {
        let Some((start, crc)) = self.fence(medium, g) else {
            return Ok(false);
        };
        let end = match g + 1 < self.fence_count {
            true => self.fence(medium, g + 1).map_or(0, |f| f.0),
            false => self.entries_len,
        };
        if start >= end || end > self.entries_len || (g == 0) != (start == 0) {
            return Err(corrupt("fences out of order"));
        }
        bytes.resize((end - start) as usize, 0);
        medium.read_at(self.entries_at + start, bytes);
        if crc32c::crc32c(bytes) != crc {
            return Err(corrupt("a group of run entries fails its checksum"));
        }
        Ok(true)
    }

    /// The address recorded for `key`, if any. Errors if the run is
    /// damaged where the answer comes from. After a restart a lookup of a
    /// key absent from the newer images probes each of them, so this reads
    /// groups in place, with one buffer and no allocation per entry.
    pub fn find(&self, medium: &Medium, key: &[u8]) -> Result<Option<u64>> {
        let g = self.group_for(medium, key);
        let mut bytes = Vec::new();
        if !self.group_bytes(medium, g, &mut bytes)? {
            return Ok(None);
        }
        let (mut found, mut after_first, mut first) = (None, false, true);
        let mut entries = GroupEntries::new(&bytes);
        while let Some(entry) = entries.next_entry() {
            let (k, addr) = entry?;
            after_first |= first && k < key;
            first = false;
            if k == key {
                found = Some(addr);
            }
        }
        if found.is_some() {
            return Ok(found);
        }
        // Absent only if the verified neighbours bracket the key: a
        // damaged fence key may have steered the search wrong.
        let before_next = match self.group_bytes(medium, g + 1, &mut bytes)? {
            true => match GroupEntries::new(&bytes).next_entry() {
                Some(first) => key < first?.0,
                None => false,
            },
            false => true,
        };
        match (after_first || g == 0) && before_next {
            true => Ok(None),
            false => Err(corrupt("run search inconsistent with its entries")),
        }
    }

    /// Up to `limit` entries with keys in the range, ascending, each from
    /// a verified group.
    pub fn range(
        &self,
        medium: &Medium,
        lower: Bound<&[u8]>,
        upper: Bound<&[u8]>,
        limit: usize,
    ) -> Result<Vec<(Vec<u8>, u64)>> {
        let from: &[u8] = match lower {
            Bound::Included(k) | Bound::Excluded(k) => k,
            Bound::Unbounded => &[],
        };
        let mut g = self.group_for(medium, from);
        let mut out = Vec::new();
        let mut first_group = true;
        while let Some(entries) = self.group(medium, g)? {
            if first_group && g > 0 && entries.first().is_none_or(|(k, _)| k.as_slice() > from) {
                return Err(corrupt("run search inconsistent with its entries"));
            }
            first_group = false;
            for (key, addr) in entries {
                if below(&key, lower) {
                    continue;
                }
                if !within(&key, upper) || out.len() == limit {
                    return Ok(out);
                }
                out.push((key, addr));
            }
            g += 1;
        }
        Ok(out)
    }

    /// Up to `limit` entries with keys in the range, descending, each from
    /// a verified group.
    pub fn range_rev(
        &self,
        medium: &Medium,
        lower: Bound<&[u8]>,
        upper: Bound<&[u8]>,
        limit: usize,
    ) -> Result<Vec<(Vec<u8>, u64)>> {
        let Some(mut g) = self.last_group_within(medium, upper)? else {
            return Ok(Vec::new());
        };
        let mut out = Vec::new();
        while let Some(entries) = self.group(medium, g)? {
            for (key, addr) in entries.into_iter().rev() {
                if !within(&key, upper) {
                    continue;
                }
                if below(&key, lower) || out.len() == limit {
                    return Ok(out);
                }
                out.push((key, addr));
            }
            let Some(previous) = g.checked_sub(1) else {
                break;
            };
            g = previous;
        }
        Ok(out)
    }

    /// The last group that may hold keys within `upper`, checked against
    /// its neighbour: a damaged fence key may have steered the search.
    fn last_group_within(&self, medium: &Medium, upper: Bound<&[u8]>) -> Result<Option<usize>> {
        let to = match upper {
            Bound::Included(k) | Bound::Excluded(k) => k,
            Bound::Unbounded => return Ok(self.fence_count.checked_sub(1)),
        };
        let g = self.group_for(medium, to);
        let first_within = |g| -> Result<Option<bool>> {
            Ok(self
                .group(medium, g)?
                .map(|entries| entries.first().is_some_and(|(k, _)| k.as_slice() <= to)))
        };
        let consistent =
            (g == 0 || first_within(g)? != Some(false)) && first_within(g + 1)? != Some(true);
        match consistent {
            true => Ok(Some(g)),
            false => Err(corrupt("run search inconsistent with its entries")),
        }
    }

    /// Sequential reader of all entries (callers verify the body first).
    pub fn reader(&self) -> EntryReader<'_> {
        EntryReader::new(self, 0, 0)
    }

    /// Sequential reader of the entries with keys ≥ `lower` (callers
    /// verify the body first, fences included: the seek trusts them).
    pub fn reader_from(&self, medium: &Medium, lower: &[u8]) -> EntryReader<'_> {
        let g = self.group_for(medium, lower);
        let (start, index) = match self.fence(medium, g) {
            Some((start, _)) => (start.min(self.entries_len), g as u64 * FENCE_EVERY),
            None => (0, 0),
        };
        let mut reader = EntryReader::new(self, start, index);
        while reader
            .peek_entry(medium)
            .is_some_and(|(key, _)| key < lower)
        {
            reader.advance(medium);
        }
        reader
    }
}

/// Run entries as (key, address).
type Entries = Vec<(Vec<u8>, u64)>;

/// Whether `key` lies below a range's lower bound.
fn below(key: &[u8], lower: Bound<&[u8]>) -> bool {
    match lower {
        Bound::Included(l) => key < l,
        Bound::Excluded(l) => key <= l,
        Bound::Unbounded => false,
    }
}

/// Whether `key` lies within a range's upper bound.
fn within(key: &[u8], upper: Bound<&[u8]>) -> bool {
    match upper {
        Bound::Included(u) => key <= u,
        Bound::Excluded(u) => key < u,
        Bound::Unbounded => true,
    }
}

/// The entries of a verified group, decoded one after another; keys must
/// ascend. After an error it yields nothing more.
struct GroupEntries<'b> {
    rest: &'b [u8],
    decoder: Decoder,
}

impl<'b> GroupEntries<'b> {
    fn new(bytes: &'b [u8]) -> Self {
        GroupEntries {
            rest: bytes,
            decoder: Decoder::new(),
        }
    }

    /// The next entry (its key lent until the next call), `None` at the
    /// group's end.
    fn next_entry(&mut self) -> Option<Result<(&[u8], u64)>> {
        if self.rest.is_empty() {
            return None;
        }
        let Some(len) = self.decoder.decode(self.rest) else {
            self.rest = &[];
            return Some(Err(corrupt("a group of run entries does not decode")));
        };
        self.rest = self.rest.get(len..).unwrap_or_default();
        Some(Ok(self.decoder.entry()))
    }
}

/// Reads a run front to back in large chunks. Stops short of `at_end`
/// where the run does not decode (the caller then reports corruption).
pub struct EntryReader<'a> {
    section: &'a TableSection,
    /// Relative offset of `buf[0]`.
    buf_at: u64,
    buf: Vec<u8>,
    /// Position of the next entry, relative to the run, and its index.
    pos: u64,
    index: u64,
    /// The entry at `pos` once decoded (`end` is then where it ends),
    /// else the one before it, which the entry at `pos` is decoded
    /// against: a merge asks for the same entry several times before it
    /// moves on, and `pos` only grows.
    decoder: Decoder,
    end: Option<u64>,
}

impl<'a> EntryReader<'a> {
    /// A reader from the entry of number `index` at `pos`, which starts
    /// a group.
    fn new(section: &'a TableSection, pos: u64, index: u64) -> Self {
        EntryReader {
            section,
            buf_at: pos,
            buf: Vec::new(),
            pos,
            index,
            decoder: Decoder::new(),
            end: None,
        }
    }

    /// Where `pos` is in `buf` once the longest entry that may start there
    /// (up to the run's end) is in it; `None` at the end.
    fn window(&mut self, medium: &Medium) -> Option<usize> {
        let end = self.section.entries_len;
        let need = end.checked_sub(self.pos).filter(|&n| n > 0)?;
        let need = need.min(MAX_ENTRY as u64);
        if self.pos < self.buf_at || self.pos + need > self.buf_at + self.buf.len() as u64 {
            let len = (end - self.pos).min(CHUNK as u64) as usize;
            self.buf.resize(len, 0);
            medium.read_at(self.section.entries_at + self.pos, &mut self.buf);
            self.buf_at = self.pos;
        }
        Some((self.pos - self.buf_at) as usize)
    }

    /// Decodes the entry at `pos`, once; false at the end or where the
    /// run does not decode.
    fn current(&mut self, medium: &Medium) -> bool {
        if self.end.is_some() {
            return true;
        }
        if self.index.is_multiple_of(FENCE_EVERY) {
            self.decoder.restart();
        }
        let Some(at) = self.window(medium) else {
            return false;
        };
        let bytes = self.buf.get(at..).unwrap_or_default();
        self.end = self.decoder.decode(bytes).map(|n| self.pos + n as u64);
        self.end.is_some()
    }

    /// Moves past the decoded entry; false if there is none.
    fn consume(&mut self, medium: &Medium) -> bool {
        if !self.current(medium) {
            return false;
        }
        if let Some(end) = self.end.take() {
            self.pos = end;
            self.index += 1;
        }
        true
    }

    pub fn advance(&mut self, medium: &Medium) {
        self.consume(medium);
    }

    /// The next entry without consuming it.
    pub fn peek_entry(&mut self, medium: &Medium) -> Option<(&[u8], u64)> {
        self.current(medium).then(|| self.decoder.entry())
    }

    /// The entry the last `peek_entry` returned, if the reader has not
    /// moved since.
    pub fn peeked(&self) -> Option<(&[u8], u64)> {
        self.end.map(|_| self.decoder.entry())
    }

    /// The next entry, or `None` at the end of the run.
    pub fn next_entry(&mut self, medium: &Medium) -> Option<(&[u8], u64)> {
        self.consume(medium).then(|| self.decoder.entry())
    }

    /// Copies the entries with keys below `upper` (all for `None`) into
    /// `run`; returns how many went in. Each is encoded anew: the run's
    /// groups need not start where this one's do.
    pub fn copy_until(
        &mut self,
        medium: &Medium,
        upper: Option<&[u8]>,
        run: &mut RunWriter,
    ) -> u64 {
        let mut copied = 0;
        while let Some((key, addr)) = self.peek_entry(medium) {
            if upper.is_some_and(|u| key >= u) {
                break;
            }
            copied += run.push(key, addr) as u64;
            self.advance(medium);
        }
        copied
    }

    /// True when every byte of the run was consumed.
    pub fn at_end(&self) -> bool {
        self.pos == self.section.entries_len
    }
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    let field = b.get(at..at + 4).and_then(|s| s.try_into().ok());
    u32::from_le_bytes(field.unwrap_or_default())
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let field = b.get(at..at + 8).and_then(|s| s.try_into().ok());
    u64::from_le_bytes(field.unwrap_or_default())
}

fn put_zero(b: &mut [u8], range: std::ops::Range<usize>) {
    if let Some(field) = b.get_mut(range) {
        field.fill(0);
    }
}
