//! FIR's time-ordered tuple storage (FIR 4.1).
//!
//! A table has one *region* per worker (session slot). A region is a chain of
//! *blocks* in the medium; a worker only ever appends to its own region, so
//! the versions of a region are in the order their transactions began. Every
//! block has a DRAM *tile* of version headers beside it, one per slot, that
//! carries the MVTO metadata (see [`VersionHeader`]); only tuple contents and
//! the writer's transaction id live in the medium.
//!
//! # Block layout (at a `BLOCK_ALIGN`-aligned medium offset)
//! A *slotted block*: a directory of fixed-size entries grows from the
//! front, the records they place grow from the back, and the block is
//! full when the next record (with its entry, and room for one more
//! entry to seal the block with) does not fit, or every entry is used.
//! ```text
//! 0    u32  magic "BLK2"            4   u32  table id
//! 8    u32  worker (region)         12  u32  crc32c of bytes 0..12 ++ 16..24 ++ 32..40
//! 16   u64  sequence number of the block in its region: ascending along
//!           the chain, never reused (numbers of collected blocks are skipped)
//! 24   u64  offset of the next block of the region, packed with a check
//!           byte (catalog::pack), 0 = none; set when the next block is
//!           linked, rewritten with one atomic store when GC unlinks it
//! 32   u32  capacity: directory entries at most (4..=2048)
//! 36   u32  block size in bytes
//! 40   u64  min txn, packed with a check byte (catalog::pack): the id of
//!           the first transaction that wrote into the block; restamped with
//!           one atomic store when a block left behind by a crash is reused
//! 48   16 bytes reserved
//! 64   [u8; 256] obsolete bitmap: bit i set = slot i has a committed successor
//! 320  directory: entries in pairs of 24 bytes, entry i at 320 + 12·i
//! ...  free space
//! ...  records, the first entry's at the block's end, each next one
//!      right below the one before (8-aligned, contiguous)
//! ```
//!
//! # Directory entries (12 bytes each, in pairs of 24)
//! ```text
//! 0   u64  txn word of entry 2k
//! 8   u32  place of entry 2k        12  u32  place of entry 2k+1
//! 16  u64  txn word of entry 2k+1
//! ```
//! Each entry's 12 bytes are contiguous (word then place, or place then
//! word), so one range writes an entry back, and both places of a pair
//! share a word: an odd entry's check against the entry before costs no
//! second load. (Two txn words then two places would split an entry
//! over a line more often: 3 in 16 entries against 2 in 16.)
//! ```text
//! txn word  0 = never written; else bits 0..56 the writer's txn id, bit
//!           63 the hole flag (the writer aborted), bits 56..63 a check
//!           of both (see `SlotWord`): any single flipped bit of the word
//!           makes it invalid, so a damaged word is `Corrupt`, never a
//!           live version taken for a hole or a hole for a live version.
//!           An entry whose txn id is below its block's min txn is left
//!           over from earlier use of the space.
//! place     bits 0..30: the record's offset in the block (8-aligned);
//!           bit 30: a *seal*, a hole that takes no space (its offset is
//!           the record before's): the directory ends after it; bit 31:
//!           the version is a tombstone, a copy of the record's flag, so
//!           a writer learns it from the entry alone (every verification
//!           of the record checks that they agree). 0 = never written.
//! ```
//! Entry i's record ends where entry i−1's starts (the block's end for
//! entry 0): that is its space, at least its record's length rounded up
//! to 8 (a rewrite by the same transaction may leave more). A record
//! starts after its entry's own end and takes at least a record header,
//! so a flipped offset bit never goes unnoticed: a read of a block from
//! the medium checks an entry against the one before it
//! (`record::is_placed`) and the entry after against it (a record moved
//! down onto a later one of the same transaction would pass its
//! checksum), and recovery's scan and the scrub check every entry
//! against the one before as they walk.
//!
//! # Record (8-aligned)
//! ```text
//! 0   u32  crc32c of (txn id as u64 ++ bytes 4..12+key+value)
//! 4   u16  key length       6   u16  flags (bit 0 = tombstone)
//! 8   u32  value length
//! 12  key bytes, then value bytes, zero or stale padding up to the space
//! ```
//! An *encoded version* (what `encode` builds, `append` takes and the
//! `wal` design logs) is the txn word followed by the record, unpadded.
//!
//! # Logical address (64 bits)
//! `region (16) | block sequence (32) | slot (16)`, as in FIR. A region's
//! DRAM block table is indexed by sequence number; a collected block
//! leaves a vacant entry, so an address never names a different block.
//!
//! # Invariants
//! * A block allocated from reused space has its whole directory (txn
//!   words and places) zeroed before it is linked (old bytes there may be
//!   anything: records, checkpoint images), so no old bytes pass for an
//!   entry. As a second line, txn ids are leased ahead (see catalog) and
//!   an entry below its block's min txn is ignored. Between a block's
//!   last entry and its lowest record, every entry's txn word and place
//!   are zero: appends write records only below the lowest one, and
//!   recovery clears what a crash left there. A place is therefore set
//!   only by the append (or seal) that wrote its entry: a crash that
//!   keeps a word but loses its place leaves the place unset.
//! * In a region, slots (directory entries) are written in increasing
//!   txn-id order; the committed
//!   slots (txn id ≤ LCTT[worker]) form a prefix, followed by at most one
//!   uncommitted transaction's slots. Aborted slots become holes before any
//!   later transaction of the worker commits, so they never sit behind it.
//! * A block's header is durable before the link to it (region head or the
//!   previous block's `next`) is written.
//! * A set obsolete bit means the slot is dead: it is set on a version
//!   once its successor's commit is durable (written back later, see
//!   `txn::obsolete_bits`: a crash can lose the last commit's few),
//!   on an aborted slot when it becomes a hole, and on a tombstone whose
//!   index entry was removed. Recovery clears the bits of every slot it
//!   hands back to the region (an abort cut short can leave a hole's bit
//!   without the hole) and of redone tombstone heads (a reaping lost in the
//!   crash), so a set bit means what it says; GC still judges each slot by
//!   the index, so a damaged bit can delay collection but never lose data.

mod block;
pub mod extent;
#[cfg(test)]
mod fuzz_tests;
mod record;
mod recover;
mod reserve;
mod slot;
mod space;
pub mod tile;

pub use block::{next_of, set_next, BLOCK_ALIGN};
use block::{BLOCK_HEADER, MIN_TXN_AT};
pub use record::DirectoryEnd;
pub use recover::{Held, RegionBlocks, RegionHorizon, RegionVisitor, SeqGapBudget, SlotFate};
use slot::TXN_EMPTY;
pub use slot::{decode_bytes, encode as encode_checked, SlotWord};
pub use space::Space;
pub use tile::VersionHeader;

use crate::catalog::{self, TableDef, MAX_WORKERS};
use crate::error::{Error, Result};
use crate::medium::{Guarantee, HugeSlice, Medium, HUGE_PAGE_BYTES};
use parking_lot::Mutex;
use reserve::SPARE_ROOM_BLOCKS;
use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, Release};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64};

/// Limits of a table. A version takes the bytes its key and value need;
/// the limits only bound them (and the largest record sizes the blocks).
#[derive(Debug, Clone, Copy)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(default))]
#[non_exhaustive]
pub struct TableOptions {
    pub max_key_len: u32,
    pub max_value_len: u32,
    /// Versions per block at most (4..=2048), each block sized to hold
    /// that many of the largest; 0 chooses blocks of
    /// `DEFAULT_BLOCK_BYTES` (larger if one largest version needs it)
    /// holding up to 2048 versions.
    pub block_slots: u32,
}

impl Default for TableOptions {
    fn default() -> Self {
        TableOptions {
            max_key_len: 64,
            max_value_len: DEFAULT_MAX_VALUE_BYTES,
            block_slots: 0,
        }
    }
}

setters!(TableOptions {
    /// Longest key, in bytes (1..=512; default 64).
    max_key_len: u32,
    /// Longest value, in bytes: a limit, not a reservation (at most
    /// [`MAX_VALUE_LEN`](crate::MAX_VALUE_LEN); default
    /// [`DEFAULT_MAX_VALUE_LEN`](crate::DEFAULT_MAX_VALUE_LEN), the same:
    /// values above a 64 KiB record go out of line).
    max_value_len: u32,
    /// Versions per block at most (4..=2048), or 0 for default blocks.
    block_slots: u32,
});

/// An address no slot has (addresses are below the medium's length):
/// what checkpoint runs and the change log record for a deleted key.
pub const TOMBSTONE: u64 = u64::MAX;
const BITMAP_OFFSET: u64 = 64;
const BITMAP_BYTES: u64 = 256;
const DIRECTORY_OFFSET: u64 = BLOCK_HEADER + BITMAP_BYTES;
/// Bytes of a directory entry: the txn word and the record's place (a
/// record's space is implied by the place of the entry before).
const ENTRY_BYTES: u64 = 12;
pub const MAX_SLOTS_PER_BLOCK: u32 = 2048;
pub const MIN_SLOTS_PER_BLOCK: u32 = 4;
/// Size of a default table's blocks: 2048 versions of 100-byte values
/// (132 bytes each with their entries) need 264 KiB, so small rows fill
/// a block by bytes before they run out of entries, and a block still
/// holds values up to `DEFAULT_MAX_VALUE_BYTES`.
pub const DEFAULT_BLOCK_BYTES: u64 = 256 << 10;
/// A default table's value limit: every value the engine takes (values
/// whose records do not fit `extent::INLINE_RECORD_MAX` go out of line).
pub const DEFAULT_MAX_VALUE_BYTES: u32 = MAX_VALUE_BYTES;
/// A block holds at least one record of the largest inline size with its
/// entry and room for a seal.
const _: () =
    assert!(DIRECTORY_OFFSET + 2 * ENTRY_BYTES + extent::INLINE_RECORD_MAX <= DEFAULT_BLOCK_BYTES);
