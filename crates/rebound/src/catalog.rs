//! Fixed metadata at the start of the medium: superblock, Last Commit
//! Transaction Table (LCTT) and table catalog.
//!
//! # Layout (all integers little-endian)
//!
//! ```text
//! offset   size    what
//! 0        4096    superblock
//! 4096     8192    LCTT: MAX_WORKERS entries, one 64-byte line each
//! 12288    524288  catalog: MAX_TABLES descriptors of 2048 bytes
//! 536576   ...     data blocks (see heap), allocated in BLOCK_ALIGN units
//! ```
//!
//! Superblock (first 64 bytes, rest zero):
//! ```text
//! 0   [u8; 8]  magic "REBOUND\0"
//! 8   u32      format version (FORMAT_VERSION)
//! 12  u32      crc32c of bytes 0..64 with this field zero
//! 16  u32      MAX_WORKERS      20  u32  MAX_TABLES
//! 24  u64      LCTT offset      32  u64  catalog offset
//! 40  u64      data start       48  u64  creation time (unix seconds)
//! 56  u64      reserved
//! ```
//!
//! Txn-id lease (superblock area, offset 64): one word `(check8 << 56) | n`.
//! No transaction id ≥ n has been handed out; before handing one out the
//! engine raises the lease and makes it durable. So after any crash, every id
//! found anywhere in the medium is below the lease, and recovery restarts the
//! id counter at the lease.
//!
//! Checkpoint root (superblock area, offset 128): one word `(check8 << 56) |
//! offset` of the newest complete index checkpoint, 0 = none. Switching it
//! with one 8-byte store is what makes a checkpoint complete.
//!
//! GC mark (superblock area, offset 192): `pack(1)` once GC has freed a
//! block, 0 before. Written and fenced before the first block is freed.
//!
//! Workers: `0..63` are sessions, 63 is GC (its region is FIR's gc_region),
//! `64 + w` is the long-transaction region of session worker `w`, with its
//! own LCTT entry (FIR 4.2.2).
//!
//! LCTT entry `w` (at 4096 + 64·w): one word `(check8 << 56) | txn_id`,
//! where `check8` is the low byte of crc32c(txn_id); 0 means "no commit yet".
//! It is written with one 8-byte store, so it is crash-atomic, and the check
//! byte turns a flipped bit into a `Corrupt` error instead of silently moving
//! the commit point. The rest of the line is zero.
//!
//! Table descriptor `t` (at 12288 + 2048·t):
//! ```text
//! 0     u64   state: 0 = free, `TABLE_CREATED` = created (written last,
//!             after the rest is durable); any other value is damage (the
//!             two differ in many bits, so no flip turns one into the other)
//! 8     u32   crc32c of bytes 16..128
//! 12    u32   table id (= t)
//! 16    u32   max key length     20  u32  max value length
//! 24    u32   slot size          28  u32  slots per block
//! 32    u32   block size         36  u32  name length
//! 40    [u8; 64] name (UTF-8, zero padded)
//! 104   24 bytes reserved
//! 1024  [u64; MAX_WORKERS] region heads: medium offset of each region's
//!       first block packed with a check byte (`pack`), 0 = no block yet;
//!       written with one crash-atomic store (GC rewrites it when it
//!       unlinks the first block)
//! ```
//!
//! Invariants: a descriptor whose state is `TABLE_CREATED` has a valid
//! checksum and limits this build accepts (else the file is corrupt); its
//! name is unique; a region head is 0 or the packed offset of a block
//! whose header names this table and region.
//!
//! Every word outside a checksum that decides something (lease, root, GC
//! mark, LCTT entries, region heads, table states) either carries a check
//! byte or takes one of two values far apart, so one flipped bit is
//! reported as `Corrupt` and never read as another valid value.

use crate::error::{Error, Result};
use crate::medium::Medium;

