//! Secondary indexes (SOFORT, papers/004 §3.1): ordered DRAM maps that are
//! never persisted and are rebuilt from the table after a restart.
//!
//! # Entries
//! A secondary key is a fixed-length concatenation of byte ranges of the
//! primary key and the value (`IndexDef::parts`); a row too short for one
//! of them has no entry, like a NULL. The index stores one entry per
//! (secondary key, primary key): the tree key is `secondary ‖ primary`
//! (the fixed length makes `secondary` a prefix that sorts correctly) and
//! the value is the largest timestamp of a transaction that wrote a
//! version with that secondary key, or of the version a build indexed.
//!
//! # Why reads stay serializable without versioned entries
//! Entries are a superset: every version any running or future
//! transaction can see has its entry, and stale entries may remain. A
//! lookup scans the tree marking the leaves' gap timestamps (as a primary
//! scan does), then reads every candidate row through MVTO (`get`), and
//! keeps it only if the version it sees still has that secondary key.
//! * A writer inserts its entry right after its primary write, through the
//!   gap check, so an older writer cannot put a row into a range a younger
//!   transaction has looked up: it gets `Conflict`. A write that keeps the
//!   row's secondary key leaves the index alone.
//! * A row a lookup returned (or rejected) was read through MVTO, so no
//!   older writer can change it afterwards.
//! * A unique index checks, before the write, every entry with the new
//!   secondary key by reading its row; the scan marked the gap, so of two
//!   racing inserters of one key the older one conflicts.
//!
//! # Removing stale entries
//! An update that changes a row's secondary key, a delete, and an abort
//! leave entries that no version needs any more; they are queued
//! (`Store::index_garbage`) and removed by maintenance once the entry's
//! timestamp is below the low-water mark and the newest version committed
//! below it does not carry the key. The removal is conditional on the
//! entry's value, so a writer that raised it meanwhile keeps it.

use super::cursor::{MAX_BATCH, MIN_BATCH};
use super::{Store, TableRt, TxnState};
use crate::catalog::{IndexDef, Source};
use crate::error::{Error, Result};
use crate::heap::tile::{ABORTED, PENDING};
use crate::heap::{Addr, SlotRead};
use crate::index::{BTree, InsertError};
use std::ops::Bound;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};
use std::sync::atomic::{AtomicU64, AtomicU8};
use std::sync::Arc;
use std::time::Duration;

/// Not built since the restart: lookups must not use the tree.
pub const NOT_BUILT: u8 = 0;
/// Complete: every version anyone can see has its entry.
pub const READY: u8 = 1;
/// Gone, holding its number: a placeholder for a number an earlier
/// process left unused, or a creation that failed once its number was
/// in the catalog. Writers ignore it.
pub const DROPPED: u8 = 2;
/// Its build failed before its number reached the catalog: writers ignore
/// it, and the number is free for the next creation, so failures cannot
/// use up a table's index numbers.
pub const FAILED: u8 = 3;

/// What statements wanted from an index and what it saved them, in
/// estimated nanoseconds (SOFORT's Benefit, eq. 1).
#[derive(Default)]
pub struct Usage {
    pub statements: AtomicU64,
    pub saved_ns: AtomicU64,
    /// Statements answered by a table scan because it was not built.
    pub scans_instead: AtomicU64,
    /// Statements that waited for (or performed) its build.
    pub waits: AtomicU64,
    /// Entries lookups copied out of the tree, to be checked against rows.
    pub entries_read: AtomicU64,
}

/// A secondary index at run time.
pub struct SecondaryRt {
    pub def: IndexDef,
    pub tree: BTree,
    state: AtomicU8,
    /// Held by whoever builds the index; waiting for a build is taking it.
    pub build_lock: Arc<parking_lot::Mutex<()>>,
    /// Primary keys visited by the running build (progress for the cost model).
    pub build_progress: AtomicU64,
    /// Statements waiting for a running build: it must not pause for them.
    pub waiting: AtomicU64,
    /// When the running build started (the rate so far predicts its end).
    pub build_started: parking_lot::Mutex<Option<std::time::Instant>>,
    /// Since open (or creation).
    pub usage: Usage,
    /// Time from the start of open until the index was ready.
    pub built_after: parking_lot::Mutex<Option<Duration>>,
}

