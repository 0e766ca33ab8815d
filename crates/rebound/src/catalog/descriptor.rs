//! Table descriptor `t` (at CATALOG_OFFSET + 2048·t):
//! ```text
//! 0     u64   state: 0 = free, TABLE_CREATED = created (written last,
//!             after the rest is durable), TABLE_DROPPED = dropped (one
//!             atomic store over TABLE_CREATED, the drop's commit point);
//!             any other value is damage
//! 8     u32   crc32c of bytes 16..128
//! 12    u32   table id (= t)
//! 16    u32   max key length     20  u32  max value length
//! 24    u32   largest record     28  u32  directory entries per block
//!             (bytes, see heap)
//! 32    u32   block size         36  u32  name length
//! 40    [u8; 64] name (UTF-8, zero padded)
//! 104   24 bytes reserved
//! 1024  [u64; MAX_WORKERS] region heads, packed with a check byte
//! ```
#![deny(clippy::indexing_slicing, clippy::unwrap_used)]

use super::bytes::{put, u32_at};
use super::words::{pack, unpack_checked};
use super::{
    TableDef, CATALOG_OFFSET, DESCRIPTOR_SIZE, MAX_NAME_LEN, MAX_TABLES, REGION_HEADS_AT,
    TABLE_CREATED, TABLE_DROPPED,
};
use crate::error::{Error, Result};
use crate::medium::Medium;

const BODY: usize = 128;
const CRC_AT: usize = 8;
const ID_AT: usize = 12;
const NAME_LEN_AT: usize = 36;
const NAME_AT: usize = 40;
/// The checksum covers the definition, not the state word or itself.
const CHECKED: std::ops::Range<usize> = 16..BODY;

fn descriptor(table: u32) -> u64 {
    CATALOG_OFFSET + DESCRIPTOR_SIZE * table as u64
}

/// Persists a new table definition; durable when this returns.
pub fn create_table(medium: &Medium, def: &TableDef) -> Result<()> {
    let at = descriptor(def.id);
    let mut body = [0u8; BODY];
    put(&mut body, ID_AT, &def.id.to_le_bytes());
    put(&mut body, 16, &def.max_key_len.to_le_bytes());
    put(&mut body, 20, &def.max_value_len.to_le_bytes());
    put(&mut body, 24, &def.max_record_len.to_le_bytes());
    put(&mut body, 28, &def.slots_per_block.to_le_bytes());
    put(&mut body, 32, &def.block_size.to_le_bytes());
    put(
        &mut body,
        NAME_LEN_AT,
        &(def.name.len() as u32).to_le_bytes(),
    );
    put(&mut body, NAME_AT, def.name.as_bytes());
    let crc = crc32c::crc32c(body.get(CHECKED).unwrap_or_default());
    put(&mut body, CRC_AT, &crc.to_le_bytes());
    medium.zero(at, DESCRIPTOR_SIZE);
    medium.write_bytes(at, &body);
    medium.persist_now(at, DESCRIPTOR_SIZE)?;
    medium.store(at, TABLE_CREATED);
    medium.persist_now(at, 8)
}

/// Marks a created table dropped; durable when this returns. One 8-byte
/// store: after a crash the table is either whole or gone.
pub fn drop_table(medium: &Medium, table: u32) -> Result<()> {
    let at = descriptor(table);
    assert_eq!(
        medium.load(at),
        TABLE_CREATED,
        "only a created table is dropped"
    );
    medium.store(at, TABLE_DROPPED);
    medium.persist_now(at, 8)
}

/// All created and dropped tables, validated, in id order.
pub fn read_tables(medium: &Medium) -> Result<Vec<TableDef>> {
    let mut tables = Vec::new();
    for id in 0..MAX_TABLES as u32 {
        match medium.load(descriptor(id)) {
            0 => continue,
            TABLE_CREATED => tables.push(read_descriptor(medium, id)?),
            TABLE_DROPPED => tables.push(TableDef {
                dropped: true,
                ..read_descriptor(medium, id)?
            }),
            other => {
                return Err(Error::Corrupt(format!(
                    "table descriptor {id} has state {other:#x}"
                )))
            }
        }
    }
    Ok(tables)
}

fn read_descriptor(medium: &Medium, id: u32) -> Result<TableDef> {
    let mut body = [0u8; BODY];
    medium.read_bytes(descriptor(id), &mut body);
    let crc = crc32c::crc32c(body.get(CHECKED).unwrap_or_default());
    if crc != u32_at(&body, CRC_AT) || u32_at(&body, ID_AT) != id {
        return Err(Error::Corrupt(format!(
            "table descriptor {id} fails its checksum"
        )));
    }
    let name_len = u32_at(&body, NAME_LEN_AT) as usize;
    let name = (name_len <= MAX_NAME_LEN)
        .then(|| body.get(NAME_AT..NAME_AT + name_len))
        .flatten()
        .and_then(|bytes| std::str::from_utf8(bytes).ok())
        .ok_or_else(|| Error::Corrupt(format!("table descriptor {id} has a bad name")))?;
    Ok(TableDef {
        id,
        name: name.to_owned(),
        max_key_len: u32_at(&body, 16),
        max_value_len: u32_at(&body, 20),
        max_record_len: u32_at(&body, 24),
        slots_per_block: u32_at(&body, 28),
        block_size: u32_at(&body, 32),
        dropped: false,
    })
}

fn region_head_at(table: u32, worker: usize) -> u64 {
    descriptor(table) + REGION_HEADS_AT + 8 * worker as u64
}

/// Offset of the first block of a region, 0 if it has none.
pub fn region_head(medium: &Medium, table: u32, worker: usize) -> Result<u64> {
    unpack_checked(medium.load(region_head_at(table, worker))).ok_or_else(|| {
        Error::Corrupt(format!(
            "region head of table {table} worker {worker} fails its check"
        ))
    })
}

/// Links a region's first block (0 = none); the caller fences before
/// relying on it.
pub fn set_region_head(medium: &Medium, table: u32, worker: usize, block: u64) {
    medium.store(region_head_at(table, worker), pack(block));
    medium.persist(region_head_at(table, worker), 8);
}