/// A pointer record with the longest key is inline.
const _: () = assert!(
    slot::RECORD_HEADER + MAX_KEY_BYTES as u64 + extent::POINTER_BYTES as u64
        <= extent::INLINE_RECORD_MAX
);
const _: () =
    assert!(DIRECTORY_OFFSET + ENTRY_BYTES * MAX_SLOTS_PER_BLOCK as u64 <= DEFAULT_BLOCK_BYTES);
/// A region's block table holds an entry per sequence number; a gap wider
/// than this between consecutive blocks (collected blocks in between) is
/// taken for damage rather than allocated.
const MAX_SEQ_GAP: u64 = 1 << 22;

/// A logical address: region | block | slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Addr(pub u64);

impl Addr {
    pub fn new(region: usize, block: u32, slot: u32) -> Addr {
        Addr(((region as u64) << 48) | ((block as u64) << 16) | slot as u64)
    }
    pub fn region(self) -> usize {
        (self.0 >> 48) as usize
    }
    pub fn block(self) -> u32 {
        (self.0 >> 16) as u32
    }
    pub fn slot(self) -> u32 {
        (self.0 & 0xFFFF) as u32
    }
}

/// Geometry of a table's blocks: (largest record, entries per block,
/// block size). The largest record is at most `INLINE_RECORD_MAX`
/// (longer ones go out of line). `requested_slots` n sizes blocks to hold
/// n of the largest records, up to `DEFAULT_BLOCK_BYTES`; 0 picks `DEFAULT_BLOCK_BYTES`
/// blocks of up to `MAX_SLOTS_PER_BLOCK` entries (the same as asking for
/// that many, so a stored definition maps back to its geometry). Either
/// way a block holds at least one largest record.
pub fn geometry(max_key_len: u32, max_value_len: u32, requested_slots: u32) -> (u32, u32, u32) {
    let largest =
        record::record_space(slot::RECORD_HEADER + max_key_len as u64 + max_value_len as u64);
    let record = largest.min(extent::INLINE_RECORD_MAX);
    let slots = match requested_slots {
        0 => MAX_SLOTS_PER_BLOCK as u64,
        n => n as u64,
    };
    let wanted = (DIRECTORY_OFFSET + slots * (ENTRY_BYTES + record)).min(DEFAULT_BLOCK_BYTES);
    let least = DIRECTORY_OFFSET + 2 * ENTRY_BYTES + record;
    let block = wanted.max(least).next_multiple_of(BLOCK_ALIGN);
    (record as u32, slots as u32, block as u32)
}

/// One block of a region. Its tile of version headers (one per slot) is
/// taken from the table's [`Tiles`] on first use, so recovery never touches
/// DRAM metadata of blocks nobody reads (a zeroed header already means
/// "committed, no successor").
pub struct Block {
    /// Medium offset; 0 once the block was collected (vacant).
    offset: AtomicU64,
    pub seq: u32,
    /// Index + 1 of its tile in the table's pool, 0 = none yet.
    tile: AtomicU32,
    /// Emptied by GC: checkpoints no longer list it; freed once no reader
    /// can hold an address into it.
    retired: AtomicBool,
    /// Every slot a reader can reach holds what this process wrote or
    /// verified, so reads skip the checksum: set for blocks formatted by
    /// this process, and for blocks from the medium once the scrub has
    /// verified all their slots (see `TableHeap::scrub_block`).
    trusted: AtomicBool,
    /// Entries written + 1 once the block is closed (sealed or every
    /// entry used), 0 until counted: a closed directory never changes.
    closed_entries: AtomicU32,
    /// Obsolete slots + 1 when the block's dead extents were last freed
    /// (0: never): a sweep that would find the same bits is skipped.
    swept_obsolete: AtomicU32,
    /// GC's last verdict on the bytes of its obsolete versions, with the
    /// obsolete count it was reached at: `(obsolete + 1) << 1 | enough`
    /// (0: none). Counting bytes walks every entry; bits that did not
    /// change since give the same verdict.
    bytes_verdict: AtomicU32,
}

impl Block {
    /// A block found on the medium: its slots are verified when read.
    fn new(offset: u64, seq: u32) -> Block {
        Block {
            offset: AtomicU64::new(offset),
            seq,
            tile: AtomicU32::new(0),
            retired: AtomicBool::new(false),
            trusted: AtomicBool::new(false),
            closed_entries: AtomicU32::new(0),
            swept_obsolete: AtomicU32::new(0),
            bytes_verdict: AtomicU32::new(0),
        }
    }

    /// A block this process formatted: every slot in it is its own write.
    fn formatted_here(offset: u64, seq: u32) -> Block {
        let block = Block::new(offset, seq);
        block.trust();
        block
    }

    pub fn is_trusted(&self) -> bool {
        self.trusted.load(Acquire)
    }

    fn trust(&self) {
        self.trusted.store(true, Release);
    }

    pub fn offset(&self) -> u64 {
        self.offset.load(Acquire)
    }

    pub fn is_vacant(&self) -> bool {
        self.offset() == 0
    }

    pub fn is_retired(&self) -> bool {
        self.retired.load(Acquire)
    }

    pub fn retire(&self) {
        self.retired.store(true, Release);
    }

    /// Records that the block's dead extents were freed with `obsolete`
    /// slots obsolete; false if they already were at that count.
    pub fn note_swept(&self, obsolete: u64) -> bool {
        let mark = obsolete as u32 + 1;
        self.swept_obsolete.swap(mark, AcqRel) != mark
    }

    /// GC's verdict on the block's obsolete bytes, if one was reached at
    /// `obsolete` obsolete slots.
    pub fn bytes_verdict(&self, obsolete: u64) -> Option<bool> {
        let verdict = self.bytes_verdict.load(Acquire);
        (verdict >> 1 == obsolete as u32 + 1).then_some(verdict & 1 == 1)
    }

    pub fn note_bytes_verdict(&self, obsolete: u64, enough: bool) {
        let verdict = ((obsolete as u32 + 1) << 1) | enough as u32;
        self.bytes_verdict.store(verdict, Release);
    }

    /// Makes the next sweep of the block's dead extents run.
    pub fn forget_sweep(&self) {
        self.swept_obsolete.store(0, Release);
    }
}

/// The DRAM tiles of a table's blocks. A tile is never deallocated: a
/// collected block's tile is zeroed and handed to the next new block, so
/// version-header memory is bounded by the blocks alive at once, and a
/// reference into a tile can never dangle (GC frees a block only when no
/// running transaction can still reach it, so nobody looks at a recycled
/// tile through the old block).
///
/// Tiles are allocated in chunks of 1, 2, 4, ... tiles up to the first
/// power of two whose chunk spans a huge page (at least 32 tiles), then
/// in chunks of that size: a small table takes little memory and a large
/// one gets its headers on huge pages (`HugeSlice`).
pub struct Tiles {
    chunks: boxcar::Vec<HugeSlice<VersionHeader>>,
    state: Mutex<TileState>,
    capacity: u32,
    /// Chunks from this one on hold `1 << full_chunk` tiles.
    full_chunk: u32,
}

struct TileState {
    free: Vec<u32>,
    allocated: u32,
}

/// The smallest full chunk, in tiles (as a power of two).
const MIN_FULL_CHUNK: u32 = 5;

/// The chunk holding tile `index` when chunks from `full_chunk` on hold
/// `1 << full_chunk` tiles, the tile's position in it, and the chunk's
/// size in tiles.
#[inline]
fn tile_place(index: u32, full_chunk: u32) -> (usize, u32, u32) {
    let full_tiles = 1 << full_chunk;
    let growing_tiles = full_tiles - 1;
    if index < growing_tiles {
        let chunk = (index + 1).ilog2();
        return (chunk as usize, index + 1 - (1 << chunk), 1 << chunk);
    }
    // Shifts, not a division: `full_tiles` is a power of two the
    // compiler cannot see, and every header lookup comes here.
    let past = index - growing_tiles;
    let chunk = full_chunk + (past >> full_chunk);
    (chunk as usize, past & (full_tiles - 1), full_tiles)
}

/// The index of the first tile of chunk `chunk` (see `tile_place`).
fn first_tile_of(chunk: u32, full_chunk: u32) -> u32 {
    match chunk < full_chunk {
        true => (1 << chunk) - 1,
        false => ((1 << full_chunk) - 1) + (chunk - full_chunk) * (1 << full_chunk),
    }
}

impl Tiles {
    fn new(capacity: u32) -> Tiles {
        let tile_bytes = (capacity as usize * std::mem::size_of::<VersionHeader>()).max(1);
        let tiles_per_huge_page = HUGE_PAGE_BYTES.div_ceil(tile_bytes).next_power_of_two();
        Tiles {
            chunks: boxcar::Vec::new(),
            state: Mutex::new(TileState {
                free: Vec::new(),
                allocated: 0,
            }),
            capacity,
            full_chunk: tiles_per_huge_page.ilog2().max(MIN_FULL_CHUNK),
        }
    }

    /// A zeroed tile, recycled or new; returns its index.
    fn take(&self) -> u32 {
        let mut state = self.state.lock();
        if let Some(index) = state.free.pop() {
            drop(state);
            for header in self.get(index) {
                header.clear();
            }
            return index;
        }
        let index = state.allocated;
        let (chunk, _, tiles) = tile_place(index, self.full_chunk);
        if chunk == self.chunks.count() {
            let headers = tiles as usize * self.capacity as usize;
            self.chunks.push(HugeSlice::zeroed(headers));
        }
        state.allocated += 1;
        index
    }

    /// Allocates (and so zeroes and faults in) the chunk the next new tile
    /// will come from, if it is not there yet; made off the writers' path
    /// by the block thread, like the blocks themselves.
    fn prepare_chunk(&self) {
        let next_new_tile = {
            let state = self.state.lock();
            if !state.free.is_empty() {
                return;
            }
            state.allocated
        };
        self.prepare_ahead(next_new_tile + 1);
    }

