//! Recovery of secondary indexes after a restart (SOFORT, papers/004 §3).
//!
//! Secondary indexes live in DRAM only (`txn::secondary`), so a restart
//! finds them empty. Primary data and primary indexes come back first
//! (`recovery`); then one of three strategies rebuilds the rest:
//! * **Synchronous**: every index is built, with all recovery threads,
//!   before `open` returns (the paper's ¬rk.Q0.R8 baseline).
//! * **On demand**: nothing is built until a statement needs an index;
//!   that statement builds it in its own thread (others wanting the same
//!   index wait for it). Indexes no statement needs are never built.
//! * **Adaptive** (default): recovery threads start at once and rebuild
//!   the index of highest `rank(s, t)` (eq. 3) first, using all recovery
//!   threads while the best remaining rank is positive (Alg. 1–2). Once
//!   every remaining rank is negative the threads are released to the
//!   workload: such an index is built only while no transaction has
//!   started for `IDLE_AFTER`, and its build pauses between batches when
//!   the workload comes back (or carries on if its rank turns positive).
//!   A statement that wants an index not built yet is answered by a scan
//!   of the table, or waits for the build when that is estimated to be
//!   cheaper (the build is running and nearly done, or the table's primary
//!   index is still loading, when a scan is the dearer way to read it).
//!
//! `rank(s, t) = α(n)·Benefit(s, WoPast) + (1 − α(n))·Benefit(s,
//! WoRestart(t)) − rebuild(s)` with `α(n) = 0.99ⁿ`, n the statements that
//! wanted some index since the restart. Benefit is `Benefit_indep` (eq. 4):
//! per statement, the estimated cost of a table scan minus that of the
//! index lookup. WoPast comes from the statistics ring in the medium
//! (`catalog::indexes`), written about once a second as exponentially
//! decayed sums (half-life `WINDOW_HALF_LIFE`), so it describes the
//! seconds before the crash. `rebuild(s)` is the table's rows times the
//! measured (at first, estimated) cost of entering one row.

mod build;

use crate::catalog::{self, UsageRecord};
use crate::error::Result;
use crate::medium::Medium;
use crate::txn::{SecondaryRt, Store, TableRt, READY};
use parking_lot::Mutex;
use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, Release};
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How secondary indexes come back after a restart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub enum IndexRecovery {
    /// Build every index before `open` returns.
    Synchronous,
    /// Build an index when a statement first needs it, in that statement.
    OnDemand,
    /// Build in the background in order of benefit to the workload (SOFORT).
    #[default]
    Adaptive,
}

/// Cost of reading one row in a table scan, once the primary index is in
/// DRAM, before a scan measured it (measured on TATP rows).
const SCAN_ROW_NS: u64 = 600;
/// Estimated cost of one index descent plus reading one row through it.
pub const PROBE_NS: u64 = 1_500;
/// Cost of entering one row into an index before a build measured it.
const BUILD_ROW_NS: u64 = 1_000;
/// How long no transaction may start before the workload counts as idle.
const IDLE_AFTER: Duration = Duration::from_millis(50);
/// How often a paused build looks whether it may go on.
const IDLE_POLL: Duration = Duration::from_millis(10);
/// How often a build waiting for its table's primary index looks again.
const LOAD_POLL: Duration = Duration::from_millis(1);
/// Decay of the restart workload's weight per statement: α(n) = ALPHAⁿ.
const ALPHA: f64 = 0.99;
/// Half-life of the workload statistics kept for the next restart.
const WINDOW_HALF_LIFE: Duration = Duration::from_secs(5);
/// How often the statistics are written to the medium.
const USAGE_PERIOD: Duration = Duration::from_secs(1);

/// An index whose build the recovery threads will start with, locked
/// for them before they run.
pub struct FirstBuild {
    table: Arc<TableRt>,
    index: Arc<SecondaryRt>,
    lock: parking_lot::ArcMutexGuard<parking_lot::RawMutex, ()>,
}

/// When a build may use the CPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Priority {
    /// At once: the index is wanted.
    Now,
    /// Only while the workload is idle, unless the index's rank turns
    /// positive meanwhile.
    WhenIdle,
}

