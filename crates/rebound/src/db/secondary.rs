//! Secondary indexes in the public API; creating and recovering them is
//! the design layer's (`design/secondary.rs`, strategies in `adaptive`).

use super::{Database, Table, Transaction};
use crate::adaptive::{IndexRecovery, Plan};
use crate::catalog::{IndexDef, KeyPart, Source};
use crate::design;
use crate::error::{Error, Result};
use crate::txn::{owned_range, prefix_end, Rows, SecondaryRt, TableRt};
use std::ops::{Bound, Range, RangeBounds};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

/// How a secondary index cuts its key out of a row: the concatenation of
/// byte ranges of the primary key and of the value, in the order given.
/// Every key of an index has the same length, so fixed-width fields are
/// what it indexes; a row too short for a range has no entry (it is never
/// found through the index, like a NULL).
///
/// The definition is data, not code, so the engine can rebuild the index
/// after a restart before the application has done anything.
///
/// ```no_run
/// # use rebound::{Database, IndexOptions, Options, TableOptions};
/// # let db = Database::open("/dev/shm/doc-index", Options::default())?;
/// # let customers = db.create_table("customers", TableOptions::default())?;
/// // Value bytes 0..16 hold the last name; the key starts with the district.
/// let by_name = db.create_index(
///     &customers,
///     "by_name",
///     IndexOptions::default().key_bytes(0..4).value_bytes(0..16),
/// )?;
/// # Ok::<(), rebound::Error>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct IndexOptions {
    pub(super) parts: Vec<KeyPart>,
    /// At most one live row per secondary key; a write that would make a
    /// second fails with [`Error::UniqueViolation`].
    pub unique: bool,
}

impl IndexOptions {
    /// Appends bytes `bytes` of the primary key to the secondary key.
    #[must_use]
    pub fn key_bytes(self, bytes: Range<usize>) -> Self {
        self.part(Source::PrimaryKey, bytes)
    }

    /// Appends bytes `bytes` of the value to the secondary key.
    #[must_use]
    pub fn value_bytes(self, bytes: Range<usize>) -> Self {
        self.part(Source::Value, bytes)
    }

    /// Makes the index unique (default: not unique).
    #[must_use]
    pub fn unique(mut self, unique: bool) -> Self {
        self.unique = unique;
        self
    }

    /// The options an index of definition `def` was created with.
    pub(super) fn from_def(def: &IndexDef) -> IndexOptions {
        IndexOptions {
            parts: def.parts.clone(),
            unique: def.unique,
        }
    }

    fn part(mut self, source: Source, bytes: Range<usize>) -> Self {
        let start = u32::try_from(bytes.start).unwrap_or(u32::MAX);
        let len = u32::try_from(bytes.end.saturating_sub(bytes.start)).unwrap_or(0);
        self.parts.push(KeyPart { source, start, len });
        self
    }
}

/// A handle to a secondary index; cheap to clone.
#[derive(Clone)]
pub struct Index {
    table: Arc<TableRt>,
    rt: Arc<SecondaryRt>,
}

impl Index {
    pub fn name(&self) -> &str {
        &self.rt.def.name
    }

    pub fn table_name(&self) -> &str {
        &self.table.heap.def.name
    }

    pub fn is_unique(&self) -> bool {
        self.rt.def.unique
    }

    /// Length in bytes of every key of this index.
    pub fn key_len(&self) -> usize {
        self.rt.def.key_len()
    }

    /// Whether lookups go through the index (false while it is rebuilt
    /// after a restart: they are then answered by other means).
    pub fn is_ready(&self) -> bool {
        self.rt.is_ready()
    }
}

/// One secondary index's state and use since open.
#[derive(Debug, Clone)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub struct IndexStats {
    pub table: String,
    pub name: String,
    pub unique: bool,
    pub ready: bool,
    /// From the start of `open` until it was ready (`None`: not yet, or
    /// it never needed building since open).
    pub built_after: Option<Duration>,
    /// Entries in the index, stale ones awaiting removal included.
    pub entries: u64,
    /// Statements that wanted the index.
    pub statements: u64,
    /// Of those, answered by a table scan because it was not built.
    pub scans_instead: u64,
    /// Statements that waited for (or performed) its build.
    pub waits: u64,
    /// Entries lookups read from the index, each then checked against its
    /// row: about the rows they returned, not the size of the range.
    pub entries_read: u64,
    /// Estimated time it saved (or would have saved) those statements.
    pub saved_ns: u64,
    /// Its SOFORT rank now, while it is not built.
    pub rank: Option<f64>,
    /// What the statistics kept in the medium said at open about the
    /// seconds before (decayed sums): statements that wanted the index...
    pub past_statements: u64,
    /// ...and the time it saved them.
    pub past_saved_ns: u64,
}

impl Database {
    /// Creates a secondary index on `table` and builds it from the rows
    /// the table holds; the definition is durable when this returns.
    /// Writes running meanwhile keep it up to date. A unique index over
    /// rows that already repeat a key fails with
    /// [`Error::UniqueViolation`] and is not created.
    pub fn create_index(&self, table: &Table, name: &str, options: IndexOptions) -> Result<Index> {
        self.inner.check_writable()?;
        let rt = design::create_index(&self.inner, &table.rt, name, options.parts, options.unique)?;
        Ok(Index {
            table: table.rt.clone(),
            rt,
        })
    }

    /// The secondary index `name` of `table`, if it exists.
    pub fn index(&self, table: &Table, name: &str) -> Result<Option<Index>> {
        self.check_open()?;
        let found = table
            .rt
            .secondaries
            .iter()
            .find(|(_, i)| i.def.name == name && !i.is_dropped());
        Ok(found.map(|(_, rt)| Index {
            table: table.rt.clone(),
            rt: rt.clone(),
        }))
    }