    /// Allocates the next chunk if the chunks so far hold fewer than
    /// `wanted` tiles; returns whether it did.
    fn prepare_ahead(&self, wanted: u32) -> bool {
        let next = self.chunks.count();
        let first = first_tile_of(next as u32, self.full_chunk);
        if first >= wanted {
            return false;
        }
        let (_, _, tiles) = tile_place(first, self.full_chunk);
        let slice = HugeSlice::zeroed(tiles as usize * self.capacity as usize);
        let _state = self.state.lock();
        if self.chunks.count() == next {
            self.chunks.push(slice);
        }
        true
    }

    fn give_back(&self, index: u32) {
        self.state.lock().free.push(index);
    }

    /// The headers of tile `index`, which `take` returned.
    #[inline]
    fn get(&self, index: u32) -> &[VersionHeader] {
        let (chunk, position, _) = tile_place(index, self.full_chunk);
        let capacity = self.capacity as usize;
        let start = position as usize * capacity;
        &self.chunks[chunk][start..start + capacity]
    }

    /// Header `slot` of tile `index`, if both exist (for prefetching).
    fn header(&self, index: u32, slot: u32) -> Option<&VersionHeader> {
        if slot >= self.capacity {
            return None;
        }
        let (chunk, position, _) = tile_place(index, self.full_chunk);
        let at = position as usize * self.capacity as usize + slot as usize;
        self.chunks.get(chunk)?.get(at)
    }

    /// Number of tiles allocated (in use or free).
    pub fn allocated(&self) -> usize {
        self.state.lock().allocated as usize
    }
}

/// A version a lookup found once (`TableHeap::find_version`): its block,
/// and its DRAM header, for the read or the write that follows.
#[derive(Clone, Copy)]
pub struct VersionAt<'h> {
    pub addr: Addr,
    block: &'h Block,
    pub header: &'h VersionHeader,
    /// Its record, once a key check located it (`holds_key`).
    record: Option<record::Located>,
}

/// Where the next slot of a region goes.
#[derive(Debug, Clone, Copy, Default)]
pub struct Cursor {
    pub block: u32,
    /// The next directory entry.
    pub slot: u32,
    /// Offset in the block of its lowest record so far (the block size
    /// while it has none): the next record goes right below it.
    pub free_end: u32,
}

/// A worker's append-only part of a table, indexed by block sequence
/// number from its first block's on; a collected block leaves a vacant
/// entry, so a sequence number (and with it a logical address) is never
/// reused.
#[derive(Default)]
pub struct Region {
    /// Sequence number of `blocks[0]`: recovery starts the table at the
    /// first block that survived GC, so collected blocks before it cost
    /// nothing. Set once, while the region is still empty.
    base: AtomicU32,
    blocks: boxcar::Vec<Block>,
    pub cursor: Mutex<Cursor>,
    /// The largest txn id appended to the region by this process, and the
    /// first one a transaction of this process appended (0: none yet);
    /// written under `cursor`'s lock, for the time-order assertions.
    newest_txn: AtomicU64,
    first_txn: AtomicU64,
}

/// What an append promises about its txn id (see `TableHeap::append_older`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Age {
    /// A transaction of this process: at least every txn id appended to
    /// the region before (invariant 1).
    Newest,
    /// A version older than every transaction of this process.
    Older,
}

impl Region {
    /// Checks and records the txn id of an append; the caller holds the
    /// cursor lock. Invariant 1 (time order): a transaction's slots never
    /// go below a slot already appended to the region. A version appended
    /// as older than every transaction of this process must be below the
    /// first such transaction's id.
    fn note_append(&self, txn: u64, age: Age) {
        let newest = self.newest_txn.load(Relaxed);
        match age {
            Age::Newest => {
                assert!(
                    txn >= newest,
                    "time order: txn {txn} appended to a region after txn {newest}"
                );
                if self.first_txn.load(Relaxed) == 0 {
                    self.first_txn.store(txn, Relaxed);
                }
                self.newest_txn.store(txn, Relaxed);
            }
            Age::Older => {
                let first = self.first_txn.load(Relaxed);
                assert!(
                    first == 0 || txn < first,
                    "append_older: txn {txn} is not older than txn {first}, the region's first of this process"
                );
                self.newest_txn.store(newest.max(txn), Relaxed);
            }
        }
    }

    /// The largest txn id of a slot appended to the region so far by this
    /// process (0: none).
    fn newest_txn(&self) -> u64 {
        self.newest_txn.load(Relaxed)
    }

    /// Number of sequence numbers handed out (vacant ones included).
    pub fn len(&self) -> usize {
        self.base.load(Acquire) as usize + self.blocks.count()
    }

    /// The block with sequence number `seq`, unless absent or collected.
    pub fn get(&self, seq: usize) -> Option<&Block> {
        let index = seq.checked_sub(self.base.load(Acquire) as usize)?;
        self.blocks.get(index).filter(|b| !b.is_vacant())
    }

    /// Blocks that exist, in sequence order.
    pub fn present(&self) -> impl Iterator<Item = &Block> + '_ {
        self.blocks
            .iter()
            .map(|(_, b)| b)
            .filter(|b| !b.is_vacant())
    }

    /// Vacant entries that pushing block `seq` would add: the numbers it
    /// skips after the last block (none for a first block, which sets the
    /// base instead).
    fn vacancies_before(&self, seq: u64) -> u64 {
        match self.blocks.count() {
            0 => 0,
            _ => seq.saturating_sub(self.len() as u64),
        }
    }

    /// Appends block `seq`, with vacant entries for any numbers skipped
    /// since the previous block; a number that does not ascend, or skips
    /// more than `MAX_SEQ_GAP`, comes from a damaged medium and is refused
    /// before anything is allocated for it.
    fn push(&self, block: Block) -> Result<()> {
        let seq = block.seq as u64;
        if self.blocks.count() == 0 && seq < u32::MAX as u64 {
            self.base.store(block.seq, Release);
            self.blocks.push(block);
            return Ok(());
        }
        let next = self.len() as u64;
        if seq < next || seq - next > MAX_SEQ_GAP || seq >= u32::MAX as u64 {
            return Err(Error::Corrupt(format!(
                "block sequence number {seq} cannot follow {next}"
            )));
        }
        while (self.len() as u64) < seq {
            self.blocks.push(Block::new(0, self.len() as u32));
        }
        self.blocks.push(block);
        Ok(())
    }
}

/// Largest value a table may be defined to hold (64 MiB): values whose
/// records exceed `extent::INLINE_RECORD_MAX` are stored out of line.
pub const MAX_VALUE_BYTES: u32 = 64 << 20;

/// Longest key a slot can hold (the index's limit; tables are validated
/// against it).
pub const MAX_KEY_BYTES: usize = 512;

/// What a read of a published slot finds.
pub enum SlotRead {
    /// The value is in the caller's buffer.
    Value,
    Deleted,
    /// The slot fails its checksum.
    Damaged,
    /// The version's block was collected.
    Gone,
}

/// Decoded slot contents.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotContent {
    pub txn: u64,
    pub tombstone: bool,
    pub key: Vec<u8>,
    pub value: Vec<u8>,
}

/// What a block holds (see `TableHeap::block_usage`).
#[derive(Debug, Clone, Copy, Default)]
pub struct BlockUsage {
    pub entries: u64,
    pub bytes: u64,
    pub obsolete_bytes: u64,
}

/// The blocks of a table that existed when `TableHeap::block_set` ran.
pub struct BlockSet {
    slots_per_block: u32,
    /// Per region: the sequence number of the first bit, and the bits.
    regions: Vec<(usize, Vec<u64>)>,
}

impl BlockSet {
    /// Whether `addr` names a slot of a block in the set (what
    /// `TableHeap::block(addr).is_some()` said when the set was taken).
    pub fn contains(&self, addr: Addr) -> bool {
        let Some((base, bits)) = self.regions.get(addr.region()) else {
            return false;
        };
        let Some(index) = (addr.block() as usize).checked_sub(*base) else {
            return false;
        };
        let present = bits
            .get(index / 64)
            .is_some_and(|word| word >> (index % 64) & 1 == 1);
        present && addr.slot() < self.slots_per_block
    }
}

/// The storage of one table: its definition, its regions and their tiles.
pub struct TableHeap {
    pub def: TableDef,
    pub regions: Box<[Region]>,
    pub tiles: Tiles,
    reserve: reserve::Reserve,
    /// Tiles `prepare_tiles_ahead` works towards: the blocks present when
    /// it first ran (0 once it is done).
    tiles_ahead: std::sync::OnceLock<AtomicU32>,
    /// Mean record space of the last block a region of this table closed
    /// (0: none yet), for the guess of where a record is (`prefetch_record`).
    mean_space: AtomicU32,
}

impl TableHeap {
    pub fn new(def: TableDef) -> TableHeap {
        TableHeap {
            tiles: Tiles::new(def.slots_per_block),
            def,
            regions: (0..MAX_WORKERS).map(|_| Region::default()).collect(),
            reserve: reserve::Reserve::default(),
            tiles_ahead: std::sync::OnceLock::new(),
            mean_space: AtomicU32::new(0),
        }
    }

    /// Which blocks exist now, as a bit per sequence number: checking
    /// that the millions of addresses of a checkpoint run name slots that
    /// exist then costs a bit test each rather than a block lookup.
    pub fn block_set(&self) -> BlockSet {
        let regions = self
            .regions
            .iter()
            .map(|region| {
                let mut bits = vec![0u64; region.blocks.count().div_ceil(64)];
                for (index, block) in region.blocks.iter() {
                    if let (false, Some(word)) = (block.is_vacant(), bits.get_mut(index / 64)) {
                        *word |= 1 << (index % 64);
                    }
                }
                // After the blocks: a first block's push stores the base
                // before the block, so a base read first could miss it.
                (region.base.load(Acquire) as usize, bits)
            })
            .collect();
        BlockSet {
            slots_per_block: self.def.slots_per_block,
            regions,
        }
    }

