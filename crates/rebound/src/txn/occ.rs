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
//!    deadlock: CAS the head's `end` 0 → LOCKED|id, where id is the begin
//!    timestamp (unique). A key without a head gets a placeholder: its new
//!    version, PENDING under the id, entered in the index, which every
//!    other reader and committer waits for. A lock another committer holds
//!    is waited for, boundedly (it is about to be released).
//! 2. Take the commit id from the clock: the serialization point. Every
//!    version read or locked has a smaller id: its writer took its id
//!    before publishing it, this transaction after reading or locking it.
//! 3. Validate: every head read still has the `begin` seen and `end` 0
//!    or our lock (nothing superseded, reaped or reused it); every key read
//!    absent is absent still (or our placeholder); every span scanned again
//!    yields the same heads, our placeholders aside: no phantom.
//! 4. Install: a successor after each locked head, stamped with the commit
//!    id, and the placeholders rewritten with it; then the commit is MVTO's
//!    (persist the slots, LCTT, publish; `txn` module docs). Recovery, GC
//!    and checkpoints meet the versions of a commit as they always do.
//!
//! A read-only transaction validates and takes no id: it writes nothing
//! shared. A failure in steps 1 to 4 unlocks and aborts.
//!
//! # Durability in the log-free design
//! The slots are stamped with the commit id, the worker's largest so far
//! (the worker's previous commit took its id before this transaction
//! began), so a region's committed slots stay a prefix and LCTT = commit
//! id decides them: recovery keeps exactly the commits whose LCTT write
//! was fenced, as under MVTO. A placeholder's slot is appended during
//! step 1 under the begin id, above the worker's LCTT, and is rewritten
//! before the slots are persisted: a crash before LCTT drops it.

use super::cursor::Order;
use super::{Store, TableRt, TxnState, WriteKind};
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
    table: Arc<TableRt>,
    lower: Bound<Vec<u8>>,
    upper: Bound<Vec<u8>>,
    heads: (usize, usize),
}

/// What commit step 1 holds for a buffered write (same position).
#[derive(Clone, Copy)]
enum Lock {
    /// The head's `end` is LOCKED under our id, and our version `new`
    /// follows it in the index.
    Head { head: Addr, new: Addr },
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
        let same = |w: &Buffered| w.table == table && self.key(w) == key;
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
        self.writes.push(Buffered {
            table,
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
        if table.secondaries.count() > 0 {
            return Err(Error::InvalidOption(format!(
                "table {:?} has secondary indexes, which optimistic transactions do not maintain",
                table.heap.def.name
            )));
        }
        let id = table.heap.def.id;
        let buffered = {
            let occ = self.occ_set();
            occ.find(id, key).map(|at| occ.writes[at].value.is_some())
        };
        let (existed, found) = match buffered {
            Some(existed) => (existed, Found::Absent),
            None => self.read_for_write(id, key)?,
        };
        if let Some(answer) = self.refuse(kind, existed) {
            return answer;
        }
        self.occ_set().buffer(id, key, value, found);
        Ok(existed)
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
            table: table.clone(),
            lower: span.0,
            upper: span.1,
            heads,
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
            (a.table, occ.key(a)).cmp(&(b.table, occ.key(b)))
        });
        occ.order = order;
        let region = self.store.write_sets[self.worker].lock().region;
        let hints = std::mem::take(&mut self.hints);
        let mut result = Ok(());
        for i in 0..occ.order.len() {
            let write = &occ.writes[occ.order[i]];
            let table = self.store.table(write.table);
            let kv = (occ.key(write), occ.value(write));
            let hint = match write.found {
                Found::Head { hint, .. } => hint.map(|at| &hints[at]),
                Found::Absent => None,
            };
            match self.lock_one(table, kv, write.found, (region, hint)) {
                Ok(lock) => occ.locks.push(lock),
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
        }
        self.hints = hints;
        result
    }

