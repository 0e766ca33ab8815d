//! Recovering a region (FIR 4.4): registering the blocks a crash left in
//! it and sorting its slots into committed versions, holes and the
//! uncommitted tail, which is cleared. Only the heap knows the slot and
//! block layout; recovery supplies what it knows of the region (its LCTT
//! entry, where redo starts, which committed versions the checkpoint
//! holds) and is told each slot's fate, in slot order.
//!
//! A slot is committed iff `min_txn(block) ≤ txn ≤ last_commit` and it is
//! not a hole. The first slot that is not (and is not a hole) starts the
//! region's tail; every written slot from there on is cleared, and a
//! committed slot after it means the medium broke the prefix invariant
//! (invariant 1): `Corrupt`.

use super::record::{self, KEY_AT};
use super::slot::HOLE_BIT;
use super::{block, Addr, Block, Cursor, SlotWord, TableHeap, MAX_SEQ_GAP, MIN_TXN_AT};
use crate::catalog::{self, MAX_TXN_ID};
use crate::error::{Error, Result};
use crate::medium::Medium;

/// What recovery knows of a region before its slots are read.
#[derive(Debug, Clone, Copy)]
pub struct RegionHorizon {
    /// The region's LCTT entry: its transactions up to this id committed.
    pub last_commit: u64,
    /// Committed versions below this txn id are all in the checkpoint
    /// (0: none is), so blocks that hold only such versions are not read.
    pub redo_from: u64,
}

/// The block sequence numbers a table's regions may skip in all: each
/// costs an entry in a region's block table, so a file that skips 4 Mi
/// numbers at every block of every region cannot make recovery allocate
/// without bound. One budget serves all regions of a table.
#[derive(Debug)]
pub struct SeqGapBudget {
    left: u64,
}

impl Default for SeqGapBudget {
    fn default() -> SeqGapBudget {
        SeqGapBudget { left: MAX_SEQ_GAP }
    }
}

/// The blocks of a region recovery starts from: those a checkpoint lists,
/// as (sequence number, offset), and the table's budget of skipped
/// sequence numbers.
pub struct RegionBlocks<'a> {
    pub listed: &'a [(u64, u64)],
    pub budget: &'a mut SeqGapBudget,
    /// Beside a writer (a read lease's horizon): the chain ends before
    /// the first block allocated above it, or beyond the image's end,
    /// which the writer may be linking as it is read.
    pub stop_above: Option<u64>,
}

/// A committed version, its slot verified against its checksum.
#[derive(Debug, Clone, Copy)]
pub struct CommittedVersion<'s> {
    pub addr: Addr,
    pub txn: u64,
    pub key: &'s [u8],
    pub tombstone: bool,
}

/// What a slot of the uncommitted tail held before it was cleared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Held {
    /// Never written (its txn word was zero).
    Nothing,
    /// Left over from earlier use of the space: below its block's min txn.
    Stale { txn: u64 },
    /// A hole (an aborted write) behind the tail's start.
    Hole { txn: u64 },
    /// A version of a transaction after the region's LCTT entry.
    Uncommitted { txn: u64 },
}

impl Held {
    /// Whether the slot held a version of the region's current use of the
    /// space (a hole or an uncommitted version).
    pub fn is_current(self) -> bool {
        matches!(self, Held::Hole { .. } | Held::Uncommitted { .. })
    }
}

/// The fate of one slot of a recovered region.
#[derive(Debug, Clone, Copy)]
pub enum SlotFate<'s> {
    /// A committed version the checkpoint lacks: to be redone.
    Redo(CommittedVersion<'s>),
    /// A committed version the checkpoint holds; left as it is, not read.
    InCheckpoint { addr: Addr, txn: u64 },
    /// A hole (an aborted write) before the tail; left as it is.
    Hole { addr: Addr, txn: u64 },
    /// A slot from the tail's start on: cleared, its obsolete bit too.
    /// `starts_tail` for the first of them.
    Undone {
        addr: Addr,
        held: Held,
        starts_tail: bool,
    },
}

impl SlotFate<'_> {
    pub fn addr(&self) -> Addr {
        match *self {
            SlotFate::Redo(version) => version.addr,
            SlotFate::InCheckpoint { addr, .. }
            | SlotFate::Hole { addr, .. }
            | SlotFate::Undone { addr, .. } => addr,
        }
    }
}

