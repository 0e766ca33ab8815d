//! Transactions: multi-version timestamp ordering (FIR 4.2) over the heap's
//! version headers, with the commit protocol that makes the time-ordered
//! heap a log.
//!
//! # MVTO
//! A transaction takes its timestamp `ts` (also its txn id) at begin.
//! * A read walks the version chain from the index's head to the newest
//!   version with `begin ≤ ts`, raises its `read` to `ts`, then re-checks
//!   `end`: if a writer older than `ts` locked it meanwhile, the reader waits
//!   for that writer briefly and otherwise reports a conflict.
//! * A write locks the head version (`end: 0 → LOCKED|ts`), then checks that
//!   no younger transaction has read it (`read ≤ ts`) and that it is not
//!   younger itself (`begin ≤ ts`). Lock-then-check on the writer and
//!   mark-then-check on the reader, both sequentially consistent, mean one
//!   of the two always sees the other.
//! * Reading an absent key or a range records `ts` in the index leaf's gap
//!   timestamp, so an older transaction cannot insert into it afterwards
//!   (phantom protection); the index checks that under the leaf lock.
//! * Writers never wait; a conflicting write aborts with [`Error::Conflict`].
//!
//! # Commit protocol (the durability argument)
//! 1. write back every new slot, fence: the versions are durable;
//! 2. LCTT[worker] = ts, write back, fence: the transaction is durable;
//! 3. only now clear the versions' PENDING bits and set the predecessors'
//!    `end`, so no other transaction can read or overwrite a version whose
//!    commit is not durable.
//!
//! The predecessors' obsolete bits are set in step 3, so a set bit is
//! always true. Bits of predecessors redo would find wait for the next
//! checkpoint, which writes them back; recovery sets them again if they
//! were lost. The others go back with the worker's next commit, so a crash
//! can lose for good only those of each worker's last commit
//! (`obsolete_bits`).
//!
//! Recovery treats a slot as committed iff its txn id ≤ LCTT[worker] (its
//! region's worker). Within a worker, transactions run one at a time in ts
//! order, so the committed slots of a region are a prefix.
//!
//! # Abort
//! The new versions are marked ABORTED in DRAM, the index is pointed back at
//! the predecessors (or the fresh key removed), locks are released, and the
//! slots become *holes* (their txn word gets the hole flag) that are fenced before the abort
//! returns — so a later commit of the same worker, whose LCTT value is larger
//! than the aborted id, can never resurrect them.

mod admission;
mod changes;
mod clock;
mod cursor;
mod index_build;
mod long;
mod obsolete_bits;
mod occ;
mod relocate;
mod sampler;
mod secondary;
mod snapshot;
mod stall;

pub use admission::{Admission, AdmissionLimit, Permit};
pub use changes::{Capture, ChangeLog, Changes, Committed};
pub use clock::Clock;
pub use cursor::{prefix_end, Cursor, Order};
pub use index_build::{Collected, EntryRun};
use obsolete_bits::ObsoleteBits;
pub use occ::Concurrency;
use occ::{OccHeaders, OccSet};
pub use relocate::relocate;
pub use sampler::{Sample, UpdateSampler};
pub use secondary::{Rows, SecondaryRt, Stale, DROPPED, READY};
pub use snapshot::{Anchor, FRESH_PATIENCE};

use crate::catalog;
use crate::error::{Error, Result};
use crate::heap::tile::{ABORTED, LOCKED, PENDING, REAPED};
use crate::heap::{Addr, SlotRead, SlotWord, Space, TableHeap, VersionAt, VersionHeader};
use crate::index::{BTree, HeadCacheMode, InsertError, LeafMoved, UpdateHint};
use crate::medium::Medium;
use crossbeam_utils::CachePadded;
use std::ops::{Bound, RangeBounds};
use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, Release, SeqCst};
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8};
use std::sync::Arc;

/// How long a reader spins on a writer that is finishing its commit.
const WAIT_SPINS: u32 = 1 << 14;
/// How much of each committed record a commit loads back after writing it
/// back: a hot row's header and first value bytes, not a large value.
const REFETCHED_RECORD_BYTES: u64 = 256;

/// Counts of one worker's transactions.
#[derive(Default)]
pub struct WorkerCounters {
    /// Versions written by committed transactions.
    written: AtomicU64,
    commits: AtomicU64,
    /// Transactions that hit a serialization conflict.
    conflicts: AtomicU64,
}

/// Everything transactions share: the medium, free space, the clock, tables.
pub struct Store {
    medium: Medium,
    space: Space,
    clock: Clock,
    tables: boxcar::Vec<Arc<TableRt>>,
    /// Distinguishes table handles of different open databases.
    instance: u64,
    /// Per worker: timestamp of its running transaction, 0 when idle.
    active: Box<[AtomicU64]>,
    /// Per worker: timestamp of its open snapshot, 0 when none (`snapshot`).
    snapshots: Box<[AtomicU64]>,
    /// Snapshots that started below a writer they would not wait for.
    stale_snapshots: AtomicU64,
    /// Per worker: reads of its snapshot in progress (`SnapshotOp`); a
    /// snapshot is expired only between them.
    snapshot_ops: Box<[AtomicU32]>,
    /// Snapshots expired for holding GC back too far.
    expired_snapshots: AtomicU64,
    /// Per worker (sessions and GC): timestamp of its newest committed
    /// transaction that wrote, stored when it publishes, before it is
    /// acknowledged. Contiguous: a snapshot reads them all at begin.
    last_writes: Box<[AtomicU64]>,
    /// Per worker: what its transactions did (each on its own cache line).
    counters: Box<[CachePadded<WorkerCounters>]>,
    /// Tombstones committed since the last reaping: (table, address).
    deleted: parking_lot::Mutex<Vec<(u32, Addr)>>,
    /// Per worker: whether its running transaction is a long one (LONG_*).
    long: Box<[AtomicU8]>,
    /// Transactions moved to a long-transaction region since open.
    long_moved: AtomicU64,
    /// Per long-transaction region (indexed from `LONG_REGIONS`): the
    /// newest of its commits whose versions are visible in the index
    /// (published, paths re-marked). A checkpoint that reads these after
    /// taking its horizons sees every commit up to them, so recovery need
    /// not redo them (see `checkpoint_horizon`).
    long_published: Box<[AtomicU64]>,
    /// Per worker: its running transaction's write set. The transaction
    /// holds it while it writes, commits or rolls back; the background
    /// thread takes it to move an idle long transaction.
    write_sets: Box<[parking_lot::Mutex<WriteSet>]>,
    /// Timestamp of GC's running system transaction, 0 when none runs:
    /// writers that meet its locks wait for it instead of conflicting.
    gc_txn: AtomicU64,
    /// Raised by GC while it falls behind the writers (see `stall`).
    write_stall: Arc<stall::WriteStall>,
    /// Secondary index entries that may be stale (see `secondary`).
    index_garbage: parking_lot::Mutex<Vec<Stale>>,
    /// Versions committed since the last checkpoint (for delta ones).
    changes: ChangeLog,
    /// The redo log of the `wal` design, once recovery has replayed it.
    log: std::sync::OnceLock<Arc<crate::wal::Log>>,
    /// How user transactions are kept serializable.
    concurrency: Concurrency,
    /// When tables' point reads use their head cache.
    head_cache: HeadCacheMode,
    /// How many user transactions may run at once.
    admission: Admission,
}

/// A transaction running for less than the long-transaction threshold.
pub const LONG_NONE: u8 = 0;
/// Past the threshold: it moves its versions at its next call.
pub const LONG_REQUESTED: u8 = 1;
/// Its versions live in its worker's long-transaction region.
pub const LONG_MIGRATED: u8 = 2;

impl Store {
    #[inline]
    pub fn medium(&self) -> &Medium {
        &self.medium
    }

    /// Free space of the medium.
    #[inline]
    pub fn space(&self) -> &Space {
        &self.space
    }

    /// The timestamp clock.
    #[inline]
    pub fn clock(&self) -> &Clock {
        &self.clock
    }

    /// Every table, in creation order (a table's id is its position).
    #[inline]
    pub fn tables(&self) -> impl Iterator<Item = &Arc<TableRt>> {
        self.tables.iter().map(|(_, table)| table)
    }

    /// How many tables exist.
    #[inline]
    pub fn table_count(&self) -> usize {
        self.tables.count()
    }

    /// The table with id `id`; panics if there is none (for ids taken
    /// from the store's own tables or versions).
    #[inline]
    #[track_caller]
    pub fn table(&self, id: u32) -> &Arc<TableRt> {
        &self.tables[id as usize]
    }

    /// The table with id `id`, if it exists.
    #[inline]
    pub fn get_table(&self, id: u32) -> Option<&Arc<TableRt>> {
        self.tables.get(id as usize)
    }

    /// Adds a table; its id is the table count before the call.
    pub fn add_table(&self, table: Arc<TableRt>) {
        self.tables.push(table);
    }

    /// Distinguishes table handles of different open databases.
    #[inline]
    pub fn instance(&self) -> u64 {
        self.instance
    }

    /// Whether `table` is a table of this store (not a handle from another
    /// open database).
    #[inline]
    pub fn owns(&self, table: &TableRt) -> bool {
        table.instance == self.instance
    }

    /// Versions committed since the last checkpoint.
    #[inline]
    pub fn changes(&self) -> &ChangeLog {
        &self.changes
    }

    /// The redo log of the `wal` design, once started.
    #[inline]
    pub fn log(&self) -> Option<&Arc<crate::wal::Log>> {
        self.log.get()
    }

    /// Hands the store the redo log recovery replayed; commits record
    /// themselves in it from now on. False if a log was started already.
    pub fn start_log(&self, log: Arc<crate::wal::Log>) -> bool {
        self.log.set(log).is_ok()
    }

    /// Announces that `worker` runs a transaction that began at `ts`:
    /// horizons and low water stay at or below it until `retire`.
    #[inline]
    pub fn announce(&self, worker: usize, ts: u64) {
        self.active[worker].store(ts, SeqCst);
    }

    /// Announces that `worker` runs no transaction any more.
    #[inline]
    pub fn retire(&self, worker: usize) {
        self.active[worker].store(0, SeqCst);
    }

    /// Clears a long-transaction flag the background thread may have left
    /// on `worker`'s slot, so the next transaction there starts short.
    #[inline]
    pub fn clear_long_flag(&self, worker: usize) {
        self.long[worker].store(LONG_NONE, SeqCst);
    }

    /// Transactions moved to a long-transaction region since open.
    #[inline]
    pub fn long_transactions_moved(&self) -> u64 {
        self.long_moved.load(Acquire)
    }

    /// Publishes the timestamp of GC's running system transaction: writers
    /// that meet its locks wait for it until `end_gc_txn`.
    #[inline]
    pub fn begin_gc_txn(&self, ts: u64) {
        self.gc_txn.store(ts, Release);
    }

    /// GC's system transaction ended.
    #[inline]
    pub fn end_gc_txn(&self) {
        self.gc_txn.store(0, Release);
    }

    /// Writers wait for GC while this is up (see `stall`).
    pub fn write_stall(&self) -> &stall::WriteStall {
        &self.write_stall
    }

    /// Frees every table's extents held ready for its next blocks (see
    /// `heap/reserve.rs`); returns how many.
    pub fn release_reserves(&self) -> usize {
        self.tables
            .iter()
            .map(|(_, table)| table.heap.release_reserve(&self.medium, &self.space))
            .sum()
    }

