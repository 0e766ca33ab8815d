//! Encoding and decoding of checkpoint images (layout in the module above).

use super::Entry;
use crate::catalog::MAX_WORKERS;
use crate::error::{Error, Result};
use crate::medium::Medium;
use crate::txn::TableRt;

const MAGIC: [u8; 8] = *b"RBCKPT01";
const HEADER: usize = 64;

/// Builds an image in DRAM.
pub struct Builder {
    bytes: Vec<u8>,
    tables: u32,
}

impl Builder {
    pub fn new(sequence: u64, t_low: u64) -> Builder {
        let mut bytes = vec![0u8; HEADER];
        bytes[0..8].copy_from_slice(&MAGIC);
        bytes[8..16].copy_from_slice(&sequence.to_le_bytes());
        bytes[16..24].copy_from_slice(&t_low.to_le_bytes());
        Builder { bytes, tables: 0 }
    }

    /// Appends a table section: its regions' block lists and its entries.
    pub fn add_table(&mut self, table: &TableRt, entries: &[Entry]) {
        let entry_bytes: usize = entries.iter().map(|(k, _)| 2 + k.len() + 8).sum();
        let out = &mut self.bytes;
        out.extend_from_slice(&table.heap.def.id.to_le_bytes());
        out.extend_from_slice(&0u32.to_le_bytes());
        out.extend_from_slice(&(entries.len() as u64).to_le_bytes());
        out.extend_from_slice(&(entry_bytes as u64).to_le_bytes());
        let lists: Vec<Vec<u64>> = table.heap.regions.iter().map(|r| r.blocks.iter().map(|(_, b)| b.offset).collect()).collect();
        for list in &lists {
            out.extend_from_slice(&(list.len() as u64).to_le_bytes());
        }
        for offset in lists.iter().flatten() {
            out.extend_from_slice(&offset.to_le_bytes());
        }
        out.reserve(entry_bytes);
        for (key, addr) in entries {
            out.extend_from_slice(&(key.len() as u16).to_le_bytes());
            out.extend_from_slice(key);
            out.extend_from_slice(&addr.to_le_bytes());
        }
        self.tables += 1;
    }

    /// Seals the image: length and checksums.
    pub fn finish(mut self) -> Vec<u8> {
        let len = self.bytes.len() as u64;
        self.bytes[24..32].copy_from_slice(&len.to_le_bytes());
        self.bytes[32..36].copy_from_slice(&self.tables.to_le_bytes());
        let body_crc = crc32c::crc32c(&self.bytes[HEADER..]);
        self.bytes[36..40].copy_from_slice(&body_crc.to_le_bytes());
        let header_crc = crc32c::crc32c(&self.bytes[0..40]);
        self.bytes[40..44].copy_from_slice(&header_crc.to_le_bytes());
        self.bytes
    }
}

/// A checkpoint read back from the medium and validated.
pub struct CheckpointImage {
    pub sequence: u64,
    pub t_low: u64,
    pub len: u64,
    bytes: Vec<u8>,
    sections: Vec<SectionBounds>,
}

struct SectionBounds {
    table: u32,
    entries: u64,
    block_counts: Vec<u64>,
    blocks_at: usize,
    entries_at: usize,
    entries_end: usize,
}

/// One table's part of an image.
pub struct TableSection<'a> {
    pub entry_count: u64,
    bytes: &'a [u8],
    bounds: &'a SectionBounds,
}

fn corrupt(why: &str) -> Error {
    Error::Corrupt(format!("checkpoint: {why}"))
}

impl CheckpointImage {
    pub fn read(medium: &Medium, offset: u64) -> Result<CheckpointImage> {
        if !medium.contains(offset, HEADER as u64) || offset % 8 != 0 {
            return Err(corrupt("root points outside the medium"));
        }
        let mut header = [0u8; HEADER];
        medium.read_bytes(offset, &mut header);
        if header[0..8] != MAGIC || crc32c::crc32c(&header[0..40]) != u32_at(&header, 40) {
            return Err(corrupt("bad header"));
        }
        let len = u64_at(&header, 24);
        if len < HEADER as u64 || !medium.contains(offset, len) {
            return Err(corrupt("length outside the medium"));
        }
        let mut bytes = vec![0u8; len as usize];
        medium.read_bytes(offset, &mut bytes);
        if crc32c::crc32c(&bytes[HEADER..]) != u32_at(&header, 36) {
            return Err(corrupt("body checksum mismatch"));
        }
        let sections = parse_sections(&bytes, u32_at(&header, 32))?;
        Ok(CheckpointImage { sequence: u64_at(&header, 8), t_low: u64_at(&header, 16), len, bytes, sections })
    }

    pub fn table(&self, id: u32) -> Option<TableSection<'_>> {
        self.sections.iter().find(|s| s.table == id).map(|bounds| TableSection { entry_count: bounds.entries, bytes: &self.bytes, bounds })
    }
}

fn parse_sections(bytes: &[u8], count: u32) -> Result<Vec<SectionBounds>> {
    let mut at = HEADER;
    let mut sections = Vec::new();
    for _ in 0..count {
        let fixed = 24 + 8 * MAX_WORKERS;
        let head = bytes.get(at..at + fixed).ok_or_else(|| corrupt("truncated table section"))?;
        let block_counts: Vec<u64> = (0..MAX_WORKERS).map(|w| u64_at(head, 24 + 8 * w)).collect();
        let blocks: u64 = block_counts.iter().try_fold(0u64, |a, &c| a.checked_add(c)).ok_or_else(|| corrupt("block count overflow"))?;
        let entry_bytes = u64_at(head, 16);
        let blocks_at = at + fixed;
        let entries_at = usize::try_from(blocks.saturating_mul(8)).ok().and_then(|b| blocks_at.checked_add(b)).ok_or_else(|| corrupt("block list overflow"))?;
        let entries_end = usize::try_from(entry_bytes).ok().and_then(|e| entries_at.checked_add(e)).filter(|&e| e <= bytes.len()).ok_or_else(|| corrupt("entries beyond the image"))?;
        sections.push(SectionBounds { table: u32_at(head, 0), entries: u64_at(head, 8), block_counts, blocks_at, entries_at, entries_end });
        at = entries_end;
    }
    if at != bytes.len() {
        return Err(corrupt("trailing bytes"));
    }
    Ok(sections)
}

impl<'a> TableSection<'a> {
    /// Block offsets of each region, in region order.
    pub fn block_lists(&self) -> Vec<&'a [u8]> {
        let mut at = self.bounds.blocks_at;
        self.bounds
            .block_counts
            .iter()
            .map(|&count| {
                let list = &self.bytes[at..at + 8 * count as usize];
                at += 8 * count as usize;
                list
            })
            .collect()
    }

    /// Entries in key order. Stops early (yielding fewer than
    /// `entry_count`) if the bytes do not parse; callers check the count.
    pub fn entries(&self) -> impl Iterator<Item = (&'a [u8], u64)> + 'a {
        let bytes = &self.bytes[self.bounds.entries_at..self.bounds.entries_end];
        let mut at = 0usize;
        std::iter::from_fn(move || {
            let len = u16::from_le_bytes(bytes.get(at..at + 2)?.try_into().ok()?) as usize;
            let key = bytes.get(at + 2..at + 2 + len)?;
            let addr = u64::from_le_bytes(bytes.get(at + 2 + len..at + 10 + len)?.try_into().ok()?);
            at += 10 + len;
            Some((key, addr))
        })
    }
}

/// Block offsets of one region list.
pub fn offsets(list: &[u8]) -> impl Iterator<Item = u64> + '_ {
    list.chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().unwrap()))
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}