    /// The block an address points into; `None` once it was collected
    /// (or for an address that never named a block).
    #[inline]
    pub fn block(&self, addr: Addr) -> Option<&Block> {
        let block = self
            .regions
            .get(addr.region())?
            .get(addr.block() as usize)?;
        (addr.slot() < self.def.slots_per_block).then_some(block)
    }

    /// The version header of a slot, `None` once its block was collected.
    #[inline]
    pub fn header(&self, addr: Addr) -> Option<&VersionHeader> {
        let block = self.block(addr)?;
        Some(&self.tile(block)[addr.slot() as usize])
    }

    /// Starts loading a version's header, if its tile exists.
    #[inline]
    pub fn prefetch_header(&self, addr: Addr) {
        let Some(block) = self.block(addr) else {
            return;
        };
        let tile = block.tile.load(Acquire);
        if tile != 0 {
            if let Some(header) = self.tiles.header(tile - 1, addr.slot()) {
                crate::medium::prefetch(header);
            }
        }
    }

    /// Finds the version at `addr`, once, and starts loading its header,
    /// its entry and (by guess) its record, so that their misses overlap;
    /// `None` once its block was collected. The visibility check, the
    /// copy of the value and a write's lock then look up neither the
    /// block nor the tile again.
    #[inline]
    pub fn find_version(&self, medium: &Medium, addr: Addr) -> Option<VersionAt<'_>> {
        let block = self.block(addr)?;
        let header = self.tile(block).get(addr.slot() as usize)?;
        Some(self.start_loading(medium, (addr, block, header)))
    }

    /// `find_version` of a version whose block already has its tile, as
    /// every version a transaction reached through the index has: an
    /// address from a cache (`TableRt::cached_head`) makes no tile.
    #[inline]
    pub fn find_tiled(&self, medium: &Medium, addr: Addr) -> Option<VersionAt<'_>> {
        let block = self.block(addr)?;
        let tile = block.tile.load(Acquire).checked_sub(1)?;
        let header = self.tiles.header(tile, addr.slot())?;
        Some(self.start_loading(medium, (addr, block, header)))
    }

    /// The version found, its header and record starting to load.
    #[inline]
    fn start_loading<'h>(
        &'h self,
        medium: &Medium,
        (addr, block, header): (Addr, &'h Block, &'h VersionHeader),
    ) -> VersionAt<'h> {
        crate::medium::prefetch(header);
        self.prefetch_record(medium, block, addr.slot());
        VersionAt {
            addr,
            block,
            header,
            record: None,
        }
    }

    /// Starts loading the directory entry of `slot` and where its record
    /// probably is.
    #[inline]
    fn prefetch_record(&self, medium: &Medium, block: &Block, slot: u32) {
        // A block from the medium bounds a record by the place before.
        let before = match block.is_trusted() {
            true => 0,
            false => slot.min(1),
        };
        let from = record::entry_at(block, slot - before);
        medium.prefetch(from, ENTRY_BYTES * (1 + before) as u64);
        // Where the record is becomes known only once the entry is read;
        // a guess from the mean record space fetches its line meanwhile
        // (exact when a table's rows have one size, as YCSB's do).
        if let Some(guess) = self.guess_record(block, slot) {
            medium.prefetch(guess, self.mean_space.load(Relaxed) as u64);
        }
    }

    /// Where slot `slot`'s record would be if every record before it took
    /// the mean space of the table's last closed block; `None` before a
    /// block closed.
    fn guess_record(&self, block: &Block, slot: u32) -> Option<u64> {
        let mean = self.mean_space.load(Relaxed) as u64;
        let from_end = (slot as u64 + 1).checked_mul(mean)?;
        let offset = (self.def.block_size as u64).checked_sub(from_end)?;
        (mean != 0 && offset >= DIRECTORY_OFFSET).then_some(block.offset() + offset)
    }

    /// A block's tile, taken from the pool on first use.
    #[inline]
    pub fn tile(&self, block: &Block) -> &[VersionHeader] {
        match block.tile.load(Acquire) {
            0 => self.first_tile(block),
            index => self.tiles.get(index - 1),
        }
    }

    #[cold]
    fn first_tile(&self, block: &Block) -> &[VersionHeader] {
        let mine = self.tiles.take() + 1;
        let index = match block.tile.compare_exchange(0, mine, AcqRel, Acquire) {
            Ok(_) => mine,
            Err(theirs) => {
                self.tiles.give_back(mine - 1);
                theirs
            }
        };
        self.tiles.get(index - 1)
    }

    /// Drops a collected block: its entry becomes vacant and its tile goes
    /// back to the pool. The caller made sure nobody can reach it.
    pub fn vacate(&self, region: usize, seq: usize) {
        let Some(block) = self.regions[region].get(seq) else {
            return;
        };
        block.offset.store(0, Release);
        let tile = block.tile.swap(0, AcqRel);
        if tile != 0 {
            self.tiles.give_back(tile - 1);
        }
    }

    /// Appends an encoded version (txn word, then record) to `worker`'s
    /// region and returns its address.
    /// Not persisted: the commit persists and fences it.
    /// `txn` is the appending transaction; it becomes a new block's min txn.
    /// It must not be below any txn id appended to the region before
    /// (invariant 1; asserted).
    pub fn append(
        &self,
        medium: &Medium,
        space: &Space,
        worker: usize,
        txn: u64,
        slot: &[u8],
    ) -> Result<Addr> {
        self.append_aged(medium, space, worker, (txn, Age::Newest), slot)
    }

    fn append_aged(
        &self,
        medium: &Medium,
        space: &Space,
        worker: usize,
        (txn, age): (u64, Age),
        version: &[u8],
    ) -> Result<Addr> {
        let record = version.get(8..).unwrap_or_default();
        if record::record_space(record.len() as u64) > self.def.max_record_len as u64 {
            return self.append_out_of_line(medium, space, worker, (txn, age), version);
        }
        self.append_record(medium, space, worker, (txn, age), version, |_, _| Ok(()))
    }

    /// Appends a version whose record does not fit a block: its value
    /// goes to an extent of its own, written and fenced (with the block's
    /// mark) after the entry is placed and before the record pointing to
    /// it is written. Cold: kept out of the inline append's code, which
    /// runs on every write and should stay small in the instruction cache.
    #[cold]
    #[inline(never)]
    fn append_out_of_line(
        &self,
        medium: &Medium,
        space: &Space,
        worker: usize,
        (txn, age): (u64, Age),
        version: &[u8],
    ) -> Result<Addr> {
        let (key, value) = slot::key_and_value(version)
            .filter(|_| !record::encoded_tombstone(version))
            .unwrap_or_else(|| {
                panic!(
                    "an out-of-line version of {} bytes is a well-formed value of table {}",
                    version.len(),
                    self.def.id
                )
            });
        let len = extent::extent_len(value.len() as u64);
        let (offset, _) = space.allocate(medium, len)?;
        let pointer = extent::Pointer {
            offset,
            len: value.len() as u64,
            crc: crc32c::crc32c(value),
        };
        let mut record = Vec::new();
        slot::encode_pointer(&mut record, txn, key, &pointer.encode());
        let write_extent = |block: &Block, addr: Addr| {
            block::mark_holds_extents(medium, block.offset());
            let owner = extent::Owner {
                table: self.def.id,
                addr,
                txn,
            };
            extent::write(medium, pointer, owner, value)
        };
        let appended = self.append_record(medium, space, worker, (txn, age), &record, write_extent);
        if appended.is_err() {
            space.free(medium, offset, len);
        }
        appended
    }

    /// Places an encoded version's record in the region's current block
    /// (or a new one), runs `before_record` with the block and address
    /// once the entry is placed, then writes the record and its txn word.
    fn append_record(
        &self,
        medium: &Medium,
        space: &Space,
        worker: usize,
        (txn, age): (u64, Age),
        version: &[u8],
        before_record: impl FnOnce(&Block, Addr) -> Result<()>,
    ) -> Result<Addr> {
        let record = version.get(8..).unwrap_or_default();
        let needed = record::record_space(record.len() as u64);
        assert!(
            version.len() as u64 > slot::SLOT_HEADER && needed <= self.def.max_record_len as u64,
            "an encoded version of {} bytes does not fit table {}'s limits",
            version.len(),
            self.def.id
        );
        let region = &self.regions[worker];
        let mut cursor = region.cursor.lock();
        let current = region.get(cursor.block as usize);
        let block = match current {
            Some(block) if self.has_room(&cursor, needed) => block,
            _ => self.next_block(medium, space, worker, (txn, age), &mut cursor)?,
        };
        region.note_append(txn, age);
        let addr = Addr::new(worker, cursor.block, cursor.slot);
        let offset = cursor.free_end as u64 - needed;
        *cursor = Cursor {
            slot: cursor.slot + 1,
            free_end: offset as u32,
            ..*cursor
        };
        // The place is stored under the lock: a reader of the next entry
        // (another thread may append it as soon as the lock is released)
        // checks it against this one.
        let tombstone = record::encoded_tombstone(version);
        let place = record::Place::record(offset, tombstone);
        record::store_place(medium, block, addr.slot(), place);
        drop(cursor);
        before_record(block, addr)?;
        // The record before the txn word: the word is what makes the
        // entry count (once the commit's fence is passed).
        medium.write_bytes(block.offset() + offset, record);
        medium.store(
            record::txn_at(block, addr.slot()),
            u64::from_le_bytes(version.first_chunk().copied().unwrap_or_default()),
        );
        self.assert_placed(medium, block, addr.slot(), (offset, needed));
        // The region's next append writes there. The block was prepared
        // (its directory zeroed and written back) out of this thread's
        // cache, so its lines start coming now, an operation ahead,
        // instead of stalling that append's stores (+6 % YCSB-A, +8 %
        // TPC-C).
        medium.prefetch(record::entry_at(block, addr.slot() + 1), ENTRY_BYTES);
        medium.prefetch(block.offset() + offset.saturating_sub(needed), needed);
        Ok(addr)
    }

    /// Where an append writes a directory entry, it reads back as placed:
    /// contiguous with the record before it and clear of the directory.
    fn assert_placed(
        &self,
        medium: &Medium,
        block: &Block,
        slot: u32,
        (offset, needed): (u64, u64),
    ) {
        let block_size = self.def.block_size as u64;
        let (place, end) = record::place_and_end(medium, block, slot, block_size);
        let space = record::is_placed(slot, place, end, false);
        assert!(
            place.offset() == offset && space == Some(needed) && end <= block_size,
            "records are contiguous: slot {slot} of block {} of table {} is at {place:?} below {end}",
            block.seq,
            self.def.id
        );
    }

    /// Whether a record taking `needed` bytes fits the cursor's block:
    /// below the entry limit, and with room for its entry, its record and,
    /// unless it takes the last entry, one more entry (to seal the block
    /// with if the next record does not fit).
    fn has_room(&self, cursor: &Cursor, needed: u64) -> bool {
        let capacity = self.def.slots_per_block;
        let entries = match cursor.slot + 1 < capacity {
            true => cursor.slot + 2,
            false => cursor.slot + 1,
        };
        cursor.slot < capacity && record::directory_end(entries) + needed <= cursor.free_end as u64
    }

    /// Seals the cursor's block (if it has one with entries left) and
    /// moves the cursor to the region's next block: one a crash left
    /// linked, or a new one. Once a block: out of the append's hot code.
    #[cold]
    #[inline(never)]
    fn next_block(
        &self,
        medium: &Medium,
        space: &Space,
        worker: usize,
        (txn, age): (u64, Age),
        cursor: &mut Cursor,
    ) -> Result<&Block> {
        let region = &self.regions[worker];
        if let Some(block) = region.get(cursor.block as usize) {
            self.seal(medium, block, cursor, txn);
            // A cursor recovery left after a full block knows no records.
            if cursor.slot > 0 && cursor.free_end > 0 {
                let used = (self.def.block_size - cursor.free_end) / cursor.slot;
                self.mean_space.store(used, Relaxed);
            }
        }
        let has_block = region.get(cursor.block as usize).is_some();
        if !has_block || (cursor.block as usize + 1) >= region.len() {
            return self.add_block(medium, space, worker, (txn, age), cursor);
        }
        // A block linked by a transaction that did not survive a crash;
        // recovery cleared its entries, and the region continues in it.
        // Its min txn must become ours, as for a new block, so that every
        // version of the block before is below it (redo relies on it).
        *cursor = Cursor {
            block: cursor.block + 1,
            slot: 0,
            free_end: self.def.block_size,
        };
        let Some(block) = region.get(cursor.block as usize) else {
            return Err(Error::Corrupt("a linked block vanished".into()));
        };
        assert_min_txn_bounds_block_before(region, txn, age);
        medium.store(block.offset() + MIN_TXN_AT, catalog::pack(txn));
        // Also fences the seal written above.
        medium.persist_now(block.offset() + MIN_TXN_AT, 8)?;
        // Recovery emptied it: whatever it holds from now on is ours.
        block.trust();
        Ok(block)
    }

    /// Closes a block whose next record does not fit with a *seal*: a hole
    /// of `txn` taking no space at the next entry (its place flagged as
    /// one, at the offset of the record before), so that recovery knows
    /// the directory ends there and does not take the unwritten entries
    /// for the start of the region's tail. Written back here; the fence
    /// before the next block is linked (or restamped) makes it durable
    /// first. A block with every entry written needs none.
    fn seal(&self, medium: &Medium, block: &Block, cursor: &Cursor, txn: u64) {
        if cursor.slot >= self.def.slots_per_block {
            return;
        }
        let word = record::txn_at(block, cursor.slot);
        assert!(
            record::directory_end(cursor.slot + 1) <= cursor.free_end as u64
                && medium.load(word) == TXN_EMPTY,
            "a seal goes to an unwritten entry the records left room for: slot {} of block {}",
            cursor.slot,
            block.seq
        );
        let seal = record::Place::seal(cursor.free_end as u64);
        record::store_place(medium, block, cursor.slot, seal);
        medium.store(word, SlotWord::encode(txn, true));
        medium.persist(record::entry_at(block, cursor.slot), ENTRY_BYTES);
        let (word, bit) = bitmap_bit(block, cursor.slot);
        medium.fetch_or(word, bit);
        medium.persist(word, 8);
    }

    /// `append` for a version older than every transaction of this process
    /// (a row a `wal` restart copies in while it serves the row in place,
    /// into a region a session may have opened a block in): the block's min
    /// txn is lowered to `txn` if it is above, so that GC does not take the
    /// slot for a leftover of the space's earlier use. Only for the
    /// volatile medium, where nothing is recovered from min txns (the
    /// lowered min txn, and a block such a version starts, break
    /// invariant 3). Both promises are asserted: the medium is volatile,
    /// and `txn` is below the first txn id a transaction of this process
    /// appended to the region.
    pub fn append_older(
        &self,
        medium: &Medium,
        space: &Space,
        worker: usize,
        txn: u64,
        slot: &[u8],
    ) -> Result<Addr> {
        assert!(
            matches!(medium.guarantee(), Guarantee::None),
            "append_older on a medium that persists: min txns would break invariant 3"
        );
        let addr = self.append_aged(medium, space, worker, (txn, Age::Older), slot)?;
        if let Some(block) = self.block(addr) {
            if self.min_txn(medium, block).is_none_or(|min| min > txn) {
                medium.store(block.offset() + MIN_TXN_AT, catalog::pack(txn));
            }
        }
        Ok(addr)
    }

    /// Allocates, formats and links a new block at the end of a region.
    fn add_block(
        &self,
        medium: &Medium,
        space: &Space,
        worker: usize,
        (txn, age): (u64, Age),
        cursor: &mut Cursor,
    ) -> Result<&Block> {
        let region = &self.regions[worker];
        let seq = region.len() as u64;
        let offset = match self.reserve.take(seq) {
            Some(offset) => offset,
            None => self.allocate_cleared(medium, space, false)?,
        };
        space.wake_preparer();
        // Invariant 2, checked where it costs no page the writes do not
        // touch anyway: the first slot shares the header's page.
        assert_eq!(
            medium.load(offset + DIRECTORY_OFFSET),
            TXN_EMPTY,
            "no stale slots: the first slot of a block about to be linked at {offset} was not zeroed"
        );
        assert_min_txn_bounds_block_before(region, txn, age);
        medium.zero(offset + BITMAP_OFFSET, BITMAP_BYTES);
        medium.persist(offset + BITMAP_OFFSET, BITMAP_BYTES);
        medium.write_bytes(offset, &block::header(&self.def, worker, seq, txn));
        medium.persist_now(offset, BLOCK_HEADER)?;
        // Invariant 4: what a link will lead recovery to is a header that
        // validates (fenced by `persist_now` above), and a clear bitmap.
        let header = block::validate(medium, &self.def, offset, worker, seq);
        assert!(
            matches!(header, Ok((0, min)) if min == txn)
                && medium.load(offset + BITMAP_OFFSET) == 0,
            "links follow headers: block {seq} of table {} region {worker} at {offset} does not read back before it is linked: {header:?}",
            self.def.id
        );
        // The region's last block is never collected, so it is the one
        // the chain ends in.
        match seq
            .checked_sub(1)
            .and_then(|last| region.get(last as usize))
        {
            None => catalog::set_region_head(medium, self.def.id, worker, offset),
            Some(last) => set_next(medium, last.offset(), offset),
        }
        // Fenced here, not at commit, so the link is durable even if the
        // session moves to another thread (x86 fences are per core).
        medium.fence()?;
        region.push(Block::formatted_here(offset, seq as u32))?;
        *cursor = Cursor {
            block: seq as u32,
            slot: 0,
            free_end: self.def.block_size,
        };
        region
            .get(seq as usize)
            .ok_or_else(|| Error::Corrupt("a new block vanished".into()))
    }

    /// Checks a block header found by following a link during recovery;
    /// returns (next block offset, min txn).
    fn validate_block(
        &self,
        medium: &Medium,
        offset: u64,
        worker: usize,
        seq: u64,
    ) -> Result<(u64, u64)> {
        block::validate(medium, &self.def, offset, worker, seq)
    }

    /// Checks a block reached by following a link whose sequence number is
    /// not known in advance (it must be at least `min_seq`, as numbers of
    /// collected blocks are skipped); returns (seq, next, min txn).
    fn validate_chained(
        &self,
        medium: &Medium,
        offset: u64,
        worker: usize,
        min_seq: u64,
    ) -> Result<(u64, u64, u64)> {
        let seq = block::claimed_seq(medium, &self.def, offset).unwrap_or(min_seq);
        if seq < min_seq || seq >= u32::MAX as u64 {
            return Err(Error::Corrupt(format!(
                "table {} region {worker}: block at {offset} is out of sequence",
                self.def.id
            )));
        }
        let (next, min_txn) = self.validate_block(medium, offset, worker, seq)?;
        Ok((seq, next, min_txn))
    }

    /// Encodes a slot for this table into `buf`. A version that will go
    /// out of line gets no checksum: `append` checksums its value and its
    /// pointer record instead, so a 16 MiB value is not checksummed twice.
    pub fn encode(&self, buf: &mut Vec<u8>, txn: u64, key: &[u8], value: &[u8], tombstone: bool) {
        let record = slot::RECORD_HEADER + (key.len() + value.len()) as u64;
        match record::record_space(record) > self.def.max_record_len as u64 {
            true => slot::encode_unchecked(buf, txn, key, value, tombstone),
            false => slot::encode(buf, txn, key, value, tombstone),
        }
    }

    /// An extent for a block, its directory zeroed and written back (not
    /// fenced) if the space was used before. With
    /// `fault_in`, fresh space is touched too, so that its pages fault in
    /// here and not under the writes into the block.
    fn allocate_cleared(&self, medium: &Medium, space: &Space, fault_in: bool) -> Result<u64> {
        let (offset, fresh) = space.allocate(medium, self.def.block_size as u64)?;
        let cleared = match fresh {
            true => 0,
            false => self.clear_directory(medium, offset),
        };
        if fault_in {
            self.fault_in(medium, offset, cleared);
        }
        Ok(offset)
    }

    /// Zeroes and writes back every directory entry a block can have (txn
    /// words and places), so that old bytes in reused space (earlier
    /// records, checkpoint images) can never look like entries. The
    /// caller fences before linking the block. Returns the end of the
    /// directory: the pages below it are faulted in now.
    fn clear_directory(&self, medium: &Medium, offset: u64) -> u64 {
        // An odd capacity's last place shares a word with no entry.
        let end = record::directory_end(self.def.slots_per_block).next_multiple_of(8);
        assert!(
            end <= self.def.block_size as u64,
            "a block holds its whole directory"
        );
        medium.zero(offset + DIRECTORY_OFFSET, end - DIRECTORY_OFFSET);
        medium.persist(offset + DIRECTORY_OFFSET, end - DIRECTORY_OFFSET);
        end
    }

    /// Touches every page of a block from byte `from` on so that it
    /// faults in here rather than under the writer that appends to it.
    /// Freed space is discarded (`Space::free`), so a reused block's
    /// records area is as unbacked as a fresh block: clearing its
    /// directory faults in only the pages the directory spans. Nothing
    /// reads the records area before an append writes it, so the zeros
    /// stored need no write-back.
    fn fault_in(&self, medium: &Medium, offset: u64, from: u64) {
        let first = from.next_multiple_of(BLOCK_ALIGN);
        for page in (first..self.def.block_size as u64).step_by(BLOCK_ALIGN as usize) {
            medium.store(offset + page, 0);
        }
    }

    /// Makes extents ready for the table's next blocks (see `reserve.rs`)
    /// while it is growing, or gives them back once it took none for
    /// `idle_after`; returns how many it made.
    pub fn prepare_blocks(
        &self,
        medium: &Medium,
        space: &Space,
        idle_after: std::time::Duration,
    ) -> Result<usize> {
        let block = self.def.block_size as u64;
        let scarce = space.room(medium) < SPARE_ROOM_BLOCKS * block;
        let holds = self.reserve.len() > 0;
        if holds && (scarce || self.reserve.idle(idle_after)) {
            self.release_reserve(medium, space);
            return Ok(0);
        }
        if scarce {
            return Ok(0);
        }
        let missing = self.reserve.missing();
        if missing > 0 {
            self.tiles.prepare_chunk();
        }
        for _ in 0..missing {
            let offset = self.allocate_cleared(medium, space, true)?;
            if let Err(e) = medium.fence() {
                space.free(medium, offset, block);
                return Err(e);
            }
            // Invariant 2 for extents held ready: their first and last
            // slots (the pages were just faulted in) hold no txn id.
            let last = offset + record::txn_offset(self.def.slots_per_block - 1);
            assert!(
                medium.load(offset + DIRECTORY_OFFSET) == TXN_EMPTY
                    && medium.load(last) == TXN_EMPTY,
                "no stale slots: an extent made ready at {offset} was not zeroed"
            );
            self.reserve.put(offset);
        }
        Ok(missing)
    }

    /// Gives the tile pool one more chunk if it holds fewer tiles than the
    /// table had blocks at the first call; returns whether it did. After a
    /// restart no block from the medium has a tile until it is first read,
    /// and the workload would otherwise fault in (and zero) that memory
    /// under its first transactions: the block thread prepares it
    /// meanwhile. Blocks made later get theirs as before (`take`), so the
    /// blocks are counted once, not on every call.
    pub fn prepare_tiles_ahead(&self) -> bool {
        let wanted = self.tiles_ahead.get_or_init(|| {
            let blocks: usize = self.regions.iter().map(|r| r.present().count()).sum();
            AtomicU32::new(blocks.min(u32::MAX as usize) as u32)
        });
        let target = wanted.load(Relaxed);
        if target == 0 {
            return false;
        }
        let prepared = self.tiles.prepare_ahead(target);
        if !prepared {
            wanted.store(0, Relaxed);
        }
        prepared
    }

    /// Frees the extents held ready for this table; returns how many.
    pub fn release_reserve(&self, medium: &Medium, space: &Space) -> usize {
        let extents = self.reserve.drain();
        for &offset in &extents {
            space.free(medium, offset, self.def.block_size as u64);
        }
        extents.len()
    }

    /// Extents held ready for this table's next blocks.
    pub fn reserved_blocks(&self) -> usize {
        self.reserve.len()
    }

    /// Entries written in a block (holes and seals included); counted
    /// once for a closed block.
    pub fn entries_in(&self, medium: &Medium, block: &Block) -> u64 {
        let known = block.closed_entries.load(Acquire);
        if known != 0 {
            return known as u64 - 1;
        }
        let mut entries = 0u32;
        let end = self.walk_directory(medium, block, |_| entries += 1);
        if end == DirectoryEnd::Closed {
            block.closed_entries.store(entries + 1, Release);
        }
        entries as u64
    }

    /// What a block holds: its written entries (holes and seals
    /// included) and the bytes they take with their records, in all and
    /// those whose obsolete bit is set.
    pub fn block_usage(&self, medium: &Medium, worker: usize, block: &Block) -> BlockUsage {
        let mut usage = BlockUsage::default();
        let extents = self.holds_extents(medium, block);
        self.walk_directory(medium, block, |entry| {
            let addr = Addr::new(worker, block.seq, entry.slot);
            let out_of_line = match extents {
                true => self.owned_extent(medium, addr).map_or(0, |(_, len)| len),
                false => 0,
            };
            let bytes = ENTRY_BYTES + entry.space + out_of_line;
            usage.entries += 1;
            usage.bytes += bytes;
            let (word, bit) = bitmap_bit(block, entry.slot);
            if medium.load(word) & bit != 0 {
                usage.obsolete_bytes += bytes;
            }
        });
        usage
    }

    /// Whether a record of the block may point to an extent.
    pub fn holds_extents(&self, medium: &Medium, block: &Block) -> bool {
        block::holds_extents(medium, block.offset()) == Some(true)
    }

    /// Clears a slot's obsolete bit that a crash left without its cause;
    /// the caller fences.
    pub fn clear_obsolete(&self, medium: &Medium, addr: Addr) {
        let Some(block) = self.block(addr) else {
            return;
        };
        let (word, bit) = bitmap_bit(block, addr.slot());
        if medium.fetch_and_not(word, bit) & bit != 0 {
            medium.persist(word, 8);
        }
    }

    /// The id of the first transaction that wrote into a block; slots
    /// below it are left over from earlier use of the space.
    /// `None` if the word fails its check.
    pub fn min_txn(&self, medium: &Medium, block: &Block) -> Option<u64> {
        catalog::unpack_checked(medium.load(block.offset() + MIN_TXN_AT))
    }

    /// Slots of a block whose obsolete bit is set.
    pub fn obsolete_in(&self, medium: &Medium, block: &Block) -> u64 {
        (0..BITMAP_BYTES / 8)
            .map(|w| {
                medium
                    .load(block.offset() + BITMAP_OFFSET + 8 * w)
                    .count_ones() as u64
            })
            .sum()
    }

    /// Whether a slot's obsolete bit is set (false for an address of no
    /// block).
    pub fn is_obsolete(&self, medium: &Medium, addr: Addr) -> bool {
        self.block(addr).is_some_and(|block| {
            let (word, bit) = bitmap_bit(block, addr.slot());
            medium.load(word) & bit != 0
        })
    }

    /// Marks a slot obsolete in its block's bitmap and starts writing the
    /// word back; the caller's next fence makes it durable.
    pub fn set_obsolete(&self, medium: &Medium, addr: Addr) {
        if let Some(word) = self.mark_obsolete(medium, addr) {
            medium.persist(word, 8);
        }
    }

    /// Sets a slot's obsolete bit without writing it back; returns the
    /// bitmap word's offset if the bit was new, for the caller to write
    /// back (once per line for several bits: a write-back evicts the line
    /// on some CPUs, and the next bit in it would miss).
    pub fn mark_obsolete(&self, medium: &Medium, addr: Addr) -> Option<u64> {
        let block = self.block(addr)?;
        let (word, bit) = bitmap_bit(block, addr.slot());
        if medium.load(word) & bit != 0 {
            return None;
        }
        medium.fetch_or(word, bit);
        Some(word)
    }
}