    pub fn new(
        medium: Medium,
        space: Space,
        clock: Clock,
        tables: boxcar::Vec<Arc<TableRt>>,
        instance: u64,
    ) -> Store {
        let active = (0..crate::catalog::MAX_WORKERS)
            .map(|_| AtomicU64::new(0))
            .collect();
        let counters = (0..crate::catalog::MAX_WORKERS)
            .map(|_| CachePadded::new(WorkerCounters::default()))
            .collect();
        let long = (0..crate::catalog::MAX_WORKERS)
            .map(|_| AtomicU8::new(LONG_NONE))
            .collect();

        Store {
            medium,
            space,
            clock,
            tables,
            instance,
            snapshots: (0..crate::catalog::MAX_WORKERS)
                .map(|_| AtomicU64::new(0))
                .collect(),
            stale_snapshots: AtomicU64::new(0),
            snapshot_ops: (0..crate::catalog::MAX_WORKERS)
                .map(|_| AtomicU32::new(0))
                .collect(),
            expired_snapshots: AtomicU64::new(0),
            last_writes: (0..=catalog::GC_WORKER)
                .map(|_| AtomicU64::new(0))
                .collect(),
            active,
            counters,
            deleted: parking_lot::Mutex::new(Vec::new()),
            long,
            long_moved: AtomicU64::new(0),
            long_published: (crate::catalog::LONG_REGIONS..crate::catalog::MAX_WORKERS)
                .map(|_| AtomicU64::new(0))
                .collect(),
            gc_txn: AtomicU64::new(0),
            write_stall: Arc::default(),
            index_garbage: parking_lot::Mutex::new(Vec::new()),
            changes: ChangeLog::new(crate::catalog::MAX_WORKERS),
            log: std::sync::OnceLock::new(),
            write_sets: (0..crate::catalog::MAX_WORKERS)
                .map(|w| parking_lot::Mutex::new(WriteSet::new(w)))
                .collect(),
            concurrency: Concurrency::Mvto,
            head_cache: HeadCacheMode::Auto,
            admission: Admission::new(AdmissionLimit::Open),
        }
    }

    /// The store with user transactions run under `concurrency`, as many
    /// at once as `limit` admits.
    pub fn with_transaction_control(
        mut self,
        concurrency: Concurrency,
        limit: AdmissionLimit,
    ) -> Store {
        self.concurrency = concurrency;
        self.admission = Admission::new(limit);
        self
    }

    /// The store with its tables' point reads using their head caches as
    /// `mode` says (tables recovered already, and those created later).
    pub fn with_head_cache(mut self, mode: HeadCacheMode) -> Store {
        self.head_cache = mode;
        for table in self.tables() {
            table.index().set_head_cache(mode);
        }
        self
    }

    pub fn head_cache(&self) -> HeadCacheMode {
        self.head_cache
    }

    /// The admission limit in force now (`None`: open).
    pub fn admission_limit(&self) -> Option<usize> {
        self.admission.limit()
    }

    /// Transactions admitted past the longest wait without a place.
    pub fn admission_overdue(&self) -> u64 {
        self.admission.overdue()
    }

    /// Admission of a user transaction (see `admission`).
    pub fn admit(&self) -> Permit<'_> {
        self.admission.enter()
    }

    /// A snapshot's place: it runs beside any number of transactions.
    pub fn admit_snapshot(&self) -> Permit<'_> {
        self.admission.exempt()
    }

    /// Removes the index entries of deleted keys nobody can see any more;
    /// the others wait for the next call. Tables still loading their
    /// checkpoint run are left alone (the load could bring a key back).
    pub fn reap_deleted(&self) -> u64 {
        let pending = std::mem::take(&mut *self.deleted.lock());
        if pending.is_empty() {
            return 0;
        }
        let (low_water, ut) = (self.low_water(), self.clock.peek());
        let mut keep = Vec::new();
        let mut removed = 0;
        for (id, addr) in pending {
            let table = &self.tables[id as usize];
            // A dropped table's blocks go whole.
            if table.is_dropped() {
                continue;
            }
            let Some(header) = table.heap.header(addr) else {
                continue;
            };
            if header.begin.load(Acquire) >= low_water || table.is_loading() {
                keep.push((id, addr));
                continue;
            }
            let key = table.heap.read_key(&self.medium, addr);
            if table.index.get(&key) == Some(addr.0) {
                removed += table.reap_tombstone(&self.medium, &key, addr, low_water, ut) as u64;
            }
        }
        self.deleted.lock().extend(keep);
        if removed > 0 {
            // The reaped tombstones' obsolete bits.
            let _ = self.medium.fence();
        }
        removed
    }

    /// Versions written by committed transactions since open.
    pub fn versions_written(&self) -> u64 {
        self.counters.iter().map(|c| c.written.load(Acquire)).sum()
    }

    /// Totals over all workers: (commits, conflicts).
    pub fn outcomes(&self) -> (u64, u64) {
        self.counters.iter().fold((0, 0), |(c, x), w| {
            (c + w.commits.load(Acquire), x + w.conflicts.load(Acquire))
        })
    }

    /// Starts writing back the obsolete bits every worker's commits left
    /// to the checkpoints (see `obsolete_bits`); the caller fences before
    /// its checkpoint is in force. Called once the checkpoint's image has
    /// resolved every entry: a commit that publishes after this take was
    /// running when the horizons were read (redo from that checkpoint finds
    /// it) and was not yet committed when the image resolved its keys (the
    /// image holds a predecessor, which recovery then finds displaced). A
    /// commit that was publishing holds its write-set lock, so the take
    /// waits for it and takes its words.
    pub fn write_back_obsolete_bits(&self) {
        let mut taken = Vec::new();
        for set in self.write_sets.iter() {
            set.lock().obsolete.move_into(&mut taken);
        }
        obsolete_bits::write_back_lines(&self.medium, &mut taken);
    }

    /// Redo horizons for a checkpoint: (t_low for session and GC regions,
    /// t_low for long-transaction regions, and per long region the newest
    /// commit the checkpoint is sure to see). Transactions whose versions
    /// moved to a long-transaction region do not hold the first one back.
    ///
    /// Redo of a long region starts below t_low, so it meets versions of
    /// long transactions that committed before the checkpoint and may
    /// since have been overwritten; redone blindly they would shadow the
    /// newer versions in the checkpoint. The published marks are read
    /// after t_low: a version published before that read is in the
    /// checkpoint (or superseded there) and is not redone; one published
    /// after it can only have been overwritten by a writer that started
    /// after t_low was taken, whose version is redone too and is newer.
    pub fn checkpoint_horizon(&self) -> (u64, u64, Vec<u64>) {
        let (short, long) = self.redo_horizons();
        let published = self.long_published.iter().map(|p| p.load(SeqCst)).collect();
        (short, long, published)
    }

    /// Marks every commit of the long regions as published (after
    /// recovery, everything committed is visible).
    pub fn publish_recovered(&self, last_commits: &[u64]) {
        for (mark, &last) in self
            .long_published
            .iter()
            .zip(&last_commits[crate::catalog::LONG_REGIONS..])
        {
            mark.store(last, SeqCst);
        }
    }

    fn redo_horizons(&self) -> (u64, u64) {
        let now = self.clock.peek();
        let (mut short, mut long) = (now, now);
        for (worker, active) in self.active.iter().enumerate() {
            let ts = active.load(SeqCst);
            if ts == 0 {
                continue;
            }
            match self.long[worker].load(SeqCst) {
                LONG_MIGRATED => long = long.min(ts),
                _ => short = short.min(ts),
            }
        }
        (short, long.min(short))
    }

    /// Asks transactions that began before the clock read `cutoff` (the
    /// caller knows when that was) to move their versions to their
    /// long-transaction region; returns how many were newly asked.
    pub fn flag_long_transactions(&self, cutoff: u64) -> usize {
        let mut flagged = 0;
        for worker in 0..crate::catalog::MAX_SESSIONS {
            let began = self.active[worker].load(Acquire);
            if began != 0 && began < cutoff {
                flagged += self.long[worker]
                    .compare_exchange(LONG_NONE, LONG_REQUESTED, AcqRel, Acquire)
                    .is_ok() as usize;
            }
        }
        flagged
    }

    /// Moves every flagged long transaction that is idle right now; returns
    /// how many moved. The others move at their next call.
    pub fn move_idle_long_transactions(&self) -> usize {
        let mut moved = 0;
        for worker in 0..crate::catalog::MAX_SESSIONS {
            if self.long[worker].load(Acquire) != LONG_REQUESTED {
                continue;
            }
            let Some(mut set) = self.write_sets[worker].try_lock() else {
                continue;
            };
            moved += matches!(long::move_to_long_region(self, worker, &mut set), Ok(true)) as usize;
        }
        moved
    }

    /// The lower bound announced by the oldest running transaction, `None`
    /// when none runs. A transaction that started before the clock read
    /// `t` announced at most `t`.
    pub fn oldest_running(&self) -> Option<u64> {
        self.oldest_running_except(usize::MAX)
    }

    /// Like `oldest_running`, ignoring worker `except`'s transaction.
    pub fn oldest_running_except(&self, except: usize) -> Option<u64> {
        self.active
            .iter()
            .enumerate()
            .filter(|&(worker, _)| worker != except)
            .map(|(_, a)| a.load(SeqCst))
            .filter(|&ts| ts != 0)
            .min()
    }

    /// A timestamp at or below every transaction that was running at the
    /// time of the call or starts later: versions of older transactions
    /// were complete (committed or aborted) before this call began.
    fn low_water_of_writers(&self) -> u64 {
        let now = self.clock.peek();
        self.active
            .iter()
            .map(|a| a.load(SeqCst))
            .filter(|&ts| ts != 0)
            .fold(now, u64::min)
    }

    /// Every transaction with an id below it had ended (committed, or
    /// aborted and cleared) before this call began: how far a read
    /// lease's horizon may reach (`design::log_free::readers`).
    pub fn writers_settled_below(&self) -> u64 {
        self.low_water_of_writers()
    }

    /// `low_water_of_writers`, and at or below every open snapshot: what
    /// was superseded below it nobody can read.
    pub fn low_water(&self) -> u64 {
        let writers = self.low_water_of_writers();
        self.oldest_snapshot().map_or(writers, |at| at.min(writers))
    }
}

/// A transaction that committed and is visible, but may not be durable
/// yet: in the `wal` design its commit record may still be on its way to
/// the log. Wait for it before acknowledging the commit to anyone; until
/// then a crash may undo it (and, with it, every later commit that read
/// or overwrote it, never an earlier one). Lets one thread overlap its
/// next transaction with the flush of the previous one. In the other
/// designs a commit is durable before it is visible, so it is durable
/// at once.
#[must_use = "a deferred commit is acknowledged only once `wait` returns"]
pub struct PendingCommit {
    pending: Pending,
    id: Option<u64>,
    /// Set when the transaction wrote while GC had writers wait.
    stall: Option<Arc<stall::WriteStall>>,
}

enum Pending {
    Durable,
    /// This transaction's commit record.
    Record(Arc<crate::wal::Log>, crate::wal::Ticket),
    /// A read-only transaction: the commits it read, up to this timestamp.
    Reads(Arc<crate::wal::Log>, u64),
}

