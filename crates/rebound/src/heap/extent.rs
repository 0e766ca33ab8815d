//! Values out of line: a version whose record would take more than
//! `INLINE_RECORD_MAX` bytes keeps its key in a record of its block as
//! usual, but its value goes to an *extent* of its own, and the record
//! holds a pointer to it (flag bit 1 of the record). Small rows never pay
//! for large ones: blocks stay sized for records up to a quarter of a
//! default block, and a block with no extents is read as before.
//!
//! # Extent (at a `BLOCK_ALIGN`-aligned offset, `extent_len(value)` bytes)
//! ```text
//! 0   u32  magic "EXT1"          4   u32  table id
//! 8   u32  region                12  u32  slot
//! 16  u64  block sequence number of the owning version
//! 24  u64  txn id of the owning version's writer
//! 32  u64  value length          40  u32  crc32c of the value
//! 44  u32  crc32c of bytes 0..44
//! 48  16 bytes zero
//! 64  the value, then zero or stale bytes up to the extent's end
//! ```
//! The header names its owner, one version: an extent is never shared.
//! GC relocates a version by writing its value again (a new extent for
//! the copy), so an extent lives exactly as long as the block of its
//! version, and is freed with it.
//!
//! # Pointer (the value bytes of an out-of-line record, 24 bytes)
//! ```text
//! 0   u64  extent offset     8   u64  value length
//! 16  u32  crc32c of the value       20  u32  zero
//! ```
//!
//! # Durability and recovery
//! The extent is written and fenced, and the block's `EXTENTS_AT` word
//! set and fenced, before the record that points to it is written, so a
//! record that recovery finds committed points to a durable extent. Free
//! space is not persisted (see `space`): recovery lists as used every
//! extent owned by a written entry (a committed version or a hole) of a
//! block whose `EXTENTS_AT` word is set, checked against its header. An
//! extent of a transaction a crash cut short is owned by no written entry
//! (recovery clears the tail's entries) and so is free again.
//!
//! Decoding is free of indexing and `unwrap` (denied by lint): a damaged
//! pointer or header is `None`, never a panic, and nothing is sized by a
//! length the table's limit does not bound.
#![deny(clippy::indexing_slicing, clippy::unwrap_used)]

use super::block::in_data_area;
use super::{Addr, BLOCK_ALIGN, DEFAULT_BLOCK_BYTES};
use crate::error::Result;
use crate::medium::Medium;

pub const EXTENT_MAGIC: u32 = u32::from_le_bytes(*b"EXT1");
pub const EXTENT_HEADER: u64 = 64;
/// Bytes of the pointer an out-of-line record holds as its value.
pub const POINTER_BYTES: usize = 24;
/// The largest record kept in a block: a quarter of a default block, so
/// that a block closes with at most that much unused at its end.
pub const INLINE_RECORD_MAX: u64 = DEFAULT_BLOCK_BYTES / 4;
/// Bit of a record's flags that says its value bytes are a pointer.
pub const FLAG_OUT_OF_LINE: u16 = 2;

/// Bytes an extent for a value of `value_len` bytes takes.
pub fn extent_len(value_len: u64) -> u64 {
    (EXTENT_HEADER + value_len).next_multiple_of(BLOCK_ALIGN)
}

/// Where an out-of-line value is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pointer {
    pub offset: u64,
    pub len: u64,
    pub crc: u32,
}

impl Pointer {
    pub fn encode(&self) -> [u8; POINTER_BYTES] {
        let mut bytes = [0u8; POINTER_BYTES];
        put(&mut bytes, 0, &self.offset.to_le_bytes());
        put(&mut bytes, 8, &self.len.to_le_bytes());
        put(&mut bytes, 16, &self.crc.to_le_bytes());
        bytes
    }

    /// `None` unless the bytes have a pointer's length and zero padding.
    pub fn decode(bytes: &[u8]) -> Option<Pointer> {
        if bytes.len() != POINTER_BYTES || u32_at(bytes, 20) != 0 {
            return None;
        }
        Some(Pointer {
            offset: u64_at(bytes, 0),
            len: u64_at(bytes, 8),
            crc: u32_at(bytes, 16),
        })
    }

