//! Versions in a slotted block: directory entries and the records they
//! place (layouts in the module above). Records are contiguous from the
//! block's end down, so an entry holds only where its record starts: its
//! space runs up to the record of the entry before. Every read finds a
//! record through its entry and checks the place against the entry
//! before it (and, in a block from the medium, the one after), so a
//! damaged offset or length is caught before anything is read or sized
//! by it. Decoding is free of indexing and `unwrap` (denied by lint).
#![deny(clippy::indexing_slicing, clippy::unwrap_used)]

use super::extent::{self, Owner, Pointer, POINTER_BYTES};
use super::slot::{self, SlotHeader, FLAG_TOMBSTONE, RECORD_CHECKED_FROM, RECORD_HEADER};
use super::space::Space;
use super::tile::PENDING;
use super::{Addr, Block, SlotContent, SlotRead, SlotWord, TableHeap, VersionAt};
use super::{DIRECTORY_OFFSET, ENTRY_BYTES, TXN_EMPTY};
use crate::catalog;
use crate::medium::Medium;

/// The least space a record takes: its header and a one-byte key.
pub const MIN_RECORD_SPACE: u64 = (RECORD_HEADER + 1).next_multiple_of(8);

/// Bytes a record of `len` bytes takes in a block (records are 8-aligned).
pub fn record_space(len: u64) -> u64 {
    len.next_multiple_of(8)
}

/// Offset in a block of the first byte after `entries` directory entries.
pub fn directory_end(entries: u32) -> u64 {
    DIRECTORY_OFFSET + entries as u64 * ENTRY_BYTES
}

/// Medium offset of the first of the 12 bytes of entry `slot` of
/// `block`: its txn word then its place for an even slot, the other way
/// round for an odd one (see the module above).
pub fn entry_at(block: &Block, slot: u32) -> u64 {
    block.offset() + directory_end(slot)
}

/// Offset in a block of entry `slot`'s txn word (8-aligned).
pub fn txn_offset(slot: u32) -> u64 {
    directory_end(slot) + if slot % 2 == 1 { 4 } else { 0 }
}

/// Medium offset of entry `slot`'s txn word.
pub fn txn_at(block: &Block, slot: u32) -> u64 {
    block.offset() + txn_offset(slot)
}

/// Offset in a block of entry `slot`'s place (4-aligned).
pub fn place_offset(slot: u32) -> u64 {
    directory_end(slot & !1) + 8 + 4 * (slot % 2) as u64
}

/// Medium offset of the word holding the places of entry `slot` and of
/// the other entry of its pair, and the shift of `slot`'s place in it.
fn place_word_at(block: &Block, slot: u32) -> (u64, u32) {
    (block.offset() + place_offset(slot & !1), 32 * (slot % 2))
}

/// Bit of a place that says its version is a tombstone (a copy of the
/// record's flag, so that a writer learns it without reading the record).
const TOMBSTONE_BIT: u32 = 1 << 31;
/// Bit of a place that makes a hole a seal: it takes no space, and the
/// directory ends after it. A flag rather than "a hole of space 0" so
/// that no single flipped offset bit turns the hole after an entry into
/// a seal (it would end the directory early and pass the flip unseen).
const SEAL_BIT: u32 = 1 << 30;
/// Blocks are far smaller than the offset bits below the flags.
const _: () = assert!(super::DEFAULT_BLOCK_BYTES < SEAL_BIT as u64);

/// The second half of a directory entry: where its record starts in the
/// block (bits 0..30; in bytes, as blocks take 18 bits and the always
/// zero low three make a flip there visible), whether it is a seal (bit
/// 30) and whether its version is a tombstone (bit 31). Its record ends
/// where the record of the entry before starts; 0 = never written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Place(u32);

impl Place {
    /// The place of an entry no append wrote.
    pub const UNSET: Place = Place(0);

    /// The place of a record at `offset` in its block.
    pub fn record(offset: u64, tombstone: bool) -> Place {
        debug_assert!(offset < SEAL_BIT as u64);
        Place(offset as u32 | if tombstone { TOMBSTONE_BIT } else { 0 })
    }

    /// The place of a seal whose entry follows the record at `offset`.
    pub fn seal(offset: u64) -> Place {
        debug_assert!(offset < SEAL_BIT as u64);
        Place(offset as u32 | SEAL_BIT)
    }

    pub fn offset(self) -> u64 {
        (self.0 & !(TOMBSTONE_BIT | SEAL_BIT)) as u64
    }

