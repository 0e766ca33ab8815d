//! Secondary index definitions and their workload statistics.
//!
//! # Definitions: in the table descriptor, bytes 128..1024
//! `MAX_INDEXES_PER_TABLE` slots of 112 bytes; slot `n` of table `t` is at
//! `CATALOG_OFFSET + 2048·t + 128 + 112·n`:
//! ```text
//! 0    u64   state: 0 = free, INDEX_CREATED (written last, after the
//!            rest is durable); any other value is damage
//! 8    u32   crc32c of bytes 12..112
//! 12   u8    unique (0 or 1)        13  u8   part count (1..=4)
//! 14   u16   name length (1..=48)
//! 16   4 × 12 bytes, parts: u8 source (1 = primary key, 2 = value),
//!            3 bytes zero, u32 first byte, u32 length (≥ 1)
//! 64   [u8; 48] name (UTF-8, zero padded)
//! ```
//! A database written before secondary indexes existed has zeros there,
//! which reads as "no indexes": no format change was needed.
//!
//! # Statistics ring: superblock area, bytes 1024..4096
//! `STATS_SLOTS` records of 64 bytes, written round-robin by maintenance
//! (about once a second) and read once at open. They are hints for the
//! order in which secondary indexes are rebuilt after a crash, so they
//! are written back without a fence: a torn or lost record fails its
//! checksum or is older, and an index without a record has no history.
//! ```text
//! 0    u64   sequence number (0 = empty slot); the newest valid record
//!            of an index wins
//! 8    u32   table id               12  u32  index number in the table
//! 16   u64   statements that wanted the index in the window
//! 24   u64   estimated nanoseconds the index saved them in the window
//! 32   u64   window length in milliseconds
//! 40   [u8; 20] zero
//! 60   u32   crc32c of bytes 0..60
//! ```
#![deny(clippy::indexing_slicing, clippy::unwrap_used)]

use super::bytes::{put, u32_at, u64_at};
use super::{CATALOG_OFFSET, DESCRIPTOR_SIZE};
use crate::error::{Error, Result};
use crate::medium::Medium;

/// State word of a created index slot ("INDEX\0" + 0xA5 0x5A).
pub const INDEX_CREATED: u64 = u64::from_le_bytes(*b"INDEX\0\xA5\x5A");
pub const MAX_INDEXES_PER_TABLE: usize = 8;
pub const MAX_INDEX_NAME_LEN: usize = 48;
pub const MAX_KEY_PARTS: usize = 4;
const SLOTS_AT: u64 = 128;
const SLOT_SIZE: usize = 112;
const CHECKED: std::ops::Range<usize> = 12..SLOT_SIZE;
const PARTS_AT: usize = 16;
const PART_SIZE: usize = 12;
const NAME_AT: usize = 64;

pub const STATS_OFFSET: u64 = 1024;
pub const STATS_SLOTS: usize = 48;
const STATS_RECORD: usize = 64;

/// Where a part of a secondary key comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    PrimaryKey,
    Value,
}

/// `len` bytes starting at `start` of the primary key or of the value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyPart {
    pub source: Source,
    pub start: u32,
    pub len: u32,
}

/// A secondary index's definition as stored in the catalog.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexDef {
    pub table: u32,
    pub number: u32,
    pub name: String,
    pub unique: bool,
    pub parts: Vec<KeyPart>,
}

impl IndexDef {
    /// Length of every secondary key of this index.
    pub fn key_len(&self) -> usize {
        self.parts.iter().map(|p| p.len as usize).sum()
    }
}

fn slot_offset(table: u32, number: u32) -> u64 {
    CATALOG_OFFSET + DESCRIPTOR_SIZE * table as u64 + SLOTS_AT + (SLOT_SIZE as u64) * number as u64
}

/// Persists a new index definition; durable when this returns.
pub fn create_index(medium: &Medium, def: &IndexDef) -> Result<()> {
    let at = slot_offset(def.table, def.number);
    let mut slot = [0u8; SLOT_SIZE];
    put(
        &mut slot,
        12,
        &[u8::from(def.unique), def.parts.len() as u8],
    );
    put(&mut slot, 14, &(def.name.len() as u16).to_le_bytes());
    for (i, part) in def.parts.iter().enumerate() {
        let base = PARTS_AT + PART_SIZE * i;
        let source = match part.source {
            Source::PrimaryKey => 1u8,
            Source::Value => 2u8,
        };
        put(&mut slot, base, &[source]);
        put(&mut slot, base + 4, &part.start.to_le_bytes());
        put(&mut slot, base + 8, &part.len.to_le_bytes());
    }
    put(&mut slot, NAME_AT, def.name.as_bytes());
    let crc = crc32c::crc32c(slot.get(CHECKED).unwrap_or_default());
    put(&mut slot, 8, &crc.to_le_bytes());
    medium.write_bytes(at, &slot);
    medium.persist_now(at, SLOT_SIZE as u64)?;
    medium.store(at, INDEX_CREATED);
    medium.persist_now(at, 8)
}