    /// The extent's place in the medium.
    pub fn range(&self) -> (u64, u64) {
        (self.offset, extent_len(self.len))
    }
}

/// The version an extent belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Owner {
    pub table: u32,
    pub addr: Addr,
    pub txn: u64,
}

fn header(owner: Owner, len: u64, crc: u32) -> [u8; EXTENT_HEADER as usize] {
    let mut h = [0u8; EXTENT_HEADER as usize];
    put(&mut h, 0, &EXTENT_MAGIC.to_le_bytes());
    put(&mut h, 4, &owner.table.to_le_bytes());
    put(&mut h, 8, &(owner.addr.region() as u32).to_le_bytes());
    put(&mut h, 12, &owner.addr.slot().to_le_bytes());
    put(&mut h, 16, &(owner.addr.block() as u64).to_le_bytes());
    put(&mut h, 24, &owner.txn.to_le_bytes());
    put(&mut h, 32, &len.to_le_bytes());
    put(&mut h, 40, &crc.to_le_bytes());
    let header_crc = crc32c::crc32c(h.get(..44).unwrap_or_default());
    put(&mut h, 44, &header_crc.to_le_bytes());
    h
}

/// Writes `value` and its header for `owner` into the extent `pointer`
/// names (allocated by the caller for `extent_len(value.len())` bytes;
/// its crc computed by the caller, once) and makes both durable.
pub fn write(medium: &Medium, pointer: Pointer, owner: Owner, value: &[u8]) -> Result<()> {
    debug_assert_eq!(pointer.len, value.len() as u64);
    // Nobody reads an extent before its pointer is committed: the value
    // goes in as one bulk copy.
    medium.write_unshared(pointer.offset + EXTENT_HEADER, value)?;
    let head = header(owner, pointer.len, pointer.crc);
    medium.write_bytes(pointer.offset, &head);
    medium.persist(pointer.offset, EXTENT_HEADER + pointer.len);
    medium.fence()
}

/// Whether the extent `pointer` names is `owner`'s: in the data area,
/// its header intact and saying so.
pub fn is_owned(medium: &Medium, pointer: Pointer, owner: Owner) -> bool {
    let (offset, len) = pointer.range();
    if !in_data_area(medium, offset, len) {
        return false;
    }
    let mut found = [0u8; EXTENT_HEADER as usize];
    medium.read_bytes(offset, &mut found);
    found == header(owner, pointer.len, pointer.crc)
}

/// Copies `owner`'s value out of the extent `pointer` names into `out`
/// (its earlier contents dropped); checks the value's crc if `verify`.
/// `false` if the extent is not `owner`'s or the value fails its check.
pub fn read(
    medium: &Medium,
    pointer: Pointer,
    owner: Owner,
    verify: bool,
    out: &mut Vec<u8>,
) -> bool {
    if !is_owned(medium, pointer, owner) {
        return false;
    }
    let Ok(len) = usize::try_from(pointer.len) else {
        return false;
    };
    out.resize(len, 0);
    medium.read_at(pointer.offset + EXTENT_HEADER, out);
    !verify || crc32c::crc32c(out) == pointer.crc
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

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    let field = bytes.get(at..at + 4).and_then(|s| s.try_into().ok());
    u32::from_le_bytes(field.unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pointer_round_trips_and_refuses_other_lengths_and_padding() {
        let pointer = Pointer {
            offset: 1 << 20,
            len: 70_000,
            crc: 0xDEAD_BEEF,
        };
        let bytes = pointer.encode();
        assert_eq!(Pointer::decode(&bytes), Some(pointer));
        assert_eq!(Pointer::decode(bytes.get(..20).unwrap_or_default()), None);
        let mut padded = bytes;
        padded[23] = 1;
        assert_eq!(Pointer::decode(&padded), None);
    }
}