impl PendingCommit {
    /// Waits until the commit is durable; an error means it may not be
    /// (the log failed or the database was closed first).
    pub fn wait(self) -> Result<()> {
        let durable = match self.pending {
            Pending::Durable => Ok(()),
            Pending::Record(log, ticket) => log.wait(ticket),
            Pending::Reads(log, newest_read) => log.wait_for_reads(newest_read),
        };
        if let Some(stall) = self.stall {
            stall.wait();
        }
        durable
    }

    /// The commit's place in the serial order of all commits: the id its
    /// versions carry (the transaction's timestamp under MVTO, the commit
    /// id under OCC). `None` for an optimistic read-only transaction,
    /// which takes no id: it fits between the commits whose versions it
    /// read and the next ones.
    pub fn id(&self) -> Option<u64> {
        self.id
    }

    /// Whether the commit is durable already (a read-only one: whether
    /// nothing it read was still pending when it committed).
    pub fn is_durable(&self) -> bool {
        match &self.pending {
            Pending::Durable | Pending::Reads(_, 0) => true,
            Pending::Record(log, ticket) => log.is_durable(*ticket),
            Pending::Reads(..) => false,
        }
    }
}

/// Index entries that are not in the DRAM index yet: after a restart, the
/// index checkpoint being loaded in the background. A lookup that misses
/// the DRAM index asks it, and what it finds is verified against the slot
/// and inserted into the DRAM index before use.
pub trait ColdEntries: Send + Sync {
    /// Number of entries.
    fn len(&self) -> u64;
    /// Keys that cut the entries into `parts` parts of similar size.
    fn split_keys(&self, medium: &Medium, parts: usize) -> Vec<Vec<u8>>;
    /// The address recorded for `key`, if any; `Err` if the entries that
    /// would answer are damaged.
    fn find(&self, medium: &Medium, key: &[u8]) -> Result<Option<u64>>;
    /// Up to `limit` entries with keys in the range, ascending.
    fn range(
        &self,
        medium: &Medium,
        lower: Bound<&[u8]>,
        upper: Bound<&[u8]>,
        limit: usize,
    ) -> Result<Vec<(Vec<u8>, u64)>>;
    /// Up to `limit` entries with keys in the range, descending.
    fn range_rev(
        &self,
        medium: &Medium,
        lower: Bound<&[u8]>,
        upper: Bound<&[u8]>,
        limit: usize,
    ) -> Result<Vec<(Vec<u8>, u64)>>;
    /// Whether each address it returns names a copy made for that call
    /// (a `wal` snapshot's row copied into the heap) rather than a slot
    /// the heap held already: a copy the DRAM index does not take is
    /// garbage, and entries must be taken into the index before use.
    fn copies(&self) -> bool {
        false
    }
}