    /// Locks what a write found: the head, with our new version appended
    /// after it and entered in the index (pending under our id), or, for
    /// a key that had none, a placeholder. `Conflict` if that changed.
    fn lock_one(
        &mut self,
        table: &TableRt,
        (key, value): (&[u8], Option<&[u8]>),
        found: Found,
        (region, hint): (usize, Option<&UpdateHint<'_>>),
    ) -> Result<Lock> {
        let Found::Head { head, begin, .. } = found else {
            return match self.enter_placeholder(table, key, value, region)? {
                Some(addr) => Ok(Lock::Placeholder(addr)),
                None => Err(Error::Conflict),
            };
        };
        let header = self.version(table, head)?;
        loop {
            match header
                .end
                .compare_exchange(0, LOCKED | self.ts, SeqCst, SeqCst)
            {
                Ok(_) => break,
                // Another committer: it is about to publish or give up.
                Err(end) if end & LOCKED != 0 && end != REAPED => {
                    self.wait_for_writer(&header.end, end)?
                }
                Err(_) => return Err(Error::Conflict),
            }
        }
        // `end` was 0, so this is a current head; but is it the one read?
        if header.begin.load(Acquire) != begin {
            header.end.store(0, Release);
            return Err(Error::Conflict);
        }
        match self.append_after(table, (key, value), head, (region, hint)) {
            Ok(new) => Ok(Lock::Head { head, new }),
            Err(e) => {
                header.end.store(0, Release);
                Err(e)
            }
        }
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
        let repointed = match hint {
            Some(hint) => table
                .index
                .compare_and_set_hinted(hint, key, head.0, new.0, self.ts),
            None => table.index.compare_and_set(key, head.0, new.0, self.ts),
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
            let header = self.version(self.store.table(read.table), read.head)?;
            let end = header.end.load(SeqCst);
            if header.begin.load(SeqCst) != read.begin || (end != 0 && end != mine) {
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
            let seen = &occ.span_heads[span.heads.0..span.heads.1];
            if !self.span_unchanged(span, seen) {
                return Err(Error::Conflict);
            }
        }
        Ok(())
    }

    /// Whether `head` is a placeholder this transaction entered at commit.
    fn is_own_placeholder(&self, table: &TableRt, head: u64) -> bool {
        table.heap.header(Addr(head)).is_some_and(|h| {
            h.begin.load(Acquire) == PENDING | self.ts && h.prev.load(Acquire) == 0
        })
    }

    /// Scans a span again: the same heads in order, where a key we locked
    /// counts with the head it had.
    fn span_unchanged(&self, span: &Span, seen: &[u64]) -> bool {
        let mut at = 0;
        let mut same = true;
        let (lower, upper) = (as_ref(&span.lower), as_ref(&span.upper));
        span.table.index.scan(lower, upper, None, |_, head| {
            let Some(header) = span.table.heap.header(Addr(head)) else {
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
            same = seen.get(at) == Some(&head);
            at += 1;
            same
        });
        same && at == seen.len()
    }

    /// Step 4: our versions restamped with the commit id, into the write
    /// set that MVTO's commit makes durable and publishes.
    fn install(&mut self, occ: &mut OccSet, commit_id: u64) -> Result<()> {
        self.ts = commit_id;
        let store = self.store;
        let mut set = store.write_sets[self.worker].lock();
        set.ts = commit_id;
        for i in 0..occ.locks.len() {
            let write = &occ.writes[occ.order[i]];
            let table = store.table(write.table);
            let (key, value) = (occ.key(write), occ.value(write));
            let (new, prev) = match occ.locks[i] {
                Lock::Head { head, new } => {
                    let deleted = table.heap.tombstone(&store.medium, head).ok_or_else(|| {
                        Error::Corrupt(format!(
                            "version at {head:?} of table {:?} is damaged",
                            table.heap.def.name
                        ))
                    })?;
                    (new, Some((head, deleted)))
                }
                Lock::Placeholder(new) => (new, None),
            };
            self.restamp(table, (key, value), new)?;
            if let Some((head, _)) = prev {
                // Publish checks the lock under the id the versions carry.
                self.version(table, head)?
                    .end
                    .store(LOCKED | commit_id, SeqCst);
            }
            let entry = self.written(table, new, prev, (key, value), &mut set);
            set.writes.push(entry);
            occ.installed = i + 1;
        }
        Ok(())
    }

    /// Rewrites one of our slots with the commit id (`self.ts`).
    fn restamp(
        &mut self,
        table: &TableRt,
        (key, value): (&[u8], Option<&[u8]>),
        addr: Addr,
    ) -> Result<()> {
        let (tombstone, value) = (value.is_none(), value.unwrap_or(&[]));
        table
            .heap
            .encode(&mut self.buf, self.ts, key, value, tombstone);
        let at = table.heap.slot_offset(addr).ok_or(Error::Conflict)?;
        self.store.medium.write_bytes(at, &self.buf);
        self.version(table, addr)?
            .begin
            .store(PENDING | self.ts, Release);
        Ok(())
    }

    /// After a failed commit: undoes the locks not turned into entries of
    /// the write set (`rollback` undoes those).
    pub(super) fn release_occ_locks(&mut self) {
        let Some(cell) = self.occ.as_ref() else {
            return;
        };
        let mut occ = cell.borrow_mut();
        let (store, lock_id) = (self.store, self.began);
        for i in occ.installed..occ.locks.len() {
            let write = &occ.writes[occ.order[i]];
            let table = store.table(write.table);
            let key = occ.key(write);
            let new = match occ.locks[i] {
                Lock::Head { head, new } => {
                    let _ = table.index.compare_and_set(key, new.0, head.0, lock_id);
                    if let Some(header) = table.heap.header(head) {
                        header.end.store(0, Release);
                    }
                    new
                }
                Lock::Placeholder(new) => {
                    table.index.remove_if(key, new.0, 0, lock_id);
                    new
                }
            };
            if let Some(header) = table.heap.header(new) {
                header.begin.store(ABORTED, Release);
            }
            table.heap.make_hole(&store.medium, new, lock_id);
        }
        // As MVTO's aborts: fenced holes, which no later LCTT resurrects;
        // a failed fence leaves them above LCTT, which recovery drops.
        if occ.locks.len() > occ.installed {
            let _ = store.medium.fence();
        }
        occ.locks.clear();
        occ.installed = 0;
    }
}