pub const MAGIC: [u8; 8] = *b"REBOUND\0";
pub const FORMAT_VERSION: u32 = 3;
/// State word of a created table descriptor ("TABLE\0" + 0x5AA5).
pub const TABLE_CREATED: u64 = u64::from_le_bytes(*b"TABLE\0\xA5\x5A");
/// Regions per table (and LCTT entries): sessions, GC, long transactions.
pub const MAX_WORKERS: usize = 128;
/// Workers `0..MAX_SESSIONS` belong to sessions.
pub const MAX_SESSIONS: usize = 63;
/// The worker whose region receives the versions GC relocates (FIR's
/// gc_region); its transactions are GC's system transactions.
pub const GC_WORKER: usize = 63;
/// Worker `w`'s long-transaction region is `LONG_REGIONS + w`.
pub const LONG_REGIONS: usize = 64;
pub const MAX_TABLES: usize = 256;
pub const MAX_NAME_LEN: usize = 64;
pub const SUPERBLOCK_SIZE: u64 = 4096;
pub const LCTT_OFFSET: u64 = SUPERBLOCK_SIZE;
pub const LCTT_ENTRY: u64 = 64;
pub const CATALOG_OFFSET: u64 = LCTT_OFFSET + LCTT_ENTRY * MAX_WORKERS as u64;
pub const DESCRIPTOR_SIZE: u64 = 2048;
pub const REGION_HEADS_AT: u64 = 1024;
pub const DATA_START: u64 = CATALOG_OFFSET + DESCRIPTOR_SIZE * MAX_TABLES as u64;
/// Largest transaction id the LCTT packing can hold.
pub const MAX_TXN_ID: u64 = (1 << 56) - 1;

/// A table's definition as stored in the catalog.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableDef {
    pub id: u32,
    pub name: String,
    pub max_key_len: u32,
    pub max_value_len: u32,
    pub slot_size: u32,
    pub slots_per_block: u32,
    pub block_size: u32,
}