/// What a write's lookup of its key found, with the index leaf it was
/// found in (or found missing from), so that the write that follows
/// need not descend again.
pub enum WriteProbe<'a> {
    Head(u64, UpdateHint<'a>),
    /// No leaf for a key no index can hold.
    Absent(Option<UpdateHint<'a>>),
}

/// A table at run time: its heap and its primary index.
pub struct TableRt {
    pub heap: TableHeap,
    index: BTree,
    instance: u64,
    sampler: UpdateSampler,
    /// Secondary indexes, in creation order (`IndexDef::number`).
    pub secondaries: boxcar::Vec<Arc<SecondaryRt>>,
    cold: parking_lot::RwLock<Option<Arc<dyn ColdEntries>>>,
    cold_active: std::sync::atomic::AtomicBool,
    damaged: std::sync::atomic::AtomicBool,
    /// The timestamp `drop_table` took, 0 while the table lives: snapshots
    /// below it may still read the table, nothing else may touch it.
    dropped_at: AtomicU64,
    /// The drop is durable; its blocks go once no reader is older.
    reclaimable: std::sync::atomic::AtomicBool,
    /// Its blocks are free (or were never recovered).
    reclaimed: std::sync::atomic::AtomicBool,
}

impl TableRt {
    pub fn new(heap: TableHeap, mut index: BTree, instance: u64) -> TableRt {
        index.cache_heads();
        TableRt {
            heap,
            index,
            instance,
            sampler: UpdateSampler::default(),
            secondaries: boxcar::Vec::new(),
            cold: parking_lot::RwLock::new(None),
            cold_active: std::sync::atomic::AtomicBool::new(false),
            damaged: std::sync::atomic::AtomicBool::new(false),
            dropped_at: AtomicU64::new(0),
            reclaimable: std::sync::atomic::AtomicBool::new(false),
            reclaimed: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// A table recovery found dropped: no rows, no blocks, nothing to
    /// reclaim.
    pub fn recovered_dropped(heap: TableHeap, index: BTree, instance: u64) -> TableRt {
        let table = TableRt::new(heap, index, instance);
        table.dropped_at.store(1, SeqCst);
        table.reclaimable.store(true, SeqCst);
        table.reclaimed.store(true, SeqCst);
        table
    }

    /// Hides the table at `ts`: lookups by name skip it, transactions
    /// (but snapshots below `ts`) are refused it, checkpoints and GC pass
    /// it by. Set before the drop is durable in the `wal` design (so that
    /// no snapshot of the log after the drop record lists the table), after
    /// it in the log-free one (so that no checkpoint omits a live table).
    pub fn mark_dropped(&self, ts: u64) {
        assert!(ts > 0, "timestamps start at 1");
        let before = self.dropped_at.swap(ts, SeqCst);
        assert_eq!(before, 0, "a table is dropped once");
    }

    /// The drop is durable: `Engine::reclaim_dropped` may free its blocks.
    pub fn mark_reclaimable(&self) {
        assert!(self.is_dropped(), "only a dropped table is reclaimed");
        self.reclaimable.store(true, SeqCst);
    }

    /// The timestamp of the drop, if the table was dropped.
    #[inline]
    pub fn dropped_at(&self) -> Option<u64> {
        Some(self.dropped_at.load(SeqCst)).filter(|&ts| ts != 0)
    }

    #[inline]
    pub fn is_dropped(&self) -> bool {
        self.dropped_at().is_some()
    }

    /// Dropped durably, blocks not yet freed: the drop's timestamp.
    pub fn awaiting_reclaim(&self) -> Option<u64> {
        let waiting = self.reclaimable.load(SeqCst) && !self.reclaimed.load(SeqCst);
        self.dropped_at().filter(|_| waiting)
    }

    pub fn set_reclaimed(&self) {
        self.reclaimed.store(true, SeqCst);
    }

    /// `NoSuchTable` once the table is dropped, unless a snapshot that
    /// began before the drop reads it (`snapshot_began`: the clock when it
    /// began); `Corrupt` when its recovered index is damaged.
    pub fn check_live(&self, snapshot_began: Option<u64>) -> Result<()> {
        match self.dropped_at() {
            // A snapshot that began after the drop read the clock above
            // the timestamp the drop took.
            Some(dropped) if snapshot_began.is_none_or(|began| began > dropped) => {
                Err(Error::NoSuchTable(self.heap.def.name.clone()))
            }
            _ => self.check_damaged(),
        }
    }

    /// The primary index: each key's newest version.
    #[inline]
    pub fn index(&self) -> &BTree {
        &self.index
    }

    /// Update counts of the sampled keys since the previous call (for the
    /// checkpoint cost model).
    #[inline]
    pub fn drain_sample(&self) -> Sample {
        self.sampler.drain()
    }

    /// The value of the version at `addr` into `out`; false if it is a
    /// deletion.
    pub fn read_value(&self, medium: &Medium, addr: Addr, out: &mut Vec<u8>) -> Result<bool> {
        self.value_read(self.heap.read_live(medium, addr, out), addr)
    }

    /// `read_value` of a version `TableHeap::find_version` found.
    pub fn read_found(
        &self,
        medium: &Medium,
        version: &VersionAt,
        out: &mut Vec<u8>,
    ) -> Result<bool> {
        self.value_read(self.heap.read_found(medium, version, out), version.addr)
    }

    fn value_read(&self, read: SlotRead, addr: Addr) -> Result<bool> {
        match read {
            SlotRead::Value => Ok(true),
            SlotRead::Deleted => Ok(false),
            SlotRead::Damaged => Err(Error::Corrupt(format!(
                "version at {addr:?} of table {:?} fails its checksum",
                self.heap.def.name
            ))),
            // GC frees a block only after every transaction that could
            // reach it ended; should one still get here, retrying is safe.
            SlotRead::Gone => Err(Error::Conflict),
        }
    }

    /// Makes lookups consult `cold` until `finish_cold` is called.
    pub fn set_cold(&self, cold: Arc<dyn ColdEntries>) {
        *self.cold.write() = Some(cold);
        self.cold_active.store(true, Release);
    }

    /// Everything cold is in the DRAM index now.
    /// Waits for lookups that are taking a cold entry in: until they are
    /// done the table counts as loading, so that no tombstone they might
    /// undo is reaped meanwhile.
    pub fn finish_cold(&self) {
        *self.cold.write() = None;
        self.cold_active.store(false, Release);
    }

    pub fn is_loading(&self) -> bool {
        self.cold_active.load(Acquire)
    }

    /// About how many keys the table has, also while its checkpoint run
    /// is still loading into the DRAM index.
    pub fn approximate_rows(&self) -> u64 {
        let warm = self.index.len() as u64;
        self.cold().map_or(warm, |cold| warm.max(cold.len()))
    }

    /// Keys that cut the table into `parts` parts of similar size, from
    /// the checkpoint run while it is loading (the DRAM index then holds
    /// only what changed since), else from the DRAM index's root.
    pub fn split_keys(&self, medium: &Medium, parts: usize) -> Vec<Vec<u8>> {
        if parts < 2 {
            return Vec::new();
        }
        if let Some(cold) = self.cold() {
            return cold.split_keys(medium, parts);
        }
        let separators = self.index.root_separators();
        let mut cuts: Vec<Vec<u8>> = (1..parts)
            .filter_map(|i| separators.get(i * separators.len() / parts).cloned())
            .collect();
        cuts.dedup();
        cuts
    }

    /// The cold entries, read-locked, while they are in use.
    fn cold_guard(&self) -> Option<parking_lot::RwLockReadGuard<'_, Option<Arc<dyn ColdEntries>>>> {
        self.cold_active.load(Acquire).then(|| self.cold.read())
    }

    fn cold(&self) -> Option<Arc<dyn ColdEntries>> {
        if !self.cold_active.load(Acquire) {
            return None;
        }
        self.cold.read().clone()
    }

    /// `key`'s chain head as the index's head cache has it, found, while
    /// it is the head still: nothing superseded, locked or reaped it (its
    /// `end` is 0: every change of a key's head sets the old head's `end`
    /// first) and its record holds `key` (a cache word may hold another
    /// key's head). `None` sends the caller to the tree.
    #[inline]
    pub fn cached_head(&self, medium: &Medium, key: &[u8]) -> Option<VersionAt<'_>> {
        let head = self.index.cached(key)?;
        let mut version = self.heap.find_tiled(medium, Addr(head))?;
        if version.header.end.load(Acquire) != 0 {
            return None;
        }
        self.heap
            .holds_key(medium, &mut version, key)
            .then_some(version)
    }

    /// The index head of `key`, materializing a cold entry if needed.
    pub fn lookup(&self, medium: &Medium, key: &[u8]) -> Result<Option<u64>> {
        // Read before the miss: see `warm`.
        let loading = self.is_loading();
        if let Some(head) = self.index.get_for_read(key) {
            return Ok(Some(head));
        }
        Ok(match self.warm(medium, key)? || loading {
            true => self.index.get_for_read(key),
            false => None,
        })
    }

    /// The index head of `key` for a write about to replace it (see
    /// `BTree::get_for_update`), materializing a cold entry if needed.
    pub fn lookup_for_update(
        &self,
        medium: &Medium,
        key: &[u8],
        ut: u64,
    ) -> Result<WriteProbe<'_>> {
        // Read before the miss: see `warm`.
        let loading = self.is_loading();
        let probe = self.index.probe_for_write(key, ut);
        if let Some((Some(head), hint)) = probe {
            return Ok(WriteProbe::Head(head, hint));
        }
        let probe = match self.warm(medium, key)? || loading {
            true => self.index.probe_for_write(key, ut),
            false => probe,
        };
        Ok(match probe {
            Some((Some(head), hint)) => WriteProbe::Head(head, hint),
            Some((None, hint)) => WriteProbe::Absent(Some(hint)),
            None => WriteProbe::Absent(None),
        })
    }

    /// Enters a key its writer's `lookup_for_update` found absent, from
    /// the leaf it found that in while nobody changed it. Trees with node
    /// versions recycle nodes: a leaf held since could be another node.
    pub fn insert_absent<'a>(
        &'a self,
        key: &[u8],
        value: u64,
        hint: Option<&UpdateHint<'a>>,
        (writer_ts, ut): (u64, u64),
    ) -> std::result::Result<Option<LeafMoved<'a>>, InsertError> {
        match hint.filter(|_| !self.index.has_node_versions()) {
            Some(hint) => self
                .index
                .insert_if_absent_hinted(hint, key, value, (writer_ts, ut)),
            None => self
                .index
                .insert_if_absent(key, value, writer_ts, ut)
                .map(|()| None),
        }
    }

    /// The index head of `key` for a read, materializing a cold entry if
    /// needed and recording the gap read when the key is absent.
    pub fn lookup_marking_gap(&self, medium: &Medium, key: &[u8], ts: u64) -> Result<Option<u64>> {
        if let Some(head) = self.index.get_for_read(key) {
            return Ok(Some(head));
        }
        self.warm(medium, key)?;
        Ok(self.index.get_marking_gap(key, ts))
    }

    /// Moves `key`'s cold entry into the DRAM index; true if it did. A
    /// damaged run marks the table damaged: no answer may come from it.
    ///
    /// False does not mean the key is absent: between the caller's miss
    /// and this call the background load (or another lookup) may have
    /// taken the key in, and then this call adopts nothing, or finds the
    /// cold entries retired. A caller that missed while the table was
    /// loading (`is_loading` read before its miss) looks in the index
    /// again whatever this returns; one that missed after the load ended
    /// need not, since the load took every cold entry in before it ended.
    fn warm(&self, medium: &Medium, key: &[u8]) -> Result<bool> {
        // Held until the entry is in: `finish_cold` waits for it.
        let guard = self.cold_guard();
        let Some(cold) = guard.as_ref().and_then(|g| g.as_ref()) else {
            // A load that failed ends cold service after marking the
            // table: a miss then must not pass for an absent key.
            return self.check_damaged().map(|_| false);
        };
        match cold
            .find(medium, key)
            .inspect_err(|_| self.mark_damaged())?
        {
            Some(addr) => self.adopt_from(cold.as_ref(), medium, key, addr),
            None => Ok(false),
        }
    }

    /// `adopt`, and a copy the index did not take (another thread took
    /// the key first) is marked obsolete, so that GC frees its slot.
    fn adopt_from(
        &self,
        cold: &dyn ColdEntries,
        medium: &Medium,
        key: &[u8],
        addr: u64,
    ) -> Result<bool> {
        let adopted = self.adopt(medium, key, addr)?;
        if !adopted && cold.copies() {
            self.heap.set_obsolete(medium, Addr(addr));
        }
        Ok(adopted)
    }

    /// Moves the cold entries a scan of `want` keys from the `order` end
    /// of the range can reach.
    pub fn warm_range(
        &self,
        medium: &Medium,
        (lower, upper): (&Bound<Vec<u8>>, &Bound<Vec<u8>>),
        want: usize,
        order: Order,
    ) -> Result<()> {
        let guard = self.cold_guard();
        let Some(cold) = guard.as_ref().and_then(|g| g.as_ref()) else {
            // As in `warm`: a cursor that began while the load ran must
            // not go on over an index that lacks the damaged part.
            return self.check_damaged();
        };
        let (lower, upper) = (as_slice_bound(lower), as_slice_bound(upper));
        let entries = match order {
            Order::Ascending => cold.range(medium, lower, upper, want),
            Order::Descending => cold.range_rev(medium, lower, upper, want),
        };
        for (key, addr) in entries.inspect_err(|_| self.mark_damaged())? {
            self.adopt_from(cold.as_ref(), medium, &key, addr)?;
        }
        Ok(())
    }

    /// Up to `limit` (key, chain head) pairs of the range, ascending: the
    /// DRAM index merged with the checkpoint run while it still loads. Run
    /// entries are read in place rather than moved into the DRAM index
    /// (the loader does that in sorted batches, far cheaper than one by
    /// one); a key in both has its newer head in DRAM. Returns the last
    /// key of the batch when more may follow it.
    pub fn heads_in_range(
        &self,
        medium: &Medium,
        (lower, upper): (&Bound<Vec<u8>>, &Bound<Vec<u8>>),
        limit: usize,
        out: &mut Vec<(Vec<u8>, u64)>,
    ) -> Result<Option<Vec<u8>>> {
        out.clear();
        if self.cold().is_some_and(|cold| cold.copies()) {
            // Copies cannot be read in place: only the index's are heads.
            self.warm_range(medium, (lower, upper), limit, Order::Ascending)?;
        }
        let (lower, upper) = (as_slice_bound(lower), as_slice_bound(upper));
        let cold = match self.cold().filter(|cold| !cold.copies()) {
            Some(cold) => cold
                .range(medium, lower, upper, limit)
                .inspect_err(|_| self.mark_damaged())?,
            None => {
                self.check_damaged()?;
                Vec::new()
            }
        };
        let cold_end = (cold.len() == limit).then(|| cold[limit - 1].0.clone());
        let warm_upper = cold_end.as_deref().map_or(upper, Bound::Included);
        let mut warm = Vec::new();
        self.index.scan(lower, warm_upper, None, |key, head| {
            warm.push((key.to_vec(), head));
            warm.len() < limit
        });
        let end = match warm.len() == limit {
            true => Some(warm[limit - 1].0.clone()),
            false => cold_end,
        };
        let mut cold = cold.into_iter().peekable();
        for (key, head) in warm {
            while let Some((cold_key, addr)) = cold.next_if(|(k, _)| *k <= key) {
                if cold_key != key {
                    out.push((cold_key, self.checked_run_addr(addr)?));
                }
            }
            out.push((key, head));
        }
        for (cold_key, addr) in cold {
            if end.as_ref().is_some_and(|end| cold_key > *end) {
                break;
            }
            out.push((cold_key, self.checked_run_addr(addr)?));
        }
        Ok(end)
    }

    /// A checkpoint run's address, if it names an existing slot.
    fn checked_run_addr(&self, addr: u64) -> Result<u64> {
        if !self.addr_exists(addr) {
            self.mark_damaged();
            self.check_damaged()?;
        }
        Ok(addr)
    }

    /// `Corrupt` once the table's recovered index data was found damaged.
    pub fn check_damaged(&self) -> Result<()> {
        match self.is_damaged() {
            true => Err(Error::Corrupt(format!(
                "the recovered index of table {:?} is damaged",
                self.heap.def.name
            ))),
            false => Ok(()),
        }
    }

    /// Removes the index entry of a deleted key whose tombstone no running
    /// or future transaction can see past (it committed before `low_water`),
    /// so scans stop paying for it (HiEngine's deferred deletion, completed).
    /// The tombstone is locked first, so racing writers retry through the
    /// index; its read timestamp moves into the leaf's gap timestamp, so
    /// readers who saw the deletion stay protected against older inserters.
    pub fn reap_tombstone(
        &self,
        medium: &Medium,
        key: &[u8],
        head: Addr,
        low_water: u64,
        ut: u64,
    ) -> bool {
        let Some(header) = self.heap.header(head) else {
            return false;
        };
        let begin = header.begin.load(Acquire);
        let settled = begin & PENDING == 0
            && begin < low_water
            && self.heap.tombstone(medium, head) == Some(true);
        if !settled
            || header
                .end
                .compare_exchange(0, REAPED, SeqCst, SeqCst)
                .is_err()
        {
            return false;
        }
        if self
            .index
            .remove_if(key, head.0, header.read.load(SeqCst), ut)
        {
            // Nothing refers to the tombstone now: GC may drop it.
            self.heap.set_obsolete(medium, head);
            return true;
        }
        header.end.store(0, Release);
        false
    }

    /// Marks the table unusable: its recovered index data is damaged.
    pub fn mark_damaged(&self) {
        self.damaged.store(true, Release);
    }

    pub fn is_damaged(&self) -> bool {
        self.damaged.load(Acquire)
    }

    /// Inserts a checkpoint entry unless the DRAM index already has the key
    /// (a newer version). Gap marks are ignored: the key existed all along.
    /// An entry must name an existing slot that holds its key and passes
    /// its checksum: entries are verified, and the checkpoint records only
    /// committed versions in blocks it lists, so anything else is damage.
    pub fn adopt(&self, medium: &Medium, key: &[u8], addr: u64) -> Result<bool> {
        let sound = self.addr_exists(addr)
            && (1..=crate::index::MAX_KEY_LEN).contains(&key.len())
            && self
                .heap
                .verified_key(medium, Addr(addr))
                .is_some_and(|found| found == key);
        if !sound {
            self.mark_damaged();
            return self.check_damaged().map(|_| false);
        }
        Ok(self.index.insert_if_absent(key, addr, u64::MAX, 0).is_ok())
    }

    /// Moves a sorted, validated batch of checkpoint entries into the DRAM
    /// index (keys already there are newer and stay); returns how many it
    /// took. The addresses of entries whose key held another (newer)
    /// version go into `superseded`.
    pub fn adopt_sorted(&self, entries: &[(&[u8], u64)], superseded: &mut Vec<u64>) -> usize {
        self.index.insert_sorted_absent_noting(entries, superseded)
    }

    /// Whether `key`'s index head is a committed version other than
    /// `addr`: a head still pending may yet abort and give `addr` back
    /// its place (its commit marks `addr` itself otherwise).
    pub fn head_supersedes(&self, key: &[u8], addr: Addr) -> bool {
        self.index.get(key).is_some_and(|head| {
            head != addr.0
                && self
                    .heap
                    .header(Addr(head))
                    .is_some_and(|h| h.begin.load(Acquire) & PENDING == 0)
        })
    }

    /// Whether a logical address names a slot of an existing block.
    pub fn addr_exists(&self, addr: u64) -> bool {
        self.heap.block(Addr(addr)).is_some()
    }

    /// The newest committed version of a chain, `None` if there is none or
    /// it is a tombstone. Versions of running or aborted transactions are
    /// traced back to their predecessor (FIR 4.3.2).
    pub fn committed_version(&self, medium: &Medium, head: Addr) -> Option<Addr> {
        let mut addr = head;
        loop {
            let header = self.heap.header(addr)?;
            let begin = header.begin.load(Acquire);
            if begin & PENDING == 0 {
                // A damaged header keeps its entry: readers then say Corrupt.
                let deleted = self.heap.tombstone(medium, addr) == Some(true);
                return (!deleted).then_some(addr);
            }
            match header.prev.load(Acquire) {
                0 => return None,
                prev => addr = Addr(prev - 1),
            }
        }
    }
}

