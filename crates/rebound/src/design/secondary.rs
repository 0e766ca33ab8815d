//! Secondary indexes for every design: creating one (build, uniqueness
//! check, catalog and log records), their recovery after a restart as the
//! strategy says (SOFORT; the strategies are in `adaptive`), and their
//! share of maintenance.

use super::Engine;
use crate::adaptive::{IndexRecovery, Priority};
use crate::catalog::{
    self, IndexDef, KeyPart, Source, MAX_INDEXES_PER_TABLE, MAX_INDEX_NAME_LEN, MAX_KEY_PARTS,
};
use crate::error::{Error, Result};
use crate::gc::Collector;
use crate::index::MAX_KEY_LEN;
use crate::txn::{SecondaryRt, TableRt, TxnState, DROPPED};
use parking_lot::Mutex;
use std::ops::Bound;
use std::sync::Arc;

/// Creates a secondary index on `table` and builds it from the rows the
/// table holds; the definition is durable when this returns. A failed
/// build marks the index failed (its number stays free); a failed
/// catalog or log write leaves it dropped (its number is taken).
pub fn create_index(
    engine: &Engine,
    table: &Arc<TableRt>,
    name: &str,
    parts: Vec<KeyPart>,
    unique: bool,
) -> Result<Arc<SecondaryRt>> {
    engine.check_open()?;
    if !engine.store().owns(table) {
        return Err(Error::ForeignTable);
    }
    let _guard = engine.create_lock();
    // Under the lock: a drop that finished first is seen.
    table.check_live(None)?;
    validate(table, name, &parts)?;
    let def = IndexDef {
        table: table.heap.def.id,
        number: next_number(table),
        name: name.to_owned(),
        unique,
        parts,
    };
    let index = Arc::new(SecondaryRt::new(def, false));
    table.secondaries.push(index.clone());
    if let Err(e) = build_new(engine, table, &index) {
        index.mark_failed();
        return Err(e);
    }
    let recorded = catalog::create_index(engine.store().medium(), &index.def).and_then(|()| {
        engine.design().log_ddl(engine, &mut |buf, ts| {
            crate::wal::record::encode_index(buf, ts, &index.def)
        })
    });
    if let Err(e) = recorded {
        // The catalog slot may be written: the number stays taken.
        index.set_state(DROPPED);
        return Err(e);
    }
    engine.indexes().publish(&index);
    Ok(index)
}

/// The catalog number of a table's next index: the one after every
/// created index and placeholder (they hold 0, 1, ... in order). Failed
/// creations are skipped, so they use up no number.
fn next_number(table: &TableRt) -> u32 {
    let taken = table.secondaries.iter().filter(|(_, i)| !i.is_failed());
    taken.count() as u32
}

fn validate(table: &TableRt, name: &str, parts: &[KeyPart]) -> Result<()> {
    let invalid = |why: String| Err(Error::InvalidIndex(why));
    if name.is_empty() || name.len() > MAX_INDEX_NAME_LEN {
        return invalid(format!("name must be 1..={MAX_INDEX_NAME_LEN} bytes"));
    }
    let existing = || table.secondaries.iter().filter(|(_, i)| !i.is_dropped());
    if existing().any(|(_, i)| i.def.name == name) {
        return Err(Error::IndexExists(name.to_owned()));
    }
    if next_number(table) as usize >= MAX_INDEXES_PER_TABLE {
        return invalid(format!(
            "a table has at most {MAX_INDEXES_PER_TABLE} indexes"
        ));
    }
    if !(1..=MAX_KEY_PARTS).contains(&parts.len()) {
        return invalid(format!("a key has 1..={MAX_KEY_PARTS} byte ranges"));
    }
    let def = &table.heap.def;
    for part in parts {
        let limit = match part.source {
            Source::PrimaryKey => def.max_key_len,
            Source::Value => def.max_value_len,
        };
        if part.len == 0 || part.start.saturating_add(part.len) > limit {
            return invalid(format!(
                "byte range {}..{} is empty or beyond the table's limit of {limit}",
                part.start,
                part.start.saturating_add(part.len)
            ));
        }
    }
    let key_len: u32 = parts.iter().map(|p| p.len).sum();
    if (key_len + def.max_key_len) as usize > MAX_KEY_LEN {
        return invalid(format!(
            "index key ({key_len} bytes) plus the table's max key ({}) exceeds {MAX_KEY_LEN}",
            def.max_key_len
        ));
    }
    Ok(())
}

