//! Slotted blocks that pass their checks but hold hostile values. A block
//! of a few versions (live, a tombstone, a hole, an uncommitted tail) is
//! built by the heap's own append; one field of a directory entry (txn
//! word, place) or of a record header (key length,
//! flags, value length) is set to a hostile value, the entry's txn word
//! check bits and the record's checksum are recomputed, and every reader
//! runs over the block: reads, tombstone and key lookups, decoding, the
//! directory walk, verification, usage, and recovery's scan of the
//! region. Each must answer (a value no longer than the table allows, a
//! damaged version, `Corrupt`), never panic, and never size an
//! allocation by an unchecked length. `REBOUND_FUZZ_CASES` sets the
//! cases, `REBOUND_SEED` the proptest seed.

#![allow(clippy::indexing_slicing, clippy::unwrap_used)]

use super::record::{place_offset, txn_offset, Place};
use super::slot::SlotWord;
use super::*;
use crate::catalog::MAX_TXN_ID;
use crate::fuzz_support::hostile;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

/// Cases in the normal suite.
const CASES: u32 = 20_000;

fn config() -> Config {
    crate::fuzz_support::config("slotted block", CASES)
}

/// A field of the block: offset in the block, width in bytes, name, and
/// the entry whose word and record it belongs to.
type Field = (u64, usize, &'static str, u32);

const MAX_KEY: u32 = 16;
const MAX_VALUE: u32 = 64;
const ENTRIES: u32 = 8;

fn table_def() -> TableDef {
    let (record, slots, block) = geometry(MAX_KEY, MAX_VALUE, ENTRIES);
    TableDef {
        id: 0,
        name: "t".into(),
        max_key_len: MAX_KEY,
        max_value_len: MAX_VALUE,
        max_record_len: record,
        slots_per_block: slots,
        block_size: block,
        dropped: false,
    }
}

/// The medium with one block of versions (txns 3, 3, 4 committed, one of
/// them a tombstone, one aborted, 6 uncommitted), the block's offset, and
/// the block's bytes.
fn built() -> (Medium, u64, Vec<u8>) {
    let medium = Medium::volatile(1 << 22, catalog::DATA_START).unwrap();
    let space = Space::new(catalog::DATA_START, Vec::new(), catalog::DATA_START);
    let heap = TableHeap::new(table_def());
    let mut buf = Vec::new();
    let versions: [(u64, &[u8], &[u8], bool); 5] = [
        (3, b"alpha", b"first value", false),
        (3, b"b", &[7; 64], false),
        (4, b"gamma-key-16byte", b"", true),
        (5, b"delta", b"aborted", false),
        (6, b"epsilon", b"not committed", false),
    ];
    for (txn, key, value, tombstone) in versions {
        heap.encode(&mut buf, txn, key, value, tombstone);
        let addr = heap.append(&medium, &space, 0, txn, &buf).unwrap();
        if txn == 5 {
            heap.make_hole(&medium, addr, txn);
        }
    }
    let offset = heap.regions[0].get(0).unwrap().offset();
    let mut bytes = vec![0u8; heap.def.block_size as usize];
    medium.read_bytes(offset, &mut bytes);
    (medium, offset, bytes)
}

/// Entry `slot`'s place as the block's bytes hold it.
fn place_in(block: &[u8], slot: u32) -> Place {
    let at = place_offset(slot) as usize;
    Place::from_bits(u32::from_le_bytes(block[at..at + 4].try_into().unwrap()))
}

/// The entry and record header fields of the written entries.
fn fields(block: &[u8]) -> Vec<Field> {
    let mut fields = Vec::new();
    for slot in 0..ENTRIES {
        let word = txn_offset(slot) as usize;
        if block[word..word + 8] == [0; 8] {
            break;
        }
        fields.push((word as u64, 8, "txn word", slot));
        fields.push((place_offset(slot), 4, "place", slot));
        let record = place_in(block, slot).offset();
        fields.push((record + 4, 2, "key length", slot));
        fields.push((record + 6, 2, "flags", slot));
        fields.push((record + 8, 4, "value length", slot));
    }
    fields
}

/// Gives entry `slot`'s txn word valid check bits and its record (if its
/// place and lengths allow) a matching checksum, as a hostile writer
/// would.
fn reseal(block: &mut [u8], slot: u32) {
    let entry = txn_offset(slot) as usize;
    let word = u64::from_le_bytes(block[entry..entry + 8].try_into().unwrap());
    let txn = word & MAX_TXN_ID;
    if txn == 0 {
        return;
    }
    let resealed = SlotWord::encode(txn, word >> 63 == 1);
    block[entry..entry + 8].copy_from_slice(&resealed.to_le_bytes());
    let end = match slot {
        0 => block.len(),
        _ => place_in(block, slot - 1).offset() as usize,
    };
    let at = place_in(block, slot).offset() as usize;
    let Some(space) = end
        .checked_sub(at)
        .filter(|&s| s >= 16 && end <= block.len())
    else {
        return;
    };
    let key = u16::from_le_bytes([block[at + 4], block[at + 5]]) as usize;
    let value = u32::from_le_bytes(block[at + 8..at + 12].try_into().unwrap()) as usize;
    if (12 + key).checked_add(value).is_none_or(|end| end > space) {
        return;
    }
    let crc = slot::crc(txn, &block[at + 4..at + 12 + key + value]);
    block[at..at + 4].copy_from_slice(&crc.to_le_bytes());
}

/// Records every fate recovery hands over.
#[derive(Default)]
struct Fates {
    redone_keys: Vec<usize>,
}

impl RegionVisitor for Fates {
    fn in_checkpoint(&self, _txn: u64) -> bool {
        false
    }
    fn visit(&mut self, fate: SlotFate<'_>) {
        if let SlotFate::Redo(version) = fate {
            self.redone_keys.push(version.key.len());
        }
    }
}

/// Runs every reader over the block at `offset`, as a block from the
/// medium (not trusted) and, for the reads, as one this process wrote.
fn read_everything(medium: &Medium, offset: u64) -> std::result::Result<(), TestCaseError> {
    for trusted in [false, true] {
        let heap = TableHeap::new(table_def());
        heap.regions[0].push(Block::new(offset, 0)).unwrap();
        let block = heap.regions[0].get(0).unwrap();
        if trusted {
            block.trust();
        }
        let mut out = Vec::new();
        for slot in 0..ENTRIES + 1 {
            let addr = Addr::new(0, 0, slot);
            if let SlotRead::Value = heap.read_live(medium, addr, &mut out) {
                prop_assert!(out.len() <= MAX_VALUE as usize);
            }
            let _ = heap.tombstone(medium, addr);
            prop_assert!(heap.read_key(medium, addr).len() <= MAX_KEY as usize);
            if let Some(content) = heap.decode_checked(medium, addr) {
                prop_assert!(content.key.len() <= MAX_KEY as usize);
                prop_assert!(content.value.len() <= MAX_VALUE as usize);
            }
            out.clear();
            if let Some(len) = heap.copy_slot(medium, addr, &mut out) {
                prop_assert!(len as u64 <= 8 + heap.def.max_record_len as u64);
            }
            let _ = heap.slot_bytes(medium, addr);
            if let Some(ranges) = heap.version_ranges(medium, addr) {
                prop_assert!(ranges[0].0 + ranges[0].1 <= offset + heap.def.block_size as u64);
            }
        }
        let mut entries = 0;
        heap.walk_directory(medium, block, |_| entries += 1);
        prop_assert!(entries <= ENTRIES);
        let usage = heap.block_usage(medium, 0, block);
        prop_assert!(usage.bytes <= heap.def.block_size as u64);
        heap.verify_block(medium, 0, block, |_| {});
        let _ = heap.entries_in(medium, block);
    }
    Ok(())
}

/// Recovery's scan of the region (its head is the block): `Corrupt` or a
/// fate per entry, the redone keys within the table's limit.
fn recover(medium: &Medium) -> std::result::Result<(), TestCaseError> {
    let heap = TableHeap::new(table_def());
    let mut budget = SeqGapBudget::default();
    let blocks = RegionBlocks {
        listed: &[],
        budget: &mut budget,
        stop_above: None,
    };
    let horizon = RegionHorizon {
        last_commit: 5,
        redo_from: 0,
    };
    let mut fates = Fates::default();
    match heap.recover_region(medium, 0, blocks, horizon, &mut fates) {
        Ok(_) | Err(Error::Corrupt(_)) => {}
        Err(e) => return Err(TestCaseError::fail(format!("recovery gave {e}"))),
    }
    prop_assert!(fates.redone_keys.iter().all(|&k| k <= MAX_KEY as usize));
    Ok(())
}

#[test]
fn blocks_with_hostile_entries_and_records_read_as_damage_or_within_limits() {
    let (medium, offset, pristine) = built();
    let fields = fields(&pristine);
    assert_eq!(
        fields.len(),
        5 * 5,
        "five written entries, five fields each"
    );
    // The pristine block reads back and recovers (txn 6 undone).
    read_everything(&medium, offset).unwrap();
    recover(&medium).unwrap();
    let strategy = (0..fields.len(), any::<u8>(), any::<u64>(), any::<bool>());
    let result = TestRunner::new(config()).run(&strategy, |(i, choice, any, sealed)| {
        let (at, width, what, slot) = fields[i];
        let mut block = pristine.clone();
        let at = at as usize;
        let mut old = [0u8; 8];
        old[..width].copy_from_slice(&block[at..at + width]);
        let value = hostile(choice, u64::from_le_bytes(old), any, width);
        block[at..at + width].copy_from_slice(&value.to_le_bytes()[..width]);
        if sealed {
            reseal(&mut block, slot);
        }
        medium.write_bytes(offset, &block);
        read_everything(&medium, offset)
            .and_then(|()| recover(&medium))
            .map_err(|e| TestCaseError::fail(format!("{what} of slot {slot} = {value:#x}: {e}")))
    });
    if let Err(e) = result {
        panic!("{e}\nreplay: REBOUND_SEED=<the seed above> cargo test -p rebound --lib heap::fuzz_tests");
    }
}
