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
//!   (remembered like any read) to answer insert, update or delete. A key
//!   it finds absent is remembered only if the write is refused: a
//!   buffered one enters a placeholder at commit, which holds the key
//!   absent up to the commit id (step 1), so validating it again would
//!   only repeat that descent.
//! * A cursor fetch remembers the heads of the index entries it covered,
//!   in key order, with the span of keys it covered; buffered writes
//!   inside the span are merged into what the cursor returns.
//!
//! # Commit
//! 0. A writing commit whose read is superseded already (step 3 must
//!    fail) gives up before it appends anything (`read_superseded`).
//! 1. Lock the write set in (table, key) order, so committers never
//!    deadlock: CAS the `end` of the head the write read 0 → LOCKED|id,
//!    where id is the begin timestamp (unique); `Conflict` if it is no
//!    longer the head, or its `begin` changed (the slot was reused). A key
//!    read absent gets a placeholder: its new version, PENDING under the
//!    id, entered in the index, which every other reader and committer
//!    waits for; it goes into the leaf the read found the key missing
//!    from, and a run of placeholders into one leaf carries the later
//!    hints over the earlier inserts (`UpdateHint::follow`), so the run
//!    descends no more. A lock another committer holds is waited for,
//!    boundedly (it is about to be released or published).
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

mod commit;
mod validate;

use super::cursor::Order;
use super::{SecondaryRt, Store, TableRt, TxnState, WriteKind, WriteProbe};
use crate::error::{Error, Result};
use crate::heap::tile::{ABORTED, PENDING, REAPED};
use crate::heap::{Addr, VersionAt, VersionHeader};
use crate::index::UpdateHint;
use std::ops::Bound;
use std::sync::atomic::Ordering::Acquire;
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
    /// Once the writes are hashed: the hash of (table, key).
    hash: u64,
    /// The next buffered write in the same bucket (`NONE`).
    next_alike: usize,
}

/// What a write read at its key, kept so that commit need not look the
/// key up again (Silo keeps record pointers in its write set).
#[derive(Clone, Copy)]
enum Found {
    /// No entry, with where the index would have it (as `Head`'s hint),
    /// for commit to enter its placeholder from there.
    Absent { hint: Option<usize> },
    /// A committed head with its TID word, and where the index had it
    /// (a position in `TxnState::hints`), if that may be reused; whether
    /// it is a deletion (a committed record never changes, and a copy GC
    /// makes of it says the same), so that commit need not read it again.
    Head {
        head: Addr,
        begin: u64,
        hint: Option<usize>,
        deleted: bool,
    },
}

/// No further write in a hash chain.
const NONE: usize = usize::MAX;
/// Buffered writes searched one by one up to this many; beyond, by hash.
const LINEAR_WRITES: usize = 16;
/// The fewest buckets the hashed writes get.
const MIN_BUCKETS: usize = 64;

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
struct Installed<'t> {
    new: Addr,
    /// The header of `new`, for publish.
    header: &'t VersionHeader,
    prev: Option<(Addr, bool)>,
    placeholder_bytes: Option<u32>,
}

type SpareHeaders = (
    Vec<&'static VersionHeader>,
    Vec<Option<&'static VersionHeader>>,
    Vec<&'static VersionHeader>,
);

/// Headers a transaction found once and uses again (`TxnState::occ_headers`).
#[derive(Default)]
pub(in crate::txn) struct OccHeaders<'s> {
    /// Of `OccSet::reads`, same positions.
    reads: std::cell::RefCell<Vec<&'s VersionHeader>>,
    /// Of the heads of `OccSet::locks`, same positions (`None` for a
    /// placeholder).
    locked: Vec<Option<&'s VersionHeader>>,
    /// Of the versions commit installed, in the order of the write set's
    /// entries (which only `install` fills under this scheme).
    installed: Vec<&'s VersionHeader>,
}