/// How a statement that wants an index is answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Plan {
    /// Through the index (it is ready).
    Index,
    /// By reading the whole table.
    Scan,
}

/// Chooses plans, runs builds and keeps the workload statistics.
pub struct IndexManager {
    strategy: IndexRecovery,
    /// Recovery threads a build may use at most (R of Alg. 1).
    pub threads: usize,
    opened: Instant,
    /// The statistics found in the medium at open (WoPast).
    past: Vec<UsageRecord>,
    /// Statements that wanted an index since open (n of α(n)).
    restart_statements: AtomicU64,
    /// Measured cost of entering one row, 0 until a build finished.
    build_ns_per_row: AtomicU64,
    /// Measured cost of reading one row in a scan with the primary index
    /// in DRAM, 0 until one ran.
    scan_ns_per_row: AtomicU64,
    /// The clock's value when last looked at, and when it last moved
    /// (nanoseconds since `opened`): the workload's idleness.
    clock_seen: AtomicU64,
    clock_moved_at: AtomicU64,
    pub cancel: AtomicBool,
    /// A background thread is moving checkpoint runs into the primary
    /// indexes: a table that is loading will be warm soon.
    pub primary_loading: AtomicBool,
    /// Someone waits for every index: builds no longer wait for idleness.
    hurry: AtomicBool,
    ring: Mutex<Ring>,
    /// When every secondary index was ready, measured from `opened`.
    all_ready_after: Mutex<Option<Duration>>,
}

/// Decayed sums being written to the statistics ring.
struct Ring {
    next_seq: u64,
    written_at: Instant,
    /// Per index (table, number): totals at the last write and the sums.
    sums: Vec<((u32, u32), Sums)>,
}

#[derive(Clone, Copy, Default)]
struct Sums {
    seen_statements: u64,
    seen_saved: u64,
    statements: f64,
    saved_ns: f64,
}

impl IndexManager {
    /// Reads the workload statistics the medium kept across the restart.
    pub fn new(strategy: IndexRecovery, threads: usize, opened: Instant, medium: &Medium) -> Self {
        let (past, top) = catalog::read_usage(medium);
        // What validation leaves: one record, the newest, per index.
        assert!(
            past.len() <= catalog::STATS_SLOTS
                && past.iter().enumerate().all(|(i, r)| {
                    past[..i]
                        .iter()
                        .all(|o| (o.table, o.number) != (r.table, r.number))
                }),
            "statistics ring read back: one record per index, at most one per slot"
        );
        let sums = past
            .iter()
            .map(|r| {
                let sums = Sums {
                    statements: r.statements as f64,
                    saved_ns: r.saved_ns as f64,
                    ..Sums::default()
                };
                ((r.table, r.number), sums)
            })
            .collect();
        IndexManager {
            strategy,
            threads: threads.max(1),
            opened,
            past,
            restart_statements: AtomicU64::new(0),
            build_ns_per_row: AtomicU64::new(0),
            scan_ns_per_row: AtomicU64::new(0),
            clock_seen: AtomicU64::new(0),
            clock_moved_at: AtomicU64::new(0),
            cancel: AtomicBool::new(false),
            primary_loading: AtomicBool::new(false),
            hurry: AtomicBool::new(false),
            ring: Mutex::new(Ring {
                next_seq: top + 1,
                written_at: Instant::now(),
                sums,
            }),
            all_ready_after: Mutex::new(None),
        }
    }

    pub fn strategy(&self) -> IndexRecovery {
        self.strategy
    }

    pub fn all_ready_after(&self) -> Option<Duration> {
        *self.all_ready_after.lock()
    }

    /// Records that every index is ready (first time only).
    pub fn note_all_ready(&self) {
        self.all_ready_after
            .lock()
            .get_or_insert_with(|| self.opened.elapsed());
    }

    /// Whether every secondary index of the store is ready.
    pub fn all_built(&self, store: &Store) -> bool {
        let tables: Vec<Arc<TableRt>> = store.tables().cloned().collect();
        all_ready(&tables)
    }