/// Builds a new index over the rows the table holds and, if unique,
/// checks that no secondary key repeats among them.
fn build_new(engine: &Engine, table: &Arc<TableRt>, index: &Arc<SecondaryRt>) -> Result<()> {
    let indexes = engine.indexes();
    let workers = engine.reserve_workers(indexes.threads);
    let Some(&Some(first)) = workers.first() else {
        engine.release_workers(&workers);
        return Err(Error::TooManySessions(crate::catalog::MAX_SESSIONS));
    };
    let outcome = {
        let _building = index.build_lock.lock();
        indexes.build_locked(engine.store(), table, index, &workers, Priority::Now)
    };
    // A build that close cancelled returns without publishing the index:
    // it is not built, so it is neither recorded nor published.
    let outcome = outcome.and_then(|()| match index.is_ready() {
        true => Ok(()),
        false => Err(Error::Closed),
    });
    let outcome = outcome.and_then(|()| match index.def.unique {
        true => check_no_repeats(engine, table, index, first),
        false => Ok(()),
    });
    engine.release_workers(&workers);
    outcome
}

fn check_no_repeats(
    engine: &Engine,
    table: &TableRt,
    index: &SecondaryRt,
    worker: usize,
) -> Result<()> {
    let mut repeated = Vec::new();
    let mut previous: Option<Vec<u8>> = None;
    index
        .tree
        .scan(Bound::Unbounded, Bound::Unbounded, None, |entry, _| {
            let (secondary, _) = index.split(entry);
            if previous.as_deref() == Some(secondary) && repeated.last() != Some(&previous) {
                repeated.push(previous.clone());
            }
            previous = Some(secondary.to_vec());
            true
        });
    let mut txn = TxnState::begin(engine.store(), worker);
    for secondary in repeated.into_iter().flatten() {
        let range = (
            Bound::Included(secondary.clone()),
            Bound::Included(secondary),
        );
        if txn
            .index_lookup(table, index, (&range.0, &range.1), 2)?
            .len()
            > 1
        {
            return Err(Error::UniqueViolation(index.def.name.clone()));
        }
    }
    txn.commit()
}

/// Builds whatever secondary index is not ready yet, in the calling
/// thread and the recovery threads.
pub fn build_all(engine: &Engine) -> Result<()> {
    let indexes = engine.indexes();
    let workers = engine.reserve_workers(indexes.threads);
    let built = indexes.build_all(engine.store(), &workers);
    engine.release_workers(&workers);
    built
}

/// Starts the rebuild of the secondary indexes after a restart, as the
/// strategy says; synchronous recovery finishes it here.
pub fn start_recovery(engine: &Arc<Engine>, in_background: bool) -> Result<()> {
    let indexes = engine.indexes();
    if indexes.all_built(engine.store()) {
        indexes.note_all_ready();
        return Ok(());
    }
    match indexes.strategy() {
        IndexRecovery::Synchronous => build_all(engine),
        IndexRecovery::OnDemand => Ok(()),
        IndexRecovery::Adaptive => {
            if in_background {
                spawn_adaptive_recovery(engine);
            }
            Ok(())
        }
    }
}

fn spawn_adaptive_recovery(engine: &Arc<Engine>) {
    let this = engine.clone();
    let first = engine.indexes().claim_first_build(engine.store());
    let handle = std::thread::Builder::new()
        .name("rebound-index-recovery".into())
        .spawn(move || {
            let engine = this;
            let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                let indexes = engine.indexes();
                let workers = engine.reserve_workers(indexes.threads);
                let ids: Vec<usize> = workers.iter().flatten().copied().collect();
                let built = match ids.is_empty() {
                    true => Ok(()),
                    false => indexes.run_adaptive(engine.store(), &ids, first),
                };
                engine.release_workers(&workers);
                built
            }));
            match outcome {
                Ok(Ok(())) => {}
                Ok(Err(e)) => engine.note_index_failure(&e),
                Err(panic) => engine.poison("rebound-index-recovery", panic.as_ref()),
            }
        })
        .expect("spawn the index recovery thread");
    engine.set_index_recovery_thread(handle);
}

/// Maintenance of secondary indexes: stale entries, and (in the
/// background thread only) the workload statistics. Those are written at
/// wall-clock intervals, so a caller-driven round (crash testing) leaves
/// them alone to stay replayable.
pub fn maintain(engine: &Engine, collector: &Mutex<Collector>, background: bool) {
    {
        // GC must not free blocks whose chains the vacuum reads.
        let _gc = collector.lock();
        engine.store().vacuum_indexes();
    }
    if background {
        engine.indexes().persist_usage(engine.store(), false);
    }
}