impl<'s> OccHeaders<'s> {
    /// Empty vectors with the capacity an earlier transaction left in
    /// `occ` (growing them anew cost YCSB-A more than the lookups saved).
    pub(in crate::txn) fn reusing(occ: &mut OccSet) -> OccHeaders<'s> {
        let (reads, locked, installed) = std::mem::take(&mut occ.spare_headers);
        OccHeaders {
            reads: std::cell::RefCell::new(reads),
            locked,
            installed,
        }
    }

    /// The headers of a write set's `count` entries, new and replaced, if
    /// commit installed them all (else the caller finds them).
    pub(in crate::txn) fn installed(
        &self,
        count: usize,
    ) -> Option<(&[&'s VersionHeader], &[Option<&'s VersionHeader>])> {
        (count > 0 && self.installed.len() == count && self.locked.len() == count)
            .then_some((&self.installed, &self.locked))
    }

    /// Leaves the vectors' memory, emptied, to the next transaction.
    pub(in crate::txn) fn give_back(self, occ: &mut OccSet) {
        occ.spare_headers = (
            emptied(self.reads.into_inner()),
            emptied(self.locked),
            emptied(self.installed),
        );
    }
}

/// `v` emptied, as a vector of another element type of the same layout in
/// the same memory (collecting a vector's iterator reuses its allocation
/// when the layouts match): here, references freed of a transaction's
/// lifetime.
fn emptied<A, B>(mut v: Vec<A>) -> Vec<B> {
    v.clear();
    v.into_iter()
        .map(|_| unreachable!("the vector is empty"))
        .collect()
}

/// What commit step 1 holds for a buffered write (same position).
#[derive(Clone, Copy)]
enum Lock {
    /// The head's `end` is LOCKED under our id; `hint` and `deleted` as
    /// in `Found`.
    Head {
        head: Addr,
        hint: Option<usize>,
        deleted: bool,
    },
    /// Our new version, entered in the index while the key had none.
    Placeholder(Addr),
}

/// One worker's optimistic read and write sets, kept between transactions
/// so that they allocate nothing once grown.
#[derive(Default)]
pub struct OccSet {
    writes: Vec<Buffered>,
    bytes: Vec<u8>,
    /// Once there are more than `LINEAR_WRITES`: per bucket (hash of
    /// (table, key) modulo its power-of-two length), the last buffered
    /// write there, chained through `Buffered::next_alike`; `NONE` in
    /// every other bucket, also between transactions.
    buckets: Vec<usize>,
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
    /// `OccHeaders`' memory between transactions.
    spare_headers: SpareHeaders,
    /// Locks (in `order`) turned into versions of the write set already.
    installed: usize,
    /// Bit `t` set: a write of table `t` (modulo 64) is buffered. Most
    /// reads are of tables the transaction does not write (TPC-C's items,
    /// a New-Order's warehouse and customer): they skip the search.
    written_tables: u64,
}

/// A table's bit in `OccSet::written_tables`.
fn table_bit(table: u32) -> u64 {
    1 << (table % 64)
}

impl OccSet {
    pub(super) fn clear(&mut self) {
        if self.writes.len() > LINEAR_WRITES {
            let mask = self.buckets.len() - 1;
            for write in &self.writes {
                self.buckets[write.hash as usize & mask] = NONE;
            }
        }
        debug_assert!(self.buckets.iter().all(|&at| at == NONE));
        self.writes.clear();
        self.bytes.clear();
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
        self.written_tables = 0;
    }

    fn key(&self, write: &Buffered) -> &[u8] {
        &self.bytes[write.key.0..write.key.1]
    }

    fn value(&self, write: &Buffered) -> Option<&[u8]> {
        write.value.map(|(from, to)| &self.bytes[from..to])
    }

    /// The buffered write of `key` (a key has at most one).
    fn find(&self, table: u32, key: &[u8]) -> Option<usize> {
        // Most reads come before any write of their table, or in
        // read-only transactions.
        if self.written_tables & table_bit(table) == 0 {
            debug_assert!(self.writes.iter().all(|w| w.table != table));
            return None;
        }
        let head = crate::index::key_prefix(key);
        let same = |w: &Buffered| w.head == head && w.table == table && self.key(w) == key;
        if self.writes.len() <= LINEAR_WRITES {
            return self.writes.iter().position(same);
        }
        let mask = self.buckets.len() - 1;
        let mut at = self.buckets[hash(table, key) as usize & mask];
        while at != NONE {
            if same(&self.writes[at]) {
                return Some(at);
            }
            at = self.writes[at].next_alike;
        }
        None
    }