    /// Makes a built index usable by lookups: the build that built it
    /// publishes it, holding its build lock; creation publishes it again
    /// once the catalog holds it. A dropped or failed index is never
    /// published: `drop_table` drops a table's indexes under their build
    /// locks, and index creation holds the catalog lock a drop takes, so
    /// an index found live here stays live until it is ready. When it was
    /// built is recorded before it turns ready, so that whoever finds it
    /// ready finds that too (`ready_and_built`).
    pub fn publish(&self, index: &SecondaryRt) {
        let mut built_after = index.built_after.lock();
        assert!(
            index.build_lock.is_locked() || built_after.is_some(),
            "an index is published ready only once built: by its build (under the build lock) or again after it (index {} of table {})",
            index.def.number,
            index.def.table
        );
        if index.is_dropped() {
            return;
        }
        built_after.get_or_insert_with(|| self.opened.elapsed());
        drop(built_after);
        index.set_state(READY);
    }

    fn build_cost_per_row(&self) -> u64 {
        match self.build_ns_per_row.load(Relaxed) {
            0 => BUILD_ROW_NS,
            measured => measured,
        }
    }

    fn scan_cost_per_row(&self) -> u64 {
        match self.scan_ns_per_row.load(Relaxed) {
            0 => SCAN_ROW_NS,
            measured => measured,
        }
    }

    /// Records how long a scan standing in for an index took, unless the
    /// table's primary index was loading when it started (such a scan moves
    /// cold keys into it and says nothing of the steady cost).
    pub fn note_scan(&self, table_rows: u64, took: Duration, loading: bool) {
        if loading {
            return;
        }
        if let Some(per_row) = (took.as_nanos() as u64).checked_div(table_rows) {
            self.scan_ns_per_row.store(per_row.max(1), Relaxed);
        }
    }

    /// Estimated benefit of the index to one statement that returned
    /// `rows` rows from a table of `table_rows` (eq. 4), in steady state.
    pub fn benefit(&self, table_rows: u64, rows: usize) -> u64 {
        (table_rows * self.scan_cost_per_row()).saturating_sub(PROBE_NS * (1 + rows as u64))
    }

    /// Whether no transaction started during the last `IDLE_AFTER`, as
    /// far as calls to this tell (the first call after a pause says no).
    fn workload_idle(&self, store: &Store) -> bool {
        let now = self.opened.elapsed().as_nanos() as u64;
        let ts = store.clock().peek();
        if self.clock_seen.swap(ts, Relaxed) != ts {
            self.clock_moved_at.store(now, Relaxed);
            return false;
        }
        now.saturating_sub(self.clock_moved_at.load(Relaxed)) >= IDLE_AFTER.as_nanos() as u64
    }

    /// Decides how a statement that wants `index` is answered, waiting for
    /// or performing its build as the strategy says. The caller runs
    /// inside a transaction, which keeps GC away from the versions a build
    /// performed here reads.
    pub fn plan(&self, store: &Store, table: &TableRt, index: &SecondaryRt) -> Result<Plan> {
        if index.is_ready() {
            return Ok(Plan::Index);
        }
        self.restart_statements.fetch_add(1, Relaxed);
        match self.strategy {
            IndexRecovery::Synchronous | IndexRecovery::OnDemand => {
                self.build_or_wait(store, table, index)?;
                if self.all_built(store) {
                    self.note_all_ready();
                }
                Ok(if index.is_ready() {
                    Plan::Index
                } else {
                    Plan::Scan
                })
            }
            IndexRecovery::Adaptive => Ok(self.adaptive_plan(table, index)),
        }
    }

    /// Scan, or wait for a running build estimated to end sooner than a scan.
    fn adaptive_plan(&self, table: &TableRt, index: &SecondaryRt) -> Plan {
        if !index.build_lock.is_locked() {
            return Plan::Scan;
        }
        // While the primary index loads, a scan moves every cold key into
        // it one by one, where the build reads them in place and sorted:
        // the build's remainder is never the dearer choice then.
        if !table.is_loading() {
            let scan_ns = table.approximate_rows() * self.scan_cost_per_row();
            if self.build_left_ns(table, index) >= scan_ns {
                return Plan::Scan;
            }
        }
        index.usage.waits.fetch_add(1, Relaxed);
        index.waiting.fetch_add(1, AcqRel);
        drop(index.build_lock.lock());
        index.waiting.fetch_sub(1, AcqRel);
        match index.is_ready() {
            true => Plan::Index,
            false => Plan::Scan,
        }
    }

