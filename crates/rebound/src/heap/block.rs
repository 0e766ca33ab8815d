//! The block header (first 64 bytes of a block), its encoding, validation
//! and the links between blocks. Layout in the module above. Decoding is
//! free of indexing and `unwrap` (denied by lint): a damaged header is
//! `Corrupt`, never a panic.
#![deny(clippy::indexing_slicing, clippy::unwrap_used)]

use crate::catalog::{self, TableDef};
use crate::error::{Error, Result};
use crate::medium::Medium;

pub const BLOCK_MAGIC: u32 = u32::from_le_bytes(*b"BLK2");
pub const BLOCK_HEADER: u64 = 64;
pub const BLOCK_ALIGN: u64 = 4096;
const TABLE_AT: usize = 4;
const WORKER_AT: usize = 8;
const CRC_AT: usize = 12;
const SEQ_AT: usize = 16;
/// Offsets of header fields written after the header itself.
pub const NEXT_AT: u64 = 24;
pub const MIN_TXN_AT: u64 = 40;
/// `catalog::pack(1)` once a record of the block points to an extent
/// (see `extent`), 0 before: recovery reads the directories of such
/// blocks only, to list the extents their versions own.
pub const EXTENTS_AT: u64 = 48;
const RESERVED_AT: usize = 56;
const CAPACITY_AT: usize = 32;
const BLOCK_SIZE_AT: usize = 36;

/// The header of a new block of `def`'s region `worker`.
pub fn header(def: &TableDef, worker: usize, seq: u64, min_txn: u64) -> [u8; 64] {
    let mut h = [0u8; 64];
    put(&mut h, 0, &BLOCK_MAGIC.to_le_bytes());
    put(&mut h, TABLE_AT, &def.id.to_le_bytes());
    put(&mut h, WORKER_AT, &(worker as u32).to_le_bytes());
    put(&mut h, SEQ_AT, &seq.to_le_bytes());
    put(&mut h, CAPACITY_AT, &def.slots_per_block.to_le_bytes());
    put(&mut h, BLOCK_SIZE_AT, &def.block_size.to_le_bytes());
    let crc = header_crc(&h);
    put(
        &mut h,
        MIN_TXN_AT as usize,
        &catalog::pack(min_txn).to_le_bytes(),
    );
    put(&mut h, CRC_AT, &crc.to_le_bytes());
    h
}

/// Checks the header of block `seq` of `def`'s region `worker` at
/// `offset`; returns (next block offset, min txn).
pub fn validate(
    medium: &Medium,
    def: &TableDef,
    offset: u64,
    worker: usize,
    seq: u64,
) -> Result<(u64, u64)> {
    let bad = |why: &str| {
        Error::Corrupt(format!(
            "table {} region {worker} block {seq} at {offset}: {why}",
            def.id
        ))
    };
    if !in_data_area(medium, offset, def.block_size as u64) {
        return Err(bad("offset outside the data area"));
    }
    let mut h = [0u8; 64];
    medium.read_bytes(offset, &mut h);
    let min_txn = catalog::unpack_checked(u64_at(&h, MIN_TXN_AT as usize))
        .ok_or_else(|| bad("min txn fails its check"))?;
    let expected = header(def, worker, seq, min_txn);
    let same = h.get(..NEXT_AT as usize) == expected.get(..NEXT_AT as usize)
        && h.get(CAPACITY_AT..EXTENTS_AT as usize)
            == expected.get(CAPACITY_AT..EXTENTS_AT as usize)
        && h.get(RESERVED_AT..) == expected.get(RESERVED_AT..);
    if !same {
        return Err(bad("header does not match (checksum, owner or sequence)"));
    }
    if !matches!(u64_at(&h, EXTENTS_AT as usize), 0) && holds_extents(medium, offset).is_none() {
        return Err(bad("extents word fails its check"));
    }
    let next = catalog::unpack_checked(u64_at(&h, NEXT_AT as usize))
        .ok_or_else(|| bad("next-block link fails its check"))?;
    Ok((next, min_txn))
}

/// The sequence number a block at `offset` claims, if the offset can hold
/// a block at all (to be confirmed by `validate`).
pub fn claimed_seq(medium: &Medium, def: &TableDef, offset: u64) -> Option<u64> {
    in_data_area(medium, offset, def.block_size as u64).then(|| medium.load(offset + SEQ_AT as u64))
}

/// Links block `next` (0 = none) after the block at `block`; the caller
/// fences.
pub fn set_next(medium: &Medium, block: u64, next: u64) {
    medium.store(block + NEXT_AT, catalog::pack(next));
    medium.persist(block + NEXT_AT, 8);
}

/// Marks the block at `block` as holding a record that points to an
/// extent; the caller fences.
pub fn mark_holds_extents(medium: &Medium, block: u64) {
    if medium.load(block + EXTENTS_AT) == 0 {
        medium.store(block + EXTENTS_AT, catalog::pack(1));
        medium.persist(block + EXTENTS_AT, 8);
    }
}

/// Whether a record of the block at `block` may point to an extent;
/// `None` if the word is neither 0 nor the packed 1.
pub fn holds_extents(medium: &Medium, block: u64) -> Option<bool> {
    match medium.load(block + EXTENTS_AT) {
        0 => Some(false),
        word => (catalog::unpack_checked(word) == Some(1)).then_some(true),
    }
}

/// The block linked after the block at `block` (0 = none); `None` if the
/// link fails its check.
pub fn next_of(medium: &Medium, block: u64) -> Option<u64> {
    catalog::unpack_checked(medium.load(block + NEXT_AT))
}

/// Whether a whole block of `size` bytes at `offset` lies, aligned, in the
/// data area.
pub fn in_data_area(medium: &Medium, offset: u64, size: u64) -> bool {
    offset >= catalog::DATA_START
        && offset.is_multiple_of(BLOCK_ALIGN)
        && medium.contains(offset, size)
}

/// crc32c of the fields fixed at allocation: 0..12 ++ 16..24 ++ 32..40.
fn header_crc(h: &[u8; 64]) -> u32 {
    let crc = crc32c::crc32c(h.get(0..CRC_AT).unwrap_or_default());
    let crc = crc32c::crc32c_append(crc, h.get(SEQ_AT..NEXT_AT as usize).unwrap_or_default());
    crc32c::crc32c_append(
        crc,
        h.get(CAPACITY_AT..MIN_TXN_AT as usize).unwrap_or_default(),
    )
}

fn put(bytes: &mut [u8], at: usize, field: &[u8]) {
    if let Some(target) = bytes.get_mut(at..at + field.len()) {
        target.copy_from_slice(field);
    }
}

fn u64_at(bytes: &[u8], at: usize) -> u64 {
    let field = bytes.get(at..at + 8).and_then(|s| s.try_into().ok());
    u64::from_le_bytes(field.unwrap_or_default())
}