/// Writes a fresh superblock and makes it durable. The medium must already
/// be at least `DATA_START` bytes and zero. The magic word is written last,
/// behind its own fence, so a superblock with magic is always complete.
pub fn format(medium: &Medium, now_secs: u64) -> Result<()> {
    let mut sb = [0u8; 64];
    sb[0..8].copy_from_slice(&MAGIC);
    sb[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
    sb[16..20].copy_from_slice(&(MAX_WORKERS as u32).to_le_bytes());
    sb[20..24].copy_from_slice(&(MAX_TABLES as u32).to_le_bytes());
    sb[24..32].copy_from_slice(&LCTT_OFFSET.to_le_bytes());
    sb[32..40].copy_from_slice(&CATALOG_OFFSET.to_le_bytes());
    sb[40..48].copy_from_slice(&DATA_START.to_le_bytes());
    sb[48..56].copy_from_slice(&now_secs.to_le_bytes());
    let crc = crc32c::crc32c(&sb);
    sb[12..16].copy_from_slice(&crc.to_le_bytes());
    medium.write_bytes(8, &sb[8..]);
    medium.persist_now(8, 56)?;
    medium.write_bytes(0, &sb[..8]);
    medium.persist_now(0, 8)
}

/// True when the medium never finished `format` (no magic word yet).
pub fn is_unformatted(medium: &Medium) -> bool {
    medium.len() < 8 || medium.load(0) == 0
}

/// Checks that the medium holds a superblock this build understands.
pub fn validate_superblock(medium: &Medium) -> Result<()> {
    if medium.len() < 64 {
        return Err(Error::NotADatabase(
            "file is too short for a superblock".into(),
        ));
    }
    let mut sb = [0u8; 64];
    medium.read_bytes(0, &mut sb);
    if sb[0..8] != MAGIC {
        return Err(Error::NotADatabase("bad magic number".into()));
    }
    let stored_crc = u32::from_le_bytes(sb[12..16].try_into().unwrap());
    sb[12..16].fill(0);
    if crc32c::crc32c(&sb) != stored_crc {
        return Err(Error::Corrupt("superblock checksum mismatch".into()));
    }
    let version = u32::from_le_bytes(sb[8..12].try_into().unwrap());
    if version != FORMAT_VERSION {
        return Err(Error::UnsupportedVersion {
            found: version,
            supported: FORMAT_VERSION,
        });
    }
    let geometry_ok = read_u32(&sb, 16) == MAX_WORKERS as u32
        && read_u32(&sb, 20) == MAX_TABLES as u32
        && read_u64(&sb, 24) == LCTT_OFFSET
        && read_u64(&sb, 32) == CATALOG_OFFSET
        && read_u64(&sb, 40) == DATA_START;
    if !geometry_ok {
        return Err(Error::Corrupt(
            "superblock geometry does not match this format".into(),
        ));
    }
    if medium.len() < DATA_START {
        return Err(Error::Corrupt(format!(
            "file truncated to {} bytes",
            medium.len()
        )));
    }
    Ok(())
}

pub const LEASE_OFFSET: u64 = 64;

/// The durable txn-id lease; 1 for a fresh file.
pub fn txn_lease(medium: &Medium) -> Result<u64> {
    unpack_checked(medium.load(LEASE_OFFSET))
        .ok_or_else(|| Error::Corrupt("txn-id lease fails its check".into()))
}

/// Raises the lease to `n` and makes it durable.
pub fn set_txn_lease(medium: &Medium, n: u64) -> Result<()> {
    medium.store(LEASE_OFFSET, pack(n));
    medium.persist_now(LEASE_OFFSET, 8)
}

/// A 56-bit number with a check byte, stored with one crash-atomic store.
pub fn pack(n: u64) -> u64 {
    debug_assert!(n <= MAX_TXN_ID);
    if n == 0 {
        0
    } else {
        (check8(n) << 56) | n
    }
}

/// The number in a `pack`ed word, `None` if its check byte is wrong.
pub fn unpack_checked(word: u64) -> Option<u64> {
    let n = word & MAX_TXN_ID;
    (word == 0 || word >> 56 == check8(n)).then_some(n)
}

pub const CHECKPOINT_ROOT_OFFSET: u64 = 128;

/// Offset of the newest complete checkpoint, 0 if none.
pub fn checkpoint_root(medium: &Medium) -> Result<u64> {
    unpack_checked(medium.load(CHECKPOINT_ROOT_OFFSET))
        .ok_or_else(|| Error::Corrupt("checkpoint root fails its check".into()))
}

/// Points the root at a complete, durable checkpoint and makes that durable.
pub fn set_checkpoint_root(medium: &Medium, offset: u64) -> Result<()> {
    medium.store(CHECKPOINT_ROOT_OFFSET, pack(offset));
    medium.persist_now(CHECKPOINT_ROOT_OFFSET, 8)
}

fn lctt_entry(worker: usize) -> u64 {
    LCTT_OFFSET + LCTT_ENTRY * worker as u64
}

fn check8(txn: u64) -> u64 {
    (crc32c::crc32c(&txn.to_le_bytes()) & 0xFF) as u64
}

/// Records `txn` as worker `worker`'s last committed transaction and starts
/// writing it back; the caller fences.
pub fn set_last_commit(medium: &Medium, worker: usize, txn: u64) {
    medium.store(lctt_entry(worker), pack(txn));
    medium.persist(lctt_entry(worker), 8);
}

/// The last committed transaction of `worker`, 0 if none.
pub fn last_commit(medium: &Medium, worker: usize) -> Result<u64> {
    unpack_checked(medium.load(lctt_entry(worker)))
        .ok_or_else(|| Error::Corrupt(format!("LCTT entry of worker {worker} fails its check")))
}

fn descriptor(table: u32) -> u64 {
    CATALOG_OFFSET + DESCRIPTOR_SIZE * table as u64
}

/// Persists a new table definition; durable when this returns.
pub fn create_table(medium: &Medium, def: &TableDef) -> Result<()> {
    let at = descriptor(def.id);
    let mut body = [0u8; 128];
    body[12..16].copy_from_slice(&def.id.to_le_bytes());
    body[16..20].copy_from_slice(&def.max_key_len.to_le_bytes());
    body[20..24].copy_from_slice(&def.max_value_len.to_le_bytes());
    body[24..28].copy_from_slice(&def.slot_size.to_le_bytes());
    body[28..32].copy_from_slice(&def.slots_per_block.to_le_bytes());
    body[32..36].copy_from_slice(&def.block_size.to_le_bytes());
    body[36..40].copy_from_slice(&(def.name.len() as u32).to_le_bytes());
    body[40..40 + def.name.len()].copy_from_slice(def.name.as_bytes());
    let crc = crc32c::crc32c(&body[16..128]);
    body[8..12].copy_from_slice(&crc.to_le_bytes());
    medium.zero(at, DESCRIPTOR_SIZE);
    medium.write_bytes(at, &body);
    medium.persist_now(at, DESCRIPTOR_SIZE)?;
    medium.store(at, TABLE_CREATED);
    medium.persist_now(at, 8)
}

/// All created tables, validated.
pub fn read_tables(medium: &Medium) -> Result<Vec<TableDef>> {
    let mut tables = Vec::new();
    for id in 0..MAX_TABLES as u32 {
        let at = descriptor(id);
        match medium.load(at) {
            0 => continue,
            TABLE_CREATED => tables.push(read_descriptor(medium, id)?),
            other => {
                return Err(Error::Corrupt(format!(
                    "table descriptor {id} has state {other}"
                )))
            }
        }
    }
    Ok(tables)
}

fn read_descriptor(medium: &Medium, id: u32) -> Result<TableDef> {
    let mut body = [0u8; 128];
    medium.read_bytes(descriptor(id), &mut body);
    let stored_crc = read_u32(&body, 8);
    if crc32c::crc32c(&body[16..128]) != stored_crc || read_u32(&body, 12) != id {
        return Err(Error::Corrupt(format!(
            "table descriptor {id} fails its checksum"
        )));
    }
    let name_len = read_u32(&body, 36) as usize;
    let name = (name_len <= MAX_NAME_LEN)
        .then(|| std::str::from_utf8(&body[40..40 + name_len]).ok())
        .flatten()
        .ok_or_else(|| Error::Corrupt(format!("table descriptor {id} has a bad name")))?;
    Ok(TableDef {
        id,
        name: name.to_owned(),
        max_key_len: read_u32(&body, 16),
        max_value_len: read_u32(&body, 20),
        slot_size: read_u32(&body, 24),
        slots_per_block: read_u32(&body, 28),
        block_size: read_u32(&body, 32),
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

/// The long-transaction region (and LCTT entry) of a session's worker.
pub fn long_region(worker: usize) -> usize {
    LONG_REGIONS + worker
}

pub fn is_long_region(region: usize) -> bool {
    region >= LONG_REGIONS
}

pub const GC_FREED_OFFSET: u64 = 192;

/// Records, before GC frees its first block, that the block chains may
/// skip collected blocks whose tombstones mattered: the full-scan design
/// then refuses the file (it could resurrect deleted keys).
pub fn set_gc_freed(medium: &Medium) -> Result<()> {
    if medium.load(GC_FREED_OFFSET) == pack(1) {
        return Ok(());
    }
    medium.store(GC_FREED_OFFSET, pack(1));
    medium.persist_now(GC_FREED_OFFSET, 8)
}

/// Whether GC ever freed a block of this database.
pub fn gc_freed(medium: &Medium) -> Result<bool> {
    match unpack_checked(medium.load(GC_FREED_OFFSET)) {
        Some(0) => Ok(false),
        Some(1) => Ok(true),
        _ => Err(Error::Corrupt("GC mark fails its check".into())),
    }
}

/// Links a region's first block; the caller fences before relying on it.
pub fn set_region_head(medium: &Medium, table: u32, worker: usize, block: u64) {
    medium.store(region_head_at(table, worker), pack(block));
    medium.persist(region_head_at(table, worker), 8);
}

fn read_u32(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap())
}

fn read_u64(bytes: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap())
}