    pub fn is_tombstone(self) -> bool {
        self.0 & TOMBSTONE_BIT != 0
    }

    pub fn is_seal(self) -> bool {
        self.0 & SEAL_BIT != 0
    }

    /// Whether no append stored it (positions are zeroed before use).
    pub fn is_unset(self) -> bool {
        self.0 == 0
    }

    /// The place whose stored form is `bits`.
    #[cfg(test)]
    pub fn from_bits(bits: u32) -> Place {
        Place(bits)
    }

    /// The stored form of the place.
    #[cfg(test)]
    pub fn bits(self) -> u32 {
        self.0
    }
}

/// Entry `slot`'s place.
pub fn load_place(medium: &Medium, block: &Block, slot: u32) -> Place {
    let (word, shift) = place_word_at(block, slot);
    Place((medium.load(word) >> shift) as u32)
}

/// Stores entry `slot`'s place, leaving the other entry of its pair as it
/// is (its writer may be changing it meanwhile).
pub fn store_place(medium: &Medium, block: &Block, slot: u32, place: Place) {
    let (word, shift) = place_word_at(block, slot);
    medium.store_bits(word, 0xFFFF_FFFF << shift, (place.0 as u64) << shift);
}

/// Entry `slot`'s place, and where its record ends: where the record of
/// the entry before starts (one load when they share a word), the block
/// size for entry 0.
pub fn place_and_end(medium: &Medium, block: &Block, slot: u32, block_size: u64) -> (Place, u64) {
    let (word, shift) = place_word_at(block, slot);
    let pair = medium.load(word);
    let place = Place((pair >> shift) as u32);
    let end = match (slot, shift) {
        (0, _) => block_size,
        (_, 0) => load_place(medium, block, slot - 1).offset(),
        _ => Place(pair as u32).offset(),
    };
    (place, end)
}

/// Whether an encoded version (txn word, then record) is a tombstone.
pub fn encoded_tombstone(version: &[u8]) -> bool {
    let flags = version.get(14..16).and_then(|f| f.try_into().ok());
    flags.is_some_and(|f| u16::from_le_bytes(f) & FLAG_TOMBSTONE != 0)
}

/// Whether an encoded version's record points to an extent.
pub fn encoded_out_of_line(version: &[u8]) -> bool {
    let flags = version.get(14..16).and_then(|f| f.try_into().ok());
    flags.is_some_and(|f| u16::from_le_bytes(f) & extent::FLAG_OUT_OF_LINE != 0)
}

/// The space entry `slot`'s record takes if `place` can be its place in
/// a block whose records so far start at `free_end`: a record lies right
/// below them, 8-aligned, clear of its own entry, and takes at least
/// `MIN_RECORD_SPACE`; a seal (only where `seal_allowed`: the entry is a
/// hole) takes none and sits at `free_end`. `None` if it cannot.
pub fn is_placed(slot: u32, place: Place, free_end: u64, seal_allowed: bool) -> Option<u64> {
    let offset = place.offset();
    if !offset.is_multiple_of(8) || offset < directory_end(slot + 1) {
        return None;
    }
    if place.is_seal() {
        let seal = seal_allowed && !place.is_tombstone() && offset == free_end;
        return seal.then_some(0);
    }
    let space = free_end.checked_sub(offset)?;
    (space >= MIN_RECORD_SPACE).then_some(space)
}

/// How a walk over a block's directory ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DirectoryEnd {
    /// Every entry the block can hold is written, or it is sealed.
    Closed,
    /// Entry `slot` was never written; records start at `free_end`.
    Open { slot: u32, free_end: u64 },
    /// Entry `slot` fails its checks: nothing after it can be placed.
    Damaged { slot: u32 },
}

/// One written entry of a directory walk.
#[derive(Debug, Clone, Copy)]
pub struct Entry {
    pub slot: u32,
    pub word: SlotWord,
    /// Bytes its record takes (0 for a seal).
    pub space: u64,
}

/// A version's record: where it is, and its header, its lengths checked
/// against the table and the space its entry gives it.
#[derive(Clone, Copy)]
pub(super) struct Located {
    at: u64,
    header: SlotHeader,
}

