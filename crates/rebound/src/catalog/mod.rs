//! Fixed metadata at the start of the medium: superblock, Last Commit
//! Transaction Table (LCTT) and table catalog. One file per object:
//! `superblock` (the superblock), `words` (the check-byte words: txn-id
//! lease, checkpoint root, GC mark, LCTT entries), `descriptor` (table
//! descriptors and region heads). Decoding is checked by the compiler for
//! panics: indexing and `unwrap` are denied in these files.
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
//! Superblock: see `superblock`. Table descriptors: see `descriptor`.
//! Secondary index definitions (descriptor bytes 128..1024) and the
//! index statistics ring (superblock area, bytes 1024..4096): see `indexes`.
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
//! Invariants: a descriptor whose state is `TABLE_CREATED` or
//! `TABLE_DROPPED` has a valid checksum and limits this build accepts
//! (else the file is corrupt); the name of a created table is unique among
//! created tables; a region head is 0 or the packed offset of a block
//! whose header names this table and region.
//!
//! Every word outside a checksum that decides something (lease, root, GC
//! mark, LCTT entries, region heads, table states) either carries a check
//! byte or takes one of two values far apart, so one flipped bit is
//! reported as `Corrupt` and never read as another valid value.

use crate::medium::Medium;

mod bytes;
mod descriptor;
mod indexes;
mod superblock;
mod words;

pub use descriptor::{create_table, drop_table, read_tables, region_head, set_region_head};
pub use indexes::{
    create_index, read_indexes, read_usage, write_usage, IndexDef, KeyPart, Source, UsageRecord,
    MAX_INDEXES_PER_TABLE, MAX_INDEX_NAME_LEN, MAX_KEY_PARTS, STATS_SLOTS,
};
pub use superblock::{format, is_unformatted, validate_superblock};
pub use words::{
    checkpoint_root, gc_freed, last_commit, pack, prefetch_last_commit, set_checkpoint_root,
    set_gc_freed, set_last_commit, set_txn_lease, txn_lease, unpack_checked,
};

pub const MAGIC: [u8; 8] = *b"REBOUND\0";
/// 7: 12-byte directory entries in pairs (a record's space follows from
/// the entry before; a seal is flagged in its place), and checkpoint
/// images (`RBCKPT06`) whose entries share key prefixes and store address
/// deltas within their fence group. 6: values out of
/// line in extents of their own (record flag bit 1, a block header's
/// extents word). 5: variable-length versions in slotted blocks. 4 had
/// fixed slots and table descriptors that may be `TABLE_DROPPED`; 3 had
/// no drops.
pub const FORMAT_VERSION: u32 = 7;
/// State word of a created table descriptor ("TABLE\0" + 0xA5 0x5A).
pub const TABLE_CREATED: u64 = u64::from_le_bytes(*b"TABLE\0\xA5\x5A");
/// State word of a dropped table's descriptor ("DROPT\0" + 0x5A 0xA5): its
/// id stays taken (ids are positions), its name and blocks are free.
pub const TABLE_DROPPED: u64 = u64::from_le_bytes(*b"DROPT\0\x5A\xA5");
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
    /// Bytes of the largest record the limits allow (see `heap::geometry`).
    pub max_record_len: u32,
    /// Directory entries (versions) a block holds at most.
    pub slots_per_block: u32,
    pub block_size: u32,
    /// Dropped: recovery gives it no rows and no blocks.
    pub dropped: bool,
}

/// The long-transaction region (and LCTT entry) of a session's worker.
pub fn long_region(worker: usize) -> usize {
    LONG_REGIONS + worker
}

pub fn is_long_region(region: usize) -> bool {
    region >= LONG_REGIONS
}

/// Whether the medium is long enough to hold the fixed metadata.
fn holds_metadata(medium: &Medium) -> bool {
    medium.len() >= DATA_START
}