impl SecondaryRt {
    pub fn new(def: IndexDef, ready: bool) -> SecondaryRt {
        SecondaryRt {
            def,
            tree: BTree::new(),
            state: AtomicU8::new(if ready { READY } else { NOT_BUILT }),
            build_lock: Arc::new(parking_lot::Mutex::new(())),
            build_progress: AtomicU64::new(0),
            waiting: AtomicU64::new(0),
            build_started: parking_lot::Mutex::new(None),
            usage: Usage::default(),
            built_after: parking_lot::Mutex::new(None),
        }
    }

    /// Stands for a number whose creation failed, so numbers stay positions.
    pub fn placeholder() -> SecondaryRt {
        let def = IndexDef {
            table: 0,
            number: 0,
            name: String::new(),
            unique: false,
            parts: Vec::new(),
        };
        let index = SecondaryRt::new(def, false);
        index.set_state(DROPPED);
        index
    }

    pub fn is_ready(&self) -> bool {
        self.state.load(Acquire) == READY
    }

    pub fn is_dropped(&self) -> bool {
        matches!(self.state.load(Acquire), DROPPED | FAILED)
    }

    /// Whether its creation failed without taking a number (see [`FAILED`]).
    pub fn is_failed(&self) -> bool {
        self.state.load(Acquire) == FAILED
    }

    /// Its build failed before its number reached the catalog.
    pub fn mark_failed(&self) {
        self.set_state(FAILED);
    }

    pub fn set_state(&self, state: u8) {
        self.state.store(state, Release);
    }

    /// The secondary key of a row into `out`; false if the row is too
    /// short for it (it then has no entry).
    pub fn secondary_key(&self, key: &[u8], value: &[u8], out: &mut Vec<u8>) -> bool {
        out.clear();
        for part in &self.def.parts {
            let source = match part.source {
                Source::PrimaryKey => key,
                Source::Value => value,
            };
            let (start, end) = (part.start as usize, (part.start + part.len) as usize);
            match source.get(start..end) {
                Some(bytes) => out.extend_from_slice(bytes),
                None => return false,
            }
        }
        true
    }

    /// Splits a tree key into (secondary key, primary key).
    pub fn split<'k>(&self, entry: &'k [u8]) -> (&'k [u8], &'k [u8]) {
        entry.split_at(self.def.key_len().min(entry.len()))
    }

    fn entry(&self, secondary: &[u8], key: &[u8]) -> Vec<u8> {
        let mut entry = Vec::with_capacity(secondary.len() + key.len());
        entry.extend_from_slice(secondary);
        entry.extend_from_slice(key);
        entry
    }

    /// Records one statement that wanted the index and what it saved.
    pub fn record_use(&self, saved_ns: u64) {
        self.usage.statements.fetch_add(1, Relaxed);
        self.usage.saved_ns.fetch_add(saved_ns, Relaxed);
    }
}

/// A stale-entry candidate: removed once nothing can need it.
pub struct Stale {
    table: u32,
    index: Arc<SecondaryRt>,
    entry: Vec<u8>,
}

/// Tree bounds that contain every entry whose secondary key lies in
/// `range` (the caller filters exactly): keys are `secondary ‖ primary`.
fn entry_bounds(
    (lower, upper): (&Bound<Vec<u8>>, &Bound<Vec<u8>>),
    key_len: usize,
) -> (Bound<Vec<u8>>, Bound<Vec<u8>>) {
    let truncate = |b: &Vec<u8>| b[..b.len().min(key_len)].to_vec();
    let lower = match lower {
        Bound::Included(b) | Bound::Excluded(b) => Bound::Included(truncate(b)),
        Bound::Unbounded => Bound::Unbounded,
    };
    let upper = match upper {
        Bound::Included(b) | Bound::Excluded(b) => {
            super::prefix_end(&truncate(b)).map_or(Bound::Unbounded, Bound::Excluded)
        }
        Bound::Unbounded => Bound::Unbounded,
    };
    (lower, upper)
}

fn contains((lower, upper): (&Bound<Vec<u8>>, &Bound<Vec<u8>>), key: &[u8]) -> bool {
    let above = match lower {
        Bound::Included(b) => key >= b.as_slice(),
        Bound::Excluded(b) => key > b.as_slice(),
        Bound::Unbounded => true,
    };
    let below = match upper {
        Bound::Included(b) => key <= b.as_slice(),
        Bound::Excluded(b) => key < b.as_slice(),
        Bound::Unbounded => true,
    };
    above && below
}