impl TableHeap {
    /// Visits the written entries of a block in slot order, each checked
    /// against the one before; returns how the directory ends.
    pub fn walk_directory(
        &self,
        medium: &Medium,
        block: &Block,
        mut visit: impl FnMut(Entry),
    ) -> DirectoryEnd {
        let mut free_end = self.def.block_size as u64;
        for slot in 0..self.def.slots_per_block {
            // Appends leave room for one more entry (a seal) after each
            // record but the last a block can hold.
            if directory_end(slot + 1) > free_end {
                return DirectoryEnd::Damaged { slot };
            }
            let word = SlotWord::decode(medium.load(txn_at(block, slot)));
            let hole = match word {
                SlotWord::Empty => return DirectoryEnd::Open { slot, free_end },
                SlotWord::Invalid => return DirectoryEnd::Damaged { slot },
                SlotWord::Written { hole, .. } => hole,
            };
            let place = load_place(medium, block, slot);
            let Some(space) = is_placed(slot, place, free_end, hole) else {
                return DirectoryEnd::Damaged { slot };
            };
            visit(Entry { slot, word, space });
            free_end = place.offset();
            if place.is_seal() {
                return DirectoryEnd::Closed;
            }
        }
        DirectoryEnd::Closed
    }

    /// The written entries of a block and how its directory ends.
    pub fn directory(&self, medium: &Medium, block: &Block) -> (Vec<Entry>, DirectoryEnd) {
        let mut entries = Vec::new();
        let end = self.walk_directory(medium, block, |entry| entries.push(entry));
        (entries, end)
    }

    /// Finds the record of the slot at `addr` through its directory
    /// entry; `None` once its block was collected, or if the entry, the
    /// ones beside it or the record header do not agree.
    fn locate(&self, medium: &Medium, addr: Addr) -> Option<Located> {
        self.locate_in(medium, self.block(addr)?, addr.slot())
    }

    /// `locate` in a block the caller already found.
    #[inline]
    fn locate_in(&self, medium: &Medium, block: &Block, slot: u32) -> Option<Located> {
        self.locate_record(medium, block, slot, true)
    }

    /// `locate_in`, with the entry's txn word in the header only if
    /// `with_word` (0 otherwise). A read of an inline value in a trusted
    /// block needs neither a checksum nor an extent owner, so it leaves
    /// the word unread: for one odd entry in four it lies on the line
    /// after the entry's place.
    #[inline]
    fn locate_record(
        &self,
        medium: &Medium,
        block: &Block,
        slot: u32,
        with_word: bool,
    ) -> Option<Located> {
        let (place, space) = self.record_place(medium, block, slot)?;
        if !block.is_trusted() && !self.next_agrees(medium, block, slot, place) {
            return None;
        }
        let at = block.offset() + place.offset();
        let word = match with_word {
            true => medium.load(txn_at(block, slot)),
            false => 0,
        };
        let header = SlotHeader::read(medium, word, at);
        let agrees = place.is_tombstone() == header.is_tombstone();
        // A rewrite by the same transaction may leave more space than
        // its record needs, never less.
        let fits = self.fits(&header) && header.record_len() <= space;
        (agrees && fits).then_some(Located { at, header })
    }

    /// Entry `slot`'s place and the space its record may take, if the
    /// place lies right below the record of the entry before, within the
    /// block. A block this process wrote or verified has no flipped bit
    /// to catch: its record need only lie in the block, and the place
    /// before (on another line for 1 read in 8) stays unread.
    #[inline]
    fn record_place(&self, medium: &Medium, block: &Block, slot: u32) -> Option<(Place, u64)> {
        let block_size = self.def.block_size as u64;
        let (place, end) = match block.is_trusted() {
            true => (load_place(medium, block, slot), block_size),
            false => place_and_end(medium, block, slot, block_size),
        };
        let space = is_placed(slot, place, end, false).filter(|_| end <= block_size)?;
        Some((place, space))
    }

    /// Whether the entry after `slot`, if written, lies right below it.
    /// A record's space is what lies between its place and the one
    /// before, so a flipped offset bit that moves a record down (onto a
    /// later record of the same transaction, whose checksum passes) is
    /// caught here, one that moves it up by the check against the entry
    /// before. An unset place is a crash's torn append, cleared by
    /// recovery.
    fn next_agrees(&self, medium: &Medium, block: &Block, slot: u32, place: Place) -> bool {
        let next = slot + 1;
        if next >= self.def.slots_per_block {
            return true;
        }
        let hole = match SlotWord::decode(medium.load(txn_at(block, next))) {
            SlotWord::Empty => return true,
            SlotWord::Invalid => return false,
            SlotWord::Written { hole, .. } => hole,
        };
        let next_place = load_place(medium, block, next);
        next_place.is_unset() || is_placed(next, next_place, place.offset(), hole).is_some()
    }