/// Invariant 3, where a block's min txn is stamped: every slot of the
/// block before (and of the region before it) is at most `txn`. Not for a
/// version appended as older than the process's transactions (volatile
/// medium only; see `TableHeap::append_older`).
fn assert_min_txn_bounds_block_before(region: &Region, txn: u64, age: Age) {
    let newest = region.newest_txn();
    assert!(
        age == Age::Older || txn >= newest,
        "min txns bound the block before: a block stamped with txn {txn} follows a slot of txn {newest}"
    );
}

/// Whether `offset` is a word of a block's obsolete bitmap: the only
/// words a commit sets bits in and a write-back may touch.
pub fn is_bitmap_word(offset: u64) -> bool {
    let in_block = offset % BLOCK_ALIGN;
    offset.is_multiple_of(8) && (BITMAP_OFFSET..BITMAP_OFFSET + BITMAP_BYTES).contains(&in_block)
}

/// The offset of bitmap line `n` (of `line` bytes), counting the lines of
/// each block's obsolete bitmap one block after another.
#[cfg(test)]
pub fn bitmap_line(n: u64, line: u64) -> u64 {
    let per_block = BITMAP_BYTES / line;
    (n / per_block) * BLOCK_ALIGN + BITMAP_OFFSET + (n % per_block) * line
}