/// Rows found through a secondary index: (primary key, value), in
/// (secondary key, primary key) order.
pub type Rows = Vec<(Vec<u8>, Vec<u8>)>;

impl TxnState<'_> {
    /// Up to `limit` rows whose secondary key lies in `range`, through the
    /// index's tree. The index must be ready.
    pub fn index_lookup(
        &mut self,
        table: &TableRt,
        index: &SecondaryRt,
        range: (&Bound<Vec<u8>>, &Bound<Vec<u8>>),
        limit: usize,
    ) -> Result<Rows> {
        self.check_usable()?;
        self.check_index(table)?;
        let _op = self.snapshot_op()?;
        let mut result = self.lookup_through_tree(table, index, range, limit);
        if let (Ok(rows), true) = (&mut result, self.is_occ()) {
            self.add_buffered_rows(table, index, range, (rows, limit));
        }
        self.guard(result)
    }

    /// The same rows as `index_lookup`, found by reading the whole table
    /// (for an index that is not built yet).
    pub fn index_lookup_by_scan(
        &mut self,
        table: Arc<TableRt>,
        index: &SecondaryRt,
        range: (&Bound<Vec<u8>>, &Bound<Vec<u8>>),
        limit: usize,
    ) -> Result<Rows> {
        self.check_usable()?;
        self.check_index(&table)?;
        let _op = self.snapshot_op()?;
        let mut found = Vec::new();
        let mut secondary = Vec::new();
        let cursor = self.range(
            table,
            (Bound::Unbounded, Bound::Unbounded),
            super::cursor::MAX_BATCH,
        )?;
        for row in cursor {
            let (key, value) = row?;
            if index.secondary_key(&key, &value, &mut secondary) && contains(range, &secondary) {
                found.push((secondary.clone(), key, value));
            }
        }
        found.sort_unstable_by(|a, b| (&a.0, &a.1).cmp(&(&b.0, &b.1)));
        found.truncate(limit);
        Ok(found.into_iter().map(|(_, k, v)| (k, v)).collect())
    }

    /// The table's own handle of `index`.
    fn shared_index(&self, table: &TableRt, index: &SecondaryRt) -> Arc<SecondaryRt> {
        table
            .secondaries
            .iter()
            .map(|(_, shared)| shared)
            .find(|shared| std::ptr::eq(shared.as_ref(), index))
            .expect("a lookup's index is one of its table's")
            .clone()
    }

    fn check_index(&self, table: &TableRt) -> Result<()> {
        self.check_table(table)
    }

    /// Rows are checked batch by batch of tree entries, each batch marking
    /// the leaves it read, so a lookup with a small limit copies about as
    /// many entries as it returns; the leaves marked cover every entry up
    /// to the last one read, so no older writer can put a row among the
    /// rows returned (the same protection as a primary cursor's).
    fn lookup_through_tree(
        &self,
        table: &TableRt,
        index: &SecondaryRt,
        range: (&Bound<Vec<u8>>, &Bound<Vec<u8>>),
        limit: usize,
    ) -> Result<Rows> {
        let (mut lower, upper) = entry_bounds(range, index.def.key_len());
        let mut rows = Vec::new();
        let mut want = limit.clamp(MIN_BATCH, MAX_BATCH);
        while rows.len() < limit {
            let entries = self.entry_batch(index, (&lower, &upper), want);
            let exhausted = entries.len() < want;
            if self.is_occ() {
                let index = self.shared_index(table, index);
                self.occ_scanned_entries(index, (&lower, &upper, exhausted), &entries);
            }
            if let Some(last) = entries.last() {
                lower = Bound::Excluded(last.clone());
            }
            for entry in entries {
                if rows.len() >= limit {
                    break;
                }
                if let Some(row) = self.row_of_entry(table, index, range, &entry)? {
                    rows.push(row);
                }
            }
            if exhausted {
                break;
            }
            want = (want * 2).min(MAX_BATCH);
        }
        Ok(rows)
    }

    /// Up to `want` tree entries in `bounds`, gap-marking the leaves read.
    fn entry_batch(
        &self,
        index: &SecondaryRt,
        (lower, upper): (&Bound<Vec<u8>>, &Bound<Vec<u8>>),
        want: usize,
    ) -> Vec<Vec<u8>> {
        let mut entries = Vec::with_capacity(want.min(MIN_BATCH));
        // Optimistic lookups leave no marks (commit scans the span again),
        // nor do snapshots.
        let gap_mark = self.marks_reads().then_some(self.ts);
        index.tree.scan(
            super::as_slice_bound(lower),
            super::as_slice_bound(upper),
            gap_mark,
            |entry, _| {
                entries.push(entry.to_vec());
                entries.len() < want
            },
        );
        let read = entries.len() as u64;
        index.usage.entries_read.fetch_add(read, Relaxed);
        entries
    }

    /// The row (primary key, value) of a tree entry, read through MVTO,
    /// if the version this transaction sees still has the entry's key.
    fn row_of_entry(
        &self,
        table: &TableRt,
        index: &SecondaryRt,
        range: (&Bound<Vec<u8>>, &Bound<Vec<u8>>),
        entry: &[u8],
    ) -> Result<Option<(Vec<u8>, Vec<u8>)>> {
        let (wanted, key) = index.split(entry);
        if key.is_empty() || !contains(range, wanted) {
            return Ok(None);
        }
        let mut value = Vec::new();
        let mut secondary = Vec::new();
        let matches = self.read_key_into(table, key, &mut value)?
            && index.secondary_key(key, &value, &mut secondary)
            && secondary == wanted;
        Ok(matches.then(|| (key.to_vec(), value)))
    }

    /// Refuses a write that would give a second live row `key`'s new
    /// secondary key in any unique index of the table. An index that is
    /// not built is checked by reading the table. An index whose key the
    /// write keeps is not checked: the row holds that key already. Returns
    /// the version that judgement relied on, which must be the one the
    /// write replaces (see `check_replaced`).
    pub(super) fn check_unique(
        &mut self,
        table: &TableRt,
        key: &[u8],
        value: Option<&[u8]>,
    ) -> Result<Option<Addr>> {
        let Some(value) = value else {
            return Ok(None);
        };
        let mut replaceable = None;
        let mut relied_on = None;
        let mut secondary = Vec::new();
        for (_, index) in table.secondaries.iter() {
            if !index.def.unique
                || index.is_dropped()
                || !index.secondary_key(key, value, &mut secondary)
            {
                continue;
            }
            let current = match &replaceable {
                Some(current) => current,
                None => replaceable.insert(self.replaceable(table, key)?),
            };
            if let Some((head, old)) = current {
                let mut kept = Vec::new();
                if index.secondary_key(key, old, &mut kept) && kept == secondary {
                    relied_on = Some(*head);
                    continue;
                }
            }
            let range = (
                Bound::Included(secondary.clone()),
                Bound::Included(secondary.clone()),
            );
            let range = (&range.0, &range.1);
            let rows = match index.is_ready() {
                true => self.lookup_through_tree(table, index, range, 2)?,
                false => {
                    let table = self.store.tables[table.heap.def.id as usize].clone();
                    self.index_lookup_by_scan(table, index, range, 2)?
                }
            };
            if rows.iter().any(|(other, _)| other != key) {
                return Err(Error::UniqueViolation(index.def.name.clone()));
            }
        }
        Ok(relied_on)
    }

    /// Whether a write of `value` over `key` keeps the row's key in
    /// `index`, judged by the version the write would replace now.
    pub fn keeps_secondary_key(
        &self,
        table: &TableRt,
        index: &SecondaryRt,
        key: &[u8],
        value: &[u8],
    ) -> Result<bool> {
        let Some((_, old)) = self.replaceable(table, key)? else {
            return Ok(false);
        };
        let (mut new_key, mut old_key) = (Vec::new(), Vec::new());
        Ok(index.secondary_key(key, value, &mut new_key)
            && index.secondary_key(key, &old, &mut old_key)
            && new_key == old_key)
    }

    /// The chain head of `key` and its value when a write would replace
    /// it as it is: a committed live version or this transaction's own.
    fn replaceable(&self, table: &TableRt, key: &[u8]) -> Result<Option<(Addr, Vec<u8>)>> {
        let medium = &self.store.medium;
        let Some(head) = table.lookup(medium, key)? else {
            return Ok(None);
        };
        let Some(header) = table.heap.header(Addr(head)) else {
            return Ok(None);
        };
        let begin = header.begin.load(Acquire);
        if begin & PENDING != 0 && begin != PENDING | self.ts {
            return Ok(None);
        }
        let mut value = Vec::new();
        let live = matches!(
            table.heap.read_live(medium, Addr(head), &mut value),
            SlotRead::Value
        );
        Ok(live.then_some((Addr(head), value)))
    }

    /// After a write whose unique checks relied on `relied_on` being the
    /// version it replaces: `Conflict` if another writer's version came
    /// between (the skipped checks would have been needed).
    pub(super) fn check_replaced(
        &self,
        table: &TableRt,
        key: &[u8],
        relied_on: Addr,
    ) -> Result<()> {
        let head = table.index.get(key).map(Addr);
        let replaced = head.and_then(|head| {
            let header = table.heap.header(head)?;
            match header.prev.load(Acquire) {
                0 => Some(head),
                prev => Some(Addr(prev - 1)),
            }
        });
        match head == Some(relied_on) || replaced == Some(relied_on) {
            true => Ok(()),
            false => Err(Error::Conflict),
        }
    }

    /// The value this transaction's new version of `key` replaced: its
    /// chain predecessor (`None` if there is none or it is a deletion).
    pub(super) fn replaced_value(&self, table: &TableRt, key: &[u8]) -> Option<Vec<u8>> {
        let head = table.index.get(key)?;
        let header = table.heap.header(Addr(head))?;
        if header.begin.load(Acquire) != PENDING | self.ts {
            return None;
        }
        let prev = match header.prev.load(Acquire) {
            0 => return None,
            prev => Addr(prev - 1),
        };
        let mut value = Vec::new();
        match table.heap.read_live(&self.store.medium, prev, &mut value) {
            SlotRead::Value => Some(value),
            _ => None,
        }
    }

    /// After a write of `key` (new value `value`, `None` for a delete)
    /// over `old`: enters the new secondary keys and queues the old ones.
    pub(super) fn maintain_indexes(
        &mut self,
        table: &TableRt,
        key: &[u8],
        value: Option<&[u8]>,
        old: Option<&[u8]>,
    ) -> Result<()> {
        self.queue_rewritten(table.heap.def.id, key);
        let (mut new_key, mut old_key) = std::mem::take(&mut self.spares.secondary_keys);
        let maintained = self.maintain_with(table, (key, value, old), (&mut new_key, &mut old_key));
        self.spares.secondary_keys = (new_key, old_key);
        maintained
    }

    /// `maintain_indexes` with buffers for the secondary keys.
    fn maintain_with(
        &mut self,
        table: &TableRt,
        (key, value, old): (&[u8], Option<&[u8]>, Option<&[u8]>),
        (new_key, old_key): (&mut Vec<u8>, &mut Vec<u8>),
    ) -> Result<()> {
        for (_, index) in table.secondaries.iter() {
            if index.is_dropped() {
                continue;
            }
            let has_new = value.is_some_and(|v| index.secondary_key(key, v, new_key));
            let has_old = old.is_some_and(|v| index.secondary_key(key, v, old_key));
            // A version that keeps its predecessor's key needs no raise: the
            // writer that introduced the key raised the entry, and the vacuum
            // keeps an entry while a version that carries it may be seen.
            let kept = has_new && has_old && old_key == new_key;
            if has_new && !kept {
                let entry = index.entry(new_key, key);
                if let Err(InsertError::Phantom) = index
                    .tree
                    .insert_or_raise(&entry, self.ts, self.ts, self.ts)
                {
                    return Err(Error::Conflict);
                }
                self.entered.push((table.heap.def.id, index.clone(), entry));
            }
            if has_old && !kept {
                self.store.index_garbage.lock().push(Stale {
                    table: table.heap.def.id,
                    index: index.clone(),
                    entry: index.entry(old_key, key),
                });
            }
        }
        Ok(())
    }

    /// A second write of `key` by this transaction replaced the first in
    /// place, so the entries the first one entered may be stale: queue them.
    fn queue_rewritten(&mut self, table: u32, key: &[u8]) {
        let rewritten = |(t, index, entry): &(u32, Arc<SecondaryRt>, Vec<u8>)| {
            *t == table && index.split(entry).1 == key
        };
        if !self.entered.iter().any(rewritten) {
            return;
        }
        let mut garbage = self.store.index_garbage.lock();
        self.entered.retain(|written| {
            if !rewritten(written) {
                return true;
            }
            let (table, index, entry) = written.clone();
            garbage.push(Stale {
                table,
                index,
                entry,
            });
            false
        });
    }

    /// An aborted transaction's entries may be stale: queue them.
    pub(super) fn queue_entered(&mut self) {
        if self.entered.is_empty() {
            return;
        }
        let mut garbage = self.store.index_garbage.lock();
        for (table, index, entry) in self.entered.drain(..) {
            garbage.push(Stale {
                table,
                index,
                entry,
            });
        }
    }
}