    /// Whether a header's lengths fit this table's limits.
    fn fits(&self, header: &SlotHeader) -> bool {
        (1..=self.def.max_key_len as usize).contains(&header.key_len)
            && header.value_len <= self.def.max_value_len as usize
            && header.flags_valid()
    }

    /// The extent owner a version's pointer must name.
    fn owner(&self, addr: Addr, header: &SlotHeader) -> Owner {
        Owner {
            table: self.def.id,
            addr,
            txn: header.txn(),
        }
    }

    /// Decodes an out-of-line record's pointer, `None` unless the value
    /// it names is within the table's limit.
    fn pointer(&self, bytes: &[u8]) -> Option<Pointer> {
        Pointer::decode(bytes).filter(|p| p.len <= self.def.max_value_len as u64)
    }

    /// What a reader finds in a published version: the value, verified
    /// against the record checksum unless the block is trusted, so a
    /// damaged value is never served.
    ///
    /// The value lands in `out` (its earlier contents are dropped), so a
    /// reader that keeps one buffer reads without allocating.
    pub fn read_live(&self, medium: &Medium, addr: Addr, out: &mut Vec<u8>) -> SlotRead {
        match self.block(addr) {
            Some(block) => self.read_live_in(medium, (block, None), addr, out),
            None => SlotRead::Gone,
        }
    }

    /// `read_live` of a version `find_version` found.
    pub fn read_found(&self, medium: &Medium, version: &VersionAt, out: &mut Vec<u8>) -> SlotRead {
        let at = (version.block, version.record);
        self.read_live_in(medium, at, version.addr, out)
    }

    /// Reads the version at `addr` in `block`, from its record if the
    /// caller located it already.
    #[inline]
    fn read_live_in(
        &self,
        medium: &Medium,
        (block, located): (&Block, Option<Located>),
        addr: Addr,
        out: &mut Vec<u8>,
    ) -> SlotRead {
        let trusted = block.is_trusted();
        let located = located.or_else(|| self.locate_record(medium, block, addr.slot(), !trusted));
        let Some(mut found) = located else {
            return SlotRead::Damaged;
        };
        let mut intact = match trusted {
            true => {
                let header = &found.header;
                out.resize(header.value_len, 0);
                medium.read_at(found.at + RECORD_HEADER + header.key_len as u64, out);
                true
            }
            false => read_verified(medium, &found, out),
        };
        if trusted && found.header.is_out_of_line() {
            // The extent's owner names the writer's txn.
            found.header.word = medium.load(txn_at(block, addr.slot()));
        }
        let header = &found.header;
        if intact && header.is_out_of_line() {
            intact = self.pointer(out).is_some_and(|pointer| {
                extent::read(medium, pointer, self.owner(addr, header), !trusted, out)
            });
        }
        match (intact, header.is_tombstone()) {
            (false, _) => SlotRead::Damaged,
            (true, true) => SlotRead::Deleted,
            (true, false) => SlotRead::Value,
        }
    }

    /// Verifies every live version of a block that came from the medium
    /// and, if all pass, trusts the block from then on (reads skip the
    /// checksum). The region's last block is left for later: versions may
    /// still be appended to it. Returns whether the block is trusted now.
    pub fn scrub_block(&self, medium: &Medium, worker: usize, seq: usize) -> bool {
        let Some(region) = self.regions.get(worker) else {
            return false;
        };
        let Some(block) = region.get(seq) else {
            return false;
        };
        if block.is_trusted() || block.is_vacant() || seq + 1 >= region.len() {
            return block.is_trusted();
        }
        let mut damaged = false;
        let end = self.verify_block(medium, worker, block, |_| damaged = true);
        if damaged || matches!(end.1, DirectoryEnd::Damaged { .. }) {
            return false;
        }
        block.trust();
        true
    }