struct Write {
    table: u32,
    new: Addr,
    prev: Option<Addr>,
    /// `prev` is a tombstone: no checkpoint lists it, so recovery cannot
    /// set its obsolete bit again (`txn::obsolete_bits`).
    prev_deleted: bool,
    /// Bytes of the new slot in use (header, key, value) and whether it
    /// deletes the key, as first written: commit need not read the slot
    /// back (a write-back may have evicted its line already) unless the
    /// transaction rewrote some slot (`WriteSet::rewrote`).
    bytes: u32,
    tombstone: bool,
    /// Where its key is in `WriteSet::keys` (kept only for head trees).
    key_at: usize,
    key_len: usize,
}

/// The versions a worker's running transaction wrote, and where new ones go.
pub struct WriteSet {
    ts: u64,
    /// The worker's region, or its long-transaction region once moved.
    region: usize,
    writes: Vec<Write>,
    /// A key was written twice: its slot was rewritten in place, so the
    /// lengths and tombstone flags in `writes` may be stale.
    rewrote: bool,
    /// The slot-encoding buffer, kept between transactions so that writes
    /// do not allocate once it has grown.
    spare_buf: Vec<u8>,
    /// Buffers scans and index maintenance reuse, kept between
    /// transactions (see `Spares`).
    spares: Spares,
    /// Bitmap words commits set obsolete bits in that are not written back
    /// yet; the next checkpoint takes them (see `obsolete_bits`).
    obsolete: ObsoleteBits,
    /// The written keys, back to back (MirrorIndex's head trees take them
    /// at commit; the slots' copies may be out of cache by then).
    keys: Vec<u8>,
    /// The worker's optimistic read and write sets between transactions.
    spare_occ: Option<Box<std::cell::RefCell<OccSet>>>,
    /// Each written version's record and directory ranges, as the commit
    /// persists them (kept so that a commit does not allocate).
    durable_ranges: Vec<[(u64, u64); 2]>,
}

impl WriteSet {
    fn key(&self, write: &Write) -> &[u8] {
        let at = write.key_at;
        self.keys.get(at..at + write.key_len).unwrap_or_default()
    }

    /// Whether `write`'s version deletes its key: as recorded, unless a
    /// rewrite in place may have changed it.
    fn deletes(&self, write: &Write, heap: &TableHeap, medium: &Medium) -> bool {
        match self.rewrote {
            true => heap.tombstone(medium, write.new) == Some(true),
            false => write.tombstone,
        }
    }

    fn new(worker: usize) -> WriteSet {
        WriteSet {
            ts: 0,
            region: worker,
            writes: Vec::new(),
            rewrote: false,
            spare_buf: Vec::new(),
            spares: Spares::default(),
            obsolete: ObsoleteBits::default(),
            keys: Vec::new(),
            spare_occ: None,
            durable_ranges: Vec::new(),
        }
    }
}

/// The chain head a write replaces, and where the index had it, if known.
#[derive(Clone, Copy)]
struct Target<'h, 'i> {
    head: Addr,
    hint: Option<&'h UpdateHint<'i>>,
    /// `head`'s DRAM header, if the lookup found it already.
    header: Option<&'h VersionHeader>,
}

/// A chain head this writer holds locked (its header's `end`), about to
/// get a successor: where the index had it, its header, and whether it
/// is a tombstone.
struct LockedHead<'h, 'i> {
    head: Addr,
    hint: Option<&'h UpdateHint<'i>>,
    header: &'h VersionHeader,
    deleted: bool,
}

/// What a write should do to an existing key.
#[derive(Clone, Copy, PartialEq, Eq)]
enum WriteKind {
    Insert,
    Update,
    Delete,
    Put,
}

/// Result of resolving the version visible to a transaction.
enum Visible {
    Version(Addr),
    Absent,
    Retry,
}

/// Buffers a worker's transactions reuse, so that scans and index
/// maintenance allocate nothing once they have grown.
#[derive(Default)]
pub(super) struct Spares {
    /// Key buffers of entries scans have returned or skipped.
    keys: Vec<Vec<u8>>,
    /// A cursor's buffers: the value it lends and its fetched entries.
    value: Vec<u8>,
    entries: std::collections::VecDeque<(Vec<u8>, u64)>,
    /// A write's secondary keys, new and old (`maintain_indexes`).
    secondary_keys: (Vec<u8>, Vec<u8>),
}

impl Spares {
    /// Keeps the larger of each of its buffers and `other`'s.
    fn keep_larger(&mut self, other: Spares) {
        if other.keys.len() > self.keys.len() {
            self.keys = other.keys;
        }
        if other.value.capacity() > self.value.capacity() {
            self.value = other.value;
        }
        if other.entries.capacity() > self.entries.capacity() {
            self.entries = other.entries;
        }
        let (new, old) = &self.secondary_keys;
        if other.secondary_keys.0.capacity() + other.secondary_keys.1.capacity()
            > new.capacity() + old.capacity()
        {
            self.secondary_keys = other.secondary_keys;
        }
    }
}

/// A transaction's private state. Dropping it without commit aborts.
pub struct TxnState<'s> {
    store: &'s Store,
    worker: usize,
    ts: u64,
    buf: Vec<u8>,
    /// The worker's reusable buffers (see `WriteSet::spares`).
    spares: Spares,
    poisoned: Option<Error>,
    /// Secondary index entries this transaction entered: (table, index, entry).
    entered: Vec<(u32, Arc<SecondaryRt>, Vec<u8>)>,
    /// Newest writer timestamp among the committed versions it read: with
    /// a redo log, a read-only commit waits only for pending commits up to
    /// it (Remote Flush Avoidance).
    newest_read: std::cell::Cell<u64>,
    /// The timestamp taken at begin: `ts` until an optimistic commit takes
    /// its commit id, and the id its locks carry.
    began: u64,
    /// An optimistic transaction's read and write sets (`occ`).
    occ: Option<Box<std::cell::RefCell<OccSet>>>,
    /// Index leaves where its writes found their keys (`occ`).
    hints: Vec<UpdateHint<'s>>,
    /// The DRAM headers of the versions in the OCC set's `reads`, in the
    /// same order, and of the heads its commit locked, in lock order: a
    /// version a running transaction can reach keeps its block and tile
    /// (`heap::Tiles`), so validation and install need not find them again.
    occ_headers: OccHeaders<'s>,
    /// A read-only transaction on the snapshot at `ts` (`snapshot`).
    snapshot: bool,
    /// How the snapshot opened (`snapshot`).
    snapshot_opened: snapshot::Opened,
}

impl<'s> TxnState<'s> {
    pub fn begin(store: &'s Store, worker: usize) -> Self {
        // Announce a lower bound before taking the timestamp, so that
        // `low_water` never misses a transaction that is just starting.
        store.announce(worker, store.clock.peek());
        let (ts, poisoned) = match store.clock.next(&store.medium) {
            Ok(ts) => (ts, None),
            Err(e) => (0, Some(e)),
        };
        let optimistic = store.concurrency == Concurrency::Occ && worker != catalog::GC_WORKER;
        // Reset in place: the vectors keep their capacity between transactions.
        let (buf, spares, occ) = {
            let mut set = store.write_sets[worker].lock();
            // One transaction at a time per worker, ids from one counter:
            // the worker's slots are in txn-id order (invariant 1).
            assert!(
                poisoned.is_some() || ts > set.ts,
                "txn ids ascend per worker: {} !< {ts} (worker {worker})",
                set.ts
            );
            set.ts = ts;
            set.region = worker;
            set.writes.clear();
            set.keys.clear();
            set.rewrote = false;
            let spares = std::mem::take(&mut set.spares);
            let occ = optimistic.then(|| set.spare_occ.take().unwrap_or_default());
            (std::mem::take(&mut set.spare_buf), spares, occ)
        };
        let mut txn = TxnState::idle(store, worker, ts, (buf, spares));
        txn.poisoned = poisoned;
        if let Some(occ) = &occ {
            txn.occ_headers = OccHeaders::reusing(&mut occ.borrow_mut());
        }
        txn.occ = occ;
        txn
    }

    /// A transaction at `ts` that has done nothing yet, with the worker's
    /// reusable buffers.
    fn idle(store: &'s Store, worker: usize, ts: u64, (buf, spares): (Vec<u8>, Spares)) -> Self {
        TxnState {
            store,
            worker,
            ts,
            buf,
            spares,
            poisoned: None,
            entered: Vec::new(),
            newest_read: std::cell::Cell::new(0),
            began: ts,
            occ: None,
            hints: Vec::new(),
            occ_headers: OccHeaders::default(),
            snapshot: false,
            snapshot_opened: snapshot::Opened::default(),
        }
    }

    /// Whether reads mark what they saw in the versions and index leaves
    /// (MVTO's read-write transactions).
    fn marks_reads(&self) -> bool {
        !self.is_occ() && !self.snapshot
    }

    pub fn id(&self) -> u64 {
        self.ts
    }

    /// Makes every later operation fail with `error`.
    pub fn poison(&mut self, error: Error) {
        self.poisoned = Some(error);
    }

    fn check_usable(&mut self) -> Result<()> {
        if let Err(e) = long::migrate_if_asked(self.store, self.worker) {
            self.poisoned = Some(e);
        }
        match self.poisoned.take() {
            None => Ok(()),
            Some(Error::Conflict) => {
                self.poisoned = Some(Error::Conflict);
                Err(Error::TransactionPoisoned)
            }
            Some(e) => {
                self.poisoned = Some(Error::TransactionPoisoned);
                Err(e)
            }
        }
    }

    /// Records a conflict so the transaction can only abort afterwards.
    fn guard<T>(&mut self, result: Result<T>) -> Result<T> {
        if let Err(Error::Conflict) = &result {
            if self.poisoned.is_none() && self.worker != catalog::GC_WORKER {
                self.store.admission.note_conflict();
            }
            self.poisoned = Some(Error::Conflict);
            self.store.counters[self.worker]
                .conflicts
                .fetch_add(1, Relaxed);
        }
        result
    }

    /// The table is this database's, live (or dropped after this
    /// snapshot) and undamaged.
    pub fn check_table(&self, table: &TableRt) -> Result<()> {
        if !self.store.owns(table) {
            return Err(Error::ForeignTable);
        }
        table.check_live(self.snapshot.then_some(self.snapshot_opened.began))
    }

