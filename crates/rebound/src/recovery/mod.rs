//! Restart: turn whatever the medium holds into a consistent store.
//!
//! This is the full-scan ("Zen-style", no index checkpoint) design: every
//! region is walked from its first block, committed versions are collected,
//! the uncommitted tail of each region is cleared (undo), and each primary
//! index is bulk-loaded bottom-up from the newest committed version per key.
//! It stays as the no-checkpoint design and as a cross-check for the
//! checkpoint-based recovery.
//!
//! A slot is committed iff `min_txn(block) ≤ txn ≤ LCTT[worker]` and it is
//! not a hole. The first slot that is not (and is not a hole) starts the
//! region's tail; every written slot after it is cleared, and a committed
//! slot after it means the medium broke the prefix invariant: `Corrupt`.

use crate::catalog::{self, TableDef, MAX_TXN_ID, MAX_WORKERS};
use crate::error::{Error, Result};
use crate::heap::{Addr, Block, Cursor, Space, TableHeap, HOLE_BIT};
use crate::index::BTree;
use crate::medium::Medium;
use crate::txn::{Clock, Store, TableRt};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What recovery did and how long each phase took.
#[derive(Debug, Clone, Default)]
pub struct RecoveryReport {
    /// True when the medium was freshly formatted (nothing to recover).
    pub fresh: bool,
    /// Superblock, catalog and LCTT.
    pub metadata: Duration,
    /// Walking regions: redo of committed versions and undo of the tails.
    pub undo_redo: Duration,
    /// Bottom-up index builds.
    pub index_build: Duration,
    /// From the start of `open` until transactions are accepted.
    pub total: Duration,
    pub tables: usize,
    pub blocks: u64,
    pub versions_scanned: u64,
    pub versions_committed: u64,
    pub versions_undone: u64,
    pub index_entries: u64,
}

/// A committed version found by the scan.
struct Found {
    key: Vec<u8>,
    txn: u64,
    addr: Addr,
    tombstone: bool,
}

/// Formats a zeroed medium of at least `DATA_START` bytes.
pub fn format(medium: &Medium) -> Result<()> {
    catalog::format(medium, unix_now())
}

/// Builds an empty store on a freshly formatted medium.
pub fn fresh(medium: Medium, instance: u64) -> Result<(Store, RecoveryReport)> {
    let start = Instant::now();
    let clock = Clock::recover(&medium, 1)?;
    let store = Store::new(medium, Space::new(catalog::DATA_START, Vec::new()), clock, boxcar::Vec::new(), instance);
    let report = RecoveryReport {
        fresh: true,
        total: start.elapsed(),
        ..Default::default()
    };
    Ok((store, report))
}

/// Recovers a store from a medium that holds a database.
pub fn recover(medium: Medium, instance: u64, started: Instant) -> Result<(Store, RecoveryReport)> {
    let mut report = RecoveryReport::default();
    let phase = Instant::now();
    catalog::validate_superblock(&medium)?;
    let defs = catalog::read_tables(&medium)?;
    validate_defs(&defs)?;
    let lctt = (0..MAX_WORKERS)
        .map(|w| catalog::last_commit(&medium, w))
        .collect::<Result<Vec<_>>>()?;
    let lease = catalog::txn_lease(&medium)?;
    if lctt.iter().any(|&t| t >= lease.max(1)) {
        return Err(Error::Corrupt(
            "a committed txn id is not below the txn-id lease".into(),
        ));
    }
    report.metadata = phase.elapsed();
    report.tables = defs.len();

    let phase = Instant::now();
    let mut extents = Vec::new();
    let mut scanned = Vec::with_capacity(defs.len());
    for def in defs {
        let heap = TableHeap::new(def);
        let found = scan_table(&medium, &heap, &lctt, &mut extents, &mut report)?;
        scanned.push((heap, found));
    }
    medium.fence()?;
    report.undo_redo = phase.elapsed();

    let phase = Instant::now();
    let tables = boxcar::Vec::new();
    for (heap, found) in scanned {
        let index = build_index(found);
        report.index_entries += index.len() as u64;
        tables.push(Arc::new(TableRt {
            heap,
            index,
            instance,
        }));
    }
    report.index_build = phase.elapsed();

    let clock = Clock::recover(&medium, lease)?;
    let space = Space::new(catalog::DATA_START, extents);
    report.total = started.elapsed();
    Ok((
        Store::new(medium, space, clock, tables, instance),
        report,
    ))
}