    /// Verifies the live versions of a block, calling `damaged` with each
    /// that fails (and with the entry a damaged directory ends at);
    /// returns how many were verified and how the directory ends.
    pub(super) fn verify_block(
        &self,
        medium: &Medium,
        worker: usize,
        block: &Block,
        mut damaged: impl FnMut(Addr),
    ) -> (u64, DirectoryEnd) {
        let mut verified = 0;
        let mut buf = Vec::new();
        let end = self.walk_directory(medium, block, |entry| {
            if let SlotWord::Written { hole: false, .. } = entry.word {
                verified += 1;
                let addr = Addr::new(worker, block.seq, entry.slot);
                let checked = match self.is_obsolete(medium, addr) {
                    true => self.verify_record_into(medium, addr, &mut buf),
                    false => self.verify_into(medium, addr, &mut buf),
                };
                if checked.is_none() {
                    damaged(addr);
                }
            }
        });
        if let DirectoryEnd::Damaged { slot } = end {
            damaged(Addr::new(worker, block.seq, slot));
        }
        (verified, end)
    }

    /// Verifies every live version of every full block (each region's
    /// current block may be half written: its versions are checked when
    /// read), calling `damaged` with each that fails; returns how many
    /// versions were verified.
    pub fn verify_full_blocks(&self, medium: &Medium, mut damaged: impl FnMut(Addr)) -> u64 {
        let mut verified = 0;
        for (worker, region) in self.regions.iter().enumerate() {
            for seq in 0..region.len().saturating_sub(1) {
                let Some(block) = region.get(seq) else {
                    continue;
                };
                verified += self.verify_block(medium, worker, block, &mut damaged).0;
            }
        }
        verified
    }

    /// Whether a version is a tombstone; `None` if its record is damaged.
    /// A flag is trusted only with what a tombstone has: no value bytes
    /// and, as that makes it cheap, a matching checksum; so a flipped flag
    /// never turns a live version into a deletion or back.
    pub fn tombstone(&self, medium: &Medium, addr: Addr) -> Option<bool> {
        let block = self.block(addr)?;
        if block.is_trusted() {
            // The entry's copy of the flag: the record stays unread.
            let (place, _) = self.record_place(medium, block, addr.slot())?;
            return Some(place.is_tombstone());
        }
        let header = self.locate(medium, addr)?.header;
        if header.value_len > 0 {
            return (!header.is_tombstone()).then_some(false);
        }
        let mut buf = Vec::new();
        self.verify_into(medium, addr, &mut buf)
            .map(|(_, tombstone)| tombstone)
    }

    /// Whether the record of a version `find_tiled` found holds `key`; if
    /// it does and was committed, the version keeps where its record is,
    /// for the read that follows (a pending version's writer may still
    /// write its record over, with another value or as a deletion).
    /// Unverified, like a trusted read: that read verifies the record
    /// where its block asks for it.
    pub fn holds_key(&self, medium: &Medium, version: &mut VersionAt, key: &[u8]) -> bool {
        // Before the record is read: a committed record never changes.
        let committed = version
            .header
            .begin
            .load(std::sync::atomic::Ordering::Acquire)
            & PENDING
            == 0;
        let with_word = !version.block.is_trusted();
        let slot = version.addr.slot();
        let Some(found) = self.locate_record(medium, version.block, slot, with_word) else {
            return false;
        };
        let holds =
            found.header.key_len == key.len() && medium.equals_at(found.at + RECORD_HEADER, key);
        if holds && committed {
            version.record = Some(found);
        }
        holds
    }

    /// Appends the key of the version at `addr` to `out`; returns its
    /// length (0 if its record cannot be found). Unverified: use
    /// `decode_checked` for versions read back from the medium.
    pub fn read_key_into(&self, medium: &Medium, addr: Addr, out: &mut Vec<u8>) -> usize {
        let Some(found) = self.locate(medium, addr) else {
            return 0;
        };
        let len = found.header.key_len;
        let start = out.len();
        out.resize(start + len, 0);
        if let Some(key) = out.get_mut(start..) {
            medium.read_at(found.at + RECORD_HEADER, key);
        }
        len
    }

    pub fn read_key(&self, medium: &Medium, addr: Addr) -> Vec<u8> {
        let mut key = Vec::new();
        self.read_key_into(medium, addr, &mut key);
        key
    }

    /// Decodes and verifies a version read back from the medium.
    /// `None` if its bytes do not form a valid version (torn or corrupt).
    pub fn decode_checked(&self, medium: &Medium, addr: Addr) -> Option<SlotContent> {
        let mut buf = Vec::new();
        let (key_len, tombstone) = self.verify_into(medium, addr, &mut buf)?;
        let body = buf.get(KEY_AT..)?;
        let (key, value) = body.split_at_checked(key_len)?;
        Some(SlotContent {
            txn: self.slot_txn(medium, addr) & catalog::MAX_TXN_ID,
            tombstone,
            key: key.to_vec(),
            value: value.to_vec(),
        })
    }