    /// Every secondary index's state and use since open.
    pub fn index_stats(&self) -> Vec<IndexStats> {
        let manager = self.inner.indexes();
        let mut stats = Vec::new();
        for table in self.inner.store().tables().filter(|t| !t.is_dropped()) {
            for (_, index) in table.secondaries.iter() {
                if index.is_dropped() {
                    continue;
                }
                let usage = &index.usage;
                let past = manager.past_usage(table.heap.def.id, index.def.number);
                stats.push(IndexStats {
                    table: table.heap.def.name.clone(),
                    name: index.def.name.clone(),
                    unique: index.def.unique,
                    ready: index.is_ready(),
                    built_after: *index.built_after.lock(),
                    entries: index.tree.len() as u64,
                    statements: usage.statements.load(Ordering::Relaxed),
                    scans_instead: usage.scans_instead.load(Ordering::Relaxed),
                    waits: usage.waits.load(Ordering::Relaxed),
                    entries_read: usage.entries_read.load(Ordering::Relaxed),
                    saved_ns: usage.saved_ns.load(Ordering::Relaxed),
                    rank: (!index.is_ready()).then(|| manager.rank(table, index)),
                    past_statements: past.map_or(0, |p| p.statements),
                    past_saved_ns: past.map_or(0, |p| p.saved_ns),
                });
            }
        }
        stats
    }

    /// Builds whatever secondary index is not ready yet, in the calling
    /// thread and the recovery threads, and returns the time from the
    /// start of `open` until all were ready.
    pub fn wait_for_secondary_indexes(&self) -> Result<Option<Duration>> {
        self.check_open()?;
        design::build_secondary_indexes(&self.inner)?;
        Ok(self.inner.indexes().all_ready_after())
    }

    /// The strategy the secondary indexes of this open recover with.
    pub fn index_recovery(&self) -> IndexRecovery {
        self.inner.indexes().strategy()
    }
}

impl Transaction<'_> {
    /// The first row (primary key, value) whose secondary key is `key`.
    pub fn index_get(&mut self, index: &Index, key: &[u8]) -> Result<Option<(Vec<u8>, Vec<u8>)>> {
        let range = (Bound::Included(key.to_vec()), Bound::Included(key.to_vec()));
        Ok(self.index_lookup(index, range, 1)?.into_iter().next())
    }

    /// Up to `limit` rows (primary key, value) whose secondary key lies in
    /// `range`, ordered by secondary key, then primary key. Serializable
    /// like [`scan`](Transaction::scan): the rows are read as by `get`,
    /// and no older transaction can add a row to the range afterwards.
    pub fn index_scan<K: AsRef<[u8]>>(
        &mut self,
        index: &Index,
        range: impl RangeBounds<K>,
        limit: usize,
    ) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        self.index_lookup(index, owned_range(range), limit)
    }

    /// Every row whose secondary key lies in `range` (see [`index_scan`](Self::index_scan)).
    pub fn index_range<K: AsRef<[u8]>>(
        &mut self,
        index: &Index,
        range: impl RangeBounds<K>,
    ) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        self.index_lookup(index, owned_range(range), usize::MAX)
    }

    /// Every row whose secondary key starts with `prefix`.
    pub fn index_prefix(
        &mut self,
        index: &Index,
        prefix: &[u8],
    ) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let upper = prefix_end(prefix).map_or(Bound::Unbounded, Bound::Excluded);
        self.index_lookup(index, (Bound::Included(prefix.to_vec()), upper), usize::MAX)
    }

    fn index_lookup(
        &mut self,
        index: &Index,
        range: (Bound<Vec<u8>>, Bound<Vec<u8>>),
        limit: usize,
    ) -> Result<Rows> {
        let db = self.db;
        if !db.store().owns(&index.table) {
            return Err(Error::ForeignTable);
        }
        let plan = db.indexes().plan(db.store(), &index.table, &index.rt)?;
        let range = (&range.0, &range.1);
        let table_rows = index.table.approximate_rows();
        let rows = match plan {
            Plan::Index => self
                .state
                .index_lookup(&index.table, &index.rt, range, limit)?,
            Plan::Scan => {
                index.rt.usage.scans_instead.fetch_add(1, Ordering::Relaxed);
                let started = std::time::Instant::now();
                let loading = index.table.is_loading();
                let table = index.table.clone();
                let rows = self
                    .state
                    .index_lookup_by_scan(table, &index.rt, range, limit)?;
                db.indexes()
                    .note_scan(table_rows, started.elapsed(), loading);
                rows
            }
        };
        index
            .rt
            .record_use(db.indexes().benefit(table_rows, rows.len()));
        Ok(rows)
    }

    /// Before a write: unique indexes not built yet are built or waited
    /// for if the strategy says so (else the write checks by a scan),
    /// unless the write keeps the row's key in them.
    pub(super) fn prepare_write(&mut self, table: &Table, key: &[u8], value: &[u8]) -> Result<()> {
        // An empty boxcar still walks all its buckets when iterated.
        if table.rt.secondaries.count() == 0 {
            return Ok(());
        }
        let db = self.db;
        for (_, index) in table.rt.secondaries.iter() {
            if index.def.unique
                && !index.is_ready()
                && !index.is_dropped()
                && !self
                    .state
                    .keeps_secondary_key(&table.rt, index, key, value)?
            {
                db.indexes().plan(db.store(), &table.rt, index)?;
            }
        }
        Ok(())
    }
}