/// The first slot's offset in a block at `BLOCK_ALIGN`: not a bitmap word.
#[cfg(test)]
pub const FIRST_SLOT_OF_SECOND_BLOCK: u64 = BLOCK_ALIGN + DIRECTORY_OFFSET;

/// The medium offset of the bitmap word holding a slot's obsolete bit,
/// and the bit.
fn bitmap_bit(block: &Block, slot: u32) -> (u64, u64) {
    let word = block.offset() + BITMAP_OFFSET + (slot as u64 / 64) * 8;
    (word, 1 << (slot % 64))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering::Relaxed;

    #[test]
    fn tile_places_fill_each_chunk_in_order_before_the_next() {
        for full_chunk in [MIN_FULL_CHUNK, 12] {
            let mut expected = (0, 0);
            for index in 0..20_000 {
                let (chunk, position, tiles) = tile_place(index, full_chunk);
                assert_eq!((chunk, position), expected, "tile {index}");
                assert_eq!(tiles, 1 << (chunk as u32).min(full_chunk));
                expected = match position + 1 == tiles {
                    true => (chunk + 1, 0),
                    false => (chunk, position + 1),
                };
            }
        }
    }

    #[test]
    fn tiles_prepared_ahead_cover_what_is_wanted_and_are_taken_in_order() {
        // Capacity 3 stays in growing chunks; 2048 reaches full ones (of
        // 32 tiles, a huge page each).
        for (capacity, wanted) in [(3, 100), (2048, 100)] {
            let tiles = Tiles::new(capacity);
            let size_of = |chunk: usize| {
                let first = first_tile_of(chunk as u32, tiles.full_chunk);
                tile_place(first, tiles.full_chunk)
            };
            for chunk in 0..12 {
                assert_eq!((size_of(chunk).0, size_of(chunk).1), (chunk, 0));
            }
            let mut prepared = 0;
            while tiles.prepare_ahead(wanted) {
                prepared += 1;
            }
            let (last_chunk, _, _) = tile_place(wanted - 1, tiles.full_chunk);
            assert_eq!(prepared, last_chunk + 1, "one chunk per call");
            assert_eq!(tiles.chunks.count(), last_chunk + 1);
            for (chunk, slice) in tiles.chunks.iter() {
                let tiles_in_chunk = size_of(chunk).2 as usize;
                assert_eq!(slice.len(), tiles_in_chunk * capacity as usize);
            }
            let taken: Vec<u32> = (0..wanted + 5).map(|_| tiles.take()).collect();
            assert_eq!(taken, (0..wanted + 5).collect::<Vec<u32>>());
            for &index in &taken {
                assert!(tiles.get(index).iter().all(|h| h.begin.load(Relaxed) == 0));
                tiles.get(index)[1].end.store(index as u64 + 1, Relaxed);
            }
            for &index in &taken {
                assert_eq!(tiles.get(index)[1].end.load(Relaxed), index as u64 + 1);
            }
            assert!(!tiles.prepare_ahead(wanted), "nothing more is wanted");
        }
    }

    #[test]
    fn full_tile_chunks_span_a_huge_page() {
        for capacity in [16, 100, 998, 2048] {
            let tiles = Tiles::new(capacity);
            let bytes = (1usize << tiles.full_chunk) * capacity as usize * 32;
            assert!(bytes >= HUGE_PAGE_BYTES, "capacity {capacity}");
            assert!(tiles.full_chunk == MIN_FULL_CHUNK || bytes < 2 * HUGE_PAGE_BYTES);
        }
    }

    #[test]
    fn taken_tiles_are_distinct_zeroed_and_recycled_zeroed() {
        let tiles = Tiles::new(3);
        let taken: Vec<u32> = (0..40).map(|_| tiles.take()).collect();
        assert_eq!(taken, (0..40).collect::<Vec<u32>>());
        for &index in &taken {
            tiles.get(index)[2].begin.store(index as u64 + 1, Relaxed);
        }
        for &index in &taken {
            assert_eq!(tiles.get(index)[2].begin.load(Relaxed), index as u64 + 1);
        }
        tiles.give_back(17);
        assert_eq!(tiles.take(), 17);
        assert_eq!(tiles.get(17)[2].begin.load(Relaxed), 0);
        assert_eq!(tiles.allocated(), 40);
        assert!(tiles.header(39, 3).is_none() && tiles.header(64, 0).is_none());
    }

    #[test]
    fn a_block_set_answers_as_block_lookups_did_when_it_was_taken() {
        let def = TableDef {
            id: 0,
            name: "t".into(),
            max_key_len: 8,
            max_value_len: 8,
            max_record_len: 48,
            slots_per_block: 10,
            block_size: 4096,
            dropped: false,
        };
        let heap = TableHeap::new(def);
        // Region 0 starts at sequence number 5 (earlier blocks were
        // collected before the restart) and has a gap at 7.
        for seq in [5, 6, 8, 9] {
            heap.regions[0]
                .push(Block::new(BLOCK_ALIGN * (seq as u64 + 1), seq))
                .unwrap();
        }
        heap.regions[1]
            .push(Block::new(BLOCK_ALIGN * 20, 0))
            .unwrap();
        heap.vacate(0, 8);
        let set = heap.block_set();
        heap.regions[1]
            .push(Block::new(BLOCK_ALIGN * 21, 1))
            .unwrap();
        for region in 0..3 {
            for block in 0..12 {
                for slot in [0, 9, 10] {
                    let addr = Addr::new(region, block, slot);
                    let then = (region, block) != (1, 1) && heap.block(addr).is_some();
                    assert_eq!(set.contains(addr), then, "{region}/{block}/{slot}");
                }
            }
        }
    }

    /// A small table on a volatile medium, with its free space.
    fn small_heap() -> (TableHeap, Medium, Space) {
        test_heap(8, 48, 4)
    }

    /// A table of 4096-byte blocks and 8-byte keys on a volatile medium,
    /// with its free space.
    fn test_heap(
        max_value_len: u32,
        max_record_len: u32,
        slots_per_block: u32,
    ) -> (TableHeap, Medium, Space) {
        let def = TableDef {
            id: 0,
            name: "t".into(),
            max_key_len: 8,
            max_value_len,
            max_record_len,
            slots_per_block,
            block_size: 4096,
            dropped: false,
        };
        let medium = Medium::volatile(1 << 24, catalog::DATA_START).unwrap();
        let space = Space::new(catalog::DATA_START, Vec::new(), catalog::DATA_START);
        (TableHeap::new(def), medium, space)
    }

    fn append_one(heap: &TableHeap, medium: &Medium, space: &Space, txn: u64) -> Result<Addr> {
        let mut buf = Vec::new();
        heap.encode(&mut buf, txn, b"k", b"v", false);
        heap.append(medium, space, 0, txn, &buf)
    }

    #[test]
    fn appends_in_txn_order_across_blocks_pass_their_checks() {
        let (heap, medium, space) = small_heap();
        for txn in [3, 3, 4, 9, 9, 10, 12] {
            append_one(&heap, &medium, &space, txn).unwrap();
        }
        assert_eq!(heap.regions[0].newest_txn(), 12);
        let second = heap.regions[0].get(1).unwrap();
        assert_eq!(heap.min_txn(&medium, second), Some(9));
    }

    #[test]
    #[should_panic(expected = "time order")]
    fn an_append_below_the_regions_newest_txn_panics() {
        let (heap, medium, space) = small_heap();
        append_one(&heap, &medium, &space, 7).unwrap();
        let _ = append_one(&heap, &medium, &space, 6);
    }

    #[test]
    #[should_panic(expected = "min txns bound the block before")]
    fn a_block_stamped_below_the_block_before_panics() {
        let (heap, medium, space) = small_heap();
        for _ in 0..4 {
            append_one(&heap, &medium, &space, 7).unwrap();
        }
        // The region is full: the next append adds a block stamped with
        // its txn, below the slots of the block before.
        let _ = append_one(&heap, &medium, &space, 5);
    }

    #[test]
    #[should_panic(expected = "append_older: txn 8 is not older")]
    fn an_older_version_not_older_than_the_process_panics() {
        let (heap, medium, space) = small_heap();
        append_one(&heap, &medium, &space, 7).unwrap();
        let mut buf = Vec::new();
        heap.encode(&mut buf, 8, b"k", b"v", false);
        let _ = heap.append_older(&medium, &space, 0, 8, &buf);
    }

    #[test]
    fn older_versions_go_below_the_processes_transactions() {
        let (heap, medium, space) = small_heap();
        let mut buf = Vec::new();
        heap.encode(&mut buf, 1, b"k", b"v", false);
        heap.append_older(&medium, &space, 0, 1, &buf).unwrap();
        append_one(&heap, &medium, &space, 7).unwrap();
        heap.append_older(&medium, &space, 0, 1, &buf).unwrap();
        assert_eq!(heap.regions[0].newest_txn(), 7);
    }

    #[test]
    #[should_panic(expected = "no stale slots")]
    fn a_ready_extent_with_a_slot_left_in_it_is_never_linked() {
        let (heap, medium, space) = small_heap();
        let (offset, _) = space.allocate(&medium, 4096).unwrap();
        medium.store(offset + DIRECTORY_OFFSET, SlotWord::encode(3, false));
        heap.reserve.put(offset);
        let _ = append_one(&heap, &medium, &space, 7);
    }

    #[test]
    #[should_panic(expected = "held once")]
    fn an_extent_held_ready_twice_panics() {
        let (heap, _, _) = small_heap();
        heap.reserve.put(BLOCK_ALIGN * 8);
        heap.reserve.put(BLOCK_ALIGN * 8);
    }

    #[test]
    fn region_push_refuses_sequence_numbers_that_do_not_ascend_or_skip_too_far() {
        let region = Region::default();
        region.push(Block::new(BLOCK_ALIGN, 1000)).unwrap();
        assert_eq!(
            region.len(),
            1001,
            "numbers before the first block cost nothing"
        );
        assert!(region.get(999).is_none() && region.get(1000).is_some());
        region.push(Block::new(2 * BLOCK_ALIGN, 1005)).unwrap();
        assert_eq!(region.len(), 1006, "skipped numbers become vacant entries");
        assert!(region.get(1003).is_none() && region.get(1005).is_some());
        assert!(region.push(Block::new(3 * BLOCK_ALIGN, 1005)).is_err());
        let absurd = 1006 + MAX_SEQ_GAP as u32 + 1;
        assert!(matches!(
            region.push(Block::new(3 * BLOCK_ALIGN, absurd)),
            Err(Error::Corrupt(_))
        ));
        assert_eq!(region.len(), 1006, "nothing allocated for a refused number");
    }

    /// A table of 4096-byte blocks of up to 64 entries whose records take
    /// up to 1024 bytes: three of the largest fill a block by bytes.
    fn byte_bound_heap() -> (TableHeap, Medium, Space) {
        test_heap(1000, 1024, 64)
    }

    fn append_value(
        heap: &TableHeap,
        medium: &Medium,
        space: &Space,
        txn: u64,
        len: usize,
    ) -> Addr {
        let mut buf = Vec::new();
        heap.encode(&mut buf, txn, b"key", &vec![7; len], false);
        heap.append(medium, space, 0, txn, &buf).unwrap()
    }

    /// Recovery's fates, as (slot address, what).
    #[derive(Default)]
    struct Fates(Vec<(Addr, &'static str)>);

    impl RegionVisitor for Fates {
        fn in_checkpoint(&self, _: u64) -> bool {
            false
        }
        fn visit(&mut self, fate: SlotFate<'_>) {
            let what = match fate {
                SlotFate::Redo(_) => "redo",
                SlotFate::InCheckpoint { .. } => "checkpoint",
                SlotFate::Hole { .. } => "hole",
                SlotFate::Undone {
                    starts_tail: true, ..
                } => "tail",
                SlotFate::Undone { .. } => "undone",
            };
            self.0.push((fate.addr(), what));
        }
    }

    /// Recovers region 0 of `def` from the medium, with `last_commit` as
    /// its LCTT entry.
    fn recover(def: &TableDef, medium: &Medium, last_commit: u64) -> Result<(TableHeap, Fates)> {
        let heap = TableHeap::new(def.clone());
        let mut budget = SeqGapBudget::default();
        let blocks = RegionBlocks {
            listed: &[],
            budget: &mut budget,
            stop_above: None,
        };
        let horizon = RegionHorizon {
            last_commit,
            redo_from: 0,
        };
        let mut fates = Fates::default();
        heap.recover_region(medium, 0, blocks, horizon, &mut fates)?;
        Ok((heap, fates))
    }

    #[test]
    fn a_record_that_does_not_fit_seals_its_block_and_recovery_reads_past_the_seal() {
        let (heap, medium, space) = byte_bound_heap();
        for txn in [3, 4, 5, 6] {
            append_value(&heap, &medium, &space, txn, 1000);
        }
        let first = heap.regions[0].get(0).unwrap();
        let (entries, end) = heap.directory(&medium, first);
        assert_eq!(end, DirectoryEnd::Closed);
        assert_eq!(entries.len(), 4, "three records and the seal");
        let seal = entries[3];
        assert!(matches!(seal.word, SlotWord::Written { hole: true, .. }) && seal.space == 0);
        assert!(record::load_place(&medium, first, 3).is_seal());
        assert!(heap.is_obsolete(&medium, Addr::new(0, 0, 3)));
        assert_eq!(heap.entries_in(&medium, first), 4);
        let (recovered, fates) = recover(&heap.def, &medium, 6).unwrap();
        let kinds: Vec<&str> = fates.0.iter().map(|f| f.1).take(6).collect();
        assert_eq!(kinds, ["redo", "redo", "redo", "hole", "redo", "tail"]);
        let cursor = *recovered.regions[0].cursor.lock();
        assert_eq!((cursor.block, cursor.slot), (1, 1));
        assert_eq!(
            cursor.free_end as u64,
            4096 - record::record_space(12 + 3 + 1000)
        );
        let mut value = Vec::new();
        let read = recovered.read_live(&medium, Addr::new(0, 1, 0), &mut value);
        assert!(matches!(read, SlotRead::Value) && value == vec![7; 1000]);
    }

    #[test]
    fn a_tail_entry_left_unplaced_clears_what_follows_without_reading_it() {
        let (heap, medium, space) = byte_bound_heap();
        append_value(&heap, &medium, &space, 3, 100);
        append_value(&heap, &medium, &space, 3, 200);
        let torn = append_value(&heap, &medium, &space, 5, 300);
        append_value(&heap, &medium, &space, 5, 10);
        let block = heap.regions[0].get(0).unwrap();
        // A crash kept the word of slot 2 but not its place, and slot 5's
        // position holds bytes that look like a committed entry.
        record::store_place(&medium, block, torn.slot(), record::Place::UNSET);
        let fake = record::txn_at(block, 5);
        medium.store(fake, SlotWord::encode(3, false));
        let (recovered, fates) = recover(&heap.def, &medium, 4).unwrap();
        let kinds: Vec<&str> = fates.0.iter().map(|f| f.1).take(4).collect();
        assert_eq!(kinds, ["redo", "redo", "tail", "undone"]);
        assert_eq!(medium.load(fake), TXN_EMPTY, "cleared, not judged");
        let cursor = *recovered.regions[0].cursor.lock();
        let prefix_end =
            4096 - record::record_space(12 + 3 + 100) - record::record_space(12 + 3 + 200);
        assert_eq!(
            (cursor.block, cursor.slot, cursor.free_end as u64),
            (0, 2, prefix_end)
        );
    }

    #[test]
    fn a_crash_after_small_appends_over_a_dropped_tail_of_large_records_recovers() {
        let (heap, medium, space) = byte_bound_heap();
        append_value(&heap, &medium, &space, 3, 100);
        for _ in 0..3 {
            append_value(&heap, &medium, &space, 5, 1000);
        }
        let (recovered, _) = recover(&heap.def, &medium, 4).unwrap();
        // Small records take the dropped tail's slots and more: the
        // directory grows past where the large records began.
        let mut last = None;
        for _ in 0..40 {
            last = Some(append_value(&recovered, &medium, &space, 7, 1));
        }
        let next = record::txn_at(recovered.block(last.unwrap()).unwrap(), 41);
        assert_eq!(medium.load(next), TXN_EMPTY, "past the last entry");
        let (_, fates) = recover(&heap.def, &medium, 7).unwrap();
        let redone = fates.0.iter().filter(|f| f.1 == "redo").count();
        assert_eq!(redone, 41);
    }

    #[test]
    fn any_flipped_bit_of_a_place_is_corrupt() {
        let (heap, medium, space) = byte_bound_heap();
        // One transaction's records, so a record moved onto another one
        // still passes its checksum; the large ones seal the first block.
        let mut addrs = Vec::new();
        for len in [100, 200, 64, 1000, 1000, 1000, 1000] {
            addrs.push(append_value(&heap, &medium, &space, 3, len));
        }
        let first = heap.regions[0].get(0).unwrap();
        let (entries, end) = heap.directory(&medium, first);
        assert_eq!(end, DirectoryEnd::Closed);
        assert!(entries.last().unwrap().space == 0, "sealed");
        let (recovered, _) = recover(&heap.def, &medium, 3).unwrap();
        let untrusted = recovered.regions[0].get(0).unwrap();
        for entry in &entries {
            let place = record::load_place(&medium, first, entry.slot);
            for bit in 0..32 {
                let flipped = record::Place::from_bits(place.bits() ^ (1 << bit));
                record::store_place(&medium, first, entry.slot, flipped);
                let what = format!("slot {} bit {bit}", entry.slot);
                let recovery = recover(&heap.def, &medium, 3);
                assert!(matches!(recovery, Err(Error::Corrupt(_))), "{what}");
                let addr = Addr::new(0, 0, entry.slot);
                let mut out = Vec::new();
                if addrs.contains(&addr) {
                    let read = recovered.read_live(&medium, addr, &mut out);
                    assert!(matches!(read, SlotRead::Damaged), "{what}");
                }
                let mut damaged = Vec::new();
                recovered.verify_block(&medium, 0, untrusted, |addr| damaged.push(addr));
                assert!(!damaged.is_empty(), "{what}");
            }
            record::store_place(&medium, first, entry.slot, place);
        }
        assert!(recover(&heap.def, &medium, 3).is_ok());
    }

    #[test]
    fn a_committed_entry_out_of_place_is_corrupt() {
        let (heap, medium, space) = byte_bound_heap();
        append_value(&heap, &medium, &space, 3, 100);
        let second = append_value(&heap, &medium, &space, 3, 200);
        let block = heap.regions[0].get(0).unwrap();
        let place = record::load_place(&medium, block, second.slot());
        let moved = record::Place::record(place.offset() - 8, false);
        record::store_place(&medium, block, second.slot(), moved);
        assert!(matches!(
            recover(&heap.def, &medium, 3),
            Err(Error::Corrupt(_))
        ));
        let mut out = Vec::new();
        assert!(matches!(
            heap.read_live(&medium, second, &mut out),
            SlotRead::Damaged
        ));
    }
}
