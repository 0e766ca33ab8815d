//! The superblock (offset 0, first 64 bytes):
//! ```text
//! 0   [u8; 8]  magic "REBOUND\0" (written last, behind its own fence)
//! 8   u32      format version (FORMAT_VERSION)
//! 12  u32      crc32c of bytes 0..64 with this field zero
//! 16  u32      MAX_WORKERS      20  u32  MAX_TABLES
//! 24  u64      LCTT offset      32  u64  catalog offset
//! 40  u64      data start       48  u64  creation time (unix seconds)
//! 56  u64      reserved
//! ```
//! Nothing in it decides anything before its checksum and geometry have
//! been checked.
#![deny(clippy::indexing_slicing, clippy::unwrap_used)]

use super::bytes::{put, u32_at, u64_at};
use super::{
    CATALOG_OFFSET, DATA_START, FORMAT_VERSION, LCTT_OFFSET, MAGIC, MAX_TABLES, MAX_WORKERS,
};
use crate::error::{Error, Result};
use crate::medium::Medium;

const SIZE: usize = 64;
const VERSION_AT: usize = 8;
const CRC_AT: usize = 12;

/// Writes a fresh superblock and makes it durable. The medium must already
/// be at least `DATA_START` bytes and zero. The magic word is written last,
/// behind its own fence, so a superblock with magic is always complete.
pub fn format(medium: &Medium, now_secs: u64) -> Result<()> {
    let mut sb = [0u8; SIZE];
    put(&mut sb, 0, &MAGIC);
    put(&mut sb, VERSION_AT, &FORMAT_VERSION.to_le_bytes());
    put(&mut sb, 16, &(MAX_WORKERS as u32).to_le_bytes());
    put(&mut sb, 20, &(MAX_TABLES as u32).to_le_bytes());
    put(&mut sb, 24, &LCTT_OFFSET.to_le_bytes());
    put(&mut sb, 32, &CATALOG_OFFSET.to_le_bytes());
    put(&mut sb, 40, &DATA_START.to_le_bytes());
    put(&mut sb, 48, &now_secs.to_le_bytes());
    let crc = crc32c::crc32c(&sb);
    put(&mut sb, CRC_AT, &crc.to_le_bytes());
    let (magic, rest) = sb.split_at(8);
    medium.write_bytes(8, rest);
    medium.persist_now(8, 56)?;
    medium.write_bytes(0, magic);
    medium.persist_now(0, 8)
}

/// True when the medium never finished `format` (no magic word yet).
pub fn is_unformatted(medium: &Medium) -> bool {
    medium.len() < 8 || medium.load(0) == 0
}

/// Checks that the medium holds a superblock this build understands.
pub fn validate_superblock(medium: &Medium) -> Result<()> {
    if medium.len() < SIZE as u64 {
        return Err(Error::NotADatabase(
            "file is too short for a superblock".into(),
        ));
    }
    let mut sb = [0u8; SIZE];
    medium.read_bytes(0, &mut sb);
    if sb.get(0..8) != Some(&MAGIC[..]) {
        return Err(Error::NotADatabase("bad magic number".into()));
    }
    let stored_crc = u32_at(&sb, CRC_AT);
    put(&mut sb, CRC_AT, &[0; 4]);
    if crc32c::crc32c(&sb) != stored_crc {
        return Err(Error::Corrupt("superblock checksum mismatch".into()));
    }
    let version = u32_at(&sb, VERSION_AT);
    if version != FORMAT_VERSION {
        return Err(Error::UnsupportedVersion {
            found: version,
            supported: FORMAT_VERSION,
        });
    }
    let geometry_ok = u32_at(&sb, 16) == MAX_WORKERS as u32
        && u32_at(&sb, 20) == MAX_TABLES as u32
        && u64_at(&sb, 24) == LCTT_OFFSET
        && u64_at(&sb, 32) == CATALOG_OFFSET
        && u64_at(&sb, 40) == DATA_START;
    if !geometry_ok {
        return Err(Error::Corrupt(
            "superblock geometry does not match this format".into(),
        ));
    }
    if !super::holds_metadata(medium) {
        return Err(Error::Corrupt(format!(
            "file truncated to {} bytes",
            medium.len()
        )));
    }
    Ok(())
}