/// What recovery does with the slots of a region.
pub trait RegionVisitor {
    /// Whether the checkpoint holds the committed version of `txn` (one
    /// below `RegionHorizon::redo_from` always is): it is then neither
    /// read nor redone.
    fn in_checkpoint(&self, txn: u64) -> bool;
    /// One slot's fate, in slot order (holes below the redo start and
    /// versions the checkpoint holds included).
    fn visit(&mut self, fate: SlotFate<'_>);
}

/// How the scan reads one slot before deciding its fate.
#[derive(Clone, Copy)]
enum Class {
    /// `min_txn ≤ txn ≤ last_commit`, not a hole.
    Committed { txn: u64 },
    /// Anything else: a hole in the committed prefix, or from the tail's
    /// start on a slot to clear.
    Other(Held),
}

impl Class {
    /// The class of a slot whose txn word is `word`, in a block whose min
    /// txn is `min_txn`, of a region whose LCTT entry is `last_commit`.
    /// `None` for a damaged word.
    fn of(word: u64, min_txn: u64, last_commit: u64) -> Option<Class> {
        let (txn, hole) = match SlotWord::decode(word) {
            SlotWord::Empty => return Some(Class::Other(Held::Nothing)),
            SlotWord::Written { txn, hole } => (txn, hole),
            SlotWord::Invalid => return None,
        };
        Some(match () {
            _ if txn < min_txn => Class::Other(Held::Stale { txn }),
            _ if hole => Class::Other(Held::Hole { txn }),
            _ if txn <= last_commit => Class::Committed { txn },
            _ => Class::Other(Held::Uncommitted { txn }),
        })
    }
}

impl TableHeap {
    /// Recovers region `worker`: registers its blocks (those `blocks`
    /// lists, then the chain that continues from the last of them or from
    /// the region head), reads its slots from the first block that can
    /// hold a version at or after `horizon.redo_from`, tells `visitor`
    /// each slot's fate, clears the uncommitted tail, and leaves the
    /// region's cursor at the tail's start (or after its last block).
    /// Returns the number of blocks the region holds.
    ///
    /// Damage (a header, link, sequence number or txn word that fails its
    /// checks, a committed version after the tail's start or one that
    /// fails its checksum) is `Corrupt`; slots are cleared only from the
    /// tail's start on, so a region found damaged keeps every committed
    /// version before the damage.
    pub fn recover_region(
        &self,
        medium: &Medium,
        worker: usize,
        blocks: RegionBlocks<'_>,
        horizon: RegionHorizon,
        visitor: &mut impl RegionVisitor,
    ) -> Result<u64> {
        self.load_blocks(medium, worker, blocks)?;
        let count = self.regions[worker].present().count() as u64;
        self.scan_region(medium, worker, horizon, visitor)?;
        Ok(count)
    }

    /// Registers a region's blocks: those listed by the checkpoint (bounds
    /// checked only; headers are validated when scanned), then the chain
    /// that continues from the last of them (or from the region head),
    /// validated. Sequence numbers may skip (collected blocks) but always
    /// ascend, and the numbers skipped are charged to the table's budget.
    fn load_blocks(&self, medium: &Medium, worker: usize, blocks: RegionBlocks<'_>) -> Result<()> {
        let RegionBlocks {
            listed,
            budget,
            stop_above,
        } = blocks;
        let region = &self.regions[worker];
        let mut charge = |seq: u64| -> Result<()> {
            budget.left = budget
                .left
                .checked_sub(region.vacancies_before(seq))
                .ok_or_else(|| {
                    Error::Corrupt(format!(
                        "table {} skips more than {} block sequence numbers",
                        self.def.id, MAX_SEQ_GAP
                    ))
                })?;
            Ok(())
        };
        let block_size = self.def.block_size as u64;
        for &(seq, offset) in listed {
            if !block::in_data_area(medium, offset, block_size) {
                return Err(Error::Corrupt(format!(
                    "checkpoint lists a block outside the medium at {offset}"
                )));
            }
            charge(seq)?;
            region.push(Block::new(offset, seq as u32))?;
        }
        let (mut min_seq, mut offset) = match listed.last() {
            None => (0, catalog::region_head(medium, self.def.id, worker)?),
            Some(&(seq, at)) => (seq + 1, self.validate_block(medium, at, worker, seq)?.0),
        };
        let max_blocks = medium.len() / block_size;
        let mut chained = 0;
        while offset != 0 {
            if chained >= max_blocks {
                return Err(Error::Corrupt(format!(
                    "block chain of table {} region {worker} loops",
                    self.def.id
                )));
            }
            if stop_above.is_some() && !block::in_data_area(medium, offset, block_size) {
                break;
            }
            let (seq, next, min_txn) = self.validate_chained(medium, offset, worker, min_seq)?;
            // Min txns ascend along the chain: nothing at or below the
            // horizon follows.
            if stop_above.is_some_and(|horizon| min_txn > horizon) {
                break;
            }
            charge(seq)?;
            region.push(Block::new(offset, seq as u32))?;
            offset = next;
            min_seq = seq + 1;
            chained += 1;
        }
        Ok(())
    }

