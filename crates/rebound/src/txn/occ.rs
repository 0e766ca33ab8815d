//! Optimistic concurrency control as FOEDUS runs it (FOEDUS 6.1,
//! Algorithm 2, after Silo), over the version chains MVTO uses: a
//! database runs one scheme or the other ([`Concurrency`]); GC's system
//! transactions always run MVTO.
//!
//! # Execution
//! * A read finds the chain head in the index and, once it is committed,
//!   reads it and remembers the head and its `begin` word. That word is the
//!   version's TID: its writer's commit id, and it changes whenever the
//!   slot is reused. Nothing shared is written: no read mark, no gap mark.
//! * A head another transaction is installing (`PENDING`) is waited for,
//!   as Silo spins on a locked TID word.
//! * Writes are buffered in the transaction. A write reads its key first
//!   (remembered like any read) to answer insert, update or delete.
//! * A cursor fetch remembers the heads of the index entries it covered,
//!   in key order, with the span of keys it covered; buffered writes
//!   inside the span are merged into what the cursor returns.
//!
//! # Commit
//! 1. Lock the write set in (table, key) order, so committers never
//!    deadlock: CAS the `end` of the head the write read 0 → LOCKED|id,
//!    where id is the begin timestamp (unique); `Conflict` if it is no
//!    longer the head, or its `begin` changed (the slot was reused). A key
//!    read absent gets a placeholder: its new version, PENDING under the
//!    id, entered in the index, which every other reader and committer
//!    waits for. A lock another committer holds is waited for, boundedly
//!    (it is about to be released or published).
//! 2. Take the commit id from the clock: the serialization point. Every
//!    version read or locked has a smaller id: its writer took its id
//!    before publishing it, this transaction after reading or locking it.
//! 3. Validate: every head read still has the `begin` seen and `end` 0
//!    or our lock (nothing superseded, reaped or reused it); every key read
//!    absent is absent still (or our placeholder); every span scanned again
//!    yields the same heads, our placeholders aside: no phantom.
//! 4. Install: a successor after each locked head, stamped with the commit
//!    id and entered in the index from the leaf the write's read found
//!    (`UpdateHint`; one descent per written key in all, as under MVTO),
//!    and the placeholders' versions given it (their slots keep the begin
//!    id: `publish_placeholder`); then the commit is MVTO's
//!    (persist the slots, LCTT, publish; `txn` module docs). Recovery, GC
//!    and checkpoints meet the versions of a commit as they always do.
//!
//! A read-only transaction validates and takes no id: it writes nothing
//! shared. A failure in steps 1 to 4 unlocks and aborts.
//!
//! # Durability in the log-free design
//! The successors' slots are stamped with the commit id, the placeholders'
//! with the begin id, both above every id of the worker's earlier commits
//! (the previous commit took its id before this transaction began) and
//! appended in that order, so a region's slots ascend, its committed slots
//! stay a prefix, and LCTT = commit id decides them: recovery keeps
//! exactly the commits whose LCTT write was fenced, as under MVTO.

use super::cursor::Order;
use super::{SecondaryRt, Store, TableRt, TxnState, WriteKind};
use crate::error::{Error, Result};
use crate::heap::tile::{ABORTED, LOCKED, PENDING, REAPED};
use crate::heap::Addr;
use crate::index::{InsertError, UpdateHint};
use std::ops::Bound;
use std::sync::atomic::Ordering::{Acquire, Release, SeqCst};
use std::sync::Arc;

/// How a database's transactions are kept serializable.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub enum Concurrency {
    /// Multi-version timestamp ordering (FIR 4.2): reads mark versions,
    /// writes lock them as they go, conflicts abort at once.
    #[default]
    Mvto,
    /// Optimistic (FOEDUS, Silo): reads write nothing shared, writes are
    /// buffered, commit locks, validates and installs.
    Occ,
}

/// The placeholder "head" a cursor gives a key only the transaction's
/// buffer has.
const BUFFERED: u64 = u64::MAX;

/// A buffered write; its key and value are in `OccSet::bytes`.
struct Buffered {
    table: u32,
    /// The key's first bytes as the index orders them: most comparisons
    /// end here.
    head: u64,
    key: (usize, usize),
    /// `None` deletes.
    value: Option<(usize, usize)>,
    /// What the write's own read found: commit locks exactly that.
    found: Found,
    /// The next buffered write whose key hashes alike (`NONE`).
    next_alike: usize,
}

/// What a write read at its key, kept so that commit need not look the
/// key up again (Silo keeps record pointers in its write set).
#[derive(Clone, Copy)]
enum Found {
    Absent,
    /// A committed head with its TID word, and where the index had it
    /// (a position in `TxnState::hints`), if that may be reused.
    Head {
        head: Addr,
        begin: u64,
        hint: Option<usize>,
    },
}