    /// The key of a live version whose record verifies (an out-of-line
    /// value is not read: its extent may be freed once the version died).
    pub fn verified_key(&self, medium: &Medium, addr: Addr) -> Option<Vec<u8>> {
        let mut buf = Vec::new();
        let (key_len, _) = self.verify_record_into(medium, addr, &mut buf)?;
        buf.get(KEY_AT..KEY_AT + key_len).map(<[u8]>::to_vec)
    }

    /// Verifies a live version, leaving its record from the key length on
    /// (lengths, key, value; the key at `KEY_AT`) in `buf`; returns the
    /// key length and whether it is a tombstone. Lengths are checked
    /// against the table's limits and the record's space before anything
    /// is sized by them.
    pub(super) fn verify_into(
        &self,
        medium: &Medium,
        addr: Addr,
        buf: &mut Vec<u8>,
    ) -> Option<(usize, bool)> {
        self.verify_version(medium, addr, buf, true)
    }

    /// `verify_into` of the record alone: an out-of-line value's pointer
    /// stays in `buf`, unread (recovery needs only keys, and the extent
    /// of an obsolete version may be freed already).
    pub(super) fn verify_record_into(
        &self,
        medium: &Medium,
        addr: Addr,
        buf: &mut Vec<u8>,
    ) -> Option<(usize, bool)> {
        self.verify_version(medium, addr, buf, false)
    }

    fn verify_version(
        &self,
        medium: &Medium,
        addr: Addr,
        buf: &mut Vec<u8>,
        with_value: bool,
    ) -> Option<(usize, bool)> {
        let found = self.locate(medium, addr)?;
        let header = &found.header;
        let live = matches!(
            SlotWord::decode(header.word),
            SlotWord::Written { hole: false, .. }
        );
        if !live || !header.flags_valid() {
            return None;
        }
        buf.resize(KEY_AT + header.key_len + header.value_len, 0);
        medium.read_at(found.at + RECORD_CHECKED_FROM, buf);
        if slot::crc(header.txn(), buf) != header.crc {
            return None;
        }
        if header.is_out_of_line() && with_value {
            let value_at = KEY_AT + header.key_len;
            let pointer = self.pointer(buf.get(value_at..)?)?;
            let mut value = Vec::new();
            if !extent::read(medium, pointer, self.owner(addr, header), true, &mut value) {
                return None;
            }
            buf.truncate(value_at);
            buf.extend_from_slice(&value);
        }
        Some((header.key_len, header.is_tombstone()))
    }

    /// Appends the encoded version at `addr` (its txn word, then its
    /// record without padding), as the redo log carries it; returns how
    /// many bytes, or `None` once its block is gone or its record cannot
    /// be found.
    pub fn copy_slot(&self, medium: &Medium, addr: Addr, out: &mut Vec<u8>) -> Option<usize> {
        let found = self.locate(medium, addr)?;
        if found.header.is_out_of_line() {
            return self.copy_out_of_line(medium, addr, out);
        }
        let record = found.header.record_len() as usize;
        let start = out.len();
        out.extend_from_slice(&found.header.word.to_le_bytes());
        out.resize(start + 8 + record, 0);
        medium.read_at(found.at, out.get_mut(start + 8..)?);
        Some(8 + record)
    }

    /// `copy_slot` for a version whose value is out of line: the log
    /// carries the value itself, encoded as an inline version would be.
    fn copy_out_of_line(&self, medium: &Medium, addr: Addr, out: &mut Vec<u8>) -> Option<usize> {
        let content = self.decode_checked(medium, addr)?;
        let mut encoded = Vec::new();
        slot::encode(
            &mut encoded,
            content.txn,
            &content.key,
            &content.value,
            content.tombstone,
        );
        out.extend_from_slice(&encoded);
        Some(encoded.len())
    }

    /// The raw txn word of a slot's directory entry (see `SlotWord`).
    pub(super) fn slot_txn(&self, medium: &Medium, addr: Addr) -> u64 {
        self.block(addr)
            .map_or(TXN_EMPTY, |block| medium.load(txn_at(block, addr.slot())))
    }

    /// The decoded txn word of a slot.
    pub fn slot_word(&self, medium: &Medium, addr: Addr) -> SlotWord {
        SlotWord::decode(self.slot_txn(medium, addr))
    }