    fn table<'t>(
        &self,
        table: &'t TableRt,
        key: &[u8],
        value: Option<&[u8]>,
    ) -> Result<&'t TableRt> {
        self.check_table(table)?;
        let max_key = table.heap.def.max_key_len as usize;
        if key.is_empty() || key.len() > max_key {
            return Err(Error::KeyLength {
                len: key.len(),
                max: max_key,
            });
        }
        let max_value = table.heap.def.max_value_len as usize;
        match value {
            Some(v) if v.len() > max_value => Err(Error::ValueTooLarge {
                len: v.len(),
                max: max_value,
            }),
            _ => Ok(table),
        }
    }

    pub fn get(&mut self, table: &TableRt, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let mut value = Vec::new();
        Ok(self.get_into(table, key, &mut value)?.then_some(value))
    }

    /// Reads `key`'s value into `out`; false (and `out` unspecified) if absent.
    pub fn get_into(&mut self, table: &TableRt, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        self.check_usable()?;
        let _op = self.snapshot_op()?;
        let table = self.table(table, key, None)?;
        let result = self.read_key_into(table, key, out);
        self.guard(result)
    }

    /// Hands `key`'s value to `read` without allocating: it is read into the
    /// transaction's reusable buffer.
    pub fn get_with<R>(
        &mut self,
        table: &TableRt,
        key: &[u8],
        read: impl FnOnce(&[u8]) -> R,
    ) -> Result<Option<R>> {
        let mut buf = std::mem::take(&mut self.buf);
        let found = self.get_into(table, key, &mut buf);
        let answer = found.map(|found| found.then(|| read(&buf)));
        self.buf = buf;
        answer
    }

    fn read_key_into(&self, table: &TableRt, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        if self.is_occ() {
            return self.occ_read_key(table, key, out);
        }
        if self.snapshot {
            return self.snapshot_read_key(table, key, out);
        }
        let medium = &self.store.medium;
        let mut cached = table.cached_head(medium, key);
        loop {
            let (head, found) = match cached.take() {
                Some(found) => (found.addr.0, Some(found)),
                None => {
                    let Some(head) = table.lookup_marking_gap(medium, key, self.ts)? else {
                        return Ok(false);
                    };
                    (head, table.heap.find_version(medium, Addr(head)))
                }
            };
            match self.visible(table, Addr(head), found.map(|f| f.header))? {
                Visible::Retry => continue,
                Visible::Absent => return Ok(false),
                Visible::Version(addr) => return self.read_chosen(table, found, addr, out),
            }
        }
    }

    fn live_value_into(&self, table: &TableRt, addr: Addr, out: &mut Vec<u8>) -> Result<bool> {
        table.read_value(&self.store.medium, addr, out)
    }

    /// Reads the version a visibility check chose at `addr`: through the
    /// head `find_version` found if that is the one, so that neither its
    /// block nor its tile is looked up again.
    fn read_chosen(
        &self,
        table: &TableRt,
        found: Option<VersionAt>,
        addr: Addr,
        out: &mut Vec<u8>,
    ) -> Result<bool> {
        match found.filter(|f| f.addr == addr) {
            Some(head) => table.read_found(&self.store.medium, &head, out),
            None => self.live_value_into(table, addr, out),
        }
    }

    /// The header of a version this transaction reached (see `Gone`).
    fn version<'t>(&self, table: &'t TableRt, addr: Addr) -> Result<&'t VersionHeader> {
        // A match: `ok_or` would build and drop an `Error` on every call.
        match table.heap.header(addr) {
            Some(header) => Ok(header),
            None => Err(Error::Conflict),
        }
    }

    /// Finds the version of a chain visible at `ts`, recording the read;
    /// `head_header` is the head's header if the caller found it already.
    fn visible(
        &self,
        table: &TableRt,
        head: Addr,
        head_header: Option<&VersionHeader>,
    ) -> Result<Visible> {
        let mut addr = head;
        // Commit stamp of the newer committed version just passed: a chain
        // descends in commit order (a successor commits after its
        // predecessor's writer began, checked at publish).
        let mut newer = u64::MAX;
        loop {
            let header = match head_header.filter(|_| addr == head) {
                Some(header) => header,
                None => self.version(table, addr)?,
            };
            let begin = header.begin.load(Acquire);
            if begin == PENDING | self.ts {
                return Ok(Visible::Version(addr));
            }
            if begin & PENDING == 0 {
                assert!(
                    begin < newer,
                    "a version chain descends in commit order: {begin} !< {newer} at {addr:?}"
                );
                newer = begin;
            }
            let older_than_us = if begin == ABORTED {
                false
            } else if begin & PENDING != 0 {
                let writer = begin & !PENDING;
                if writer < self.ts {
                    self.wait_for_writer(&header.begin, begin)?;
                    continue;
                }
                false
            } else {
                begin <= self.ts
            };
            if older_than_us {
                self.newest_read.set(self.newest_read.get().max(begin));
                return self.check_read(&header.read, &header.end, addr);
            }
            match header.prev.load(Acquire) {
                0 => return Ok(Visible::Absent),
                prev => addr = Addr(prev - 1),
            }
        }
    }

    /// Mark-then-check against writers that lock the version concurrently.
    fn check_read(
        &self,
        read: &std::sync::atomic::AtomicU64,
        end: &std::sync::atomic::AtomicU64,
        addr: Addr,
    ) -> Result<Visible> {
        read.fetch_max(self.ts, SeqCst);
        loop {
            let e = end.load(SeqCst);
            if e == REAPED {
                // The key left the index after our lookup; look again, so
                // that the absence is read (and marked) in the index.
                return Ok(Visible::Retry);
            }
            let successor = e & !LOCKED;
            if e == 0 || successor > self.ts || (e & LOCKED != 0 && successor == self.ts) {
                return Ok(Visible::Version(addr));
            }
            if e & LOCKED == 0 {
                // A successor older than us committed after we found the head.
                return Ok(Visible::Retry);
            }
            self.wait_for_writer(end, e)?;
        }
    }

    /// Whether `ts` is GC's running system transaction (never this one).
    fn is_gc(&self, ts: u64) -> bool {
        // `gc_txn` is 0 while no GC transaction runs.
        ts != 0 && ts != self.ts && ts == self.store.gc_txn.load(Acquire)
    }

    /// Spins until `word` changes from `seen` (a writer finishing), else
    /// conflict. GC's transactions are waited for as long as they run: they
    /// never make a user transaction conflict, and they always end (GC waits
    /// for no user transaction once it has begun one), but a preempted GC
    /// thread can hold its keys for longer than any spin.
    fn wait_for_writer(&self, word: &std::sync::atomic::AtomicU64, seen: u64) -> Result<()> {
        // `PENDING` and `LOCKED` are the same bit: the rest is the writer.
        let writer = seen & !PENDING;
        let mut spins = 0u32;
        while word.load(Acquire) == seen {
            if spins >= WAIT_SPINS && !self.is_gc(writer) {
                return Err(Error::Conflict);
            }
            if spins % 256 == 255 {
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
            spins = spins.saturating_add(1);
        }
        Ok(())
    }

    /// A cursor over the live entries of `range` (see [`Cursor`]).
    pub fn range(
        &mut self,
        table: Arc<TableRt>,
        range: (Bound<Vec<u8>>, Bound<Vec<u8>>),
        first_batch: usize,
    ) -> Result<Cursor<'_, 's>> {
        self.check_usable()?;
        self.check_table(&table)?;
        Ok(Cursor::new(self, table, range, first_batch))
    }

    pub fn insert(&mut self, table: &TableRt, key: &[u8], value: &[u8]) -> Result<()> {
        self.write(table, key, Some(value), WriteKind::Insert)
            .map(|_| ())
    }

    pub fn update(&mut self, table: &TableRt, key: &[u8], value: &[u8]) -> Result<()> {
        self.write(table, key, Some(value), WriteKind::Update)
            .map(|_| ())
    }

    pub fn put(&mut self, table: &TableRt, key: &[u8], value: &[u8]) -> Result<bool> {
        self.write(table, key, Some(value), WriteKind::Put)
    }

    pub fn delete(&mut self, table: &TableRt, key: &[u8]) -> Result<bool> {
        self.write(table, key, None, WriteKind::Delete)
    }

    /// Returns whether the key existed (visible and not deleted) before.
    fn write(
        &mut self,
        table: &TableRt,
        key: &[u8],
        value: Option<&[u8]>,
        kind: WriteKind,
    ) -> Result<bool> {
        self.check_usable()?;
        if self.snapshot {
            return Err(Error::ReadOnly);
        }
        let table = self.table(table, key, value)?;
        table.sampler.record(key);
        if self.is_occ() {
            let buffered = self.occ_write(table, key, value, kind);
            return self.guard(buffered);
        }
        let indexed = table.secondaries.count() > 0;
        let relied_on = match indexed {
            true => {
                let checked = self.check_unique(table, key, value);
                self.guard(checked)?
            }
            false => None,
        };
        let store = self.store;
        let mut set = store.write_sets[self.worker].lock();
        let mut result = self.write_checked(table, key, value, kind, &mut set);
        drop(set);
        if let (Ok(_), Some(head)) = (&result, relied_on) {
            result = self.check_replaced(table, key, head).and(result);
        }
        let result = match result {
            Ok(existed) if indexed && (existed || kind != WriteKind::Delete) => {
                let old = self.replaced_value(table, key);
                self.maintain_indexes(table, key, value, old.as_deref())
                    .map(|()| existed)
            }
            other => other,
        };
        self.guard(result)
    }

    fn write_checked(
        &mut self,
        table: &TableRt,
        key: &[u8],
        value: Option<&[u8]>,
        kind: WriteKind,
        set: &mut WriteSet,
    ) -> Result<bool> {
        loop {
            // Inserting needs no gap mark: the pending index entry is what
            // later readers and writers of the key meet. Reporting a key as
            // missing is a read of the gap, so that path marks it.
            let medium = &self.store.medium;
            let (head, hint, found) = match table.lookup_for_update(medium, key, self.ts)? {
                WriteProbe::Head(head, hint) => {
                    let found = table.heap.find_version(medium, Addr(head));
                    (Addr(head), Some(hint), found)
                }
                WriteProbe::Absent(hint) if matches!(kind, WriteKind::Insert | WriteKind::Put) => {
                    match self.insert_fresh(table, (key, value), hint.as_ref(), set)? {
                        true => return Ok(false),
                        false => continue,
                    }
                }
                WriteProbe::Absent(_) => match table.lookup_marking_gap(medium, key, self.ts)? {
                    Some(head) => (Addr(head), None, None),
                    None => return self.missing(kind),
                },
            };
            let at = Target {
                head,
                hint: hint.as_ref(),
                header: found.map(|f| f.header),
            };
            if let Some(existed) = self.write_over(table, key, value, kind, at, set)? {
                return Ok(existed);
            }
        }
    }

    fn missing(&self, kind: WriteKind) -> Result<bool> {
        match kind {
            WriteKind::Update => Err(Error::KeyNotFound),
            _ => Ok(false),
        }
    }

    /// Writes over an existing chain; `None` means the head moved: retry.
    fn write_over(
        &mut self,
        table: &TableRt,
        key: &[u8],
        value: Option<&[u8]>,
        kind: WriteKind,
        Target { head, hint, header }: Target<'_, '_>,
        set: &mut WriteSet,
    ) -> Result<Option<bool>> {
        let header = match header {
            Some(header) => header,
            None => self.version(table, head)?,
        };
        let begin = header.begin.load(Acquire);
        if begin == PENDING | self.ts {
            return self
                .rewrite_own(table, key, value, kind, head, set)
                .map(Some);
        }
        if begin == ABORTED {
            std::thread::yield_now();
            return Ok(None);
        }
        if begin & PENDING != 0 && self.is_gc(begin & !PENDING) {
            self.wait_for_writer(&header.begin, begin)?;
            return Ok(None);
        }
        // GC stops announcing its transaction only once it has ended.
        if begin & PENDING != 0 && header.begin.load(Acquire) != begin {
            return Ok(None);
        }
        if begin & PENDING != 0 || begin > self.ts {
            return Err(Error::Conflict);
        }
        if header.end.load(Acquire) == REAPED {
            std::thread::yield_now();
            return Ok(None);
        }
        if let Err(end) = header
            .end
            .compare_exchange(0, LOCKED | self.ts, SeqCst, SeqCst)
        {
            if end & LOCKED != 0 && self.is_gc(end & !LOCKED) {
                self.wait_for_writer(&header.end, end)?;
                return Ok(None);
            }
            return match header.end.load(Acquire) {
                // An older transaction's successor committed after the
                // index gave us this head (a GC copy, say): the index holds
                // the successor now. Or the lock was released meanwhile.
                now if now & LOCKED == 0 && now < self.ts => Ok(None),
                // Reaped meanwhile, as checked above.
                REAPED => {
                    std::thread::yield_now();
                    Ok(None)
                }
                _ => Err(Error::Conflict),
            };
        }
        if header.read.load(SeqCst) > self.ts {
            header.end.store(0, Release);
            return Err(Error::Conflict);
        }
        let Some(deleted) = table.heap.tombstone(&self.store.medium, head) else {
            header.end.store(0, Release);
            return Err(Error::Corrupt(format!(
                "version at {head:?} of table {:?} is damaged",
                table.heap.def.name
            )));
        };
        let existed = !deleted;
        if let Some(answer) = self.refuse(kind, existed) {
            header.read.fetch_max(self.ts, SeqCst);
            header.end.store(0, Release);
            return answer.map(Some);
        }
        // Nobody can repoint a head we hold locked; fail safe if it happens.
        let locked = LockedHead {
            head,
            hint,
            header,
            deleted,
        };
        match self.append_successor(table, key, value, locked, 0, set)? {
            true => Ok(Some(existed)),
            false => Err(Error::Conflict),
        }
    }

    /// Writes a new version over `head` (with its header), which this
    /// transaction holds locked, and points the index at it. False (with the lock released
    /// and the slot made a hole) if the index no longer had `head`.
    /// `read` is the read mark the new version starts with.
    fn append_successor(
        &mut self,
        table: &TableRt,
        key: &[u8],
        value: Option<&[u8]>,
        LockedHead {
            head,
            hint,
            header,
            deleted: head_deleted,
        }: LockedHead<'_, '_>,
        read: u64,
        set: &mut WriteSet,
    ) -> Result<bool> {
        let (new, new_header) = match self.append_version(table, key, value, set.region) {
            Ok(appended) => appended,
            Err(e) => {
                header.end.store(0, Release);
                return Err(e);
            }
        };
        new_header.read.store(read, Release);
        new_header.prev.store(head.0 + 1, Release);
        new_header.begin.store(PENDING | self.ts, Release);
        let repointed = match hint {
            Some(hint) => table
                .index
                .compare_and_set_hinted(hint, key, head.0, new.0, self.ts)
                .map(|_| ()),
            None => table.index.compare_and_set(key, head.0, new.0, self.ts),
        };
        if repointed.is_err() {
            header.end.store(0, Release);
            self.discard(table, new)?;
            return Ok(false);
        }
        let write = self.written(table, new, Some((head, head_deleted)), (key, value), set);
        set.writes.push(write);
        Ok(true)
    }

    /// The write-set entry of a version just encoded in `self.buf`; its
    /// key goes into `set`.
    fn written(
        &self,
        table: &TableRt,
        new: Addr,
        prev: Option<(Addr, bool)>,
        (key, value): (&[u8], Option<&[u8]>),
        set: &mut WriteSet,
    ) -> Write {
        let key_at = set.keys.len();
        let key_len = match self.store.changes.capture() {
            Capture::HeadTrees => {
                set.keys.extend_from_slice(key);
                key.len()
            }
            _ => 0,
        };
        Write {
            table: table.heap.def.id,
            new,
            prev: prev.map(|(addr, _)| addr),
            prev_deleted: prev.is_some_and(|(_, deleted)| deleted),
            bytes: self.buf.len() as u32,
            tombstone: value.is_none(),
            key_at,
            key_len,
        }
    }

    /// What a write must answer instead of writing, given whether the key exists.
    fn refuse(&self, kind: WriteKind, existed: bool) -> Option<Result<bool>> {
        match (kind, existed) {
            (WriteKind::Insert, true) => Some(Err(Error::DuplicateKey)),
            (WriteKind::Update, false) => Some(Err(Error::KeyNotFound)),
            (WriteKind::Delete, false) => Some(Ok(false)),
            _ => None,
        }
    }

    /// A second write to a key this transaction already wrote: in place.
    fn rewrite_own(
        &mut self,
        table: &TableRt,
        key: &[u8],
        value: Option<&[u8]>,
        kind: WriteKind,
        own: Addr,
        set: &mut WriteSet,
    ) -> Result<bool> {
        let medium = &self.store.medium;
        let existed = table.heap.tombstone(medium, own) != Some(true);
        if let Some(answer) = self.refuse(kind, existed) {
            return answer;
        }
        table.heap.encode(
            &mut self.buf,
            self.ts,
            key,
            value.unwrap_or(&[]),
            value.is_none(),
        );
        if !table.heap.rewrite(medium, own, &self.buf) {
            self.relocate_own(table, key, value, own, set)?;
            return Ok(existed);
        }
        set.rewrote = true;
        Ok(existed)
    }

    /// A second write to a key whose new record does not fit the space
    /// the first one took: the version moves to a new record (with the
    /// first one's predecessor and read mark), the index is repointed
    /// and the first one becomes a hole. Both are this transaction's,
    /// uncommitted, so no reader can have used either.
    fn relocate_own(
        &mut self,
        table: &TableRt,
        key: &[u8],
        value: Option<&[u8]>,
        own: Addr,
        set: &mut WriteSet,
    ) -> Result<()> {
        let own_header = self.version(table, own)?;
        let (new, new_header) = self.append_version(table, key, value, set.region)?;
        new_header
            .read
            .store(own_header.read.load(Acquire), Release);
        new_header
            .prev
            .store(own_header.prev.load(Acquire), Release);
        new_header.begin.store(PENDING | self.ts, Release);
        if table
            .index
            .compare_and_set(key, own.0, new.0, self.ts)
            .is_err()
        {
            self.discard(table, new)?;
            return Err(Error::Conflict);
        }
        let id = table.heap.def.id;
        let write = set
            .writes
            .iter_mut()
            .find(|w| w.table == id && w.new == own);
        let Some(write) = write else {
            unreachable!("a version this transaction wrote is in its write set");
        };
        write.new = new;
        write.bytes = self.buf.len() as u32;
        write.tombstone = value.is_none();
        self.discard(table, own)?;
        Ok(())
    }

    /// Inserts a key the index does not have; false if it appeared meanwhile.
    fn insert_fresh(
        &mut self,
        table: &TableRt,
        (key, value): (&[u8], Option<&[u8]>),
        hint: Option<&UpdateHint<'_>>,
        set: &mut WriteSet,
    ) -> Result<bool> {
        let (new, header) = self.append_version(table, key, value, set.region)?;
        header.prev.store(0, Release);
        header.begin.store(PENDING | self.ts, Release);
        match table.insert_absent(key, new.0, hint, (self.ts, self.ts)) {
            Ok(_) => {
                let write = self.written(table, new, None, (key, value), set);
                set.writes.push(write);
                Ok(true)
            }
            Err(e) => {
                self.discard(table, new)?;
                match e {
                    InsertError::Phantom => Err(Error::Conflict),
                    InsertError::Exists(_) => Ok(false),
                }
            }
        }
    }

    /// Appends a version of `key` to `region` (not yet pending: its
    /// writer sets `begin`), and hands back its address and header.
    fn append_version<'t>(
        &mut self,
        table: &'t TableRt,
        key: &[u8],
        value: Option<&[u8]>,
        region: usize,
    ) -> Result<(Addr, &'t VersionHeader)> {
        table.heap.encode(
            &mut self.buf,
            self.ts,
            key,
            value.unwrap_or(&[]),
            value.is_none(),
        );
        let store = self.store;
        let append = || {
            table
                .heap
                .append(&store.medium, &store.space, region, self.ts, &self.buf)
        };
        let addr = match append() {
            // Blocks held ready for other tables are space this write
            // may have instead.
            Err(Error::OutOfSpace(_)) if store.release_reserves() > 0 => append(),
            outcome => outcome,
        }?;
        let header = self.version(table, addr)?;
        header.end.store(0, Release);
        header.read.store(0, Release);
        Ok((addr, header))
    }

    /// Turns a slot that was never published into a durable hole.
    fn discard(&self, table: &TableRt, addr: Addr) -> Result<()> {
        if let Some(header) = table.heap.header(addr) {
            header.begin.store(ABORTED, Release);
        }
        table.heap.make_hole(&self.store.medium, addr, self.ts);
        self.store.medium.fence()
    }

    /// Reads the version of the chain at `head` visible to this transaction
    /// into `out`, looking `key` up again if that head was superseded or
    /// reaped since the index returned it; false when none is visible.
    fn read_chain_into(
        &self,
        table: &TableRt,
        key: &[u8],
        head: Addr,
        out: &mut Vec<u8>,
    ) -> Result<bool> {
        if self.is_occ() {
            return self.occ_read_at(table, key, head.0, out);
        }
        let visible = match self.snapshot {
            true => self.snapshot_visible(table, head, None)?,
            false => self.visible(table, head, None)?,
        };
        match visible {
            Visible::Version(addr) => self.live_value_into(table, addr, out),
            Visible::Absent => Ok(false),
            Visible::Retry => self.read_key_into(table, key, out),
        }
    }

    /// Makes the transaction durable, then visible. On error it is aborted.
    pub fn commit(self) -> Result<()> {
        self.commit_deferred()?.wait()
    }

    /// Commits and publishes the transaction, returning what remains to
    /// wait for before it may be acknowledged (the log's flush, in the
    /// `wal` design). On error it is aborted.
    pub fn commit_deferred(mut self) -> Result<PendingCommit> {
        if let Err(e) = long::migrate_if_asked(self.store, self.worker) {
            self.poisoned.get_or_insert(e);
        }
        if let Some(e) = self.poisoned.take() {
            self.rollback();
            return Err(match e {
                Error::Conflict => Error::Conflict,
                _ => Error::TransactionPoisoned,
            });
        }
        if self.is_occ() {
            if let Err(e) = self.occ_prepare() {
                let result = self.guard(Err(e));
                self.rollback();
                return result;
            }
        }
        let store = self.store;
        let log = store.log().filter(|_| self.worker != catalog::GC_WORKER);
        let mut set = store.write_sets[self.worker].lock();
        let mut ticket = None;
        let wrote = !set.writes.is_empty();
        if wrote {
            assert_eq!(
                set.ts, self.ts,
                "the write set committed belongs to the committing transaction"
            );
            assert!(
                set.region == self.worker || set.region == catalog::long_region(self.worker),
                "a write set's region is its worker's own or its long region: {} of worker {}",
                set.region,
                self.worker
            );
            if let Err(e) = self.make_durable(&mut set) {
                drop(set);
                self.rollback();
                return Err(e);
            }
            if let Some(log) = log {
                if let Err(e) = log.check_failed() {
                    drop(set);
                    self.rollback();
                    return Err(e);
                }
                // Appended before publishing: whoever reads or overwrites
                // these versions appends after this record (see `wal`).
                ticket = Some(self.log_commit(log, &set));
            }
            // Recorded before anyone can see them committed: whoever sees
            // a version replaced (GC, which then frees its block after the
            // next checkpoint) knows the next delta has its successor.
            let publishing = store
                .changes
                .add_publishing(self.worker, self.committed(&set));
            self.publish(&mut set);
            store.last_writes[self.worker].store(self.ts, SeqCst);
            if set.region != self.worker {
                long::touch_written_keys(self.store, &set);
                store.long_published[set.region - crate::catalog::LONG_REGIONS]
                    .fetch_max(self.ts, SeqCst);
            }
            drop(publishing);
            set.writes.clear();
            set.keys.clear();
        }
        drop(set);
        self.entered.clear();
        if !self.snapshot {
            store.counters[self.worker].commits.fetch_add(1, Relaxed);
            if self.worker != catalog::GC_WORKER {
                store.admission.note_commit();
            }
        }
        // Acknowledged only once durable. A read-only transaction waits
        // only if it read a commit whose frame is still being written.
        let read_only_occ = (self.is_occ() && self.ts == self.began) || self.snapshot;
        let pending = match (log, ticket) {
            (None, _) => Pending::Durable,
            (Some(log), Some(ticket)) => Pending::Record(log.clone(), ticket),
            (Some(log), None) => Pending::Reads(log.clone(), self.newest_read.get()),
        };
        // GC's own copies never wait for GC.
        let stalled = wrote && self.worker != catalog::GC_WORKER && store.write_stall.is_on();
        Ok(PendingCommit {
            pending,
            id: (!read_only_occ).then_some(self.ts),
            stall: stalled.then(|| store.write_stall.clone()),
        })
    }

    /// Appends this transaction's versions to its worker's log buffer.
    fn log_commit(&self, log: &crate::wal::Log, set: &WriteSet) -> crate::wal::Ticket {
        use crate::wal::record;
        let store = self.store;
        log.append_ordered(self.worker, |buf| {
            let at = record::start_commit(buf, self.ts);
            let mut count = 0;
            for w in &set.writes {
                let heap = &store.tables[w.table as usize].heap;
                let len_at = record::entry_header(buf, w.table);
                match heap.copy_slot(&store.medium, w.new, buf) {
                    Some(len) => {
                        stamp_logged(buf, len, self.ts);
                        record::finish_entry(buf, len_at, len);
                        count += 1;
                    }
                    None => buf.truncate(len_at - 4),
                }
            }
            record::finish_commit(buf, at, count);
            self.ts
        })
    }

    fn make_durable(&self, set: &mut WriteSet) -> Result<()> {
        let store = self.store;
        // Records go down a block as entries go up: records in reverse
        // order, then entries, so that neighbours merge into runs.
        // Each version's ranges are looked up once (two directory reads
        // each): TPC-C's New-Order writes two dozen versions.
        let mut ranges = std::mem::take(&mut set.durable_ranges);
        ranges.clear();
        ranges.extend(set.writes.iter().filter_map(|w| {
            let heap = &store.tables[w.table as usize].heap;
            heap.version_ranges(&store.medium, w.new)
        }));
        let records = ranges.iter().rev().map(|r| r[0]);
        let entries = ranges.iter().map(|r| r[1]);
        store.medium.persist_all(records.chain(entries));
        let fenced = store.medium.fence();
        set.durable_ranges = ranges;
        fenced?;
        // A moved transaction's versions are all in its long region, whose
        // LCTT entry decides them.
        catalog::set_last_commit(&store.medium, set.region, self.ts);
        // The previous commit's bits go back beside the LCTT line, whose
        // fence waits one round trip anyway; at the end of that commit, its
        // next locked instruction waited for them.
        set.obsolete.write_back_with_commit(&store.medium);
        store.medium.fence()?;
        // Write-back evicts the lines (AMD's clwb does, costing a miss of
        // some 400 cycles on the next touch). This worker's next append to
        // each block lands in the same entry line and right below the
        // record, and a hot row's next reader (TPC-C's district) reads the
        // entry and the record's head again: start loading them now, while
        // the caller goes on, instead of missing in the next transaction.
        for [(record, record_len), (entry, entry_len)] in &set.durable_ranges {
            store.medium.prefetch(*entry, 2 * entry_len);
            let head = (record_len + 1).min(REFETCHED_RECORD_BYTES);
            store.medium.prefetch(record.saturating_sub(1), head);
        }
        catalog::prefetch_last_commit(&store.medium, set.region);
        Ok(())
    }

    /// What the change log records of a committing write set.
    fn committed<'w>(
        &self,
        set: &'w WriteSet,
    ) -> impl ExactSizeIterator<Item = Committed<'w>> + use<'w, 's> {
        let store = self.store;
        let keys = store.changes.capture() == Capture::HeadTrees;
        set.writes.iter().map(move |w| Committed {
            table: w.table,
            addr: w.new,
            key: set.key(w),
            // Read from the slot after a rewrite: worth it only to head trees.
            deletes: keys && set.deletes(w, &store.tables[w.table as usize].heap, &store.medium),
        })
    }

    fn publish(&self, set: &mut WriteSet) {
        let store = self.store;
        let counters = &store.counters[self.worker];
        counters.written.fetch_add(set.writes.len() as u64, Release);
        let mut deleted = Vec::new();
        // An optimistic commit kept the headers it installed and locked.
        let known = self.occ_headers.installed(set.writes.len());
        for (i, w) in set.writes.iter().enumerate() {
            let heap = &store.tables[w.table as usize].heap;
            let (new, prev_header) = match known {
                Some((installed, locked)) => (Some(installed[i]), locked[i]),
                None => (
                    heap.header(w.new),
                    w.prev.and_then(|prev| heap.header(prev)),
                ),
            };
            if let Some(header) = new {
                // Durable (commit steps 1 and 2) and still this writer's
                // pending version: only now may anyone see it committed.
                let begin = header.begin.load(Acquire);
                assert_eq!(
                    begin,
                    PENDING | self.ts,
                    "a version is pending under its writer until it is published ({:?})",
                    w.new
                );
                header.begin.store(self.ts, Release);
            }
            if set.deletes(w, heap, &store.medium) {
                deleted.push((w.table, w.new));
            }
            if let Some(prev) = w.prev {
                if let Some(header) = prev_header {
                    // Obsolete bits go only to versions this commit
                    // supersedes: locked by this writer since the write.
                    let (begin, end) = (header.begin.load(Acquire), header.end.load(Acquire));
                    assert_eq!(
                        end,
                        LOCKED | self.ts,
                        "a superseded version stays locked by its successor's writer until publish ({prev:?})"
                    );
                    assert!(
                        begin & PENDING == 0 && begin < self.ts,
                        "a predecessor committed before its successor's writer began: {begin:#x} !< {}",
                        self.ts
                    );
                    header.end.store(self.ts, Release);
                }
                if let Some(word) = heap.mark_obsolete(&store.medium, prev) {
                    match w.prev_deleted {
                        false => set.obsolete.remember(&store.medium, word),
                        true => set.obsolete.remember_for_next_commit(word),
                    }
                }
            }
        }
        if !deleted.is_empty() {
            store.deleted.lock().extend(deleted);
        }
    }

    pub fn abort(mut self) {
        self.rollback();
    }

    fn rollback(&mut self) {
        self.queue_entered();
        self.release_occ_locks();
        let store = self.store;
        let mut set = store.write_sets[self.worker].lock();
        if let Some(occ) = self.occ.take() {
            let mut cleared = occ.borrow_mut();
            cleared.clear();
            std::mem::take(&mut self.occ_headers).give_back(&mut cleared);
            drop(cleared);
            set.spare_occ = Some(occ);
        }
        if set.spare_buf.capacity() < self.buf.capacity() {
            set.spare_buf = std::mem::take(&mut self.buf);
        }
        set.spares.keep_larger(std::mem::take(&mut self.spares));
        if set.writes.is_empty() {
            return;
        }
        for w in set.writes.drain(..).rev() {
            let table = &store.tables[w.table as usize];
            let heap = &table.heap;
            if let Some(header) = heap.header(w.new) {
                header.begin.store(ABORTED, Release);
            }
            let key = heap.read_key(&store.medium, w.new);
            match w.prev {
                Some(prev) => {
                    let _ = table.index.compare_and_set(&key, w.new.0, prev.0, self.ts);
                    if let Some(header) = heap.header(prev) {
                        header.end.store(0, Release);
                    }
                }
                None => {
                    table.index.remove(&key, self.ts);
                }
            }
            heap.make_hole(&store.medium, w.new, self.ts);
        }
        // A failed fence leaves the holes unfenced; recovery then finds the
        // slots above LCTT and drops them, which is equally correct.
        let _ = store.medium.fence();
    }
}