/// No further write in a hash chain.
const NONE: usize = usize::MAX;
/// Buffered writes searched one by one up to this many; beyond, by hash.
const LINEAR_WRITES: usize = 16;

/// A committed head a read returned, with the TID word it had.
struct Observed {
    table: u32,
    head: Addr,
    begin: u64,
}

/// Keys scanned by one cursor fetch, ascending, and the heads found then.
struct Span {
    tree: SpanOf,
    lower: Bound<Vec<u8>>,
    upper: Bound<Vec<u8>>,
    /// Rows: the heads, in `OccSet::span_heads`. Entries: the entries'
    /// ends in `OccSet::entry_ends` (their bytes in `entry_bytes`).
    seen: (usize, usize),
}

/// The tree a span was scanned in.
enum SpanOf {
    /// A table's primary index: what counts is each key's head.
    Rows(Arc<TableRt>),
    /// A secondary index: what counts is which entries exist (rows found
    /// through them are read, and so validated, as rows).
    Entries(Arc<SecondaryRt>),
}

/// A version step 4 made: where, the head it follows (and whether that
/// was a deletion), and for a placeholder its slot's length.
struct Installed {
    new: Addr,
    prev: Option<(Addr, bool)>,
    placeholder_bytes: Option<u32>,
}

/// What commit step 1 holds for a buffered write (same position).
#[derive(Clone, Copy)]
enum Lock {
    /// The head's `end` is LOCKED under our id; `hint` as in `Found`.
    Head { head: Addr, hint: Option<usize> },
    /// Our new version, entered in the index while the key had none.
    Placeholder(Addr),
}

/// One worker's optimistic read and write sets, kept between transactions
/// so that they allocate nothing once grown.
#[derive(Default)]
pub struct OccSet {
    writes: Vec<Buffered>,
    bytes: Vec<u8>,
    /// Once there are more than `LINEAR_WRITES`: the first buffered write
    /// by hash of (table, key), chained through `Buffered::next_alike`.
    by_hash: std::collections::HashMap<u32, usize>,
    reads: Vec<Observed>,
    /// Keys read absent: (table, key in `absent_keys`).
    absent: Vec<(u32, (usize, usize))>,
    absent_keys: Vec<u8>,
    spans: Vec<Span>,
    span_heads: Vec<u64>,
    entry_bytes: Vec<u8>,
    entry_ends: Vec<usize>,
    /// Commit order of `writes` (sorted by table and key) and their locks.
    order: Vec<usize>,
    locks: Vec<Lock>,
    /// Locks (in `order`) turned into versions of the write set already.
    installed: usize,
}

impl OccSet {
    pub(super) fn clear(&mut self) {
        self.writes.clear();
        self.bytes.clear();
        self.by_hash.clear();
        self.reads.clear();
        self.absent.clear();
        self.absent_keys.clear();
        self.spans.clear();
        self.span_heads.clear();
        self.entry_bytes.clear();
        self.entry_ends.clear();
        self.order.clear();
        self.locks.clear();
        self.installed = 0;
    }

    fn key(&self, write: &Buffered) -> &[u8] {
        &self.bytes[write.key.0..write.key.1]
    }

    fn value(&self, write: &Buffered) -> Option<&[u8]> {
        write.value.map(|(from, to)| &self.bytes[from..to])
    }

    /// The buffered write of `key` (a key has at most one).
    fn find(&self, table: u32, key: &[u8]) -> Option<usize> {
        let head = crate::index::key_prefix(key);
        let same = |w: &Buffered| w.head == head && w.table == table && self.key(w) == key;
        if self.writes.len() <= LINEAR_WRITES {
            return self.writes.iter().position(same);
        }
        let mut at = *self.by_hash.get(&hash(table, key))?;
        while at != NONE {
            if same(&self.writes[at]) {
                return Some(at);
            }
            at = self.writes[at].next_alike;
        }
        None
    }

    fn buffer(&mut self, table: u32, key: &[u8], value: Option<&[u8]>, found: Found) {
        let value = value.map(|v| {
            let from = self.bytes.len();
            self.bytes.extend_from_slice(v);
            (from, self.bytes.len())
        });
        if let Some(at) = self.find(table, key) {
            self.writes[at].value = value;
            return;
        }
        let from = self.bytes.len();
        self.bytes.extend_from_slice(key);
        let key = (from, self.bytes.len());
        let head = crate::index::key_prefix(&self.bytes[key.0..key.1]);
        self.writes.push(Buffered {
            table,
            head,
            key,
            value,
            found,
            next_alike: NONE,
        });
        match self.writes.len() {
            n if n == LINEAR_WRITES + 1 => (0..n).for_each(|at| self.index_write(at)),
            n if n > LINEAR_WRITES + 1 => self.index_write(n - 1),
            _ => {}
        }
    }

    fn index_write(&mut self, at: usize) {
        let write = &self.writes[at];
        let alike = hash(write.table, self.key(write));
        let next = self.by_hash.insert(alike, at).unwrap_or(NONE);
        self.writes[at].next_alike = next;
    }