/// Announces a reader of version chains outside any transaction, so that
/// GC frees nothing it may reach (see `Store::low_water`).
pub struct ChainReader<'s> {
    store: &'s Store,
    worker: usize,
}

impl<'s> ChainReader<'s> {
    pub fn new(store: &'s Store, worker: usize) -> Self {
        store.announce(worker, store.clock.peek().max(1));
        ChainReader { store, worker }
    }
}

impl Drop for ChainReader<'_> {
    fn drop(&mut self) {
        self.store.retire(self.worker);
    }
}

impl Store {
    /// Removes the queued stale entries nothing can need any more; keeps
    /// the ones that may still be needed for a later round. Returns how
    /// many were removed. The caller keeps GC from freeing blocks meanwhile.
    pub fn vacuum_indexes(&self) -> u64 {
        let pending = std::mem::take(&mut *self.index_garbage.lock());
        if pending.is_empty() {
            return 0;
        }
        let (low_water, ut) = (self.low_water(), self.clock.peek());
        let mut keep = Vec::new();
        let mut removed = 0;
        for stale in pending {
            // A dropped index goes with its table, whose versions may be
            // freed already.
            if stale.index.is_dropped() {
                continue;
            }
            match self.judge_stale(&stale, low_water) {
                Judgement::Remove(seen) => {
                    removed += u64::from(stale.index.tree.remove_if(&stale.entry, seen, 0, ut));
                }
                Judgement::Needed => {}
                Judgement::Later => keep.push(stale),
            }
        }
        self.index_garbage.lock().extend(keep);
        removed
    }