    /// Time the running build of `index` still needs, extrapolated from
    /// its rate so far (or from the measured cost per row before it has one).
    fn build_left_ns(&self, table: &TableRt, index: &SecondaryRt) -> u64 {
        let rows = table.approximate_rows();
        // Each row counts twice: once collected, once entered.
        let done = index.build_progress.load(Relaxed);
        let left = (2 * rows).saturating_sub(done);
        let started = *index.build_started.lock();
        match started {
            Some(at) if done > 0 => (left as u128 * at.elapsed().as_nanos() / done as u128) as u64,
            _ => left * self.build_cost_per_row() / 2 / self.threads as u64,
        }
    }

    /// Builds `index` in the calling thread unless another thread is
    /// building it, in which case this waits for that build.
    pub fn build_or_wait(&self, store: &Store, table: &TableRt, index: &SecondaryRt) -> Result<()> {
        index.usage.waits.fetch_add(1, Relaxed);
        index.waiting.fetch_add(1, AcqRel);
        let _building = index.build_lock.lock();
        index.waiting.fetch_sub(1, AcqRel);
        if ready_and_built(index) {
            return Ok(());
        }
        self.build_locked(store, table, index, &[None], Priority::Now)
    }

    /// What the statistics ring said about an index at open (WoPast).
    pub fn past_usage(&self, table: u32, number: u32) -> Option<UsageRecord> {
        self.past
            .iter()
            .find(|r| (r.table, r.number) == (table, number))
            .copied()
    }

    /// SOFORT's rank of an index not built yet (eq. 3).
    pub fn rank(&self, table: &TableRt, index: &SecondaryRt) -> f64 {
        let n = self.restart_statements.load(Relaxed);
        let alpha = ALPHA.powf(n as f64);
        let key = (table.heap.def.id, index.def.number);
        let past = self
            .past
            .iter()
            .find(|r| (r.table, r.number) == key)
            .map_or(0.0, |r| r.saved_ns as f64);
        let restart = index.usage.saved_ns.load(Relaxed) as f64;
        let rebuild = (table.approximate_rows() * self.build_cost_per_row()) as f64;
        let rank = alpha * past + (1.0 - alpha) * restart - rebuild;
        // Eq. 3: α(n) a weight in (0, 1], the benefits and the rebuild
        // cost non-negative; the rank may be negative, never NaN (the
        // order of `next_to_rebuild` compares it).
        let terms = [past, restart, rebuild];
        assert!(
            alpha > 0.0 && alpha <= 1.0 && terms.iter().all(|t| *t >= 0.0) && rank.is_finite(),
            "rank(s, t) of index {} of table {key:?}: α {alpha}, past {past}, restart {restart}, rebuild {rebuild}, rank {rank}",
            index.def.number
        );
        rank
    }

    /// Claims the best-ranked index for the recovery threads about to
    /// start, if its rank is positive: statements arriving before they
    /// run then see its build under way and may wait for it.
    pub fn claim_first_build(&self, store: &Store) -> Option<FirstBuild> {
        let tables: Vec<Arc<TableRt>> = store.tables().cloned().collect();
        let (table, index, rank) = self.next_to_rebuild(&tables)?;
        if rank <= 0.0 {
            return None;
        }
        let lock = index.build_lock.try_lock_arc()?;
        index.build_progress.store(0, Relaxed);
        *index.build_started.lock() = Some(Instant::now());
        Some(FirstBuild { table, index, lock })
    }

