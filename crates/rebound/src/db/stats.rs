//! Statistics of an open database, gathered from the engine and its
//! design.

use crate::design::{Engine, WalStats};
use crate::gc::GcStats;
use crate::medium::Medium;
use crate::txn::TableRt;

/// What the database holds and has done since it was opened.
#[derive(Debug, Clone, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(default))]
#[non_exhaustive]
pub struct Stats {
    pub commits: u64,
    /// Transactions that hit a serialization conflict.
    pub conflicts: u64,
    /// Versions written by committed transactions.
    pub versions_written: u64,
    pub checkpoints: u64,
    /// Size of the medium (the data file) in bytes.
    pub medium_bytes: u64,
    /// Freed bytes kept backed for the next blocks (at most 16 MiB, given
    /// back once writes pause or at `collect_garbage`): the file occupies
    /// the live data and this.
    pub warm_bytes: u64,
    pub tables: Vec<TableStats>,
    pub gc: GcStats,
    /// Transactions that ran past `long_transaction_after` and moved their
    /// versions to a long-transaction region.
    pub long_transactions: u64,
    /// Read-only snapshots, and what they hold back.
    pub snapshots: SnapshotStats,
    /// Background GC rounds that failed (the error is in `last_error`).
    pub gc_failures: u64,
    /// Background checkpoints that failed.
    pub checkpoint_failures: u64,
    /// The most recent background failure, if any.
    pub last_error: Option<String>,
    /// Why the database is poisoned (a background thread panicked), if it is.
    pub poisoned: Option<String>,
    /// The log of the `wal` design (`None` for the other designs).
    pub wal: Option<WalStats>,
    /// How many user transactions may run at once now (`None`: no limit;
    /// see `Options::adaptive_admission`).
    pub admission_limit: Option<usize>,
    /// Transactions let in at `begin` after the longest wait (10 ms)
    /// without a place.
    pub admission_overdue: u64,
}

/// Open snapshots ([`Session::begin_read_only`](crate::Session::begin_read_only)).
/// While one is open, GC keeps the blocks it may read (they wait in
/// `GcStats::blocks_pending`) and the tombstones newer than it: that is
/// all it holds back.
#[derive(Debug, Clone, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(default))]
#[non_exhaustive]
pub struct SnapshotStats {
    /// Snapshots open now (they are not counted in `Stats::commits`).
    pub open: u64,
    /// How many timestamps (transactions begun since) the oldest open
    /// snapshot is behind.
    pub oldest_behind: u64,
    /// MVTO snapshots that did not wait for an older writer and started
    /// below it (they lack commits acknowledged just before they began).
    pub started_stale: u64,
    /// Other processes reading a log-free database read-only beside this
    /// writer ([`Options::read_only`](crate::Options)): while any holds
    /// its lease, GC and index checkpoints wait, so space and the redo
    /// work of a crash grow until it closes.
    #[cfg_attr(feature = "serde", serde(default))]
    pub reader_processes: u64,
    /// Snapshots expired for lagging more than `Options::max_snapshot_lag`.
    #[cfg_attr(feature = "serde", serde(default))]
    pub expired: u64,
}

/// Storage of one table. A version takes a directory entry (16 bytes) and
/// a record as long as its key and value need (12 bytes of header, 8-byte
/// aligned); `versions` counts entries (holes and block seals included),
/// `live_bytes` and `obsolete_bytes` the bytes they take, with the extents
/// of out-of-line values (those not freed yet). An obsolete version
/// has a committed successor (or is a hole left by an abort, or a deleted
/// key's tombstone nobody needs) and is what garbage collection reclaims.
#[derive(Debug, Clone)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub struct TableStats {
    pub name: String,
    pub index_entries: u64,
    pub blocks: u64,
    /// Regions holding at least one block. Each keeps its current block,
    /// which GC never takes, until that region writes again.
    #[cfg_attr(feature = "serde", serde(default))]
    pub regions: u64,
    pub block_bytes: u64,
    pub versions: u64,
    pub obsolete_versions: u64,
    pub live_bytes: u64,
    pub obsolete_bytes: u64,
    /// DRAM tiles of version headers allocated (recycled when GC frees a
    /// block, so bounded by the blocks alive at once).
    pub tiles: u64,
    /// Blocks from the medium whose slots are still verified on every read:
    /// the background scrub has not reached them yet, they are their
    /// region's last block, or they hold a damaged slot. Blocks this
    /// process formatted never count.
    pub unverified_blocks: u64,
    /// Extents held ready for the table's next blocks (at most two, while
    /// it grows; given back when it stops, or when the medium is full):
    /// space in use that holds no versions yet.
    #[cfg_attr(feature = "serde", serde(default))]
    pub reserved_blocks: u64,
}

fn table_stats(medium: &Medium, table: &TableRt) -> TableStats {
    let heap = &table.heap;
    let (mut blocks, mut obsolete, mut unverified) = (0u64, 0u64, 0u64);
    let mut used = crate::heap::BlockUsage::default();
    let mut regions = 0;
    for (worker, region) in heap.regions.iter().enumerate() {
        regions += u64::from(region.present().next().is_some());
        for block in region.present() {
            blocks += 1;
            obsolete += heap.obsolete_in(medium, block);
            unverified += u64::from(!block.is_trusted());
            let usage = heap.block_usage(medium, worker, block);
            used.entries += usage.entries;
            used.bytes += usage.bytes;
            used.obsolete_bytes += usage.obsolete_bytes;
        }
    }
    TableStats {
        name: heap.def.name.clone(),
        index_entries: table.index().len() as u64,
        blocks,
        regions,
        block_bytes: blocks * heap.def.block_size as u64,
        versions: used.entries,
        obsolete_versions: obsolete,
        live_bytes: used.bytes - used.obsolete_bytes,
        obsolete_bytes: used.obsolete_bytes,
        tiles: heap.tiles.allocated() as u64,
        unverified_blocks: unverified,
        reserved_blocks: heap.reserved_blocks() as u64,
    }
}

/// Counters and storage figures; walks every block's obsolete bitmap.
pub(super) fn of(engine: &Engine) -> Stats {
    let store = engine.store();
    let (commits, conflicts) = store.outcomes();
    let failures = engine.failures();
    Stats {
        gc_failures: failures.gc,
        checkpoint_failures: failures.checkpoint,
        last_error: failures.last_error,
        poisoned: engine.poisoned_by(),
        commits,
        conflicts,
        versions_written: store.versions_written(),
        checkpoints: engine.checkpoints(),
        medium_bytes: store.medium().len(),
        warm_bytes: store.space().warm_bytes(),
        tables: store
            .tables()
            .filter(|t| !t.is_dropped())
            .map(|t| table_stats(store.medium(), t))
            .collect(),
        gc: engine.gc_stats(),
        long_transactions: store.long_transactions_moved(),
        admission_limit: store.admission_limit(),
        admission_overdue: store.admission_overdue(),
        snapshots: SnapshotStats {
            reader_processes: engine.design().reader_processes() as u64,
            ..snapshot_stats(store)
        },
        wal: engine.design().wal_stats(),
    }
}

fn snapshot_stats(store: &crate::txn::Store) -> SnapshotStats {
    let (open, oldest_behind, started_stale) = store.snapshot_lag();
    SnapshotStats {
        open: open as u64,
        oldest_behind,
        started_stale,
        reader_processes: 0,
        expired: store.expired_snapshots(),
    }
}