fn validate_defs(defs: &[TableDef]) -> Result<()> {
    for (i, def) in defs.iter().enumerate() {
        let (slot, slots, block) = crate::heap::geometry(def.max_key_len, def.max_value_len);
        let sane = def.id as usize == i
            && def.max_key_len as usize <= crate::index::MAX_KEY_LEN
            && (slot, slots, block) == (def.slot_size, def.slots_per_block, def.block_size);
        if !sane {
            return Err(Error::Corrupt(format!(
                "table {:?} has an impossible geometry",
                def.name
            )));
        }
    }
    Ok(())
}

fn scan_table(
    medium: &Medium,
    heap: &TableHeap,
    lctt: &[u64],
    extents: &mut Vec<(u64, u64)>,
    report: &mut RecoveryReport,
) -> Result<Vec<Found>> {
    let mut found = Vec::new();
    for (worker, &last_commit) in lctt.iter().enumerate() {
        load_blocks(medium, heap, worker, extents)?;
        report.blocks += heap.regions[worker].blocks.count() as u64;
        scan_region(medium, heap, worker, last_commit, &mut found, report)?;
    }
    Ok(found)
}

/// Follows a region's block chain, validating every header.
fn load_blocks(
    medium: &Medium,
    heap: &TableHeap,
    worker: usize,
    extents: &mut Vec<(u64, u64)>,
) -> Result<()> {
    let region = &heap.regions[worker];
    let block_size = heap.def.block_size as u64;
    let max_blocks = medium.len() / block_size;
    let mut offset = catalog::region_head(medium, heap.def.id, worker);
    let mut seq = 0u64;
    while offset != 0 {
        if seq >= max_blocks {
            return Err(Error::Corrupt(format!(
                "block chain of table {} region {worker} loops",
                heap.def.id
            )));
        }
        let (next, min_txn) = heap.validate_block(medium, offset, worker, seq)?;
        region
            .blocks
            .push(Block::new(offset, min_txn, heap.def.slots_per_block));
        extents.push((offset, block_size));
        offset = next;
        seq += 1;
    }
    Ok(())
}

/// Redo (collect committed versions) and undo (clear the tail) of one region.
fn scan_region(
    medium: &Medium,
    heap: &TableHeap,
    worker: usize,
    last_commit: u64,
    found: &mut Vec<Found>,
    report: &mut RecoveryReport,
) -> Result<()> {
    let region = &heap.regions[worker];
    let capacity = heap.def.slots_per_block;
    let mut tail: Option<Cursor> = None;
    for (b, block) in region.blocks.iter() {
        for s in 0..capacity {
            let addr = Addr::new(worker, b as u32, s);
            let word = heap.slot_txn(medium, addr);
            let txn = word & MAX_TXN_ID;
            let current = word != 0 && txn >= block.min_txn;
            let committed = current && word & HOLE_BIT == 0 && txn <= last_commit;
            if tail.is_some() {
                if committed {
                    return Err(Error::Corrupt(format!(
                        "committed version after the uncommitted tail at {addr:?}"
                    )));
                }
                if word != 0 {
                    heap.clear_slot(medium, addr);
                    report.versions_undone += current as u64;
                }
                continue;
            }
            report.versions_scanned += current as u64;
            if current && word & HOLE_BIT != 0 {
                continue;
            }
            if !committed {
                tail = Some(Cursor {
                    block: b as u32,
                    slot: s,
                });
                if word != 0 {
                    heap.clear_slot(medium, addr);
                    report.versions_undone += current as u64;
                }
                continue;
            }
            let content = heap.decode_checked(medium, addr).ok_or_else(|| {
                Error::Corrupt(format!("committed version at {addr:?} fails its checksum"))
            })?;
            report.versions_committed += 1;
            found.push(Found {
                key: content.key,
                txn,
                addr,
                tombstone: content.tombstone,
            });
        }
    }
    let blocks = region.blocks.count() as u32;
    *region.cursor.lock() = tail.unwrap_or(Cursor {
        block: blocks.saturating_sub(1),
        slot: if blocks == 0 { 0 } else { capacity },
    });
    Ok(())
}

/// The newest committed version per key, tombstones dropped, loaded bottom-up.
fn build_index(mut found: Vec<Found>) -> BTree {
    found.sort_unstable_by(|a, b| a.key.cmp(&b.key).then(a.txn.cmp(&b.txn)));
    let mut latest: Vec<Found> = Vec::with_capacity(found.len());
    for f in found {
        match latest.last_mut() {
            Some(last) if last.key == f.key => *last = f,
            _ => latest.push(f),
        }
    }
    BTree::bulk_load(
        latest
            .into_iter()
            .filter(|f| !f.tombstone)
            .map(|f| (f.key, f.addr.0)),
    )
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}