    /// Position (among the region's present blocks) of the first block
    /// that can hold a slot with txn id ≥ `t_low`: the block before the
    /// first one allocated at or after `t_low` (invariant 3).
    fn first_block_from(
        &self,
        medium: &Medium,
        worker: usize,
        blocks: &[&Block],
        t_low: u64,
    ) -> Result<usize> {
        let (mut lo, mut hi) = (0usize, blocks.len());
        while lo < hi {
            let mid = (lo + hi) / 2;
            let block = &blocks[mid];
            let (_, min_txn) =
                self.validate_block(medium, block.offset(), worker, block.seq as u64)?;
            if min_txn < t_low {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        Ok(lo.saturating_sub(1))
    }

    /// Decides the fate of every slot of a region from the redo start on:
    /// committed versions are verified and handed over, the tail cleared.
    fn scan_region(
        &self,
        medium: &Medium,
        worker: usize,
        horizon: RegionHorizon,
        visitor: &mut impl RegionVisitor,
    ) -> Result<()> {
        let RegionHorizon {
            last_commit,
            redo_from,
        } = horizon;
        let region = &self.regions[worker];
        let capacity = self.def.slots_per_block;
        let blocks: Vec<&Block> = region.present().collect();
        // The block table only takes ascending numbers (`Region::push`).
        assert!(
            blocks.windows(2).all(|pair| pair[0].seq < pair[1].seq),
            "a region's blocks out of sequence order"
        );
        let first = match redo_from {
            0 => 0,
            _ => self.first_block_from(medium, worker, &blocks, redo_from)?,
        };
        let mut scan = Scan::default();
        let mut buf = Vec::new();
        for block in &blocks[first.min(blocks.len())..] {
            let b = block.seq;
            let (_, min_txn) = self.validate_block(medium, block.offset(), worker, b as u64)?;
            // The read side of the time order `append` asserts
            // (invariants 1 and 3), checked on what the medium holds, so a
            // breach is damage (`Corrupt`).
            if scan.newest > min_txn && scan.tail.is_none() {
                return Err(Error::Corrupt(format!(
                    "table {} region {worker}: block {b}'s min txn {min_txn} is below txn {} of a block before",
                    self.def.id, scan.newest
                )));
            }
            let bounds = (min_txn, last_commit);
            self.scan_block(
                medium,
                (worker, block),
                bounds,
                &mut scan,
                visitor,
                &mut buf,
            )?;
        }
        let tail = scan.tail;
        if let Some(tail) = tail {
            self.unstamp_blocks_after(medium, &blocks, tail.block);
        }
        *region.cursor.lock() = tail.unwrap_or(match blocks.last() {
            Some(last) => Cursor {
                block: last.seq,
                slot: capacity,
                free_end: 0,
            },
            None => Cursor::default(),
        });
        Ok(())
    }

    /// Decides the fate of every entry of one block, in slot order. Each
    /// entry's record must lie right below the one before it; while the
    /// entries so far are placed so, the next position holds an entry or
    /// zero (records never reach below their own entry and room for one
    /// more). In the tail, past an entry a crash left unplaced or where
    /// the directory meets the tail's records, the positions up to where
    /// the region continues are only cleared: appends after recovery
    /// start there, and every position their entries may reach must read
    /// as unwritten.
    fn scan_block(
        &self,
        medium: &Medium,
        (worker, block): (usize, &Block),
        (min_txn, last_commit): (u64, u64),
        scan: &mut Scan,
        visitor: &mut impl RegionVisitor,
        buf: &mut Vec<u8>,
    ) -> Result<()> {
        let b = block.seq;
        let mut free_end = self.def.block_size as u64;
        let mut placed = true;
        for s in 0..self.def.slots_per_block {
            let addr = Addr::new(worker, b, s);
            if record::directory_end(s + 1) > free_end {
                let Some(tail) = scan.tail else {
                    return Err(Error::Corrupt(format!(
                        "directory of table {} runs into its records at {addr:?}",
                        self.def.id
                    )));
                };
                // The tail's records are dropped: what lies below where
                // the region continues is free, and cleared as such.
                if record::directory_end(s + 1) > self.continues_below(tail, b) {
                    return Ok(());
                }
                placed = false;
            }
            if !placed {
                self.undo(medium, addr);
                visitor.visit(SlotFate::Undone {
                    addr,
                    held: Held::Nothing,
                    starts_tail: false,
                });
                continue;
            }
            let word = medium.load(record::txn_at(block, s));
            let class = Class::of(word, min_txn, last_commit).ok_or_else(|| {
                Error::Corrupt(format!(
                    "slot {addr:?} of table {} has a damaged txn word",
                    self.def.id
                ))
            })?;
            let place = record::load_place(medium, block, s);
            let is_placed = record::is_placed(s, place, free_end, word & HOLE_BIT != 0).is_some();
            let misplaced = || {
                Error::Corrupt(format!(
                    "record of {addr:?} of table {} is not where its entry and the one before say",
                    self.def.id
                ))
            };
            let txn = match (class, scan.tail.is_some()) {
                (Class::Committed { .. }, true) => {
                    return Err(Error::Corrupt(format!(
                        "committed version after the uncommitted tail at {addr:?}"
                    )))
                }
                // A hole whose writer never committed, found beside a
                // place a crash left stale (its line torn, or never
                // fenced): the abort's word made it, the append's place
                // did not. Nothing committed follows it; the tail starts.
                (Class::Other(Held::Hole { txn }), false) if !is_placed && txn > last_commit => {
                    scan.tail = Some(Cursor {
                        block: b,
                        slot: s,
                        free_end: free_end as u32,
                    });
                    placed = false;
                    self.undo(medium, addr);
                    let held = Held::Hole { txn };
                    visitor.visit(SlotFate::Undone {
                        addr,
                        held,
                        starts_tail: true,
                    });
                    continue;
                }
                (Class::Other(Held::Hole { txn }), false) => {
                    if !is_placed {
                        return Err(misplaced());
                    }
                    visitor.visit(SlotFate::Hole { addr, txn });
                    free_end = place.offset();
                    if place.is_seal() {
                        // The directory ends here.
                        return Ok(());
                    }
                    continue;
                }
                (Class::Other(held), in_tail) => {
                    if !in_tail {
                        scan.tail = Some(Cursor {
                            block: b,
                            slot: s,
                            free_end: free_end as u32,
                        });
                    }
                    // A written entry in its place tells where the next
                    // one's record ends; an unwritten or torn one does not.
                    placed = is_placed && held.is_current();
                    if placed {
                        free_end = place.offset();
                    }
                    self.undo(medium, addr);
                    visitor.visit(SlotFate::Undone {
                        addr,
                        held,
                        starts_tail: !in_tail,
                    });
                    continue;
                }
                (Class::Committed { txn }, false) => txn,
            };
            // A committed version is no hole, so never a seal.
            if !is_placed {
                return Err(misplaced());
            }
            free_end = place.offset();
            if txn < scan.newest {
                return Err(Error::Corrupt(format!(
                    "committed version of txn {txn} at {addr:?} follows one of txn {}",
                    scan.newest
                )));
            }
            scan.newest = txn;
            if visitor.in_checkpoint(txn) {
                visitor.visit(SlotFate::InCheckpoint { addr, txn });
                continue;
            }
            // Redone only what is committed, before the tail.
            assert!(min_txn <= txn && txn <= last_commit && scan.tail.is_none());
            let (key_len, tombstone) =
                self.verify_record_into(medium, addr, buf).ok_or_else(|| {
                    Error::Corrupt(format!("committed version at {addr:?} fails its checksum"))
                })?;
            visitor.visit(SlotFate::Redo(CommittedVersion {
                addr,
                txn,
                key: &buf[KEY_AT..KEY_AT + key_len],
                tombstone,
            }));
        }
        Ok(())
    }

    /// Where block `b`'s free space ends once the tail starting at `tail`
    /// is dropped: the tail's start in its own block, the block's end in
    /// the blocks after it.
    fn continues_below(&self, tail: Cursor, b: u32) -> u64 {
        match tail.block == b {
            true => tail.free_end as u64,
            false => self.def.block_size as u64,
        }
    }

    /// Blocks after the tail's block were linked by a transaction that did
    /// not survive; the region will continue in them after filling the
    /// tail's block. Redo finds its start by the blocks' min txn, which
    /// must never be below a slot of the block before, so until a
    /// transaction writes into them (and stamps its own id) they carry the
    /// largest id: nothing in them counts, and a later redo always starts
    /// at or before the tail's block.
    fn unstamp_blocks_after(&self, medium: &Medium, blocks: &[&Block], tail_block: u32) {
        for block in blocks.iter().filter(|b| b.seq > tail_block) {
            let at = block.offset() + MIN_TXN_AT;
            medium.store(at, catalog::pack(MAX_TXN_ID));
            medium.persist(at, 8);
        }
    }

    /// Clears a position of the uncommitted tail: an entry that holds no
    /// committed version (`Held` has none), or one past where a crash left
    /// the directory. It will be written again and must not inherit a
    /// bit: an abort cut short can leave a hole's bit without the hole.
    fn undo(&self, medium: &Medium, addr: Addr) {
        self.clear_obsolete(medium, addr);
        self.clear_slot(medium, addr);
    }
}

/// What the scan of a region has found so far.
#[derive(Default)]
struct Scan {
    /// Where the uncommitted tail starts, once it has.
    tail: Option<Cursor>,
    /// The newest committed txn id so far.
    newest: u64,
}