/// The created indexes of `table`, validated.
pub fn read_indexes(medium: &Medium, table: u32) -> Result<Vec<IndexDef>> {
    let mut indexes = Vec::new();
    for number in 0..MAX_INDEXES_PER_TABLE as u32 {
        match medium.load(slot_offset(table, number)) {
            0 => continue,
            INDEX_CREATED => indexes.push(read_slot(medium, table, number)?),
            other => {
                return Err(Error::Corrupt(format!(
                    "index slot {number} of table {table} has state {other:#x}"
                )))
            }
        }
    }
    Ok(indexes)
}

fn read_slot(medium: &Medium, table: u32, number: u32) -> Result<IndexDef> {
    let damaged =
        |what: &str| Error::Corrupt(format!("index slot {number} of table {table}: {what}"));
    let mut slot = [0u8; SLOT_SIZE];
    medium.read_bytes(slot_offset(table, number), &mut slot);
    let crc = crc32c::crc32c(slot.get(CHECKED).unwrap_or_default());
    if crc != u32_at(&slot, 8) {
        return Err(damaged("fails its checksum"));
    }
    let head = slot.get(12..16).unwrap_or_default();
    let (unique, count, name_len) = match head {
        [u, c, n0, n1] => (*u, *c as usize, u16::from_le_bytes([*n0, *n1]) as usize),
        _ => return Err(damaged("is truncated")),
    };
    if unique > 1 || !(1..=MAX_KEY_PARTS).contains(&count) {
        return Err(damaged("has an impossible header"));
    }
    let parts = (0..count)
        .map(|i| read_part(&slot, PARTS_AT + PART_SIZE * i))
        .collect::<Option<Vec<_>>>()
        .ok_or_else(|| damaged("has an impossible key part"))?;
    let name = (1..=MAX_INDEX_NAME_LEN)
        .contains(&name_len)
        .then(|| slot.get(NAME_AT..NAME_AT + name_len))
        .flatten()
        .and_then(|bytes| std::str::from_utf8(bytes).ok())
        .ok_or_else(|| damaged("has a bad name"))?;
    Ok(IndexDef {
        table,
        number,
        name: name.to_owned(),
        unique: unique == 1,
        parts,
    })
}

fn read_part(slot: &[u8], at: usize) -> Option<KeyPart> {
    let source = match slot.get(at)? {
        1 => Source::PrimaryKey,
        2 => Source::Value,
        _ => return None,
    };
    let (start, len) = (u32_at(slot, at + 4), u32_at(slot, at + 8));
    (len >= 1 && start.checked_add(len).is_some()).then_some(KeyPart { source, start, len })
}

/// One index's workload in a window before it was recorded.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UsageRecord {
    pub table: u32,
    pub number: u32,
    pub statements: u64,
    pub saved_ns: u64,
    pub window_ms: u64,
}

fn stats_slot(slot: usize) -> u64 {
    STATS_OFFSET + (STATS_RECORD * slot) as u64
}

/// Writes `record` with sequence `seq` into ring slot `seq % STATS_SLOTS`
/// and writes it back without a fence (see the module notes).
pub fn write_usage(medium: &Medium, seq: u64, record: &UsageRecord) {
    let mut bytes = [0u8; STATS_RECORD];
    put(&mut bytes, 0, &seq.to_le_bytes());
    put(&mut bytes, 8, &record.table.to_le_bytes());
    put(&mut bytes, 12, &record.number.to_le_bytes());
    put(&mut bytes, 16, &record.statements.to_le_bytes());
    put(&mut bytes, 24, &record.saved_ns.to_le_bytes());
    put(&mut bytes, 32, &record.window_ms.to_le_bytes());
    let crc = crc32c::crc32c(bytes.get(..60).unwrap_or_default());
    put(&mut bytes, 60, &crc.to_le_bytes());
    let at = stats_slot(seq as usize % STATS_SLOTS);
    medium.write_bytes(at, &bytes);
    medium.persist(at, STATS_RECORD as u64);
}