    /// Buffers a write of `key`; `existing` is what `find` answered for
    /// it (the caller looked already: a second search cost a large write
    /// set, a Delivery's 130 writes, as much as the first).
    fn buffer(
        &mut self,
        existing: Option<usize>,
        (table, key): (u32, &[u8]),
        value: Option<&[u8]>,
        found: Found,
    ) {
        let value = value.map(|v| {
            let from = self.bytes.len();
            self.bytes.extend_from_slice(v);
            (from, self.bytes.len())
        });
        if let Some(at) = existing {
            let write = &self.writes[at];
            assert!(
                write.table == table && self.key(write) == key,
                "a buffered write is replaced by a write of its own key"
            );
            self.writes[at].value = value;
            return;
        }
        debug_assert_eq!(self.find(table, key), None, "a key has one buffered write");
        self.written_tables |= table_bit(table);
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
            hash: 0,
            next_alike: NONE,
        });
        let n = self.writes.len();
        if n == LINEAR_WRITES + 1 && self.buckets.len() >= MIN_BUCKETS {
            (0..n).for_each(|at| self.index_write(at));
        } else if n > LINEAR_WRITES && 2 * n > self.buckets.len() {
            self.rehash();
        } else if n > LINEAR_WRITES {
            self.index_write(n - 1);
        }
    }

    /// Hashes every write into a table at most half full.
    fn rehash(&mut self) {
        let buckets = (4 * self.writes.len()).next_power_of_two().max(MIN_BUCKETS);
        self.buckets.clear();
        self.buckets.resize(buckets, NONE);
        (0..self.writes.len()).for_each(|at| self.index_write(at));
    }

    fn index_write(&mut self, at: usize) {
        let write = &self.writes[at];
        let hash = hash(write.table, self.key(write));
        let mask = self.buckets.len() - 1;
        let next = std::mem::replace(&mut self.buckets[hash as usize & mask], at);
        let write = &mut self.writes[at];
        write.hash = hash;
        write.next_alike = next;
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

/// Multiplicative hashing of the key's words (as FxHash does), finished
/// with MurmurHash3's 64-bit mixer. Keys are big-endian, so consecutive
/// ones differ in the high bits of their last word read little-endian, and
/// a multiplication carries differences only upwards, while the buckets
/// are picked by the low bits: without the mixer, all such keys share one
/// bucket and a large write set degrades into one chain.
fn hash(table: u32, key: &[u8]) -> u64 {
    const K: u64 = 0x517c_c1b7_2722_0a95;
    let mut hash = u64::from(table).wrapping_mul(K);
    for chunk in key.chunks(8) {
        let mut word = [0; 8];
        word[..chunk.len()].copy_from_slice(chunk);
        hash = (hash.rotate_left(5) ^ u64::from_le_bytes(word)).wrapping_mul(K);
    }
    hash ^= hash >> 33;
    hash = hash.wrapping_mul(0xff51_afd7_ed55_8ccd);
    hash ^= hash >> 33;
    hash = hash.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    hash ^ (hash >> 33)
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
        self.committed_read(self.store.table(table.heap.def.id), key, out)
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
        let table: &'s TableRt = self.store.table(table.heap.def.id);
        if head != BUFFERED {
            if let Some((live, _)) = self.observe(table, Addr(head), None, Some(out))? {
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
    fn committed_read(&self, table: &'s TableRt, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        let medium = &self.store.medium;
        if let Some(found) = table.cached_head(medium, key) {
            if let Some((live, _)) = self.observe(table, found.addr, Some(found), Some(out))? {
                return Ok(live);
            }
        }
        loop {
            let Some(head) = table.lookup(medium, key)? else {
                self.remember_absent(table, key);
                return Ok(false);
            };
            let found = table.heap.find_version(medium, Addr(head));
            if let Some((live, _)) = self.observe(table, Addr(head), found, Some(out))? {
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
    /// `found` is `head` if the caller found it already.
    fn observe(
        &self,
        table: &'s TableRt,
        head: Addr,
        found: Option<VersionAt<'s>>,
        out: Option<&mut Vec<u8>>,
    ) -> Result<Option<(bool, u64)>> {
        let found = found.filter(|f| f.addr == head);
        let header = match found {
            Some(found) => found.header,
            None => self.version(table, head)?,
        };
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
        let live = match (out, found) {
            (Some(out), Some(found)) => table.read_found(medium, &found, out),
            (Some(out), None) => table.read_value(medium, head, out),
            (None, _) => match table.heap.tombstone(medium, head) {
                Some(deleted) => Ok(!deleted),
                None => Err(Error::Conflict),
            },
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
        self.occ_headers.reads.borrow_mut().push(header);
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
                .map(|at| (at, occ.writes[at].value.is_some(), occ.writes[at].found))
        };
        let read_now = buffered.is_none();
        let (existed, found) = match buffered {
            Some((_, existed, found)) => (existed, found),
            None => self.read_for_write(id, key)?,
        };
        // A key this read found absent gets a placeholder at commit, which
        // holds it absent up to the commit id (step 1): its absence needs
        // validating only if the write is not buffered.
        let unbuffered = |txn: &Self| {
            if read_now && matches!(found, Found::Absent { .. }) {
                txn.remember_absent(table, key);
            }
        };
        if let Some(answer) = self.refuse(kind, existed) {
            unbuffered(self);
            return self.unless_stale(answer);
        }
        if table.secondaries.count() > 0 {
            let checked = self.check_unique_optimistically(table, (key, value), found);
            if checked.is_err() {
                unbuffered(self);
            }
            self.unless_stale(checked)?;
        }
        let existing = buffered.map(|(at, ..)| at);
        self.occ_set().buffer(existing, (id, key), value, found);
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
            let (head, hint) = match table.lookup_for_update(&store.medium, key, self.ts)? {
                WriteProbe::Head(head, hint) => (Addr(head), hint),
                // Remembered by the caller unless the write is buffered.
                WriteProbe::Absent(hint) => {
                    let hint = hint.and_then(|hint| self.keep_hint(table, hint));
                    return Ok((false, Found::Absent { hint }));
                }
            };
            let found = table.heap.find_version(&store.medium, head);
            let Some((live, begin)) = self.observe(table, head, found, None)? else {
                continue;
            };
            let hint = self.keep_hint(table, hint);
            let deleted = !live;
            return Ok((
                live,
                Found::Head {
                    head,
                    begin,
                    hint,
                    deleted,
                },
            ));
        }
    }

    /// Keeps the leaf a write found its key in (or missing from) for its
    /// commit; its position in `hints`. Nodes of trees with node versions
    /// are recycled: a leaf held for long could be another node by commit.
    fn keep_hint(&mut self, table: &TableRt, hint: UpdateHint<'s>) -> Option<usize> {
        (!table.index.has_node_versions()).then(|| {
            if self.hints.capacity() == 0 {
                self.hints.reserve(LINEAR_WRITES);
            }
            self.hints.push(hint);
            self.hints.len() - 1
        })
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
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Keys are big-endian, so consecutive ones differ in their last
    /// bytes; the buckets (the hash's low bits) must still tell them apart,
    /// or a large write set degrades into one long chain.
    #[test]
    fn consecutive_big_endian_keys_spread_over_the_buckets() {
        const BUCKETS: u64 = 1024;
        for width in [8usize, 12, 16] {
            let buckets: std::collections::HashSet<u64> = (0..BUCKETS)
                .map(|n| {
                    let mut key = vec![0u8; width];
                    key[..8].copy_from_slice(&n.to_be_bytes());
                    key.rotate_left(width - 8);
                    hash(7, &key) & (BUCKETS - 1)
                })
                .collect();
            assert!(
                buckets.len() as u64 > BUCKETS / 2,
                "{width}-byte keys: {} of {BUCKETS} buckets used",
                buckets.len()
            );
        }
    }

    #[test]
    fn a_large_write_set_finds_every_key_and_only_those() {
        let mut set = OccSet::default();
        let found = Found::Absent { hint: None };
        for n in 0u64..1000 {
            set.buffer(None, (3, &n.to_be_bytes()), Some(&n.to_le_bytes()), found);
        }
        for n in 0u64..1000 {
            let at = set.find(3, &n.to_be_bytes()).expect("buffered key");
            assert_eq!(set.key(&set.writes[at]), n.to_be_bytes());
            assert_eq!(set.find(4, &n.to_be_bytes()), None);
        }
        assert_eq!(set.find(3, &1000u64.to_be_bytes()), None);
        set.clear();
        assert_eq!(set.find(3, &5u64.to_be_bytes()), None);
    }
}