    /// The not-yet-built index of highest rank nobody is building, with
    /// its rank (Alg. 2). An index worth building whose table the loader
    /// has not warmed yet comes after those whose table it has: its build
    /// would wait for the load (`wait_for_primary`), and theirs can run
    /// meanwhile.
    pub fn next_to_rebuild(
        &self,
        tables: &[Arc<TableRt>],
    ) -> Option<(Arc<TableRt>, Arc<SecondaryRt>, f64)> {
        let mut best: Option<(Arc<TableRt>, Arc<SecondaryRt>, f64)> = None;
        let mut best_order = (false, f64::NEG_INFINITY);
        for table in tables {
            let warm = !self.waits_for_load(table);
            for (_, index) in table.secondaries.iter() {
                if index.is_ready() || index.is_dropped() || index.build_lock.is_locked() {
                    continue;
                }
                let rank = self.rank(table, index);
                let order = (rank > 0.0 && warm, rank);
                if best.is_none() || order > best_order {
                    best = Some((table.clone(), index.clone(), rank));
                    best_order = order;
                }
            }
        }
        best
    }

    /// Whether a build on `table` would wait for the background load.
    fn waits_for_load(&self, table: &TableRt) -> bool {
        table.is_loading() && self.primary_loading.load(Acquire)
    }

    /// The adaptive recovery procedure (Alg. 1) on recovery workers
    /// `workers`: builds the best-ranked index with all of them while its
    /// rank is positive, with the first one only afterwards. Returns when
    /// every index is ready or on cancellation.
    pub fn run_adaptive(
        &self,
        store: &Store,
        workers: &[usize],
        first: Option<FirstBuild>,
    ) -> Result<()> {
        let tables: Vec<Arc<TableRt>> = store.tables().cloned().collect();
        let all: Vec<Option<usize>> = workers.iter().map(|&w| Some(w)).collect();
        if let Some(FirstBuild { table, index, lock }) = first {
            self.build_locked(store, &table, &index, &all, Priority::Now)?;
            drop(lock);
        }
        while !self.cancel.load(Acquire) {
            let Some((table, index, rank)) = self.next_to_rebuild(&tables) else {
                if all_ready(&tables) {
                    self.note_all_ready();
                    return Ok(());
                }
                // A statement is building the last ones; wait for it.
                std::thread::sleep(Duration::from_millis(1));
                continue;
            };
            // Nothing left helps the workload: leave it the CPU until it
            // pauses, or until statements raise a rank.
            let priority = match rank > 0.0 {
                true => Priority::Now,
                false => Priority::WhenIdle,
            };
            let hurry = self.hurry.load(Acquire);
            if priority == Priority::WhenIdle && !hurry && !self.workload_idle(store) {
                std::thread::sleep(IDLE_POLL);
                continue;
            }
            let Some(_building) = index.build_lock.try_lock() else {
                continue;
            };
            if ready_and_built(&index) {
                continue;
            }
            self.build_locked(store, &table, &index, &all, priority)?;
        }
        Ok(())
    }

    /// Builds every index not ready yet, each with all `workers`
    /// (synchronous recovery, and `wait_for_secondary_indexes`).
    pub fn build_all(&self, store: &Store, workers: &[Option<usize>]) -> Result<()> {
        self.hurry.store(true, Release);
        let mut tables: Vec<Arc<TableRt>> = store.tables().cloned().collect();
        // Tables the loader has warmed first: builds on the others wait.
        tables.sort_by_key(|table| self.waits_for_load(table));
        for table in &tables {
            for (_, index) in table.secondaries.iter() {
                if index.is_ready() || index.is_dropped() {
                    continue;
                }
                let _building = index.build_lock.lock();
                if !ready_and_built(index) {
                    self.build_locked(store, table, index, workers, Priority::Now)?;
                }
            }
        }
        if all_ready(&tables) {
            self.note_all_ready();
        }
        Ok(())
    }