impl Drop for TxnState<'_> {
    fn drop(&mut self) {
        self.rollback();
        if self.snapshot {
            self.store.close_snapshot(self.worker);
            return;
        }
        if self.store.long[self.worker].load(Relaxed) != LONG_NONE {
            self.store.long[self.worker].store(LONG_NONE, SeqCst);
        }
        self.store.retire(self.worker);
    }
}

/// A logged version carries its record's id; an optimistic insert's slot
/// keeps its begin id in the heap (`occ::publish_placeholder`), so its
/// copy at the end of `buf` (`len` bytes) is encoded again with `ts`.
fn stamp_logged(buf: &mut Vec<u8>, len: usize, ts: u64) {
    let start = buf.len() - len;
    // Most slots carry `ts` already: their word says so, without the
    // checksum a full decode computes.
    let word = buf
        .get(start..start + 8)
        .and_then(|w| w.try_into().ok())
        .map(u64::from_le_bytes);
    if let Some(SlotWord::Written { txn, .. }) = word.map(SlotWord::decode) {
        if txn == ts {
            return;
        }
    }
    let Some(slot) = crate::heap::decode_bytes(&buf[start..]) else {
        return;
    };
    let mut stamped = Vec::with_capacity(len);
    // The log's copy is checked at replay, whatever its size.
    crate::heap::encode_checked(&mut stamped, ts, slot.key, slot.value, slot.tombstone);
    buf.truncate(start);
    buf.extend_from_slice(&stamped);
}

fn as_slice_bound(b: &Bound<Vec<u8>>) -> Bound<&[u8]> {
    match b {
        Bound::Included(k) => Bound::Included(k.as_slice()),
        Bound::Excluded(k) => Bound::Excluded(k.as_slice()),
        Bound::Unbounded => Bound::Unbounded,
    }
}

/// Converts any byte-key range into owned bounds.
pub fn owned_range<K: AsRef<[u8]>>(range: impl RangeBounds<K>) -> (Bound<Vec<u8>>, Bound<Vec<u8>>) {
    let own = |b: Bound<&K>| match b {
        Bound::Included(k) => Bound::Included(k.as_ref().to_vec()),
        Bound::Excluded(k) => Bound::Excluded(k.as_ref().to_vec()),
        Bound::Unbounded => Bound::Unbounded,
    };
    (own(range.start_bound()), own(range.end_bound()))
}