    /// Bytes of the encoded version at `addr` (txn word, record header,
    /// key, value); the largest a version can have if its record cannot
    /// be found.
    pub fn slot_bytes(&self, medium: &Medium, addr: Addr) -> u32 {
        let Some(found) = self.locate(medium, addr) else {
            return 8 + self.def.max_record_len;
        };
        let header = &found.header;
        if !header.is_out_of_line() {
            return (8 + header.record_len()) as u32;
        }
        let mut bytes = [0u8; POINTER_BYTES];
        medium.read_at(found.at + RECORD_HEADER + header.key_len as u64, &mut bytes);
        let value_len = self
            .pointer(&bytes)
            .map_or(self.def.max_value_len as u64, |p| p.len);
        (8 + RECORD_HEADER + header.key_len as u64 + value_len) as u32
    }

    /// The medium ranges that hold the version at `addr`: its record (all
    /// the space its entry gives it) and its directory entry, for the
    /// commit to write back; `None` once its block was collected.
    pub fn version_ranges(&self, medium: &Medium, addr: Addr) -> Option<[(u64, u64); 2]> {
        let block = self.block(addr)?;
        let block_size = self.def.block_size as u64;
        let (place, end) = place_and_end(medium, block, addr.slot(), block_size);
        // Never past the block, whatever the entries say.
        let offset = place.offset().min(block_size);
        let space = end.min(block_size).saturating_sub(offset);
        let entry = (entry_at(block, addr.slot()), ENTRY_BYTES);
        Some([(block.offset() + offset, space), entry])
    }

    /// Writes `version` (encoded, by this transaction) over the version
    /// at `addr` that the same transaction wrote, if its record fits the
    /// space the first one took; returns whether it did. The entry keeps
    /// its place, so the directory stays contiguous.
    pub fn rewrite(&self, medium: &Medium, addr: Addr, version: &[u8]) -> bool {
        let Some(block) = self.block(addr) else {
            return false;
        };
        let slot = addr.slot();
        let (place, end) = place_and_end(medium, block, slot, self.def.block_size as u64);
        let offset = place.offset();
        let Some(record) = version.get(8..) else {
            return false;
        };
        assert!(
            !encoded_out_of_line(version),
            "a version going out of line is appended, never rewritten"
        );
        // An extent belongs to one version for as long as its block
        // lives: a value going out of line, or one that was, moves on.
        let old = SlotHeader::read(
            medium,
            medium.load(txn_at(block, slot)),
            block.offset() + offset,
        );
        if record.len() as u64 > end.saturating_sub(offset) || old.is_out_of_line() {
            return false;
        }
        medium.write_bytes(block.offset() + offset, record);
        let tombstone = encoded_tombstone(version);
        store_place(medium, block, slot, Place::record(offset, tombstone));
        true
    }

    /// The extents the written entries of a block own (committed versions
    /// and holes alike), as (offset, length): what recovery lists as used
    /// and what freeing the block frees.
    pub fn owned_extents(&self, medium: &Medium, worker: usize, block: &Block) -> Vec<(u64, u64)> {
        let mut owned = Vec::new();
        if !self.holds_extents(medium, block) {
            return owned;
        }
        self.walk_directory(medium, block, |entry| {
            let addr = Addr::new(worker, block.seq, entry.slot);
            if let Some(range) = self.owned_extent(medium, addr) {
                owned.push(range);
            }
        });
        owned
    }

    /// The extent of an out-of-line version (live or a hole) whose record
    /// verifies and whose extent names it.
    pub(super) fn owned_extent(&self, medium: &Medium, addr: Addr) -> Option<(u64, u64)> {
        let found = self.locate(medium, addr)?;
        let header = &found.header;
        let written = matches!(SlotWord::decode(header.word), SlotWord::Written { .. });
        if !written || !header.is_out_of_line() || !header.flags_valid() {
            return None;
        }
        let mut buf = vec![0u8; KEY_AT + header.key_len + header.value_len];
        medium.read_at(found.at + RECORD_CHECKED_FROM, &mut buf);
        if slot::crc(header.txn(), &buf) != header.crc {
            return None;
        }
        let pointer = self.pointer(buf.get(KEY_AT + header.key_len..)?)?;
        extent::is_owned(medium, pointer, self.owner(addr, header)).then(|| pointer.range())
    }