    /// Writes the decayed workload sums to the statistics ring, at most
    /// once per `USAGE_PERIOD` unless `now`.
    pub fn persist_usage(&self, store: &Store, now: bool) {
        let mut ring = self.ring.lock();
        let elapsed = ring.written_at.elapsed();
        if elapsed < USAGE_PERIOD && !now {
            return;
        }
        ring.written_at = Instant::now();
        let decay = 0.5f64.powf(elapsed.as_secs_f64() / WINDOW_HALF_LIFE.as_secs_f64());
        assert!(
            (0.0..=1.0).contains(&decay),
            "statistics ring: decay {decay} is a factor in [0, 1]"
        );
        let window_ms = (WINDOW_HALF_LIFE.as_secs_f64() / std::f64::consts::LN_2 * 1000.0) as u64;
        for table in store.tables() {
            for (_, index) in table.secondaries.iter() {
                // A dropped entry's number may belong to a live index now
                // (placeholders all say 0): its zeros must not count there.
                if index.is_dropped() {
                    continue;
                }
                let key = (table.heap.def.id, index.def.number);
                let statements = index.usage.statements.load(Relaxed);
                let saved = index.usage.saved_ns.load(Relaxed);
                let position = match ring.sums.iter().position(|(k, _)| *k == key) {
                    Some(p) => p,
                    None => {
                        ring.sums.push((key, Sums::default()));
                        ring.sums.len() - 1
                    }
                };
                let sums = &mut ring.sums[position].1;
                sums.statements = sums.statements * decay
                    + statements.saturating_sub(sums.seen_statements) as f64;
                sums.saved_ns =
                    sums.saved_ns * decay + saved.saturating_sub(sums.seen_saved) as f64;
                sums.seen_statements = statements;
                sums.seen_saved = saved;
                // What the next open reads back as WoPast (eq. 3).
                assert!(
                    [sums.statements, sums.saved_ns]
                        .iter()
                        .all(|sum| sum.is_finite() && *sum >= 0.0)
                        && window_ms > 0,
                    "statistics ring record of index {key:?}: decayed sums finite and non-negative ({} statements, {} ns), window {window_ms} ms",
                    sums.statements,
                    sums.saved_ns
                );
                let record = UsageRecord {
                    table: key.0,
                    number: key.1,
                    statements: sums.statements as u64,
                    saved_ns: sums.saved_ns as u64,
                    window_ms,
                };
                let seq = ring.next_seq;
                ring.next_seq += 1;
                catalog::write_usage(store.medium(), seq, &record);
            }
        }
    }
}

/// Whether an index is ready; the read side of `publish`: a ready index
/// was published by its build, which recorded when. Checked where a build
/// is skipped because the index is ready (not on the lookup path).
fn ready_and_built(index: &SecondaryRt) -> bool {
    let ready = index.is_ready();
    assert!(
        !ready || index.built_after.lock().is_some(),
        "an index found ready was published by its build (index {} of table {})",
        index.def.number,
        index.def.table
    );
    ready
}

fn all_ready(tables: &[Arc<TableRt>]) -> bool {
    tables.iter().all(|t| {
        t.secondaries
            .iter()
            .all(|(_, i)| i.is_ready() || i.is_dropped())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::{IndexDef, KeyPart, Source, DATA_START};
    use crate::txn::DROPPED;

    fn manager() -> IndexManager {
        let medium = Medium::volatile(1 << 24, DATA_START).expect("a volatile medium");
        IndexManager::new(IndexRecovery::Adaptive, 2, Instant::now(), &medium)
    }

    fn index() -> SecondaryRt {
        let def = IndexDef {
            table: 0,
            number: 0,
            name: "by_value".into(),
            unique: false,
            parts: vec![KeyPart {
                source: Source::Value,
                start: 0,
                len: 4,
            }],
        };
        SecondaryRt::new(def, false)
    }

    #[test]
    fn a_built_index_is_published_by_its_build_and_again_after_it() {
        let (indexes, index) = (manager(), index());
        let building = index.build_lock.lock();
        indexes.publish(&index);
        drop(building);
        assert!(ready_and_built(&index));
        indexes.publish(&index);
        assert!(index.is_ready());
    }

    #[test]
    #[should_panic(expected = "published ready only once built")]
    fn an_index_nobody_built_is_never_published() {
        manager().publish(&index());
    }

    /// A build that finishes after its table was dropped leaves the
    /// index dropped.
    #[test]
    fn a_dropped_index_is_never_published() {
        let (indexes, index) = (manager(), index());
        let _building = index.build_lock.lock();
        index.set_state(DROPPED);
        indexes.publish(&index);
        assert!(index.is_dropped() && !index.is_ready());
    }

    #[test]
    #[should_panic(expected = "found ready was published by its build")]
    fn an_index_ready_without_its_build_fails_the_read_side() {
        let index = index();
        index.set_state(READY);
        ready_and_built(&index);
    }
}