/// The newest valid record of every index in the ring, and the highest
/// sequence number seen (the next record takes the one after it).
pub fn read_usage(medium: &Medium) -> (Vec<UsageRecord>, u64) {
    let mut newest: Vec<(u64, UsageRecord)> = Vec::new();
    let mut top = 0;
    for slot in 0..STATS_SLOTS {
        let mut bytes = [0u8; STATS_RECORD];
        medium.read_bytes(stats_slot(slot), &mut bytes);
        let seq = u64_at(&bytes, 0);
        let crc = crc32c::crc32c(bytes.get(..60).unwrap_or_default());
        if seq == 0 || crc != u32_at(&bytes, 60) {
            continue;
        }
        top = top.max(seq);
        let record = UsageRecord {
            table: u32_at(&bytes, 8),
            number: u32_at(&bytes, 12),
            statements: u64_at(&bytes, 16),
            saved_ns: u64_at(&bytes, 24),
            window_ms: u64_at(&bytes, 32),
        };
        let same = |r: &UsageRecord| r.table == record.table && r.number == record.number;
        match newest.iter_mut().find(|(_, r)| same(r)) {
            Some(entry) if entry.0 < seq => *entry = (seq, record),
            Some(_) => {}
            None => newest.push((seq, record)),
        }
    }
    (newest.into_iter().map(|(_, r)| r).collect(), top)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing)]
mod tests {
    use super::*;
    use crate::catalog::DATA_START;

    fn medium() -> Medium {
        Medium::volatile(1 << 24, DATA_START).expect("a volatile medium")
    }

    fn definition(number: u32) -> IndexDef {
        IndexDef {
            table: 3,
            number,
            name: format!("by_field_{number}"),
            unique: number.is_multiple_of(2),
            parts: vec![
                KeyPart {
                    source: Source::PrimaryKey,
                    start: 0,
                    len: 4,
                },
                KeyPart {
                    source: Source::Value,
                    start: 17,
                    len: 9,
                },
            ],
        }
    }

    #[test]
    fn definitions_round_trip_and_damage_is_reported() {
        let medium = medium();
        assert!(read_indexes(&medium, 3).unwrap().is_empty());
        for number in [0, 1, 7] {
            create_index(&medium, &definition(number)).unwrap();
        }
        let read = read_indexes(&medium, 3).unwrap();
        assert_eq!(read, vec![definition(0), definition(1), definition(7)]);
        assert!(read_indexes(&medium, 2).unwrap().is_empty());
        // Any flipped bit of a slot is `Corrupt`, never another definition.
        let at = slot_offset(3, 1);
        for bit in (0..SLOT_SIZE * 8).step_by(7) {
            let word = at + (bit / 64 * 8) as u64;
            let original = medium.load(word);
            medium.store(word, original ^ (1 << (bit % 64)));
            assert!(
                matches!(read_indexes(&medium, 3), Err(Error::Corrupt(_))),
                "bit {bit} flipped went unnoticed"
            );
            medium.store(word, original);
        }
        assert_eq!(read_indexes(&medium, 3).unwrap().len(), 3);
    }

    #[test]
    fn the_newest_valid_usage_record_wins() {
        let medium = medium();
        assert_eq!(read_usage(&medium), (Vec::new(), 0));
        let record = |number, statements| UsageRecord {
            table: 1,
            number,
            statements,
            saved_ns: statements * 10,
            window_ms: 7000,
        };
        write_usage(&medium, 1, &record(0, 5));
        write_usage(&medium, 2, &record(1, 6));
        write_usage(&medium, 3, &record(0, 7));
        // A torn newer record of index 1 is ignored.
        write_usage(&medium, 4, &record(1, 8));
        let torn = stats_slot(4) + 16;
        medium.store(torn, medium.load(torn) ^ 1);
        let (mut found, top) = read_usage(&medium);
        found.sort_by_key(|r| r.number);
        assert_eq!(found, vec![record(0, 7), record(1, 6)]);
        assert_eq!(top, 3);
        // The ring wraps: slot 4 + STATS_SLOTS replaces the torn one.
        write_usage(&medium, 4 + STATS_SLOTS as u64, &record(1, 9));
        let (mut found, _) = read_usage(&medium);
        found.sort_by_key(|r| r.number);
        assert_eq!(found[1], record(1, 9));
    }
}