    /// Frees the extents a block's versions own, before the block itself
    /// is freed (nobody can reach its versions any more); returns their
    /// bytes.
    pub fn free_extents(
        &self,
        medium: &Medium,
        space: &Space,
        worker: usize,
        block: &Block,
    ) -> u64 {
        let owned = self.owned_extents(medium, worker, block);
        for &(offset, len) in &owned {
            space.free(medium, offset, len);
        }
        owned.iter().map(|&(_, len)| len).sum()
    }

    /// Frees the extents of the obsolete versions of a block that no
    /// reader can reach any more (`unreachable` is asked with the
    /// version's address and header: the obsolete bit only chooses, as it
    /// chooses GC's blocks, so a damaged bit never frees a live value); returns their bytes, and whether none was left
    /// for a reader. Each extent's header is
    /// zeroed and fenced first, so that it is owned by nobody after a
    /// crash and freeing the block later does not free it again.
    pub fn free_dead_extents(
        &self,
        medium: &Medium,
        space: &Space,
        worker: usize,
        block: &Block,
        unreachable: impl Fn(Addr, &super::VersionHeader) -> bool,
    ) -> crate::error::Result<(u64, bool)> {
        let mut dead = Vec::new();
        let mut complete = true;
        self.walk_directory(medium, block, |entry| {
            let addr = Addr::new(worker, block.seq, entry.slot);
            let live = matches!(entry.word, SlotWord::Written { hole: false, .. });
            if !live || entry.space > self.pointer_record_space() || !self.is_obsolete(medium, addr)
            {
                return;
            }
            let Some(extent) = self.owned_extent(medium, addr) else {
                return;
            };
            match self.header(addr).is_some_and(|h| unreachable(addr, h)) {
                true => dead.push(extent),
                false => complete = false,
            }
        });
        for &(offset, _) in &dead {
            medium.zero(offset, extent::EXTENT_HEADER);
            medium.persist(offset, extent::EXTENT_HEADER);
        }
        medium.fence()?;
        for &(offset, len) in &dead {
            space.free(medium, offset, len);
        }
        Ok((dead.iter().map(|&(_, len)| len).sum(), complete))
    }

    /// The most space a record pointing to an extent takes: it is written
    /// once, in the space its key and pointer need (`rewrite` never
    /// writes one), so a larger record is inline and its header need not
    /// be read to know it.
    fn pointer_record_space(&self) -> u64 {
        record_space(RECORD_HEADER + self.def.max_key_len as u64 + POINTER_BYTES as u64)
    }

    /// Turns an aborted version into a hole that recovery skips.
    pub fn make_hole(&self, medium: &Medium, addr: Addr, txn: u64) {
        let Some(block) = self.block(addr) else {
            return;
        };
        medium.store(txn_at(block, addr.slot()), SlotWord::encode(txn, true));
        // The whole entry: recovery checks a hole's place too, and a
        // medium may make durable no more than the range asked for.
        medium.persist(entry_at(block, addr.slot()), ENTRY_BYTES);
        self.set_obsolete(medium, addr);
    }

    /// Clears the entry of a slot written by a transaction that never
    /// committed (or a position past a region's tail): its txn word, and
    /// its place, so that a place is set only by the append that wrote it
    /// (a crash that keeps a later append's word but not its place then
    /// leaves the place unset, never an old one that looks right).
    pub(super) fn clear_slot(&self, medium: &Medium, addr: Addr) {
        let Some(block) = self.block(addr) else {
            return;
        };
        let slot = addr.slot();
        let at = txn_at(block, slot);
        let place_set = !load_place(medium, block, slot).is_unset();
        if medium.load(at) != TXN_EMPTY || place_set {
            medium.store(at, TXN_EMPTY);
            store_place(medium, block, slot, Place::UNSET);
            medium.persist(entry_at(block, slot), ENTRY_BYTES);
        }
    }
}

/// Where the key starts in what `verify_into` leaves: after the key and
/// value lengths and the flags.
pub const KEY_AT: usize = (RECORD_HEADER - RECORD_CHECKED_FROM) as usize;

/// Reads a record's value into `out` and checks the record checksum. The
/// checked bytes (lengths, flags, key, value) are contiguous: one copy,
/// one checksum, then the value is moved to the front.
fn read_verified(medium: &Medium, found: &Located, out: &mut Vec<u8>) -> bool {
    let header = &found.header;
    let head_len = KEY_AT + header.key_len;
    out.resize(head_len + header.value_len, 0);
    medium.read_at(found.at + RECORD_CHECKED_FROM, out);
    let computed = slot::crc(header.txn(), out);
    out.drain(..head_len);
    computed == header.crc
}