    fn judge_stale(&self, stale: &Stale, low_water: u64) -> Judgement {
        let Some(seen) = stale.index.tree.get(&stale.entry) else {
            // A running build may still enter it (see `index_build`).
            return match stale.index.build_lock.is_locked() {
                true => Judgement::Later,
                false => Judgement::Needed,
            };
        };
        let table = &self.tables[stale.table as usize];
        if seen >= low_water || table.is_loading() {
            return Judgement::Later;
        }
        let (wanted, key) = stale.index.split(&stale.entry);
        let Some(head) = table.index.get(key) else {
            return Judgement::Remove(seen);
        };
        // The version every running and future transaction sees, unless a
        // younger one (whose writer raised the entry) replaces it.
        let mut addr = Addr(head);
        let mut value = Vec::new();
        let mut secondary = Vec::new();
        loop {
            let Some(header) = table.heap.header(addr) else {
                return Judgement::Later;
            };
            let begin = header.begin.load(Acquire);
            if begin & PENDING == 0 && begin != ABORTED && begin < low_water {
                let has_key = match table.heap.read_live(&self.medium, addr, &mut value) {
                    SlotRead::Value => {
                        stale.index.secondary_key(key, &value, &mut secondary)
                            && secondary == wanted
                    }
                    SlotRead::Deleted => false,
                    // Damaged or gone: keeping an entry is always safe.
                    _ => return Judgement::Needed,
                };
                return match (has_key, addr.0 == head) {
                    (false, _) => Judgement::Remove(seen),
                    // The newest version carries it: a later change of
                    // the row queues the entry again.
                    (true, true) => Judgement::Needed,
                    // A younger version may drop it once it commits.
                    (true, false) => Judgement::Later,
                };
            }
            match header.prev.load(Acquire) {
                0 => return Judgement::Remove(seen),
                prev => addr = Addr(prev - 1),
            }
        }
    }
}

enum Judgement {
    /// Nothing can need it: remove it if its value is still this.
    Remove(u64),
    /// A version that transactions see carries it (or it is gone).
    Needed,
    /// Ask again in a later round.
    Later,
}