    /// Buffered keys of `table` inside the span, ascending.
    fn keys_in(
        &self,
        table: u32,
        (lower, upper): (&Bound<Vec<u8>>, &Bound<Vec<u8>>),
    ) -> Vec<Vec<u8>> {
        let mut keys: Vec<Vec<u8>> = self
            .writes
            .iter()
            .filter(|w| w.table == table)
            .map(|w| self.key(w))
            .filter(|k| std::ops::RangeBounds::contains(&(as_ref(lower), as_ref(upper)), k))
            .map(<[u8]>::to_vec)
            .collect();
        keys.sort();
        keys
    }
}

fn hash(table: u32, key: &[u8]) -> u32 {
    crc32c::crc32c_append(table, key)
}

fn as_ref(bound: &Bound<Vec<u8>>) -> Bound<&[u8]> {
    super::as_slice_bound(bound)
}

impl<'s> TxnState<'s> {
    pub(super) fn is_occ(&self) -> bool {
        self.occ.is_some()
    }

    fn occ_set(&self) -> std::cell::RefMut<'_, OccSet> {
        self.occ
            .as_ref()
            .expect("only optimistic transactions have an OCC set")
            .borrow_mut()
    }

    /// Reads `key` (buffered writes first), remembering what it read.
    pub(super) fn occ_read_key(
        &self,
        table: &TableRt,
        key: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<bool> {
        if let Some(found) = self.buffered_read(table, key, out) {
            return Ok(found);
        }
        self.committed_read(table, key, out)
    }

    /// A read that starts at the head a cursor fetched for `key`.
    pub(super) fn occ_read_at(
        &self,
        table: &TableRt,
        key: &[u8],
        head: u64,
        out: &mut Vec<u8>,
    ) -> Result<bool> {
        if let Some(found) = self.buffered_read(table, key, out) {
            return Ok(found);
        }
        if head != BUFFERED {
            if let Some((live, _)) = self.observe(table, Addr(head), Some(out))? {
                return Ok(live);
            }
        }
        self.committed_read(table, key, out)
    }

    /// The buffered write of `key` as a read; `None` if there is none.
    fn buffered_read(&self, table: &TableRt, key: &[u8], out: &mut Vec<u8>) -> Option<bool> {
        let occ = self.occ_set();
        let at = occ.find(table.heap.def.id, key)?;
        let value = occ.value(&occ.writes[at]);
        if let Some(value) = value {
            out.clear();
            out.extend_from_slice(value);
        }
        Some(value.is_some())
    }

    /// Reads the committed head of `key` (into `out` if given: else only
    /// whether it is live), remembering it, or its absence.
    fn committed_read(&self, table: &TableRt, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        let medium = &self.store.medium;
        loop {
            let head = match table.index.get(key) {
                Some(head) => head,
                None if table.warm(medium, key)? => continue,
                None => {
                    self.remember_absent(table, key);
                    return Ok(false);
                }
            };
            table.heap.prefetch_version(medium, Addr(head));
            if let Some((live, _)) = self.observe(table, Addr(head), Some(out))? {
                return Ok(live);
            }
        }
    }

    fn remember_absent(&self, table: &TableRt, key: &[u8]) {
        let mut occ = self.occ_set();
        let from = occ.absent_keys.len();
        occ.absent_keys.extend_from_slice(key);
        let to = occ.absent_keys.len();
        occ.absent.push((table.heap.def.id, (from, to)));
    }

    /// Reads the version at `head` once it is committed and remembers its
    /// TID word; `None` when the index may have moved on: look again.
    fn observe(
        &self,
        table: &TableRt,
        head: Addr,
        out: Option<&mut Vec<u8>>,
    ) -> Result<Option<(bool, u64)>> {
        let header = self.version(table, head)?;
        let begin = header.begin.load(Acquire);
        if begin == ABORTED || header.end.load(Acquire) == REAPED {
            std::thread::yield_now();
            return Ok(None);
        }
        if begin & PENDING != 0 {
            self.wait_for_writer(&header.begin, begin)?;
            return Ok(None);
        }
        let medium = &self.store.medium;
        let live = match out {
            Some(out) => table.read_value(medium, head, out),
            None => table
                .heap
                .tombstone(medium, head)
                .map(|deleted| !deleted)
                .ok_or(Error::Conflict),
        };
        // A slot reused under us reads as garbage: its TID word says so.
        if header.begin.load(Acquire) != begin {
            return Ok(None);
        }
        let live = live?;
        self.newest_read.set(self.newest_read.get().max(begin));
        self.occ_set().reads.push(Observed {
            table: table.heap.def.id,
            head,
            begin,
        });
        Ok(Some((live, begin)))
    }

    /// Buffers a write after reading whether the key exists.
    pub(super) fn occ_write(
        &mut self,
        table: &TableRt,
        key: &[u8],
        value: Option<&[u8]>,
        kind: WriteKind,
    ) -> Result<bool> {
        let id = table.heap.def.id;
        let buffered = {
            let occ = self.occ_set();
            occ.find(id, key)
                .map(|at| (occ.writes[at].value.is_some(), occ.writes[at].found))
        };
        let (existed, found) = match buffered {
            Some(done) => done,
            None => self.read_for_write(id, key)?,
        };
        if let Some(answer) = self.refuse(kind, existed) {
            return self.unless_stale(answer);
        }
        if table.secondaries.count() > 0 {
            let checked = self.check_unique_optimistically(table, (key, value), found);
            self.unless_stale(checked)?;
        }
        self.occ_set().buffer(id, key, value, found);
        Ok(existed)
    }

    /// An error a write answers from what the transaction read (a key
    /// that exists, is missing, or is another row's unique key) becomes
    /// `Conflict` if those reads are stale already: an optimistic
    /// transaction reads without locks, and may be about to fail
    /// validation, so the answer would rest on a state that never was.
    fn unless_stale<T>(&self, answer: Result<T>) -> Result<T> {
        match answer {
            Err(Error::DuplicateKey | Error::KeyNotFound | Error::UniqueViolation(_)) => {
                self.validate(&self.occ_set())?;
                answer
            }
            other => other,
        }
    }

    /// A unique index's check, as MVTO makes it (its reads are validated
    /// at commit like any), against this transaction's buffered rows too;
    /// the version it relied on must be the one the write found.
    fn check_unique_optimistically(
        &mut self,
        table: &TableRt,
        (key, value): (&[u8], Option<&[u8]>),
        found: Found,
    ) -> Result<()> {
        if let Some(relied_on) = self.check_unique(table, key, value)? {
            if !matches!(found, Found::Head { head, .. } if head == relied_on) {
                return Err(Error::Conflict);
            }
        }
        let Some(value) = value else {
            return Ok(());
        };
        let occ = self.occ_set();
        let (mut mine, mut theirs) = (Vec::new(), Vec::new());
        for (_, index) in table.secondaries.iter() {
            if !index.def.unique
                || index.is_dropped()
                || !index.secondary_key(key, value, &mut mine)
            {
                continue;
            }
            let clash = occ.writes.iter().any(|w| {
                w.table == table.heap.def.id
                    && occ.key(w) != key
                    && occ.value(w).is_some_and(|v| {
                        index.secondary_key(occ.key(w), v, &mut theirs) && theirs == mine
                    })
            });
            if clash {
                return Err(Error::UniqueViolation(index.def.name.clone()));
            }
        }
        Ok(())
    }

    /// A write's read of its key: whether it is live, and where it was
    /// found (with the index leaf, for commit to repoint it from there).
    fn read_for_write(&mut self, table: u32, key: &[u8]) -> Result<(bool, Found)> {
        let store: &'s Store = self.store;
        let table = store.table(table);
        loop {
            let Some((head, hint)) = table.lookup_for_update(&store.medium, key, self.ts)? else {
                self.remember_absent(table, key);
                return Ok((false, Found::Absent));
            };
            let head = Addr(head);
            table.heap.prefetch_version(&store.medium, head);
            let Some((live, begin)) = self.observe(table, head, None)? else {
                continue;
            };
            // Nodes of trees with node versions are recycled: a leaf held
            // for long could be another node by commit.
            let hint = (!table.index.has_node_versions()).then(|| {
                self.hints.push(hint);
                self.hints.len() - 1
            });
            return Ok((live, Found::Head { head, begin, hint }));
        }
    }

    /// Remembers the span a cursor fetch covered and merges the buffered
    /// writes inside it into `batch` (ascending or descending as `order`).
    pub(super) fn occ_fetched(
        &self,
        table: &Arc<TableRt>,
        span: (Bound<Vec<u8>>, Bound<Vec<u8>>),
        order: Order,
        batch: &mut Vec<(Vec<u8>, u64)>,
    ) {
        let mut occ = self.occ_set();
        let from = occ.span_heads.len();
        match order {
            Order::Ascending => occ.span_heads.extend(batch.iter().map(|(_, h)| *h)),
            Order::Descending => occ.span_heads.extend(batch.iter().rev().map(|(_, h)| *h)),
        }
        let heads = (from, occ.span_heads.len());
        let own = occ.keys_in(table.heap.def.id, (&span.0, &span.1));
        occ.spans.push(Span {
            tree: SpanOf::Rows(table.clone()),
            lower: span.0,
            upper: span.1,
            seen: heads,
        });
        drop(occ);
        if own.is_empty() {
            return;
        }
        let mut merged: Vec<(Vec<u8>, u64)> = std::mem::take(batch);
        for key in own {
            if !merged.iter().any(|(k, _)| *k == key) {
                merged.push((key, BUFFERED));
            }
        }
        merged.sort_by(|a, b| a.0.cmp(&b.0));
        if order == Order::Descending {
            merged.reverse();
        }
        *batch = merged;
    }

    /// Commit steps 1 to 4 (module docs). After an error, `rollback`
    /// releases what is held.
    pub(super) fn occ_prepare(&mut self) -> Result<()> {
        // Out of its cell while committing, so that its keys can be
        // borrowed across the writes below.
        let cell = self
            .occ
            .take()
            .expect("only optimistic transactions commit optimistically");
        let result = self.prepare_with(&mut cell.borrow_mut());
        self.occ = Some(cell);
        result
    }

    fn prepare_with(&mut self, occ: &mut OccSet) -> Result<()> {
        if occ.writes.is_empty() {
            return self.validate(occ);
        }
        self.lock_write_set(occ)?;
        let commit_id = self.store.clock.next(&self.store.medium)?;
        self.validate(occ)?;
        self.install(occ, commit_id)
    }

    /// Step 1, in (table, key) order.
    fn lock_write_set(&mut self, occ: &mut OccSet) -> Result<()> {
        let mut order = std::mem::take(&mut occ.order);
        order.extend(0..occ.writes.len());
        order.sort_unstable_by(|&a, &b| {
            let (a, b) = (&occ.writes[a], &occ.writes[b]);
            (a.table, a.head)
                .cmp(&(b.table, b.head))
                .then_with(|| occ.key(a).cmp(occ.key(b)))
        });
        occ.order = order;
        let region = self.store.write_sets[self.worker].lock().region;
        for i in 0..occ.order.len() {
            let write = &occ.writes[occ.order[i]];
            let table = self.store.table(write.table);
            let kv = (occ.key(write), occ.value(write));
            let lock = self.lock_one(table, kv, write.found, region)?;
            occ.locks.push(lock);
        }
        // Before the commit id, as placeholders: a lookup that validates
        // after we take it finds our entries.
        for i in 0..occ.order.len() {
            let write = &occ.writes[occ.order[i]];
            let table = self.store.table(write.table);
            if table.secondaries.count() == 0 {
                continue;
            }
            let old = match occ.locks[i] {
                Lock::Head { head, .. } => self.live_value(table, head)?,
                Lock::Placeholder(_) => None,
            };
            self.maintain_indexes(table, occ.key(write), occ.value(write), old.as_deref())?;
        }
        Ok(())
    }

    /// The value of a version we hold locked; `None` for a deletion.
    fn live_value(&self, table: &TableRt, head: Addr) -> Result<Option<Vec<u8>>> {
        let mut value = Vec::new();
        Ok(table
            .read_value(&self.store.medium, head, &mut value)?
            .then_some(value))
    }

    /// Locks what a write found: the head, or, for a key that had none, a
    /// placeholder. `Conflict` if that changed.
    fn lock_one(
        &mut self,
        table: &TableRt,
        (key, value): (&[u8], Option<&[u8]>),
        found: Found,
        region: usize,
    ) -> Result<Lock> {
        let Found::Head { head, begin, hint } = found else {
            return match self.enter_placeholder(table, key, value, region)? {
                Some(addr) => Ok(Lock::Placeholder(addr)),
                None => Err(Error::Conflict),
            };
        };
        if self.version(table, head)?.begin.load(Acquire) != begin {
            return Err(Error::Conflict);
        }
        let mut target = (head, hint);
        loop {
            let header = self.version(table, target.0)?;
            match header
                .end
                .compare_exchange(0, LOCKED | self.ts, SeqCst, SeqCst)
            {
                Ok(_) => break,
                // Another committer: it is about to publish or give up.
                Err(end) if end & LOCKED != 0 && end != REAPED => {
                    self.wait_for_writer(&header.end, end)?
                }
                // GC copied what we read: lock its copy instead (the leaf
                // changed, so no hint).
                Err(_) => match self.relocated_head(table, head) {
                    Some(copy) if copy != target.0 => target = (copy, None),
                    _ => return Err(Error::Conflict),
                },
            }
        }
        // The head read had `begin` (checked above, and a slot is reused
        // only after its end is set): what we locked carries what we read.
        if self.version(table, head)?.begin.load(Acquire) != begin {
            self.version(table, target.0)?.end.store(0, Release);
            return Err(Error::Conflict);
        }
        Ok(Lock::Head {
            head: target.0,
            hint: target.1,
        })
    }

    /// Appends our version of `key` after `head` (locked by us) and points
    /// the index at it, from the leaf the write found it in if unchanged.
    fn append_after(
        &mut self,
        table: &TableRt,
        (key, value): (&[u8], Option<&[u8]>),
        head: Addr,
        (region, hint): (usize, Option<&UpdateHint<'_>>),
    ) -> Result<Addr> {
        let new = self.append(table, key, value, region)?;
        let header = self.version(table, new)?;
        header.prev.store(head.0 + 1, Release);
        header.begin.store(PENDING | self.ts, Release);
        // Publish checks the lock under the id the versions carry.
        self.version(table, head)?
            .end
            .store(LOCKED | self.ts, SeqCst);
        let repointed = match hint {
            Some(hint) => table
                .index
                .compare_and_set_hinted(hint, key, head.0, new.0, self.began),
            None => table.index.compare_and_set(key, head.0, new.0, self.began),
        };
        if repointed.is_err() {
            // Nothing repoints a head we hold locked; fail safe if it happens.
            self.discard(table, new)?;
            return Err(Error::Conflict);
        }
        Ok(new)
    }

    /// Appends the new version of a key the index lacks and enters it,
    /// pending under our id; `None` if the key appeared meanwhile.
    fn enter_placeholder(
        &mut self,
        table: &TableRt,
        key: &[u8],
        value: Option<&[u8]>,
        region: usize,
    ) -> Result<Option<Addr>> {
        let new = self.append(table, key, value, region)?;
        let header = self.version(table, new)?;
        header.prev.store(0, Release);
        header.begin.store(PENDING | self.ts, Release);
        // Nobody marks gaps under OCC (GC reads no absent keys): no phantom.
        match table.index.insert_if_absent(key, new.0, u64::MAX, self.ts) {
            Ok(()) => Ok(Some(new)),
            Err(InsertError::Exists(_) | InsertError::Phantom) => {
                self.discard(table, new)?;
                Ok(None)
            }
        }
    }

    /// Step 3: `Conflict` unless everything read is as it was.
    fn validate(&self, occ: &OccSet) -> Result<()> {
        let mine = LOCKED | self.ts;
        for read in &occ.reads {
            let table = self.store.table(read.table);
            let header = self.version(table, read.head)?;
            let end = header.end.load(SeqCst);
            if header.begin.load(SeqCst) != read.begin {
                return Err(Error::Conflict);
            }
            let holds = match end {
                0 => true,
                _ if end == mine => true,
                // Background clean-up moved the read, not the row.
                REAPED => self.still_absent(table, read.head),
                _ => self.relocated_head(table, read.head).is_some(),
            };
            if !holds {
                return Err(Error::Conflict);
            }
        }
        for &(table, (from, to)) in &occ.absent {
            let table = self.store.table(table);
            // Absent still, unless we entered a placeholder there: a
            // successor of ours means a head came meanwhile.
            if let Some(head) = table.index.get(&occ.absent_keys[from..to]) {
                if !self.is_own_placeholder(table, head) {
                    return Err(Error::Conflict);
                }
            }
        }
        for span in &occ.spans {
            let unchanged = match &span.tree {
                SpanOf::Rows(table) => {
                    let seen = &occ.span_heads[span.seen.0..span.seen.1];
                    self.rows_unchanged(table, span, seen)
                }
                SpanOf::Entries(index) => self.entries_unchanged(index, span, occ),
            };
            if !unchanged {
                return Err(Error::Conflict);
            }
        }
        Ok(())
    }

    /// The current head of `version`'s key if all that superseded it are
    /// GC's copies of it (FIR 4.5: same content, in GC's region), and that
    /// head is neither locked by another nor superseded: reads of the
    /// version still hold, and a write of it can go on from that head.
    fn relocated_head(&self, table: &TableRt, version: Addr) -> Option<Addr> {
        let key = table.heap.read_key(&self.store.medium, version);
        let head = Addr(table.index.get(&key)?);
        let end = table.heap.header(head)?.end.load(SeqCst);
        if end != 0 && end != LOCKED | self.ts {
            return None;
        }
        self.copies_of(table, head, version).then_some(head)
    }

    /// Whether the key of a reaped tombstone (a read of it found the key
    /// absent) is absent still, or our placeholder.
    fn still_absent(&self, table: &TableRt, tombstone: Addr) -> bool {
        let key = table.heap.read_key(&self.store.medium, tombstone);
        match table.index.get(&key) {
            None => true,
            Some(head) => self.is_own_placeholder(table, head),
        }
    }

    /// Whether the chain from `at` down to `version` holds only committed
    /// GC copies above `version`.
    fn copies_of(&self, table: &TableRt, mut at: Addr, version: Addr) -> bool {
        // GC copies a version once per round it survives; a few suffice.
        for _ in 0..16 {
            if at == version {
                return true;
            }
            let Some(header) = table.heap.header(at) else {
                return false;
            };
            if at.region() != crate::catalog::GC_WORKER || header.begin.load(Acquire) & PENDING != 0
            {
                return false;
            }
            match header.prev.load(Acquire) {
                0 => return false,
                prev => at = Addr(prev - 1),
            }
        }
        false
    }

    /// Whether `head` is a placeholder this transaction entered at commit.
    fn is_own_placeholder(&self, table: &TableRt, head: u64) -> bool {
        table.heap.header(Addr(head)).is_some_and(|h| {
            h.begin.load(Acquire) == PENDING | self.ts && h.prev.load(Acquire) == 0
        })
    }

    /// Scans a span again: the same heads in order, where a key we locked
    /// counts with the head it had.
    fn rows_unchanged(&self, table: &TableRt, span: &Span, seen: &[u64]) -> bool {
        // Tombstones reaped since the scan left the index; they were
        // absent keys to the scan and still are.
        let reaped = |at: usize| {
            seen.get(at).is_some_and(|&seen| {
                table
                    .heap
                    .header(Addr(seen))
                    .is_some_and(|h| h.end.load(SeqCst) == REAPED)
            })
        };
        let mut at = 0;
        let mut same = true;
        let (lower, upper) = (as_ref(&span.lower), as_ref(&span.upper));
        table.index.scan(lower, upper, None, |_, head| {
            let Some(header) = table.heap.header(Addr(head)) else {
                same = false;
                return false;
            };
            let head = match header.begin.load(Acquire) == PENDING | self.ts {
                true => match header.prev.load(Acquire) {
                    // A placeholder of ours: no key was there.
                    0 => return true,
                    prev => prev - 1,
                },
                false => head,
            };
            while seen.get(at) != Some(&head) && reaped(at) {
                at += 1;
            }
            same = seen
                .get(at)
                .is_some_and(|&seen| seen == head || self.copies_of(table, Addr(head), Addr(seen)));
            at += 1;
            same
        });
        while reaped(at) {
            at += 1;
        }
        same && at == seen.len()
    }

    /// Scans a secondary span again: no entry but those seen then and
    /// those this transaction entered during step 1.
    fn entries_unchanged(&self, index: &SecondaryRt, span: &Span, occ: &OccSet) -> bool {
        let ends = &occ.entry_ends[span.seen.0..span.seen.1];
        let mut start = match span.seen.0 {
            0 => 0,
            first => occ.entry_ends[first - 1],
        };
        let mut seen = ends.iter().map(|&end| {
            let entry = &occ.entry_bytes[start..end];
            start = end;
            entry
        });
        let mut expected = seen.next();
        let mut same = true;
        let own = |entry: &[u8]| {
            self.entered
                .iter()
                .any(|(_, i, e)| std::ptr::eq(i.as_ref(), index) && e == entry)
        };
        let (lower, upper) = (as_ref(&span.lower), as_ref(&span.upper));
        index.tree.scan(lower, upper, None, |entry, _| {
            // An entry gone since is one the vacuum found stale: a row it
            // led to that had the key was read, and is validated as such.
            while expected.is_some_and(|seen| seen < entry) {
                expected = seen.next();
            }
            if expected == Some(entry) {
                expected = seen.next();
            } else if !own(entry) {
                same = false;
            }
            same
        });
        same
    }

    /// Adds to the rows of an index lookup the rows this transaction
    /// wrote that are in its range (the tree gets their entries only at
    /// commit), in the index's order, keeping `limit`.
    pub(super) fn add_buffered_rows(
        &self,
        table: &TableRt,
        index: &SecondaryRt,
        range: (&Bound<Vec<u8>>, &Bound<Vec<u8>>),
        (rows, limit): (&mut super::Rows, usize),
    ) {
        let occ = self.occ_set();
        let mut secondary = Vec::new();
        let mut added = false;
        for w in occ.writes.iter().filter(|w| w.table == table.heap.def.id) {
            let (key, Some(value)) = (occ.key(w), occ.value(w)) else {
                continue;
            };
            let in_range = index.secondary_key(key, value, &mut secondary)
                && std::ops::RangeBounds::contains(
                    &(as_ref(range.0), as_ref(range.1)),
                    &secondary.as_slice(),
                );
            if in_range && !rows.iter().any(|(k, _)| k == key) {
                rows.push((key.to_vec(), value.to_vec()));
                added = true;
            }
        }
        if added {
            let order = |(key, value): &(Vec<u8>, Vec<u8>)| {
                let mut secondary = Vec::new();
                index.secondary_key(key, value, &mut secondary);
                (secondary, key.clone())
            };
            rows.sort_by_cached_key(order);
            rows.truncate(limit);
        }
    }

    /// Remembers the entries a secondary lookup fetched from `lower`:
    /// up to the last, or to `upper` if the fetch was short.
    pub(super) fn occ_scanned_entries(
        &self,
        index: Arc<SecondaryRt>,
        (lower, upper, exhausted): (&Bound<Vec<u8>>, &Bound<Vec<u8>>, bool),
        entries: &[Vec<u8>],
    ) {
        let mut occ = self.occ_set();
        let from = occ.entry_ends.len();
        for entry in entries {
            occ.entry_bytes.extend_from_slice(entry);
            let end = occ.entry_bytes.len();
            occ.entry_ends.push(end);
        }
        let seen = (from, occ.entry_ends.len());
        let upper = match (exhausted, entries.last()) {
            (false, Some(last)) => Bound::Included(last.clone()),
            _ => upper.clone(),
        };
        occ.spans.push(Span {
            tree: SpanOf::Entries(index),
            lower: lower.clone(),
            upper,
            seen,
        });
    }

    /// Step 4: our versions under the commit id, into the write set that
    /// MVTO's commit makes durable and publishes.
    fn install(&mut self, occ: &mut OccSet, commit_id: u64) -> Result<()> {
        self.ts = commit_id;
        // Before anything is published: the vacuum keeps an entry whose
        // value is at least the newest version's id (`judge_stale`), and
        // ours carry the begin id until now.
        for (_, index, entry) in &self.entered {
            let _ = index
                .tree
                .insert_or_raise(entry, commit_id, commit_id, self.began);
        }
        let store = self.store;
        let mut set = store.write_sets[self.worker].lock();
        set.ts = commit_id;
        let hints = std::mem::take(&mut self.hints);
        let mut result = Ok(());
        for i in 0..occ.locks.len() {
            let write = &occ.writes[occ.order[i]];
            let table = store.table(write.table);
            let kv = (occ.key(write), occ.value(write));
            let installed = match occ.locks[i] {
                Lock::Head { head, hint } => {
                    let hint = hint.map(|at| &hints[at]);
                    self.install_successor(table, kv, head, (set.region, hint))
                }
                Lock::Placeholder(new) => {
                    self.publish_placeholder(table, new).map(|bytes| Installed {
                        new,
                        prev: None,
                        placeholder_bytes: Some(bytes),
                    })
                }
            };
            match installed {
                Ok(Installed {
                    new,
                    prev,
                    placeholder_bytes,
                }) => {
                    let mut entry = self.written(table, new, prev, kv, &mut set);
                    // `written` measured the slot last encoded, not this one.
                    if let Some(bytes) = placeholder_bytes {
                        entry.bytes = bytes;
                    }
                    set.writes.push(entry);
                    occ.installed = i + 1;
                }
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
        }
        self.hints = hints;
        result
    }

    /// Our successor of a locked head: its address, and the head with
    /// whether it was a deletion.
    fn install_successor(
        &mut self,
        table: &TableRt,
        kv: (&[u8], Option<&[u8]>),
        head: Addr,
        at: (usize, Option<&UpdateHint<'_>>),
    ) -> Result<Installed> {
        let deleted = table
            .heap
            .tombstone(&self.store.medium, head)
            .ok_or_else(|| {
                Error::Corrupt(format!(
                    "version at {head:?} of table {:?} is damaged",
                    table.heap.def.name
                ))
            })?;
        let new = self.append_after(table, kv, head, at)?;
        Ok(Installed {
            new,
            prev: Some((head, deleted)),
            placeholder_bytes: None,
        })
    }

    /// A placeholder's version under the commit id. Its slot keeps the
    /// begin id: rewriting it would put a larger id in a block before a
    /// block some later placeholder of ours may have started (block min
    /// txns must ascend), and the begin id orders its chain as well: the
    /// key had no head since before we began (a tombstone is reaped only
    /// below every running transaction), and every later version of it
    /// commits above our commit id.
    fn publish_placeholder(&mut self, table: &TableRt, addr: Addr) -> Result<u32> {
        self.version(table, addr)?
            .begin
            .store(PENDING | self.ts, Release);
        Ok(table.heap.slot_bytes(&self.store.medium, addr))
    }

    /// After a failed commit: undoes the locks not turned into entries of
    /// the write set (`rollback` undoes those).
    pub(super) fn release_occ_locks(&mut self) {
        let Some(cell) = self.occ.as_ref() else {
            return;
        };
        let mut occ = cell.borrow_mut();
        let (store, lock_id) = (self.store, self.began);
        let mut holes = false;
        for i in occ.installed..occ.locks.len() {
            let write = &occ.writes[occ.order[i]];
            let table = store.table(write.table);
            let key = occ.key(write);
            let new = match occ.locks[i] {
                Lock::Head { head, .. } => {
                    if let Some(header) = table.heap.header(head) {
                        header.end.store(0, Release);
                    }
                    continue;
                }
                Lock::Placeholder(new) => {
                    table.index.remove_if(key, new.0, 0, lock_id);
                    new
                }
            };
            holes = true;
            if let Some(header) = table.heap.header(new) {
                header.begin.store(ABORTED, Release);
            }
            table.heap.make_hole(&store.medium, new, lock_id);
        }
        // As MVTO's aborts: fenced holes, which no later LCTT resurrects;
        // a failed fence leaves them above LCTT, which recovery drops.
        if holes {
            let _ = store.medium.fence();
        }
        occ.locks.clear();
        occ.installed = 0;
    }
}
